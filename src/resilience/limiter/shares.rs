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

    /// Whether `tenant` (of `weight`) holds its share of `cap` slots; when
    /// it does not and `take` (the call fits the limits), it takes one.
    pub(super) fn full_or_take(&mut self, tenant: u64, weight: u32, cap: u32, take: bool, now: Instant) -> bool {
        self.sweep(now);
        let known = self.tenants.len();
        let weights = self.weights;
        let entry = self.tenants.entry(tenant);
        let fresh = matches!(entry, std::collections::hash_map::Entry::Vacant(_));
        let weights = if fresh { weights + u64::from(weight) } else { weights };
        let held = match &entry {
            std::collections::hash_map::Entry::Occupied(o) => o.get().in_flight,
            std::collections::hash_map::Entry::Vacant(_) => 0,
        };
        let share = (u64::from(cap) * u64::from(weight.max(1)) / weights.max(1)).max(1);
        if u64::from(held) >= share {
            return true;
        }
        // Past the most tenants followed, a new one is not held to a share.
        if take && (!fresh || known < MAX_TENANTS) {
            let u = entry.or_insert(Use {
                in_flight: 0,
                weight,
                last: now,
            });
            u.in_flight += 1;
            u.last = now;
            self.weights = weights;
        }
        false
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
        let take = |s: &mut Shares, t: u64, w: u32, cap: u32, at: Instant| !s.full_or_take(t, w, cap, true, at);
        // Alone, a tenant may take both of two slots.
        assert!(take(&mut s, 1, 1, 2, now));
        assert!(take(&mut s, 1, 1, 2, now));
        assert!(!take(&mut s, 1, 1, 2, now));
        s.give(1, now);
        s.give(1, now);
        // With another about, one each.
        assert!(take(&mut s, 2, 1, 2, now));
        s.give(2, now);
        assert!(take(&mut s, 1, 1, 2, now));
        assert!(s.full_or_take(1, 1, 2, false, now), "tenant 2 called a moment ago");
        assert!(!s.full_or_take(2, 1, 2, false, now));
        // A weight of 3 against 1: three of four slots.
        let mut w = Shares::default();
        assert!(take(&mut w, 9, 1, 4, now));
        for _ in 0..3 {
            assert!(take(&mut w, 8, 3, 4, now));
        }
        assert!(!take(&mut w, 8, 3, 4, now));
        // A minute on, the other is no longer about.
        tokio::time::advance(Duration::from_secs(61)).await;
        let later = Instant::now();
        s.give(1, later - Duration::from_secs(61));
        assert!(!s.full_or_take(1, 1, 2, false, later), "tenant 2 went quiet");
    }
}
