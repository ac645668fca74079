//! The fault model shared by the mock providers and mock tools (and, later,
//! the HTTP mock server): what a target does wrong, switchable at runtime.

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
}

/// The current fault per target (`provider:openai`, `tool:get_order`).
#[derive(Default)]
pub struct FaultTable {
    map: RwLock<BTreeMap<String, FaultSpec>>,
}

impl FaultTable {
    /// Sets (or, with `Healthy`, clears) a target's fault.
    pub fn set(&self, target: &str, spec: FaultSpec) {
        let mut m = self.map.write();
        if spec.fault == Fault::Healthy {
            m.remove(target);
        } else {
            m.insert(target.to_string(), spec);
        }
    }

    /// The fault for one call, given a uniform draw `u` in 0..1.
    pub fn pick(&self, target: &str, u: f64) -> Fault {
        let m = self.map.read();
        match m.get(target) {
            Some(s) if u < s.rate => s.fault.clone(),
            _ => Fault::Healthy,
        }
    }

    /// The configured fault of a target.
    pub fn get(&self, target: &str) -> Option<FaultSpec> {
        self.map.read().get(target).cloned()
    }

    /// Every active fault.
    pub fn all(&self) -> BTreeMap<String, FaultSpec> {
        self.map.read().clone()
    }
}
