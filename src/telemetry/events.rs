//! Notable events: transitions, degradations, budget warnings, operator
//! actions, deferred-queue activity and per-request outcome records.
//!
//! The bus keeps the most recent notable events for views and forwards every
//! event to subscribers (the recorder, the headless summary). Outcome records
//! are only built when someone subscribed, so the hot path stays allocation-free
//! when nobody listens.

use crate::clock::Clock;
use crate::outcome::Outcome;
use crate::resilience::notice::{Announce, Notice};
pub use crate::resilience::notice::{BudgetWarning, RefillFrozen, SpendRateTrip, Transition};
use crate::target::Target;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// What happened.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// A breaker changed state.
    Transition(Transition),
    /// A user or global budget crossed its soft limit.
    BudgetWarning(BudgetWarning),
    /// A user's request was refused by a budget (the first refusal per user
    /// and minute; the rest are counted in the summary).
    BudgetRejected {
        /// The user.
        user: String,
        /// Which budget, and by how much.
        reason: String,
    },
    /// Limiter refills were frozen (Retry-After or operator).
    RefillFrozen(RefillFrozen),
    /// A user's or everyone's spend-rate breaker opened.
    SpendRateTripped(SpendRateTrip),
    /// An operator command was applied.
    Operator {
        /// The command.
        #[serde(flatten)]
        command: crate::command::Command,
        /// Who issued it.
        by: crate::command::Issuer,
        /// Whether it was applied.
        applied: bool,
        /// Result in words (what it did, or why not).
        result: String,
    },
    /// A command that could not be read was refused (it is on the audit
    /// trail all the same).
    CommandRefused {
        /// What was sent (cut to a bounded length).
        sent: String,
        /// Who sent it.
        by: crate::command::Issuer,
        /// Why it is not a command.
        reason: String,
    },
    /// A request was deferred to the spool.
    Deferred {
        /// Request id.
        request: u64,
        /// Why.
        reason: String,
    },
    /// A deferred request was re-driven and ended.
    DeferredDone {
        /// Request id.
        request: u64,
        /// Its final level.
        level: crate::outcome::Level,
    },
    /// The config was read again (`serve` on SIGHUP).
    Reloaded {
        /// What changed, or why nothing did, in words.
        changes: String,
        /// Whether it was applied (else refused, and nothing changed).
        applied: bool,
    },
    /// A streamed answer's events that could not be read were skipped
    /// (never passed on to a client).
    EventsSkipped {
        /// The provider that sent them.
        target: Target,
        /// The request.
        request: u64,
        /// How many.
        count: u32,
    },
    /// The recorder stopped on an I/O error: the rest of the run is not
    /// recorded (the error is also the run's exit error).
    RecordingFailed {
        /// The log being written.
        path: String,
        /// What failed.
        error: String,
    },
    /// A watched instance was lost, came back or restarted (`attach`; the
    /// event's instance names it).
    Instance {
        /// What changed.
        change: InstanceChange,
        /// Why, or what it means, in words.
        detail: String,
    },
    /// The outcome record of one request (subscribers only).
    Outcome(Box<Outcome>),
    /// A request arrived (subscribers only, for the recorder).
    Request(Box<Arrival>),
    /// One provider or tool call finished (subscribers only, for the recorder).
    Attempt(Box<Attempt>),
    /// A decision on a request's path other than a call (subscribers only, for traces).
    Step(Box<Step>),
}

/// How a watched instance changed.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InstanceChange {
    /// It went silent or could not be reached.
    Lost,
    /// It answers again.
    Back,
    /// It answers as a new process (its time went back).
    Restarted,
}

/// A decision on a request's path that made no call, or waited before the
/// next one: what a trace shows between its attempts.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Step {
    /// Request id.
    pub request: u64,
    /// The provider, model or tool it concerns.
    pub target: Target,
    /// What was decided.
    pub kind: StepKind,
}

/// What a [`Step`] decided.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum StepKind {
    /// Refused by an open breaker, without a call.
    ShortCircuit,
    /// Refused by the rate limiter.
    RateLimited,
    /// Refused by a full bulkhead (tool pool).
    PoolFull,
    /// Skipped: its latency breaks the route's SLA.
    SlaSkipped,
    /// Skipped: it cannot serve the request (e.g. another API's feature).
    Unsupported {
        /// Why.
        why: String,
    },
    /// A failed call is retried after a wait.
    Retry {
        /// The wait before the next try (ms).
        wait_ms: u64,
        /// The failure retried, as a label (`503`, `timeout`, …).
        after: String,
    },
    /// Refused by a budget.
    BudgetRefused {
        /// Which budget, and by how much.
        reason: String,
    },
    /// A call slow to answer is hedged: a second attempt goes to the
    /// next model (the target: the model the first is waiting on).
    Hedge {
        /// How long the first had run (ms).
        after_ms: u64,
    },
    /// Shed from its provider's waiting queue.
    Shed {
        /// The call's priority.
        priority: crate::config::Priority,
        /// Why.
        why: crate::resilience::limiter::ShedWhy,
    },
}

/// A request as it came in, for the recorder.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Arrival {
    /// The request (a gateway call as the agent request it stands for).
    #[serde(flatten)]
    pub request: crate::request::AgentRequest,
    /// How it came in.
    pub via: crate::request::Via,
}

/// What cut short a call that had begun to answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cut {
    /// Its user's hard budget: the stream was cut where it would pass it.
    Budget,
    /// Its client went away (or stopped reading its stream).
    Left,
    /// The gateway's drain time ran out at shutdown.
    Drained,
    /// A hedged call answered first.
    Outrun,
    /// It continued a cut answer and did not line up with what the client
    /// had (it wrote part of it again, then went on differently).
    Unaligned,
}

impl Cut {
    /// Its name, as a recording writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Cut::Budget => "budget",
            Cut::Left => "left",
            Cut::Drained => "drained",
            Cut::Outrun => "outrun",
            Cut::Unaligned => "unaligned",
        }
    }

    /// The cut named `s` ([`Cut::as_str`]).
    pub fn named(s: &str) -> Option<Self> {
        [Cut::Budget, Cut::Left, Cut::Drained, Cut::Outrun, Cut::Unaligned]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

/// One provider or tool call, as the recorder writes it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Attempt {
    /// Request id.
    pub request: u64,
    /// The provider or tool called.
    pub target: Target,
    /// Model, for provider calls.
    pub model: Option<String>,
    /// HTTP status, when there was one (200 for success).
    pub status: Option<u16>,
    /// How it failed below HTTP, if it did.
    pub transport: Option<crate::provider::Transport>,
    /// Latency (ms).
    pub latency_ms: u64,
    /// Input tokens.
    pub input_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
    /// What it was charged (USD): its tokens at its model's prices, as its
    /// user's budgets were charged (0 for a tool).
    #[serde(default)]
    pub cost_usd: f64,
    /// Rate-limit and retry-after feedback.
    pub rate: crate::resilience::limiter::RateFeedback,
    /// Semantic failure, in words.
    pub semantic_failure: Option<String>,
    /// Tool names the model asked for.
    pub tool_calls: Vec<String>,
    /// Each of those calls' key in the tool result cache (not shown: a
    /// recording salts them).
    #[serde(skip)]
    pub tool_keys: Vec<u64>,
    /// A tool's answer (recorded only with content `full`).
    #[serde(skip)]
    pub answer: Option<Arc<str>>,
    /// The model an answer named, when it named one (for traces).
    #[serde(skip)]
    pub response_model: Option<String>,
    /// The upstream's id of its answer (`chatcmpl-…`, `msg_…`), to find
    /// the request by in the console and the recording.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// Why the model stopped, for an answer (for traces).
    #[serde(skip)]
    pub finish: Option<crate::wire::Finish>,
    /// What cut it short, when something did before it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<Cut>,
}

impl Attempt {
    /// A call of `target` for request `request`, with nothing measured yet.
    pub fn of(request: u64, target: Target) -> Self {
        Self {
            request,
            target,
            model: None,
            status: None,
            transport: None,
            latency_ms: 0,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            rate: Default::default(),
            semantic_failure: None,
            tool_calls: Vec::new(),
            tool_keys: Vec::new(),
            answer: None,
            response_model: None,
            response_id: None,
            finish: None,
            cut: None,
        }
    }
}

impl StepKind {
    /// A retry of failure `e` after `wait`.
    pub fn retry(wait: std::time::Duration, e: &crate::provider::ProviderError) -> Self {
        StepKind::Retry {
            wait_ms: wait.as_millis() as u64,
            after: e.kind.label(e.status).to_string(),
        }
    }
}

impl Announce for EventBus {
    fn announce(&self, notice: Notice) {
        self.emit(match notice {
            Notice::Transition(t) => EventKind::Transition(t),
            Notice::BudgetWarning(w) => EventKind::BudgetWarning(w),
            Notice::RefillFrozen(f) => EventKind::RefillFrozen(f),
            Notice::SpendRate(t) => EventKind::SpendRateTripped(t),
        });
    }
}

/// An event with the virtual time it happened at.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Event {
    /// Milliseconds since the runner started.
    pub t_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
    /// The instance it happened on, where a console watches several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

struct Sub {
    tx: SubTx,
    /// Wants per-request records too, not only notable events.
    records: bool,
}

enum SubTx {
    /// A consumer on the runtime (console, summary): never blocks.
    Async(mpsc::UnboundedSender<Event>),
    /// A consumer on its own thread (the recorder): a full channel blocks
    /// the emitter until the consumer catches up. That is back-pressure,
    /// and it cannot deadlock: the consumer never waits on the runtime.
    Bounded(std::sync::mpsc::SyncSender<Event>),
    /// A consumer that may fall behind (traces): a full channel drops the
    /// event and counts it, so the emitter never waits.
    Lossy(mpsc::Sender<Event>, Arc<AtomicU64>),
    /// A consumer outside the process (a watcher of the gateway's events):
    /// a full channel ends the subscription, marked as fallen behind and
    /// counted, so a watcher that stops reading holds at most the
    /// channel's events.
    Watcher(mpsc::Sender<Event>, Arc<AtomicBool>, Arc<AtomicU64>),
}

impl SubTx {
    /// Sends, false once the receiver is gone.
    fn send(&self, ev: Event) -> bool {
        match self {
            SubTx::Async(tx) => tx.send(ev).is_ok(),
            SubTx::Bounded(tx) => tx.send(ev).is_ok(),
            SubTx::Lossy(tx, dropped) => match tx.try_send(ev) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(ev)) => {
                    // A lost attempt is a span lost. A lost outcome is
                    // counted when its request is given up; without its
                    // arrival a request's span is still made.
                    if matches!(ev.kind, EventKind::Attempt(_)) {
                        dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    true
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            },
            // What a request asked (its whole conversation) and the
            // steps of its trace are not a watcher's.
            SubTx::Watcher(..) if matches!(ev.kind, EventKind::Request(_) | EventKind::Step(_)) => true,
            SubTx::Watcher(tx, behind, dropped) => match tx.try_send(without_content(ev)) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    behind.store(true, Ordering::Release);
                    dropped.fetch_add(1, Ordering::Relaxed);
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            },
        }
    }
}

/// `ev` without the texts it may hold of a conversation (a tool's or a
/// model's answer), which a watcher is not sent: what it queues stays small.
fn without_content(mut ev: Event) -> Event {
    match &mut ev.kind {
        EventKind::Outcome(o) => o.answer = None,
        EventKind::Attempt(a) => a.answer = None,
        _ => {}
    }
    ev
}

/// A bounded subscription for a consumer that may stop reading
/// ([`EventBus::subscribe_watcher`]).
pub struct Watcher {
    /// The events, until the subscription ends.
    pub rx: mpsc::Receiver<Event>,
    /// Set when it ended because the consumer fell a whole channel behind.
    pub behind: Arc<AtomicBool>,
}

impl Watcher {
    /// Whether the subscription ended because its consumer fell behind.
    pub fn fell_behind(&self) -> bool {
        self.behind.load(Ordering::Acquire)
    }
}

/// Fan-out of events to a recent-history ring and subscribers.
pub struct EventBus {
    clock: Clock,
    recent: Mutex<VecDeque<Event>>,
    capacity: usize,
    subs: Mutex<Vec<Sub>>,
    /// Someone subscribed to per-request records (requests, attempts,
    /// outcomes): only then are they built at all.
    has_subs: AtomicBool,
    seq: AtomicU64,
}

impl EventBus {
    /// A bus keeping the last `capacity` notable events.
    pub fn new(clock: Clock, capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            clock,
            recent: Mutex::new(VecDeque::with_capacity(capacity)),
            capacity,
            subs: Mutex::new(Vec::new()),
            has_subs: AtomicBool::new(false),
            seq: AtomicU64::new(0),
        })
    }

    /// Closes every subscription (their receivers drain what is left and
    /// end): how a recorder is told to flush and stop.
    pub fn close_subscribers(&self) {
        self.subs.lock().clear();
        self.has_subs.store(false, Ordering::Release);
    }

    /// Every event from now on, in order, without loss.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Event> {
        self.add_sub(true)
    }

    /// Notable events only (no per-request records) from now on, in order,
    /// without loss: cheap enough to keep for a whole run.
    pub fn subscribe_notable(&self) -> mpsc::UnboundedReceiver<Event> {
        self.add_sub(false)
    }

    /// Every event from now on, in order, without loss, through a channel
    /// of `capacity` events to a consumer on its own thread: emitters wait
    /// while it is full.
    pub fn subscribe_bounded(&self, capacity: usize) -> std::sync::mpsc::Receiver<Event> {
        let (tx, rx) = std::sync::mpsc::sync_channel(capacity);
        self.push_sub(SubTx::Bounded(tx), true);
        rx
    }

    /// Every event from now on, in order, through a channel of `capacity`
    /// events; while it is full, events are dropped, and the spans that
    /// costs counted in `dropped`.
    pub fn subscribe_lossy(&self, capacity: usize, dropped: Arc<AtomicU64>) -> mpsc::Receiver<Event> {
        let (tx, rx) = mpsc::channel(capacity);
        self.push_sub(SubTx::Lossy(tx, dropped), true);
        rx
    }

    /// Notable events (and with `records` the per-request records too)
    /// from now on, in order, through a channel of `capacity` events: a
    /// consumer that lets it fill is dropped ([`Watcher::fell_behind`]),
    /// so it never holds more, nor slows the emitters; each one dropped
    /// is counted in `dropped`.
    pub fn subscribe_watcher(&self, capacity: usize, records: bool, dropped: Arc<AtomicU64>) -> Watcher {
        let (tx, rx) = mpsc::channel(capacity);
        let behind = Arc::new(AtomicBool::new(false));
        self.push_sub(SubTx::Watcher(tx, behind.clone(), dropped), records);
        Watcher { rx, behind }
    }

    fn add_sub(&self, records: bool) -> mpsc::UnboundedReceiver<Event> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.push_sub(SubTx::Async(tx), records);
        rx
    }

    fn push_sub(&self, tx: SubTx, records: bool) {
        self.subs.lock().push(Sub { tx, records });
        if records {
            self.has_subs.store(true, Ordering::Release);
        }
    }

    /// Whether anyone listens for per-request records.
    #[inline]
    pub fn has_subscribers(&self) -> bool {
        self.has_subs.load(Ordering::Acquire)
    }

    /// Publishes an event stamped with the current time.
    pub fn emit(&self, kind: EventKind) {
        let ev = Event {
            t_ms: self.clock.elapsed_ms(),
            kind,
            instance: None,
        };
        let record = matches!(
            ev.kind,
            EventKind::Outcome(_) | EventKind::Request(_) | EventKind::Attempt(_) | EventKind::Step(_)
        );
        if record && !self.has_subscribers() {
            return;
        }
        if !record {
            self.seq.fetch_add(1, Ordering::Relaxed);
            let mut r = self.recent.lock();
            if r.len() == self.capacity {
                r.pop_front();
            }
            r.push_back(ev.clone());
        }
        let mut subs = self.subs.lock();
        // The last subscriber that takes it gets the event itself, not a copy.
        let takes = |s: &Sub| !record || s.records;
        let last = subs.iter().rposition(takes);
        let mut ev = Some(ev);
        let mut i = 0;
        subs.retain(|s| {
            let mine = i;
            i += 1;
            if !takes(s) {
                return true;
            }
            let copy = if Some(mine) == last { ev.take() } else { ev.clone() };
            copy.is_some_and(|e| s.tx.send(e))
        });
        // A subscriber gone (or dropped for falling behind) may have been
        // the last one wanting records.
        if self.has_subscribers() && !subs.iter().any(|s| s.records) {
            self.has_subs.store(false, Ordering::Release);
        }
    }

    /// The most recent notable events, oldest first.
    pub fn recent(&self, max: usize) -> Vec<Event> {
        let r = self.recent.lock();
        r.iter().skip(r.len().saturating_sub(max)).cloned().collect()
    }

    /// How many notable events were emitted so far.
    pub fn count(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drill() -> EventKind {
        EventKind::Operator {
            command: crate::command::Command::DrillOn,
            by: crate::command::Issuer::operator("ana"),
            applied: true,
            result: String::new(),
        }
    }

    #[tokio::test]
    async fn a_watcher_that_falls_a_channel_behind_is_dropped_counted_and_told() {
        let bus = EventBus::new(Clock::system(), 8);
        let dropped = Arc::new(AtomicU64::new(0));
        let mut slow = bus.subscribe_watcher(4, true, dropped.clone());
        let mut keeping_up = bus.subscribe_watcher(4, false, dropped.clone());
        for _ in 0..10 {
            bus.emit(drill());
            // The other one reads as they come.
            assert!(keeping_up.rx.try_recv().is_ok());
        }
        assert_eq!(dropped.load(Ordering::Relaxed), 1, "the slow one, once");
        assert!(!bus.has_subscribers(), "its records are no longer built");
        let mut held = 0;
        while slow.rx.recv().await.is_some() {
            held += 1;
        }
        assert_eq!(held, 4, "what it held, then its end");
        assert!(slow.fell_behind() && !keeping_up.fell_behind());
        // A request's conversation is never queued for a watcher.
        let mut w = bus.subscribe_watcher(4, true, dropped.clone());
        bus.emit(EventKind::Request(Box::new(Arrival {
            request: Default::default(),
            via: Default::default(),
        })));
        assert!(w.rx.try_recv().is_err());
    }
}
