//! The immutable snapshot views read (never the runner's internals), and the
//! publisher that produces one at most ~30 times a second.

use crate::provider::fault::FaultSpec;
use crate::resilience::breaker::BreakerView;
use crate::resilience::budget::{GlobalView, UserView};
use crate::resilience::limiter::LimiterView;
use crate::runner::registry::StatsView;
use crate::runner::Runner;
use crate::target::Target;
use crate::telemetry::events::Event;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// One breaker row.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BreakerRow {
    /// What the breaker guards.
    pub target: Target,
    /// Live breaker figures.
    pub breaker: BreakerView,
    /// Counters.
    pub stats: StatsView,
}

/// One limiter row.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LimiterRow {
    /// Provider.
    pub provider: String,
    /// Live figures.
    pub limiter: LimiterView,
}

/// One hop of a route's chain and whether it is available now.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ChainHop {
    /// Model.
    pub model: String,
    /// Provider.
    pub provider: String,
    /// Both breakers admit calls.
    pub available: bool,
}

/// Everything a view shows, at one instant.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
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
    pub top_users: Vec<UserView>,
    /// Users tracked.
    pub tracked_users: usize,
    /// Routes and their chains.
    pub routes: BTreeMap<String, Vec<ChainHop>>,
    /// Active faults of the mock fleet.
    pub faults: BTreeMap<Target, FaultSpec>,
    /// Drill mode.
    pub drill: bool,
    /// Requests waiting in the defer spool.
    pub deferred_pending: usize,
    /// Recent notable events.
    pub events: Vec<Event>,
    /// Where shared state lives (in-process or Redis) and its health.
    pub store: crate::fleet::status::StoreView,
}

impl Runner {
    /// Builds a snapshot of the runner's state now.
    pub fn snapshot(&self, users: usize, events: usize) -> Snapshot {
        let now = self.clock.now();
        let ms = self.clock.ms_at(now);
        let breakers = self
            .registry
            .iter()
            .map(|t| BreakerRow {
                target: t.target.clone(),
                breaker: t.breaker.view(now),
                stats: t.stats.view(),
            })
            .collect();
        let limiters = self
            .providers
            .iter()
            .map(|p| LimiterRow {
                provider: p.name.clone(),
                limiter: p.limiter.view(now),
            })
            .collect();
        let routes = self
            .routes
            .values()
            .map(|r| {
                let hops = r
                    .chain
                    .iter()
                    .map(|&m| {
                        let m = &self.models[m];
                        let p = &self.providers[m.provider];
                        ChainHop {
                            model: m.name.to_string(),
                            provider: p.name.clone(),
                            available: self.registry.get(p.target).breaker.would_admit(now)
                                && self.registry.get(m.target).breaker.would_admit(now),
                        }
                    })
                    .collect();
                (r.name.clone(), hops)
            })
            .collect();
        Snapshot {
            t_ms: ms,
            wall_ms: self.clock.wall_ms(),
            requests: self.totals.requests.load(Ordering::Relaxed),
            by_level: self.by_level(),
            tokens: self.totals.tokens.load(Ordering::Relaxed),
            cost_usd: self.totals.cost_micro_usd.load(Ordering::Relaxed) as f64 / 1e6,
            breakers,
            limiters,
            global: self.budgets.global_view(ms),
            top_users: self.budgets.top_users(users, ms),
            tracked_users: self.budgets.tracked_users(),
            routes,
            faults: self.faults.all(),
            drill: self.drill(),
            deferred_pending: self.spool.as_ref().map_or(0, |s| s.len()),
            events: self.events.recent(events),
            store: self.store.view(),
        }
    }

    /// Publishes a snapshot (with the top `users` and the last `events`)
    /// every `every` (≥ 33 ms) and keeps breakers and idle-state eviction
    /// moving; ends when every receiver is gone.
    pub fn spawn_publisher(
        self: &Arc<Self>,
        every: Duration,
        users: usize,
        events: usize,
    ) -> watch::Receiver<Arc<Snapshot>> {
        let every = every.max(Duration::from_millis(33));
        let (tx, rx) = watch::channel(Arc::new(self.snapshot(users, events)));
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                me.maintain();
                if tx.send(Arc::new(me.snapshot(users, events))).is_err() {
                    break;
                }
            }
        });
        rx
    }
}
