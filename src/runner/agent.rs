//! The agent loop (the seeds' seven layers): session quota, then LLM call →
//! tool calls → LLM call … up to `max_steps`, degrading in the seeds' order
//! (model fallback, feature degradation, tool skip, cache, defer, partial,
//! graceful failure), and ending in exactly one outcome.

use super::calls::{Calls, HopResult, LlmCall, LlmFailure, Tally, ToolUse};
use super::ending::Ended;
use super::scope::Scope;
use super::Runner;
use crate::outcome::{Hop, HopEnd, Level, Outcome};
use crate::provider::{Message, Role, ToolCall, ToolSpec};
use crate::request::{AgentRequest, Via};
use crate::resilience::defer::Deferred;
use crate::resilience::session::InSession;
use crate::telemetry::events::Arrival;
use crate::wire::{Params, ToolChoice};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Hashes answer-cache keys: a fixed-key ahash (the keys live only in this
/// process's cache) is many times faster than FNV on a long prompt.
static ANSWER_KEYS: ahash::RandomState = ahash::RandomState::with_seeds(1, 2, 3, 4);

/// Default LLM steps of a request that does not say.
const DEFAULT_STEPS: u32 = 4;

/// The degradation metadata being built for one request.
struct Trail {
    /// The request's key in the answer cache ([`answer_key`]).
    answer_key: u64,
    tally: Tally,
    chain: Vec<crate::outcome::Hop>,
    hops_seen: usize,
    missing: Vec<String>,
    quality: f64,
    model_q: f64,
    fallback: bool,
    partial: bool,
    stale_ms: Option<u64>,
}

impl Trail {
    fn new(answer_key: u64) -> Self {
        Self {
            answer_key,
            tally: Tally::default(),
            chain: Vec::new(),
            hops_seen: 0,
            missing: Vec::new(),
            quality: 1.0,
            model_q: 1.0,
            fallback: false,
            partial: false,
            stale_ms: None,
        }
    }

    /// Adds a step to the chain; a step already in it (the same hop on a
    /// later agent step) is not repeated.
    fn push(&mut self, label: crate::outcome::Hop) {
        if !self.chain.contains(&label) {
            self.chain.push(label);
        }
    }

    /// The request answered with `text`: partial where something it
    /// needed was missing (its user told what), a fallback where another
    /// model or a cached result gave it (its user told how old).
    fn answered(&self, text: Arc<str>) -> Ended {
        let told = match (self.partial, self.stale_ms) {
            (true, _) => Some(format!(
                "Some information is unavailable right now ({}); this answer may be incomplete.",
                self.missing.join(", ")
            )),
            (_, Some(ms)) => Some(format!(
                "This answer uses data from {} minutes ago and may be out of date.",
                ms.div_ceil(60_000)
            )),
            _ => None,
        };
        Ended {
            user_message: told,
            ..Ended::answered(Some(text), self.fallback, self.partial)
        }
    }

    fn miss(&mut self, what: &str) {
        if !self.missing.iter().any(|m| m == what) {
            self.missing.push(what.to_string());
        }
        self.partial = true;
    }
}

/// The parameters of the agent loop's last call: no more tool calls.
fn no_more_tools() -> Arc<Params> {
    static NONE: std::sync::LazyLock<Arc<Params>> = std::sync::LazyLock::new(|| {
        Arc::new(Params {
            tool_choice: Some(ToolChoice::None),
            ..Params::default()
        })
    });
    NONE.clone()
}

/// `prefix` followed by the names of `calls`, comma-separated.
fn listed(prefix: &str, calls: &[ToolCall]) -> String {
    let mut s = String::with_capacity(prefix.len() + calls.iter().map(|c| c.name.len() + 2).sum::<usize>());
    s.push_str(prefix);
    for (i, c) in calls.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&c.name);
    }
    s
}

/// The answer when the model fails after tool calls: what the tools gave,
/// named (`otherwise` when no tool was called).
fn partial(calls: &[ToolCall], otherwise: &str) -> Arc<str> {
    if calls.is_empty() {
        otherwise.into()
    } else {
        listed("Partial result from tools: ", calls).into()
    }
}

/// The conversation so far: the request's messages, then those the agent
/// loop added (messages are shared, not copied); the request's own list
/// while the loop has added none.
fn conversation(req: &AgentRequest, added: &[Message]) -> Arc<[Message]> {
    if added.is_empty() {
        return req.messages.clone();
    }
    req.messages.iter().chain(added).cloned().collect()
}

/// A request deferred (what its user is told), or failed to be.
fn deferred(queued: Result<String, String>) -> Ended {
    match queued {
        Ok(told) => Ended::deferred(told),
        Err(why) => Ended::failed(Some(why)),
    }
}

impl Runner {
    /// Runs one agent request to its outcome.
    pub async fn run(&self, req: &AgentRequest) -> Outcome {
        self.run_keyed(req, answer_key(req)).await
    }

    /// [`Runner::run`], with the request's [`answer_key`] computed
    /// beforehand (a replay computes it on its log reader's thread, which
    /// has just written the prompt it hashes).
    pub async fn run_keyed(&self, req: &AgentRequest, answer_key: u64) -> Outcome {
        let scope = Scope::begin(self, req.id, &req.user, || Arrival {
            request: req.clone(),
            via: Via::Agent,
        });
        let mut trail = Trail::new(answer_key);
        let o = self.agent(req, true).run(scope.start(), &mut trail).await;
        scope.end(&o, &trail.tally);
        o
    }

    /// Re-drives one deferred request (or gives up on it); the level it
    /// ended with, or None if it stays queued.
    pub(crate) async fn redrive(&self, d: &Deferred, give_up: bool, force: bool) -> Option<Level> {
        let o = if give_up {
            None
        } else {
            let mut trail = Trail::new(answer_key(&d.request));
            Some(self.agent(&d.request, false).run(self.clock.now(), &mut trail).await)
        };
        self.deferral().finish(d, o.as_ref(), force)
    }

    /// The agent loop for `req`; `may_defer` is false when re-driving the
    /// spool.
    fn agent<'r>(&'r self, req: &'r AgentRequest, may_defer: bool) -> Agent<'r> {
        Agent {
            r: self,
            calls: self.calls(),
            req,
            may_defer,
        }
    }

    /// One pass over the spool: re-drives requests whose dependencies
    /// recovered, up to 32 at a time; `force` ends every request (the last
    /// pass before exit). Returns how many requests ended.
    pub async fn redrive_deferred(self: &Arc<Self>, force: bool) -> usize {
        let Some(spool) = &self.spool else { return 0 };
        let due: Vec<_> = spool
            .pending()
            .into_iter()
            .filter_map(|d| Some((self.deferral().due(&d, force)?, d)))
            .collect();
        let mut ended = 0;
        let mut set = tokio::task::JoinSet::new();
        let mut due = due.into_iter();
        loop {
            while set.len() < 32 {
                let Some((give_up, d)) = due.next() else { break };
                let me = self.clone();
                set.spawn(async move {
                    let level = me.redrive(&d, give_up, force).await?;
                    if let Some(spool) = &me.spool {
                        if let Err(e) = spool.done(d.request.id, level.as_str()) {
                            tracing::error!(error = %e, "cannot record a deferred request's end");
                        }
                    }
                    Some(level)
                });
            }
            match set.join_next().await {
                Some(Ok(Some(_))) => ended += 1,
                Some(_) => {}
                None => break,
            }
        }
        ended
    }

    /// Re-drives the spool every `degradation.defer_retry_ms`, forever.
    pub async fn run_deferred_loop(self: Arc<Self>) {
        let every = std::time::Duration::from_millis(self.cfg.degradation.defer_retry_ms);
        loop {
            tokio::time::sleep(every).await;
            self.redrive_deferred(false).await;
        }
    }
}

/// One agent request's loop: what it borrows, the request, and whether it
/// may be deferred.
struct Agent<'r> {
    r: &'r Runner,
    calls: Calls<'r>,
    req: &'r AgentRequest,
    may_defer: bool,
}

impl Agent<'_> {
    /// Runs the loop once, starting `now`, on a fresh `trail` (its tally
    /// stays there for the caller). The outcome's latency runs from `now`
    /// to when the request left its session.
    async fn run(&self, now: tokio::time::Instant, trail: &mut Trail) -> Outcome {
        let req = self.req;
        let now_ms = self.r.clock.ms_at(now);
        let (ended, left) = match self.r.sessions.enter(&req.user, &req.session, now_ms) {
            Err(q) => (Ended::failed(Some(format!("Request refused: {q}."))), now),
            Ok(session) => {
                let end = self.steps(&session, now, trail).await;
                let left = self.r.clock.now();
                session.leave(self.r.clock.ms_at(left));
                (end, left)
            }
        };
        self.r.totals.wasted.fetch_add(trail.tally.wasted, Ordering::Relaxed);
        let ended = Ended {
            quality: trail.quality * trail.model_q,
            chain: std::mem::take(&mut trail.chain),
            missing: std::mem::take(&mut trail.missing),
            stale_ms: trail.stale_ms,
            ..ended
        };
        super::ending::outcome(
            req.id,
            &req.user,
            ended,
            &trail.tally,
            left.saturating_duration_since(now),
        )
    }

    /// The tools the model is offered: those of the request this agent
    /// has, less the non-critical ones whose breaker is open (or all of
    /// them in drill mode), which are skipped and said so in the trail.
    fn offered_tools(&self, now: tokio::time::Instant, trail: &mut Trail) -> Arc<[ToolSpec]> {
        let req = self.req;
        let mut offered: Vec<ToolSpec> = Vec::new();
        for name in &req.tools {
            let Some(&ti) = self.r.catalog.tool_index.get(name) else {
                continue;
            };
            let critical = self.r.catalog.is_critical(ti, &req.critical_tools);
            let tool = self.r.catalog.registry.get(self.r.catalog.tools[ti].target);
            let open = !tool.breaker.would_admit(now);
            if !critical && (open || self.r.drill()) {
                let end = if open { HopEnd::Open } else { HopEnd::Drill };
                trail.push(Hop::new(&tool.target.to_string(), end));
                if open {
                    trail.tally.note_tool(self.r.catalog.tools[ti].target, true);
                }
                trail.miss(name);
                trail.quality *= self.r.cfg.degradation.skip_quality;
                continue;
            }
            offered.push(self.r.catalog.tools[ti].spec.clone());
        }
        if offered.is_empty() {
            self.r.no_tools.clone()
        } else {
            offered.into()
        }
    }

    /// Runs the model's tool call `tc` (its result cached under `key`) and
    /// adds its result to the conversation: the answer, a cached one, or a
    /// failure the model can read (also for a tool this agent does not
    /// have). A critical tool that fails with nothing cached defers the
    /// request where it may (`defer`): that end is returned.
    async fn tool_step(
        &self,
        tc: &ToolCall,
        key: u64,
        defer: bool,
        trail: &mut Trail,
        added: &mut Vec<Message>,
    ) -> Option<Ended> {
        let req = self.req;
        let Some(&ti) = self.r.catalog.tool_index.get(&tc.name) else {
            let text = format!("{} is not a tool of this agent", tc.name);
            added.push(Message::tool_result(tc, text, true));
            return None;
        };
        let critical = self.r.catalog.is_critical(ti, &req.critical_tools);
        let tool_use = ToolUse {
            request: req.id,
            tool: ti,
            call: tc,
            key,
            critical,
        };
        match self.calls.call_tool(tool_use, &mut trail.tally).await {
            Ok(text) => added.push(Message::tool_result(tc, text, false)),
            Err(f) => {
                let tool = &self.r.catalog.registry.get(self.r.catalog.tools[ti].target).target;
                trail.push(Hop::new(&tool.to_string(), HopEnd::from(&f)));
                if let Some((text, age)) = self.calls.cached_tool(ti, key) {
                    trail.push(Hop::new(&tool.to_string(), HopEnd::Cache));
                    trail.fallback = true;
                    trail.quality *= self.r.cfg.degradation.cache_quality;
                    trail.stale_ms = Some(trail.stale_ms.unwrap_or(0).max(age.as_millis() as u64));
                    added.push(Message::tool_result(tc, text, false));
                } else if critical && defer && self.r.deferral().can_defer() {
                    let why = format!("critical tool {} unavailable ({})", tc.name, HopEnd::from(&f));
                    return Some(deferred(self.r.deferral().defer(req, why).await));
                } else {
                    trail.quality *= if critical {
                        0.5
                    } else {
                        self.r.cfg.degradation.skip_quality
                    };
                    trail.miss(&tc.name);
                    added.push(Message::tool_result(tc, format!("{} is unavailable", tc.name), true));
                }
            }
        }
        None
    }

    /// The loop's steps, in `session`, from `now`: how it ended.
    async fn steps(&self, session: &InSession<'_>, now: tokio::time::Instant, trail: &mut Trail) -> Ended {
        let (req, may_defer) = (self.req, self.may_defer);
        let Some(route) = self.r.catalog.route_for(req.route.as_str()) else {
            let mut known: Vec<&str> = self.r.catalog.routes.keys().map(String::as_str).collect();
            known.sort_unstable();
            return Ended::failed(Some(format!(
                "Unknown route `{}`; known routes: {}.",
                req.route,
                known.join(", ")
            )));
        };
        let primary = route.chain[0];

        let offered = self.offered_tools(now, trail);
        // What the loop adds to the request's own messages (tool calls and
        // results); the conversation sent is both.
        let mut added: Vec<Message> = Vec::new();
        let max_steps = if req.max_steps > 0 {
            req.max_steps
        } else {
            DEFAULT_STEPS
        };
        let max_tokens = if req.max_tokens > 0 { req.max_tokens } else { 1024 };
        // The tool calls of the last step, for a partial answer if the model fails later.
        let mut last_calls: Vec<ToolCall> = Vec::new();

        for step in 0..max_steps {
            if let Err(q) = session.step() {
                if step == 0 {
                    return Ended::failed(Some(format!("Request refused: {q}.")));
                }
                trail.miss("steps");
                break;
            }
            let mut call = LlmCall::new(
                req.id,
                &req.user,
                route,
                conversation(req, &added),
                offered.clone(),
                max_tokens,
            );
            call.step = step;
            call.priority = req.priority.unwrap_or(call.priority);
            call.tenant = req.tenant.as_deref().unwrap_or(call.user);
            let r = self.calls.call(&call, &mut trail.tally, None).await;
            self.push_hops(trail);
            match r {
                Err(LlmFailure::Budget(e)) => {
                    self.calls.note_budget_rejection(&req.user, &e);
                    return Ended::failed(Some(format!("Request refused: {e}.")));
                }
                Err(_) if step == 0 => {
                    // A shed request is refused now, not deferred to add
                    // to the load later.
                    let shed = matches!(trail.tally.hops.last(), Some(h) if matches!(h.result, HopResult::Shed(..)));
                    return self.no_model(route.cfg.defer && may_defer && !shed, trail).await;
                }
                Err(_) => {
                    // Feature degradation: answer with what the tools gave.
                    trail.miss("llm");
                    trail.quality *= 0.5;
                    return trail.answered(partial(
                        &last_calls,
                        "Partial result: the assistant could not finish this request.",
                    ));
                }
                Ok((resp, mi)) => {
                    session.add_tokens(u64::from(resp.usage.total()));
                    if super::ending::is_fallback(primary, mi, &trail.tally.hops) {
                        trail.fallback = true;
                    }
                    trail.model_q = trail.model_q.min(self.r.catalog.quality_ratio(mi, primary));
                    if resp.tool_calls.is_empty() {
                        if !trail.partial && trail.stale_ms.is_none() {
                            self.r
                                .cache
                                .put(trail.answer_key, resp.text.clone(), self.r.clock.now());
                        }
                        return trail.answered(resp.text);
                    }
                    // The model's turn as it was, then a result answering each call.
                    added.push(Message::assistant(resp.text.clone(), resp.tool_calls.clone()));
                    for (i, tc) in resp.tool_calls.iter().enumerate() {
                        let defer = route.cfg.defer && may_defer;
                        if let Some(end) = self.tool_step(tc, resp.tool_key(i), defer, trail, &mut added).await {
                            return end;
                        }
                    }
                    last_calls = resp.tool_calls;
                }
            }
        }
        // Out of steps: feature degradation to one direct answer. The tools
        // stay offered (APIs refuse tool turns without them) but may not be
        // called.
        trail.miss("multi_step");
        added.push(Message::system("Answer directly now, without tools."));
        let mut call = LlmCall::new(
            req.id,
            &req.user,
            route,
            conversation(req, &added),
            offered.clone(),
            max_tokens,
        );
        call.step = max_steps;
        call.params = no_more_tools();
        call.priority = req.priority.unwrap_or(call.priority);
        call.tenant = req.tenant.as_deref().unwrap_or(call.user);
        let r = self.calls.call(&call, &mut trail.tally, None).await;
        self.push_hops(trail);
        match r {
            Ok((resp, _)) => trail.answered(resp.text),
            Err(_) => trail.answered(partial(&last_calls, "Partial result unavailable.")),
        }
    }

    /// Adds the hops the tally gained since last time to the trail's chain.
    fn push_hops(&self, trail: &mut Trail) {
        while trail.hops_seen < trail.tally.hops.len() {
            let label = self.r.catalog.hop_of(&trail.tally.hops[trail.hops_seen]);
            trail.hops_seen += 1;
            trail.push(label);
        }
    }

    /// No model answered the first step: cached answer, defer, or fail.
    async fn no_model(&self, may_defer: bool, trail: &mut Trail) -> Ended {
        let ttl = std::time::Duration::from_secs(self.r.cfg.degradation.answer_cache_ttl_s);
        if let Some((text, age)) = self.r.cache.get(trail.answer_key, ttl, self.r.clock.now()) {
            trail.push(Hop::new("cache", HopEnd::Age(age.as_secs())));
            trail.fallback = true;
            trail.quality *= self.r.cfg.degradation.cache_quality;
            trail.stale_ms = Some(age.as_millis() as u64);
            return trail.answered(text);
        }
        let deferral = self.r.deferral();
        if may_defer && deferral.can_defer() {
            return deferred(
                deferral
                    .defer(self.req, "every model in the chain is unavailable".into())
                    .await,
            );
        }
        Ended::failed(Some(self.r.cfg.degradation.user_message.clone()))
    }
}

/// A request's key in the answer cache: its route and last user message.
pub fn answer_key(req: &AgentRequest) -> u64 {
    let q = req
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| m.content.text())
        .unwrap_or_default();
    answer_key_of(&req.route, &q)
}

/// The answer-cache key of a request on `route` whose last user message
/// is `question`.
pub fn answer_key_of(route: &str, question: &str) -> u64 {
    ANSWER_KEYS.hash_one((route, question))
}

impl HopResult {
    /// Whether the hop answered.
    pub fn is_ok(&self) -> bool {
        matches!(self, HopResult::Ok)
    }
}
