//! The immutable snapshot views read (never the runner's internals).

use super::events::Event;
use super::stats::StatsView;
use crate::provider::fault::FaultSpec;
use crate::resilience::breaker::BreakerView;
use crate::resilience::budget::{GlobalView, UserView};
use crate::resilience::limiter::LimiterView;
use crate::target::Target;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One breaker row.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BreakerRow {
    /// What the breaker guards.
    pub target: Target,
    /// Live breaker figures.
    pub breaker: BreakerView,
    /// Counters.
    pub stats: StatsView,
    /// The breaker's settings.
    pub config: std::sync::Arc<crate::config::BreakerConfig>,
    /// A tool's pool (its bulkhead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<crate::resilience::bulkhead::PoolView>,
    /// The instance the row is from, where a console watches several
    /// (None: this process, or the instances combined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// One limiter row.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LimiterRow {
    /// Provider.
    pub provider: String,
    /// Live figures.
    pub limiter: LimiterView,
    /// The instance the row is from (as for breakers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// One user's budgets row.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct UserRow {
    /// The user's figures.
    #[serde(flatten)]
    pub view: UserView,
    /// The instance the row is from (as for breakers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

/// How a watched instance is doing, as an attached console sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    /// Not reached yet.
    Connecting,
    /// Its stream is flowing.
    Live,
    /// Lost this long ago (ms); the next try is in `retry_ms`.
    Stale {
        /// Since the last word from it.
        for_ms: u64,
        /// Until the next connection attempt.
        retry_ms: u64,
    },
}

/// One instance an attached console watches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstanceView {
    /// Its name on screen (host:port).
    pub name: String,
    /// How it is doing.
    pub health: Health,
    /// Why it is not live, in words (the last error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One hop of a route's chain and whether it is available now.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ChainHop {
    /// Model.
    pub model: String,
    /// Provider.
    pub provider: String,
    /// Both breakers admit calls.
    pub available: bool,
}

/// Everything a view shows, at one instant.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    /// Milliseconds since the runner started (virtual in replay/demo).
    pub t_ms: u64,
    /// Wall time (ms since the Unix epoch).
    pub wall_ms: u64,
    /// Requests so far.
    pub requests: u64,
    /// Outcomes by level (none, partial, fallback, deferred, failed).
    pub by_level: [u64; 5],
    /// Tokens consumed.
    pub tokens: u64,
    /// Cost (USD).
    pub cost_usd: f64,
    /// Breakers.
    pub breakers: Vec<BreakerRow>,
    /// Limiters.
    pub limiters: Vec<LimiterRow>,
    /// Global budget.
    pub global: GlobalView,
    /// Users under the most budget pressure.
    pub top_users: Vec<UserRow>,
    /// Users tracked.
    pub tracked_users: usize,
    /// Routes and their chains.
    pub routes: BTreeMap<String, Vec<ChainHop>>,
    /// Active faults of the mock providers.
    pub faults: BTreeMap<Target, FaultSpec>,
    /// Drill mode.
    pub drill: bool,
    /// Requests waiting in the defer spool.
    pub deferred_pending: usize,
    /// Trace spans dropped so far (export queue full, collector down).
    #[serde(default)]
    pub spans_dropped: u64,
    /// Upstream calls fusebox refused for want of a file descriptor (its
    /// own limit, not a provider's), so far.
    #[serde(default)]
    pub descriptor_refusals: u64,
    /// Recent notable events.
    pub events: Vec<Event>,
    /// Where shared state lives (in-process or Redis) and its health.
    pub store: super::store::StoreView,
    /// The instances an attached console combines (empty in-process).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<InstanceView>,
}
