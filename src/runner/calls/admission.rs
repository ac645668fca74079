//! One guarded attempt on a model: admitted by its breakers, its
//! provider's limiter, the user's budgets (and, in a fleet, allowances),
//! held while the call runs, then settled with what it used, whatever
//! ends it.

use super::{Calls, HopResult, Tally, Tried};
use crate::config::Priority;
use crate::provider::ErrorKind;
use crate::resilience::breaker::{Breaker, Permit};
use crate::resilience::budget::BudgetExceeded;
use crate::resilience::limiter::{LimitDenied, RateFeedback, ShedWhy, Short, Signal};
use crate::runner::stream::Spend;
use crate::runner::{ModelSlot, ProviderSlot};
use crate::telemetry::events::{EventKind, StepKind};
use smallvec::SmallVec;
use std::time::Duration;
use tokio::time::Instant;

/// One attempt asked for: on which model, for whom, how large, how urgent.
pub(super) struct Ask<'a> {
    /// The model (its index in the catalog).
    pub model: usize,
    /// Who pays.
    pub user: &'a str,
    /// Whose fair share it uses (see [`super::tenants`]).
    pub tenant: &'a str,
    /// The prompt's characters.
    pub chars: usize,
    /// The most output it may ask for.
    pub max_tokens: u32,
    /// Its place in the provider's queue, where calls queue.
    pub priority: Priority,
    /// When it must have answered by.
    pub deadline: Option<Instant>,
}

impl<'r> Calls<'r> {
    /// Admits one attempt as `ask` says: both breakers (the cheapest
    /// refusal), the provider's limiter (waiting for capacity only when
    /// `may_wait` says no later model could take the call; in the
    /// provider's queue at its priority, where calls queue, and never past
    /// its deadline), the user's budgets and, in a fleet, its allowances.
    /// What the attempt holds and when it was admitted, or why not.
    pub(super) async fn admit<'a>(
        &'a self,
        ask: Ask<'a>,
        may_wait: impl FnOnce() -> bool,
    ) -> Result<(Held<'a>, tokio::time::Instant), Refusal> {
        let Ask {
            model: mi,
            user,
            tenant: whose,
            chars,
            max_tokens,
            priority,
            deadline,
        } = ask;
        let m = &self.catalog.models[mi];
        let p = &self.catalog.providers[m.provider];
        let (pt, mt) = (self.catalog.registry.get(p.target), self.catalog.registry.get(m.target));
        let now = self.clock.now();
        let Ok(pp) = pt.breaker.try_acquire(now) else {
            // A call of the model all the same: its row says it was refused.
            pt.stats.rejected_open.inc();
            mt.stats.rejected_open.inc();
            return Err(Refusal::Open);
        };
        let Ok(mp) = mt.breaker.try_acquire(now) else {
            pt.breaker.cancel(pp);
            mt.stats.rejected_open.inc();
            return Err(Refusal::Open);
        };
        // From here on what the attempt holds is released if the caller
        // goes away (a gateway client disconnects) before it settles.
        let mut held = Held {
            calls: self,
            targets: [pt, mt],
            provider: p,
            model: m,
            calling: None,
            user,
            probes: [Some(pp), Some(mp)],
            permit: None,
            res: None,
            allowance: None,
        };
        // Whose call it is (its tenant's key and weight), where calls queue
        // by fair shares or the limit adapts (see `Limiter::try_acquire_for`).
        let queue = &self.cfg.limiter.queue;
        let who = (queue.enabled || p.limiter.adapts()).then(|| self.tenants.key(whose));
        let tenant = who.map_or(0, |w| w.0);
        // Calls waiting in the provider's queue are not overtaken.
        let free = (!p.limiter.queued()).then(|| p.limiter.try_acquire_for(chars, max_tokens, now, who));
        let now = match free {
            Some(Ok(permit)) => {
                held.permit = Some(permit);
                now
            }
            // Its tenant holds its share of the slots: waiting would not help.
            Some(Err(Short::Share)) => {
                drop(held);
                pt.stats.rejected_rate.inc();
                return Err(Refusal::Shed(priority, ShedWhy::Share));
            }
            _ if may_wait() => {
                let waited = if queue.enabled {
                    let at = self.tenants.place(whose, priority);
                    let until = now + Duration::from_millis(queue.deadline_ms.of(priority));
                    let until = deadline.map_or(until, |d| d.min(until));
                    Box::pin(p.limiter.acquire_queued(chars, max_tokens, &at, until)).await
                } else {
                    // Waited without a queue: the permit names its tenant.
                    Box::pin(p.limiter.acquire(chars, max_tokens))
                        .await
                        .map(|permit| permit.of(tenant))
                };
                match waited {
                    Ok(permit) => held.permit = Some(permit),
                    Err(LimitDenied::Shed(why)) => {
                        drop(held);
                        pt.stats.rejected_rate.inc();
                        return Err(Refusal::Shed(priority, why));
                    }
                    Err(_) => {}
                }
                self.clock.now()
            }
            _ => {
                p.limiter.count_rejected();
                now
            }
        };
        let Some(est) = held.permit.as_ref().map(|p| p.estimate()) else {
            drop(held);
            pt.stats.rejected_rate.inc();
            return Err(Refusal::Rate);
        };
        let cost = m.cost(est.input, est.output);
        held.res = Some(
            self.budgets
                .reserve(user, est.total(), cost, self.clock.ms_at(now))
                .map_err(Refusal::Budget)?,
        );
        // Fleet mode: the user's budget as the whole fleet has spent it.
        if let Some(a) = self.shared.get() {
            let r = Box::pin(a.reserve(user, self.budgets.limits_of(user), est.total(), cost))
                .await
                .map_err(Refusal::Budget)?;
            held.allowance = Some(r);
        }
        Ok((held, now))
    }

    /// Settles one attempt's reservations with what it used: the
    /// limiter, the budgets and the fleet's allowances, and the request's
    /// tally. Its breakers and counts are the [`super::attempt::Attempt`]'s.
    pub(super) fn settle(&self, user: &str, mi: usize, reserved: Reservations, spent: &Spent<'_>, tally: &mut Tally) {
        let Reservations {
            permit,
            budget: res,
            allowance,
        } = reserved;
        let m = &self.catalog.models[mi];
        let p = &self.catalog.providers[m.provider];
        let u = spent.usage;
        let tokens = u.total();
        let cost = m.cost(u.input, u.output);
        p.limiter.settle(permit, u.input, u.output, spent.signal, spent.end);
        p.limiter.calibrate(spent.rate, spent.end);
        self.budgets.settle(res, tokens, cost, self.clock.ms_at(spent.end));
        self.settle_allowance(user, allowance, tokens, cost);
        tally.tokens += u64::from(tokens);
        tally.cost += cost;
    }
}

/// How an attempt admitted at `admitted` went, for an adaptive
/// concurrency limit: answered (in `rtt`, where that is one sample of the
/// provider's response time), rate limited (429), overloaded (the other
/// failures that say so, see [`crate::blame`]: 503, 529), or neither.
pub(super) fn signal(failed: Option<ErrorKind>, rtt: Option<Duration>, admitted: Instant) -> Signal {
    match failed {
        None => Signal::Answered { rtt, admitted },
        Some(k) if crate::blame::Ending::of(k).feeds().limit => match k {
            ErrorKind::RateLimited => Signal::RateLimited { admitted },
            _ => Signal::Overloaded { admitted },
        },
        Some(_) => Signal::Neutral,
    }
}

/// Why an attempt was not admitted.
pub(super) enum Refusal {
    /// A breaker is open.
    Open,
    /// No rate-limit capacity in time.
    Rate,
    /// A budget refused.
    Budget(BudgetExceeded),
    /// Shed from the provider's queue, at this priority.
    Shed(Priority, ShedWhy),
}

impl Refusal {
    /// The refusal as a trace tells it.
    pub(super) fn step(&self) -> StepKind {
        match self {
            Refusal::Open => StepKind::ShortCircuit,
            Refusal::Rate => StepKind::RateLimited,
            Refusal::Budget(e) => StepKind::BudgetRefused { reason: e.to_string() },
            Refusal::Shed(p, why) => StepKind::Shed {
                priority: *p,
                why: *why,
            },
        }
    }
}

/// What an admitted attempt reserved, to settle with what it used.
pub(super) struct Reservations {
    /// Its place in the provider's rate limits.
    permit: crate::resilience::limiter::LimitPermit,
    /// Its reservation in the user's budgets.
    budget: crate::resilience::budget::Reservation,
    /// What it took from the fleet's budget allowances (fleet mode).
    allowance: Option<crate::runner::shared::Reserved>,
}

/// What one attempt used, and when it ended.
pub(super) struct Spent<'r> {
    pub usage: crate::provider::Usage,
    pub rate: &'r RateFeedback,
    /// How it went, for an adaptive concurrency limit.
    pub signal: Signal,
    pub end: tokio::time::Instant,
}

/// An attempt's call, made: what it has used so far, the request it is
/// for, when it was admitted, and the hedged call's leg it is part of
/// (whether the other leg outran it, what a call dropped in flight is
/// recorded as cut by; and where what it was charged is told).
pub(super) struct Calling<'a> {
    pub spend: &'a Spend,
    pub request: u64,
    pub admitted: Instant,
    pub leg: Option<&'a super::Leg>,
}

/// What one attempt holds between admission and settlement: breaker probe
/// slots, a rate-limit reservation, a budget reservation. Dropped without
/// [`Held::disarm`] it settles: refused before the call, everything is
/// given back; dropped mid-call (the client went away), the breakers'
/// probes are given back (the upstream did not fail) but the tokens are
/// charged: what the stream had used, else what was reserved (the
/// provider may bill the whole answer), so leaving early dodges no budget.
pub(super) struct Held<'a> {
    calls: &'a Calls<'a>,
    targets: [&'a crate::runner::registry::Entry; 2],
    provider: &'a ProviderSlot,
    model: &'a ModelSlot,
    /// Set once the call is made: what it has used so far, and whose it is.
    pub(super) calling: Option<Calling<'a>>,
    user: &'a str,
    probes: [Option<crate::resilience::breaker::Permit>; 2],
    permit: Option<crate::resilience::limiter::LimitPermit>,
    res: Option<crate::resilience::budget::Reservation>,
    /// Taken from the fleet's budget allowances (fleet mode).
    allowance: Option<crate::runner::shared::Reserved>,
}

impl Held<'_> {
    /// The breakers' permits of the call, for [`watched`].
    pub(super) fn watched(&mut self) -> SmallVec<[(&Breaker, &mut Permit); 2]> {
        let targets = self.targets;
        self.probes
            .iter_mut()
            .zip(targets)
            .filter_map(|(p, t)| Some((&t.breaker, p.as_mut()?)))
            .collect()
    }

    /// The budget reservation it holds.
    pub(super) fn budget(&self) -> Option<&crate::resilience::budget::Reservation> {
        self.res.as_ref()
    }

    /// Hands everything over for settlement with the call's actual usage:
    /// the breakers' probes (provider's, model's) and the reservations.
    pub(super) fn disarm(mut self) -> ([Permit; 2], Reservations) {
        self.calling = None;
        let allowance = self.allowance.take();
        let taken = (
            self.probes[0].take(),
            self.probes[1].take(),
            self.permit.take(),
            self.res.take(),
        );
        match taken {
            (Some(a), Some(b), Some(permit), Some(budget)) => (
                [a, b],
                Reservations {
                    permit,
                    budget,
                    allowance,
                },
            ),
            _ => unreachable!("disarm is called only once everything is held"),
        }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        for (t, probe) in self.targets.iter().zip(&mut self.probes) {
            if let Some(p) = probe.take() {
                t.breaker.cancel(p);
            }
        }
        let r = self.calls;
        let Some(calling) = self.calling.take() else {
            if let Some(p) = self.permit.take() {
                self.provider.limiter.release(p, r.clock.now());
            }
            if let Some(res) = self.res.take() {
                r.budgets.settle(res, 0, 0.0, r.clock.elapsed_ms());
            }
            r.settle_allowance(self.user, self.allowance.take(), 0, 0.0);
            return;
        };
        let spend = calling.spend;
        let (input, output) = spend.get().unwrap_or_else(|| {
            let est = self.permit.as_ref().map(|p| p.estimate()).unwrap_or_default();
            (est.input, est.output)
        });
        let (tokens, cost) = (input.saturating_add(output), self.model.cost(input, output));
        if let Some(p) = self.permit.take() {
            self.provider
                .limiter
                .settle(p, input, output, Signal::Neutral, r.clock.now());
        }
        if let Some(res) = self.res.take() {
            r.budgets.settle(res, tokens, cost, r.clock.elapsed_ms());
        }
        r.settle_allowance(self.user, self.allowance.take(), tokens, cost);
        let outrun = calling.leg.filter(|leg| leg.outrun());
        if let Some(leg) = outrun {
            leg.charged(tokens, cost);
        }
        self.record_cut(&calling, outrun.is_some(), (input, output), cost);
    }
}

impl Held<'_> {
    /// Records a call dropped in flight: its model, what it was charged,
    /// and what cut it (a hedge that answered first, `outrun`; the drain,
    /// or its client going away); a stream that had begun had answered 200.
    #[cold]
    fn record_cut(&self, calling: &Calling<'_>, outrun: bool, (input, output): (u32, u32), cost: f64) {
        let r = self.calls;
        if !r.events.has_subscribers() {
            return;
        }
        let cut = if outrun {
            crate::telemetry::events::Cut::Outrun
        } else if r.totals.closing.load(std::sync::atomic::Ordering::Relaxed) {
            crate::telemetry::events::Cut::Drained
        } else {
            crate::telemetry::events::Cut::Left
        };
        let latency = r.clock.now().saturating_duration_since(calling.admitted);
        let a = crate::telemetry::events::Attempt {
            model: Some(self.model.name.to_string()),
            status: calling.spend.first_token().map(|_| 200),
            latency_ms: latency.as_millis() as u64,
            input_tokens: input,
            output_tokens: output,
            cost_usd: cost,
            cut: Some(cut),
            ..crate::telemetry::events::Attempt::of(calling.request, self.targets[0].target.clone())
        };
        r.events.emit(EventKind::Attempt(Box::new(a)));
    }
}

impl Calls<'_> {
    /// Fleet mode: gives what a call did not use back to the allowances.
    fn settle_allowance(&self, user: &str, reserved: Option<crate::runner::shared::Reserved>, tokens: u32, cost: f64) {
        if let (Some(a), Some(r)) = (self.shared.get(), reserved) {
            a.settle(user, r, tokens, cost);
        }
    }

    /// Model `mi` refused a call before it was made (after `tries`),
    /// announced: the hop it ends (the next model may take the call), or
    /// the budget that refused it (no model may).
    #[cold]
    pub(super) fn refused(
        &self,
        request: u64,
        mi: usize,
        refusal: Refusal,
        tries: u32,
    ) -> Result<Tried, BudgetExceeded> {
        self.announce_step(request, self.catalog.model_target(mi), refusal.step());
        let result = match refusal {
            Refusal::Open => HopResult::Open,
            Refusal::Rate => HopResult::Rate,
            Refusal::Shed(p, why) => HopResult::Shed(p, why),
            Refusal::Budget(e) => return Err(e),
        };
        Ok(Tried {
            model: mi,
            result,
            tries,
        })
    }
}
