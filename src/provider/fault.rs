//! The fault model shared by the mock providers and mock tools (and, later,
//! the HTTP mock server): what a target does wrong, switchable at runtime.

use crate::target::Target;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a mock target does wrong.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// Behaves normally.
    #[default]
    Healthy,
    /// Answers with an HTTP error (429 carries Retry-After).
    Status {
        /// 429, 500, 502, 503, 529, …
        code: u16,
        /// Retry-After to send (ms).
        #[serde(default)]
        retry_after_ms: Option<u64>,
    },
    /// Adds latency (ms).
    Latency {
        /// Extra milliseconds.
        ms: u64,
    },
    /// Never answers (the caller's timeout fires).
    Timeout,
    /// Refuses the connection.
    ConnectionRefused,
    /// Resets the connection mid-call.
    Reset,
    /// Cuts the stream before its end.
    Truncated,
    /// Streams tokens slowly.
    SlowTokens {
        /// Output tokens per second.
        tokens_per_s: f64,
    },
    /// Calls tools that do not exist.
    Hallucinate,
    /// Calls tools with invalid arguments.
    BadArguments,
    /// Uses many times the normal tokens.
    TokenBlowup {
        /// Multiplier on output tokens.
        factor: u32,
    },
    /// Sends only keep-alives for a while before the first token.
    KeepAliveStall {
        /// Stall (ms).
        ms: u64,
    },
    /// Serves at most this many calls at once and answers 429 to a call
    /// above it (a provider's real capacity; providers only).
    Capacity {
        /// Calls served at once.
        concurrent: u32,
    },
}

impl Fault {
    /// A short label for views.
    pub fn label(&self) -> String {
        match self {
            Fault::Healthy => "healthy".into(),
            Fault::Status {
                code,
                retry_after_ms: Some(ms),
            } => format!("{code} retry-after {}s", ms / 1000),
            Fault::Status { code, .. } => format!("{code}"),
            Fault::Latency { ms } => format!("+{ms}ms latency"),
            Fault::Timeout => "timeout".into(),
            Fault::ConnectionRefused => "connection refused".into(),
            Fault::Reset => "connection reset".into(),
            Fault::Truncated => "truncated stream".into(),
            Fault::SlowTokens { tokens_per_s } => format!("slow tokens {tokens_per_s}/s"),
            Fault::Hallucinate => "hallucinated tools".into(),
            Fault::BadArguments => "bad arguments".into(),
            Fault::TokenBlowup { factor } => format!("token blow-up ×{factor}"),
            Fault::KeepAliveStall { ms } => format!("keep-alive stall {ms}ms"),
            Fault::Capacity { concurrent } => format!("capacity {concurrent} at once"),
        }
    }

    /// The faults an operator cycles through with one key, in order.
    pub fn cycle() -> Vec<Fault> {
        vec![
            Fault::Healthy,
            Fault::Status {
                code: 503,
                retry_after_ms: None,
            },
            Fault::Status {
                code: 429,
                retry_after_ms: Some(10_000),
            },
            Fault::Status {
                code: 529,
                retry_after_ms: None,
            },
            Fault::Latency { ms: 5_000 },
            Fault::Timeout,
            Fault::ConnectionRefused,
            Fault::Truncated,
            Fault::SlowTokens { tokens_per_s: 1.0 },
            Fault::Hallucinate,
            Fault::BadArguments,
            Fault::TokenBlowup { factor: 12 },
            Fault::KeepAliveStall { ms: 20_000 },
        ]
    }
}

/// A fault and the share of calls it hits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// The fault.
    pub fault: Fault,
    /// Share of calls affected (0..=1).
    #[serde(default = "always")]
    pub rate: f64,
}

fn always() -> f64 {
    1.0
}

impl FaultSpec {
    /// The fault on every call.
    pub fn always(fault: Fault) -> Self {
        Self { fault, rate: 1.0 }
    }

    /// Checks the spec against the bounds every way of setting a fault
    /// shares (the commands endpoint, the mock's fault API, scenario files,
    /// replayed `set_fault` lines). `Err` names the field (`rate`,
    /// `fault.ms`, …) and the bound.
    pub fn check(&self) -> Result<(), FaultError> {
        let bad = |field: &'static str, bound: String| Err(FaultError { field, bound });
        if !(self.rate.is_finite() && (0.0..=1.0).contains(&self.rate)) {
            return bad("rate", "must be between 0 and 1".into());
        }
        match self.fault {
            Fault::Status { code, .. } if !(400..=599).contains(&code) => {
                bad("fault.code", "must be an HTTP error status (400..=599)".into())
            }
            Fault::Status {
                retry_after_ms: Some(ms),
                ..
            } if ms > MAX_FAULT_MS => bad("fault.retry_after_ms", format!("must be at most {MAX_FAULT_MS}")),
            Fault::Latency { ms } if ms > MAX_FAULT_MS => bad("fault.ms", format!("must be at most {MAX_FAULT_MS}")),
            Fault::KeepAliveStall { ms } if ms > MAX_FAULT_MS => {
                bad("fault.ms", format!("must be at most {MAX_FAULT_MS}"))
            }
            Fault::SlowTokens { tokens_per_s }
                if !(tokens_per_s.is_finite() && (MIN_TOKENS_PER_S..=1e6).contains(&tokens_per_s)) =>
            {
                bad(
                    "fault.tokens_per_s",
                    format!("must be between {MIN_TOKENS_PER_S} and 1000000"),
                )
            }
            Fault::TokenBlowup { factor } if !(1..=MAX_BLOWUP).contains(&factor) => {
                bad("fault.factor", format!("must be between 1 and {MAX_BLOWUP}"))
            }
            Fault::Capacity { concurrent } if !(1..=MAX_CAPACITY).contains(&concurrent) => {
                bad("fault.concurrent", format!("must be between 1 and {MAX_CAPACITY}"))
            }
            _ => Ok(()),
        }
    }
}

/// The longest a fault may delay or stall a call, and the longest
/// Retry-After it may send: 10 minutes.
pub const MAX_FAULT_MS: u64 = 600_000;
/// The slowest a `slow_tokens` fault may stream.
pub const MIN_TOKENS_PER_S: f64 = 0.1;
/// The largest `token_blowup` factor.
pub const MAX_BLOWUP: u32 = 1_000;
/// The largest `capacity` a fault may give a provider.
pub const MAX_CAPACITY: u32 = 100_000;

/// A fault spec out of bounds: the field and what it must be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {bound}")]
pub struct FaultError {
    /// `rate`, `fault.ms`, …
    pub field: &'static str,
    /// What it must be.
    pub bound: String,
}

/// The current fault per provider or tool.
#[derive(Default)]
pub struct FaultTable {
    map: RwLock<BTreeMap<Target, FaultSpec>>,
}

impl FaultTable {
    /// Sets (or, with `Healthy`, clears) a target's fault.
    pub fn set(&self, target: &Target, spec: FaultSpec) {
        let mut m = self.map.write();
        if spec.fault == Fault::Healthy {
            m.remove(target);
        } else {
            m.insert(target.clone(), spec);
        }
    }

    /// The fault for one call, given a uniform draw `u` in 0..1.
    pub fn pick(&self, target: &Target, u: f64) -> Fault {
        let m = self.map.read();
        match m.get(target) {
            Some(s) if u < s.rate => s.fault.clone(),
            _ => Fault::Healthy,
        }
    }

    /// The configured fault of a target.
    pub fn get(&self, target: &Target) -> Option<FaultSpec> {
        self.map.read().get(target).cloned()
    }

    /// Every active fault.
    pub fn all(&self) -> BTreeMap<Target, FaultSpec> {
        self.map.read().clone()
    }
}
