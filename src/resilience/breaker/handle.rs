//! The breaker callers hold: a lock-free admit while closed, the state
//! machine behind a lock otherwise.

use super::machine::{HalfOpen, Inner};
use super::window::Window;
use super::{BreakerState, BreakerView, CallRecord, Permit, Rejected};
use crate::config::BreakerConfig;
use crate::resilience::notice::{Announce, Notice, Transition};
use crate::target::Target;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::time::Instant;

/// One breaker.
pub struct Breaker {
    target: Target,
    events: Arc<dyn Announce>,
    /// State and generation, readable without the lock: admitting a call to
    /// a closed breaker (the common case) takes no lock at all.
    fast: AtomicU64,
    /// `slow_call_ms`, readable without the lock (see [`watched`]).
    pub(super) slow_ms: AtomicU64,
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

impl Breaker {
    /// A closed breaker of `target`.
    pub fn new(target: Target, cfg: BreakerConfig, events: Arc<dyn Announce>, now: Instant) -> Self {
        Self {
            target,
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

    /// What it guards.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// The current state (an open breaker whose cooldown ended still reads
    /// open until the next call or [`Breaker::tick`] moves it).
    pub fn state(&self) -> BreakerState {
        crate::resilience::lock(&self.inner).state
    }

    /// Whether a call made now would be admitted, without taking a slot.
    pub fn would_admit(&self, now: Instant) -> bool {
        if let (_, BreakerState::Closed | BreakerState::ForcedClosed | BreakerState::Disabled) =
            unpack(self.fast.load(Ordering::Acquire))
        {
            return true;
        }
        let g = crate::resilience::lock(&self.inner);
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
        let mut g = crate::resilience::lock(&self.inner);
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
        let mut g = crate::resilience::lock(&self.inner);
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
        let mut g = crate::resilience::lock(&self.inner);
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
        crate::resilience::lock(&self.inner).cancel(permit);
    }

    /// Moves time-driven transitions (open → half-open, half-open timeout)
    /// without a call; views call this so states do not go stale.
    pub fn tick(&self, now: Instant) {
        let mut g = crate::resilience::lock(&self.inner);
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
        let mut g = crate::resilience::lock(&self.inner);
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
        let mut g = crate::resilience::lock(&self.inner);
        if cfg.window != g.cfg.window || cfg.window_size != g.cfg.window_size {
            g.window = Window::new(&cfg, now);
        }
        self.slow_ms.store(cfg.slow_call_ms, Ordering::Relaxed);
        g.cfg = cfg;
    }

    /// Live figures for views.
    pub fn view(&self, now: Instant) -> BreakerView {
        let g = crate::resilience::lock(&self.inner);
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
            tracing::info!(breaker = %self.target, from = from.as_str(), to = to.as_str(), %reason, "breaker transition");
            self.events.announce(Notice::Transition(Transition {
                breaker: self.target.clone(),
                from,
                to,
                reason,
            }));
        }
    }
}
