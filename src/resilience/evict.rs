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

/// Removes entries idle for at least `idle_ms`; returns how many went.
pub fn evict_idle<V: Idle>(map: &KeyMap<V>, now_ms: u64, idle_ms: u64) -> usize {
    let before = map.len();
    map.retain(|_, v| v.busy() || now_ms.saturating_sub(v.last_seen_ms()) < idle_ms);
    before.saturating_sub(map.len())
}

/// Before inserting into a full map (`len ≥ max`): evicts idle entries, then
/// ever more recently used ones, until a tenth of the room is free.
/// Returns how many entries went.
pub fn make_room<V: Idle>(map: &KeyMap<V>, max: usize, now_ms: u64, idle_ms: u64) -> usize {
    if map.len() < max {
        return 0;
    }
    let target = max - max / 10;
    let mut idle = idle_ms;
    let mut gone = 0;
    loop {
        gone += evict_idle(map, now_ms, idle);
        if map.len() <= target || idle == 0 {
            return gone;
        }
        idle /= 2;
    }
}
