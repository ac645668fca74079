//! The circuit breaker against a small reference model (proptest), plus exact
//! scenario tests on paused virtual time: cooldown growth and cap, the
//! half-open ramp, the half-open deadline, stale permits, time windows,
//! slow calls, token-rate collapse, token-cost trips and ignored outcomes.

use fusebox::clock::Clock;
use fusebox::config::{BreakerConfig, WindowKind};
use fusebox::resilience::breaker::{Breaker, BreakerState, CallRecord, FailureKind, Permit, Rejected};
use fusebox::target::Target;
use fusebox::telemetry::events::Transition as Announced;
use fusebox::telemetry::events::{Event, EventBus, EventKind};
use proptest::prelude::*;
use proptest::sample::Index;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

// ---------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------

fn bus() -> Arc<EventBus> {
    EventBus::new(Clock::with_wall_anchor(0), 100)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// (from, to, reason) of every transition event received so far.
fn transitions(rx: &mut UnboundedReceiver<Event>) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        if let EventKind::Transition(Announced { from, to, reason, .. }) = ev.kind {
            out.push((from.to_string(), to.to_string(), reason));
        }
    }
    out
}

/// Sample outcomes of a finished call.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Outcome {
    /// Fast success.
    Ok,
    /// Success slower than any `slow_call_ms` used here (1 s).
    Slow,
    /// Success that streamed under `min_tokens_per_s` (0.5 tokens/s).
    Sluggish,
    /// Success that cost a lot of tokens.
    OkCostly,
    /// Failure of this kind, cheap.
    Fail(FailureKind),
    /// Failure of this kind that cost a lot of tokens (10 000).
    Costly(FailureKind),
}

const COSTLY_TOKENS: u32 = 10_000;

impl Outcome {
    fn record(self) -> CallRecord {
        let base = CallRecord {
            failure: None,
            latency: ms(100),
            tokens: 100,
            tokens_per_s: Some(50.0),
        };
        match self {
            Outcome::Ok => base,
            Outcome::Slow => CallRecord {
                latency: ms(5_000),
                ..base
            },
            Outcome::Sluggish => CallRecord {
                tokens_per_s: Some(0.5),
                ..base
            },
            Outcome::OkCostly => CallRecord {
                tokens: COSTLY_TOKENS,
                ..base
            },
            Outcome::Fail(k) => CallRecord {
                failure: Some(k),
                ..base
            },
            Outcome::Costly(k) => CallRecord {
                failure: Some(k),
                tokens: COSTLY_TOKENS,
                ..base
            },
        }
    }
}

// ---------------------------------------------------------------------------
// Reference model
// ---------------------------------------------------------------------------

/// The configuration the model understands, rates as whole percentages so
/// every comparison is exact integer arithmetic.
#[derive(Clone, Debug)]
struct Spec {
    consecutive_failures: u32,
    window_size: u32,
    minimum_calls: u32,
    failure_pct: u32,
    slow_call_ms: u64,
    slow_pct: u32,
    token_cost_threshold: u32,
    min_tokens_per_s: bool,
    count_rate_limited: bool,
    cooldown_ms: u64,
    multiplier: u64,
    max_cooldown_ms: u64,
    ramp: Vec<u32>,
    success_pct: u32,
    max_half_open_ms: u64,
}

impl Spec {
    fn config(&self) -> BreakerConfig {
        BreakerConfig {
            consecutive_failures: self.consecutive_failures,
            window: WindowKind::Count,
            window_size: self.window_size,
            minimum_calls: self.minimum_calls,
            failure_rate: self.failure_pct as f64 / 100.0,
            slow_call_ms: self.slow_call_ms,
            slow_call_rate: self.slow_pct as f64 / 100.0,
            token_cost_threshold: self.token_cost_threshold,
            min_tokens_per_s: if self.min_tokens_per_s { 2.0 } else { 0.0 },
            count_rate_limited: self.count_rate_limited,
            cooldown_ms: self.cooldown_ms,
            cooldown_multiplier: self.multiplier as f64,
            max_cooldown_ms: self.max_cooldown_ms,
            half_open_ramp: self.ramp.clone(),
            half_open_success_rate: self.success_pct as f64 / 100.0,
            max_half_open_ms: self.max_half_open_ms,
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Half {
    stage: usize,
    admitted: u32,
    in_flight: u32,
    ok: u32,
    failed: u32,
    since: u64,
}

/// How the model judges one outcome.
enum Verdict {
    /// Neither success nor failure (client errors): a probe slot is returned.
    Neutral,
    /// Counted: (failed, slow, tokens).
    Counted(bool, bool, u32),
}

/// A permit as the model sees it.
#[derive(Clone, Copy, Debug)]
struct ModelPermit {
    generation: u64,
    probe: bool,
}

type Transition = (BreakerState, BreakerState);

/// The breaker re-implemented from its specification; time in ms.
struct Model {
    spec: Spec,
    state: BreakerState,
    generation: u64,
    /// Count window: (failed, slow), oldest first.
    window: VecDeque<(bool, bool)>,
    consecutive: u32,
    trips: u32,
    /// When the ramp last closed it (a trip soon after continues the run).
    closed_at: Option<u64>,
    open_until: u64,
    half: Half,
}

impl Model {
    fn new(spec: Spec) -> Self {
        Model {
            spec,
            state: BreakerState::Closed,
            generation: 0,
            window: VecDeque::new(),
            consecutive: 0,
            trips: 0,
            closed_at: None,
            open_until: 0,
            half: Half::default(),
        }
    }

    /// Cooldown of the current trip: the base for the first two trips,
    /// then multiplied per repeated trip, capped.
    fn cooldown(&self) -> u64 {
        let mut c = self.spec.cooldown_ms.min(self.spec.max_cooldown_ms);
        for _ in 2..self.trips {
            c = (c * self.spec.multiplier).min(self.spec.max_cooldown_ms);
        }
        c
    }

    fn allowance(&self) -> u32 {
        let r = &self.spec.ramp;
        r[self.half.stage.min(r.len() - 1)]
    }

    fn enter(&mut self, state: BreakerState, now: u64) {
        self.state = state;
        self.generation += 1;
        self.half = Half::default();
        match state {
            BreakerState::Open => {
                self.consecutive = 0;
                self.open_until = now + self.cooldown();
            }
            BreakerState::HalfOpen => self.half.since = now,
            BreakerState::Closed => {
                self.window.clear();
                self.consecutive = 0;
            }
            _ => {}
        }
    }

    fn trip(&mut self, now: u64) -> Option<Transition> {
        let from = self.state;
        if self
            .closed_at
            .take()
            .is_some_and(|at| now - at >= self.spec.max_cooldown_ms)
        {
            self.trips = 0;
        }
        self.trips += 1;
        self.enter(BreakerState::Open, now);
        Some((from, BreakerState::Open))
    }

    fn half_open_expired(&self, now: u64) -> bool {
        self.state == BreakerState::HalfOpen && now - self.half.since >= self.spec.max_half_open_ms
    }

    fn advance(&mut self, now: u64) -> Option<Transition> {
        if self.state == BreakerState::Open && now >= self.open_until {
            self.enter(BreakerState::HalfOpen, now);
            Some((BreakerState::Open, BreakerState::HalfOpen))
        } else if self.half_open_expired(now) {
            self.trip(now)
        } else {
            None
        }
    }

    fn acquire(&mut self, now: u64) -> (Result<ModelPermit, Rejected>, Option<Transition>) {
        let fired = self.advance(now);
        let generation = self.generation;
        let r = match self.state {
            BreakerState::Closed | BreakerState::ForcedClosed | BreakerState::Disabled => Ok(ModelPermit {
                generation,
                probe: false,
            }),
            BreakerState::ForcedOpen => Err(Rejected::ForcedOpen),
            BreakerState::Open => Err(Rejected::Open(ms(self.open_until - now))),
            BreakerState::HalfOpen if self.half.admitted < self.allowance() => {
                self.half.admitted += 1;
                self.half.in_flight += 1;
                Ok(ModelPermit {
                    generation,
                    probe: true,
                })
            }
            BreakerState::HalfOpen => Err(Rejected::ProbesBusy),
        };
        (r, fired)
    }

    fn cancel(&mut self, p: ModelPermit) {
        if p.probe && p.generation == self.generation && self.state == BreakerState::HalfOpen {
            self.half.admitted -= 1;
            self.half.in_flight -= 1;
        }
    }

    fn verdict(&self, o: Outcome) -> Verdict {
        let s = &self.spec;
        let (kind, tokens) = match o {
            Outcome::Ok => (None, 100),
            Outcome::Slow => return Verdict::Counted(false, s.slow_call_ms > 0, 100),
            Outcome::Sluggish => return Verdict::Counted(s.min_tokens_per_s, false, 100),
            Outcome::OkCostly => (None, COSTLY_TOKENS),
            Outcome::Fail(k) => (Some(k), 100),
            Outcome::Costly(k) => (Some(k), COSTLY_TOKENS),
        };
        match kind {
            Some(FailureKind::Blameless) => Verdict::Neutral,
            // An ignored 429 is neither a success nor a failure.
            Some(FailureKind::RateLimited) if !s.count_rate_limited => Verdict::Neutral,
            Some(_) => Verdict::Counted(true, false, tokens),
            None => Verdict::Counted(false, false, tokens),
        }
    }

    fn record(&mut self, p: ModelPermit, o: Outcome, now: u64) -> Option<Transition> {
        let mut fired = None;
        if self.half_open_expired(now) {
            fired = self.trip(now);
        }
        let (failed, slow, tokens) = match self.verdict(o) {
            Verdict::Neutral => {
                self.cancel(p);
                return fired;
            }
            Verdict::Counted(f, s, t) => (f, s, t),
        };
        let current = p.generation == self.generation;
        match self.state {
            BreakerState::HalfOpen if current && p.probe => {
                self.half.in_flight -= 1;
                if failed || slow {
                    self.half.failed += 1;
                } else {
                    self.half.ok += 1;
                }
                let allowance = self.allowance();
                let max_failures = (100 - self.spec.success_pct) * allowance / 100;
                if self.half.failed > max_failures {
                    return self.trip(now);
                }
                if self.half.ok + self.half.failed == allowance {
                    if self.half.stage + 1 == self.spec.ramp.len() {
                        self.closed_at = Some(now);
                        self.enter(BreakerState::Closed, now);
                        return Some((BreakerState::HalfOpen, BreakerState::Closed));
                    }
                    self.half = Half {
                        stage: self.half.stage + 1,
                        since: self.half.since,
                        ..Half::default()
                    };
                }
                fired
            }
            BreakerState::Closed if current => {
                self.push(failed, slow);
                let s = &self.spec;
                let (n, fails, slows) = self.totals();
                let costly = failed && s.token_cost_threshold > 0 && tokens > s.token_cost_threshold;
                let streak = s.consecutive_failures > 0 && self.consecutive >= s.consecutive_failures;
                let rated = n >= s.minimum_calls
                    && (fails * 100 >= s.failure_pct * n || (s.slow_call_ms > 0 && slows * 100 >= s.slow_pct * n));
                if costly || streak || rated {
                    return self.trip(now);
                }
                fired
            }
            BreakerState::ForcedClosed | BreakerState::Disabled if current => {
                self.push(failed, slow);
                fired
            }
            _ => fired,
        }
    }

    fn push(&mut self, failed: bool, slow: bool) {
        if self.window.len() == self.spec.window_size as usize {
            self.window.pop_front();
        }
        self.window.push_back((failed, slow));
        self.consecutive = if failed { self.consecutive + 1 } else { 0 };
    }

    fn totals(&self) -> (u32, u32, u32) {
        let n = self.window.len() as u32;
        let fails = self.window.iter().filter(|w| w.0).count() as u32;
        let slows = self.window.iter().filter(|w| w.1).count() as u32;
        (n, fails, slows)
    }

    fn set_state(&mut self, to: BreakerState, now: u64) -> Option<Transition> {
        let from = self.state;
        if from == to {
            return None;
        }
        match to {
            BreakerState::Closed => {
                self.trips = 0;
                self.closed_at = None;
                self.enter(BreakerState::Closed, now);
            }
            BreakerState::Open => {
                self.trips += 1;
                self.enter(BreakerState::Open, now);
            }
            other => self.enter(other, now),
        }
        Some((from, to))
    }
}

// ---------------------------------------------------------------------------
// Property: the breaker follows the model
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Acquire,
    Record(Index, Outcome),
    Cancel(Index),
    Advance(u64),
    Tick,
    Set(BreakerState),
}

fn spec_strategy() -> impl Strategy<Value = Spec> {
    let trip = (
        prop_oneof![Just(0u32), 2u32..=5],
        2u32..=10,
        any::<Index>(),
        prop::sample::select(vec![50u32, 60, 75, 100]),
        prop::sample::select(vec![0u64, 1_000]),
        prop::sample::select(vec![50u32, 80, 100]),
        prop::sample::select(vec![0u32, 5_000]),
        any::<bool>(),
        any::<bool>(),
    );
    let recover = (
        prop::sample::select(vec![1_000u64, 5_000, 30_000]),
        1u64..=3,
        1u64..=5,
        prop_oneof![Just(vec![2u32, 4, 8]), prop::collection::vec(1u32..=5, 1..=3)],
        prop::sample::select(vec![50u32, 75, 80, 100]),
        prop::sample::select(vec![2_000u64, 20_000, 60_000]),
    );
    (trip, recover).prop_map(|(t, r)| {
        let (consecutive_failures, window_size, min_idx, failure_pct, slow_call_ms, slow_pct, cost, tps, count_rl) = t;
        let (cooldown_ms, multiplier, cap_factor, ramp, success_pct, max_half_open_ms) = r;
        Spec {
            consecutive_failures,
            window_size,
            // minimum_calls in 2..=window_size: one failure out of one call never trips.
            minimum_calls: 2 + min_idx.index(window_size as usize - 1) as u32,
            failure_pct,
            slow_call_ms,
            slow_pct,
            token_cost_threshold: cost,
            min_tokens_per_s: tps,
            count_rate_limited: count_rl,
            cooldown_ms,
            multiplier,
            max_cooldown_ms: cooldown_ms * cap_factor,
            ramp,
            success_pct,
            max_half_open_ms,
        }
    })
}

/// Outcomes; `fail_weight` (out of 12 for a success) sets how sick the target is.
fn outcome_strategy(fail_weight: u32) -> impl Strategy<Value = Outcome> {
    let kind = prop::sample::select(vec![
        FailureKind::RateLimited,
        FailureKind::Server,
        FailureKind::Timeout,
        FailureKind::Truncated,
        FailureKind::Semantic,
        FailureKind::TokenRate,
        FailureKind::Blameless,
    ]);
    prop_oneof![
        12 => Just(Outcome::Ok),
        1 => Just(Outcome::Slow),
        1 => Just(Outcome::Sluggish),
        1 => Just(Outcome::OkCostly),
        fail_weight => kind.clone().prop_map(Outcome::Fail),
        1 => kind.prop_map(Outcome::Costly),
    ]
}

fn op_strategy(fail_weight: u32) -> impl Strategy<Value = Op> {
    let state = prop_oneof![
        4 => Just(BreakerState::Closed),
        1 => Just(BreakerState::Open),
        1 => Just(BreakerState::HalfOpen),
        1 => Just(BreakerState::ForcedOpen),
        1 => Just(BreakerState::ForcedClosed),
        1 => Just(BreakerState::Disabled),
    ];
    prop_oneof![
        16 => Just(Op::Acquire),
        16 => (any::<Index>(), outcome_strategy(fail_weight)).prop_map(|(i, o)| Op::Record(i, o)),
        2 => any::<Index>().prop_map(Op::Cancel),
        5 => prop_oneof![0u64..500, 500u64..10_000, 10_000u64..200_000].prop_map(Op::Advance),
        1 => Just(Op::Tick),
        1 => state.prop_map(Op::Set),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

fn check_model(spec: Spec, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = runtime();
    let _rt = rt.enter();
    let base = Instant::now();
    let bus = bus();
    let mut rx = bus.subscribe();
    let breaker = Breaker::new(Target::provider("prop"), spec.config(), bus, base);
    let mut model = Model::new(spec.clone());
    let mut outstanding: Vec<(Permit, ModelPermit)> = Vec::new();
    let mut t = 0u64;

    for (step, op) in ops.into_iter().enumerate() {
        let now = base + ms(t);
        let mut single_failure_on_empty_window = false;
        let expected: Vec<Transition> = match op {
            Op::Acquire => {
                let (want, fired) = model.acquire(t);
                let got = breaker.try_acquire(now);
                match (got, want) {
                    (Ok(p), Ok(m)) => {
                        prop_assert_eq!(p.is_probe(), m.probe, "step {}: probe flag", step);
                        outstanding.push((p, m));
                    }
                    (Err(g), Err(w)) => prop_assert_eq!(g, w, "step {}: rejection", step),
                    (g, w) => prop_assert!(false, "step {}: breaker {:?}, model {:?}", step, g.map(|_| ()), w),
                }
                fired.into_iter().collect()
            }
            Op::Record(i, o) => {
                if outstanding.is_empty() {
                    continue;
                }
                let (p, m) = outstanding.swap_remove(i.index(outstanding.len()));
                single_failure_on_empty_window =
                    model.state == BreakerState::Closed && model.window.is_empty() && matches!(o, Outcome::Fail(_));
                let fired = model.record(m, o, t);
                breaker.record(p, &o.record(), now);
                fired.into_iter().collect()
            }
            Op::Cancel(i) => {
                if outstanding.is_empty() {
                    continue;
                }
                let (p, m) = outstanding.swap_remove(i.index(outstanding.len()));
                model.cancel(m);
                breaker.cancel(p);
                vec![]
            }
            Op::Advance(d) => {
                t += d;
                vec![]
            }
            Op::Tick => {
                let fired = model.advance(t);
                breaker.tick(now);
                fired.into_iter().collect()
            }
            Op::Set(s) => {
                let fired = model.set_state(s, t);
                prop_assert_eq!(breaker.set_state(s, "operator", now), fired.is_some());
                fired.into_iter().collect()
            }
        };

        let got: Vec<Transition> = transitions(&mut rx)
            .into_iter()
            .map(|(f, to, _)| (parse_state(&f), parse_state(&to)))
            .collect();
        prop_assert_eq!(got, expected, "step {}: transition events", step);
        prop_assert_eq!(breaker.state(), model.state, "step {}: state", step);

        let now = base + ms(t);
        let v = breaker.view(now);
        let (n, _, _) = model.totals();
        prop_assert_eq!(v.calls_in_window, n, "step {}: calls in window", step);
        prop_assert_eq!(v.consecutive_failures, model.consecutive, "step {}: consecutive", step);
        prop_assert_eq!(v.trips, model.trips, "step {}: trips", step);
        if model.state == BreakerState::HalfOpen {
            let allowance = model.allowance();
            prop_assert_eq!(v.half_open_stage, Some((model.half.stage, allowance)), "step {}", step);
            prop_assert_eq!(v.probes_in_flight, model.half.in_flight, "step {}: probes", step);
            prop_assert!(v.probes_in_flight <= allowance, "step {}: probes over allowance", step);
        } else {
            prop_assert_eq!(v.half_open_stage, None, "step {}", step);
        }
        if model.state == BreakerState::Open {
            prop_assert_eq!(
                v.next_probe_ms,
                Some(model.open_until.saturating_sub(t)),
                "step {}",
                step
            );
        }
        if single_failure_on_empty_window {
            prop_assert_eq!(
                breaker.state(),
                BreakerState::Closed,
                "step {}: one failure of one call tripped",
                step
            );
        }
        if matches!(model.state, BreakerState::ForcedClosed | BreakerState::Disabled) {
            prop_assert!(breaker.would_admit(now), "step {}: forced closed must admit", step);
        }
        if model.state == BreakerState::ForcedOpen {
            prop_assert!(!breaker.would_admit(now), "step {}: forced open must reject", step);
        }
    }
    Ok(())
}

fn parse_state(s: &str) -> BreakerState {
    [
        BreakerState::Closed,
        BreakerState::Open,
        BreakerState::HalfOpen,
        BreakerState::ForcedOpen,
        BreakerState::ForcedClosed,
        BreakerState::Disabled,
    ]
    .into_iter()
    .find(|b| b.as_str() == s)
    .unwrap_or_else(|| panic!("unknown state {s}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn breaker_follows_the_reference_model(
        (spec, ops) in (spec_strategy(), 0u32..=12).prop_flat_map(|(spec, fail_weight)| {
            (Just(spec), prop::collection::vec(op_strategy(fail_weight), 1..160))
        }),
    ) {
        check_model(spec, ops)?;
    }
}

// ---------------------------------------------------------------------------
// Exact scenarios on paused time
// ---------------------------------------------------------------------------

struct Rig {
    breaker: Breaker,
    rx: UnboundedReceiver<Event>,
    base: Instant,
}

impl Rig {
    fn new(cfg: BreakerConfig) -> Self {
        let base = Instant::now();
        let bus = bus();
        let rx = bus.subscribe();
        Rig {
            breaker: Breaker::new(Target::provider("test"), cfg, bus, base),
            rx,
            base,
        }
    }

    fn at(&self, t_ms: u64) -> Instant {
        self.base + ms(t_ms)
    }

    fn acquire(&self, t_ms: u64) -> Permit {
        match self.breaker.try_acquire(self.at(t_ms)) {
            Ok(p) => p,
            Err(e) => panic!("rejected at {t_ms} ms: {e:?} ({:?})", self.breaker.state()),
        }
    }

    /// Acquires and records one call at `t_ms`.
    fn call(&self, t_ms: u64, rec: CallRecord) {
        let p = self.acquire(t_ms);
        self.breaker.record(p, &rec, self.at(t_ms));
    }

    fn record(&self, p: Permit, t_ms: u64, rec: CallRecord) {
        self.breaker.record(p, &rec, self.at(t_ms));
    }

    fn state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// Transitions since the last call, as (from, to, reason).
    fn events(&mut self) -> Vec<(String, String, String)> {
        transitions(&mut self.rx)
    }

    /// The single transition since the last call; returns its reason.
    fn one_event(&mut self, from: &str, to: &str) -> String {
        let ev = self.events();
        assert_eq!(ev.len(), 1, "expected one transition {from} → {to}, got {ev:?}");
        assert_eq!((ev[0].0.as_str(), ev[0].1.as_str()), (from, to), "{ev:?}");
        ev[0].2.clone()
    }
}

fn ok() -> CallRecord {
    Outcome::Ok.record()
}

fn fail(kind: FailureKind) -> CallRecord {
    Outcome::Fail(kind).record()
}

#[tokio::test(start_paused = true)]
async fn cooldown_grows_per_repeated_trip_and_is_capped() {
    let mut r = Rig::new(BreakerConfig {
        consecutive_failures: 2,
        cooldown_ms: 30_000,
        cooldown_multiplier: 2.0,
        max_cooldown_ms: 120_000,
        half_open_ramp: vec![1],
        max_half_open_ms: 600_000,
        ..BreakerConfig::default()
    });
    r.call(0, fail(FailureKind::Server));
    assert_eq!(r.state(), BreakerState::Closed, "one failure of one call never trips");
    r.call(0, fail(FailureKind::Server));
    assert_eq!(r.state(), BreakerState::Open);
    assert_eq!(
        r.one_event("closed", "open"),
        "2 consecutive failures (last: server error)"
    );

    // Cooldowns: 30 s, 30 s again after the first failed probe (a target
    // back soon is back within one base cooldown), then 60 s, 120 s, capped.
    let mut t = 0;
    for (trip, cooldown) in [(1, 30_000u64), (2, 30_000), (3, 60_000), (4, 120_000), (5, 120_000)] {
        assert_eq!(r.breaker.view(r.at(t)).trips, trip);
        assert_eq!(r.breaker.view(r.at(t)).next_probe_ms, Some(cooldown));
        assert_eq!(
            r.breaker.try_acquire(r.at(t + cooldown - 1)).unwrap_err(),
            Rejected::Open(ms(1))
        );
        assert!(!r.breaker.would_admit(r.at(t + cooldown - 1)));
        assert!(r.breaker.would_admit(r.at(t + cooldown)));
        t += cooldown;
        let probe = r.acquire(t);
        assert!(probe.is_probe());
        assert_eq!(
            r.one_event("open", "half_open"),
            format!("cooldown {}s elapsed; probing with up to 1 calls", cooldown / 1000)
        );
        if trip < 5 {
            r.record(probe, t, fail(FailureKind::Timeout));
            assert_eq!(
                r.one_event("half_open", "open"),
                "half-open probe failed: 1 of 1 probes failed (success 0.00 < 0.80)"
            );
        } else {
            r.record(probe, t, ok());
            assert_eq!(
                r.one_event("half_open", "closed"),
                "half-open ramp 1 passed (last stage success 1.00 ≥ 0.80)"
            );
        }
    }
    assert_eq!(r.state(), BreakerState::Closed);
    assert_eq!(r.breaker.view(r.at(t)).trips, 5, "the run of trips is kept a while");

    // Re-tripping soon after closing continues the run: the longest cooldown.
    r.call(t, fail(FailureKind::Server));
    r.call(t, fail(FailureKind::Server));
    assert_eq!(r.breaker.view(r.at(t)).trips, 6);
    assert_eq!(r.breaker.view(r.at(t)).next_probe_ms, Some(120_000));
    t += 120_000;
    let probe = r.acquire(t);
    r.record(probe, t, ok());
    r.events();

    // Closed for max_cooldown_ms, the next trip starts again at the first cooldown.
    t += 120_000;
    r.call(t, fail(FailureKind::Server));
    r.call(t, fail(FailureKind::Server));
    assert_eq!(r.breaker.view(r.at(t)).trips, 1);
    assert_eq!(r.breaker.view(r.at(t)).next_probe_ms, Some(30_000));
}

/// Trips a default breaker (5 consecutive failures) at `t` and returns when
/// its first probe is allowed.
fn trip_default(r: &mut Rig, t: u64) -> u64 {
    for _ in 0..5 {
        r.call(t, fail(FailureKind::Timeout));
    }
    assert_eq!(r.state(), BreakerState::Open);
    assert_eq!(r.one_event("closed", "open"), "5 consecutive failures (last: timeout)");
    t + 30_000
}

#[tokio::test(start_paused = true)]
async fn half_open_ramp_2_4_8_closes_after_every_stage_passes() {
    let mut r = Rig::new(BreakerConfig::default());
    let t = trip_default(&mut r, 0);

    for (stage, allowance) in [(0usize, 2u32), (1, 4), (2, 8)] {
        let probes: Vec<Permit> = (0..allowance).map(|_| r.acquire(t)).collect();
        assert!(probes.iter().all(Permit::is_probe));
        if stage == 0 {
            assert_eq!(
                r.one_event("open", "half_open"),
                "cooldown 30s elapsed; probing with up to 2 calls"
            );
        }
        let v = r.breaker.view(r.at(t));
        assert_eq!(v.half_open_stage, Some((stage, allowance)));
        assert_eq!(v.probes_in_flight, allowance);
        assert_eq!(r.breaker.try_acquire(r.at(t)).unwrap_err(), Rejected::ProbesBusy);
        assert!(!r.breaker.would_admit(r.at(t)));
        for (i, p) in probes.into_iter().enumerate() {
            // The last stage tolerates floor(0.2 × 8) = 1 failure.
            let rec = if stage == 2 && i == 0 {
                fail(FailureKind::Server)
            } else {
                ok()
            };
            r.record(p, t, rec);
        }
    }
    assert_eq!(r.state(), BreakerState::Closed);
    assert_eq!(
        r.one_event("half_open", "closed"),
        "half-open ramp 2→4→8 passed (last stage success 0.88 ≥ 0.80)"
    );
    let v = r.breaker.view(r.at(t));
    assert_eq!(
        (v.trips, v.calls_in_window, v.consecutive_failures),
        (1, 0, 0),
        "the trip is remembered a while"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stage_reopens_as_soon_as_its_failures_exceed_the_allowance() {
    let mut r = Rig::new(BreakerConfig::default());
    let t = trip_default(&mut r, 0);
    for p in [r.acquire(t), r.acquire(t)] {
        r.record(p, t, ok());
    }
    for _ in 0..4 {
        let p = r.acquire(t);
        r.record(p, t, ok());
    }
    r.events();
    // Stage 3 of 8 probes at 0.8: one failure is fine, the second reopens at once.
    let probes: Vec<Permit> = (0..8).map(|_| r.acquire(t)).collect();
    let mut rest = probes.into_iter();
    r.record(rest.next().unwrap(), t, fail(FailureKind::Server));
    assert_eq!(r.state(), BreakerState::HalfOpen);
    r.record(rest.next().unwrap(), t, fail(FailureKind::Server));
    assert_eq!(r.state(), BreakerState::Open, "reopened with 6 probes still in flight");
    assert_eq!(
        r.one_event("half_open", "open"),
        "half-open probe failed: 2 of 2 probes failed (success 0.00 < 0.80)"
    );
    assert_eq!(
        r.breaker.view(r.at(t)).next_probe_ms,
        Some(30_000),
        "second trip: the base cooldown again"
    );
    // The late probes of the failed ramp change nothing.
    for p in rest {
        r.record(p, t + 1, ok());
    }
    assert_eq!(r.state(), BreakerState::Open);
    assert!(r.events().is_empty());
    let p = r.acquire(t + 30_000);
    assert!(p.is_probe());
    assert_eq!(r.breaker.view(r.at(t + 30_000)).half_open_stage, Some((0, 2)));
    assert_eq!(r.breaker.view(r.at(t + 60_000)).probes_in_flight, 1);
}

#[tokio::test(start_paused = true)]
async fn failure_rate_trips_only_with_minimum_calls() {
    let cfg = BreakerConfig {
        consecutive_failures: 0,
        ..BreakerConfig::default()
    };
    // 10 successes then 10 failures: the rate reaches 0.5 on the 20th call.
    let mut r = Rig::new(cfg.clone());
    for _ in 0..10 {
        r.call(0, ok());
    }
    for i in 0..10 {
        assert_eq!(r.state(), BreakerState::Closed, "after {} failures", i);
        r.call(0, fail(FailureKind::Server));
    }
    assert_eq!(r.state(), BreakerState::Open);
    assert_eq!(r.one_event("closed", "open"), "failure rate 0.50 ≥ 0.50 over 20 calls");

    // Nine failures out of nine calls are under minimum_calls = 10.
    let mut r = Rig::new(cfg);
    for _ in 0..9 {
        r.call(0, fail(FailureKind::Server));
    }
    let v = r.breaker.view(r.at(0));
    assert_eq!(
        (r.state(), v.calls_in_window, v.failure_rate),
        (BreakerState::Closed, 9, 1.0)
    );
    r.call(0, fail(FailureKind::Server));
    assert_eq!(r.one_event("closed", "open"), "failure rate 1.00 ≥ 0.50 over 10 calls");
}

#[tokio::test(start_paused = true)]
async fn one_failure_out_of_one_call_never_trips() {
    let mut r = Rig::new(BreakerConfig {
        consecutive_failures: 0,
        minimum_calls: 2,
        window_size: 2,
        failure_rate: 0.5,
        ..BreakerConfig::default()
    });
    r.call(0, fail(FailureKind::Server));
    assert_eq!(r.state(), BreakerState::Closed);
    assert!(r.events().is_empty());
    r.call(0, fail(FailureKind::Server));
    assert_eq!(r.state(), BreakerState::Open);
    assert_eq!(r.one_event("closed", "open"), "failure rate 1.00 ≥ 0.50 over 2 calls");
}

#[tokio::test(start_paused = true)]
async fn half_open_longer_than_max_reopens() {
    let mut r = Rig::new(BreakerConfig::default());
    let t = trip_default(&mut r, 0);
    for p in [r.acquire(t), r.acquire(t)] {
        r.record(p, t, ok());
    }
    let p = r.acquire(t + 59_000);
    r.record(p, t + 59_000, ok());
    let late = r.acquire(t + 59_999);
    r.events();
    r.breaker.tick(r.at(t + 59_999));
    assert_eq!(r.state(), BreakerState::HalfOpen);
    r.breaker.tick(r.at(t + 60_000));
    assert_eq!(r.state(), BreakerState::Open);
    assert_eq!(
        r.one_event("half_open", "open"),
        "half-open for 60s without passing the ramp (1 ok, 0 failed)"
    );
    let v = r.breaker.view(r.at(t + 60_000));
    assert_eq!((v.trips, v.next_probe_ms), (2, Some(30_000)), "the base cooldown again");
    // A probe of the expired ramp does not count afterwards.
    r.record(late, t + 60_001, fail(FailureKind::Server));
    assert_eq!(r.breaker.view(r.at(t + 60_001)).trips, 2);
    assert!(r.events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn results_from_before_a_transition_do_not_count() {
    let mut r = Rig::new(BreakerConfig::default());
    let stale = r.acquire(0);
    let t = trip_default(&mut r, 0);
    let (a, b) = (r.acquire(t), r.acquire(t));
    r.events();
    // A closed-state permit cannot judge the ramp.
    r.record(stale, t, fail(FailureKind::Server));
    r.breaker.cancel(stale);
    let v = r.breaker.view(r.at(t));
    assert_eq!(
        (r.state(), v.half_open_stage, v.probes_in_flight),
        (BreakerState::HalfOpen, Some((0, 2)), 2)
    );
    r.record(a, t, ok());
    r.record(b, t, ok());
    assert_eq!(r.breaker.view(r.at(t)).half_open_stage, Some((1, 4)));

    // A probe of a failed ramp cannot judge the next ramp either.
    let (c, d) = (r.acquire(t), r.acquire(t));
    r.record(c, t, fail(FailureKind::Server));
    assert_eq!(
        r.one_event("half_open", "open"),
        "half-open probe failed: 1 of 1 probes failed (success 0.00 < 0.80)"
    );
    let t = t + 60_000;
    let e = r.acquire(t);
    r.events();
    r.record(d, t, fail(FailureKind::Server));
    r.breaker.cancel(d);
    let v = r.breaker.view(r.at(t));
    assert_eq!(
        (r.state(), v.half_open_stage, v.probes_in_flight),
        (BreakerState::HalfOpen, Some((0, 2)), 1)
    );
    assert_eq!(r.breaker.try_acquire(r.at(t)).map(|p| p.is_probe()), Ok(true));
    assert_eq!(
        r.breaker.try_acquire(r.at(t)).unwrap_err(),
        Rejected::ProbesBusy,
        "cancel of a stale probe freed nothing"
    );
    r.record(e, t, ok());
    assert!(r.events().is_empty());
}

#[tokio::test(start_paused = true)]
async fn time_window_forgets_failures_older_than_its_size() {
    let mut r = Rig::new(BreakerConfig {
        consecutive_failures: 0,
        window: WindowKind::Time,
        window_size: 10,
        minimum_calls: 4,
        failure_rate: 0.5,
        ..BreakerConfig::default()
    });
    for _ in 0..3 {
        r.call(0, fail(FailureKind::Server));
    }
    let v = r.breaker.view(r.at(9_999));
    assert_eq!((v.calls_in_window, v.failure_rate), (3, 1.0));
    assert_eq!(r.breaker.view(r.at(10_000)).calls_in_window, 0, "10 s old: forgotten");
    // Had the three old failures counted, the first of these would trip.
    for t in [10_000, 10_500, 12_000] {
        r.call(t, fail(FailureKind::Server));
        assert_eq!(r.state(), BreakerState::Closed, "at {t} ms");
    }
    assert_eq!(r.breaker.view(r.at(12_000)).calls_in_window, 3);
    r.call(15_000, fail(FailureKind::Server));
    assert_eq!(r.state(), BreakerState::Open);
    assert_eq!(r.one_event("closed", "open"), "failure rate 1.00 ≥ 0.50 over 4 calls");
}

fn latency(ms_: u64) -> CallRecord {
    CallRecord {
        latency: ms(ms_),
        ..ok()
    }
}

#[tokio::test(start_paused = true)]
async fn slow_call_rate_trips() {
    let cfg = BreakerConfig {
        consecutive_failures: 0,
        window_size: 5,
        minimum_calls: 5,
        slow_call_ms: 1_000,
        slow_call_rate: 0.8,
        ..BreakerConfig::default()
    };
    let mut r = Rig::new(cfg.clone());
    for l in [999, 1_500, 1_500, 1_500] {
        r.call(0, latency(l));
    }
    assert_eq!(r.state(), BreakerState::Closed, "under minimum_calls");
    assert_eq!(r.breaker.view(r.at(0)).slow_rate, 0.75);
    r.call(0, latency(2_000));
    assert_eq!(r.state(), BreakerState::Open);
    assert_eq!(
        r.one_event("closed", "open"),
        "slow-call rate 0.80 ≥ 0.80 over 5 calls (slower than 1000 ms)"
    );

    let r = Rig::new(cfg);
    for l in [1_500, 999, 1_500, 10, 1_500, 999, 20_000] {
        r.call(0, latency(l));
    }
    assert_eq!(r.state(), BreakerState::Closed, "at most 3 of 5 slow");
}

#[tokio::test(start_paused = true)]
async fn token_rate_collapse_counts_as_failure() {
    let r = Rig::new(BreakerConfig::default());
    let tps = |v: Option<f64>| CallRecord {
        tokens_per_s: v,
        ..ok()
    };
    for _ in 0..4 {
        r.call(0, tps(Some(1.9)));
    }
    assert_eq!(r.breaker.view(r.at(0)).consecutive_failures, 4);
    r.call(0, tps(Some(2.0)));
    r.call(0, tps(None));
    assert_eq!(
        r.breaker.view(r.at(0)).consecutive_failures,
        0,
        "at the floor, or unknown, is fine"
    );
    let mut r = Rig::new(BreakerConfig::default());
    for _ in 0..5 {
        r.call(0, tps(Some(0.5)));
    }
    assert_eq!(r.state(), BreakerState::Open);
    assert_eq!(
        r.one_event("closed", "open"),
        "5 consecutive failures (last: token-rate collapse)"
    );

    // With the floor off, slow streams are fine.
    let r = Rig::new(BreakerConfig {
        min_tokens_per_s: 0.0,
        ..BreakerConfig::default()
    });
    for _ in 0..20 {
        r.call(0, tps(Some(0.1)));
    }
    assert_eq!(r.breaker.view(r.at(0)).failure_rate, 0.0);
}

#[tokio::test(start_paused = true)]
async fn token_cost_threshold_trips_on_a_failed_call_only() {
    let mut r = Rig::new(BreakerConfig {
        count_rate_limited: false,
        ..BreakerConfig::default()
    });
    let cost = |failure: Option<FailureKind>, tokens: u32| CallRecord {
        failure,
        tokens,
        ..ok()
    };
    r.call(0, cost(None, 50_000));
    r.call(0, cost(Some(FailureKind::Server), 5_000));
    r.call(0, cost(Some(FailureKind::Blameless), 50_000));
    r.call(0, cost(Some(FailureKind::RateLimited), 50_000));
    assert_eq!(r.state(), BreakerState::Closed);
    assert!(r.events().is_empty());
    r.call(0, cost(Some(FailureKind::Timeout), 5_001));
    assert_eq!(r.state(), BreakerState::Open);
    assert_eq!(r.one_event("closed", "open"), "token cost 5001 > 5000 on a failed call");
}

#[tokio::test(start_paused = true)]
async fn rate_limited_counts_only_when_configured() {
    let r = Rig::new(BreakerConfig {
        count_rate_limited: false,
        ..BreakerConfig::default()
    });
    for _ in 0..30 {
        r.call(0, fail(FailureKind::RateLimited));
    }
    let v = r.breaker.view(r.at(0));
    assert_eq!(
        (r.state(), v.failure_rate, v.consecutive_failures),
        (BreakerState::Closed, 0.0, 0)
    );

    let mut r = Rig::new(BreakerConfig::default());
    for _ in 0..5 {
        r.call(0, fail(FailureKind::RateLimited));
    }
    assert_eq!(r.state(), BreakerState::Open);
    assert_eq!(
        r.one_event("closed", "open"),
        "5 consecutive failures (last: rate limited)"
    );
}

#[tokio::test(start_paused = true)]
async fn client_errors_never_count() {
    let mut r = Rig::new(BreakerConfig::default());
    for _ in 0..30 {
        r.call(0, fail(FailureKind::Blameless));
    }
    let v = r.breaker.view(r.at(0));
    assert_eq!(
        (r.state(), v.failure_rate, v.consecutive_failures),
        (BreakerState::Closed, 0.0, 0)
    );
    // Neither a failure nor a success: it does not break a failure streak.
    for _ in 0..4 {
        r.call(0, fail(FailureKind::Server));
    }
    r.call(0, fail(FailureKind::Blameless));
    assert_eq!(r.breaker.view(r.at(0)).consecutive_failures, 4);
    r.call(0, fail(FailureKind::Server));
    assert_eq!(
        r.one_event("closed", "open"),
        "5 consecutive failures (last: server error)"
    );

    // In half-open a client error gives its probe slot back and judges nothing.
    let t = 30_000;
    let (a, b) = (r.acquire(t), r.acquire(t));
    r.record(a, t, fail(FailureKind::Blameless));
    let v = r.breaker.view(r.at(t));
    assert_eq!((v.half_open_stage, v.probes_in_flight), (Some((0, 2)), 1));
    let c = r.acquire(t);
    r.record(b, t, ok());
    r.record(c, t, ok());
    assert_eq!(r.breaker.view(r.at(t)).half_open_stage, Some((1, 4)));
}

#[tokio::test(start_paused = true)]
async fn operator_states() {
    let mut r = Rig::new(BreakerConfig::default());
    let t = trip_default(&mut r, 0);
    let _probe = r.breaker.try_acquire(r.at(t)).expect("probe");
    r.breaker.tick(r.at(t + 60_000));
    assert_eq!(r.state(), BreakerState::Open, "half-open deadline passed: second trip");
    r.events();

    r.breaker.set_state(BreakerState::ForcedOpen, "drill by alice", r.at(t));
    let ev = r.events();
    assert_eq!(ev, vec![("open".into(), "forced_open".into(), "drill by alice".into())]);
    for dt in [0, 1_000_000] {
        assert_eq!(r.breaker.try_acquire(r.at(t + dt)).unwrap_err(), Rejected::ForcedOpen);
    }

    for forced in [BreakerState::ForcedClosed, BreakerState::Disabled] {
        r.breaker.set_state(forced, "operator", r.at(t));
        let before = r.breaker.view(r.at(t)).consecutive_failures;
        for _ in 0..50 {
            r.call(t, Outcome::Costly(FailureKind::Server).record());
        }
        assert_eq!(r.state(), forced, "never trips");
        assert!(r.breaker.would_admit(r.at(t)));
        assert_eq!(
            r.breaker.view(r.at(t)).consecutive_failures,
            before + 50,
            "still measured"
        );
        assert_eq!(r.events().len(), 1, "only the operator's transition");
    }

    r.breaker.set_state(BreakerState::Closed, "reset", r.at(t));
    let v = r.breaker.view(r.at(t));
    assert_eq!(
        (r.state(), v.calls_in_window, v.consecutive_failures, v.trips),
        (BreakerState::Closed, 0, 0, 0)
    );
    assert_eq!(r.events(), vec![("disabled".into(), "closed".into(), "reset".into())]);
    // A fresh start: the first trip waits the first cooldown again.
    trip_default(&mut r, t);
    assert_eq!(r.breaker.view(r.at(t)).next_probe_ms, Some(30_000));
}

/// Asking for the state a breaker is in already changes nothing: no
/// transition, no second trip or longer cooldown, and calls in flight still
/// count.
#[tokio::test(start_paused = true)]
async fn the_state_a_breaker_is_in_already_changes_nothing() {
    let mut r = Rig::new(BreakerConfig::default());
    let t = trip_default(&mut r, 0);
    r.breaker.set_state(BreakerState::ForcedOpen, "operator", r.at(t));
    r.events();
    let before = r.breaker.view(r.at(t));
    assert!(!r.breaker.set_state(BreakerState::ForcedOpen, "operator", r.at(t + 5)));
    let after = r.breaker.view(r.at(t + 5));
    assert_eq!((after.trips, after.state), (before.trips, before.state));
    assert!(r.events().is_empty());

    assert!(r.breaker.set_state(BreakerState::ForcedClosed, "operator", r.at(t)));
    r.events();
    let in_flight = r.acquire(t);
    let failures = r.breaker.view(r.at(t)).consecutive_failures;
    assert!(!r.breaker.set_state(BreakerState::ForcedClosed, "operator", r.at(t)));
    r.record(in_flight, t, fail(FailureKind::Server));
    assert_eq!(
        r.breaker.view(r.at(t)).consecutive_failures,
        failures + 1,
        "the call in flight still counts"
    );
    assert!(r.events().is_empty());
}

/// A dependency that stays slow (every call succeeds, in 5 s, over a 4 s
/// slow-call bound), attempted every 100 ms for 120 s, by a caller that
/// tells the breaker when a call outlasts the bound (as the runner does):
/// it trips on the calls still in flight once ten have run 4 s, and, its
/// probes being slow too, stays open with growing cooldowns instead of
/// closing and re-tripping at the first cooldown (which admitted 185
/// calls). It admits the 49 calls started before the tenth ran 4 s, and
/// one 2-probe stage per cooldown (30 s, then 60 s).
#[tokio::test(start_paused = true)]
async fn a_dependency_that_stays_slow_stays_open() {
    let cfg = BreakerConfig {
        slow_call_ms: 4_000,
        ..BreakerConfig::default()
    };
    let mut r = Rig::new(cfg);
    let slow = CallRecord {
        failure: None,
        latency: ms(5_000),
        tokens: 100,
        tokens_per_s: None,
    };
    // Calls in flight, by when they started.
    let mut running: VecDeque<(u64, Permit)> = VecDeque::new();
    let mut admitted = 0;
    for t in (0..120_000u64).step_by(100) {
        while running.front().is_some_and(|(start, _)| start + 5_000 <= t) {
            let (start, p) = running.pop_front().unwrap();
            r.record(p, start + 5_000, slow);
        }
        for (start, p) in running.iter_mut() {
            if *start + 4_000 == t {
                r.breaker.overdue(p, r.at(t));
            }
        }
        if let Ok(p) = r.breaker.try_acquire(r.at(t)) {
            admitted += 1;
            running.push_back((t, p));
        }
    }
    let events = r.events();
    assert!(
        events.iter().all(|(_, to, _)| to != "closed"),
        "never closes: {events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(from, _, why)| from == "half_open" && why.contains("1 of them slower than 4000 ms")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|(_, to, why)| to == "open" && why.contains("10 of them still running")),
        "{events:?}"
    );
    assert_eq!(admitted, 53, "admitted {admitted} calls in 120 s");
    assert_eq!(r.state(), BreakerState::Open);
}
