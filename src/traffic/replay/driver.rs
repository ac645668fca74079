//! The replay's driver: reads the log a horizon ahead of virtual time,
//! starts each request at its recorded time, as it came in, and re-applies
//! recorded operator actions.

use super::calls::{OwnAttempts, ReadAttempt, RecordedCalls, OWN};
use super::progress::RecordedOutcomes;
use super::request::{agent_request, embeddings_call, gateway_call, tool_call};
use crate::command::Issuer;
use crate::outcome::Level;
use crate::request::{AgentRequest, Via};
use crate::runner::Runner;
use crate::target::Target;
use crate::traffic::log::{LogError, LogReader, OperatorRec, OutcomeRec, Record, RequestRec};
use crate::traffic::replay::prefetch::{GiveBack, Prefetched, Split};
use parking_lot::Mutex;
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
    calls: Option<Arc<RecordedCalls>>,
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
impl InFlight {
    fn new(runner: &Arc<Runner>, calls: &Option<Arc<RecordedCalls>>, compare: bool) -> Arc<Self> {
        Arc::new(Self {
            runner: runner.clone(),
            calls: calls.clone(),
            compare,
            running: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            levels: Mutex::default(),
            all_done: Notify::new(),
            finished: Mutex::default(),
        })
    }

    /// Notes in `out` what the replayed requests left: those lost, and
    /// each one's replayed level (for a comparison).
    fn note_end(&self, out: &mut Replayed) {
        out.lost = self.lost.load(Ordering::Relaxed);
        if out.lost > 0 {
            tracing::error!(lost = out.lost, "replayed requests ended without an outcome");
        }
        for (id, level) in self.levels.lock().drain() {
            out.levels.entry(id).or_default().1 = Some(level);
        }
    }
}

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

/// On the log reader's thread: the recorded calls's index of each target
/// seen, so attempts are handed over indexed without taking its lock.
struct KnownTargets {
    calls: Arc<RecordedCalls>,
    known: HashMap<Target, usize, ahash::RandomState>,
}

impl KnownTargets {
    fn new(calls: Arc<RecordedCalls>) -> Self {
        Self {
            calls,
            known: HashMap::default(),
        }
    }

    /// The calls's index of `target`.
    fn index(&mut self, target: &Target) -> usize {
        if let Some(&t) = self.known.get(target) {
            return t;
        }
        let t = self.calls.target(target);
        self.known.insert(target.clone(), t);
        t
    }
}

/// A record as the replay takes it, made ready on the reader's thread.
enum Ahead {
    /// A request due at `t_ms`; the agent request it stands for is made
    /// just before it is due ([`Prefetched::next_body`]).
    Request(u64),
    /// An attempt, shared as the recorded calls keeps it.
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
    calls: Option<&'a RecordedCalls>,
}

impl Drop for GivingBack<'_> {
    fn drop(&mut self) {
        *self.inflight.finished.lock() = None;
        if let Some(f) = self.calls {
            f.give_back(None);
        }
    }
}

/// Re-drives every request of `reader` through `runner` at its recorded
/// time; `calls` (recorded mode) is fed the attempts as they are read.
pub async fn replay(
    runner: Arc<Runner>,
    mut reader: LogReader,
    calls: Option<Arc<RecordedCalls>>,
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
            targets: calls.clone().map(KnownTargets::new),
        },
        move |state, r, line| split(state, r, line, outcomes, operator),
        make_body,
    )
    .map_err(|error| LogError::Io { path, error })?;
    let start = Instant::now();
    let due = |t_ms: u64| start + Duration::from_millis(t_ms);
    let mut out = Replayed::default();
    let inflight = InFlight::new(&runner, &calls, opts.compare);
    // What was read on the reader's thread is freed there.
    *inflight.finished.lock() = Some(reader.give_back());
    if let Some(f) = &calls {
        f.give_back(Some(reader.give_back()));
    }
    let giving_back = GivingBack {
        inflight: &inflight,
        calls: calls.as_deref(),
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
                    if let Some(f) = &calls {
                        f.add(a, clock.ms_at(now));
                    }
                }
                Ahead::Operator(rec) => {
                    let (op, line) = *rec;
                    if let Some(at) = schedule(&runner, &op, line, due(op.t_ms), &mut out) {
                        ops_due = ops_due.max(at);
                    }
                }
                Ahead::Outcome(o) => {
                    if opts.compare {
                        out.levels.entry(o.request.n()).or_default().0 = Some(o.level);
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
            tokio::spawn(boxed(|| OWN.scope(RefCell::new(own), drive(running, req, key, via))));
        }
        let wake = [
            queue.front().map(|t_ms| due(*t_ms)),
            next.as_ref().map(|r| due(r.t_ms()) - HORIZON),
        ];
        match wake.into_iter().flatten().min() {
            Some(at) => {
                let now = clock.now();
                let jump = opts.jump_idle && ops_due <= now;
                pause_until((now, at), wait.as_mut(), jump, &inflight).await;
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
    inflight.note_end(&mut out);
    if let Some(r) = reader.finished() {
        (out.bad_lines, out.unknown_kinds, out.torn_lines) = (r.bad_lines(), r.unknown_kinds(), r.torn_lines());
    }
    Ok(out)
}

/// Waits from `now` until `at` on the reset `wait`; where it may `jump`,
/// an idle wait of more than [`JUMP_OVER`] is jumped: at once when no
/// request runs, else as soon as the running ones end (the caller looks
/// again then).
async fn pause_until(
    (now, at): (Instant, Instant),
    mut wait: std::pin::Pin<&mut tokio::time::Sleep>,
    jump: bool,
    inflight: &InFlight,
) {
    let idle = at.saturating_duration_since(now);
    wait.as_mut().reset(at);
    if jump && idle > JUMP_OVER {
        if inflight.running.load(Ordering::Acquire) > 0 {
            tokio::select! {
                () = inflight.all_done.notified() => {}
                () = wait.as_mut() => {}
            }
            return;
        }
        tokio::time::advance(idle).await;
        // The clock's reading of this step, moved on too.
        crate::clock::note_step();
    }
    wait.await;
}

/// What a record read becomes on the reader's thread: a request's time
/// now and its body later, an attempt for the recorded calls (its target's
/// index found there), an outcome or operator action when the replay uses
/// them; the rest is dropped there.
fn split(state: &mut Reading, r: Record, line: u64, outcomes: bool, operator: bool) -> Split<Ahead, Box<RequestRec>> {
    match r {
        Record::Request(q) => {
            state.unmade.push(q.id.n());
            // Boxed: a request waits here for as long as the reader is
            // ahead, and a box (reused as soon as it is freed) is cheaper
            // to write than a place in a long queue.
            Split::Later(Ahead::Request(q.t_ms), q.into())
        }
        Record::Attempt(a) => match &mut state.targets {
            Some(targets) => {
                let a = Arc::new(a);
                let target = targets.index(&a.target);
                let late = match state.unmade.get_mut(a.request.n()) {
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
    }
}

/// A request's body, made on the reader's thread: the request, the
/// attempts read with it, its answer-cache key and how it came in.
fn make_body(state: &mut Reading, q: Box<RequestRec>) -> (AgentRequest, OwnAttempts, u64, Via) {
    let own = state.unmade.take_next(q.id.n());
    let (recorded, via) = (q.answer_key, q.via);
    let req = agent_request(*q);
    let key = recorded.map_or_else(|| crate::runner::agent::answer_key(&req), |k| k.0);
    (req, own, key, via)
}

/// Schedules a recorded operator action at `at` on `runner`, where this
/// config has what it names (else it is said in `out`, not applied);
/// returns when it is due.
fn schedule(runner: &Arc<Runner>, op: &OperatorRec, line: u64, at: Instant, out: &mut Replayed) -> Option<Instant> {
    match op.command().and_then(|c| runner.catalog().check(&c).map(|()| c)) {
        Err(e) => {
            // Not this config's (a what-if without that provider, say).
            tracing::warn!(line, error = %e, "recorded operator action not applicable");
            out.operator_refused
                .push(format!("line {line}: {} {}: {e}", op.action, op.target));
            None
        }
        Ok(cmd) => {
            out.operator_actions += 1;
            let r = runner.clone();
            let by = Issuer::operator(&format!("replay of {}", op.by));
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                if let Err(e) = r.operations().apply(&cmd, &by) {
                    tracing::warn!(error = %e, "recorded operator action not applied");
                }
            });
            Some(at)
        }
    }
}

/// A replayed stream's client: it reads everything, and keeps nothing.
struct Discard;

impl crate::runner::stream::StreamSink for Discard {
    fn start(&mut self, _: crate::runner::stream::StreamHead) {}
    fn piece(&mut self, _: crate::wire::Api, _: &crate::provider::Piece, _: bool) {}
}

/// Runs one replayed request as it came in (a gateway call is one call,
/// never deferred) and notes its end.
async fn drive(running: Running, req: AgentRequest, key: u64, via: Via) {
    let shared = &*running.inflight;
    let runner = &shared.runner;
    let o = match via {
        Via::Agent => runner.run_keyed(&req, key).await,
        Via::Gateway if req.stream => {
            let mut sink = Discard;
            runner.chat(gateway_call(runner, &req), Some(&mut sink)).await.outcome
        }
        Via::Gateway => runner.chat(gateway_call(runner, &req), None).await.outcome,
        Via::Embeddings => runner.embed(embeddings_call(&req)).await.outcome,
        Via::Tool => runner.tool(&tool_call(&req, key)).await.1,
    };
    if let Some(finished) = &mut *shared.finished.lock() {
        finished.put(req);
    }
    // A deferred request is re-driven later (in another task) and needs
    // the rest of its recorded attempts then.
    if let Some(f) = &shared.calls {
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
}

/// The future `make` returns, built in its box. Boxing a future built
/// first copies all of it, though most of a request's few kilobytes are
/// not in use before it first runs.
fn boxed<F: std::future::Future>(make: impl FnOnce() -> F) -> std::pin::Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

#[cfg(test)]
mod tests {
    use super::super::calls::tests::attempt;
    use super::*;

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
