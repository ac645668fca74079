//! Bounded per-key state: idle users and sessions are forgotten so memory
//! stays flat however many distinct keys pass through.

use dashmap::DashMap;

/// Per-key state (users, sessions) with a fast keyed hasher. Keys of up to
/// 24 bytes are stored inline, so a lookup compares them without chasing a
/// pointer (a cache miss per lookup in a large map).
pub type KeyMap<V> = DashMap<compact_str::CompactString, V, ahash::RandomState>;

/// An empty [`KeyMap`].
pub fn key_map<V>() -> KeyMap<V> {
    DashMap::with_hasher(ahash::RandomState::new())
}

/// What eviction needs to know about an entry.
pub trait Idle {
    /// Whether work is in flight (never evicted then).
    fn busy(&self) -> bool;
    /// When the entry was last used (ms).
    fn last_seen_ms(&self) -> u64;
}

/// Whether an entry has nothing in flight and was last used `idle_ms` or
/// more before `now_ms`.
fn is_idle<V: Idle>(v: &V, now_ms: u64, idle_ms: u64) -> bool {
    !v.busy() && now_ms.saturating_sub(v.last_seen_ms()) >= idle_ms
}

/// Whether an entry goes when room is made: it is idle, or it is not busy
/// and was last seen at or before the `lru` cutoff ([`lru_cutoff`]).
pub(crate) fn goes<V: Idle>(v: &V, now_ms: u64, idle_ms: u64, lru: Option<u64>) -> bool {
    is_idle(v, now_ms, idle_ms) || (!v.busy() && lru.is_some_and(|c| v.last_seen_ms() <= c))
}

/// The last-seen time at or before which entries not busy go, so that a
/// full map of `len` entries drops to a tenth below `max`; `seen` holds the
/// last-seen times of the entries not busy. None: only idle entries go.
/// Idle entries are the least recently seen, so evicting "all idle, then
/// the oldest of the rest" is this one cutoff.
pub(crate) fn lru_cutoff(mut seen: Vec<u64>, len: usize, max: usize) -> Option<u64> {
    let target = max - max / 10;
    let excess = len.saturating_sub(target).min(seen.len());
    (excess > 0).then(|| *seen.select_nth_unstable(excess - 1).1)
}

/// Removes entries idle for at least `idle_ms`; returns how many went.
pub fn evict_idle<V: Idle>(map: &KeyMap<V>, now_ms: u64, idle_ms: u64) -> usize {
    let before = map.len();
    map.retain(|_, v| !is_idle(v, now_ms, idle_ms));
    before.saturating_sub(map.len())
}

/// Before inserting into a full map (`len ≥ max`): evicts idle entries and
/// then the least recently used ones, until a tenth of the room is free.
/// Returns how many entries went. Two passes over the map: one to find the
/// cutoff ([`lru_cutoff`]), one to evict.
pub fn make_room<V: Idle>(map: &KeyMap<V>, max: usize, now_ms: u64, idle_ms: u64) -> usize {
    let before = map.len();
    if before < max {
        return 0;
    }
    let seen: Vec<u64> = map
        .iter()
        .filter(|e| !e.value().busy())
        .map(|e| e.value().last_seen_ms())
        .collect();
    let lru = lru_cutoff(seen, before, max);
    map.retain(|_, v| !goes(v, now_ms, idle_ms, lru));
    before.saturating_sub(map.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Entry {
        busy: bool,
        seen: u64,
    }

    impl Idle for Entry {
        fn busy(&self) -> bool {
            self.busy
        }
        fn last_seen_ms(&self) -> u64 {
            self.seen
        }
    }

    #[test]
    fn a_full_map_loses_its_least_recently_used_idle_entries() {
        let map = key_map();
        for i in 0..100u64 {
            // Every tenth entry is busy, and busy entries are the oldest.
            let busy = i % 10 == 0;
            map.insert(format!("k{i}").into(), Entry { busy, seen: i });
        }
        let gone = make_room(&map, 100, 100, 1_000);
        assert_eq!(gone, 10);
        assert_eq!(map.len(), 90);
        for i in 0..100u64 {
            let kept = map.contains_key(format!("k{i}").as_str());
            let oldest_idle = i % 10 != 0 && i <= 11;
            assert_eq!(kept, !oldest_idle, "k{i}");
        }
    }

    #[test]
    fn idle_entries_go_first_and_a_map_with_room_is_left_alone() {
        let map = key_map();
        for i in 0..10u64 {
            map.insert(
                format!("k{i}").into(),
                Entry {
                    busy: false,
                    seen: i * 100,
                },
            );
        }
        assert_eq!(make_room(&map, 11, 1_000, 500), 0);
        // Full: entries idle for 500 ms or more (seen at 0..=500) go, which is enough.
        assert_eq!(make_room(&map, 10, 1_000, 500), 6);
        assert_eq!(map.len(), 4);
    }
}
