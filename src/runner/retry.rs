//! The one retry decision, for model and tool calls alike.

use super::Runner;
use crate::provider::ProviderError;
use crate::resilience::retry::backoff;
use std::time::Duration;
use tokio::time::Instant;

impl Runner {
    /// How long to wait before retrying call `key` after attempt `attempt`
    /// failed with `e`, or None if it is not retried: the error must be
    /// retryable (a timeout only where nothing `elsewhere` could take the
    /// call, unless `[retry] timeouts`), retries left, a Retry-After within
    /// the backoff cap, the target still admitting calls (`admits`), the
    /// wait ending before `deadline`, and room in the retry budget (taken
    /// only when all else holds).
    #[expect(clippy::too_many_arguments, reason = "each is one condition of the one decision")]
    pub(super) fn retry_wait(
        &self,
        e: &ProviderError,
        attempt: u32,
        admits: bool,
        elsewhere: bool,
        deadline: Option<Instant>,
        key: u64,
        now: Instant,
    ) -> Option<Duration> {
        let cfg = &self.cfg.retry;
        let timeout = e.kind == crate::provider::ErrorKind::Timeout;
        let wait = backoff(cfg, self.seed, key, attempt, e.retry_after);
        let retry = e.kind.retryable()
            && !(timeout && elsewhere && !cfg.timeouts)
            && deadline.is_none_or(|d| now + wait < d)
            && attempt < cfg.max_retries
            && e.retry_after.is_none_or(|ra| ra <= Duration::from_millis(cfg.cap_ms))
            && admits
            && self.retry_budget.try_withdraw(now);
        retry.then_some(wait)
    }
}
