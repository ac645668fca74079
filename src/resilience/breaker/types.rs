//! What a breaker is in, learns, hands out and shows.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Calls flow; failures are counted.
    Closed,
    /// Calls are rejected until the cooldown ends.
    Open,
    /// A limited number of probes test recovery.
    HalfOpen,
    /// Operator: reject everything.
    ForcedOpen,
    /// Operator: allow everything, never trip.
    ForcedClosed,
    /// Operator: breaker off, metrics only.
    Disabled,
}

impl BreakerState {
    /// The snake_case name used in events, logs and summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
            Self::ForcedOpen => "forced_open",
            Self::ForcedClosed => "forced_closed",
            Self::Disabled => "disabled",
        }
    }

    /// How bad it is for an operator: open (forced or not) worst, then
    /// half-open, disabled, forced closed, closed.
    pub fn severity(self) -> u8 {
        match self {
            Self::ForcedOpen => 5,
            Self::Open => 4,
            Self::HalfOpen => 3,
            Self::Disabled => 2,
            Self::ForcedClosed => 1,
            Self::Closed => 0,
        }
    }

    /// Whether calls are (at least partly) allowed through (not open or
    /// forced open).
    pub fn admits(self) -> bool {
        !matches!(self, Self::Open | Self::ForcedOpen)
    }
}

impl std::fmt::Display for BreakerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a call failed, as far as the breaker cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// HTTP 429.
    RateLimited,
    /// 5xx / 529, connection refused or reset.
    Server,
    /// Connect, first-byte, idle or total timeout.
    Timeout,
    /// The stream ended without its terminator.
    Truncated,
    /// Hallucinated tool name, invalid or schema-violating arguments.
    Semantic,
    /// Output token rate under the floor.
    TokenRate,
    /// Not the target's fault (the caller's or fusebox's own, see
    /// `docs/blame.md`): recorded, never counted against the target.
    Blameless,
}

/// What the breaker learns from one finished call.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallRecord {
    /// The failure, if any.
    pub failure: Option<FailureKind>,
    /// Wall latency of the call.
    pub latency: Duration,
    /// Tokens the call consumed (input + output).
    pub tokens: u32,
    /// Output tokens per second, when the call streamed tokens.
    pub tokens_per_s: Option<f64>,
}

/// Admission to make one call; hand it back to [`Breaker::record`](super::Breaker::record).
#[derive(Clone, Copy, Debug)]
#[must_use = "a permit must be recorded or cancelled"]
pub struct Permit {
    pub(super) generation: u64,
    pub(super) probe: bool,
    /// Counted as slow while still in flight ([`Breaker::overdue`]).
    pub(super) overdue: bool,
}

impl Permit {
    /// Whether this call is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe
    }
}

/// Why a call was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Open; the next probe is allowed after this long.
    Open(Duration),
    /// Half-open and every probe slot of the stage is taken.
    ProbesBusy,
    /// Forced open by an operator.
    ForcedOpen,
}

/// Live figures for views.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BreakerView {
    /// State.
    pub state: Option<BreakerState>,
    /// Failure rate over the window (0..=1).
    pub failure_rate: f64,
    /// Slow-call rate over the window (0..=1).
    pub slow_rate: f64,
    /// Calls in the window.
    pub calls_in_window: u32,
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// Time until the next probe is allowed, when open.
    pub next_probe_ms: Option<u64>,
    /// Half-open stage (0-based) and its probe allowance.
    pub half_open_stage: Option<(usize, u32)>,
    /// Probes in flight.
    pub probes_in_flight: u32,
    /// Trips in a row: since the breaker last stayed closed for
    /// `max_cooldown_ms` (or was reset by an operator).
    pub trips: u32,
    /// Most probes ever in flight at once.
    pub peak_probes: u32,
}
