//! One LLM call through the route's fallback chain: plan (skip models whose
//! breaker is open or that break the latency SLA; prefer cheap tiers under
//! budget pressure), then per model: budget reservation → limiter → breakers
//! → provider call with retries → settle and calibrate.

use super::outcome::Level;
use super::stream::{Pumped, Spend, StreamHead, Streaming};
use super::{ModelSlot, Runner};
use crate::provider::{ErrorKind, LlmRequest, LlmResponse, Message, Piece, ProviderError, Role, ToolSpec};
use crate::resilience::breaker::{watched, Breaker, CallRecord, FailureKind, Permit};
use crate::resilience::budget::BudgetExceeded;
use crate::resilience::limiter::RateFeedback;
use crate::resilience::retry::backoff;
use crate::telemetry::events::{Attempt, EventKind};
use crate::wire::Params;
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// One LLM call's inputs.
#[derive(Clone, Debug)]
pub struct LlmCall<'a> {
    /// The agent request.
    pub request_id: u64,
    /// Who pays.
    pub user: &'a str,
    /// The route, found once per request.
    pub route: &'a super::RouteSlot,
    /// Step of the agent loop.
    pub step: u32,
    /// The conversation.
    pub messages: Arc<[Message]>,
    /// Tools the model may call (tool calls are validated against these).
    pub tools: Arc<[ToolSpec]>,
    /// Output cap on the preferred model.
    pub max_tokens: u32,
    /// What the client asked besides the conversation (a gateway call), or
    /// the runner's own defaults.
    pub params: Arc<Params>,
    /// Stream the answer (`None`: as the provider is configured).
    pub stream: Option<bool>,
    /// Try only the route's first model (the client forbade fallback).
    pub only_first: bool,
}

impl<'a> LlmCall<'a> {
    /// Step `step` of request `request_id` for `user` on `route`, with the
    /// runner's own parameters.
    pub fn new(
        request_id: u64,
        user: &'a str,
        route: &'a super::RouteSlot,
        step: u32,
        messages: Arc<[Message]>,
        tools: Arc<[ToolSpec]>,
        max_tokens: u32,
    ) -> Self {
        Self {
            request_id,
            user,
            route,
            step,
            messages,
            tools,
            max_tokens,
            params: own_params(),
            stream: None,
            only_first: false,
        }
    }
}

/// The parameters of the calls the runner makes itself, shared.
pub fn own_params() -> Arc<Params> {
    static OWN: std::sync::LazyLock<Arc<Params>> = std::sync::LazyLock::new(Arc::default);
    OWN.clone()
}

/// What happened at one model of the chain.
#[derive(Clone, Debug, PartialEq)]
pub enum HopResult {
    /// Answered.
    Ok,
    /// Skipped: breaker open (provider or model).
    Open,
    /// Skipped: no rate-limit capacity in time.
    Rate,
    /// Skipped: recent latency breaks the route's SLA.
    Sla,
    /// Failed (after retries).
    Failed(ErrorKind, Option<u16>),
    /// Answered with an invalid tool call.
    Semantic(String),
    /// Its stream broke after the client's had started.
    Cut(Box<ProviderError>),
    /// Answered, continuing the answer a model before it cut off.
    Resumed,
    /// Skipped: the model's API cannot carry the request (the reason).
    Unsupported(String),
}

/// One model of the chain and how it went.
#[derive(Clone, Debug, PartialEq)]
pub struct Hop {
    /// Model index.
    pub model: usize,
    /// Result.
    pub result: HopResult,
    /// Attempts made (1 + retries).
    pub tries: u32,
}

/// Accounting for one agent request across all its calls.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Chain steps walked, in order (most requests walk one or two).
    pub hops: SmallVec<[Hop; 2]>,
    /// Tokens consumed.
    pub tokens: u64,
    /// Tokens consumed by failed calls.
    pub wasted: u64,
    /// Cost (USD).
    pub cost: f64,
    /// Provider and tool attempts.
    pub attempts: u32,
}

/// Why no model answered.
#[derive(Clone, Debug, PartialEq)]
pub enum LlmFailure {
    /// A budget refused the call.
    Budget(BudgetExceeded),
    /// Every model was skipped or failed.
    Exhausted,
    /// The upstream refused the client's own request as malformed (400,
    /// 404, 422 to a body passed through): the client's mistake, passed
    /// back to it rather than tried elsewhere.
    Upstream(Box<crate::provider::ProviderError>),
    /// The client's stream broke after its first byte and was not resumed.
    Cut(Box<ProviderError>),
    /// The user's hard budget ran out mid-stream: the stream was cut there.
    OverBudget(BudgetExceeded),
}

impl Runner {
    /// The display name of a hop, e.g. `gpt-4o ✗503×3`.
    pub fn hop_label(&self, h: &Hop) -> String {
        if h.result == HopResult::Ok && h.tries <= 1 {
            // Copied as a str: `to_string` on the Box would go through
            // the formatting machinery.
            return String::from(&*self.models[h.model].answered_label);
        }
        let m = &self.models[h.model].name;
        let tries = if h.tries > 1 {
            format!("×{}", h.tries)
        } else {
            String::new()
        };
        match &h.result {
            HopResult::Ok => format!("{m} ✓{tries}"),
            HopResult::Open => format!("{m} ⊘open"),
            HopResult::Rate => format!("{m} ⏳rate"),
            HopResult::Sla => format!("{m} ⌛sla"),
            HopResult::Failed(k, s) => format!("{m} ✗{}{tries}", k.label(*s)),
            HopResult::Semantic(_) => format!("{m} ✗semantic"),
            HopResult::Cut(e) => format!("{m} ✗cut {}", e.kind.label(e.status)),
            HopResult::Resumed => format!("{m} ✓ resumed"),
            HopResult::Unsupported(why) => format!("{m} skipped: {why}"),
        }
    }

    /// The order in which the route's models are tried now: cheaper tiers
    /// first under global budget pressure.
    fn plan<'a>(&self, call: &LlmCall<'a>) -> std::borrow::Cow<'a, [usize]> {
        let route = call.route;
        if call.only_first {
            return std::borrow::Cow::Borrowed(&route.chain[..1]);
        }
        if self.budgets.pressure() > self.cfg.budgets.soft_ratio {
            let mut order = route.chain.clone();
            order.sort_by_key(|&m| self.models[m].cfg.tier);
            std::borrow::Cow::Owned(order)
        } else {
            std::borrow::Cow::Borrowed(&route.chain)
        }
    }

    /// Whether both breakers of a model would admit a call now.
    pub(crate) fn admits(&self, m: &ModelSlot, now: tokio::time::Instant) -> bool {
        let p = &self.providers[m.provider];
        self.registry.get(p.target).breaker.would_admit(now) && self.registry.get(m.target).breaker.would_admit(now)
    }

    /// Runs one LLM call through the chain.
    pub async fn call_llm(&self, call: &LlmCall<'_>, tally: &mut Tally) -> Result<(LlmResponse, usize), LlmFailure> {
        self.call_llm_streamed(call, tally, None).await
    }

    /// Runs one LLM call through the chain, streaming the answer to
    /// `streaming` as it arrives when there is one (retries and fallback
    /// happen before its first byte; after it, a cut answer is continued
    /// by the next model where the route says `stream_resume`).
    pub async fn call_llm_streamed(
        &self,
        call: &LlmCall<'_>,
        tally: &mut Tally,
        mut streaming: Option<&mut Streaming<'_>>,
    ) -> Result<(LlmResponse, usize), LlmFailure> {
        let route = call.route;
        let order = self.plan(call);
        let factor = route.cfg.max_tokens_factor;
        let sla = route.cfg.latency_sla_ms;
        let mut hop_no = 0i32;
        // The answer cut mid-stream being continued, and how it was cut.
        let mut cut: Option<ProviderError> = None;
        for (pos, &mi) in order.iter().enumerate() {
            let m = &self.models[mi];
            let rest = &order[pos + 1..];
            // A model of another API than the client's, asked for what only
            // the client's API can do, is not tried.
            let api = self.providers[m.provider].client.wire().unwrap_or(call.params.wire);
            if let Some(why) = call.params.cannot_honour(api) {
                tally.hops.push(Hop {
                    model: mi,
                    result: HopResult::Unsupported(why),
                    tries: 0,
                });
                continue;
            }
            if sla > 0 && m.latency_ms.load(Ordering::Relaxed) > sla && self.any_admits(rest) {
                tally.hops.push(Hop {
                    model: mi,
                    result: HopResult::Sla,
                    tries: 0,
                });
                continue;
            }
            // Lowered on each hop, to no less than 16 and no more than asked.
            let max_tokens = ((call.max_tokens as f64 * factor.powi(hop_no)).round() as u32)
                .max(16)
                .min(call.max_tokens);
            let trimmed = hop_no > 0 && route.cfg.trim_prompt_on_fallback;
            let mut messages = if trimmed {
                trim(&call.messages)
            } else {
                call.messages.clone()
            };
            let mut own_messages = !trimmed || Arc::ptr_eq(&messages, &call.messages);
            if let Some(s) = streaming.as_deref_mut().filter(|_| cut.is_some()) {
                // Continue the cut answer: the conversation, then what was sent.
                let prefix = Message::assistant(s.resume(), Vec::new());
                messages = messages.iter().cloned().chain([prefix]).collect();
                own_messages = false;
            }
            let req = LlmRequest {
                request_id: call.request_id,
                step: call.step,
                attempt: 0,
                model: m.api_name.clone(),
                own_messages,
                messages,
                tools: call.tools.clone(),
                max_tokens,
                params: call.params.clone(),
                stream: call.stream,
            };
            match self
                .try_model(call, mi, req, rest, tally, streaming.as_deref_mut())
                .await?
            {
                Ok((resp, tries)) => {
                    tally.hops.push(Hop {
                        model: mi,
                        result: if cut.is_some() {
                            HopResult::Resumed
                        } else {
                            HopResult::Ok
                        },
                        tries,
                    });
                    return Ok((resp, mi));
                }
                Err(hop) => {
                    if hop.tries > 0 {
                        hop_no += 1;
                    }
                    let broke = match &hop.result {
                        HopResult::Cut(e) => Some(e.clone()),
                        _ => None,
                    };
                    tally.hops.push(hop);
                    let Some(e) = broke else { continue };
                    let s = streaming.as_deref_mut();
                    match s {
                        // A text answer cut mid-stream: the next model continues it.
                        Some(s) if route.cfg.stream_resume && s.only_text && self.any_admits(rest) => cut = Some(*e),
                        _ => return Err(LlmFailure::Cut(e)),
                    }
                }
            }
        }
        match cut {
            Some(e) => Err(LlmFailure::Cut(Box::new(e))),
            None => Err(LlmFailure::Exhausted),
        }
    }

    fn any_admits(&self, models: &[usize]) -> bool {
        let now = self.clock.now();
        models.iter().any(|&m| self.admits(&self.models[m], now))
    }

    /// Tries one model, with retries; `Ok(Err(hop))` means "go to the next".
    /// Order per attempt: breakers (the cheapest refusal; retries live inside
    /// them) → limiter (waits only when no later model could take the call)
    /// → budget reservation → call → settle everything with actual usage.
    /// The rare waits (the limiter, a fleet's allowance, a retry's backoff)
    /// are boxed, so their futures do not enlarge every request's.
    async fn try_model(
        &self,
        call: &LlmCall<'_>,
        mi: usize,
        mut req: LlmRequest,
        rest: &[usize],
        tally: &mut Tally,
        mut streaming: Option<&mut Streaming<'_>>,
    ) -> Result<Result<(LlmResponse, u32), Hop>, LlmFailure> {
        let m = &self.models[mi];
        let p = &self.providers[m.provider];
        let (pt, mt) = (self.registry.get(p.target), self.registry.get(m.target));
        let chars = req.prompt_chars();
        let mut attempt = 0u32;
        let spend = Spend::default();
        let hop = |result, tries| {
            Ok(Err(Hop {
                model: mi,
                result,
                tries,
            }))
        };
        loop {
            let admitted = self
                .admit(call.user, mi, chars, req.max_tokens, || !self.any_admits(rest))
                .await;
            let (mut held, now) = match admitted {
                Ok(h) => h,
                Err(Refusal::Open) => return hop(HopResult::Open, attempt),
                Err(Refusal::Rate) => return hop(HopResult::Rate, attempt),
                Err(Refusal::Budget(e)) => return Err(LlmFailure::Budget(e)),
            };
            pt.stats.attempts.inc();
            mt.stats.attempts.inc();
            tally.attempts += 1;
            req.attempt = attempt;
            spend.clear();
            held.calling = Some(&spend);
            let streams = streaming.is_some() && req.stream == Some(true);
            let room = held
                .res
                .as_ref()
                .filter(|_| streams)
                .and_then(|r| self.budgets.room(call.user, r, self.clock.ms_at(now)));
            // A stream has no timeout of its own (an idle one only).
            let within = if streams { Duration::MAX } else { p.timeout };
            let attempted = async {
                match streaming.as_deref_mut() {
                    Some(s) if streams => {
                        let head = self.stream_head_of(call, mi, tally);
                        Box::pin(self.stream_attempt(mi, &req, s, room, &spend, head)).await
                    }
                    _ => match p.client.complete_within(&req, p.timeout).await {
                        Ok(resp) => Attempted::Answer(resp, Vec::new()),
                        Err(e) => Attempted::Failed(e),
                    },
                }
            };
            let result = watched(&mut held.watched(), now, within, attempted).await;
            let allowance = held.allowance.take();
            let permits = held.disarm();
            let end = self.clock.now();
            let latency = end.saturating_duration_since(now);
            let lat_ms = latency.as_millis() as u64;
            let old = m.latency_ms.load(Ordering::Relaxed);
            m.latency_ms.store(
                if old == 0 { lat_ms } else { (old * 4 + lat_ms) / 5 },
                Ordering::Relaxed,
            );
            let settle = |usage, rate: &RateFeedback, failure, tokens_per_s, tally: &mut Tally| {
                self.settle(
                    call.user,
                    mi,
                    permits,
                    allowance,
                    Spent {
                        usage,
                        rate,
                        failure,
                        tokens_per_s,
                        latency,
                        end,
                    },
                    tally,
                )
            };
            match result {
                Attempted::Answer(resp, pieces) => {
                    let semantic = resp
                        .tool_calls
                        .iter()
                        .find_map(|c| self.schemas.check(c, &req.tools).err());
                    let failure = semantic.as_ref().map(|_| FailureKind::Semantic);
                    settle(resp.usage, &resp.rate, failure, resp.tokens_per_s, tally);
                    self.announce_attempt(|| Attempt {
                        request: call.request_id,
                        target: pt.name.clone(),
                        model: Some(m.name.to_string()),
                        status: Some(200),
                        transport: None,
                        latency_ms: lat_ms,
                        input_tokens: resp.usage.input,
                        output_tokens: resp.usage.output,
                        headers: rate_headers(&resp.rate),
                        semantic_failure: semantic.clone(),
                        tool_calls: resp.tool_calls.iter().map(|c| c.name.clone()).collect(),
                        tool_keys: (0..resp.tool_calls.len()).map(|i| resp.tool_key(i)).collect(),
                    });
                    let slow_tokens = resp.tokens_per_s.is_some_and(|t| t < m.min_tokens_per_s);
                    if let Some(why) = semantic {
                        for t in [pt, mt] {
                            t.stats.failed.inc();
                            t.stats.semantic.inc();
                        }
                        tally.wasted += u64::from(resp.usage.total());
                        // Once the client's stream has started, a bad tool
                        // call cannot be taken back: the stream ends on it.
                        if streaming.as_ref().is_some_and(|s| s.started) {
                            let e = ProviderError::new(ErrorKind::ServerError, Some(200), why);
                            return hop(HopResult::Cut(Box::new(e)), attempt + 1);
                        }
                        return hop(HopResult::Semantic(why), attempt + 1);
                    }
                    for t in [pt, mt] {
                        if slow_tokens {
                            t.stats.failed.inc()
                        } else {
                            t.stats.ok.inc()
                        }
                    }
                    if let Some(s) = streaming.as_deref_mut().filter(|_| req.stream == Some(true)) {
                        let kind = resp.wire.as_ref().map_or(call.params.wire, |w| w.kind);
                        let head = self.stream_head(call, mi, tally, &resp);
                        s.flush(kind, pieces, head);
                    }
                    return Ok(Ok((resp, attempt + 1)));
                }
                Attempted::OverBudget(usage, why) => {
                    settle(usage, &RateFeedback::default(), Some(FailureKind::Client), None, tally);
                    return Err(LlmFailure::OverBudget(why));
                }
                Attempted::Failed(e) => {
                    let failure = e.kind.failure();
                    let tripped = settle(e.usage, &e.rate, Some(failure), None, tally);
                    tally.wasted += u64::from(e.usage.total());
                    if e.kind == ErrorKind::RateLimited {
                        p.limiter.count_rate_limited();
                    }
                    // The provider itself said so (429, 5xx, 529): the fleet
                    // is told. Transport errors may be this host's network.
                    if let (Some(share), Some(_)) = (self.shared_trips.get(), e.status) {
                        for (t, why) in [pt, mt].into_iter().zip(tripped) {
                            if let Some(why) = why {
                                let _ = share.send((t.name.clone(), why));
                            }
                        }
                    }
                    self.announce_attempt(|| Attempt {
                        request: call.request_id,
                        target: pt.name.clone(),
                        model: Some(m.name.to_string()),
                        status: e.status,
                        transport: transport_name(e.kind),
                        latency_ms: lat_ms,
                        input_tokens: e.usage.input,
                        output_tokens: e.usage.output,
                        headers: rate_headers(&e.rate),
                        semantic_failure: None,
                        tool_calls: Vec::new(),
                        tool_keys: Vec::new(),
                    });
                    for t in [pt, mt] {
                        if failure == FailureKind::Client {
                            t.stats.client_errors.inc();
                        } else {
                            t.stats.failed.inc();
                        }
                        if e.kind == ErrorKind::Timeout {
                            t.stats.timeouts.inc();
                        }
                    }
                    if streaming.as_ref().is_some_and(|s| s.started) {
                        // After the first byte nothing is retried.
                        return hop(HopResult::Cut(Box::new(e)), attempt + 1);
                    }
                    if e.kind == ErrorKind::Unsupported {
                        return hop(HopResult::Unsupported(e.message), attempt);
                    }
                    // The client's own body (its messages as sent, too)
                    // refused as malformed goes back to it; a body fusebox
                    // changed (trimmed, resumed) falls back instead.
                    let passed_through =
                        req.own_messages && call.params.raw.is_some() && p.client.wire() == Some(call.params.wire);
                    if e.client_fault() && passed_through {
                        tally.hops.push(Hop {
                            model: mi,
                            result: HopResult::Failed(e.kind, e.status),
                            tries: attempt + 1,
                        });
                        return Err(LlmFailure::Upstream(Box::new(e)));
                    }
                    let retry = e.kind.retryable()
                        && attempt < self.cfg.retry.max_retries
                        && e.retry_after
                            .is_none_or(|ra| ra <= Duration::from_millis(self.cfg.retry.cap_ms))
                        && self.admits(m, end)
                        && self.retry_budget.try_withdraw(end);
                    if !retry {
                        return hop(HopResult::Failed(e.kind, e.status), attempt + 1);
                    }
                    pt.stats.retries.inc();
                    mt.stats.retries.inc();
                    let key = call.request_id ^ ((call.step as u64) << 40);
                    let wait = backoff(&self.cfg.retry, self.seed, key, attempt, e.retry_after);
                    Box::pin(tokio::time::sleep(wait)).await;
                    attempt += 1;
                }
            }
        }
    }

    /// Admits one attempt on model `mi` for `user`: both breakers (the
    /// cheapest refusal), the provider's limiter (waiting for capacity
    /// only when `may_wait` says no later model could take the call), the
    /// user's budgets and, in a fleet, its allowances. What the attempt
    /// holds and when it was admitted, or why not.
    pub(super) async fn admit<'a>(
        &'a self,
        user: &'a str,
        mi: usize,
        chars: usize,
        max_tokens: u32,
        may_wait: impl FnOnce() -> bool,
    ) -> Result<(Held<'a>, tokio::time::Instant), Refusal> {
        let m = &self.models[mi];
        let p = &self.providers[m.provider];
        let (pt, mt) = (self.registry.get(p.target), self.registry.get(m.target));
        let now = self.clock.now();
        let Ok(pp) = pt.breaker.try_acquire(now) else {
            pt.stats.rejected_open.inc();
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
            runner: self,
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
        let now = match p.limiter.try_acquire(chars, max_tokens, now) {
            Ok(permit) => {
                held.permit = Some(permit);
                now
            }
            Err(_) if may_wait() => {
                held.permit = Box::pin(p.limiter.acquire(chars, max_tokens)).await.ok();
                self.clock.now()
            }
            Err(_) => {
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
        if let Some(a) = self.allowances.get() {
            let r = Box::pin(a.reserve(user, est.total(), cost))
                .await
                .map_err(Refusal::Budget)?;
            held.allowance = Some(r);
        }
        Ok((held, now))
    }

    /// Settles one attempt: the limiter, the budgets and the fleet's
    /// allowances with what it used, the request's tally, and both
    /// breakers with how it went (a client-side failure is neutral to
    /// them). Returns the trips it caused, per breaker.
    pub(super) fn settle(
        &self,
        user: &str,
        mi: usize,
        permits: Permits,
        allowance: Option<crate::fleet::allowance::Reserved>,
        spent: Spent<'_>,
        tally: &mut Tally,
    ) -> [Option<String>; 2] {
        let m = &self.models[mi];
        let p = &self.providers[m.provider];
        let (pp, mp, permit, res) = permits;
        let u = spent.usage;
        let tokens = u.total();
        let cost = m.cost(u.input, u.output);
        p.limiter.settle(permit, u.input, u.output, spent.end);
        p.limiter.calibrate(spent.rate, spent.end);
        self.budgets.settle(res, tokens, cost, self.clock.ms_at(spent.end));
        self.settle_allowance(user, allowance, tokens, cost);
        tally.tokens += u64::from(tokens);
        tally.cost += cost;
        let lat_ms = spent.latency.as_millis() as u64;
        let (pt, mt) = (self.registry.get(p.target), self.registry.get(m.target));
        for t in [pt, mt] {
            t.stats.latency_ms_sum.add(lat_ms);
        }
        let rec = CallRecord {
            failure: spent.failure,
            latency: spent.latency,
            tokens,
            tokens_per_s: spent.tokens_per_s,
        };
        [
            pt.breaker.record(pp, &rec, spent.end),
            mt.breaker.record(mp, &rec, spent.end),
        ]
    }

    /// One streamed attempt: opened within the provider's timeout, then
    /// read to its end by the client's stream.
    async fn stream_attempt(
        &self,
        mi: usize,
        req: &LlmRequest,
        s: &mut Streaming<'_>,
        room: Option<(u64, crate::resilience::budget::BudgetExceeded)>,
        spend: &Spend,
        mut head: StreamHead,
    ) -> Attempted {
        let p = &self.providers[self.models[mi].provider];
        let opened = crate::provider::within(p.timeout, "provider call", p.client.open(req)).await;
        let live = match opened {
            // Answered whole (no content to stream, or a model that does
            // not stream): its pieces are written from the answer.
            Ok(crate::provider::Opened::Whole(resp)) => {
                let pieces = resp.reply().deltas().into_iter().map(Piece::said).collect();
                return Attempted::Answer(resp, pieces);
            }
            Ok(crate::provider::Opened::Live(live)) => live,
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
        match s.pump(live, room, spend, head).await {
            Pumped::Whole(resp, held) => Attempted::Answer(resp, held),
            Pumped::Broke(e) => Attempted::Failed(e),
            Pumped::OverBudget(u, why) => Attempted::OverBudget(u, why),
        }
    }

    /// What a client is told as model `mi`'s answer starts streaming.
    fn stream_head_of(&self, call: &LlmCall<'_>, mi: usize, tally: &Tally) -> StreamHead {
        let primary = call.route.chain[0];
        let mut chain: Vec<String> = tally.hops.iter().map(|h| self.hop_label(h)).collect();
        chain.push(self.models[mi].answered_label.to_string());
        let q = self.models[mi].cfg.quality / self.models[primary].cfg.quality.max(1e-9);
        StreamHead {
            level: if mi == primary && tally.hops.is_empty() {
                Level::None
            } else {
                Level::Fallback
            },
            chain,
            quality: (q.min(1.0) * 100.0).round() / 100.0,
            attempts: tally.attempts,
            id: String::new(),
            model: self.models[mi].name.to_string(),
        }
    }

    /// [`Runner::stream_head_of`] for a whole answer.
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

/// Why an attempt was not admitted.
pub(super) enum Refusal {
    /// A breaker is open.
    Open,
    /// No rate-limit capacity in time.
    Rate,
    /// A budget refused.
    Budget(BudgetExceeded),
}

/// Breaker probes, a rate-limit reservation and a budget reservation, to settle.
pub(super) type Permits = (
    crate::resilience::breaker::Permit,
    crate::resilience::breaker::Permit,
    crate::resilience::limiter::LimitPermit,
    crate::resilience::budget::Reservation,
);

/// What one attempt spent, and how it went.
pub(super) struct Spent<'r> {
    pub usage: crate::provider::Usage,
    pub rate: &'r RateFeedback,
    /// How it failed (`None`: it did not).
    pub failure: Option<FailureKind>,
    pub tokens_per_s: Option<f64>,
    pub latency: Duration,
    pub end: tokio::time::Instant,
}

/// How one attempt ended.
enum Attempted {
    /// An answer (and, streamed, the pieces still to send).
    Answer(LlmResponse, Vec<crate::provider::Piece>),
    /// A failure.
    Failed(ProviderError),
    /// Cut at the user's hard budget.
    OverBudget(crate::provider::Usage, crate::resilience::budget::BudgetExceeded),
}

/// What one attempt holds between admission and settlement: breaker probe
/// slots, a rate-limit reservation, a budget reservation. Dropped without
/// [`Held::disarm`] it settles: refused before the call, everything is
/// given back; dropped mid-call (the client went away), the breakers'
/// probes are given back (the upstream did not fail) but the tokens are
/// charged: what the stream had used, else what was reserved (the
/// provider may bill the whole answer), so leaving early dodges no budget.
pub(super) struct Held<'a> {
    runner: &'a Runner,
    targets: [&'a super::registry::Target; 2],
    provider: &'a super::ProviderSlot,
    model: &'a ModelSlot,
    /// Set once the call is made: what it has used so far.
    pub(super) calling: Option<&'a Spend>,
    user: &'a str,
    probes: [Option<crate::resilience::breaker::Permit>; 2],
    permit: Option<crate::resilience::limiter::LimitPermit>,
    res: Option<crate::resilience::budget::Reservation>,
    /// Taken from the fleet's budget allowances (fleet mode).
    allowance: Option<crate::fleet::allowance::Reserved>,
}

impl Held<'_> {
    /// The breakers' permits of the call, for [`watched`].
    fn watched(&mut self) -> SmallVec<[(&Breaker, &mut Permit); 2]> {
        let targets = self.targets;
        self.probes
            .iter_mut()
            .zip(targets)
            .filter_map(|(p, t)| Some((&t.breaker, p.as_mut()?)))
            .collect()
    }

    /// Hands everything over for settlement with the call's actual usage.
    pub(super) fn disarm(mut self) -> Permits {
        let taken = (
            self.probes[0].take(),
            self.probes[1].take(),
            self.permit.take(),
            self.res.take(),
        );
        match taken {
            (Some(a), Some(b), Some(c), Some(d)) => (a, b, c, d),
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
        let r = self.runner;
        let Some(spend) = self.calling else {
            if let Some(p) = self.permit.take() {
                self.provider.limiter.release(p, r.clock.now());
            }
            if let Some(res) = self.res.take() {
                r.budgets.settle(res, 0, 0.0, r.clock.elapsed_ms());
            }
            r.settle_allowance(self.user, self.allowance.take(), 0, 0.0);
            return;
        };
        let (input, output) = spend.get().unwrap_or_else(|| {
            let est = self.permit.as_ref().map(|p| p.estimate()).unwrap_or_default();
            (est.input, est.output)
        });
        let (tokens, cost) = (input.saturating_add(output), self.model.cost(input, output));
        if let Some(p) = self.permit.take() {
            self.provider.limiter.settle(p, input, output, r.clock.now());
        }
        if let Some(res) = self.res.take() {
            r.budgets.settle(res, tokens, cost, r.clock.elapsed_ms());
        }
        r.settle_allowance(self.user, self.allowance.take(), tokens, cost);
    }
}

impl Runner {
    /// Fleet mode: gives what a call did not use back to the allowances.
    fn settle_allowance(
        &self,
        user: &str,
        reserved: Option<crate::fleet::allowance::Reserved>,
        tokens: u32,
        cost: f64,
    ) {
        if let (Some(a), Some(r)) = (self.allowances.get(), reserved) {
            a.settle(user, r, tokens, cost);
        }
    }

    /// Emits an attempt record when someone (the recorder) listens.
    pub(crate) fn announce_attempt(&self, make: impl FnOnce() -> Attempt) {
        if self.events.has_subscribers() {
            self.events.emit(EventKind::Attempt(Box::new(make())));
        }
    }
}

/// How a transport failure is named in traffic logs.
pub(crate) fn transport_name(k: ErrorKind) -> Option<&'static str> {
    match k {
        ErrorKind::Timeout => Some("timeout"),
        ErrorKind::Connect => Some("connect"),
        ErrorKind::Reset => Some("reset"),
        ErrorKind::Truncated => Some("truncated"),
        _ => None,
    }
}

/// Rate-limit feedback as the lower-case headers a log records.
pub(crate) fn rate_headers(r: &RateFeedback) -> BTreeMap<String, String> {
    let mut h = BTreeMap::new();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            h.insert(k.to_string(), v);
        }
    };
    put("retry-after-ms", r.retry_after.map(|d| d.as_millis().to_string()));
    put(
        "x-ratelimit-remaining-tokens",
        r.remaining_tokens.map(|v| v.to_string()),
    );
    put(
        "x-ratelimit-remaining-requests",
        r.remaining_requests.map(|v| v.to_string()),
    );
    put(
        "anthropic-ratelimit-input-tokens-remaining",
        r.remaining_input_tokens.map(|v| v.to_string()),
    );
    put(
        "anthropic-ratelimit-output-tokens-remaining",
        r.remaining_output_tokens.map(|v| v.to_string()),
    );
    put(
        "x-ratelimit-reset-tokens",
        r.reset_tokens.map(|d| format!("{}ms", d.as_millis())),
    );
    put(
        "x-ratelimit-reset-requests",
        r.reset_requests.map(|d| format!("{}ms", d.as_millis())),
    );
    h
}

/// The rate-limit feedback in a log's recorded headers: the inverse of
/// [`rate_headers`] (OpenAI's names and relative times, with Anthropic's
/// separate input and output limits), also reading a hand-written
/// `retry-after` (an HTTP date relative to `now_unix_ms`).
pub(crate) fn recorded_rate(h: &BTreeMap<String, String>, now_unix_ms: u64) -> RateFeedback {
    use crate::wire::headers::{anthropic_feedback, openai_feedback};
    let get = |k: &str| h.get(k).cloned();
    let anthropic = anthropic_feedback(&get, now_unix_ms);
    RateFeedback {
        remaining_input_tokens: anthropic.remaining_input_tokens,
        remaining_output_tokens: anthropic.remaining_output_tokens,
        ..openai_feedback(&get, now_unix_ms)
    }
}

/// The conversation cut down for a fallback hop: system messages and the
/// last user turn with what followed it.
fn trim(messages: &Arc<[Message]>) -> Arc<[Message]> {
    let Some(last_user) = messages.iter().rposition(|m| m.role == Role::User) else {
        return messages.clone();
    };
    if messages[..last_user].iter().all(|m| m.role.instructs()) {
        return messages.clone();
    }
    messages
        .iter()
        .enumerate()
        .filter(|(i, m)| m.role.instructs() || *i >= last_user)
        .map(|(_, m)| m.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn recorded_headers_give_back_the_feedback_they_were_written_from() {
        let full = RateFeedback {
            remaining_tokens: Some(1_000),
            remaining_input_tokens: Some(700),
            remaining_output_tokens: Some(300),
            remaining_requests: Some(9),
            reset_tokens: Some(Duration::from_millis(1_500)),
            reset_requests: Some(Duration::from_millis(250)),
            retry_after: Some(Duration::from_millis(4_000)),
        };
        let anthropic = RateFeedback {
            remaining_input_tokens: Some(5),
            ..RateFeedback::default()
        };
        for r in [full, anthropic, RateFeedback::default()] {
            assert_eq!(recorded_rate(&rate_headers(&r), 0), r);
        }
    }
}
