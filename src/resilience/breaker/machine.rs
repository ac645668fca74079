//! The state machine: closed, open, half-open with its probe ramp, the
//! operator states, and why each transition happens.

use super::window::Window;
use super::{BreakerState, CallRecord, FailureKind, Permit, Rejected};
use crate::config::BreakerConfig;
use std::time::Duration;
use tokio::time::Instant;

pub(super) struct Inner {
    pub(super) cfg: BreakerConfig,
    pub(super) state: BreakerState,
    pub(super) generation: u64,
    pub(super) window: Window,
    pub(super) consecutive: u32,
    pub(super) trips: u32,
    /// When the half-open ramp last closed it: a trip within
    /// `max_cooldown_ms` of that continues the run of trips (a longer
    /// cooldown) rather than starting again at the first.
    pub(super) closed_at: Option<Instant>,
    pub(super) peak_probes: u32,
    pub(super) open_until: Instant,
    pub(super) half: HalfOpen,
    /// Calls of this generation in flight past `slow_call_ms` (closed).
    pub(super) overdue: u32,
}

#[derive(Default)]
pub(super) struct HalfOpen {
    pub(super) stage: usize,
    pub(super) admitted: u32,
    pub(super) in_flight: u32,
    pub(super) ok: u32,
    /// Failed or slow.
    pub(super) failed: u32,
    /// Of those, slow but not failed.
    pub(super) slow: u32,
    pub(super) since: Option<Instant>,
}

type Fired = Option<(BreakerState, BreakerState, String)>;

impl Inner {
    pub(super) fn cancel(&mut self, permit: Permit) {
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

    pub(super) fn overdue(&mut self, permit: Permit, now: Instant) -> Fired {
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

    pub(super) fn stage_allowance(&self) -> u32 {
        let ramp = &self.cfg.half_open_ramp;
        ramp[self.half.stage.min(ramp.len() - 1)]
    }

    pub(super) fn to(&mut self, state: BreakerState, now: Instant) {
        self.state = state;
        self.generation += 1;
        self.half = HalfOpen::default();
        self.overdue = 0;
        match state {
            BreakerState::Open => {
                self.consecutive = 0;
                self.open_until = now + self.cooldown();
            }
            BreakerState::HalfOpen => self.half.since = Some(now),
            BreakerState::Closed => {
                self.window.clear();
                self.consecutive = 0;
            }
            _ => {}
        }
    }

    /// How long it stays open after its latest trip: the base cooldown
    /// after the first trip and after the first failed probe too (a
    /// target back soon is back within one base cooldown), then growing by
    /// the multiplier while probes keep failing, up to the cap (a target
    /// that stays down or slow is probed ever more rarely).
    fn cooldown(&self) -> Duration {
        let exp = self.trips.saturating_sub(2).min(32) as i32;
        let ms =
            (self.cfg.cooldown_ms as f64 * self.cfg.cooldown_multiplier.powi(exp)).min(self.cfg.max_cooldown_ms as f64);
        Duration::from_millis(ms as u64)
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
    pub(super) fn advance(&mut self, now: Instant, fired: &mut Fired) {
        match self.state {
            BreakerState::Open if now >= self.open_until => {
                let waited = self.cooldown().as_secs_f64();
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

    pub(super) fn acquire(&mut self, now: Instant, fired: &mut Fired) -> Result<Permit, Rejected> {
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

    pub(super) fn record(&mut self, permit: Permit, call: &CallRecord, now: Instant) -> Fired {
        let mut fired = None;
        // A half-open deadline that passed while the call ran ends the ramp
        // first: the late result then belongs to an old generation.
        if self.state == BreakerState::HalfOpen {
            self.advance(now, &mut fired);
        }
        let neutral = match call.failure {
            Some(FailureKind::Blameless) => true,
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
        FailureKind::Blameless => "not its fault",
    }
}
