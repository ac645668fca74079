//! One chat completion on behalf of an outside agent (the gateway): the
//! agent runs its own loop and tools, fusebox runs the call through session
//! quota, budgets, limiter, breakers, retries and the route's fallback chain,
//! streams the answer on as it arrives when the client asked for a stream,
//! and ends it in exactly one outcome like any other request.

use super::calls::{Calls, HopResult, LlmCall, LlmFailure, Tally};
use super::ending::Ended;
use super::scope::{Scope, Tallied};
use super::stream::{StreamSink, Streaming};
use super::Runner;
use crate::outcome::Outcome;
use crate::provider::{ErrorKind, LlmResponse, Message, Piece, ProviderError, ToolSpec};
use crate::request::{AgentRequest, Via};
use crate::resilience::session::InSession;
use crate::telemetry::events::Arrival;
use crate::wire::Api;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A chat completion asked for by an outside agent.
#[derive(Clone, Debug)]
pub struct ChatRequest {
    /// Unique id.
    pub id: u64,
    /// Who pays.
    pub user: String,
    /// Whom the caller said it is for, where its key allows a sub-user
    /// (recorded, not billed).
    pub sub_user: Option<String>,
    /// The conversation the client names (session quotas apply to it); a
    /// call without one is a conversation of its own, under no quota.
    pub session: Option<String>,
    /// What the client's `model` names: a route, or a model (see
    /// [`Catalog::route_for`](super::Catalog::route_for)).
    pub route: String,
    /// The conversation.
    pub messages: Arc<[Message]>,
    /// Tools the model may call (its tool calls are validated against these).
    pub tools: Arc<[ToolSpec]>,
    /// Output cap.
    pub max_tokens: u32,
    /// What the client asked besides the conversation, and its own body.
    pub params: Arc<crate::wire::Params>,
    /// The client asked for a stream.
    pub stream: bool,
    /// Models after the first may answer (`x-fusebox-fallback: none` forbids).
    pub fallback: bool,
    /// The only models the caller's key may reach, on every hop (`None`: any).
    pub reach: Option<Arc<[usize]>>,
    /// The longest the client lets the call take (ms), where it says
    /// (`x-fusebox-deadline-ms`); the route's `deadline_ms` bounds it too.
    pub deadline_ms: Option<u64>,
    /// Its name outside (`x-fusebox-request-id`), carried into its outcome.
    pub key: Option<compact_str::CompactString>,
    /// How urgent it is where capacity is short (`None`: as its route says).
    pub priority: Option<crate::config::Priority>,
    /// Whose fair share its calls use, where the operator's
    /// `tenant_header` named one (`None`: its user's).
    pub tenant: Option<String>,
}

/// How a chat completion ended.
#[derive(Debug)]
pub enum ChatEnd {
    /// A model answered, whole (`model` is the configured model name).
    Answer {
        /// The answer.
        response: LlmResponse,
        /// Which model of the chain answered.
        model: String,
        /// Another than the route's first choice answered, or continued
        /// an answer another cut off.
        fallback: bool,
    },
    /// The answer streamed to the client and ended whole; `tail` (the
    /// finish and terminator, `(API, piece, own)`) is still to be written.
    Streamed {
        /// The answer.
        response: LlmResponse,
        /// Which model of the chain answered.
        model: String,
        /// As for [`ChatEnd::Answer`].
        fallback: bool,
        /// The end of the stream.
        tail: Vec<(Api, Piece, bool)>,
    },
    /// The client's stream broke after its first byte: it ends on an error.
    Cut {
        /// What to tell the client (names the budget, for a budget cut).
        reason: String,
        /// What cut it, for the error's type in the client's API.
        by: CutBy,
    },
    /// A budget or the session quota refused the call.
    Refused {
        /// What refused, in words (names the budget or quota).
        reason: String,
        /// When trying again may succeed.
        retry_after: Duration,
    },
    /// No model had rate-limit capacity in time.
    RateLimited {
        /// Which limits, in words.
        reason: String,
        /// When trying again may succeed.
        retry_after: Duration,
    },
    /// Every model was unavailable; `message` is the graceful-failure text.
    Unavailable {
        /// What to tell the user.
        message: String,
    },
    /// The upstream refused the client's request as malformed; its error
    /// goes back to the client as it was.
    Upstream(Box<ProviderError>),
    /// The request's deadline passed before any model answered: the
    /// caller's to give more time (not a provider's failure).
    Deadline {
        /// Which deadline, in words.
        reason: String,
    },
    /// The request can never be served as asked (it alone is more than a
    /// budget allows): the client's mistake, not a reason to wait.
    Unservable {
        /// Why, and what to change.
        reason: String,
        /// The request's field at fault, where one is.
        param: Option<&'static str>,
    },
}

/// A chat completion's end and its outcome.
#[derive(Debug)]
pub struct Chat {
    /// How it ended.
    pub end: ChatEnd,
    /// The outcome (level, chain, quality, attempts), as for every request.
    pub outcome: Outcome,
}

/// What cut a stream short after its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutBy {
    /// The upstream's fault, of this kind.
    Upstream(ErrorKind),
    /// A token budget the stream would pass.
    Budget,
}

/// A chat call as the agent request it stands for, for the recorder.
fn arrival(req: &ChatRequest, models: &[super::ModelSlot]) -> Arrival {
    Arrival {
        request: AgentRequest {
            id: req.id,
            user: req.user.as_str().into(),
            sub_user: req.sub_user.as_deref().map(Into::into),
            session: match &req.session {
                Some(s) => s.as_str().into(),
                None => crate::request::own_session(&req.user, req.id),
            },
            route: req.route.as_str().into(),
            messages: req.messages.clone(),
            tools: req.tools.iter().map(|t| t.name.to_string()).collect(),
            critical_tools: Vec::new(),
            max_tokens: req.max_tokens,
            max_steps: 1,
            priority: req.priority,
            tenant: req.tenant.as_deref().map(Into::into),
            choices: req.params.choices,
            reach: req
                .reach
                .as_ref()
                .map(|r| r.iter().map(|&m| models[m].name.as_ref().into()).collect()),
            stream: req.stream,
        },
        via: Via::Gateway,
    }
}

impl Runner {
    /// Runs one chat completion to its end, streaming the answer to `sink`
    /// as it arrives when one is given. Dropping the future (the client
    /// went away) cancels the upstream call and releases what it reserved.
    pub async fn chat(&self, req: ChatRequest, sink: Option<&mut dyn StreamSink>) -> Chat {
        let mut run = Tallied::new(Scope::begin(self, req.id, &req.user, || {
            arrival(&req, &self.catalog.models)
        }));
        let mut streaming = sink.map(Streaming::new);
        let entered = req
            .session
            .as_ref()
            .map(|s| self.sessions.enter(&req.user, s, self.clock.elapsed_ms()));
        let end = match entered {
            Some(Err(q)) => ChatEnd::Refused {
                reason: format!("{q}"),
                retry_after: Duration::from_secs(60),
            },
            // A cancelled call leaves the session too, when `session` drops.
            Some(Ok(session)) => {
                let end = self
                    .calls()
                    .chat_call(&req, Some(&session), &mut run.tally, streaming.as_mut())
                    .await;
                session.leave(self.clock.elapsed_ms());
                end
            }
            None => {
                self.calls()
                    .chat_call(&req, None, &mut run.tally, streaming.as_mut())
                    .await
            }
        };
        self.totals.wasted.fetch_add(run.tally.wasted, Ordering::Relaxed);
        let mut ended = Ended::from(&end);
        ended.chain = run.tally.hops.iter().map(|h| self.catalog.hop_of(h)).collect();
        ended.answer = match &end {
            // A resumed stream's answer is what the client was sent, begun
            // by one model and finished by another.
            ChatEnd::Streamed { .. } if streaming.as_ref().is_some_and(|s| s.resumed) => {
                streaming.as_ref().map(|s| Arc::from(s.sent_text.as_str()))
            }
            ChatEnd::Answer { response, .. } | ChatEnd::Streamed { response, .. } => Some(response.text.clone()),
            ChatEnd::Cut { .. } => streaming.as_ref().map(|s| Arc::from(s.sent_text.as_str())),
            _ => None,
        };
        if let ChatEnd::Answer { model, .. } | ChatEnd::Streamed { model, .. } = &end {
            let primary = self.catalog.route_for(&req.route).map(|r| r.chain[0]);
            let answered = self
                .catalog
                .models
                .iter()
                .position(|m| m.name.as_ref() == model.as_str());
            if let (Some(p), Some(a)) = (primary, answered) {
                ended.quality = self.catalog.quality_ratio(a, p);
            }
        }
        let mut outcome = run.outcome(ended);
        outcome.key.clone_from(&req.key);
        run.end(&outcome);
        Chat { end, outcome }
    }
}

impl Calls<'_> {
    /// Makes chat call `req` (in its session, where it has one) and says
    /// how it ended.
    async fn chat_call(
        &self,
        req: &ChatRequest,
        session: Option<&InSession<'_>>,
        tally: &mut Tally,
        mut streaming: Option<&mut Streaming<'_>>,
    ) -> ChatEnd {
        if let Some(Err(q)) = session.map(InSession::step) {
            return ChatEnd::Refused {
                reason: format!("{q}"),
                retry_after: Duration::from_secs(60),
            };
        }
        let Some(route) = self.catalog.route_for(&req.route) else {
            return ChatEnd::Unavailable {
                message: self.cfg.degradation.user_message.clone(),
            };
        };
        let mut call = LlmCall::new(
            req.id,
            &req.user,
            route,
            req.messages.clone(),
            req.tools.clone(),
            req.max_tokens,
        );
        call.params = req.params.clone();
        call.stream = Some(req.stream);
        call.only_first = !req.fallback;
        call.reach = req.reach.as_deref();
        // The caller's deadline, or the route's where that is sooner.
        let deadline = match (req.deadline_ms.filter(|&ms| ms > 0), route.cfg.deadline_ms) {
            (Some(ms), r) if r == 0 || ms <= r => Some(format!(
                "its deadline of {ms} ms ({}) passed before any model answered; allow more time",
                crate::wire::fusebox::DEADLINE_MS
            )),
            (_, 0) => None,
            (_, r) => Some(format!(
                "route `{}` answers within {r} ms (its deadline_ms) and no model answered in that time",
                req.route
            )),
        };
        let ms = [req.deadline_ms.unwrap_or(0), route.cfg.deadline_ms]
            .into_iter()
            .filter(|&ms| ms > 0)
            .min();
        call.deadline = ms.map(|ms| self.clock.now() + Duration::from_millis(ms));
        call.priority = req.priority.unwrap_or(call.priority);
        call.tenant = req.tenant.as_deref().unwrap_or(call.user);
        let result = self.call(&call, tally, streaming.as_deref_mut()).await;
        let started = streaming.as_ref().is_some_and(|s| s.started);
        match result {
            Ok((response, mi)) => {
                let u = response.usage;
                if let Some(s) = session {
                    s.add_tokens(u64::from(u.total()));
                }
                let model = String::from(&*self.catalog.models[mi].name);
                let fallback = super::ending::is_fallback(route.chain[0], mi, &tally.hops);
                match streaming.filter(|s| s.started) {
                    Some(s) => ChatEnd::Streamed {
                        response,
                        model,
                        fallback,
                        tail: std::mem::take(&mut s.tail),
                    },
                    None => ChatEnd::Answer {
                        response,
                        model,
                        fallback,
                    },
                }
            }
            Err(LlmFailure::Cut(e)) => ChatEnd::Cut {
                reason: e.message.clone(),
                by: CutBy::Upstream(e.kind),
            },
            Err(LlmFailure::OverBudget(e)) if started => {
                self.note_budget_rejection(&req.user, &e);
                ChatEnd::Cut {
                    reason: match e.budget {
                        Some(b) => format!(
                            "the stream was cut at the {} budget ({b} limit {:.0})",
                            e.whose(),
                            e.limit
                        ),
                        None => format!("the stream was cut: {e}"),
                    },
                    by: CutBy::Budget,
                }
            }
            Err(LlmFailure::Budget(e)) if e.never() => ChatEnd::Unservable {
                reason: e.to_string(),
                param: Some("max_tokens"),
            },
            // No model of the route can carry what was asked: no wait helps.
            Err(LlmFailure::Exhausted)
                if !tally.hops.is_empty()
                    && tally.hops.iter().all(|h| matches!(h.result, HopResult::Unsupported(_))) =>
            {
                let why: Vec<String> = tally
                    .hops
                    .iter()
                    .filter_map(|h| match &h.result {
                        HopResult::Unsupported(w) => Some(format!("{} {w}", self.catalog.models[h.model].name)),
                        _ => None,
                    })
                    .collect();
                ChatEnd::Unservable {
                    reason: format!(
                        "no model of route `{}` can serve this request as asked ({}); ask for what their API offers, or name a model of your client's API",
                        req.route,
                        why.join("; ")
                    ),
                    param: None,
                }
            }
            Err(LlmFailure::Budget(e) | LlmFailure::OverBudget(e)) => {
                self.note_budget_rejection(&req.user, &e);
                ChatEnd::Refused {
                    retry_after: e.retry_after(),
                    reason: e.to_string(),
                }
            }
            Err(LlmFailure::Exhausted)
                if !tally.hops.is_empty()
                    && tally
                        .hops
                        .iter()
                        .all(|h| matches!(h.result, HopResult::Rate | HopResult::Shed(..))) =>
            {
                match tally.hops.last().map(|h| (h.model, &h.result)) {
                    Some((mi, HopResult::Shed(p, why))) => ChatEnd::RateLimited {
                        reason: format!(
                            "shed: provider `{}` is short of capacity and this {} call {} in its queue (more urgent calls and other tenants' fair shares go first)",
                            self.catalog.providers[self.catalog.models[mi].provider].name,
                            p.name(),
                            why.label(),
                        ),
                        retry_after: Duration::from_millis(self.cfg.limiter.queue.deadline_ms.of(*p))
                            .max(Duration::from_secs(1)),
                    },
                    _ => ChatEnd::RateLimited {
                        reason: format!(
                            "rate limit: no model of route `{}` has capacity under its provider's limits right now",
                            req.route
                        ),
                        retry_after: Duration::from_secs(1),
                    },
                }
            }
            // A replayed call its client left, or the drain ended.
            Err(LlmFailure::Exhausted)
                if tally
                    .hops
                    .iter()
                    .any(|h| matches!(h.result, HopResult::Failed(ErrorKind::Left | ErrorKind::Drained, _))) =>
            {
                let drained = tally
                    .hops
                    .iter()
                    .any(|h| h.result == HopResult::Failed(ErrorKind::Drained, None));
                ChatEnd::Unavailable {
                    message: if drained {
                        super::scope::DRAINED.into()
                    } else {
                        super::scope::LEFT.into()
                    },
                }
            }
            Err(LlmFailure::Exhausted)
                if tally
                    .hops
                    .iter()
                    .any(|h| h.result == HopResult::Failed(ErrorKind::Local, None)) =>
            {
                ChatEnd::Unavailable {
                    message: "fusebox is out of file descriptors and refused this call before reaching any provider (its own limit, not a provider's); try again shortly".into(),
                }
            }
            Err(LlmFailure::Exhausted) => {
                // Answers that failed the request's own checks (a tool its
                // schema does not allow, say) are the client's to fix: name them.
                let mut why: Vec<String> = Vec::new();
                for h in &tally.hops {
                    if let HopResult::Semantic(w) = &h.result {
                        let said = format!("{}: {w}", self.catalog.models[h.model].name);
                        if !why.contains(&said) && why.len() < 3 {
                            why.push(said);
                        }
                    }
                }
                let mut message = self.cfg.degradation.user_message.clone();
                if !why.is_empty() {
                    message.push_str(&format!(
                        " Every answer failed the request's own checks (its tools and their schemas): {}",
                        why.join("; ")
                    ));
                }
                ChatEnd::Unavailable { message }
            }
            Err(LlmFailure::Upstream(e)) => ChatEnd::Upstream(e),
            Err(LlmFailure::Deadline) => ChatEnd::Deadline {
                reason: deadline.unwrap_or_else(|| "its deadline passed".into()),
            },
        }
    }
}
