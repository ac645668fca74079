//! Replaying a traffic log: every recorded request is re-driven through the
//! runner at its recorded time, against the recorded behaviour of each
//! provider and tool (`--providers recorded`) or the configured ones
//! (`live`). The runner decides anew, possibly under another config: that is
//! the what-if engine.
//!
//! The log is streamed: the reader stays at most a horizon ahead of virtual
//! time, attempts are indexed only until their request ends, so memory is
//! bounded by the traffic within the horizon, not by the log's length.

use super::log::{AttemptRec, LogError, LogReader, OperatorRec, OutcomeRec, Record, RequestRec, Transport};
use super::prefetch::{GiveBack, Prefetched, Split};
use crate::clock::{note_step, Clock, Seed, Steps};
use crate::config::Config;
use crate::provider::mock::{args_for, call_id, order_id};
use crate::provider::{
    EmbedRequest, Embedded, ErrorKind, LlmRequest, LlmResponse, Message, Provider, ProviderError, ToolCall, ToolKind,
    ToolSpec, Usage,
};
use crate::resilience::limiter::RateFeedback;
use crate::runner::chat::ChatRequest;
use crate::runner::command::{Command, CommandError};
use crate::runner::embed::EmbedCall;
use crate::runner::llm::recorded_rate;
use crate::runner::outcome::Level;
use crate::runner::request::{AgentRequest, Via};
use crate::runner::{Runner, RunnerParts};
use crate::tools::ToolExecutor;
use crate::wire::{Params, RawBody};
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How far (in log time) the reader runs ahead of the replay. A request's
/// own attempts follow its request line in the log; they must be read before
/// the replay reaches them, so the horizon covers how far a replay may run
/// ahead of its recording. Everything read ahead (scheduled requests, indexed
/// attempts) is held in memory, so it is kept short.
pub const HORIZON: Duration = Duration::from_secs(30);

/// Idle gaps longer than this are jumped over at `--speed max`.
const JUMP_OVER: Duration = Duration::from_secs(60);

/// The recorded behaviour of every target, as far as the reader has read.
#[derive(Default)]
pub struct RecordedFleet {
    inner: Mutex<Fleet>,
}

/// A request's recorded attempts not yet taken, in recorded order (a
/// request has few: the first two are held inline).
type OwnAttempts = SmallVec<[Arc<AttemptRec>; 2]>;

/// An attempt as the log reader hands it over, with what indexing it
/// needs copied out of the record.
pub struct ReadAttempt {
    attempt: Arc<AttemptRec>,
    t_ms: u64,
    /// Its target's index in the fleet ([`RecordedFleet::target`]).
    target: usize,
    /// Whether it came after its request's body was made (else it came
    /// with the body).
    late: bool,
}

impl ReadAttempt {
    /// `attempt`, on the target of index `target`.
    pub fn new(attempt: Arc<AttemptRec>, target: usize, late: bool) -> Self {
        Self {
            t_ms: attempt.t_ms,
            attempt,
            target,
            late,
        }
    }
}

tokio::task_local! {
    /// In a replayed request's task: its own attempts read before its body
    /// was made, which came with the body. They are the task's, so they
    /// need no index by request; those read later wait in the fleet's.
    static OWN: RefCell<OwnAttempts>;
}

/// Takes the first of `own` on `target` that the replay has read (by `read_ms`).
fn take_own(own: &mut OwnAttempts, target: &str, read_ms: u64) -> Option<Arc<AttemptRec>> {
    let i = own.iter().position(|a| *a.target == *target && a.t_ms <= read_ms)?;
    Some(own.remove(i))
}

/// Attempts are shared between a request's own list and its target's
/// history, so indexing one costs no copy.
#[derive(Default)]
struct Fleet {
    /// Index of each target's history in `recent`.
    targets: HashMap<Box<str>, usize, ahash::RandomState>,
    /// The own attempts of requests under way read after their bodies
    /// were made (those read before are in the request's task, [`OWN`]),
    /// and what a deferred request left of its own for its re-drive.
    own: HashMap<u64, OwnAttempts, ahash::RandomState>,
    /// Recent attempts per target with their times, in time order, for
    /// calls with no own record.
    recent: Vec<VecDeque<(u64, Arc<AttemptRec>)>>,
    /// The time of the latest attempt the replay has read. An own attempt
    /// that came early with its request's body is used only once the replay
    /// has read that far, as if it had come on its own.
    read_ms: u64,
    /// Where history dropped from `recent` goes, to be freed on the log
    /// reader's thread (dropped here until the replay sets it).
    spent: Option<GiveBack<Arc<AttemptRec>>>,
    /// Requests that ended (not those deferred, whose re-drive takes their
    /// own attempts): an own attempt of theirs read later (the replay
    /// ended them earlier than the recording did) goes to the target's
    /// history only, not to `own`, where nothing would take it.
    /// Compressed: ids numbered in order take a few bytes per thousand.
    ended: roaring::RoaringTreemap,
}

impl Fleet {
    /// See [`RecordedFleet::take_at`].
    fn take(&mut self, request: u64, t: usize, target: &str, now_ms: u64) -> Option<(Arc<AttemptRec>, bool)> {
        self.prune(t, now_ms);
        // The request's own attempts in recorded order: those that came
        // with its body, then those read since.
        let read_ms = self.read_ms;
        if let Ok(Some(a)) = OWN.try_with(|own| take_own(&mut own.borrow_mut(), target, read_ms)) {
            return Some((a, true));
        }
        if let Some(own) = self.own.get_mut(&request) {
            if let Some(a) = take_own(own, target, read_ms) {
                if own.is_empty() {
                    self.own.remove(&request);
                }
                return Some((a, true));
            }
        }
        self.recent[t].front().map(|(_, a)| (a.clone(), false))
    }

    /// Drops target `t`'s history older than its latest attempt at or
    /// before `now_ms`, which no call can get any more (on every call and
    /// every attempt read, so the history stays within the read-ahead
    /// horizon also for targets the replay never calls).
    fn prune(&mut self, t: usize, now_ms: u64) {
        let recent = &mut self.recent[t];
        while recent.len() > 1 && recent[1].0 <= now_ms {
            if let (Some((_, a)), Some(spent)) = (recent.pop_front(), &mut self.spent) {
                spent.put(a);
            }
        }
    }

    /// The index of `target`'s history, added empty if new.
    fn target(&mut self, target: &str) -> usize {
        match self.targets.get(target) {
            Some(&t) => t,
            None => {
                self.targets.insert(target.into(), self.recent.len());
                self.recent.push(VecDeque::new());
                self.recent.len() - 1
            }
        }
    }
}

impl RecordedFleet {
    /// Adds an attempt read from the log. Only a late one (read after its
    /// request's body was made) is read here, for its request's id: the
    /// rest of the record, made on the reader's thread, stays in that
    /// core's cache until a call plays it.
    pub fn add(&self, read: ReadAttempt, now_ms: u64) {
        let ReadAttempt {
            attempt,
            t_ms,
            target,
            late,
        } = read;
        let mut f = self.inner.lock();
        let f = &mut *f;
        f.read_ms = t_ms;
        if late && !f.ended.contains(attempt.request) {
            f.own.entry(attempt.request).or_default().push(attempt.clone());
        }
        f.recent[target].push_back((t_ms, attempt));
        f.prune(target, now_ms);
    }

    /// Keeps what a deferred request left of the own attempts that came
    /// with its body, for its re-drive (they come before any read since).
    fn keep(&self, request: u64, mut own: OwnAttempts) {
        if own.is_empty() {
            return;
        }
        let mut f = self.inner.lock();
        let kept = f.own.entry(request).or_default();
        own.extend(kept.drain(..));
        *kept = own;
    }

    /// The index a target's calls are taken under ([`RecordedFleet::take_at`]).
    pub fn target(&self, target: &str) -> usize {
        self.inner.lock().target(target)
    }

    /// [`RecordedFleet::take_at`] by the target's name.
    pub fn take(&self, request: u64, target: &str, now_ms: u64) -> Option<(Arc<AttemptRec>, bool)> {
        let mut f = self.inner.lock();
        let t = *f.targets.get(target)?;
        f.take(request, t, target, now_ms)
    }

    /// The attempt a call of `request` to `target` (its history's index
    /// `t`) gets at `now_ms`: its own next unused one; else the latest
    /// recorded on the target at or before now (the earliest if none is),
    /// answering without tool calls (`false`: not its own); None if the
    /// target has no recorded attempt (healthy).
    pub fn take_at(&self, request: u64, t: usize, target: &str, now_ms: u64) -> Option<(Arc<AttemptRec>, bool)> {
        self.inner.lock().take(request, t, target, now_ms)
    }

    /// Forgets what is left of a finished request, and what is read of it
    /// from now on.
    pub fn forget(&self, request: u64) {
        let mut f = self.inner.lock();
        f.ended.insert(request);
        if !f.own.is_empty() {
            f.own.remove(&request);
        }
    }

    /// Hands the attempts the history drops to `spent` (None: drops them).
    fn give_back(&self, spent: Option<GiveBack<Arc<AttemptRec>>>) {
        self.inner.lock().spent = spent;
    }
}

/// How a replay under the console ended, for its header: what it did, or
/// why it stopped.
#[derive(Debug, Default)]
pub struct ReplayEnd(Mutex<Option<Result<String, String>>>);

impl ReplayEnd {
    /// Notes the replay's result.
    pub fn set(&self, result: &Result<Replayed, LogError>) {
        *self.0.lock() = Some(match result {
            Ok(r) => Ok(format!(
                "{} requests, {} lost{}{}",
                r.requests,
                r.lost,
                r.skipped(),
                match r.operator_refused.len() {
                    0 => String::new(),
                    n => format!(", {n} recorded operator action(s) not applicable"),
                }
            )),
            Err(e) => Err(e.to_string()),
        });
    }

    /// The result, once the replay ended.
    pub fn get(&self) -> Option<Result<String, String>> {
        self.0.lock().clone()
    }
}

/// The recorded outcomes of the requests being replayed, for the console's
/// recorded-vs-replayed view: the most recent ones, bounded.
pub struct RecordedOutcomes {
    inner: Mutex<lru::LruCache<u64, OutcomeRec>>,
}

impl std::fmt::Debug for RecordedOutcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordedOutcomes")
            .field("kept", &self.inner.lock().len())
            .finish()
    }
}

impl Default for RecordedOutcomes {
    fn default() -> Self {
        Self {
            inner: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(100_000).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
        }
    }
}

impl RecordedOutcomes {
    /// Keeps an outcome read from the log.
    pub fn add(&self, o: OutcomeRec) {
        self.inner.lock().put(o.request, o);
    }

    /// The recorded outcome of `request`, if read and still kept.
    pub fn get(&self, request: u64) -> Option<OutcomeRec> {
        self.inner.lock().peek(&request).cloned()
    }
}

/// Takes `latency` from `start` (now), or fails as timed out at `timeout`
/// if that comes first, as the timer of a live call would (`what` says
/// which call). Ties go to the answer, as with a timer around the call.
async fn take_time(start: Instant, latency: Duration, timeout: Duration, what: &str) -> Result<(), ProviderError> {
    if latency > timeout {
        tokio::time::sleep_until(start + timeout).await;
        return Err(ProviderError::timed_out(what));
    }
    tokio::time::sleep_until(start + latency).await;
    Ok(())
}

/// Plays one recorded attempt from `start` (now): its latency (bounded by
/// `timeout`), then its status or answer.
async fn play(
    a: &AttemptRec,
    own: bool,
    req: Option<&LlmRequest>,
    clock: &Clock,
    start: Instant,
    timeout: Duration,
) -> Result<(Usage, Vec<ToolCall>), ProviderError> {
    let what = if req.is_some() { "provider call" } else { "tool call" };
    take_time(start, Duration::from_millis(a.latency_ms), timeout, what).await?;
    let usage = Usage {
        input: a.input_tokens,
        output: a.output_tokens,
        cached_input: 0,
    };
    // Most attempts carry no rate-limit headers: nothing to read then.
    let rate = if a.headers.is_empty() {
        RateFeedback::default()
    } else {
        recorded_rate(&a.headers, clock.wall_ms())
    };
    let fail = |kind: ErrorKind, status: Option<u16>| {
        let mut e = ProviderError::new(kind, status, format!("replayed {} ({})", a.target, kind.label(status)));
        e.retry_after = rate.retry_after;
        e.rate = rate;
        e.usage = usage;
        e
    };
    if let Some(t) = a.transport {
        let kind = match t {
            Transport::Timeout => ErrorKind::Timeout,
            Transport::Connect => ErrorKind::Connect,
            Transport::Reset => ErrorKind::Reset,
            Transport::Truncated => ErrorKind::Truncated,
        };
        return Err(fail(kind, None));
    }
    match a.status {
        Some(s) if s >= 400 => Err(fail(ErrorKind::from_status(s), Some(s))),
        _ => {
            let calls = match (own, req) {
                (true, Some(req)) if !a.tool_calls.is_empty() => {
                    let order = order_id(req);
                    let key = crate::clock::mix(req.request_id) ^ u64::from(req.step);
                    a.tool_calls
                        .iter()
                        .enumerate()
                        .map(|(i, name)| ToolCall {
                            kind: ToolKind::Function,
                            id: call_id(key, i),
                            // A recorded semantic failure is replayed as one.
                            name: if a.semantic_failure.is_some() {
                                format!("{name}__unknown")
                            } else {
                                name.clone()
                            },
                            arguments: args_for(name, &order),
                        })
                        .collect()
                }
                // A semantic failure recorded without the calls it was
                // about: a call of a tool that does not exist, so it is
                // judged a semantic failure again.
                (true, Some(req)) if a.semantic_failure.is_some() => vec![ToolCall::new(
                    call_id(crate::clock::mix(req.request_id) ^ u64::from(req.step), 0),
                    "recorded_semantic_failure__unknown",
                    "{}",
                )],
                _ => Vec::new(),
            };
            Ok((usage, calls))
        }
    }
}

/// A provider that behaves as recorded.
pub struct RecordedProvider {
    /// Its target, `provider:NAME`, and its index in the fleet.
    name: Box<str>,
    target: usize,
    fleet: Arc<RecordedFleet>,
    clock: Clock,
    /// The text of every answer, shared.
    text: Arc<str>,
}

impl RecordedProvider {
    /// The recorded `provider:NAME`.
    pub fn new(name: &str, fleet: Arc<RecordedFleet>, clock: Clock) -> Self {
        let name: Box<str> = format!("provider:{name}").into();
        Self {
            target: fleet.target(&name),
            name,
            fleet,
            clock,
            text: "replayed answer".into(),
        }
    }
}

#[async_trait::async_trait]
impl Provider for RecordedProvider {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        self.complete_within(req, Duration::MAX).await
    }

    /// An embeddings call as recorded (its answer has no vectors: nobody reads them).
    async fn embed(&self, req: &EmbedRequest) -> Result<Embedded, ProviderError> {
        let start = self.clock.now();
        let usage = match self
            .fleet
            .take_at(req.request_id, self.target, &self.name, self.clock.ms_at(start))
        {
            Some((a, own)) => play(&a, own, None, &self.clock, start, Duration::MAX).await?.0,
            None => {
                take_time(start, UNRECORDED_CALL, Duration::MAX, "embeddings call").await?;
                Usage {
                    input: (req.chars as u32).div_ceil(4).max(1),
                    ..Usage::default()
                }
            }
        };
        Ok(Embedded {
            body: bytes::Bytes::from_static(br#"{"object":"list","data":[]}"#),
            usage,
            rate: RateFeedback::default(),
        })
    }

    async fn complete_within(&self, req: &LlmRequest, timeout: Duration) -> Result<LlmResponse, ProviderError> {
        // Replays run in virtual time, where a call takes exactly the
        // latency it plays: that is its time taken, with no clock to read.
        let start = self.clock.now();
        let now_ms = self.clock.ms_at(start);
        let (usage, tool_calls, took, keys) = match self.fleet.take_at(req.request_id, self.target, &self.name, now_ms)
        {
            Some((a, own)) => {
                let (usage, calls) = play(&a, own, Some(req), &self.clock, start, timeout).await?;
                let keys = own.then(|| a.tool_keys.clone());
                (usage, calls, Duration::from_millis(a.latency_ms), keys)
            }
            None => {
                take_time(start, UNRECORDED_CALL, timeout, "provider call").await?;
                let input = (req.prompt_chars() as u32).div_ceil(4).max(1);
                let usage = Usage {
                    input,
                    output: req.max_tokens.min(50),
                    cached_input: 0,
                };
                (usage, Vec::new(), UNRECORDED_CALL, None)
            }
        };
        let mut resp = LlmResponse::measured(self.text.clone(), tool_calls, usage, Default::default(), took);
        // The recorded calls' cache keys, where the recording kept them
        // (not the content): the tool cache hits as it did when recorded.
        if let Some(keys) = keys.filter(|k| k.len() == resp.tool_calls.len()) {
            resp.tool_keys = keys.iter().map(|k| k.0).collect();
        }
        Ok(resp)
    }
}

/// How long a call to a provider the log never shows takes (it is healthy).
const UNRECORDED_CALL: Duration = Duration::from_millis(300);

/// Tools that behave as recorded.
pub struct RecordedTools {
    fleet: Arc<RecordedFleet>,
    clock: Clock,
}

impl RecordedTools {
    /// Tools answering from `fleet`.
    pub fn new(fleet: Arc<RecordedFleet>, clock: Clock) -> Self {
        Self { fleet, clock }
    }
}

#[async_trait::async_trait]
impl ToolExecutor for RecordedTools {
    async fn call(&self, name: &str, args: &str, request_id: u64, attempt: u32) -> Result<Arc<str>, ProviderError> {
        self.call_within(name, args, request_id, attempt, Duration::MAX).await
    }

    async fn call_within(
        &self,
        name: &str,
        args: &str,
        request_id: u64,
        _attempt: u32,
        timeout: Duration,
    ) -> Result<Arc<str>, ProviderError> {
        let target = format!("tool:{name}");
        let start = self.clock.now();
        if let Some((a, own)) = self.fleet.take(request_id, &target, self.clock.ms_at(start)) {
            play(&a, own, None, &self.clock, start, timeout).await?;
        } else {
            take_time(start, Duration::from_millis(100), timeout, "tool call").await?;
        }
        Ok(format!("{{\"tool\":\"{name}\",\"args\":{args},\"status\":\"ok\",\"replayed\":true}}").into())
    }
}

/// The replay's runtime, in virtual time, with tokio's I/O driver only when
/// something does I/O (live providers, a fleet's store, the console): on
/// timers alone, each step of virtual time saves a poll syscall. When
/// `stepped` (at `--speed max`, where nothing but the runtime moves time),
/// the clock is read once per step ([`Steps`]).
pub fn runtime(io: bool, stepped: bool) -> std::io::Result<VirtualRuntime> {
    let mut b = tokio::runtime::Builder::new_current_thread();
    if io {
        b.enable_all();
    } else {
        b.enable_time();
    }
    if stepped {
        b.on_thread_unpark(note_step);
    }
    Ok(VirtualRuntime {
        rt: b.start_paused(true).build()?,
        stepped,
    })
}

/// A replay's runtime ([`runtime`]).
pub struct VirtualRuntime {
    rt: tokio::runtime::Runtime,
    stepped: bool,
}

impl VirtualRuntime {
    /// Runs `f` to its end on this thread.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        let _steps = self.stepped.then(Steps::on);
        self.rt.block_on(f)
    }
}

/// Runner parts for `--providers recorded`: every configured provider and
/// every tool answer from one recorded fleet, which [`replay`] feeds.
pub fn recorded_parts(cfg: &Config, clock: Clock, seed: Seed) -> (RunnerParts, Arc<RecordedFleet>) {
    let fleet = Arc::new(RecordedFleet::default());
    let mut parts = RunnerParts::mock(clock, seed);
    for name in cfg.providers.keys() {
        let provider: Arc<dyn Provider> = Arc::new(RecordedProvider::new(name, fleet.clone(), clock));
        parts.providers.insert(name.clone(), provider);
    }
    parts.tools = Some(Arc::new(RecordedTools::new(fleet.clone(), clock)));
    (parts, fleet)
}

/// The agent request a recorded request line stands for.
pub fn agent_request(q: RequestRec) -> AgentRequest {
    let messages = q.messages.map_or_else(
        || {
            // Without recorded content, a prompt of the recorded size. It names
            // no order, so every replayed tool call has the same arguments and
            // content-keyed tool results are shared: with recorded traffic that
            // asks about few orders this is closer to the recording than unique
            // prompts, which would turn every recorded cache hit into a miss
            // (a deferral, under a fault). Exact replay needs recorded content.
            const XS: &str = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
            let mut pad = (q.prompt_tokens as usize * 4).saturating_sub(40);
            let mut text = String::with_capacity(pad + 40);
            text.push_str("replayed request ");
            text.push_str(itoa::Buffer::new().format(q.id));
            text.push(' ');
            while pad > 0 {
                let n = pad.min(XS.len());
                text.push_str(&XS[..n]);
                pad -= n;
            }
            Arc::from([Message::user(text)])
        },
        Arc::from,
    );
    AgentRequest {
        id: q.id,
        user: q.user,
        session: q.session,
        route: q.route,
        messages,
        tools: q.tools,
        critical_tools: q.critical_tools,
        max_tokens: q.max_tokens,
        max_steps: q.max_steps.unwrap_or(0),
    }
}

/// A recorded gateway chat call, as the gateway made it: the recorded
/// tools offered by name (the config's spec, or any arguments for a tool
/// it does not know), no agent loop.
pub fn gateway_call(runner: &Runner, req: &AgentRequest) -> ChatRequest {
    let tools: Vec<ToolSpec> = req
        .tools
        .iter()
        .map(|name| match runner.tools().iter().find(|t| t.name == *name) {
            Some(t) => t.spec.clone(),
            None => ToolSpec {
                name: name.as_str().into(),
                description: "".into(),
                schema: Arc::new(serde_json::json!({"type": "object"})),
                kind: ToolKind::Function,
            },
        })
        .collect();
    // A call that named no session was recorded in one of its own.
    let own_session = format!("{}/call-{}", req.user, req.id);
    ChatRequest {
        id: req.id,
        user: req.user.to_string(),
        session: (req.session != own_session).then(|| req.session.to_string()),
        route: req.route.to_string(),
        messages: req.messages.clone(),
        tools: tools.into(),
        max_tokens: req.max_tokens,
        params: Arc::new(Params {
            from_client: true,
            ..Params::default()
        }),
        stream: false,
        fallback: true,
    }
}

/// A recorded embeddings call.
pub fn embeddings_call(req: &AgentRequest) -> EmbedCall {
    let chars = req.messages.iter().map(Message::weight).sum();
    EmbedCall {
        id: req.id,
        user: req.user.to_string(),
        model: req.route.to_string(),
        body: Arc::new(RawBody::default()),
        chars,
    }
}

/// The command a recorded operator action stands for.
pub fn command(op: &OperatorRec) -> Option<Command> {
    Command::from_parts(&op.action, &op.target, op.args.as_ref().and_then(|a| a.get("fault")))
}

/// What a replay did.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Requests re-driven.
    pub requests: u64,
    /// Requests whose task ended without an outcome (must be 0).
    pub lost: u64,
    /// Lines skipped as bad (with skip-bad-lines).
    pub bad_lines: u64,
    /// Lines of a kind this version does not know, skipped.
    pub unknown_kinds: u64,
    /// A torn last line (a crash mid-write), skipped: 0 or 1.
    pub torn_lines: u64,
    /// Operator actions re-applied.
    pub operator_actions: u64,
    /// Recorded operator actions this run cannot apply (an unknown action,
    /// or a target its config does not have), each with its line and why.
    pub operator_refused: Vec<String>,
    /// Recorded vs replayed level per request (kept when `compare` is on).
    pub levels: HashMap<u64, (Option<Level>, Option<Level>)>,
}

impl Replayed {
    /// The lines skipped, in words: empty, or `, N bad lines, … skipped`.
    pub fn skipped(&self) -> String {
        let parts: Vec<String> = [
            (self.bad_lines, "bad line"),
            (self.unknown_kinds, "line of unknown kind"),
            (self.torn_lines, "torn last line"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| match n {
            1 => format!("1 {what}"),
            _ => format!("{n} {}", what.replacen("line", "lines", 1)),
        })
        .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!(", {} skipped", parts.join(", "))
        }
    }
}

/// Replay options.
#[derive(Clone, Default)]
pub struct ReplayOptions {
    /// Re-apply recorded operator actions.
    pub operator: bool,
    /// Keep recorded and replayed levels per request.
    pub compare: bool,
    /// Keep the recorded outcomes here as they are read (for the console).
    pub outcomes: Option<Arc<RecordedOutcomes>>,
    /// At `--speed max` on a paused clock: jump the clock across a gap in
    /// which nothing runs, so a sparse log replays in time proportional to
    /// its records, not its span (timers still fire, once, after the jump).
    pub jump_idle: bool,
}

/// What the replayed requests' tasks share with the driver, one reference
/// per task: what they run on, and the count of those still running,
/// counted in and out, so the driver is woken only when the last one ends,
/// not as each one does.
struct InFlight {
    runner: Arc<Runner>,
    fleet: Option<Arc<RecordedFleet>>,
    /// Keep replayed levels (`ReplayOptions::compare`).
    compare: bool,
    running: AtomicU64,
    /// Tasks that ended without an outcome (a panic).
    lost: AtomicU64,
    /// Replayed levels per request (with `compare`).
    levels: Mutex<HashMap<u64, Level>>,
    all_done: Notify,
    /// Requests that ended, to be freed on the log reader's thread.
    finished: Mutex<Option<GiveBack<AgentRequest>>>,
}

/// One request's task: counted out when dropped, and as lost unless it
/// reached its outcome.
struct Running {
    inflight: Arc<InFlight>,
    ended: bool,
}

impl Running {
    fn start(inflight: &Arc<InFlight>) -> Self {
        inflight.running.fetch_add(1, Ordering::Relaxed);
        Self {
            inflight: inflight.clone(),
            ended: false,
        }
    }

    /// The request reached its outcome.
    fn end(mut self) {
        self.ended = true;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.ended {
            self.inflight.lost.fetch_add(1, Ordering::Relaxed);
        }
        if self.inflight.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inflight.all_done.notify_one();
        }
    }
}

/// On the log reader's thread: the requests whose body is not made yet, in
/// log order (the order bodies are made in), with their attempts so far.
/// A request is found by its place in that order: its id less the first
/// id while ids run consecutively, as fusebox writes them; else through a
/// map of places by id.
#[derive(Default)]
struct Unmade {
    queue: VecDeque<(u64, OwnAttempts)>,
    /// Requests taken from the queue's front so far.
    taken: u64,
    first_id: Option<u64>,
    /// Places by id, once ids stopped running consecutively (the first
    /// request of an id keeps its place).
    places: Option<HashMap<u64, u64, ahash::RandomState>>,
}

impl Unmade {
    /// The next request read.
    fn push(&mut self, id: u64) {
        let place = self.taken + self.queue.len() as u64;
        match (&mut self.places, self.first_id) {
            (Some(places), _) => {
                places.entry(id).or_insert(place);
            }
            (None, None) => self.first_id = Some(id),
            (None, Some(first)) if first.checked_add(place) == Some(id) => {}
            (None, Some(_)) => {
                let mut places: HashMap<u64, u64, ahash::RandomState> = HashMap::default();
                for (i, (queued, _)) in self.queue.iter().enumerate() {
                    places.entry(*queued).or_insert(self.taken + i as u64);
                }
                places.entry(id).or_insert(place);
                self.places = Some(places);
            }
        }
        self.queue.push_back((id, OwnAttempts::new()));
    }

    /// The attempts so far of request `id`; None if its body was made.
    fn get_mut(&mut self, id: u64) -> Option<&mut OwnAttempts> {
        let place = match &self.places {
            Some(places) => *places.get(&id)?,
            None => id.checked_sub(self.first_id?)?,
        };
        let i = usize::try_from(place.checked_sub(self.taken)?).ok()?;
        let (queued, own) = self.queue.get_mut(i)?;
        (*queued == id).then_some(own)
    }

    /// The attempts of the next request in log order, `id`, whose body is
    /// being made.
    fn take_next(&mut self, id: u64) -> OwnAttempts {
        let Some((queued, own)) = self.queue.pop_front() else {
            return OwnAttempts::new();
        };
        debug_assert_eq!(queued, id, "bodies are made in log order");
        let place = self.taken;
        self.taken += 1;
        if let Some(places) = &mut self.places {
            if places.get(&queued) == Some(&place) {
                places.remove(&queued);
            }
        }
        own
    }
}

/// What the log reader's thread keeps while it reads.
struct Reading {
    unmade: Unmade,
    /// In recorded mode, where attempts are indexed.
    targets: Option<KnownTargets>,
}

/// On the log reader's thread: the recorded fleet's index of each target
/// seen, so attempts are handed over indexed without taking its lock.
struct KnownTargets {
    fleet: Arc<RecordedFleet>,
    known: HashMap<Box<str>, usize, ahash::RandomState>,
}

impl KnownTargets {
    fn new(fleet: Arc<RecordedFleet>) -> Self {
        Self {
            fleet,
            known: HashMap::default(),
        }
    }

    /// The fleet's index of `target`.
    fn index(&mut self, target: &str) -> usize {
        if let Some(&t) = self.known.get(target) {
            return t;
        }
        let t = self.fleet.target(target);
        self.known.insert(target.into(), t);
        t
    }
}

/// A record as the replay takes it, made ready on the reader's thread.
enum Ahead {
    /// A request due at `t_ms`; the agent request it stands for is made
    /// just before it is due ([`Prefetched::next_body`]).
    Request(u64),
    /// An attempt, shared as the recorded fleet keeps it.
    Attempt(ReadAttempt),
    /// Outcomes and operator actions are boxed: every item takes the room
    /// of the largest, and most are requests and attempts.
    Outcome(Box<OutcomeRec>),
    /// With its line in the log.
    Operator(Box<(OperatorRec, u64)>),
}

impl Ahead {
    fn t_ms(&self) -> u64 {
        match self {
            Ahead::Request(t_ms) => *t_ms,
            Ahead::Attempt(a) => a.t_ms,
            Ahead::Outcome(o) => o.t_ms,
            Ahead::Operator(op) => op.0.t_ms,
        }
    }
}

/// Stops handing things back to the log reader's thread when the replay
/// ends, however it ends: that thread ends once nothing can.
struct GivingBack<'a> {
    inflight: &'a InFlight,
    fleet: Option<&'a RecordedFleet>,
}

impl Drop for GivingBack<'_> {
    fn drop(&mut self) {
        *self.inflight.finished.lock() = None;
        if let Some(f) = self.fleet {
            f.give_back(None);
        }
    }
}

/// Re-drives every request of `reader` through `runner` at its recorded
/// time; `fleet` (recorded mode) is fed the attempts as they are read.
pub async fn replay(
    runner: Arc<Runner>,
    mut reader: LogReader,
    fleet: Option<Arc<RecordedFleet>>,
    opts: ReplayOptions,
) -> Result<Replayed, LogError> {
    let path = reader.path().to_path_buf();
    // Only what the replay uses is handed over, made ready on the reader's
    // thread; the rest is dropped there.
    let (outcomes, operator) = (opts.compare || opts.outcomes.is_some(), opts.operator);
    if !outcomes {
        reader.check_only_outcomes();
    }
    // On the reader's thread, the attempts of each request whose body is
    // not made yet go with the body: the replay's own index of attempts
    // then holds only the requests under way.
    let mut reader = Prefetched::spawn(
        reader,
        Reading {
            unmade: Unmade::default(),
            targets: fleet.clone().map(KnownTargets::new),
        },
        move |state, r, line| match r {
            Record::Request(q) => {
                state.unmade.push(q.id);
                // Boxed: a request waits here for as long as the reader is
                // ahead, and a box (reused as soon as it is freed) is cheaper
                // to write than a place in a long queue.
                Split::Later(Ahead::Request(q.t_ms), Box::new(q))
            }
            Record::Attempt(a) => match &mut state.targets {
                Some(targets) => {
                    let a = Arc::new(a);
                    let target = targets.index(&a.target);
                    let late = match state.unmade.get_mut(a.request) {
                        Some(own) => {
                            own.push(a.clone());
                            false
                        }
                        None => true,
                    };
                    Split::Now(Ahead::Attempt(ReadAttempt::new(a, target, late)))
                }
                None => Split::Skip,
            },
            Record::Outcome(o) if outcomes => Split::Now(Ahead::Outcome(Box::new(o))),
            Record::Operator(op) if operator => Split::Now(Ahead::Operator(Box::new((op, line)))),
            _ => Split::Skip,
        },
        |state, q: Box<RequestRec>| {
            let own = state.unmade.take_next(q.id);
            let (recorded, via) = (q.answer_key, q.via);
            let req = agent_request(*q);
            let key = recorded.map_or_else(|| Runner::answer_key(&req), |k| k.0);
            (req, own, key, via)
        },
    )
    .map_err(|error| LogError::Io { path, error })?;
    let start = Instant::now();
    let due = |t_ms: u64| start + Duration::from_millis(t_ms);
    let mut out = Replayed::default();
    let inflight = Arc::new(InFlight {
        runner: runner.clone(),
        fleet: fleet.clone(),
        compare: opts.compare,
        running: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        levels: Mutex::default(),
        all_done: Notify::new(),
        finished: Mutex::default(),
    });
    // What was read on the reader's thread is freed there.
    *inflight.finished.lock() = Some(reader.give_back());
    if let Some(f) = &fleet {
        f.give_back(Some(reader.give_back()));
    }
    let giving_back = GivingBack {
        inflight: &inflight,
        fleet: fleet.as_deref(),
    };
    // Deferred requests are re-driven as the run goes, as they were when
    // recorded (a set, so an error return stops it too).
    let mut background = tokio::task::JoinSet::new();
    background.spawn(runner.clone().run_deferred_loop());
    let mut spawned = 0u64;
    // When the requests read but not yet due are due: each is started as a
    // task only at its time, so what is held ahead stays small.
    let mut queue: VecDeque<u64> = VecDeque::new();
    let mut next = reader.next_item()?;
    // One timer, reset for each wait, rather than a new one each time.
    let wait = tokio::time::sleep_until(start);
    tokio::pin!(wait);
    let clock = *runner.clock();
    // The latest operator action waiting to be applied: no jump over it.
    let mut ops_due = start;
    loop {
        let now = clock.now();
        // Read everything within the horizon.
        while let Some(rec) = next.take_if(|r| due(r.t_ms()) <= now + HORIZON) {
            match rec {
                Ahead::Request(t_ms) => queue.push_back(t_ms),
                Ahead::Attempt(a) => {
                    if let Some(f) = &fleet {
                        f.add(a, clock.ms_at(now));
                    }
                }
                Ahead::Operator(rec) => {
                    let (op, line) = *rec;
                    let cmd = command(&op)
                        .ok_or_else(|| CommandError::UnknownAction(op.action.clone()))
                        .and_then(|c| runner.check(&c).map(|()| c));
                    match cmd {
                        Err(e) => {
                            // Not this config's (a what-if without that provider, say): said, not applied.
                            tracing::warn!(line, error = %e, "recorded operator action not applicable");
                            out.operator_refused
                                .push(format!("line {line}: {} {}: {e}", op.action, op.target));
                        }
                        Ok(cmd) => {
                            out.operator_actions += 1;
                            let (r, at) = (runner.clone(), due(op.t_ms));
                            ops_due = ops_due.max(at);
                            let by = format!("replay of {}", op.by);
                            tokio::spawn(async move {
                                tokio::time::sleep_until(at).await;
                                if let Err(e) = r.apply(&cmd, &by) {
                                    tracing::warn!(error = %e, "recorded operator action not applied");
                                }
                            });
                        }
                    }
                }
                Ahead::Outcome(o) => {
                    if opts.compare {
                        out.levels.entry(o.request).or_default().0 = Some(o.level);
                    }
                    if let Some(kept) = &opts.outcomes {
                        kept.add(*o);
                    }
                }
            }
            next = reader.next_item()?;
        }
        while queue.pop_front_if(|t_ms| due(*t_ms) <= now).is_some() {
            let (req, own, key, via) = reader.next_body()?;
            let running = Running::start(&inflight);
            spawned += 1;
            // Boxed: the request's future is large, and a task moves its
            // future by value.
            tokio::spawn(boxed(|| {
                OWN.scope(RefCell::new(own), async move {
                    let shared = &*running.inflight;
                    // As it came in: a gateway call is one call, never deferred.
                    let runner = &shared.runner;
                    let o = match via {
                        Via::Agent => runner.run_keyed(&req, key).await,
                        Via::Gateway => runner.chat(gateway_call(runner, &req), None).await.outcome,
                        Via::Embeddings => runner.embed(embeddings_call(&req)).await.outcome,
                    };
                    if let Some(finished) = &mut *shared.finished.lock() {
                        finished.put(req);
                    }
                    // A deferred request is re-driven later (in another
                    // task) and needs the rest of its recorded attempts then.
                    if let Some(f) = &shared.fleet {
                        if o.level == Level::Deferred {
                            f.keep(o.request, OWN.with(RefCell::take));
                        } else {
                            f.forget(o.request);
                        }
                    }
                    if shared.compare {
                        shared.levels.lock().insert(o.request, o.level);
                    }
                    running.end();
                })
            }));
        }
        let wake = [
            queue.front().map(|t_ms| due(*t_ms)),
            next.as_ref().map(|r| due(r.t_ms()) - HORIZON),
        ];
        match wake.into_iter().flatten().min() {
            Some(at) => {
                let now = clock.now();
                let idle = at.saturating_duration_since(now);
                wait.as_mut().reset(at);
                if opts.jump_idle && idle > JUMP_OVER && ops_due <= now {
                    if inflight.running.load(Ordering::Acquire) == 0 {
                        tokio::time::advance(idle).await;
                        // The clock's reading of this step, moved on too.
                        crate::clock::note_step();
                    } else {
                        // Requests still run: wait for them to end (then
                        // jump what is left) or for the time, whichever
                        // comes first.
                        tokio::select! {
                            () = inflight.all_done.notified() => continue,
                            () = wait.as_mut() => {}
                        }
                        continue;
                    }
                }
                wait.as_mut().await;
            }
            None => break,
        }
    }
    while inflight.running.load(Ordering::Acquire) > 0 {
        inflight.all_done.notified().await;
    }
    drop(giving_back);
    // As a demo ends: every deferred request ends in an outcome.
    background.abort_all();
    runner.redrive_deferred(false).await;
    runner.redrive_deferred(true).await;
    out.requests = spawned;
    out.lost = inflight.lost.load(Ordering::Relaxed);
    if out.lost > 0 {
        tracing::error!(lost = out.lost, "replayed requests ended without an outcome");
    }
    for (id, level) in inflight.levels.lock().drain() {
        out.levels.entry(id).or_default().1 = Some(level);
    }
    if let Some(r) = reader.finished() {
        (out.bad_lines, out.unknown_kinds, out.torn_lines) = (r.bad_lines(), r.unknown_kinds(), r.torn_lines());
    }
    Ok(out)
}

/// The future `make` returns, built in its box. Boxing a future built
/// first copies all of it, though most of a request's few kilobytes are
/// not in use before it first runs.
fn boxed<F: std::future::Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// The clock a replay of a log with `header` runs on (outside a fleet): its
/// wall time is the recording's, so times written as dates in recorded
/// headers (an HTTP-date `retry-after`) mean what they meant then. Made
/// in the replay's runtime, like any clock.
pub fn replay_clock(header: Option<&super::log::Header>) -> Clock {
    Clock::with_wall_anchor(header.and_then(super::log::Header::started_ms).unwrap_or(0))
}

/// Whether the log (its segments, in order) has an attempt record: read up
/// to the first one, so a recorded log answers at once.
pub fn has_attempts(paths: &[std::path::PathBuf], skip_bad_lines: bool) -> Result<bool, LogError> {
    let mut reader = LogReader::open_all(paths, skip_bad_lines)?;
    reader.check_only_outcomes();
    while let Some(r) = reader.next_record()? {
        if matches!(r, Record::Attempt(_)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// How long a log runs (the `t_ms` of its last record, from its first in a
/// log without a header), read from its ends (the first segment's head,
/// the last one's tail) without scanning the whole log; None if no record
/// is found there.
pub fn log_length_ms(paths: &[std::path::PathBuf]) -> Option<u64> {
    use std::io::{BufRead, Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(paths.first()?).ok()?;
    let first = std::io::BufReader::new(&mut f)
        .lines()
        .map_while(Result::ok)
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str::<serde_json::Value>(&l).ok())?;
    let origin = match first.get("kind").and_then(serde_json::Value::as_str) {
        Some("header") => 0,
        _ => first.get("t_ms").and_then(serde_json::Value::as_u64)?,
    };
    if paths.len() > 1 {
        f = std::fs::File::open(paths.last()?).ok()?;
    }
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(256 << 10);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    String::from_utf8_lossy(&tail)
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v.get("t_ms").and_then(serde_json::Value::as_u64))
        .map(|last| last.saturating_sub(origin))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(t_ms: u64, request: u64, status: u16) -> Arc<AttemptRec> {
        Arc::new(AttemptRec {
            t_ms,
            request,
            target: "provider:p".into(),
            model: None,
            status: Some(status),
            transport: None,
            latency_ms: 10,
            input_tokens: 1,
            output_tokens: 1,
            headers: Default::default(),
            semantic_failure: None,
            tool_calls: Vec::new(),
            tool_keys: Vec::new(),
        })
    }

    /// Adds `a` to `fleet` as the log reader hands it over at time 0.
    fn add(fleet: &RecordedFleet, a: Arc<AttemptRec>, late: bool) {
        let t = fleet.target(&a.target);
        fleet.add(ReadAttempt::new(a, t, late), 0);
    }

    /// Runs 50 tasks sleeping different times on a stepped runtime; every
    /// read of the clock gives tokio's time. Returns the virtual time taken.
    fn sleepers(rt: &VirtualRuntime) -> u64 {
        rt.block_on(async {
            let clock = Clock::with_wall_anchor(0);
            assert_eq!(clock.now(), Instant::now(), "before the first step");
            let tasks: Vec<_> = (0..50u64)
                .map(|i| {
                    tokio::spawn(async move {
                        for k in 0..5u64 {
                            tokio::time::sleep(Duration::from_millis((i * 7 + k * 13) % 40 + 1)).await;
                            assert_eq!(clock.now(), Instant::now(), "task {i}, sleep {k}");
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            clock.elapsed_ms()
        })
    }

    #[test]
    fn a_stepped_clock_reads_tokio_s_time_and_forgets_it_with_its_runtime() {
        let first = sleepers(&runtime(false, true).unwrap());
        assert!(first >= 40, "{first}");
        // A second runtime on this thread starts at its own time, not at
        // the first one's last step.
        assert_eq!(sleepers(&runtime(false, true).unwrap()), first);
    }

    #[test]
    fn own_attempts_that_came_with_the_body_wait_until_the_replay_reads_them() {
        let fleet = RecordedFleet::default();
        let t = fleet.target("provider:p");
        // Another request's attempt has been read; request 1's own attempt
        // (at 100 ms) came early, with its body.
        add(&fleet, attempt(0, 9, 503), true);
        let own = attempt(100, 1, 429);
        OWN.sync_scope(RefCell::new(SmallVec::from_iter([own.clone()])), || {
            let (a, is_own) = fleet.take_at(1, t, "provider:p", 0).unwrap();
            assert_eq!(
                (a.status, is_own),
                (Some(503), false),
                "not read yet: the target's history answers"
            );
            // Once read, it is request 1's own.
            add(&fleet, own, false);
            let (a, is_own) = fleet.take_at(1, t, "provider:p", 0).unwrap();
            assert_eq!((a.status, is_own), (Some(429), true));
            // Used once.
            assert!(!fleet.take_at(1, t, "provider:p", 0).unwrap().1);
        });
    }

    #[test]
    fn a_target_never_called_keeps_only_the_history_a_call_could_get() {
        let fleet = RecordedFleet::default();
        let t = fleet.target("provider:p");
        // Read 30 s ahead of the replay, which never calls the target.
        for i in 0..100_000u64 {
            let a = attempt(i * 10, i, 200);
            fleet.add(ReadAttempt::new(a, t, false), (i * 10).saturating_sub(30_000));
        }
        let f = fleet.inner.lock();
        // From the latest at or before now to the horizon: 3,001 of 100,000.
        assert_eq!(f.recent[t].len(), 3_001);
        assert_eq!(f.recent[t].front().map(|(t_ms, _)| *t_ms), Some(969_990));
    }

    #[test]
    fn an_own_attempt_read_after_its_request_ended_is_history_only() {
        let fleet = RecordedFleet::default();
        let t = fleet.target("provider:p");
        // The replay ended request 1 before its recorded attempt is read.
        fleet.forget(1);
        add(&fleet, attempt(100, 1, 503), true);
        assert!(fleet.inner.lock().own.is_empty(), "nothing waits for it");
        let taken = fleet.take_at(2, t, "provider:p", 100).map(|(a, own)| (a.status, own));
        assert_eq!(taken, Some((Some(503), false)), "the target's history has it");
    }

    #[test]
    fn attempts_read_after_the_body_follow_those_that_came_with_it() {
        let fleet = RecordedFleet::default();
        let t = fleet.target("provider:p");
        let (first, second) = (attempt(10, 1, 500), attempt(20, 1, 200));
        add(&fleet, first.clone(), false);
        // The later attempt is read (late) before the request starts.
        add(&fleet, second, true);
        let statuses: Vec<_> = OWN.sync_scope(RefCell::new(SmallVec::from_iter([first])), || {
            (0..2)
                .map(|_| fleet.take_at(1, t, "provider:p", 30).unwrap().0.status)
                .collect()
        });
        assert_eq!(statuses, [Some(500), Some(200)]);
    }

    #[test]
    fn a_deferred_request_keeps_the_rest_of_its_own_attempts_for_its_redrive() {
        let fleet = RecordedFleet::default();
        let t = fleet.target("provider:p");
        let body = [attempt(10, 1, 500), attempt(20, 1, 503)];
        for a in &body {
            add(&fleet, a.clone(), false);
        }
        add(&fleet, attempt(30, 1, 429), true);
        OWN.sync_scope(RefCell::new(SmallVec::from_iter(body)), || {
            assert_eq!(fleet.take_at(1, t, "provider:p", 40).unwrap().0.status, Some(500));
            // Deferred: what is left goes to the fleet with the task's end.
            fleet.keep(1, OWN.with(RefCell::take));
        });
        // The re-drive runs in another task, with no own attempts of its own.
        let taken: Vec<_> = (0..3).map(|_| fleet.take_at(1, t, "provider:p", 40).unwrap()).collect();
        let taken: Vec<_> = taken.iter().map(|(a, own)| (a.status, *own)).collect();
        assert_eq!(taken, [(Some(503), true), (Some(429), true), (Some(429), false)]);
    }

    #[test]
    fn unmade_requests_are_found_by_place_with_consecutive_ids_or_not() {
        for ids in [vec![5, 6, 7, 8], vec![5, 6, 9, 6]] {
            let mut u = Unmade::default();
            for &id in &ids {
                u.push(id);
            }
            u.get_mut(6).unwrap().push(attempt(1, 6, 200));
            if let Some(own) = u.get_mut(9) {
                own.push(attempt(2, 9, 200));
            }
            assert!(u.get_mut(4).is_none() && u.get_mut(10).is_none());
            assert!(u.take_next(5).is_empty());
            assert_eq!(u.take_next(6).len(), 1, "{ids:?}");
            // Once made, a request's later attempts go on their own.
            assert!(u.get_mut(6).is_none(), "{ids:?}");
            assert_eq!(u.take_next(ids[2]).len(), usize::from(ids[2] == 9));
            // A repeated id is found while its first request waits, not after.
            assert_eq!(u.get_mut(ids[3]).is_some(), ids[3] == 8, "{ids:?}");
        }
    }
}
