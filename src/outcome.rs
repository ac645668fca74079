//! What comes out of the runner: exactly one outcome per request, with its
//! degradation metadata.

use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// How degraded a result is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// The full answer from the preferred path.
    None,
    /// An answer with components missing.
    Partial,
    /// An answer from a fallback model or the cache.
    Fallback,
    /// Queued; it will be re-driven when the dependency recovers.
    Deferred,
    /// No answer; the user gets a clear message.
    Failed,
}

impl Level {
    /// All levels, in summary order.
    pub const ALL: [Level; 5] = [
        Level::None,
        Level::Partial,
        Level::Fallback,
        Level::Deferred,
        Level::Failed,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "none",
            Level::Partial => "partial",
            Level::Fallback => "fallback",
            Level::Deferred => "deferred",
            Level::Failed => "failed",
        }
    }

    /// Index into [`Level::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The outcome of one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Request id.
    pub request: u64,
    /// User.
    pub user: CompactString,
    /// Degradation level.
    pub level: Level,
    /// The path actually walked, e.g. `["gpt-4o ✗503", "claude-haiku ✓"]`.
    pub chain: Vec<String>,
    /// Estimated quality (0..=1).
    pub quality: f64,
    /// Tokens consumed by all attempts.
    pub tokens: u64,
    /// Cost of all attempts (USD).
    pub cost_usd: f64,
    /// Components that were unavailable.
    pub missing: Vec<String>,
    /// What to tell the user when degraded.
    pub user_message: Option<String>,
    /// The answer text, when there is one.
    #[serde(skip)]
    pub answer: Option<Arc<str>>,
    /// Age of a cached answer (ms), when stale.
    pub stale_ms: Option<u64>,
    /// Provider and tool attempts made.
    pub attempts: u32,
    /// Time from arrival to outcome (ms).
    pub latency_ms: u64,
    /// Its name outside (`x-fusebox-request-id`), for a gateway's request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<CompactString>,
}
