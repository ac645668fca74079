//! The token-aware limiter against a reference token-bucket model (proptest),
//! plus exact tests on paused virtual time: refill, calibration, reset times,
//! Retry-After and operator freezes, waiting acquires and estimator drift.

use fusebox::clock::Clock;
use fusebox::config::{LimiterConfig, Priority, ProviderConfig};
use fusebox::resilience::limiter::{Estimate, LimitDenied, LimitPermit, Limiter, Place, RateFeedback, ShedWhy, Signal};
use fusebox::telemetry::events::RefillFrozen;
use fusebox::telemetry::events::{EventBus, EventKind};
use proptest::prelude::*;
use proptest::sample::Index;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn bus() -> Arc<EventBus> {
    EventBus::new(Clock::with_wall_anchor(0), 100)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn provider(tpm: u64, itpm: u64, otpm: u64, rpm: u64, concurrency: u32) -> ProviderConfig {
    ProviderConfig::mock(tpm, itpm, otpm, rpm, concurrency, 4.0)
}

// ---------------------------------------------------------------------------
// Reference model
// ---------------------------------------------------------------------------
//
// Time moves in steps of 1/8 s and every limit is a multiple of 15 per
// minute, so a refill per step is a whole number of 1/32 tokens: the model
// counts in 1/32 tokens with integers, and the limiter's f64 arithmetic is
// exact on these values (every figure is compared for equality).

/// Milliseconds per time step.
const STEP_MS: u64 = 125;
/// Model units per token.
const UNIT: i64 = 32;

#[derive(Clone, Copy, Debug)]
struct ModelBucket {
    /// Level in 1/32 tokens (may go negative after a settle charge).
    level: i64,
    /// Capacity in 1/32 tokens.
    cap: i64,
    /// Refill per step in 1/32 tokens (limit/min × 1/8 s × 32 = limit / 15).
    per_step: i64,
}

impl ModelBucket {
    fn new(limit_per_min: u64) -> Option<Self> {
        (limit_per_min > 0).then(|| ModelBucket {
            level: limit_per_min as i64 * UNIT,
            cap: limit_per_min as i64 * UNIT,
            per_step: limit_per_min as i64 / 15,
        })
    }

    /// What a request of `n` tokens takes: a request bigger than the whole
    /// bucket may go once the bucket is full.
    fn need(&self, n: u32) -> i64 {
        (n as i64 * UNIT).min(self.cap)
    }

    fn add(&mut self, units: i64) {
        self.level = (self.level + units).min(self.cap);
    }

    /// Time until `n` tokens are there, refilling without a freeze.
    fn wait_for(&self, n: u32) -> Duration {
        let short = (self.need(n) - self.level).max(0);
        // per_step units per 125 ms.
        Duration::from_nanos((short as u128 * 125_000_000 / self.per_step as u128) as u64)
    }
}

#[derive(Clone, Copy, Debug)]
struct Limits {
    tpm: u64,
    itpm: u64,
    otpm: u64,
    rpm: u64,
    concurrency: u32,
}

struct Model {
    tpm: Option<ModelBucket>,
    itpm: Option<ModelBucket>,
    otpm: Option<ModelBucket>,
    rpm: Option<ModelBucket>,
    cap: u32,
    in_flight: u32,
    /// Last refill, in steps.
    last: u64,
    frozen_until: Option<u64>,
    frozen_by_operator: bool,
}

/// One call's tokens per bucket: (tpm, itpm, otpm, rpm).
fn per_bucket(est: Estimate) -> [u32; 4] {
    [est.total(), est.input, est.output, 1]
}

impl Model {
    fn new(l: Limits) -> Self {
        Model {
            tpm: ModelBucket::new(l.tpm),
            itpm: ModelBucket::new(l.itpm),
            otpm: ModelBucket::new(l.otpm),
            rpm: ModelBucket::new(l.rpm),
            cap: l.concurrency,
            in_flight: 0,
            last: 0,
            frozen_until: None,
            frozen_by_operator: false,
        }
    }

    fn buckets(&mut self) -> [&mut Option<ModelBucket>; 4] {
        [&mut self.tpm, &mut self.itpm, &mut self.otpm, &mut self.rpm]
    }

    fn estimate(prompt_chars: usize, max_tokens: u32) -> Estimate {
        Estimate {
            input: (prompt_chars as u32).div_ceil(4).max(1),
            output: max_tokens,
        }
    }

    /// Refills up to `now` (steps); nothing refills while frozen.
    fn refill(&mut self, now: u64) {
        let from = if self.frozen_by_operator {
            now
        } else {
            match self.frozen_until {
                Some(u) if u > now => now,
                Some(u) => {
                    self.frozen_until = None;
                    u.max(self.last)
                }
                None => self.last,
            }
        };
        let steps = (now - from) as i64;
        for b in self.buckets().into_iter().flatten() {
            b.add(steps * b.per_step);
        }
        self.last = now;
    }

    fn frozen_for(&self, now: u64) -> Option<Duration> {
        if self.frozen_by_operator {
            return Some(Duration::MAX);
        }
        self.frozen_until.filter(|u| *u > now).map(|u| ms((u - now) * STEP_MS))
    }

    /// Ok(estimate) when granted, else the expected wait.
    fn try_acquire(&mut self, est: Estimate, now: u64, wait_timeout: Duration) -> Result<Estimate, Duration> {
        self.refill(now);
        let ns = per_bucket(est);
        let mut wait = Duration::ZERO;
        for (b, n) in self.buckets().into_iter().zip(ns) {
            if let Some(b) = b {
                wait = wait.max(b.wait_for(n));
            }
        }
        let slots_full = self.cap > 0 && self.in_flight >= self.cap;
        if wait.is_zero() && !slots_full {
            for (b, n) in self.buckets().into_iter().zip(ns) {
                if let Some(b) = b {
                    b.level -= b.need(n);
                }
            }
            self.in_flight += 1;
            return Ok(est);
        }
        if wait.is_zero() {
            return Err(ms(50));
        }
        if self.frozen_by_operator {
            return Err(wait_timeout);
        }
        Err(wait + self.frozen_for(now).unwrap_or_default())
    }

    fn settle(&mut self, est: Estimate, input: u32, output: u32, now: u64) {
        self.refill(now);
        let actual = [input + output, input, output];
        for ((b, e), a) in self.buckets().into_iter().zip(per_bucket(est)).zip(actual) {
            if let Some(b) = b {
                // Settle charges actual usage against what acquire took.
                b.add(b.need(e) - a as i64 * UNIT);
            }
        }
        self.in_flight -= 1;
    }

    fn release(&mut self, est: Estimate, now: u64) {
        self.refill(now);
        for (b, n) in self.buckets().into_iter().zip(per_bucket(est)) {
            if let Some(b) = b {
                let need = b.need(n);
                b.add(need);
            }
        }
        self.in_flight -= 1;
    }

    fn retry_after(&mut self, steps: u64, now: u64) {
        self.refill(now);
        let until = now + steps;
        if self.frozen_until.is_none_or(|u| u < until) {
            self.frozen_until = Some(until);
        }
    }

    fn remaining_tokens(&mut self, r: u64, now: u64) {
        self.refill(now);
        let b = if self.tpm.is_some() {
            &mut self.tpm
        } else {
            &mut self.itpm
        };
        if let Some(b) = b {
            b.level = b.level.min(r as i64 * UNIT);
        }
    }
}

// ---------------------------------------------------------------------------
// Property: the limiter follows the model
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Acquire { prompt_chars: usize, max_tokens: u32 },
    Settle { which: Index, input: u32, output: u32 },
    Release(Index),
    Advance(u64),
    RetryAfter(u64),
    RemainingTokens(u64),
    Freeze,
    Unfreeze,
}

fn limits_strategy() -> impl Strategy<Value = Limits> {
    let per_min = |lo: u64, hi: u64| (lo..=hi).prop_map(|k| k * 15);
    let conc = prop_oneof![Just(0u32), 1u32..=4];
    prop_oneof![
        // tokens + requests per minute (OpenAI-style).
        (per_min(40, 800), per_min(1, 8), conc).prop_map(|(tpm, rpm, concurrency)| Limits {
            tpm,
            itpm: 0,
            otpm: 0,
            rpm,
            concurrency,
        }),
        // input and output tokens per minute (Anthropic-style).
        (
            per_min(40, 800),
            per_min(20, 400),
            prop_oneof![Just(0u64), per_min(1, 8)]
        )
            .prop_map(|(itpm, otpm, rpm)| Limits {
                tpm: 0,
                itpm,
                otpm,
                rpm,
                concurrency: 0,
            }),
        // only a concurrency cap (DeepSeek-style).
        (1u32..=5).prop_map(|concurrency| Limits {
            tpm: 0,
            itpm: 0,
            otpm: 0,
            rpm: 0,
            concurrency,
        }),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (0usize..=8_000, 0u32..=3_000).prop_map(|(prompt_chars, max_tokens)| Op::Acquire {
            prompt_chars,
            max_tokens,
        }),
        12 => (any::<Index>(), 0u32..=3_000, 0u32..=3_000).prop_map(|(which, input, output)| Op::Settle {
            which,
            input,
            output,
        }),
        4 => any::<Index>().prop_map(Op::Release),
        12 => prop_oneof![4 => 0u64..=16, 1 => 16u64..=800].prop_map(Op::Advance),
        2 => (1u64..=80).prop_map(Op::RetryAfter),
        2 => (0u64..=5_000).prop_map(Op::RemainingTokens),
        1 => Just(Op::Freeze),
        3 => Just(Op::Unfreeze),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

fn check_model(limits: Limits, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = runtime();
    let _rt = rt.enter();
    let base = Instant::now();
    let cfg = LimiterConfig {
        // The estimator's drift correction is tested on its own below.
        drift_window: u32::MAX,
        ..LimiterConfig::default()
    };
    let wait_timeout = ms(cfg.wait_timeout_ms);
    let p = provider(limits.tpm, limits.itpm, limits.otpm, limits.rpm, limits.concurrency);
    let limiter = Limiter::new("prop", &p, cfg, bus(), base);
    let mut model = Model::new(limits);
    let mut held: Vec<LimitPermit> = Vec::new();
    let mut t = 0u64;

    for (step, op) in ops.into_iter().enumerate() {
        let now = base + ms(t * STEP_MS);
        match op {
            Op::Acquire {
                prompt_chars,
                max_tokens,
            } => {
                let est = Model::estimate(prompt_chars, max_tokens);
                prop_assert_eq!(limiter.estimate(prompt_chars, max_tokens), est, "step {}", step);
                let want = model.try_acquire(est, t, wait_timeout);
                match (limiter.try_acquire(prompt_chars, max_tokens, now), want) {
                    (Ok(p), Ok(e)) => {
                        prop_assert_eq!(p.estimate(), e, "step {}", step);
                        held.push(p);
                    }
                    (Err(got), Err(want)) => {
                        let diff = got.abs_diff(want);
                        prop_assert!(
                            diff <= Duration::from_micros(1),
                            "step {}: wait {:?}, model {:?}",
                            step,
                            got,
                            want
                        );
                    }
                    (got, want) => {
                        prop_assert!(
                            false,
                            "step {}: limiter {:?}, model {:?}",
                            step,
                            got.map(|p| p.estimate()),
                            want
                        )
                    }
                }
            }
            Op::Settle { which, input, output } => {
                if held.is_empty() {
                    continue;
                }
                let p = held.swap_remove(which.index(held.len()));
                model.settle(p.estimate(), input, output, t);
                limiter.settle(p, input, output, Signal::Neutral, now);
            }
            Op::Release(which) => {
                if held.is_empty() {
                    continue;
                }
                let p = held.swap_remove(which.index(held.len()));
                model.release(p.estimate(), t);
                limiter.release(p, now);
            }
            Op::Advance(steps) => t += steps,
            Op::RetryAfter(steps) => {
                model.retry_after(steps, t);
                let fb = RateFeedback {
                    retry_after: Some(ms(steps * STEP_MS)),
                    ..RateFeedback::default()
                };
                limiter.calibrate(&fb, now);
            }
            Op::RemainingTokens(r) => {
                model.remaining_tokens(r, t);
                let fb = RateFeedback {
                    remaining_tokens: Some(r),
                    ..RateFeedback::default()
                };
                limiter.calibrate(&fb, now);
            }
            Op::Freeze => {
                model.refill(t);
                model.frozen_by_operator = true;
                limiter.freeze(now);
            }
            Op::Unfreeze => {
                model.refill(t);
                model.frozen_by_operator = false;
                model.frozen_until = None;
                limiter.unfreeze(now);
            }
        }

        let now = base + ms(t * STEP_MS);
        model.refill(t);
        let v = limiter.view(now);
        let pairs = [
            (v.tpm, model.tpm),
            (v.itpm, model.itpm),
            (v.otpm, model.otpm),
            (v.rpm, model.rpm),
        ];
        for (i, (got, want)) in pairs.into_iter().enumerate() {
            let want = want.map(|b| (b.level as f64 / UNIT as f64, b.cap as f64 / UNIT as f64));
            prop_assert_eq!(got, want, "step {}: bucket {} (tpm, itpm, otpm, rpm)", step, i);
            if let Some((level, cap)) = got {
                prop_assert!(level <= cap, "step {}: level {} over capacity {}", step, level, cap);
            }
        }
        prop_assert_eq!(
            v.concurrency,
            (model.in_flight, model.cap),
            "step {}: concurrency",
            step
        );
        prop_assert_eq!(v.concurrency.0 as usize, held.len(), "step {}", step);
        if model.cap > 0 {
            prop_assert!(v.concurrency.0 <= model.cap, "step {}: over the concurrency cap", step);
        }
        let frozen = if model.frozen_by_operator {
            Some(fusebox::resilience::limiter::Frozen::ByOperator)
        } else {
            model.frozen_for(t).map(|d| fusebox::resilience::limiter::Frozen::For {
                ms: d.as_millis() as u64,
            })
        };
        prop_assert_eq!(v.frozen, frozen, "step {}: frozen", step);
        prop_assert_eq!(v.chars_per_token, 4.0, "step {}", step);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn limiter_follows_the_token_bucket_model(
        limits in limits_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..160),
    ) {
        check_model(limits, ops)?;
    }
}

// ---------------------------------------------------------------------------
// Exact scenarios on paused time
// ---------------------------------------------------------------------------

/// A limiter for one provider created now, and its creation instant.
fn limiter(p: ProviderConfig, cfg: LimiterConfig) -> (Limiter, Instant) {
    let now = Instant::now();
    (Limiter::new("openai", &p, cfg, bus(), now), now)
}

/// 60 000 tokens and 600 requests per minute: 1 000 tokens and 10 requests a second.
fn tpm_60k() -> ProviderConfig {
    provider(60_000, 0, 0, 600, 0)
}

/// Takes all 60 000 tokens of `tpm_60k` (10 000 input + 50 000 output).
fn drain(l: &Limiter, now: Instant) -> LimitPermit {
    let p = l.try_acquire(40_000, 50_000, now).expect("a full bucket");
    assert_eq!(p.estimate().total(), 60_000);
    assert_eq!(l.view(now).tpm, Some((0.0, 60_000.0)));
    p
}

fn tokens(l: &Limiter, now: Instant) -> f64 {
    l.view(now).tpm.expect("tpm bucket").0
}

#[tokio::test(start_paused = true)]
async fn refill_is_exact() {
    let (l, t0) = limiter(tpm_60k(), LimiterConfig::default());
    let _p = drain(&l, t0);
    assert_eq!(tokens(&l, t0 + ms(1)), 1.0);
    assert_eq!(tokens(&l, t0 + ms(1_000)), 1_000.0);
    assert_eq!(tokens(&l, t0 + ms(2_500)), 2_500.0);
    assert_eq!(l.view(t0 + ms(2_500)).rpm, Some((600.0, 600.0)), "10 requests a second");
    // 4 000 chars ≈ 1 000 input tokens: 1 ms short at 2.5 s + 0.499 s.
    let at = t0 + ms(2_999);
    assert_eq!(l.try_acquire(4_000 * 3, 0, at).unwrap_err(), ms(1));
    assert!(l.try_acquire(4_000 * 3, 0, t0 + ms(3_000)).is_ok());
    assert_eq!(tokens(&l, t0 + ms(3_000)), 0.0);
    assert_eq!(tokens(&l, t0 + ms(100_000)), 60_000.0, "capped at capacity");
}

#[tokio::test(start_paused = true)]
async fn settle_refunds_or_charges_the_difference() {
    let (l, t0) = limiter(provider(60_000, 40_000, 20_000, 0, 2), LimiterConfig::default());
    // 400 chars → 100 input tokens; max_tokens 1 000.
    let p = l.try_acquire(400, 1_000, t0).unwrap();
    assert_eq!(
        p.estimate(),
        Estimate {
            input: 100,
            output: 1_000
        }
    );
    let v = l.view(t0);
    assert_eq!(
        (v.tpm, v.itpm, v.otpm),
        (
            Some((58_900.0, 60_000.0)),
            Some((39_900.0, 40_000.0)),
            Some((19_000.0, 20_000.0))
        )
    );
    assert_eq!(v.concurrency, (1, 2));
    l.settle(p, 100, 200, Signal::Neutral, t0);
    let v = l.view(t0);
    assert_eq!(
        (v.tpm, v.otpm),
        (Some((59_700.0, 60_000.0)), Some((19_800.0, 20_000.0))),
        "800 refunded"
    );
    assert_eq!(v.concurrency, (0, 2));

    let p = l.try_acquire(400, 1_000, t0).unwrap();
    l.settle(p, 300, 1_500, Signal::Neutral, t0);
    let v = l.view(t0);
    assert_eq!(
        v.tpm,
        Some((59_700.0 - 1_800.0, 60_000.0)),
        "700 charged on top of the estimate"
    );
    assert_eq!(v.itpm, Some((39_600.0, 40_000.0)), "200 input tokens charged");
    assert_eq!(v.otpm, Some((18_300.0, 20_000.0)));

    // A call that never happened gives everything back.
    let p = l.try_acquire(400, 1_000, t0).unwrap();
    l.release(p, t0);
    assert_eq!(l.view(t0).tpm, Some((57_900.0, 60_000.0)));
}

#[tokio::test(start_paused = true)]
async fn calibration_lowers_the_level_only() {
    let (l, t0) = limiter(tpm_60k(), LimiterConfig::default());
    let fb = |tokens: u64, requests: u64| RateFeedback {
        remaining_tokens: Some(tokens),
        remaining_requests: Some(requests),
        ..RateFeedback::default()
    };
    l.calibrate(&fb(1_000, 5), t0);
    let v = l.view(t0);
    assert_eq!(
        (v.tpm, v.rpm, v.calibrated_ms_ago),
        (Some((1_000.0, 60_000.0)), Some((5.0, 600.0)), Some(0))
    );
    let t1 = t0 + ms(2_000);
    l.calibrate(&fb(50_000, 500), t1);
    let v = l.view(t1);
    assert_eq!(
        (v.tpm, v.rpm),
        (Some((3_000.0, 60_000.0)), Some((25.0, 600.0))),
        "higher counts never raise"
    );
    assert_eq!(l.view(t1 + ms(500)).calibrated_ms_ago, Some(500));
    // An empty feedback is no calibration.
    l.calibrate(&RateFeedback::default(), t1 + ms(500));
    assert_eq!(l.view(t1 + ms(500)).calibrated_ms_ago, Some(500));

    // Without a tpm bucket, the input bucket is the one calibrated.
    let (l, t0) = limiter(provider(0, 40_000, 8_000, 0, 0), LimiterConfig::default());
    l.calibrate(&fb(1_000, 5), t0);
    let v = l.view(t0);
    assert_eq!((v.itpm, v.otpm), (Some((1_000.0, 40_000.0)), Some((8_000.0, 8_000.0))));
}

#[tokio::test(start_paused = true)]
async fn reset_time_restores_the_bucket() {
    let (l, t0) = limiter(tpm_60k(), LimiterConfig::default());
    let _p = drain(&l, t0);
    let fb = RateFeedback {
        reset_tokens: Some(ms(5_000)),
        ..RateFeedback::default()
    };
    l.calibrate(&fb, t0 + ms(1_000));
    assert_eq!(tokens(&l, t0 + ms(5_999)), 5_999.0);
    assert_eq!(tokens(&l, t0 + ms(6_000)), 60_000.0, "full at the reset instant");
    // Once only: the next drain refills at the normal rate.
    let _q = drain(&l, t0 + ms(6_000));
    assert_eq!(tokens(&l, t0 + ms(7_000)), 1_000.0);
}

#[tokio::test(start_paused = true)]
async fn retry_after_freezes_refills_for_that_long() {
    let bus = bus();
    let mut rx = bus.subscribe();
    let t0 = Instant::now();
    let l = Limiter::new("openai", &tpm_60k(), LimiterConfig::default(), bus, t0);
    let _p = drain(&l, t0);
    let t1 = t0 + ms(1_000);
    let fb = RateFeedback {
        retry_after: Some(ms(3_000)),
        ..RateFeedback::default()
    };
    l.calibrate(&fb, t1);
    let ev = rx.try_recv().expect("a freeze event").kind;
    assert_eq!(
        ev,
        EventKind::RefillFrozen(RefillFrozen {
            provider: "openai".into(),
            for_ms: Some(3_000),
            reason: "retry-after from provider".into(),
        })
    );
    assert!(l.is_frozen(t1));
    let v = l.view(t0 + ms(2_000));
    assert_eq!(
        (v.tpm, v.frozen),
        (
            Some((1_000.0, 60_000.0)),
            Some(fusebox::resilience::limiter::Frozen::For { ms: 2_000 })
        )
    );
    // 1 000 tokens short and 2 s of freeze left: at least the freeze.
    assert!(l.try_acquire(8_000, 0, t0 + ms(2_000)).unwrap_err() >= ms(2_000));
    // A shorter Retry-After does not shorten the freeze.
    l.freeze_for(ms(500), "shorter", t0 + ms(2_000));
    assert!(rx.try_recv().is_err());
    assert_eq!(tokens(&l, t0 + ms(4_000)), 1_000.0);
    assert!(!l.is_frozen(t0 + ms(4_000)));
    assert_eq!(l.view(t0 + ms(4_000)).frozen, None);
    assert_eq!(tokens(&l, t0 + ms(5_000)), 2_000.0, "refills resume after the freeze");
}

#[tokio::test(start_paused = true)]
async fn operator_freeze_and_unfreeze() {
    let cfg = LimiterConfig::default();
    let (l, t0) = limiter(tpm_60k(), cfg.clone());
    let _p = drain(&l, t0);
    l.freeze(t0 + ms(500));
    let t1 = t0 + ms(10_000);
    let v = l.view(t1);
    assert_eq!(
        (v.tpm, v.frozen),
        (
            Some((500.0, 60_000.0)),
            Some(fusebox::resilience::limiter::Frozen::ByOperator)
        )
    );
    assert!(l.is_frozen(t1));
    assert!(
        l.try_acquire(0, 100, t1).is_ok(),
        "tokens already there can still be used"
    );
    assert_eq!(l.try_acquire(0, 1_000, t1).unwrap_err(), ms(cfg.wait_timeout_ms));
    l.unfreeze(t1);
    assert_eq!(l.view(t1).frozen, None);
    assert_eq!(tokens(&l, t1 + ms(1_000)), 1_399.0, "no refill for the frozen time");

    // Unfreeze also ends a Retry-After freeze.
    l.freeze_for(ms(60_000), "retry-after", t1 + ms(1_000));
    l.unfreeze(t1 + ms(1_000));
    assert_eq!(tokens(&l, t1 + ms(2_000)), 2_399.0);
}

#[tokio::test(start_paused = true)]
async fn acquire_waits_for_capacity() {
    let (l, t0) = limiter(tpm_60k(), LimiterConfig::default());
    let _p = drain(&l, t0);
    let p = l.acquire(4_000, 0).await.expect("capacity within the timeout");
    assert_eq!(p.estimate().total(), 1_000);
    assert_eq!(Instant::now() - t0, ms(1_000), "exactly when 1 000 tokens were back");
    assert_eq!(l.view(Instant::now()).rejected, 0);
}

#[tokio::test(start_paused = true)]
async fn acquire_waits_for_a_free_slot() {
    let (l, t0) = limiter(provider(0, 0, 0, 0, 1), LimiterConfig::default());
    let l = Arc::new(l);
    let held = l.try_acquire(100, 100, t0).unwrap();
    assert_eq!(l.try_acquire(100, 100, t0).unwrap_err(), ms(50));
    let l2 = l.clone();
    let task = tokio::spawn(async move {
        tokio::time::sleep(ms(321)).await;
        l2.settle(held, 10, 10, Signal::Neutral, Instant::now());
    });
    let p = l.acquire(100, 100).await.expect("a slot within the timeout");
    assert_eq!(Instant::now() - t0, ms(321), "woken by the settle");
    assert_eq!(l.view(Instant::now()).concurrency, (1, 1));
    l.release(p, Instant::now());
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn acquire_times_out_while_frozen() {
    let cfg = LimiterConfig::default();
    let (l, t0) = limiter(tpm_60k(), cfg.clone());
    let _p = drain(&l, t0);
    l.freeze(t0);
    assert_eq!(l.acquire(4_000, 0).await.unwrap_err(), LimitDenied::TimedOut);
    assert_eq!(Instant::now() - t0, ms(cfg.wait_timeout_ms));
    assert_eq!(l.view(Instant::now()).rejected, 1);

    // A Retry-After longer than the timeout: same.
    l.unfreeze(Instant::now());
    let t1 = Instant::now();
    assert_eq!(tokens(&l, t1), 0.0);
    l.freeze_for(ms(10_000), "retry-after", t1);
    assert_eq!(l.acquire(4_000, 0).await.unwrap_err(), LimitDenied::TimedOut);
    assert_eq!(Instant::now() - t1, ms(cfg.wait_timeout_ms));
    assert_eq!(l.view(Instant::now()).rejected, 2);
}

/// Runs `calls` calls of 400 prompt chars that actually used `actual` input tokens.
fn drift(l: &Limiter, calls: u32, actual: u32, now: Instant) {
    for _ in 0..calls {
        let p = l.try_acquire(400, 0, now).unwrap();
        l.settle(p, actual, 0, Signal::Neutral, now);
    }
}

#[tokio::test(start_paused = true)]
async fn estimator_corrects_drift_beyond_the_threshold() {
    let cfg = LimiterConfig {
        drift_threshold: 0.3,
        drift_window: 10,
        ..LimiterConfig::default()
    };
    let p = provider(1_000_000, 0, 0, 0, 0);
    let (l, t0) = limiter(p.clone(), cfg.clone());
    assert_eq!(l.estimate(400, 0).input, 100);
    drift(&l, 9, 50, t0);
    assert_eq!(l.view(t0).chars_per_token, 4.0, "not before drift_window calls");
    drift(&l, 1, 50, t0);
    assert_eq!(
        l.view(t0).chars_per_token,
        8.0,
        "half the tokens: twice the chars per token"
    );
    assert_eq!(l.estimate(400, 0).input, 50);
    // Accurate now: no further change.
    drift(&l, 10, 50, t0);
    assert_eq!(l.view(t0).chars_per_token, 8.0);

    // Twice the tokens: half the chars per token.
    let (l, t0) = limiter(p.clone(), cfg.clone());
    drift(&l, 10, 200, t0);
    assert_eq!(l.view(t0).chars_per_token, 2.0);

    // Within the threshold (25 % and 23 % off): unchanged.
    for actual in [80, 130] {
        let (l, t0) = limiter(p.clone(), cfg.clone());
        drift(&l, 30, actual, t0);
        assert_eq!(l.view(t0).chars_per_token, 4.0, "actual {actual}");
    }
}

/// One call at a time, calls queue by priority and fair shares.
fn one_slot_queued() -> (Limiter, Instant) {
    let mut cfg = LimiterConfig::default();
    cfg.queue.enabled = true;
    limiter(provider(0, 0, 0, 0, 1), cfg)
}

fn place(p: Priority, tenant: &str) -> Place {
    Place::new(p, tenant.into(), 1)
}

#[tokio::test(start_paused = true)]
async fn a_queue_serves_by_priority_and_sheds_at_the_deadline() {
    let (l, t0) = one_slot_queued();
    let l = Arc::new(l);
    let held = l.try_acquire(40, 10, t0).unwrap();
    let served = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (p, tenant, wait_ms)) in [
        (Priority::Batch, "b", 2_000),
        (Priority::Default, "d", 5_000),
        (Priority::Critical, "c", 10_000),
    ]
    .into_iter()
    .enumerate()
    {
        let (l, served) = (l.clone(), served.clone());
        tasks.spawn(async move {
            tokio::time::sleep(ms(i as u64)).await;
            let r = l.acquire_queued(40, 10, &place(p, tenant), t0 + ms(wait_ms)).await;
            if let Ok(permit) = r {
                served.lock().push((tenant, Instant::now() - t0));
                tokio::time::sleep(ms(1_500)).await;
                l.release(permit, Instant::now());
            }
            (tenant, r.err())
        });
    }
    tokio::time::sleep(ms(10)).await;
    assert_eq!(l.view(t0 + ms(10)).queue.unwrap().waiting, [1, 1, 1]);
    // A new call does not overtake them.
    assert!(l.queued());
    tokio::time::sleep_until(t0 + ms(1_000)).await;
    l.release(held, Instant::now());
    let mut ends = Vec::new();
    while let Some(r) = tasks.join_next().await {
        ends.push(r.unwrap());
    }
    ends.sort_by_key(|e| e.0);
    // The critical call gets the slot given back at 1 s, the default one
    // at 2.5 s; the batch call waited its 2 s deadline and was shed.
    assert_eq!(*served.lock(), [("c", ms(1_000)), ("d", ms(2_500))]);
    assert_eq!(
        ends,
        [
            ("b", Some(LimitDenied::Shed(ShedWhy::Deadline))),
            ("c", None),
            ("d", None)
        ]
    );
    let q = l.view(Instant::now()).queue.unwrap();
    assert_eq!((q.waiting, q.shed), ([0, 0, 0], [0, 0, 1]));
    assert!(!l.queued());
}

#[tokio::test(start_paused = true)]
async fn a_caller_gone_from_the_queue_leaves_no_trace() {
    let (l, t0) = one_slot_queued();
    let held = l.try_acquire(40, 10, t0).unwrap();
    let at = place(Priority::Default, "x");
    let waiting = l.acquire_queued(40, 10, &at, t0 + ms(5_000));
    assert!(tokio::time::timeout(ms(100), waiting).await.is_err());
    let q = l.view(Instant::now()).queue.unwrap();
    assert_eq!((q.waiting, q.shed), ([0, 0, 0], [0, 0, 0]));
    l.release(held, Instant::now());
    assert!(l.try_acquire(40, 10, Instant::now()).is_ok());
}
