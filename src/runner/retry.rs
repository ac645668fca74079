//! The one retry decision, for model and tool calls alike.

use super::Runner;
use crate::provider::ProviderError;
use crate::resilience::retry::backoff;
use std::time::Duration;
use tokio::time::Instant;

impl Runner {
    /// How long to wait before retrying call `key` after attempt `attempt`
    /// failed with `e`, or None if it is not retried: the error must be
    /// retryable, retries left, a Retry-After within the backoff cap, the
    /// target still admitting calls (`admits`), and room in the retry
    /// budget (taken only when all else holds).
    pub(super) fn retry_wait(
        &self,
        e: &ProviderError,
        attempt: u32,
        admits: bool,
        key: u64,
        now: Instant,
    ) -> Option<Duration> {
        let cfg = &self.cfg.retry;
        let retry = e.kind.retryable()
            && attempt < cfg.max_retries
            && e.retry_after.is_none_or(|ra| ra <= Duration::from_millis(cfg.cap_ms))
            && admits
            && self.retry_budget.try_withdraw(now);
        retry.then(|| backoff(cfg, self.seed, key, attempt, e.retry_after))
    }
}
