//! The circuit breaker: closed → open → half-open with a progressive probe
//! ramp, plus the operator states forced-open, forced-closed and disabled.
//!
//! Trips on consecutive failures, on the failure rate or slow-call rate over a
//! sliding window (only with a minimum number of calls), and at once on a
//! failed call whose token cost exceeds a threshold. What counts as a failure
//! (HTTP errors, timeouts, semantic failures, truncated streams, token-rate
//! collapse) is decided by the caller's [`CallRecord`]. Every transition is
//! emitted as an event with a reason in words.

use crate::config::{BreakerConfig, WindowKind};
use crate::telemetry::events::{EventBus, EventKind};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Runs `call`, made under `permits` of their breakers, telling each
/// breaker whose slow-call bound the call outlasts that it is overdue the
/// moment it does ([`Breaker::overdue`]): a target that turned slow trips
/// on the calls in flight, not seconds later when they end. No timer is
/// armed for a bound that `within` (the call's own timeout) ends first.
pub async fn watched<F: std::future::Future>(
    permits: &mut [(&Breaker, &mut Permit)],
    start: Instant,
    within: Duration,
    call: F,
) -> F::Output {
    let mut marks: smallvec::SmallVec<[(Instant, usize); 2]> = permits
        .iter()
        .enumerate()
        .filter_map(|(i, (b, _))| {
            let bound = Duration::from_millis(b.slow_ms.load(Ordering::Relaxed));
            // Slow is longer than the bound: still running 1 ms past it.
            (!bound.is_zero() && bound < within).then(|| (start + bound + Duration::from_millis(1), i))
        })
        .collect();
    if marks.is_empty() {
        return call.await;
    }
    marks.sort_unstable();
    tokio::pin!(call);
    for (at, i) in marks {
        tokio::select! {
            biased;
            out = &mut call => return out,
            () = tokio::time::sleep_until(at) => {
                let (b, p) = &mut permits[i];
                b.overdue(p, at);
            }
        }
    }
    call.await
}

/// A breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Calls flow; failures are counted.
    Closed,
    /// Calls are rejected until the cooldown ends.
    Open,
    /// A limited number of probes test recovery.
    HalfOpen,
    /// Operator: reject everything.
    ForcedOpen,
    /// Operator: allow everything, never trip.
    ForcedClosed,
    /// Operator: breaker off, metrics only.
    Disabled,
}

impl BreakerState {
    /// The snake_case name used in events, logs and summaries.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
            Self::ForcedOpen => "forced_open",
            Self::ForcedClosed => "forced_closed",
            Self::Disabled => "disabled",
        }
    }

    /// Whether calls are (at least partly) allowed through.
    pub fn admits(self) -> bool {
        !matches!(self, Self::Open | Self::ForcedOpen)
    }
}

/// Why a call failed, as far as the breaker cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// HTTP 429.
    RateLimited,
    /// 5xx / 529, connection refused or reset.
    Server,
    /// Connect, first-byte, idle or total timeout.
    Timeout,
    /// The stream ended without its terminator.
    Truncated,
    /// Hallucinated tool name, invalid or schema-violating arguments.
    Semantic,
    /// Output token rate under the floor.
    TokenRate,
    /// The caller's fault (4xx): recorded, never counted against the target.
    Client,
}

/// What the breaker learns from one finished call.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallRecord {
    /// The failure, if any.
    pub failure: Option<FailureKind>,
    /// Wall latency of the call.
    pub latency: Duration,
    /// Tokens the call consumed (input + output).
    pub tokens: u32,
    /// Output tokens per second, when the call streamed tokens.
    pub tokens_per_s: Option<f64>,
}

/// Admission to make one call; hand it back to [`Breaker::record`].
#[derive(Clone, Copy, Debug)]
#[must_use = "a permit must be recorded or cancelled"]
pub struct Permit {
    generation: u64,
    probe: bool,
    /// Counted as slow while still in flight ([`Breaker::overdue`]).
    overdue: bool,
}

impl Permit {
    /// Whether this call is a half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe
    }
}

/// Why a call was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Open; the next probe is allowed after this long.
    Open(Duration),
    /// Half-open and every probe slot of the stage is taken.
    ProbesBusy,
    /// Forced open by an operator.
    ForcedOpen,
}

/// Live figures for views.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct BreakerView {
    /// State.
    pub state: Option<BreakerState>,
    /// Failure rate over the window (0..=1).
    pub failure_rate: f64,
    /// Slow-call rate over the window (0..=1).
    pub slow_rate: f64,
    /// Calls in the window.
    pub calls_in_window: u32,
    /// Failures in a row.
    pub consecutive_failures: u32,
    /// Time until the next probe is allowed, when open.
    pub next_probe_ms: Option<u64>,
    /// Half-open stage (0-based) and its probe allowance.
    pub half_open_stage: Option<(usize, u32)>,
    /// Probes in flight.
    pub probes_in_flight: u32,
    /// Trips in a row: since the breaker last stayed closed for
    /// `max_cooldown_ms` (or was reset by an operator).
    pub trips: u32,
    /// Most probes ever in flight at once.
    pub peak_probes: u32,
}

/// One breaker.
pub struct Breaker {
    name: Arc<str>,
    events: Arc<EventBus>,
    /// State and generation, readable without the lock: admitting a call to
    /// a closed breaker (the common case) takes no lock at all.
    fast: AtomicU64,
    /// `slow_call_ms`, readable without the lock (see [`watched`]).
    slow_ms: AtomicU64,
    inner: Mutex<Inner>,
}

const STATES: [BreakerState; 6] = [
    BreakerState::Closed,
    BreakerState::Open,
    BreakerState::HalfOpen,
    BreakerState::ForcedOpen,
    BreakerState::ForcedClosed,
    BreakerState::Disabled,
];

fn pack(generation: u64, state: BreakerState) -> u64 {
    let code = STATES.iter().position(|s| *s == state).unwrap_or(0) as u64;
    (generation << 3) | code
}

fn unpack(v: u64) -> (u64, BreakerState) {
    (v >> 3, STATES[(v & 7) as usize % STATES.len()])
}

struct Inner {
    cfg: BreakerConfig,
    state: BreakerState,
    generation: u64,
    window: Window,
    consecutive: u32,
    trips: u32,
    /// When the half-open ramp last closed it: a trip within
    /// `max_cooldown_ms` of that continues the run of trips (a longer
    /// cooldown) rather than starting again at the first.
    closed_at: Option<Instant>,
    peak_probes: u32,
    open_until: Instant,
    half: HalfOpen,
    /// Calls of this generation in flight past `slow_call_ms` (closed).
    overdue: u32,
}

#[derive(Default)]
struct HalfOpen {
    stage: usize,
    admitted: u32,
    in_flight: u32,
    ok: u32,
    /// Failed or slow.
    failed: u32,
    /// Of those, slow but not failed.
    slow: u32,
    since: Option<Instant>,
}

impl Breaker {
    /// A closed breaker named like `provider:openai`.
    pub fn new(name: &str, cfg: BreakerConfig, events: Arc<EventBus>, now: Instant) -> Self {
        Self {
            name: name.into(),
            events,
            fast: AtomicU64::new(pack(0, BreakerState::Closed)),
            slow_ms: AtomicU64::new(cfg.slow_call_ms),
            inner: Mutex::new(Inner {
                window: Window::new(&cfg, now),
                cfg,
                state: BreakerState::Closed,
                generation: 0,
                consecutive: 0,
                trips: 0,
                closed_at: None,
                peak_probes: 0,
                open_until: now,
                half: HalfOpen::default(),
                overdue: 0,
            }),
        }
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current state (an open breaker whose cooldown ended still reads
    /// open until the next call or [`Breaker::tick`] moves it).
    pub fn state(&self) -> BreakerState {
        super::lock(&self.inner).state
    }

    /// Whether a call made now would be admitted, without taking a slot.
    pub fn would_admit(&self, now: Instant) -> bool {
        if let (_, BreakerState::Closed | BreakerState::ForcedClosed | BreakerState::Disabled) =
            unpack(self.fast.load(Ordering::Acquire))
        {
            return true;
        }
        let g = super::lock(&self.inner);
        match g.state {
            BreakerState::Closed | BreakerState::ForcedClosed | BreakerState::Disabled => true,
            BreakerState::ForcedOpen => false,
            BreakerState::Open => now >= g.open_until,
            BreakerState::HalfOpen => g.half.admitted < g.stage_allowance(),
        }
    }

    /// Asks to make one call now.
    pub fn try_acquire(&self, now: Instant) -> Result<Permit, Rejected> {
        if let (generation, BreakerState::Closed | BreakerState::ForcedClosed | BreakerState::Disabled) =
            unpack(self.fast.load(Ordering::Acquire))
        {
            return Ok(Permit {
                generation,
                probe: false,
                overdue: false,
            });
        }
        let mut g = super::lock(&self.inner);
        let mut fired = None;
        let r = g.acquire(now, &mut fired);
        self.publish(&g);
        drop(g);
        self.emit(fired);
        r
    }

    /// Reports how a call admitted by `permit` went.
    /// Returns the reason if this call tripped the breaker open.
    pub fn record(&self, permit: Permit, call: &CallRecord, now: Instant) -> Option<String> {
        let mut g = super::lock(&self.inner);
        let fired = g.record(permit, call, now);
        self.publish(&g);
        drop(g);
        let tripped = match &fired {
            Some((_, BreakerState::Open, reason)) => Some(reason.clone()),
            _ => None,
        };
        self.emit(fired);
        tripped
    }

    /// Mirrors state and generation into the lock-free word (under the lock).
    fn publish(&self, g: &Inner) {
        let v = pack(g.generation, g.state);
        if self.fast.load(Ordering::Relaxed) != v {
            self.fast.store(v, Ordering::Release);
        }
    }

    /// The call admitted by `permit` has run past `slow_call_ms` and not
    /// ended: it counts as slow from now, so a target turning slow trips on
    /// the calls still in flight rather than only on those that end (a
    /// half-open probe fails the ramp at once). Its end then moves it from
    /// in flight to the window; nothing is counted twice. Returns the
    /// reason if this tripped the breaker open.
    pub fn overdue(&self, permit: &mut Permit, now: Instant) -> Option<String> {
        if permit.overdue {
            return None;
        }
        permit.overdue = true;
        let mut g = super::lock(&self.inner);
        let fired = g.overdue(*permit, now);
        self.publish(&g);
        drop(g);
        let tripped = match &fired {
            Some((_, BreakerState::Open, reason)) => Some(reason.clone()),
            _ => None,
        };
        self.emit(fired);
        tripped
    }

    /// Gives back a permit whose call never happened (e.g. cancelled).
    pub fn cancel(&self, permit: Permit) {
        super::lock(&self.inner).cancel(permit);
    }

    /// Moves time-driven transitions (open → half-open, half-open timeout)
    /// without a call; views call this so states do not go stale.
    pub fn tick(&self, now: Instant) {
        let mut g = super::lock(&self.inner);
        let mut fired = None;
        g.advance(now, &mut fired);
        self.publish(&g);
        drop(g);
        self.emit(fired);
    }

    /// Operator: put the breaker in `state` (closed means reset to
    /// automatic). Whether it changed: the state it is in already is left
    /// as it is (its counts, cooldown and calls in flight untouched).
    pub fn set_state(&self, state: BreakerState, reason: &str, now: Instant) -> bool {
        let mut g = super::lock(&self.inner);
        let from = g.state;
        if from == state {
            return false;
        }
        match state {
            BreakerState::Closed => {
                g.window.clear();
                g.consecutive = 0;
                g.trips = 0;
                g.closed_at = None;
                g.to(BreakerState::Closed, now);
            }
            BreakerState::Open => {
                g.trips += 1;
                g.to(BreakerState::Open, now);
            }
            other => g.to(other, now),
        }
        self.publish(&g);
        drop(g);
        self.emit(Some((from, state, reason.to_string())));
        true
    }

    /// Applies new settings, keeping state and counts where the window fits.
    pub fn reconfigure(&self, cfg: BreakerConfig, now: Instant) {
        let mut g = super::lock(&self.inner);
        if cfg.window != g.cfg.window || cfg.window_size != g.cfg.window_size {
            g.window = Window::new(&cfg, now);
        }
        self.slow_ms.store(cfg.slow_call_ms, Ordering::Relaxed);
        g.cfg = cfg;
    }

    /// Live figures for views.
    pub fn view(&self, now: Instant) -> BreakerView {
        let g = super::lock(&self.inner);
        let (calls, fails, slows) = g.window.totals(now);
        let rate = |n: u32| if calls == 0 { 0.0 } else { n as f64 / calls as f64 };
        BreakerView {
            state: Some(g.state),
            failure_rate: rate(fails),
            slow_rate: rate(slows),
            calls_in_window: calls,
            consecutive_failures: g.consecutive,
            next_probe_ms: (g.state == BreakerState::Open)
                .then(|| g.open_until.saturating_duration_since(now).as_millis() as u64),
            half_open_stage: (g.state == BreakerState::HalfOpen).then(|| (g.half.stage, g.stage_allowance())),
            probes_in_flight: g.half.in_flight,
            trips: g.trips,
            peak_probes: g.peak_probes,
        }
    }

    fn emit(&self, fired: Option<(BreakerState, BreakerState, String)>) {
        if let Some((from, to, reason)) = fired {
            tracing::info!(breaker = %self.name, from = from.as_str(), to = to.as_str(), %reason, "breaker transition");
            self.events.emit(EventKind::Transition {
                breaker: self.name.to_string(),
                from: from.as_str(),
                to: to.as_str(),
                reason,
            });
        }
    }
}

type Fired = Option<(BreakerState, BreakerState, String)>;

impl Inner {
    fn cancel(&mut self, permit: Permit) {
        if permit.generation != self.generation {
            return;
        }
        if permit.probe && self.state == BreakerState::HalfOpen {
            self.half.in_flight = self.half.in_flight.saturating_sub(1);
            // An overdue probe was judged already: its slot stays used.
            if !permit.overdue {
                self.half.admitted = self.half.admitted.saturating_sub(1);
            }
        } else if permit.overdue {
            self.overdue = self.overdue.saturating_sub(1);
        }
    }

    fn overdue(&mut self, permit: Permit, now: Instant) -> Fired {
        let mut fired = None;
        if self.state == BreakerState::HalfOpen {
            self.advance(now, &mut fired);
        }
        if permit.generation != self.generation {
            return fired;
        }
        match self.state {
            BreakerState::HalfOpen if permit.probe => {
                self.half.failed += 1;
                self.half.slow += 1;
                self.judge_ramp(now, &mut fired);
            }
            BreakerState::Closed => {
                self.overdue += 1;
                if let Some(reason) = self.slow_reason(now) {
                    self.trip(now, reason, &mut fired);
                }
            }
            BreakerState::ForcedClosed | BreakerState::Disabled => self.overdue += 1,
            _ => {}
        }
        fired
    }

    fn stage_allowance(&self) -> u32 {
        let ramp = &self.cfg.half_open_ramp;
        ramp[self.half.stage.min(ramp.len() - 1)]
    }

    fn to(&mut self, state: BreakerState, now: Instant) {
        self.state = state;
        self.generation += 1;
        self.half = HalfOpen::default();
        self.overdue = 0;
        match state {
            BreakerState::Open => {
                self.consecutive = 0;
                let exp = self.trips.saturating_sub(1).min(32) as i32;
                let ms = (self.cfg.cooldown_ms as f64 * self.cfg.cooldown_multiplier.powi(exp))
                    .min(self.cfg.max_cooldown_ms as f64);
                self.open_until = now + Duration::from_millis(ms as u64);
            }
            BreakerState::HalfOpen => self.half.since = Some(now),
            BreakerState::Closed => {
                self.window.clear();
                self.consecutive = 0;
            }
            _ => {}
        }
    }

    fn trip(&mut self, now: Instant, reason: String, fired: &mut Fired) {
        let from = self.state;
        // Closed long enough since the ramp passed: a fresh run of trips.
        let settled = Duration::from_millis(self.cfg.max_cooldown_ms);
        if self
            .closed_at
            .take()
            .is_some_and(|at| now.saturating_duration_since(at) >= settled)
        {
            self.trips = 0;
        }
        self.trips += 1;
        self.to(BreakerState::Open, now);
        *fired = Some((from, BreakerState::Open, reason));
    }

    /// Time-driven transitions.
    fn advance(&mut self, now: Instant, fired: &mut Fired) {
        match self.state {
            BreakerState::Open if now >= self.open_until => {
                let waited = self.cfg.cooldown_ms as f64
                    * self
                        .cfg
                        .cooldown_multiplier
                        .powi(self.trips.saturating_sub(1).min(32) as i32);
                let waited = waited.min(self.cfg.max_cooldown_ms as f64) / 1000.0;
                self.to(BreakerState::HalfOpen, now);
                *fired = Some((
                    BreakerState::Open,
                    BreakerState::HalfOpen,
                    format!(
                        "cooldown {waited:.0}s elapsed; probing with up to {} calls",
                        self.stage_allowance()
                    ),
                ));
            }
            BreakerState::HalfOpen => {
                let since = self.half.since.unwrap_or(now);
                if now.saturating_duration_since(since) >= Duration::from_millis(self.cfg.max_half_open_ms) {
                    let reason = format!(
                        "half-open for {:.0}s without passing the ramp ({} ok, {} failed)",
                        self.cfg.max_half_open_ms as f64 / 1000.0,
                        self.half.ok,
                        self.half.failed
                    );
                    self.trip(now, reason, fired);
                }
            }
            _ => {}
        }
    }

    fn acquire(&mut self, now: Instant, fired: &mut Fired) -> Result<Permit, Rejected> {
        self.advance(now, fired);
        let generation = self.generation;
        match self.state {
            BreakerState::Closed | BreakerState::ForcedClosed | BreakerState::Disabled => Ok(Permit {
                generation,
                probe: false,
                overdue: false,
            }),
            BreakerState::ForcedOpen => Err(Rejected::ForcedOpen),
            BreakerState::Open => Err(Rejected::Open(self.open_until.saturating_duration_since(now))),
            BreakerState::HalfOpen => {
                if self.half.admitted < self.stage_allowance() {
                    self.half.admitted += 1;
                    self.half.in_flight += 1;
                    self.peak_probes = self.peak_probes.max(self.half.in_flight);
                    Ok(Permit {
                        generation,
                        probe: true,
                        overdue: false,
                    })
                } else {
                    Err(Rejected::ProbesBusy)
                }
            }
        }
    }

    fn record(&mut self, permit: Permit, call: &CallRecord, now: Instant) -> Fired {
        let mut fired = None;
        // A half-open deadline that passed while the call ran ends the ramp
        // first: the late result then belongs to an old generation.
        if self.state == BreakerState::HalfOpen {
            self.advance(now, &mut fired);
        }
        let neutral = match call.failure {
            Some(FailureKind::Client) => true,
            Some(FailureKind::RateLimited) => !self.cfg.count_rate_limited,
            _ => false,
        };
        if neutral {
            // The caller's fault (or an ignored 429) says nothing about the
            // target's health: neither a success nor a failure.
            self.cancel(permit);
            return fired;
        }
        // A result from before the last transition must not judge the new
        // state (a ramp it was not part of, or a freshly closed window).
        if permit.generation != self.generation {
            return fired;
        }
        let cfg = &self.cfg;
        let failure = match call.failure {
            Some(f) => Some(f),
            None => match call.tokens_per_s {
                Some(tps) if cfg.min_tokens_per_s > 0.0 && tps < cfg.min_tokens_per_s => Some(FailureKind::TokenRate),
                _ => None,
            },
        };
        let failed = failure.is_some();
        let slow = cfg.slow_call_ms > 0 && call.latency > Duration::from_millis(cfg.slow_call_ms);
        match self.state {
            // Judged when it became overdue.
            BreakerState::HalfOpen if permit.probe && permit.overdue => {
                self.half.in_flight = self.half.in_flight.saturating_sub(1);
            }
            BreakerState::HalfOpen if permit.probe => {
                self.half.in_flight = self.half.in_flight.saturating_sub(1);
                // A slow probe fails the ramp, as in resilience4j: a target
                // that tripped on slowness must not close on slow answers
                // (it would close, and trip again at the first cooldown).
                if failed || slow {
                    self.half.failed += 1;
                    self.half.slow += u32::from(!failed);
                } else {
                    self.half.ok += 1;
                }
                self.judge_ramp(now, &mut fired);
            }
            BreakerState::Closed => {
                if permit.overdue {
                    self.overdue = self.overdue.saturating_sub(1);
                }
                self.window.push(now, failed, slow);
                self.consecutive = if failed { self.consecutive + 1 } else { 0 };
                if let Some(reason) = self.trip_reason(failure, call, now) {
                    self.trip(now, reason, &mut fired);
                }
            }
            BreakerState::ForcedClosed | BreakerState::Disabled => {
                if permit.overdue {
                    self.overdue = self.overdue.saturating_sub(1);
                }
                self.window.push(now, failed, slow);
                self.consecutive = if failed { self.consecutive + 1 } else { 0 };
            }
            _ => {}
        }
        fired
    }

    /// Ends the half-open stage if its probes decide it: fails the ramp
    /// when too many failed, passes the stage (or closes) when all are in.
    fn judge_ramp(&mut self, now: Instant, fired: &mut Fired) {
        let allowance = self.stage_allowance();
        let need = self.cfg.half_open_success_rate;
        let max_failures = ((1.0 - need) * allowance as f64 + 1e-9).floor() as u32;
        let done = self.half.ok + self.half.failed;
        if self.half.failed > max_failures {
            let slow = match self.half.slow {
                0 => String::new(),
                n => format!(", {n} of them slower than {} ms", self.cfg.slow_call_ms),
            };
            let reason = format!(
                "half-open probe failed: {} of {done} probes failed{slow} (success {:.2} < {need:.2})",
                self.half.failed,
                self.half.ok as f64 / done as f64,
            );
            self.trip(now, reason, fired);
        } else if done >= allowance {
            let rate = self.half.ok as f64 / done as f64;
            if self.half.stage + 1 >= self.cfg.half_open_ramp.len() {
                let ramp: Vec<String> = self.cfg.half_open_ramp.iter().map(u32::to_string).collect();
                let reason = format!(
                    "half-open ramp {} passed (last stage success {rate:.2} ≥ {need:.2})",
                    ramp.join("→"),
                );
                // The run of trips is kept until it stays closed a while:
                // one that re-trips soon after closing waits longer each time.
                self.closed_at = Some(now);
                self.to(BreakerState::Closed, now);
                *fired = Some((BreakerState::HalfOpen, BreakerState::Closed, reason));
            } else {
                let since = self.half.since;
                self.half = HalfOpen {
                    stage: self.half.stage + 1,
                    since,
                    ..HalfOpen::default()
                };
            }
        }
    }

    fn trip_reason(&self, failure: Option<FailureKind>, call: &CallRecord, now: Instant) -> Option<String> {
        let cfg = &self.cfg;
        if failure.is_some() && cfg.token_cost_threshold > 0 && call.tokens > cfg.token_cost_threshold {
            return Some(format!(
                "token cost {} > {} on a failed call",
                call.tokens, cfg.token_cost_threshold
            ));
        }
        if cfg.consecutive_failures > 0 && self.consecutive >= cfg.consecutive_failures {
            let kind = failure.map(kind_name).unwrap_or("failure");
            return Some(format!("{} consecutive failures (last: {kind})", self.consecutive));
        }
        let (calls, fails, _) = self.window.totals(now);
        if calls >= cfg.minimum_calls {
            let rate = fails as f64 / calls as f64;
            if rate >= cfg.failure_rate {
                return Some(format!(
                    "failure rate {rate:.2} ≥ {:.2} over {calls} calls",
                    cfg.failure_rate
                ));
            }
        }
        self.slow_reason(now)
    }

    /// Whether the slow-call rate trips it: over the window's calls and
    /// the calls still in flight past the bound (counted as slow).
    fn slow_reason(&self, now: Instant) -> Option<String> {
        let cfg = &self.cfg;
        if cfg.slow_call_ms == 0 {
            return None;
        }
        let (ended, _, slows) = self.window.totals(now);
        let (calls, slows) = (ended + self.overdue, slows + self.overdue);
        let slow_rate = slows as f64 / calls.max(1) as f64;
        (calls >= cfg.minimum_calls && slow_rate >= cfg.slow_call_rate).then(|| {
            let flight = match self.overdue {
                0 => String::new(),
                n => format!(", {n} of them still running"),
            };
            format!(
                "slow-call rate {slow_rate:.2} ≥ {:.2} over {calls} calls (slower than {} ms{flight})",
                cfg.slow_call_rate, cfg.slow_call_ms
            )
        })
    }
}

fn kind_name(f: FailureKind) -> &'static str {
    match f {
        FailureKind::RateLimited => "rate limited",
        FailureKind::Server => "server error",
        FailureKind::Timeout => "timeout",
        FailureKind::Truncated => "truncated stream",
        FailureKind::Semantic => "semantic failure",
        FailureKind::TokenRate => "token-rate collapse",
        FailureKind::Client => "client error",
    }
}

/// The sliding window of recent outcomes.
enum Window {
    /// Last N calls: a ring of flags with running totals.
    Count {
        ring: Vec<u8>,
        head: usize,
        len: usize,
        fails: u32,
        slows: u32,
    },
    /// Calls in the last N seconds: one bucket per second.
    Time { origin: Instant, buckets: Vec<Bucket> },
}

#[derive(Clone, Copy, Default)]
struct Bucket {
    sec: u64,
    calls: u32,
    fails: u32,
    slows: u32,
}

const FAIL: u8 = 1;
const SLOW: u8 = 2;

impl Window {
    fn new(cfg: &BreakerConfig, origin: Instant) -> Self {
        let n = cfg.window_size.max(1) as usize;
        match cfg.window {
            WindowKind::Count => Window::Count {
                ring: vec![0; n],
                head: 0,
                len: 0,
                fails: 0,
                slows: 0,
            },
            WindowKind::Time => Window::Time {
                origin,
                buckets: vec![Bucket::default(); n],
            },
        }
    }

    fn clear(&mut self) {
        match self {
            Window::Count {
                ring,
                head,
                len,
                fails,
                slows,
            } => {
                ring.iter_mut().for_each(|f| *f = 0);
                *head = 0;
                *len = 0;
                *fails = 0;
                *slows = 0;
            }
            Window::Time { buckets, .. } => buckets.iter_mut().for_each(|b| *b = Bucket::default()),
        }
    }

    fn push(&mut self, now: Instant, failed: bool, slow: bool) {
        match self {
            Window::Count {
                ring,
                head,
                len,
                fails,
                slows,
            } => {
                let old = ring[*head];
                if *len == ring.len() {
                    *fails -= (old & FAIL) as u32;
                    *slows -= ((old & SLOW) >> 1) as u32;
                } else {
                    *len += 1;
                }
                let flags = (failed as u8) | ((slow as u8) << 1);
                ring[*head] = flags;
                *fails += failed as u32;
                *slows += slow as u32;
                *head = (*head + 1) % ring.len();
            }
            Window::Time { origin, buckets } => {
                let sec = now.saturating_duration_since(*origin).as_secs();
                let n = buckets.len();
                let b = &mut buckets[(sec % n as u64) as usize];
                if b.sec != sec {
                    *b = Bucket {
                        sec,
                        ..Bucket::default()
                    };
                }
                b.calls += 1;
                b.fails += failed as u32;
                b.slows += slow as u32;
            }
        }
    }

    /// (calls, failures, slow calls) currently in the window.
    fn totals(&self, now: Instant) -> (u32, u32, u32) {
        match self {
            Window::Count { len, fails, slows, .. } => (*len as u32, *fails, *slows),
            Window::Time { origin, buckets } => {
                let sec = now.saturating_duration_since(*origin).as_secs();
                let n = buckets.len() as u64;
                buckets
                    .iter()
                    .filter(|b| b.calls > 0 && sec.saturating_sub(b.sec) < n)
                    .fold((0, 0, 0), |(c, f, s), b| (c + b.calls, f + b.fails, s + b.slows))
            }
        }
    }
}
