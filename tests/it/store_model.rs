//! The same property test of the shared store's operations (token buckets
//! for provider limits, windowed grants for budgets, the retry budget)
//! against both stores:
//! the in-process one and Redis (a real `redis-server`, skipped with a
//! notice when it is not installed). Each random sequence of takes, grants
//! and clock steps must give what a small reference model gives.

use crate::common;

use common::redis::Redis;
use fusebox::clock::Clock;
use fusebox::fleet::store::{MemoryStore, RedisStore, RetryAsk, RetryShare, Store, Take, RETRY_WINDOW_S, WINDOWS_MS};
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};

/// Buckets: capacity and refill per second.
const BUCKETS: [(f64, f64); 2] = [(1_000.0, 100.0), (50.0, 5.0)];
/// Budgets: minute, hour, day limits (0 = none).
const BUDGETS: [[f64; 3]; 2] = [[500.0, 2_000.0, 0.0], [0.0, 300.0, 1_000.0]];
/// Where the test clock starts (ms since the epoch), just before a minute ends.
const START_MS: u64 = 1_800_000_000_000 - 5_000;

#[derive(Clone, Debug)]
enum Op {
    Take { bucket: usize, want: f64 },
    Grant { budget: usize, want: f64 },
    Retry { requests: u64, taken: u64, want: u32 },
    Advance { ms: u64 },
}

/// The retry budget: a fifth of requests plus 5 a window.
const RETRIES: RetryShare = RetryShare { ratio: 0.2, floor: 5.0 };

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..2usize, 0.0..400.0f64).prop_map(|(bucket, want)| Op::Take { bucket, want }),
        (0..2usize, 0.0..200.0f64).prop_map(|(budget, want)| Op::Grant { budget, want }),
        (0..30u64, 0..3u64, 0..4u32).prop_map(|(requests, taken, want)| Op::Retry { requests, taken, want }),
        prop_oneof![0..2_000u64, 0..120_000u64, Just(3_600_000u64)].prop_map(|ms| Op::Advance { ms }),
    ]
}

/// The reference: what each operation must give.
#[derive(Default)]
struct Model {
    /// Level and last refill (µs) per bucket.
    buckets: [Option<(f64, u64)>; 2],
    /// Window index and usage per budget and window.
    used: [[(u64, f64); 3]; 2],
    /// The retry budget's requests and retries, by second.
    retries: std::collections::BTreeMap<u64, (u64, u64)>,
}

impl Model {
    fn take(&mut self, b: usize, want: f64, now_us: u64) -> f64 {
        let (cap, rate) = BUCKETS[b];
        let (level, ts) = self.buckets[b].get_or_insert((cap, now_us));
        if now_us > *ts {
            *level = cap.min(*level + (now_us - *ts) as f64 / 1e6 * rate);
            *ts = now_us;
        }
        let grant = want.min(*level).max(0.0);
        *level -= grant;
        grant
    }

    fn grant(&mut self, k: usize, want: f64, now_ms: u64) -> f64 {
        let mut grant = want;
        for (i, w) in self.used[k].iter_mut().enumerate() {
            let idx = now_ms / WINDOWS_MS[i];
            if w.0 != idx {
                *w = (idx, 0.0);
            }
            let limit = BUDGETS[k][i];
            if limit > 0.0 {
                grant = grant.min(limit - w.1).max(0.0);
            }
        }
        for w in &mut self.used[k] {
            w.1 += grant;
        }
        grant
    }

    /// Retries granted one by one while the window's stay under the budget.
    fn retry(&mut self, requests: u64, taken: u64, want: u32, now_ms: u64) -> u32 {
        let s = now_ms / 1_000;
        let slot = self.retries.entry(s).or_default();
        slot.0 += requests;
        slot.1 += taken;
        let window = self.retries.range(s + 1 - RETRY_WINDOW_S..=s);
        let (q, mut r) = window.fold((0, 0), |(q, r), (_, x)| (q + x.0, r + x.1));
        let mut grant = 0;
        while grant < want && (r as f64) < RETRIES.floor + RETRIES.ratio * q as f64 {
            grant += 1;
            r += 1;
        }
        self.retries.get_mut(&s).unwrap().1 += u64::from(grant);
        grant
    }
}

/// Runs `ops` on `store` (keys under `prefix`) and on the model; every
/// result must match, and no bucket may grant more than its capacity plus
/// its refill.
async fn check(store: &dyn Store, prefix: &str, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    let mut now_ms = START_MS;
    let mut granted = [0.0f64; 2];
    let started = now_ms;
    for op in ops {
        match *op {
            Op::Take { bucket, want } => {
                let (capacity, per_s) = BUCKETS[bucket];
                let take = Take {
                    key: format!("{prefix}:bucket{bucket}"),
                    capacity,
                    per_s,
                    want,
                };
                let got = store.take(&[take], Some(now_ms * 1_000)).await.unwrap()[0];
                let expected = model.take(bucket, want, now_ms * 1_000);
                prop_assert!(
                    (got.grant - expected).abs() < 1e-6,
                    "take {op:?}: {} vs {expected}",
                    got.grant
                );
                prop_assert!(got.grant <= want + 1e-9);
                granted[bucket] += got.grant;
                let bound = capacity + per_s * (now_ms - started) as f64 / 1_000.0;
                prop_assert!(
                    granted[bucket] <= bound + 1e-6,
                    "bucket {bucket} granted {} > {bound}",
                    granted[bucket]
                );
            }
            Op::Grant { budget, want } => {
                let key = format!("{prefix}:budget{budget}");
                let got = store.grant(&key, want, BUDGETS[budget], Some(now_ms)).await.unwrap();
                let expected = model.grant(budget, want, now_ms);
                prop_assert!(
                    (got.grant - expected).abs() < 1e-6,
                    "grant {op:?}: {} vs {expected}",
                    got.grant
                );
                prop_assert_eq!(got.bound.is_some(), expected < want - 1e-9, "bound {:?}", got.bound);
            }
            Op::Retry { requests, taken, want } => {
                let got = store
                    .retry(
                        &format!("{prefix}:retries"),
                        RetryAsk { requests, taken, want },
                        RETRIES,
                        Some(now_ms),
                    )
                    .await
                    .unwrap();
                prop_assert_eq!(got, model.retry(requests, taken, want, now_ms), "retry {:?}", op);
            }
            Op::Advance { ms } => now_ms += ms,
        }
    }
    Ok(())
}

#[test]
fn the_in_process_store_follows_the_model() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    proptest!(ProptestConfig::with_cases(256), |(ops in prop::collection::vec(op(), 1..60))| {
        let store = MemoryStore::new(Clock::with_wall_anchor(0));
        rt.block_on(check(&store, "mem", &ops))?;
    });
}

#[test]
fn the_redis_store_follows_the_model() {
    let Some(redis) = Redis::start() else { return };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = rt.block_on(async {
        let endpoint = fusebox::fleet::connect::RedisEndpoint::parse(&redis.url()).unwrap();
        RedisStore::new(endpoint.connect().await.unwrap())
    });
    let case = AtomicU64::new(0);
    proptest!(ProptestConfig::with_cases(64), |(ops in prop::collection::vec(op(), 1..60))| {
        // Fresh keys per case; one hash tag per case, as in production.
        let prefix = format!("test:{{case{}}}", case.fetch_add(1, Ordering::Relaxed));
        rt.block_on(check(&store, &prefix, &ops))?;
    });
}
