//! One LLM call through the route's fallback chain: plan (skip models whose
//! breaker is open or that break the latency SLA; prefer cheap tiers under
//! budget pressure), then per model: budget reservation → limiter → breakers
//! → provider call with retries → settle and calibrate.

use super::{ModelSlot, Runner};
use crate::provider::{ErrorKind, LlmRequest, LlmResponse, Message, Role, ToolSpec};
use crate::resilience::breaker::{CallRecord, FailureKind};
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
        let route = call.route;
        let order = self.plan(call);
        let factor = route.cfg.max_tokens_factor;
        let sla = route.cfg.latency_sla_ms;
        let mut hop_no = 0i32;
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
            let max_tokens = ((call.max_tokens as f64 * factor.powi(hop_no)).round() as u32).max(16);
            let trimmed = hop_no > 0 && route.cfg.trim_prompt_on_fallback;
            let messages = if trimmed {
                trim(&call.messages)
            } else {
                call.messages.clone()
            };
            let req = LlmRequest {
                request_id: call.request_id,
                step: call.step,
                attempt: 0,
                model: m.api_name.clone(),
                own_messages: !trimmed || Arc::ptr_eq(&messages, &call.messages),
                messages,
                tools: call.tools.clone(),
                max_tokens,
                params: call.params.clone(),
                stream: call.stream,
            };
            match self.try_model(call, mi, req, rest, tally).await? {
                Ok((resp, tries)) => {
                    tally.hops.push(Hop {
                        model: mi,
                        result: HopResult::Ok,
                        tries,
                    });
                    return Ok((resp, mi));
                }
                Err(hop) => {
                    if hop.tries > 0 {
                        hop_no += 1;
                    }
                    tally.hops.push(hop)
                }
            }
        }
        Err(LlmFailure::Exhausted)
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
    ) -> Result<Result<(LlmResponse, u32), Hop>, LlmFailure> {
        let m = &self.models[mi];
        let p = &self.providers[m.provider];
        let (pt, mt) = (self.registry.get(p.target), self.registry.get(m.target));
        let chars = req.prompt_chars();
        let mut attempt = 0u32;
        let hop = |result, tries| {
            Ok(Err(Hop {
                model: mi,
                result,
                tries,
            }))
        };
        loop {
            let now = self.clock.now();
            let Ok(pp) = pt.breaker.try_acquire(now) else {
                pt.stats.rejected_open.inc();
                return hop(HopResult::Open, attempt);
            };
            let Ok(mp) = mt.breaker.try_acquire(now) else {
                pt.breaker.cancel(pp);
                mt.stats.rejected_open.inc();
                return hop(HopResult::Open, attempt);
            };
            // From here on what the attempt holds is released if the caller
            // goes away (a gateway client disconnects) before it settles.
            let mut held = Held {
                runner: self,
                targets: [pt, mt],
                provider: p,
                user: call.user,
                probes: [Some(pp), Some(mp)],
                permit: None,
                res: None,
                allowance: None,
            };
            let now = match p.limiter.try_acquire(chars, req.max_tokens, now) {
                Ok(permit) => {
                    held.permit = Some(permit);
                    now
                }
                Err(_) if !self.any_admits(rest) => {
                    held.permit = Box::pin(p.limiter.acquire(chars, req.max_tokens)).await.ok();
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
                return hop(HopResult::Rate, attempt);
            };
            match self.budgets.reserve(
                call.user,
                est.total(),
                m.cost(est.input, est.output),
                self.clock.ms_at(now),
            ) {
                Ok(r) => held.res = Some(r),
                Err(e) => return Err(LlmFailure::Budget(e)),
            };
            // Fleet mode: the user's budget as the whole fleet has spent it.
            if let Some(a) = self.allowances.get() {
                let r = Box::pin(a.reserve(call.user, est.total(), m.cost(est.input, est.output)))
                    .await
                    .map_err(LlmFailure::Budget)?;
                held.allowance = Some(r);
            }
            pt.stats.attempts.inc();
            mt.stats.attempts.inc();
            tally.attempts += 1;
            req.attempt = attempt;
            let result = p.client.complete_within(&req, p.timeout).await;
            let allowance = held.allowance.take();
            let (pp, mp, permit, res) = held.disarm();
            let end = self.clock.now();
            let latency = end.saturating_duration_since(now);
            let end_ms = self.clock.ms_at(end);
            let lat_ms = latency.as_millis() as u64;
            for t in [pt, mt] {
                t.stats.latency_ms_sum.add(lat_ms);
            }
            let old = m.latency_ms.load(Ordering::Relaxed);
            m.latency_ms.store(
                if old == 0 { lat_ms } else { (old * 4 + lat_ms) / 5 },
                Ordering::Relaxed,
            );
            match result {
                Ok(resp) => {
                    let u = resp.usage;
                    let tokens = u.input + u.output;
                    let cost = m.cost(u.input, u.output);
                    p.limiter.settle(permit, u.input, u.output, end);
                    p.limiter.calibrate(&resp.rate, end);
                    self.budgets.settle(res, tokens, cost, end_ms);
                    self.settle_allowance(call.user, allowance, tokens, cost);
                    tally.tokens += tokens as u64;
                    tally.cost += cost;
                    let semantic = resp
                        .tool_calls
                        .iter()
                        .find_map(|c| crate::tools::validate_call(c, &req.tools).err());
                    let slow_tokens = resp.tokens_per_s.is_some_and(|t| t < m.min_tokens_per_s);
                    let rec = CallRecord {
                        failure: semantic.as_ref().map(|_| FailureKind::Semantic),
                        latency,
                        tokens,
                        tokens_per_s: resp.tokens_per_s,
                    };
                    pt.breaker.record(pp, &rec, end);
                    mt.breaker.record(mp, &rec, end);
                    self.announce_attempt(|| Attempt {
                        request: call.request_id,
                        target: pt.name.clone(),
                        model: Some(m.name.to_string()),
                        status: Some(200),
                        transport: None,
                        latency_ms: lat_ms,
                        input_tokens: u.input,
                        output_tokens: u.output,
                        headers: rate_headers(&resp.rate),
                        semantic_failure: semantic.clone(),
                        tool_calls: resp.tool_calls.iter().map(|c| c.name.clone()).collect(),
                    });
                    if let Some(why) = semantic {
                        for t in [pt, mt] {
                            t.stats.failed.inc();
                            t.stats.semantic.inc();
                        }
                        tally.wasted += tokens as u64;
                        return hop(HopResult::Semantic(why), attempt + 1);
                    }
                    for t in [pt, mt] {
                        if slow_tokens {
                            t.stats.failed.inc()
                        } else {
                            t.stats.ok.inc()
                        }
                    }
                    return Ok(Ok((resp, attempt + 1)));
                }
                Err(e) => {
                    let u = e.usage;
                    let tokens = u.input + u.output;
                    let cost = m.cost(u.input, u.output);
                    p.limiter.settle(permit, u.input, u.output, end);
                    if e.kind == ErrorKind::RateLimited {
                        p.limiter.count_rate_limited();
                    }
                    p.limiter.calibrate(&e.rate, end);
                    self.budgets.settle(res, tokens, cost, end_ms);
                    self.settle_allowance(call.user, allowance, tokens, cost);
                    tally.tokens += tokens as u64;
                    tally.wasted += tokens as u64;
                    tally.cost += cost;
                    let rec = CallRecord {
                        failure: Some(e.kind.failure()),
                        latency,
                        tokens,
                        tokens_per_s: None,
                    };
                    let tripped = [pt.breaker.record(pp, &rec, end), mt.breaker.record(mp, &rec, end)];
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
                        input_tokens: u.input,
                        output_tokens: u.output,
                        headers: rate_headers(&e.rate),
                        semantic_failure: None,
                        tool_calls: Vec::new(),
                    });
                    for t in [pt, mt] {
                        t.stats.failed.inc();
                        if e.kind == ErrorKind::Timeout {
                            t.stats.timeouts.inc();
                        }
                        if rec.failure == Some(FailureKind::Client) {
                            t.stats.bad_request.inc();
                        }
                    }
                    if e.kind == ErrorKind::Unsupported {
                        return hop(HopResult::Unsupported(e.message), attempt);
                    }
                    // The client's own body refused as malformed goes back to it.
                    let passed_through = call.params.raw.is_some() && p.client.wire() == Some(call.params.wire);
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
}

/// What one attempt holds between admission and settlement: breaker probe
/// slots, a rate-limit reservation, a budget reservation. Dropped without
/// [`Held::disarm`] (a refusal, or the request's future dropped mid-call),
/// it gives everything back, so an abandoned request leaks nothing.
struct Held<'a> {
    runner: &'a Runner,
    targets: [&'a super::registry::Target; 2],
    provider: &'a super::ProviderSlot,
    user: &'a str,
    probes: [Option<crate::resilience::breaker::Permit>; 2],
    permit: Option<crate::resilience::limiter::LimitPermit>,
    res: Option<crate::resilience::budget::Reservation>,
    /// Taken from the fleet's budget allowances (fleet mode).
    allowance: Option<crate::fleet::allowance::Reserved>,
}

impl Held<'_> {
    /// Hands everything over for settlement with the call's actual usage.
    #[allow(clippy::type_complexity)]
    fn disarm(
        mut self,
    ) -> (
        crate::resilience::breaker::Permit,
        crate::resilience::breaker::Permit,
        crate::resilience::limiter::LimitPermit,
        crate::resilience::budget::Reservation,
    ) {
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
        if let Some(p) = self.permit.take() {
            self.provider.limiter.release(p, r.clock.now());
        }
        if let Some(res) = self.res.take() {
            r.budgets.settle(res, 0, 0.0, r.clock.elapsed_ms());
        }
        r.settle_allowance(self.user, self.allowance.take(), 0, 0.0);
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
