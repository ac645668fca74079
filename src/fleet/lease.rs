//! Provider rate limits held by the fleet, not per instance: each
//! provider's token and request buckets live in Redis, refilled from Redis's
//! own clock by one atomic Lua script. Every instance leases a share and
//! spends it locally, so far from the limit a call makes no round trip;
//! near it the shared level is low, leases shrink and calls wait for
//! capacity actually left. Everything an instance spends was taken from the
//! shared bucket first, so the fleet together stays within the limit.
//!
//! Without Redis an instance refills its own buckets at its share of the
//! rate (the limit divided by the live instances last seen): fail open,
//! without multiplying the limit.

use super::store::Take;
use super::Fleet;
use crate::resilience::limiter::{Limiter, BUCKETS};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Share of a bucket's capacity one lease takes at most.
const LEASE_SHARE: f64 = 0.1;
/// How often a limiter's leases are looked at.
const TICK: Duration = Duration::from_millis(10);

/// Round trips and decisions, for the fleet benchmark.
#[derive(Debug, Default)]
pub struct LeaseStats {
    /// Lease round trips to Redis.
    pub round_trips: AtomicU64,
    /// Round trips that failed (Redis unreachable).
    pub failed: AtomicU64,
}

/// The Redis key of a provider's bucket; the hash tag keeps one provider's
/// buckets in one Redis Cluster slot.
fn key(provider: &str, bucket: &str) -> String {
    format!("fusebox:{{{}}}:{bucket}", crate::target::Target::provider(provider))
}

/// Keeps one provider's leases topped up, for as long as the runtime runs.
pub(super) async fn keep_leased(fleet: Arc<Fleet>, provider: usize) {
    let limiter: &Limiter = &fleet.runner.catalog().providers()[provider].limiter;
    let name = fleet.runner.catalog().providers()[provider].name.clone();
    let shape = limiter.lease_mode();
    let present: Vec<usize> = (0..4).filter(|&i| shape[i].is_some()).collect();
    if present.is_empty() {
        return;
    }
    let keys: Vec<String> = present.iter().map(|&i| key(&name, BUCKETS[i])).collect();
    // The shared levels last seen (a new bucket starts full).
    let mut shared: [f64; 4] = shape.map(|s| s.map_or(0.0, |(cap, _)| cap));
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = Instant::now();
    loop {
        tick.tick().await;
        let now = Instant::now();
        let dt = now.saturating_duration_since(last).as_secs_f64();
        last = now;
        let (levels, short, frozen) = limiter.levels(now);
        if frozen {
            continue;
        }
        let instances = f64::from(fleet.runner.store().view().instances.max(1));
        let mut want = [0.0; 4];
        for &i in &present {
            let (Some((cap, _)), Some(level)) = (shape[i], levels[i]) else {
                continue;
            };
            let target = (shared[i] / (2.0 * instances)).min(cap * LEASE_SHARE);
            if level < target / 2.0 || short[i] > 0.0 {
                want[i] = (target - level).max(short[i]).max(0.0);
            }
        }
        if want.iter().all(|w| *w <= 0.0) {
            continue;
        }
        if fleet.runner.store().view().degraded {
            // Fail open at this instance's share of the rate.
            let grants = shape.map(|s| s.map_or(0.0, |(_, per_s)| per_s * dt / instances));
            limiter.add_lease(grants);
            continue;
        }
        let takes: Vec<Take> = keys
            .iter()
            .zip(&present)
            .map(|(k, &i)| {
                let (capacity, per_s) = shape[i].unwrap_or_default();
                Take {
                    key: k.clone(),
                    capacity,
                    per_s,
                    want: want[i],
                }
            })
            .collect();
        fleet.leases.round_trips.fetch_add(1, Ordering::Relaxed);
        match fleet.store.take(&takes, None).await {
            Ok(out) => {
                let mut grants = [0.0; 4];
                for (t, &i) in out.iter().zip(&present) {
                    grants[i] = t.grant;
                    shared[i] = t.level;
                }
                limiter.add_lease(grants);
            }
            Err(e) => {
                fleet.leases.failed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, provider = %name, "lease round trip failed");
                fleet.runner.store().set_degraded(true);
            }
        }
    }
}
