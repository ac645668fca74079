//! Where the shared state lives and how it is doing, for the console header
//! and `/metrics`: in-process (one instance), or Redis with its health and
//! the number of live instances (heartbeats).

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// The store's status, updated by the fleet tasks, read by views.
#[derive(Debug, Default)]
pub struct StoreStatus {
    redis: AtomicBool,
    degraded: AtomicBool,
    instances: AtomicU32,
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

    /// The status now.
    pub fn view(&self) -> StoreView {
        StoreView {
            redis: self.redis.load(Ordering::Relaxed),
            degraded: self.degraded.load(Ordering::Relaxed),
            instances: self.instances.load(Ordering::Relaxed).max(1),
        }
    }
}

impl StoreView {
    /// How the header names it, e.g. `redis · 2 instances`.
    pub fn label(&self) -> String {
        match (self.redis, self.degraded) {
            (false, _) => "in-process".into(),
            (true, false) => format!(
                "redis · {} instance{}",
                self.instances,
                if self.instances == 1 { "" } else { "s" }
            ),
            (true, true) => "redis DEGRADED (local limits)".into(),
        }
    }
}
