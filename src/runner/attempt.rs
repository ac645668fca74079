//! One guarded attempt and the one retry decision, the same for model,
//! embeddings and tool calls: an attempt is counted as it starts on each
//! of its targets and in the request's tally, and, whatever ends it, its
//! latency is recorded, its breakers are told how it went, its result is
//! counted and its record announced. The kinds of call differ only in how
//! they are admitted and made (`admission.rs`, `llm.rs`, `embed.rs`,
//! `tool.rs`).

use super::llm::Tally;
use super::registry::Entry;
use super::Runner;
use crate::blame::Ending;
use crate::provider::{ErrorKind, ProviderError};
use crate::resilience::breaker::{CallRecord, Permit};
use crate::resilience::retry::backoff;
use crate::telemetry::events::{self, StepKind};
use std::time::Duration;
use tokio::time::Instant;

/// One attempt, admitted and under way, on `N` targets: a model's
/// provider and the model, or a tool.
pub(super) struct Attempt<'r, const N: usize> {
    targets: &'r [&'r Entry; N],
    start: Instant,
}

/// How an attempt went, as its targets count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// It answered.
    Ok,
    /// It answered with a tool call that breaks its tool's schema.
    Semantic,
    /// It answered slower than the model's `min_tokens_per_s`.
    Slow,
    /// It failed so.
    Failed(ErrorKind),
    /// fusebox cut it for a reason not its target's (the user's hard
    /// budget, a continuation that did not line up): not a call that went
    /// wrong.
    Cut,
}

impl Runner {
    /// Starts an attempt on `targets`, admitted at `start`: counted on each
    /// and in the request's tally.
    #[inline]
    pub(super) fn attempt<'r, const N: usize>(
        &self,
        targets: &'r [&'r Entry; N],
        start: Instant,
        tally: &mut Tally,
    ) -> Attempt<'r, N> {
        for t in targets {
            t.stats.attempts.inc();
        }
        tally.attempts += 1;
        Attempt { targets, start }
    }

    /// Emits an attempt record when someone (the recorder) listens.
    fn announce_attempt(&self, make: impl FnOnce() -> events::Attempt) {
        if self.events.has_subscribers() {
            self.events.emit(events::EventKind::Attempt(Box::new(make())));
        }
    }
}

impl<const N: usize> Attempt<'_, N> {
    /// When it was admitted.
    pub(super) fn start(&self) -> Instant {
        self.start
    }

    /// Ends it at `end`: on each target its latency recorded, its
    /// breaker told with its probe (`probes`, in target order) and
    /// `call`, and its result counted as `verdict`; then its record (made
    /// with its latency) announced. The
    /// breakers judge its pace by `judged` where that is given (a
    /// stream's time to first token: how long the rest runs is the
    /// caller's asking), else by its whole latency. The trips it caused,
    /// per target, and the latency judged.
    #[inline]
    pub(super) fn end(
        self,
        runner: &Runner,
        probes: [Permit; N],
        verdict: Verdict,
        mut call: CallRecord,
        (end, judged): (Instant, Option<Duration>),
        record: impl FnOnce(Duration) -> events::Attempt,
    ) -> ([Option<String>; N], Duration) {
        let took = end.saturating_duration_since(self.start);
        call.latency = judged.unwrap_or(took);
        let ms = took.as_millis() as u64;
        let mut i = 0;
        let trips = probes.map(|probe| {
            let t = self.targets[i];
            i += 1;
            let s = &t.stats;
            s.latency.record(ms);
            match verdict {
                Verdict::Ok => s.ok.inc(),
                Verdict::Semantic => {
                    s.failed.inc();
                    s.semantic.inc();
                }
                Verdict::Slow => s.failed.inc(),
                Verdict::Failed(kind) => {
                    if Ending::of(kind).feeds().health {
                        s.failed.inc();
                    } else {
                        s.client_errors.inc();
                    }
                    if kind == ErrorKind::Timeout {
                        s.timeouts.inc();
                    }
                }
                Verdict::Cut => {}
            }
            t.breaker.record(probe, &call, end)
        });
        runner.announce_attempt(|| record(took));
        (trips, call.latency)
    }
}

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
}

impl Runner {
    /// After try `*made` of a call under `policy` failed with `e` at
    /// `end`: whether to try again, the backoff waited out and `*made`
    /// counted up (the target still admitting calls: `admits`; another
    /// could take the call: `elsewhere`). A retry is counted on each
    /// target and announced on the last. The backoff is boxed, so its
    /// future does not enlarge every call's.
    pub(super) async fn retry(
        &self,
        policy: &RetryPolicy<'_>,
        made: &mut u32,
        e: &ProviderError,
        admits: bool,
        elsewhere: bool,
        end: Instant,
    ) -> bool {
        let Some(wait) = self.retry_wait(policy, e, *made, admits, elsewhere, end) else {
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

impl Runner {
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
    /// error is retryable (a timeout only where nothing `elsewhere` could
    /// take the call, unless `[retry] timeouts`), retries left, a
    /// Retry-After within the backoff cap, the target still admitting
    /// calls (`admits`) and the wait ending before the deadline. The
    /// retry budget is asked after.
    #[cold]
    fn retry_wait(
        &self,
        policy: &RetryPolicy<'_>,
        e: &ProviderError,
        attempt: u32,
        admits: bool,
        elsewhere: bool,
        now: Instant,
    ) -> Option<Duration> {
        let cfg = &self.cfg.retry;
        let timeout = e.kind == ErrorKind::Timeout;
        let wait = backoff(cfg, self.seed, policy.key, attempt, e.retry_after);
        let retry = policy.retries
            && e.kind.retryable()
            && !(timeout && elsewhere && !cfg.timeouts)
            && policy.deadline.is_none_or(|d| now + wait < d)
            && attempt < cfg.max_retries
            && e.retry_after.is_none_or(|ra| ra <= Duration::from_millis(cfg.cap_ms))
            && admits;
        retry.then_some(wait)
    }
}
