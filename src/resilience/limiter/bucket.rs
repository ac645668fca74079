//! One token bucket of a limiter: its level, capacity and refill rate.

use super::LEASE_POLL;
use std::time::Duration;
use tokio::time::Instant;

/// A bucket: tokens (or requests) per minute, refilled continuously, or
/// only by leases from the fleet (`per_s` 0).
#[derive(Clone, Copy, Debug)]
pub(super) struct Bucket {
    pub capacity: f64,
    pub level: f64,
    pub per_s: f64,
    pub reset_at: Option<Instant>,
}

impl Bucket {
    pub fn per_minute(limit: u64) -> Option<Self> {
        (limit > 0).then(|| Bucket {
            capacity: limit as f64,
            level: limit as f64,
            per_s: limit as f64 / 60.0,
            reset_at: None,
        })
    }

    pub fn refill(&mut self, dt: f64, now: Instant) {
        self.level = (self.level + dt * self.per_s).min(self.capacity);
        // A provider-announced reset fills the bucket, unless it is leased
        // (fleet mode: it fills only with capacity taken from the fleet).
        if self.per_s > 0.0 && self.reset_at.is_some_and(|r| now >= r) {
            self.level = self.capacity;
            self.reset_at = None;
        }
    }

    /// A request bigger than the whole bucket may go once the bucket is full.
    pub fn need(&self, n: f64) -> f64 {
        n.min(self.capacity)
    }

    pub fn wait_for(&self, n: f64) -> Duration {
        let short = self.need(n) - self.level;
        if short <= 0.0 {
            Duration::ZERO
        } else if self.per_s <= 0.0 {
            // Leased (fleet mode): capacity arrives with the next top-up.
            LEASE_POLL
        } else {
            Duration::from_secs_f64(short / self.per_s)
        }
    }

    pub fn view(&self) -> (f64, f64) {
        (self.level, self.capacity)
    }
}
