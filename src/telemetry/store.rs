//! Where the shared state lives and how it is doing, for the console header
//! and `/metrics`: in-process (one instance), or Redis with its health, the
//! number of live instances (heartbeats) and what the fleet's retry budget
//! granted and refused here.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The store's status, updated by the fleet tasks, read by views.
#[derive(Debug, Default)]
pub struct StoreStatus {
    redis: AtomicBool,
    degraded: AtomicBool,
    instances: AtomicU32,
    retries_granted: AtomicU64,
    retries_refused: AtomicU64,
}

/// A copy of the store's status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreView {
    /// Shared state is on Redis (else in-process).
    pub redis: bool,
    /// Redis cannot be reached: limits are local, actions not shared.
    pub degraded: bool,
    /// Live instances (this one included), by heartbeat.
    pub instances: u32,
    /// Retries (and hedges) here the fleet's retry budget granted.
    #[serde(default)]
    pub retries_granted: u64,
    /// Retries here it refused.
    #[serde(default)]
    pub retries_refused: u64,
}

impl StoreStatus {
    /// Marks the store as Redis.
    pub fn set_redis(&self) {
        self.redis.store(true, Ordering::Relaxed);
    }

    /// Records whether the last Redis round trip failed.
    pub fn set_degraded(&self, degraded: bool) {
        self.degraded.store(degraded, Ordering::Relaxed);
    }

    /// Records the live instances seen by heartbeat.
    pub fn set_instances(&self, n: u32) {
        self.instances.store(n, Ordering::Relaxed);
    }

    /// Counts one answer of the fleet's retry budget.
    pub fn note_retry(&self, granted: bool) {
        let n = if granted {
            &self.retries_granted
        } else {
            &self.retries_refused
        };
        n.fetch_add(1, Ordering::Relaxed);
    }

    /// The status now.
    pub fn view(&self) -> StoreView {
        StoreView {
            redis: self.redis.load(Ordering::Relaxed),
            degraded: self.degraded.load(Ordering::Relaxed),
            instances: self.instances.load(Ordering::Relaxed).max(1),
            retries_granted: self.retries_granted.load(Ordering::Relaxed),
            retries_refused: self.retries_refused.load(Ordering::Relaxed),
        }
    }
}

impl StoreView {
    /// How the header names it, e.g. `redis · 2 instances`, and
    /// `· retry budget 12 refused` once the fleet's has refused a retry.
    pub fn label(&self) -> String {
        let mut label = match (self.redis, self.degraded) {
            (false, _) => "in-process".into(),
            (true, false) => format!(
                "redis · {} instance{}",
                self.instances,
                if self.instances == 1 { "" } else { "s" }
            ),
            (true, true) => "redis DEGRADED (local limits)".into(),
        };
        if self.retries_refused > 0 {
            label += &format!(" · retry budget {} refused", self.retries_refused);
        }
        label
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_names_the_store_and_what_the_fleet_refused() {
        let s = StoreStatus::default();
        assert_eq!(s.view().label(), "in-process");
        s.set_redis();
        s.set_instances(4);
        s.note_retry(true);
        assert_eq!(s.view().label(), "redis · 4 instances");
        s.note_retry(false);
        let v = s.view();
        assert_eq!(v.label(), "redis · 4 instances · retry budget 1 refused");
        assert_eq!((v.retries_granted, v.retries_refused), (1, 1));
    }
}
