//! One LLM call through the route's fallback chain: the plan (the route's
//! models the caller may reach, cheap tiers first under budget pressure)
//! and the walk along it: a model of the wrong API or over the latency SLA
//! skipped, the output cap lowered and the prompt trimmed on each hop, a
//! cut stream continued by the next model; each model tried as
//! `model.rs` does.

use super::model::Hopped;
use super::{Calls, HopResult, LlmCall, LlmFailure, Tally, Tried};
use crate::provider::{ErrorKind, LlmRequest, LlmResponse, Message, ProviderError, Role, Usage};
use crate::runner::stream::Streaming;
use crate::telemetry::events::StepKind;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Calls<'_> {
    /// The order in which the route's models are tried now: cheaper tiers
    /// first under global budget pressure.
    /// Models the caller may not reach (see [`LlmCall::reach`]) are left out.
    pub(super) fn plan<'a>(&self, call: &LlmCall<'a>) -> std::borrow::Cow<'a, [usize]> {
        use std::borrow::Cow;
        let route = call.route;
        let chain = if call.only_first {
            &route.chain[..1]
        } else {
            &route.chain[..]
        };
        let mut order = match call.reach {
            Some(reach) if chain.iter().any(|m| !reach.contains(m)) => {
                Cow::Owned(chain.iter().copied().filter(|m| reach.contains(m)).collect())
            }
            _ => Cow::Borrowed(chain),
        };
        if !call.only_first && self.budgets.pressure() > self.cfg.budgets.soft_ratio {
            order.to_mut().sort_by_key(|&m| self.catalog.models[m].cfg.tier);
        }
        order
    }

    /// Runs one LLM call through the chain, streaming the answer to
    /// `streaming` as it arrives when there is one (retries and fallback
    /// happen before its first byte; after it, a cut answer is continued
    /// by the next model where the route says `stream_resume`). A whole,
    /// tool-free call on a route that hedges is hedged (`hedge.rs`).
    pub(in crate::runner) async fn call(
        &self,
        call: &LlmCall<'_>,
        tally: &mut Tally,
        streaming: Option<&mut Streaming<'_>>,
    ) -> Result<(LlmResponse, usize), LlmFailure> {
        if streaming.is_none() {
            if let Some(after) = self.hedge_delay(call) {
                return self.hedged(call, tally, after).await;
            }
        }
        self.walk(call, tally, streaming, None).await
    }

    /// The walk along the chain [`Calls::call`] describes;
    /// `leg`, a hedged call's, says when the other leg answered first and
    /// this walk is cancelled (what its call in flight is recorded as cut
    /// by), and is told what that call was charged.
    pub(super) async fn walk(
        &self,
        call: &LlmCall<'_>,
        tally: &mut Tally,
        mut streaming: Option<&mut Streaming<'_>>,
        leg: Option<&super::Leg>,
    ) -> Result<(LlmResponse, usize), LlmFailure> {
        let route = call.route;
        let order = self.plan(call);
        let factor = route.cfg.max_tokens_factor;
        let sla = route.cfg.latency_sla_ms;
        let mut hop_no = 0i32;
        let first_hop = tally.hops.len();
        tally.too_large = None;
        // The answer cut mid-stream being continued, and how it was cut.
        let mut cut: Option<ProviderError> = None;
        // What the last cut attempt used, for the usage the client is told.
        let mut carry = Usage::default();
        'models: for (pos, &mi) in order.iter().enumerate() {
            // No attempt starts once the request's deadline has passed.
            if call.deadline.is_some_and(|d| self.clock.now() >= d) {
                break;
            }
            let m = &self.catalog.models[mi];
            let rest = &order[pos + 1..];
            // A model of another API than the client's, asked for what only
            // the client's API can do, is not tried.
            let api = self.catalog.providers[m.provider]
                .client
                .wire()
                .unwrap_or(call.params.wire);
            if let Some(why) = call.params.cannot_honour(api) {
                self.announce_step(
                    call.request_id,
                    self.catalog.model_target(mi),
                    StepKind::Unsupported { why: why.clone() },
                );
                tally.hops.push(Tried {
                    model: mi,
                    result: HopResult::Unsupported(why),
                    tries: 0,
                });
                continue;
            }
            if sla > 0 && m.latency_ms.load(Ordering::Relaxed) > sla && self.catalog.any_admits(rest, self.clock.now())
            {
                self.announce_step(call.request_id, self.catalog.model_target(mi), StepKind::SlaSkipped);
                tally.hops.push(Tried {
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
            let conversation = if trimmed {
                trim(&call.messages)
            } else {
                call.messages.clone()
            };
            // A cut answer is continued as a prefill where the model takes
            // one, else asked for in a user turn; a model that refuses the
            // prefill is asked again at once the other way.
            let mut prefill = m.prefill.load(Ordering::Relaxed);
            loop {
                let mut messages = conversation.clone();
                let mut own_messages = !trimmed || Arc::ptr_eq(&messages, &call.messages);
                if let Some(s) = streaming.as_deref_mut().filter(|_| cut.is_some()) {
                    let spent = std::mem::take(&mut carry);
                    messages = continuation(&messages, s.resume(&m.api_name, spent, prefill), prefill);
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
                tally.trying = Some(mi);
                let mut hop = match self
                    .try_model(call, (mi, req, rest), tally, streaming.as_deref_mut(), leg)
                    .await
                {
                    Hopped::Stop(failure) => return Err(failure),
                    Hopped::Answered(mut resp, tries) => {
                        let resumed = cut.is_some();
                        if let Some(s) = streaming.as_deref().filter(|_| resumed) {
                            // The client was sent every part: it is told of all.
                            let c = s.carried();
                            resp.usage.input = resp.usage.input.saturating_add(c.input);
                            resp.usage.output = resp.usage.output.saturating_add(c.output);
                        }
                        tally.hops.push(Tried {
                            model: mi,
                            result: if resumed { HopResult::Resumed } else { HopResult::Ok },
                            tries,
                        });
                        return Ok((resp, mi));
                    }
                    Hopped::Next(hop) => hop,
                };
                if hop.tries > 0 {
                    hop_no += 1;
                }
                let broke = match &mut hop.result {
                    HopResult::Cut(e) if cut.is_some() && prefill && refuses_prefill(e) => {
                        m.prefill.store(false, Ordering::Relaxed);
                        prefill = false;
                        hop.result = HopResult::Failed(e.kind, e.status);
                        tally.hops.push(hop);
                        continue;
                    }
                    HopResult::Cut(e) => Some(e.clone()),
                    _ => None,
                };
                // A continuation that did not line up: the client has the
                // text as it was cut, and the stream ends on that cut.
                if let HopResult::Unaligned(why) = hop.result {
                    tally.hops.push(hop);
                    let e = ProviderError::new(
                        ErrorKind::ServerError,
                        Some(200),
                        format!("the continuation by {} {why}", m.name),
                    );
                    return Err(LlmFailure::Cut(Box::new(unresumed(cut, e))));
                }
                // fusebox short of its own resources, or the caller gone (a
                // replayed departure): no other model helps.
                let own = matches!(
                    hop.result,
                    HopResult::Failed(ErrorKind::Local | ErrorKind::Left | ErrorKind::Drained, None)
                );
                tally.hops.push(hop);
                if own {
                    break 'models;
                }
                let Some(e) = broke else { continue 'models };
                match streaming.as_deref_mut() {
                    // A text answer cut mid-stream: the next model continues it.
                    Some(s)
                        if route.cfg.stream_resume
                            && s.resumable()
                            && self.catalog.any_admits(rest, self.clock.now()) =>
                    {
                        carry = e.usage;
                        cut.get_or_insert(*e);
                        continue 'models;
                    }
                    _ => return Err(LlmFailure::Cut(Box::new(unresumed(cut, *e)))),
                }
            }
        }
        // A request too long for every model it could go to is the
        // client's to shorten: it is told what the first model said.
        let too_large = |h: &Tried| {
            matches!(
                h.result,
                HopResult::Failed(ErrorKind::TooLarge, _) | HopResult::Unsupported(_)
            )
        };
        // One whose deadline passed first is the caller's to give more time.
        let late = call.deadline.is_some_and(|d| self.clock.now() >= d)
            || tally.hops[first_hop..]
                .iter()
                .any(|h| h.result == HopResult::Failed(ErrorKind::Deadline, None));
        match (cut, tally.too_large.take()) {
            (Some(e), _) => Err(LlmFailure::Cut(Box::new(e))),
            (None, Some(e)) if tally.hops[first_hop..].iter().all(too_large) => Err(LlmFailure::Upstream(e)),
            (None, _) if late => Err(LlmFailure::Deadline),
            (None, _) => Err(LlmFailure::Exhausted),
        }
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

/// What a model after the cut is asked, to continue `sent`: the
/// conversation, the answer so far as the assistant's turn and, where the
/// model takes no prefill, a user turn asking for the rest.
fn continuation(conversation: &Arc<[Message]>, sent: &str, prefill: bool) -> Arc<[Message]> {
    let answer = Message::assistant(sent, Vec::new());
    let ask = (!prefill).then(|| Message::user(crate::provider::CONTINUE));
    conversation.iter().cloned().chain([answer]).chain(ask).collect()
}

/// Whether a model's 400 says it takes no assistant prefill.
fn refuses_prefill(e: &ProviderError) -> bool {
    e.kind == ErrorKind::BadRequest && e.message.to_ascii_lowercase().contains("prefill")
}

/// The failure a cut answer ends with when it could not be continued: the
/// first cut, naming what then failed.
fn unresumed(first: Option<ProviderError>, last: ProviderError) -> ProviderError {
    match first {
        Some(mut e) => {
            e.message = format!("{} (not resumed: {})", e.message, last.message);
            e
        }
        None => last,
    }
}
