//! One LLM call through the route's fallback chain: plan (skip models whose
//! breaker is open or that break the latency SLA; prefer cheap tiers under
//! budget pressure), then per model: budget reservation → limiter → breakers
//! → provider call with retries → settle and calibrate.

use super::admission::{Refusal, Spent};
use super::stream::{Pumped, Spend, StreamHead, Streaming};
use super::{ModelSlot, Runner};
use crate::outcome::Level;
use crate::provider::{ErrorKind, LlmRequest, LlmResponse, Message, Piece, ProviderError, Role};
use crate::resilience::breaker::{watched, FailureKind};
use crate::resilience::limiter::RateFeedback;
use crate::telemetry::events::Attempt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

pub use super::call::{own_params, Hop, HopResult, LlmCall, LlmFailure, Tally};

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
                        target: pt.target.clone(),
                        model: Some(m.name.to_string()),
                        status: Some(200),
                        transport: None,
                        latency_ms: lat_ms,
                        input_tokens: resp.usage.input,
                        output_tokens: resp.usage.output,
                        rate: resp.rate,
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
                    if let (Some(fleet), Some(_)) = (self.shared.get(), e.status) {
                        for (t, why) in [pt, mt].into_iter().zip(tripped) {
                            if let Some(why) = why {
                                fleet.trip(t.target.clone(), why);
                            }
                        }
                    }
                    self.announce_attempt(|| Attempt {
                        request: call.request_id,
                        target: pt.target.clone(),
                        model: Some(m.name.to_string()),
                        status: e.status,
                        transport: e.kind.transport(),
                        latency_ms: lat_ms,
                        input_tokens: e.usage.input,
                        output_tokens: e.usage.output,
                        rate: e.rate,
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
                    let key = call.request_id ^ ((call.step as u64) << 40);
                    let Some(wait) = self.retry_wait(&e, attempt, self.admits(m, end), key, end) else {
                        return hop(HopResult::Failed(e.kind, e.status), attempt + 1);
                    };
                    pt.stats.retries.inc();
                    mt.stats.retries.inc();
                    Box::pin(tokio::time::sleep(wait)).await;
                    attempt += 1;
                }
            }
        }
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

/// The conversation cut down for a fallback hop: system messages and the
/// last user turn with what followed it.
/// How one attempt ended.
enum Attempted {
    /// An answer (and, streamed, the pieces still to send).
    Answer(LlmResponse, Vec<crate::provider::Piece>),
    /// A failure.
    Failed(ProviderError),
    /// Cut at the user's hard budget.
    OverBudget(crate::provider::Usage, crate::resilience::budget::BudgetExceeded),
}

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
