//! The one retry decision, for model and tool calls alike: after a failed
//! try, whether to try again and after what wait (see [`RetryPolicy`]),
//! within the retry budget (the fleet's where there is one).

use super::Calls;
use crate::provider::{ErrorKind, ProviderError};
use crate::resilience::retry::backoff;
use crate::runner::registry::Entry;
use crate::telemetry::events::StepKind;
use std::time::Duration;
use tokio::time::Instant;

/// What the retry decision needs to know of a call besides its failure
/// (built when a try fails: a call that does not fail pays nothing for it).
pub(super) struct RetryPolicy<'r> {
    /// Whether a failed try may be retried at all (a tool only when it is
    /// idempotent).
    pub retries: bool,
    /// The call's key (each retry's jitter is drawn from it).
    pub key: u64,
    /// When the call must have answered by.
    pub deadline: Option<Instant>,
    /// The request it is made for.
    pub request: u64,
    /// Where a retry is counted (and announced, on the last).
    pub targets: &'r [&'r Entry],
    /// Whether the target still admits calls.
    pub admits: bool,
    /// Whether another target could take the call.
    pub elsewhere: bool,
}

impl Calls<'_> {
    /// After try `*made` of a call under `policy` failed with `e` at
    /// `end`: whether to try again, the backoff waited out and `*made`
    /// counted up. A retry is counted on each
    /// target and announced on the last. The backoff is boxed, so its
    /// future does not enlarge every call's.
    pub(super) async fn retry(
        &self,
        policy: &RetryPolicy<'_>,
        made: &mut u32,
        e: &ProviderError,
        end: Instant,
    ) -> bool {
        let Some(wait) = self.retry_wait(policy, e, *made, end) else {
            return false;
        };
        if !self.take_retry(end).await {
            return false;
        }
        for t in policy.targets {
            t.stats.retries.inc();
        }
        if let Some(t) = policy.targets.last() {
            self.announce_step(policy.request, t.target.clone(), StepKind::retry(wait, e));
        }
        Box::pin(tokio::time::sleep(wait)).await;
        *made += 1;
        true
    }
}

impl Calls<'_> {
    /// Takes one retry (or hedge) from the retry budget: the fleet's where
    /// the runner is in one that can say, else its own.
    pub(super) async fn take_retry(&self, now: Instant) -> bool {
        if let Some(fleet) = self.shared.get() {
            if let Some(ok) = fleet.retry().await {
                return ok;
            }
        }
        self.retry_budget.try_withdraw(now)
    }

    /// How long to wait before retrying after try `attempt` failed with
    /// `e`, or None if it is not retried: the policy allows retries, the
    /// error is retryable (a timeout only where nothing else could take
    /// the call, unless `[retry] timeouts`), retries left, a Retry-After
    /// within the backoff cap, the target still admitting calls and the
    /// wait ending before the deadline. The
    /// retry budget is asked after.
    #[cold]
    fn retry_wait(&self, policy: &RetryPolicy<'_>, e: &ProviderError, attempt: u32, now: Instant) -> Option<Duration> {
        let cfg = &self.cfg.retry;
        let timeout = e.kind == ErrorKind::Timeout;
        let wait = backoff(cfg, self.seed, policy.key, attempt, e.retry_after);
        let retry = policy.retries
            && e.kind.retryable()
            && !(timeout && policy.elsewhere && !cfg.timeouts)
            && policy.deadline.is_none_or(|d| now + wait < d)
            && attempt < cfg.max_retries
            && e.retry_after.is_none_or(|ra| ra <= Duration::from_millis(cfg.cap_ms))
            && policy.admits;
        retry.then_some(wait)
    }
}
