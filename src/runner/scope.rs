//! One request's envelope, the same for every way a request comes in (the
//! agent loop, a chat call, an embeddings call, a tool call): begun once,
//! it is counted, announced and pays into the retry budget; ended once, its
//! outcome is counted and announced. Dropped before it ended (the client
//! went away, the gateway shut down), it ends failed, so every request has
//! exactly one outcome.

use super::calls::Tally;
use super::ending::{outcome, Ended};
use super::Runner;
use crate::outcome::Outcome;
use crate::telemetry::events::{Arrival, EventKind};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// What the user is told of a request its client left before the answer.
pub(super) const LEFT: &str = "The client went away before the answer.";

/// What the user is told of a request the gateway's drain ended.
pub(super) const DRAINED: &str = "The gateway shut down before the answer.";

/// A request begun and not yet ended.
pub(super) struct Scope<'a> {
    runner: &'a Runner,
    request: u64,
    user: &'a str,
    start: Instant,
    open: bool,
}

impl<'a> Scope<'a> {
    /// Begins request `request` of `user` on `runner`: counted, announced
    /// (`arrival` is made only when someone listens), a deposit into the
    /// retry budget.
    #[inline]
    pub fn begin(runner: &'a Runner, request: u64, user: &'a str, arrival: impl FnOnce() -> Arrival) -> Self {
        let start = runner.clock.now();
        runner.totals.requests.fetch_add(1, Ordering::Relaxed);
        if runner.events.has_subscribers() {
            runner.events.emit(EventKind::Request(Box::new(arrival())));
        }
        runner.retry_budget.deposit(start);
        Scope {
            runner,
            request,
            user,
            start,
            open: true,
        }
    }

    /// Counts the request's one outcome `o` in the totals and on the
    /// targets `tally` shows it needed, and announces it.
    fn count(&self, o: &Outcome, tally: &Tally) {
        let r = self.runner;
        r.totals.by_level[o.level.index()].fetch_add(1, Ordering::Relaxed);
        r.catalog.count_needs(tally, o.level);
        r.totals.tokens.fetch_add(o.tokens, Ordering::Relaxed);
        r.totals
            .cost_micro_usd
            .fetch_add((o.cost_usd * 1e6).round() as u64, Ordering::Relaxed);
        if r.events.has_subscribers() {
            r.events.emit(EventKind::Outcome(Box::new(o.clone())));
        }
    }
}

impl Scope<'_> {
    /// When it began.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// How long it has run.
    pub fn took(&self) -> Duration {
        self.runner.clock.now().saturating_duration_since(self.start)
    }

    /// Its outcome: how it `ended`, what `tally` spent, its time so far.
    pub fn outcome(&self, ended: Ended, tally: &Tally) -> Outcome {
        outcome(self.request, self.user, ended, tally, self.took())
    }

    /// Ends it in `outcome`, counted and announced once.
    #[inline]
    pub fn end(mut self, outcome: &Outcome, tally: &Tally) {
        self.open = false;
        self.count(outcome, tally);
    }
}

impl Scope<'_> {
    /// Ends it failed, dropped before it ended (its client went away, or
    /// the gateway's drain ran out): its outcome names the path `tally`
    /// shows it walked, the model it was calling then cut.
    fn abandon(&mut self, tally: &mut Tally) {
        self.open = false;
        let r = self.runner;
        r.totals.abandoned.fetch_add(1, Ordering::Relaxed);
        let (kind, why) = if r.totals.closing.load(Ordering::Relaxed) {
            (
                crate::provider::ErrorKind::Drained,
                "The gateway shut down before the answer.",
            )
        } else {
            (
                crate::provider::ErrorKind::Left,
                "The client went away before the answer.",
            )
        };
        if let Some(mi) = tally
            .trying
            .filter(|&mi| tally.hops.last().is_none_or(|h| h.model != mi))
        {
            tally.hops.push(super::calls::Tried {
                model: mi,
                result: super::calls::HopResult::Failed(kind, None),
                tries: 1,
            });
        }
        let ended = Ended {
            chain: tally.hops.iter().map(|h| r.catalog.hop_of(h)).collect(),
            ..Ended::failed(Some(why.into()))
        };
        let o = outcome(self.request, self.user, ended, tally, self.took());
        self.count(&o, tally);
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        if self.open {
            self.abandon(&mut Tally::default());
        }
    }
}

/// A request's scope with the tally of what it walked, for the kinds of
/// request a client can leave mid-way (a gateway's chat, embeddings and
/// tool calls): dropped before it ended, its outcome names that path.
pub(super) struct Tallied<'a> {
    scope: Scope<'a>,
    /// What the request has walked and spent.
    pub tally: Tally,
}

impl<'a> Tallied<'a> {
    /// `scope`, with an empty tally.
    pub fn new(scope: Scope<'a>) -> Self {
        Self {
            scope,
            tally: Tally::default(),
        }
    }

    /// Its outcome: how it `ended`, what its tally spent, its time so far.
    pub fn outcome(&self, ended: Ended) -> Outcome {
        self.scope.outcome(ended, &self.tally)
    }

    /// Ends it in `outcome`, counted and announced once.
    pub fn end(mut self, outcome: &Outcome) {
        self.scope.open = false;
        self.scope.count(outcome, &self.tally);
    }
}

impl Drop for Tallied<'_> {
    fn drop(&mut self) {
        if self.scope.open {
            self.scope.abandon(&mut self.tally);
        }
    }
}
