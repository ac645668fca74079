//! Counters of one target (calls, outcomes, latency) and the copy views read.

use super::counter::Counter;
use super::histogram::{Histogram, HistogramView};
use serde::{Deserialize, Serialize};

/// Counters of one target, by outcome.
#[derive(Default)]
pub struct TargetStats {
    /// Calls made (including retries).
    pub attempts: Counter,
    /// Calls that succeeded.
    pub ok: Counter,
    /// Calls that failed.
    pub failed: Counter,
    /// Calls not made because the breaker was open.
    pub rejected_open: Counter,
    /// Calls not made for lack of rate/pool capacity.
    pub rejected_rate: Counter,
    /// Retries made.
    pub retries: Counter,
    /// Calls hedged: slow to answer, raced by a second attempt elsewhere.
    pub hedged: Counter,
    /// Failures that were timeouts.
    pub timeouts: Counter,
    /// Semantic failures (hallucinated tools, bad arguments).
    pub semantic: Counter,
    /// Client errors (4xx but 429, never retried): the caller's fault,
    /// neither successes nor failures of the target.
    pub client_errors: Counter,
    /// Requests that needed the target: called it, or skipped it for its
    /// breaker, rate limit or latency (once per request).
    pub needed: Counter,
    /// Of those, the requests that ended degraded (partial, fallback,
    /// deferred or failed) with this target among what let them down.
    pub degraded: Counter,
    /// Stream events that could not be read, skipped (never passed on).
    pub malformed: Counter,
    /// Latencies of finished calls.
    pub latency: Histogram,
    /// Streamed calls' time to their first content.
    pub ttft: Histogram,
}

/// A copy of the counters for summaries and views.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsView {
    /// Calls made.
    pub attempts: u64,
    /// Successes.
    pub ok: u64,
    /// Failures.
    pub failed: u64,
    /// Short-circuited by an open breaker.
    pub rejected_open: u64,
    /// Rejected for capacity.
    pub rejected_rate: u64,
    /// Retries.
    pub retries: u64,
    /// Calls hedged.
    #[serde(default)]
    pub hedged: u64,
    /// Timeouts among the failures.
    pub timeouts: u64,
    /// Semantic failures among the failures.
    pub semantic: u64,
    /// Client errors (4xx but 429): neither successes nor failures.
    pub client_errors: u64,
    /// Requests that needed the target.
    #[serde(default)]
    pub needed: u64,
    /// Requests degraded because of the target.
    #[serde(default)]
    pub degraded: u64,
    /// Stream events that could not be read, skipped.
    #[serde(default)]
    pub malformed: u64,
    /// Mean latency (ms).
    pub mean_latency_ms: u64,
    /// Latencies of finished calls, by bucket.
    pub latency: HistogramView,
    /// Streamed calls' time to first content, by bucket.
    pub ttft: HistogramView,
}

impl TargetStats {
    /// A copy of the counters.
    pub fn view(&self) -> StatsView {
        let l = |c: &Counter| c.get();
        let done = l(&self.ok) + l(&self.failed) + l(&self.client_errors);
        let latency = self.latency.view();
        StatsView {
            attempts: l(&self.attempts),
            ok: l(&self.ok),
            failed: l(&self.failed),
            rejected_open: l(&self.rejected_open),
            rejected_rate: l(&self.rejected_rate),
            retries: l(&self.retries),
            hedged: l(&self.hedged),
            timeouts: l(&self.timeouts),
            semantic: l(&self.semantic),
            client_errors: l(&self.client_errors),
            needed: l(&self.needed),
            degraded: l(&self.degraded),
            malformed: l(&self.malformed),
            mean_latency_ms: latency.sum_ms.checked_div(done).unwrap_or(0),
            latency,
            ttft: self.ttft.view(),
        }
    }
}
