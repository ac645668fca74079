//! Hedged calls: a whole (not streamed to the client), tool-free call on a
//! route with `hedge` set that has not answered by the hedge delay gets a
//! second attempt on the next models of its plan (the same model where the
//! plan has one), within the hedge budget. The first answer is taken and
//! the other attempt cancelled; both are charged (a cancelled attempt
//! settles its reservations with what it was estimated to use) and both
//! count in the request's tokens, waste and cost, as the budgets were
//! charged. A first attempt that fails while the hedge runs waits for the
//! hedge.

use super::{Calls, HopResult, LlmCall, LlmFailure, Tally, Tried};
use crate::config::Hedge;
use crate::provider::LlmResponse;
use crate::telemetry::events::StepKind;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

type Answer = Result<(LlmResponse, usize), LlmFailure>;

/// One leg of a hedged call: whether the other leg outran it (set before
/// it is dropped), and what its call cut in flight was charged (set as
/// that call's reservations settle), for the request's tally.
#[derive(Default)]
pub(in crate::runner) struct Leg {
    outrun: AtomicBool,
    tokens: AtomicU64,
    /// USD, as an `f64`'s bits.
    cost: AtomicU64,
}

impl Leg {
    /// Whether the other leg outran this one.
    pub(super) fn outrun(&self) -> bool {
        self.outrun.load(Ordering::Relaxed)
    }

    /// Notes what this leg's call, cut in flight, was charged.
    pub(super) fn charged(&self, tokens: u32, cost: f64) {
        self.tokens.fetch_add(u64::from(tokens), Ordering::Relaxed);
        let total = f64::from_bits(self.cost.load(Ordering::Relaxed)) + cost;
        self.cost.store(total.to_bits(), Ordering::Relaxed);
    }

    /// Adds what this leg's cut call was charged to `tally`: tokens and
    /// cost, all of them wasted (no answer came of them).
    fn count(&self, tally: &mut Tally) {
        let tokens = self.tokens.load(Ordering::Relaxed);
        tally.tokens += tokens;
        tally.wasted += tokens;
        tally.cost += f64::from_bits(self.cost.load(Ordering::Relaxed));
    }
}

impl Calls<'_> {
    /// How long `call` waits for its answer before it is hedged; None when
    /// it is not hedged (the route does not, it offers tools, or with
    /// `p95` its first model has not answered enough calls yet).
    pub(super) fn hedge_delay(&self, call: &LlmCall<'_>) -> Option<Duration> {
        let ms = match call.route.cfg.hedge {
            Hedge::Off => return None,
            _ if !call.tools.is_empty() => return None,
            Hedge::AfterMs(ms) => ms,
            Hedge::P95 => {
                let first = *self.plan(call).first()?;
                let latency = self
                    .catalog
                    .registry
                    .get(self.catalog.models[first].target)
                    .stats
                    .latency
                    .view();
                if latency.count() < Hedge::MIN_CALLS {
                    return None;
                }
                latency.quantile(0.95)?
            }
        };
        Some(Duration::from_millis(ms))
    }

    /// Runs `call` along its chain and, when it has not answered `after`
    /// its start and the hedge budget has room, races a second attempt
    /// against it.
    pub(super) async fn hedged(&self, call: &LlmCall<'_>, tally: &mut Tally, after: Duration) -> Answer {
        // The hedge's tally and whether it started, boxed: only a call
        // that does not answer at once pays for them; and each leg's
        // [`Leg`] (whether it was outrun, what its cut call was charged).
        let mut hedging: Box<(Tally, AtomicBool)>;
        let legs: [Leg; 2] = Default::default();
        let (answer, first_ended, second_ended) = {
            let first = self.walk(call, tally, None, Some(&legs[0]));
            tokio::pin!(first);
            // An answer at once needs no race (and no timer).
            if let Poll::Ready(answer) = std::future::poll_fn(|cx| Poll::Ready(first.as_mut().poll(cx))).await {
                return answer;
            }
            hedging = Box::default();
            let (other, started) = &mut *hedging;
            let second = self.hedge(call, after, other, started, &legs[1]);
            Box::pin(race(first, second, started, &legs)).await
        };
        let (mut other, started) = *hedging;
        // The attempt still in flight was cancelled by the other's answer;
        // what it was charged counts as the request's.
        for ((ended, t), leg) in [(first_ended, &mut *tally), (second_ended, &mut other)]
            .into_iter()
            .zip(&legs)
        {
            leg.count(t);
            if let (false, Some(model)) = (ended, t.trying) {
                t.hops.push(Tried {
                    model,
                    result: HopResult::Outrun,
                    tries: 1,
                });
            }
        }
        if started.load(Ordering::Relaxed) {
            tally.hops.extend(other.hops);
            tally.tokens += other.tokens;
            tally.wasted += other.wasted;
            tally.cost += other.cost;
            tally.attempts += other.attempts;
            tally.tools.extend(other.tools);
        }
        answer
    }

    /// The hedge of `call`: after `after`, with room in the hedge budget,
    /// the call on the models after its first (None without room).
    async fn hedge(
        &self,
        call: &LlmCall<'_>,
        after: Duration,
        tally: &mut Tally,
        started: &AtomicBool,
        leg: &Leg,
    ) -> Option<Answer> {
        tokio::time::sleep(after).await;
        let plan = self.plan(call);
        let &preferred = plan.first()?;
        // Within the hedge budget and, in a fleet, its retry budget.
        let in_fleet = self.shared.get().is_some();
        let (tenant, _) = self.tenants.key(call.tenant);
        if !self.retry_budget.try_hedge(self.clock.now(), tenant)
            || (in_fleet && !self.take_retry(self.clock.now()).await)
        {
            return None;
        }
        started.store(true, Ordering::Relaxed);
        self.catalog
            .registry
            .get(self.catalog.models[preferred].target)
            .stats
            .hedged
            .inc();
        let after_ms = after.as_millis() as u64;
        self.announce_step(
            call.request_id,
            self.catalog.model_target(preferred),
            StepKind::Hedge { after_ms },
        );
        let next = if plan.len() > 1 { &plan[1..] } else { &plan[..] };
        let second = LlmCall {
            reach: Some(next),
            ..call.clone()
        };
        Some(self.walk(&second, tally, None, Some(leg)).await)
    }
}

/// The first answer of `first` and `second` (which answers None when it
/// never starts); a failure of one while the other runs waits for the
/// other. Returns the answer and whether each ran to its end; the one
/// that did not is marked `outrun` before it is dropped.
async fn race(
    first: Pin<&mut impl Future<Output = Answer>>,
    second: impl Future<Output = Option<Answer>>,
    started: &AtomicBool,
    legs: &[Leg; 2],
) -> (Answer, bool, bool) {
    tokio::pin!(second);
    let (answer, first_ended, second_ended) = run_race(first, second.as_mut(), started).await;
    legs[0].outrun.store(!first_ended, Ordering::Relaxed);
    legs[1].outrun.store(!second_ended, Ordering::Relaxed);
    (answer, first_ended, second_ended)
}

/// [`race`]'s race.
async fn run_race(
    mut first: Pin<&mut impl Future<Output = Answer>>,
    mut second: Pin<&mut impl Future<Output = Option<Answer>>>,
    started: &AtomicBool,
) -> (Answer, bool, bool) {
    let mut failed: Option<Answer> = None;
    let mut second_over = false;
    loop {
        tokio::select! {
            biased;
            a = first.as_mut(), if failed.is_none() => {
                let hedging = started.load(Ordering::Relaxed) && !second_over;
                if a.is_ok() || !hedging {
                    return (a, true, second_over);
                }
                failed = Some(a);
            }
            b = second.as_mut(), if !second_over => {
                second_over = true;
                match (b, failed.take()) {
                    (Some(Ok(answer)), first_failed) => return (Ok(answer), first_failed.is_some(), true),
                    (Some(Err(_)), Some(a)) => return (a, true, true),
                    (_, None) => {}
                    (None, Some(a)) => return (a, true, true),
                }
            }
        }
    }
}
