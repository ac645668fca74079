//! The console's state and key handling: which pane has focus, selections,
//! filters, overlays, and the operator commands keys turn into. It reads
//! snapshots and events; it never touches the runner.

use super::action::Action;
use super::history::{Recent, Seen, RECENT};
use super::lasting::Lasting;
use super::replay::ReplayView;
use super::track::{Span, Track};
use crate::command::Command;
use crate::resilience::breaker::BreakerState;
use crate::target::Target;
use crate::telemetry::events::{Event, EventKind};
use crate::telemetry::histogram::HistogramView;
use crate::telemetry::snapshot::{BreakerRow, Snapshot, UserRow};
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// The panes, in Tab order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pane {
    /// Breakers table.
    Breakers,
    /// Limiters.
    Limiters,
    /// Budgets.
    Budgets,
    /// Fallback chains and recent requests.
    Chains,
    /// Events.
    Events,
}

impl Pane {
    /// All panes in Tab order.
    pub const ALL: [Pane; 5] = [
        Pane::Breakers,
        Pane::Limiters,
        Pane::Budgets,
        Pane::Chains,
        Pane::Events,
    ];

    pub(super) fn index(self) -> usize {
        self as usize
    }

    /// The pane's title.
    pub fn title(self) -> &'static str {
        match self {
            Pane::Breakers => "Breakers",
            Pane::Limiters => "Limiters",
            Pane::Budgets => "Budgets",
            Pane::Chains => "Fallback chains",
            Pane::Events => "Events",
        }
    }
}

/// What the console runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Synthetic demo traffic.
    Demo,
    /// A replayed traffic log.
    Replay,
    /// Gateway traffic.
    Serve,
    /// Running gateways, watched over HTTP.
    Attach,
}

impl Mode {
    /// Label for the header.
    pub fn label(self) -> &'static str {
        match self {
            Mode::Demo => "DEMO",
            Mode::Replay => "REPLAY",
            Mode::Serve => "SERVE",
            Mode::Attach => "ATTACH",
        }
    }
}

/// Start-up options.
#[derive(Clone)]
pub struct Options {
    /// What the console runs over.
    pub mode: Mode,
    /// Mutating commands are disabled, and why (`started with --readonly`).
    pub readonly: Option<String>,
    /// Destructive commands skip confirmation.
    pub yes: bool,
    /// Who issues commands (recorded with them).
    pub operator: String,
    /// Scenario or log name for the header.
    pub source: String,
    /// Length of the replayed log (ms), for the progress bar.
    pub replay_length_ms: Option<u64>,
    /// The replay's progress: how it ended, and the recorded outcomes shown
    /// next to the replayed ones.
    pub replay: Option<Arc<dyn ReplayView>>,
}

/// An interaction overlay.
#[derive(Clone, Debug, PartialEq)]
pub enum Overlay {
    /// None.
    None,
    /// Typing a filter for the focused pane.
    Filter,
    /// Help.
    Help,
    /// The selected row in full.
    Detail,
    /// Waiting for y/n on a destructive command.
    Confirm {
        /// The question.
        prompt: String,
        /// What is sent on yes.
        order: Dispatch,
    },
}

/// A command and where it goes.
#[derive(Clone, Debug, PartialEq)]
pub struct Dispatch {
    /// The command.
    pub command: Command,
    /// The instance owning the row it was given on; None for this process,
    /// or for every instance an attached console watches.
    pub to: Option<String>,
}

/// What the caller must do after a key.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Nothing beyond redrawing.
    None,
    /// Send this command to the runner (or the instance it names).
    Send(Dispatch),
    /// Pause/resume, faster, slower or step the clock.
    Clock(Action),
    /// Write the screen and an incident snapshot.
    WriteIncident,
    /// Leave.
    Quit,
}

/// How the breakers table is ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerSort {
    /// Worst state first, then error rate (Hystrix-style), then volume.
    Errors,
    /// By name.
    Name,
    /// By calls.
    Volume,
}

/// A breaker row's identity: its target and instance.
pub type RowKey = (Target, Option<String>);

/// `b`'s identity.
pub fn row_key(b: &BreakerRow) -> RowKey {
    (b.target.clone(), b.instance.clone())
}

/// The header's name of what the console watches: `what` (`scenario
/// tour`, `replay LOG`) and how its providers are reached.
pub fn source(what: &str, providers: &str) -> String {
    format!("{what} · providers {providers}")
}

/// The console state.
pub struct App {
    /// Options.
    pub opts: Options,
    /// The snapshot on screen.
    pub snap: Arc<Snapshot>,
    /// The display is frozen (the runner keeps going).
    pub display_frozen: bool,
    /// Focused pane.
    pub focus: Pane,
    /// Selected row per pane.
    pub selected: [usize; 5],
    /// The selected breaker and user by name: their rows move as the live
    /// order changes, and a command must hit what the operator selected.
    pinned_breaker: Option<(Target, Option<String>)>,
    pinned_user: Option<(String, Option<String>)>,
    /// The selected event, followed as newer ones arrive above it.
    pinned_event: Option<Event>,
    /// The selected request (id, instance, end time), likewise: the time
    /// tells apart two of one id (an instance that restarted counts from 1).
    pinned_request: Option<(u64, Option<String>, u64)>,
    /// Filter per pane.
    pub filters: [String; 5],
    /// Overlay.
    pub overlay: Overlay,
    /// One line of feedback (last action, errors).
    pub status: String,
    /// Breakers order.
    pub sort: BreakerSort,
    /// Events pane paused.
    pub events_paused: bool,
    /// Events shown while paused.
    pub events_frozen: Vec<Event>,
    /// Transitions, operator actions and instance changes for the whole
    /// run, after the snapshots no longer carry them.
    lasting: Lasting,
    /// Recent requests, newest last.
    pub recent: VecDeque<Recent>,
    /// Upstream ids of answers, by request and instance, until the
    /// request's outcome takes them.
    pub(super) upstream_ids: VecDeque<(u64, Option<String>, String)>,
    /// Each breaker row's calls and latencies over the last hour.
    pub tracks: HashMap<RowKey, Track>,
    /// How far back the sparklines and latency columns look.
    pub span: Span,
    /// The focused pane fills the screen.
    pub zoomed: bool,
    /// Lines of the help scrolled past (it may not fit the terminal).
    pub help_scroll: u16,
    /// Each breaker row's last calls, newest last, for its detail.
    pub attempts: HashMap<RowKey, VecDeque<Seen>>,
    /// Each breaker row's last failed calls, newest last.
    pub(super) failures: HashMap<RowKey, VecDeque<Seen>>,
    /// Each breaker row's last trip from closed: when, and the failed
    /// calls that led to it, newest last.
    pub tripped_by: HashMap<RowKey, (u64, Vec<Seen>)>,
    last_sample_ms: u64,
    /// Throughput and health over the last minute.
    pub rates: Throughput,
    /// The totals a second apart over the last minute, oldest first.
    window: VecDeque<Totals>,
    /// Speed factor and paused flag, for the header.
    pub clock: (f64, bool),
    /// Set when the user asked to quit.
    pub quit: bool,
}

/// A row of the events pane: an event, or a run of the same one.
#[derive(Clone, Debug)]
pub struct EventRow<'a> {
    /// Its newest occurrence.
    pub event: &'a Event,
    /// Its oldest occurrence in the run (what a selection holds on to).
    pub first: &'a Event,
    /// How many times in a row it was said.
    pub repeats: usize,
    /// What it says.
    pub said: Cow<'a, str>,
}

/// The trips from closed among `events`: each breaker row and when.
fn trips(events: &[&Event]) -> Vec<(RowKey, u64)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Transition(t) if t.from == BreakerState::Closed && t.to == BreakerState::Open => {
                Some(((t.breaker.clone(), e.instance.clone()), e.t_ms))
            }
            _ => None,
        })
        .collect()
}

/// A failed call's record may be stamped a little after the trip it caused.
const TRIP_SLACK_MS: u64 = 50;

/// Whether failed call `f` came before (so led to) a trip at `t_ms`.
pub(super) fn tripped(f: &Seen, t_ms: u64) -> bool {
    f.t_ms <= t_ms + TRIP_SLACK_MS
}

/// How far back the header's rates and shares look.
pub const RATE_WINDOW_MS: u64 = 60_000;

/// A snapshot's running totals, for rates between two of them.
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    t_ms: u64,
    requests: u64,
    tokens: u64,
    cost_usd: f64,
    by_level: [u64; 5],
}

impl Totals {
    fn of(s: &Snapshot) -> Self {
        Self {
            t_ms: s.t_ms,
            requests: s.requests,
            tokens: s.tokens,
            cost_usd: s.cost_usd,
            by_level: s.by_level,
        }
    }
}

/// Throughput and health over the last minute (or since the console
/// started, while it has run less): [`Throughput::window_ms`] says which.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Throughput {
    /// The time the figures span (ms); 0 before two samples.
    pub window_ms: u64,
    /// Requests per second.
    pub req_per_s: f64,
    /// Requests that ended in the window.
    pub ended: u64,
    /// Share of those answered without degradation (0..=1).
    pub success: f64,
    /// Share degraded (partial, fallback, deferred).
    pub degraded: f64,
    /// Share failed.
    pub failed: f64,
    /// Tokens per minute.
    pub tokens_per_min: f64,
    /// USD per minute.
    pub usd_per_min: f64,
}

impl Throughput {
    /// The rates from `old` to `new`.
    fn between(old: &Totals, new: &Totals) -> Self {
        let ms = new.t_ms.saturating_sub(old.t_ms);
        let mut r = Throughput {
            window_ms: ms,
            ..Throughput::default()
        };
        if ms == 0 {
            return r;
        }
        let per_s = 1000.0 / ms as f64;
        r.req_per_s = new.requests.saturating_sub(old.requests) as f64 * per_s;
        r.tokens_per_min = new.tokens.saturating_sub(old.tokens) as f64 * per_s * 60.0;
        r.usd_per_min = (new.cost_usd - old.cost_usd).max(0.0) * per_s * 60.0;
        let d: Vec<u64> = (0..5)
            .map(|i| new.by_level[i].saturating_sub(old.by_level[i]))
            .collect();
        r.ended = d.iter().sum();
        if r.ended > 0 {
            let share = |n: u64| n as f64 / r.ended as f64;
            r.success = share(d[0]);
            r.degraded = share(d[1] + d[2] + d[3]);
            r.failed = share(d[4]);
        }
        r
    }
}

impl App {
    /// A console showing `snap`.
    pub fn new(opts: Options, snap: Arc<Snapshot>) -> Self {
        let mut app = Self {
            opts,
            snap: snap.clone(),
            display_frozen: false,
            focus: Pane::Breakers,
            selected: [0; 5],
            pinned_breaker: None,
            pinned_user: None,
            pinned_event: None,
            pinned_request: None,
            filters: Default::default(),
            overlay: Overlay::None,
            status: String::new(),
            sort: BreakerSort::Errors,
            events_paused: false,
            events_frozen: Vec::new(),
            lasting: Lasting::default(),
            recent: VecDeque::with_capacity(RECENT),
            upstream_ids: VecDeque::new(),
            tracks: HashMap::new(),
            span: Span::default(),
            zoomed: false,
            help_scroll: 0,
            attempts: HashMap::new(),
            failures: HashMap::new(),
            tripped_by: HashMap::new(),
            last_sample_ms: 0,
            rates: Throughput::default(),
            window: VecDeque::new(),
            clock: (1.0, false),
            quit: false,
        };
        app.on_snapshot(snap);
        app
    }

    /// Takes a new snapshot: updates rates and sparklines, and shows it.
    /// A frozen display takes nothing: everything on screen stays as it was.
    pub fn on_snapshot(&mut self, s: Arc<Snapshot>) {
        // Kept while frozen too (shown once the display is live again):
        // the snapshots may have dropped them by then.
        let trips = trips(&self.lasting.take(&s.events, s.t_ms));
        self.note_trips(trips);
        if self.display_frozen {
            return;
        }
        if self.last_sample_ms == 0 || s.t_ms >= self.last_sample_ms + 1000 || s.t_ms < self.last_sample_ms {
            for b in &s.breakers {
                let track = self.tracks.entry(row_key(b)).or_default();
                track.sample(b.stats.attempts, b.stats.latency, b.stats.ttft);
            }
            // Time that went back (a replay restarted) starts the window again.
            if s.t_ms < self.last_sample_ms {
                self.window.clear();
            }
            let now = Totals::of(&s);
            self.window.push_back(now);
            while self.window.front().is_some_and(|o| o.t_ms + RATE_WINDOW_MS < now.t_ms) {
                self.window.pop_front();
            }
            if let Some(old) = self.window.front() {
                self.rates = Throughput::between(old, &now);
            }
            self.last_sample_ms = s.t_ms;
        }
        self.snap = s;
    }

    /// Holds on to the failures before each of `trips` (a breaker row and
    /// when it tripped from closed), for its detail (failures whose record
    /// arrives later join it in [`App::on_event`]).
    fn note_trips(&mut self, trips: Vec<(RowKey, u64)>) {
        for (key, t_ms) in trips {
            let before: Vec<Seen> = self
                .failures
                .get(&key)
                .into_iter()
                .flatten()
                .filter(|f| tripped(f, t_ms))
                .cloned()
                .collect();
            self.tripped_by.insert(key, (t_ms, before));
        }
    }

    /// The snapshot's events on screen (frozen while the events pane is
    /// paused), and the time before which the kept ones take over.
    fn shown_events(&self) -> (&[Event], u64) {
        let shown = if self.events_paused {
            &self.events_frozen
        } else {
            &self.snap.events
        };
        (shown, shown.first().map_or(self.snap.t_ms + 1, |e| e.t_ms))
    }

    /// The events to show, oldest first: the kept ones the snapshot no
    /// longer carries, then the snapshot's.
    pub fn events(&self) -> impl DoubleEndedIterator<Item = &Event> {
        let (shown, cut) = self.shown_events();
        self.lasting.before(cut).map(|(e, _)| e).chain(shown)
    }

    fn matches(filter: &str, text: &str) -> bool {
        filter.is_empty() || text.to_lowercase().contains(&filter.to_lowercase())
    }

    /// Breaker rows after filter and sort. Where the snapshot combines
    /// instances, each combined row is followed by its instances' rows.
    pub fn breaker_rows(&self) -> Vec<&BreakerRow> {
        let f = &self.filters[Pane::Breakers.index()];
        let mut own: HashMap<&Target, Vec<&BreakerRow>> = HashMap::new();
        for b in self.snap.breakers.iter().filter(|b| b.instance.is_some()) {
            own.entry(&b.target).or_default().push(b);
        }
        let shown = |b: &BreakerRow| {
            Self::matches(f, &b.target.to_string())
                || own
                    .get(&b.target)
                    .is_some_and(|v| v.iter().any(|r| Self::matches(f, r.instance.as_deref().unwrap_or(""))))
        };
        let mut rows: Vec<&BreakerRow> = self
            .snap
            .breakers
            .iter()
            .filter(|b| b.instance.is_none() && shown(b))
            .collect();
        match self.sort {
            BreakerSort::Errors => rows.sort_by(|a, b| {
                let severity = |r: &BreakerRow| r.breaker.state.map_or(0, BreakerState::severity);
                severity(b)
                    .cmp(&severity(a))
                    .then(b.breaker.failure_rate.total_cmp(&a.breaker.failure_rate))
                    .then(b.stats.attempts.cmp(&a.stats.attempts))
                    .then(a.target.cmp(&b.target))
            }),
            BreakerSort::Name => rows.sort_by(|a, b| a.target.cmp(&b.target)),
            BreakerSort::Volume => {
                rows.sort_by(|a, b| b.stats.attempts.cmp(&a.stats.attempts).then(a.target.cmp(&b.target)))
            }
        }
        grouped(rows, |b| own.get(&b.target).cloned().unwrap_or_default())
    }

    /// Rates, sparklines and latencies start again from the next sample
    /// rather than spanning a frozen display's time.
    pub(super) fn restart_sampling(&mut self) {
        self.window.clear();
        self.last_sample_ms = 0;
        for track in self.tracks.values_mut() {
            track.restart();
        }
    }

    /// A breaker row's call latencies over the span on screen.
    pub fn latency(&self, row: &BreakerRow) -> Option<HistogramView> {
        self.tracks.get(&row_key(row))?.latency(self.span, &row.stats.latency)
    }

    /// A breaker row's streams' times to first token over the span on screen.
    pub fn ttft(&self, row: &BreakerRow) -> Option<HistogramView> {
        self.tracks.get(&row_key(row))?.ttft(self.span, &row.stats.ttft)
    }

    /// User rows after filter (already ordered by pressure), each
    /// combined row followed by its instances' rows.
    pub fn user_rows(&self) -> Vec<&UserRow> {
        let f = &self.filters[Pane::Budgets.index()];
        let mut own: HashMap<&str, Vec<&UserRow>> = HashMap::new();
        for u in self.snap.top_users.iter().filter(|u| u.instance.is_some()) {
            own.entry(u.view.user.as_str()).or_default().push(u);
        }
        let rows = self
            .snap
            .top_users
            .iter()
            .filter(|u| u.instance.is_none() && Self::matches(f, &u.view.user))
            .collect();
        grouped(rows, |u| own.get(u.view.user.as_str()).cloned().unwrap_or_default())
    }

    /// Events after filter, newest first, each run of the same event said
    /// again and again (on the same instance) one row with its count.
    pub fn event_rows(&self) -> Vec<EventRow<'_>> {
        let f = &self.filters[Pane::Events.index()];
        let mut rows: Vec<EventRow<'_>> = Vec::new();
        let (shown, cut) = self.shown_events();
        let newest = shown.iter().rev().map(|e| (e, Cow::Owned(super::said::describe(e))));
        let kept = self
            .lasting
            .before(cut)
            .rev()
            .map(|(e, said)| (e, Cow::Borrowed(said.as_str())));
        for (e, said) in newest.chain(kept) {
            if !(f.is_empty() || Self::matches(f, &said)) {
                continue;
            }
            match rows.last_mut() {
                Some(r) if r.said == said && r.event.instance == e.instance => {
                    r.first = e;
                    r.repeats += 1;
                }
                _ => rows.push(EventRow {
                    event: e,
                    first: e,
                    repeats: 1,
                    said,
                }),
            }
        }
        rows
    }

    /// Recent requests after filter, newest first.
    pub fn recent_rows(&self) -> Vec<&Recent> {
        let f = &self.filters[Pane::Chains.index()];
        self.recent
            .iter()
            .rev()
            .filter(|r| f.is_empty() || r.matches(&f.to_lowercase()))
            .collect()
    }

    pub(super) fn rows_in_focus(&self) -> usize {
        match self.focus {
            Pane::Breakers => self.breaker_rows().len(),
            Pane::Limiters => self.snap.limiters.len(),
            Pane::Budgets => self.user_rows().len(),
            Pane::Chains => self.recent_rows().len(),
            Pane::Events => self.event_rows().len(),
        }
    }

    /// The selected row of a pane, clamped; breakers, users, requests and
    /// events follow the row picked when the order changes or rows arrive.
    pub fn selection(&self, pane: Pane) -> usize {
        let pinned = match pane {
            Pane::Breakers => self.pinned_breaker.as_ref().and_then(|(t, i)| {
                self.breaker_rows()
                    .iter()
                    .position(|b| b.target == *t && b.instance == *i)
            }),
            Pane::Budgets => self.pinned_user.as_ref().and_then(|(n, i)| {
                self.user_rows()
                    .iter()
                    .position(|u| u.view.user == *n && u.instance == *i)
            }),
            Pane::Chains => self.pinned_request.as_ref().and_then(|(id, i, t)| {
                self.recent_rows()
                    .iter()
                    .position(|r| r.id == *id && r.instance == *i && r.t_ms == *t)
            }),
            Pane::Events => self
                .pinned_event
                .as_ref()
                .and_then(|p| self.event_rows().iter().position(|r| r.first == p)),
            Pane::Limiters => None,
        };
        if let Some(i) = pinned {
            return i;
        }
        let n = match pane {
            Pane::Breakers => self.breaker_rows().len(),
            Pane::Limiters => self.snap.limiters.len(),
            Pane::Budgets => self.user_rows().len(),
            Pane::Chains => self.recent_rows().len(),
            Pane::Events => self.event_rows().len(),
        };
        self.selected[pane.index()].min(n.saturating_sub(1))
    }

    /// Moves the selection of the focused pane to row `i` (and pins its name).
    pub(super) fn select(&mut self, i: usize) {
        let pane = self.focus;
        self.selected[pane.index()] = i;
        match pane {
            Pane::Breakers => {
                self.pinned_breaker = self
                    .breaker_rows()
                    .get(i)
                    .map(|b| (b.target.clone(), b.instance.clone()))
            }
            Pane::Budgets => {
                self.pinned_user = self
                    .user_rows()
                    .get(i)
                    .map(|u| (u.view.user.clone(), u.instance.clone()))
            }
            Pane::Chains => self.pinned_request = self.recent_rows().get(i).map(|r| (r.id, r.instance.clone(), r.t_ms)),
            Pane::Events => self.pinned_event = self.event_rows().get(i).map(|r| r.first.clone()),
            Pane::Limiters => {}
        }
    }

    /// A state's display name.
    pub fn state_label(s: Option<BreakerState>) -> &'static str {
        s.map_or("?", BreakerState::as_str)
    }
}

/// `rows` in their order, each followed by the rows `of` gives for it.
fn grouped<'a, T>(rows: Vec<&'a T>, of: impl Fn(&T) -> Vec<&'a T>) -> Vec<&'a T> {
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        out.push(r);
        out.extend(of(r));
    }
    out
}
