//! One model of the chain tried, with retries: each try admitted
//! (`admission.rs`), made whole or streamed to the client, settled and
//! ended as an [`Attempt`], and retried as [`Calls::retry`] allows. What the
//! chain walk in `walk.rs` does next depends only on the hop it returns.

use super::admission::{Ask, Held, Spent};
use super::attempt::{Attempt, Verdict};
use super::retry::{Failure, RetryPolicy, Tries, Try};
use super::{Calls, HopResult, LlmCall, LlmFailure, Tally, Tried};
use crate::provider::{ErrorKind, LlmRequest, LlmResponse, Piece, ProviderError};
use crate::resilience::breaker::{CallRecord, FailureKind};
use crate::resilience::limiter::{RateFeedback, Signal};
use crate::runner::ending::{answered_level, is_fallback};
use crate::runner::stream::{Pumped, Spend, StreamHead, Streaming};
use crate::telemetry::events::{self, EventKind};
use futures_util::future::BoxFuture;
use std::time::Duration;

impl Calls<'_> {
    /// Tries model `mi` for `call`, with retries ([`Calls::retrying`]):
    /// answered, on to the next model, or stop. Order per attempt:
    /// breakers (the cheapest refusal; retries live inside them) → limiter
    /// (waits only when no later model could take the call, `rest`) →
    /// budget reservation → call → settle everything with actual usage.
    /// The rare waits (the limiter, a fleet's allowance, a retry's backoff)
    /// are boxed, so their futures do not enlarge every request's. `leg` is
    /// the hedged call's leg this is (see [`Calls::walk`]).
    pub(super) async fn try_model(
        &self,
        call: &LlmCall<'_>,
        (mi, req, rest): (usize, LlmRequest, &[usize]),
        tally: &mut Tally,
        streaming: Option<&mut Streaming<'_>>,
        leg: Option<&super::Leg>,
    ) -> Hopped {
        let targets = self.catalog.model_targets(mi);
        let policy = RetryPolicy {
            retries: true,
            key: call.request_id ^ ((call.step as u64) << 40),
            deadline: call.deadline,
            request: call.request_id,
            targets: &targets,
        };
        let mut model_try = ModelTry {
            calls: self,
            call,
            mi,
            chars: req.prompt_chars(),
            req,
            rest,
            tally,
            streaming,
            leg,
            spend: Spend::default(),
            targets: &targets,
        };
        self.retrying(policy, &mut model_try).await
    }

    /// The first tool call of an answer that breaks its tool's schema, in
    /// words.
    fn semantic_failure(&self, result: &Attempted, req: &LlmRequest) -> Option<String> {
        match result {
            Attempted::Answer(resp, _) => resp
                .tool_calls
                .iter()
                .find_map(|c| self.schemas.check(c, &req.tools).err()),
            _ => None,
        }
    }

    /// Ends attempt `made` at `end`: its reservations settled with what
    /// it used, then the attempt ended (breakers, counts, its record), the
    /// same way whatever ended it. Returns the trips it caused, per
    /// breaker, and its semantic failure. A whole answer's latency is a
    /// sample of the provider's response time; a stream's is its time to
    /// first token, taken as it came, and its pace is judged by that, not
    /// by its length.
    fn conclude(
        &self,
        call: &LlmCall<'_>,
        made: Made<'_>,
        end: tokio::time::Instant,
        result: &Attempted,
        tally: &mut Tally,
    ) -> ([Option<String>; 2], Option<String>) {
        let Made {
            mi,
            req,
            held,
            attempt,
            streamed,
        } = made;
        let semantic = self.semantic_failure(result, req);
        let m = &self.catalog.models[mi];
        let (probes, reserved) = held.disarm();
        let (usage, rate, failure, mut tokens_per_s) = result.spent(semantic.is_some());
        let admitted = attempt.start();
        let timing = attempt.timing(end, streamed.and_then(Spend::first_token));
        if streamed.is_none() {
            // A whole answer's pace leaves out the time to read its prompt.
            tokens_per_s = tokens_per_s.map(|_| m.pace(usage.output, timing.took, req.prompt_chars()));
        }
        let signal = match result {
            Attempted::OverBudget(..) | Attempted::Unaligned(..) => Signal::Neutral,
            Attempted::Failed(e) => super::admission::signal(Some(e.kind), None, admitted),
            Attempted::Answer(..) => {
                let rtt = streamed.is_none().then_some(timing.took);
                super::admission::signal(None, rtt, admitted)
            }
        };
        let spent = Spent {
            usage,
            rate,
            signal,
            end,
        };
        self.settle(call.user, mi, reserved, &spent, tally);
        let provider = self.catalog.registry.get(self.catalog.providers[m.provider].target);
        if let Attempted::Answer(resp, _) = result {
            self.note_skipped(call.request_id, provider, resp);
        }
        let verdict = result.verdict(semantic.is_some(), tokens_per_s, m.min_tokens_per_s);
        // An answer cut at the budget was not a call that went wrong (and
        // reached its client); a continuation that did not line up did not.
        if failure.is_some() && (verdict != Verdict::Cut || matches!(result, Attempted::Unaligned(..))) {
            tally.wasted += u64::from(usage.total());
        }
        let rec = CallRecord {
            failure,
            latency: Duration::ZERO,
            tokens: usage.total(),
            tokens_per_s,
        };
        let (tripped, latency) = attempt.end(probes, verdict, rec, timing, |latency| {
            result.record(call.request_id, provider, m, latency, semantic.clone())
        });
        m.note_latency(latency);
        (tripped, semantic)
    }

    /// Counts and announces the events of `resp`'s stream that could not
    /// be read and were skipped.
    fn note_skipped(&self, request: u64, provider: &crate::runner::registry::Entry, resp: &LlmResponse) {
        let count = resp.wire.as_ref().map_or(0, |w| w.skipped);
        if count > 0 {
            provider.stats.malformed.add(u64::from(count));
            self.events.emit(EventKind::EventsSkipped {
                target: provider.target.clone(),
                request,
                count,
            });
        }
    }

    /// What a provider's failure tells others: its limiter counts a 429,
    /// and when the provider itself said so (429, 5xx, 529; a transport
    /// error may be this host's network) the fleet hears of the trips.
    #[cold]
    fn report_failure(&self, mi: usize, e: &ProviderError, tripped: &[Option<String>]) {
        let m = &self.catalog.models[mi];
        let p = &self.catalog.providers[m.provider];
        if e.kind == ErrorKind::RateLimited {
            p.limiter.count_rate_limited();
        }
        if let (Some(fleet), Some(_)) = (self.shared.get(), e.status) {
            for (t, why) in [p.target, m.target].into_iter().zip(tripped) {
                if let Some(why) = why {
                    fleet.trip(self.catalog.registry.get(t).target.clone(), why.clone());
                }
            }
        }
    }

    /// [`Calls::stream_attempt`] boxed behind a `dyn` future, so its code
    /// stays out of line: a whole call's attempt is the hot path, and the
    /// stream's machinery would otherwise be inlined into it.
    #[inline(never)]
    fn streamed<'a>(&'a self, s: &'a mut Streaming<'_>, opening: Opening<'a>) -> BoxFuture<'a, Attempted> {
        Box::pin(self.stream_attempt(s, opening))
    }

    /// One streamed attempt: opened (its first content come) within its
    /// first-token bound, then read to its end by the client's stream,
    /// which ends at the request's deadline where it has one.
    async fn stream_attempt(&self, s: &mut Streaming<'_>, opening: Opening<'_>) -> Attempted {
        let Opening {
            mi,
            req,
            room,
            spend,
            mut head,
            bounds: (first_token, deadline),
        } = opening;
        let p = &self.catalog.providers[self.catalog.models[mi].provider];
        let opened = crate::provider::within(first_token, "first token", p.client.open(req)).await;
        let live = match opened {
            // Answered whole (no content to stream, or a model that does
            // not stream): its pieces are written from the answer.
            Ok(crate::provider::Opened::Whole(resp)) => {
                let pieces = resp.reply().deltas().into_iter().map(Piece::said).collect();
                return Attempted::Answer(resp, pieces);
            }
            Ok(crate::provider::Opened::Live(mut live)) => {
                // Opened at its first content: the time to first token.
                let now = self.clock.now();
                let ttft = now.saturating_duration_since(live.started);
                let m = &self.catalog.models[mi];
                for t in [p.target, m.target] {
                    self.catalog.registry.get(t).stats.ttft.record(ttft.as_millis() as u64);
                }
                spend.opened(ttft);
                p.limiter.first_token(m.beyond_prompt(ttft, req), live.started, now);
                // Its output rate is measured from here: the time to its
                // first token was judged apart, against what was asked.
                live.started = now;
                live
            }
            Err(e) => return Attempted::Failed(e),
        };
        let head = |acc: &crate::wire::Assembler| {
            let r = acc.reply();
            head.id.clone_from(&r.id);
            if !r.model.is_empty() {
                head.model.clone_from(&r.model);
            }
            head
        };
        let pumped = s.pump(live, room, spend, head);
        let pumped = match deadline {
            Some(d) => match tokio::time::timeout_at(d, pumped).await {
                Ok(p) => p,
                Err(_) => {
                    let mut e = ProviderError::new(
                        ErrorKind::Deadline,
                        None,
                        format!(
                            "the request's deadline came before {} finished",
                            self.catalog.models[mi].name
                        ),
                    );
                    e.usage = spend
                        .get()
                        .map_or_else(Default::default, |(input, output)| crate::provider::Usage {
                            input,
                            output,
                            cached_input: 0,
                        });
                    return Attempted::Failed(e);
                }
            },
            None => pumped.await,
        };
        match pumped {
            Pumped::Whole(resp, held) => Attempted::Answer(resp, held),
            Pumped::Broke(e) => Attempted::Failed(e),
            Pumped::OverBudget(u, why) => Attempted::OverBudget(u, why),
            Pumped::Unaligned(u, why) => Attempted::Unaligned(u, why),
        }
    }

    /// What a client is told as model `mi`'s answer starts streaming.
    fn stream_head_of(&self, call: &LlmCall<'_>, mi: usize, tally: &Tally) -> StreamHead {
        let primary = call.route.chain[0];
        let mut chain = Vec::with_capacity(tally.hops.len() + 1);
        chain.extend(tally.hops.iter().map(|h| self.catalog.hop_of(h)));
        chain.push(crate::outcome::Hop::ok(&self.catalog.models[mi].name));
        StreamHead {
            level: answered_level(is_fallback(primary, mi, &tally.hops), false),
            chain,
            quality: (self.catalog.quality_ratio(mi, primary) * 100.0).round() / 100.0,
            attempts: tally.attempts,
            id: String::new(),
            model: String::from(&*self.catalog.models[mi].name),
        }
    }

    /// [`Calls::stream_head_of`] for a whole answer.
    fn stream_head(&self, call: &LlmCall<'_>, mi: usize, tally: &Tally, resp: &LlmResponse) -> StreamHead {
        let mut h = self.stream_head_of(call, mi, tally);
        if let Some(w) = &resp.wire {
            h.id.clone_from(&w.id);
            if !w.model.is_empty() {
                h.model.clone_from(&w.model);
            }
        }
        h
    }
}

/// How trying one model ended, for the walk along the chain.
pub(super) enum Hopped {
    /// It answered (after this many tries).
    Answered(LlmResponse, u32),
    /// It did not: the walk goes on to the next model.
    Next(Tried),
    /// No model may take the call now.
    Stop(LlmFailure),
}

/// One model of the chain, tried as the retry loop asks: the call, the
/// model, what it is asked (its attempt number set on each try), the
/// models after it, and what the tries use and write to.
struct ModelTry<'a, 's> {
    calls: &'a Calls<'a>,
    call: &'a LlmCall<'a>,
    mi: usize,
    req: LlmRequest,
    chars: usize,
    rest: &'a [usize],
    tally: &'a mut Tally,
    streaming: Option<&'a mut Streaming<'s>>,
    leg: Option<&'a super::Leg>,
    spend: Spend,
    targets: &'a [&'a crate::runner::registry::Entry; 2],
}

impl Tries for ModelTry<'_, '_> {
    type Output = Hopped;

    async fn once(&mut self, attempt: u32) -> Try<Hopped> {
        let (c, call, mi, rest, leg, chars) = (self.calls, self.call, self.mi, self.rest, self.leg, self.chars);
        let m = &c.catalog.models[mi];
        let p = &c.catalog.providers[m.provider];
        let hop = |result, tries| {
            Hopped::Next(Tried {
                model: mi,
                result,
                tries,
            })
        };
        if call.deadline.is_some_and(|d| c.clock.now() >= d) {
            return Try::Over(hop(HopResult::Failed(ErrorKind::Deadline, None), attempt));
        }
        // Every choice may use the whole cap: all are reserved.
        let output = call.params.output_bound(self.req.max_tokens);
        let ask = Ask {
            model: mi,
            user: call.user,
            tenant: call.tenant,
            chars,
            max_tokens: output,
            priority: call.priority,
            deadline: call.deadline,
        };
        let admitted = c.admit(ask, || !c.catalog.any_admits(rest, c.clock.now())).await;
        let (mut held, now) = match admitted {
            Ok(h) => h,
            Err(refusal) => {
                return Try::Over(match c.refused(call.request_id, mi, refusal, attempt) {
                    Ok(hop) => Hopped::Next(hop),
                    Err(e) => Hopped::Stop(LlmFailure::Budget(e)),
                });
            }
        };
        let started = c.attempt(self.targets, now, self.tally);
        self.req.attempt = attempt;
        self.spend.clear();
        held.calling = Some(super::admission::Calling {
            spend: &self.spend,
            request: call.request_id,
            admitted: now,
            leg,
        });
        let streams = self.streaming.is_some() && self.req.stream == Some(true);
        let room = held
            .budget()
            .filter(|_| streams)
            .and_then(|r| c.budgets.room(call.user, r, c.clock.ms_at(now)));
        // The provider's own bound on this call (a whole answer's
        // timeout; a stream's first token), and within the request's
        // deadline, this attempt's share of it: when the share is the
        // shorter, running out of it is the caller's doing.
        let own = m.own_bound(p.timeout, &self.req, chars, streams);
        let share = c.catalog.share_of(call.deadline, rest, now);
        let bound = share.map_or(own, |s| s.min(own));
        // A stream has no timeout of its own once open (an idle one
        // only, and the request's deadline).
        let within = if streams { share.unwrap_or(Duration::MAX) } else { bound };
        let attempted = async {
            match self.streaming.as_deref_mut() {
                Some(s) if streams => {
                    let opening = Opening {
                        mi,
                        req: &self.req,
                        room,
                        spend: &self.spend,
                        head: c.stream_head_of(call, mi, self.tally),
                        bounds: (bound, call.deadline),
                    };
                    c.streamed(s, opening).await
                }
                _ => match p.client.complete_within(&self.req, bound).await {
                    Ok(resp) => Attempted::Answer(resp, Vec::new()),
                    Err(e) => Attempted::Failed(e),
                },
            }
        };
        let opened = || self.spend.first_token().is_some();
        let mut result = started.make(&mut held.watched(), within, opened, attempted).await;
        let end = c.clock.now();
        if let Attempted::Failed(e) = &mut result {
            if e.kind == ErrorKind::Timeout && bound < own && end.saturating_duration_since(now) >= bound {
                e.kind = ErrorKind::Deadline;
                e.message = format!("the request's deadline came before {} answered", m.name);
            }
        }
        let made_now = Made {
            mi,
            req: &self.req,
            held,
            attempt: started,
            streamed: streams.then_some(&self.spend),
        };
        let (tripped, semantic) = c.conclude(call, made_now, end, &result, self.tally);
        let tries = attempt + 1;
        match result {
            Attempted::Answer(resp, pieces) => {
                if let Some(why) = semantic {
                    // Once the client's stream has started, a bad tool
                    // call cannot be taken back: the stream ends on it.
                    if self.streaming.as_ref().is_some_and(|s| s.started) {
                        let e = ProviderError::new(ErrorKind::ServerError, Some(200), why);
                        return Try::Over(hop(HopResult::Cut(Box::new(e)), tries));
                    }
                    return Try::Over(hop(HopResult::Semantic(why), tries));
                }
                if let Some(s) = self.streaming.as_deref_mut().filter(|_| self.req.stream == Some(true)) {
                    let kind = resp.wire.as_ref().map_or(call.params.wire, |w| w.kind);
                    let head = c.stream_head(call, mi, self.tally, &resp);
                    if let Err(why) = s.flush(kind, pieces, head) {
                        return Try::Over(hop(HopResult::Unaligned(why), tries));
                    }
                }
                Try::Over(Hopped::Answered(resp, tries))
            }
            Attempted::OverBudget(_, why) => {
                self.tally.hops.push(Tried {
                    model: mi,
                    result: HopResult::OverBudget,
                    tries,
                });
                Try::Over(Hopped::Stop(LlmFailure::OverBudget(why)))
            }
            Attempted::Unaligned(_, why) => Try::Over(hop(HopResult::Unaligned(why), tries)),
            Attempted::Failed(e) => {
                c.report_failure(mi, &e, &tripped);
                if self.streaming.as_ref().is_some_and(|s| s.started) {
                    // After the first byte nothing is retried.
                    return Try::Over(hop(HopResult::Cut(Box::new(e)), tries));
                }
                if e.kind == ErrorKind::Unsupported {
                    return Try::Over(hop(HopResult::Unsupported(e.message), attempt));
                }
                // The client's own body (its messages as sent, too)
                // refused as malformed goes back to it; a body fusebox
                // changed (trimmed, resumed) falls back instead.
                let passed_through =
                    self.req.own_messages && call.params.raw.is_some() && p.client.wire() == Some(call.params.wire);
                if e.client_fault() && passed_through {
                    self.tally.hops.push(Tried {
                        model: mi,
                        result: HopResult::Failed(e.kind, e.status),
                        tries,
                    });
                    return Try::Over(Hopped::Stop(LlmFailure::Upstream(Box::new(e))));
                }
                if e.kind == ErrorKind::TooLarge {
                    // Not retried; a model with a longer context may take it.
                    let (kind, status) = (e.kind, e.status);
                    self.tally.too_large.get_or_insert_with(|| Box::new(e));
                    return Try::Over(hop(HopResult::Failed(kind, status), tries));
                }
                let over = hop(HopResult::Failed(e.kind, e.status), tries);
                let failure = Failure {
                    admits: c.catalog.admits(m, end),
                    elsewhere: c.catalog.any_admits(rest, c.clock.now()),
                    error: e,
                    end,
                };
                Try::Failed(Box::new(failure), over)
            }
        }
    }
}

/// One try of a model, made: the model, what it asked, what the attempt
/// holds, and, streamed, what it has used so far.
struct Made<'a> {
    mi: usize,
    req: &'a LlmRequest,
    held: Held<'a>,
    attempt: Attempt<'a, 2>,
    streamed: Option<&'a Spend>,
}

/// A streamed try about to open: the model, what it asks, the budget room
/// it may use, what it has used so far, what the client is told as it
/// starts, and its bounds (the first token's, the request's deadline).
struct Opening<'a> {
    mi: usize,
    req: &'a LlmRequest,
    room: Option<(u64, crate::resilience::budget::BudgetExceeded)>,
    spend: &'a Spend,
    head: StreamHead,
    bounds: (Duration, Option<tokio::time::Instant>),
}

/// How one attempt ended.
enum Attempted {
    /// An answer (and, streamed, the pieces still to send).
    Answer(LlmResponse, Vec<crate::provider::Piece>),
    /// A failure.
    Failed(ProviderError),
    /// Cut at the user's hard budget.
    OverBudget(crate::provider::Usage, crate::resilience::budget::BudgetExceeded),
    /// A continuation of a cut answer, stopped for it did not line up with
    /// what the client was sent: how models write, not a provider's fault.
    Unaligned(crate::provider::Usage, crate::runner::align::Misaligned),
}

impl Attempted {
    /// What it used and reported, and how it failed (a semantic failure is
    /// one), for settling it: usage, rate feedback, failure, tokens/s.
    fn spent(&self, semantic: bool) -> (crate::provider::Usage, &RateFeedback, Option<FailureKind>, Option<f64>) {
        match self {
            Attempted::Answer(resp, _) => (
                resp.usage,
                RateFeedback::of(&resp.rate),
                semantic.then_some(FailureKind::Semantic),
                resp.tokens_per_s,
            ),
            Attempted::OverBudget(usage, _) | Attempted::Unaligned(usage, _) => {
                (*usage, &RateFeedback::NONE, Some(FailureKind::Blameless), None)
            }
            Attempted::Failed(e) => (e.usage, RateFeedback::of(&e.rate), Some(e.kind.failure()), None),
        }
    }

    /// How its targets count it: an answer that is semantically wrong, or
    /// whose pace (`tokens_per_s`) is under `min_tokens_per_s`, is a failure.
    fn verdict(&self, semantic: bool, tokens_per_s: Option<f64>, min_tokens_per_s: f64) -> Verdict {
        match self {
            Attempted::Answer(..) if semantic => Verdict::Semantic,
            Attempted::Answer(..) if tokens_per_s.is_some_and(|tps| tps < min_tokens_per_s) => Verdict::Slow,
            Attempted::Answer(..) => Verdict::Ok,
            Attempted::Failed(e) => Verdict::Failed(e.kind),
            Attempted::OverBudget(..) | Attempted::Unaligned(..) => Verdict::Cut,
        }
    }

    /// The attempt's record for the recorder.
    fn record(
        &self,
        request: u64,
        provider: &crate::runner::registry::Entry,
        m: &crate::runner::ModelSlot,
        latency: Duration,
        semantic: Option<String>,
    ) -> events::Attempt {
        let mut a = events::Attempt {
            model: Some(m.name.to_string()),
            latency_ms: latency.as_millis() as u64,
            semantic_failure: semantic,
            ..events::Attempt::of(request, provider.target.clone())
        };
        let (usage, rate) = match self {
            Attempted::Answer(resp, _) => {
                a.status = Some(200);
                a.tool_calls = resp.tool_calls.iter().map(|c| c.name.clone()).collect();
                a.tool_keys = (0..resp.tool_calls.len()).map(|i| resp.tool_key(i)).collect();
                a.response_model = resp.wire.as_ref().map(|w| w.model.clone()).filter(|m| !m.is_empty());
                a.response_id = resp.wire.as_ref().map(|w| w.id.clone()).filter(|id| !id.is_empty());
                a.finish = Some(resp.finish());
                (resp.usage, *RateFeedback::of(&resp.rate))
            }
            Attempted::Failed(e) => {
                a.status = e.status;
                a.transport = e.kind.transport();
                (e.usage, *RateFeedback::of(&e.rate))
            }
            Attempted::OverBudget(usage, _) => {
                // It was answering when the budget cut it.
                a.status = Some(200);
                a.cut = Some(events::Cut::Budget);
                (*usage, RateFeedback::default())
            }
            Attempted::Unaligned(usage, _) => {
                a.status = Some(200);
                a.cut = Some(events::Cut::Unaligned);
                (*usage, RateFeedback::default())
            }
        };
        a.input_tokens = usage.input;
        a.output_tokens = usage.output;
        a.cost_usd = m.cost(usage.input, usage.output);
        a.rate = rate;
        a
    }
}
