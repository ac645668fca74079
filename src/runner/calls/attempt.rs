//! One guarded attempt, the same for model, embeddings and tool calls: an
//! attempt is counted as it starts on each of its targets and in the
//! request's tally; its call is made under its breakers' probes, each told
//! the moment the call outlasts its slow-call bound; and, whatever ends
//! it, its latency is recorded, its breakers are told how it went, its
//! result is counted and its record announced. The kinds of call differ
//! only in their guard (admission for models and embeddings,
//! `admission.rs`; breaker and bulkhead for a tool, `tool.rs`) and in the
//! call they make (`model.rs`, `embed.rs`, `tool.rs`).

use super::{Calls, Tally};
use crate::blame::Ending;
use crate::provider::{ErrorKind, ProviderError};
use crate::resilience::breaker::{watched, Breaker, CallRecord, Permit};
use crate::runner::registry::Entry;
use crate::telemetry::events::{self, EventBus};
use std::time::Duration;
use tokio::time::Instant;

/// One attempt, admitted and under way, on `N` targets: a model's
/// provider and the model, or a tool.
pub(super) struct Attempt<'r, const N: usize> {
    targets: &'r [&'r Entry; N],
    start: Instant,
    /// Where its record is announced.
    events: &'r EventBus,
}

/// When an attempt ended, how long it took from its admission, and, where
/// its pace is judged by less than that (a stream's time to first token,
/// a tool's time without the person it waited on), by what.
#[derive(Clone, Copy)]
pub(super) struct Timing {
    pub end: Instant,
    pub took: Duration,
    pub judged: Option<Duration>,
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

impl<T> From<&Result<T, ProviderError>> for Verdict {
    /// A call that answered or failed, with no more to judge.
    fn from(r: &Result<T, ProviderError>) -> Self {
        r.as_ref().map_or_else(|e| Verdict::Failed(e.kind), |_| Verdict::Ok)
    }
}

impl<'r> Calls<'r> {
    /// Starts an attempt on `targets`, admitted at `start`: counted on each
    /// and in the request's tally.
    #[inline]
    pub(super) fn attempt<'a, const N: usize>(
        &self,
        targets: &'a [&'a Entry; N],
        start: Instant,
        tally: &mut Tally,
    ) -> Attempt<'a, N>
    where
        'r: 'a,
    {
        for t in targets {
            t.stats.attempts.inc();
        }
        tally.attempts += 1;
        Attempt {
            targets,
            start,
            events: self.events,
        }
    }
}

impl<const N: usize> Attempt<'_, N> {
    /// When it was admitted.
    pub(super) fn start(&self) -> Instant {
        self.start
    }

    /// Makes its call, `call`, under the breakers' `probes`: each told the
    /// moment the call outlasts its slow-call bound, unless the bound is
    /// past `within` (the call's own timeout, which the call applies) or
    /// `judged` says the call's pace is no longer its length ([`watched`]).
    /// The call's own future, not one around it: a model call's is large,
    /// and each layer would move it once more.
    #[inline(always)]
    pub(super) fn make<'p, 'b, 'c, F: std::future::Future, J: Fn() -> bool>(
        &self,
        probes: &'p mut [(&'b Breaker, &'c mut Permit)],
        within: Duration,
        judged: J,
        call: F,
    ) -> impl std::future::Future<Output = F::Output> + use<'p, 'b, 'c, F, J, N> {
        watched(probes, self.start, within, judged, call)
    }

    /// When it ended, if at `end`, judged by `judged` (see [`Timing`]).
    pub(super) fn timing(&self, end: Instant, judged: Option<Duration>) -> Timing {
        Timing {
            end,
            took: end.saturating_duration_since(self.start),
            judged,
        }
    }

    /// Ends it as `timing` says: on each target its latency recorded, its
    /// breaker told with its probe (`probes`, in target order) and `call`,
    /// and its result counted as `verdict`; then its record (made with its
    /// latency) announced. The breakers judge its pace by `timing.judged`
    /// where that is given, else by its whole latency. The trips it caused,
    /// per target, and the latency judged.
    #[inline]
    pub(super) fn end(
        self,
        probes: [Permit; N],
        verdict: Verdict,
        mut call: CallRecord,
        timing: Timing,
        record: impl FnOnce(Duration) -> events::Attempt,
    ) -> ([Option<String>; N], Duration) {
        let Timing { end, took, judged } = timing;
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
        if self.events.has_subscribers() {
            self.events.emit(events::EventKind::Attempt(Box::new(record(took))));
        }
        (trips, call.latency)
    }
}
