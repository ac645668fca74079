//! Each tenant's slots on a provider whose calls queue by fair shares: a
//! tenant may hold at most its weighted share of the concurrency cap among
//! the tenants about (a call in flight, or one within the last minute), at
//! least one, and all of it when alone. So a tenant whose calls run long
//! (streams read slowly) cannot hold every slot while another waits.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::time::Duration;
use tokio::time::Instant;

/// How long a tenant counts as about after its last call.
const MEMORY: Duration = Duration::from_secs(60);

/// The most tenants followed; past it a new one is not held to a share.
const MAX_TENANTS: usize = 4_096;

/// One tenant's use of the slots.
#[derive(Clone, Copy, Debug)]
struct Use {
    in_flight: u32,
    weight: u32,
    last: Instant,
}

/// Keys that are hashes already, used as they are.
#[derive(Default)]
struct AsIs(u64);

impl std::hash::Hasher for AsIs {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The tenants about, by key, and the sum of their weights.
#[derive(Debug, Default)]
pub(super) struct Shares {
    tenants: HashMap<u64, Use, BuildHasherDefault<AsIs>>,
    weights: u64,
    swept: Option<Instant>,
}

impl Shares {
    /// Forgets the tenants no longer about (at most once a second).
    fn sweep(&mut self, now: Instant) {
        if self.swept.is_some_and(|t| now < t + Duration::from_secs(1)) {
            return;
        }
        self.swept = Some(now);
        self.tenants
            .retain(|_, u| u.in_flight > 0 || now.saturating_duration_since(u.last) < MEMORY);
        self.weights = self.tenants.values().map(|u| u64::from(u.weight)).sum();
    }

    /// Whether `tenant` (of `weight`) holds its share of `cap` slots.
    pub(super) fn full(&mut self, tenant: u64, weight: u32, cap: u32, now: Instant) -> bool {
        self.sweep(now);
        let (held, weights) = match self.tenants.get(&tenant) {
            Some(u) => (u.in_flight, self.weights),
            None => (0, self.weights + u64::from(weight)),
        };
        let share = (u64::from(cap) * u64::from(weight.max(1)) / weights.max(1)).max(1);
        u64::from(held) >= share
    }

    /// `tenant` took a slot.
    pub(super) fn take(&mut self, tenant: u64, weight: u32, now: Instant) {
        if !self.tenants.contains_key(&tenant) {
            if self.tenants.len() >= MAX_TENANTS {
                return;
            }
            self.weights += u64::from(weight);
        }
        let u = self.tenants.entry(tenant).or_insert(Use {
            in_flight: 0,
            weight,
            last: now,
        });
        u.in_flight += 1;
        u.last = now;
    }

    /// `tenant` gave a slot back.
    pub(super) fn give(&mut self, tenant: u64, now: Instant) {
        if let Some(u) = self.tenants.get_mut(&tenant) {
            u.in_flight = u.in_flight.saturating_sub(1);
            u.last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_tenant_holds_its_share_of_the_slots_among_those_about_and_all_when_alone() {
        let now = Instant::now();
        let mut s = Shares::default();
        // Alone, a tenant may take both of two slots.
        assert!(!s.full(1, 1, 2, now));
        s.take(1, 1, now);
        assert!(!s.full(1, 1, 2, now));
        s.take(1, 1, now);
        assert!(s.full(1, 1, 2, now));
        s.give(1, now);
        s.give(1, now);
        // With another about, one each.
        s.take(2, 1, now);
        s.give(2, now);
        s.take(1, 1, now);
        assert!(s.full(1, 1, 2, now), "tenant 2 called a moment ago");
        assert!(!s.full(2, 1, 2, now));
        // A weight of 3 against 1: three of four slots.
        let mut w = Shares::default();
        w.take(9, 1, now);
        for _ in 0..3 {
            assert!(!w.full(8, 3, 4, now));
            w.take(8, 3, now);
        }
        assert!(w.full(8, 3, 4, now));
        // A minute on, the other is no longer about.
        tokio::time::advance(Duration::from_secs(61)).await;
        let later = Instant::now();
        s.give(1, later - Duration::from_secs(61));
        assert!(!s.full(1, 1, 2, later), "tenant 2 went quiet");
    }
}
