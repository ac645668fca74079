//! The one retry loop, for model and tool calls alike: a call is tried
//! ([`Calls::retrying`]) until a try is over or its failure is not to be
//! tried again, as its [`RetryPolicy`] and the failure say, within the
//! retry budget (the fleet's where there is one).
//!
//! Its shape is tower's `retry::Policy`: a policy value asked after each
//! failure whether, and after what wait, to try again. The wait is on the
//! runner's clock (a replay's virtual one) and its jitter is drawn from the
//! run's seed, so a replay retries as the run it replays did.

use super::Calls;
use crate::provider::{ErrorKind, ProviderError};
use crate::resilience::retry::backoff;
use crate::runner::registry::Entry;
use crate::telemetry::events::StepKind;
use std::time::Duration;
use tokio::time::Instant;

/// What the retry decision knows of a call before it is made.
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
}

/// A failed try, as the retry decision weighs it.
pub(super) struct Failure {
    /// How it failed.
    pub error: ProviderError,
    /// When.
    pub end: Instant,
    /// Whether its target still admits calls.
    pub admits: bool,
    /// Whether another target could take the call.
    pub elsewhere: bool,
}

/// A call that can be tried again: what the retry loop drives, as tower's
/// `Retry` drives a `Service`.
pub(super) trait Tries {
    /// What the call comes to.
    type Output;

    /// Makes try `n` (from 0).
    fn once(&mut self, n: u32) -> impl std::future::Future<Output = Try<Self::Output>> + Send;
}

/// What one try of a call came to.
pub(super) enum Try<T> {
    /// The call is over, with this.
    Over(T),
    /// The try failed: tried again where the policy allows, else over
    /// with the second. (Boxed: a failure is the rare way a try ends, and
    /// every try's answer moves through the loop.)
    Failed(Box<Failure>, T),
}

impl Calls<'_> {
    /// Tries `call` until a try is over, or a failed one is not to be
    /// tried again under `policy`.
    pub(super) async fn retrying<T: Tries>(&self, policy: RetryPolicy<'_>, call: &mut T) -> T::Output {
        let mut made = 0u32;
        loop {
            match call.once(made).await {
                Try::Over(over) => return over,
                Try::Failed(failure, over) => {
                    if !self.retry(&policy, made, &failure).await {
                        return over;
                    }
                    made += 1;
                }
            }
        }
    }

    /// After try `made` of a call under `policy` ended in `failure`:
    /// whether to try again, the backoff waited out. A retry is counted on
    /// each target and announced on the last. The backoff is boxed, so its
    /// future does not enlarge every call's.
    async fn retry(&self, policy: &RetryPolicy<'_>, made: u32, failure: &Failure) -> bool {
        let Some(wait) = self.retry_wait(policy, failure, made) else {
            return false;
        };
        if !self.take_retry(failure.end).await {
            return false;
        }
        for t in policy.targets {
            t.stats.retries.inc();
        }
        if let Some(t) = policy.targets.last() {
            self.announce_step(policy.request, t.target.clone(), StepKind::retry(wait, &failure.error));
        }
        Box::pin(tokio::time::sleep(wait)).await;
        true
    }

    /// Takes one retry (or hedge) from the retry budget: the fleet's where
    /// the runner is in one that can say, else its own. The runner's own
    /// budget counts what the fleet granted too, so when the fleet's store
    /// goes away it goes on from what this instance has taken.
    pub(super) async fn take_retry(&self, now: Instant) -> bool {
        let Some(fleet) = self.shared.get() else {
            return self.retry_budget.try_withdraw(now);
        };
        match fleet.retry().await {
            Some(true) => {
                self.retry_budget.count_retry(now);
                true
            }
            Some(false) => false,
            None => {
                let ok = self.retry_budget.try_withdraw(now);
                if ok {
                    fleet.retried_alone();
                }
                ok
            }
        }
    }

    /// How long to wait before retrying after try `attempt` ended in
    /// `failure`, or None if it is not retried: the policy allows retries,
    /// the error is retryable (a timeout only where nothing else could take
    /// the call, unless `[retry] timeouts`), retries left, a Retry-After
    /// within the backoff cap, the target still admitting calls and the
    /// wait ending before the deadline. The retry budget is asked after.
    #[cold]
    fn retry_wait(&self, policy: &RetryPolicy<'_>, failure: &Failure, attempt: u32) -> Option<Duration> {
        let cfg = &self.cfg.retry;
        let e = &failure.error;
        let timeout = e.kind == ErrorKind::Timeout;
        let wait = backoff(cfg, self.seed, policy.key, attempt, e.retry_after);
        let retry = policy.retries
            && e.kind.retryable()
            && !(timeout && failure.elsewhere && !cfg.timeouts)
            && policy.deadline.is_none_or(|d| failure.end + wait < d)
            && attempt < cfg.max_retries
            && e.retry_after.is_none_or(|ra| ra <= Duration::from_millis(cfg.cap_ms))
            && failure.admits;
        retry.then_some(wait)
    }
}
