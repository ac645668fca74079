//! Bounded per-key state: idle users and sessions are forgotten so memory
//! stays flat however many distinct keys pass through.

use compact_str::CompactString;
use hashbrown::HashTable;

/// What eviction needs to know about an entry.
pub trait Idle {
    /// Whether work is in flight (never evicted then).
    fn busy(&self) -> bool;
    /// When the entry was last used (ms).
    fn last_seen_ms(&self) -> u64;
}

/// Per-key state (users, sessions) in slots, found by key through an index
/// of slot numbers. The index (4 bytes a key) stays small enough to stay in
/// cache however many keys there are, and a caller holds on to a slot's
/// number while its entry is busy (busy entries are never evicted), so the
/// entry's later updates need no lookup. Making room scans the slots in
/// order. Not synchronised: its owner puts it behind a lock.
pub struct Slots<V> {
    index: HashTable<u32>,
    slots: Vec<Slot<V>>,
    /// Slots no key holds.
    free: Vec<u32>,
    hasher: ahash::RandomState,
    /// Room reused by every eviction: last-seen times, then the bitset of
    /// slots that go. Allocated afresh, a map's worth each time came from
    /// new pages the kernel had to zero.
    scratch: Vec<u64>,
}

struct Slot<V> {
    /// Whether a key holds the slot.
    live: bool,
    key: CompactString,
    /// The key's hash, for the index to grow without hashing keys again.
    hash: u64,
    value: V,
}

impl<V> Default for Slots<V> {
    fn default() -> Self {
        Self {
            index: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            hasher: ahash::RandomState::new(),
            scratch: Vec::new(),
        }
    }
}

/// The most slots [`Slots::with_room`] sets aside.
const MAX_ROOM: usize = 1 << 17;

impl<V: Idle> Slots<V> {
    /// Slots with room set aside for `max` keys (up to [`MAX_ROOM`]): slots
    /// that grow by doubling copy themselves each time into memory the
    /// kernel must first zero, which was most of a replay's start. Room
    /// set aside costs nothing until a key uses it. The index still grows
    /// with the keys: it is small to copy, and a sparse one spreads
    /// lookups over more cache lines. One more slot than `max` is set
    /// aside, for a key added before room is made.
    pub fn with_room(max: usize) -> Self {
        Self {
            slots: Vec::with_capacity(max.saturating_add(1).min(MAX_ROOM)),
            ..Self::default()
        }
    }

    /// The slot of `key`, if tracked.
    pub fn find(&self, key: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(key);
        self.index.find(hash, |&i| self.slots[i as usize].key == key).copied()
    }

    /// The slot of `key`, added with the value `add` makes if the key is
    /// new (then true). An owned key is kept as it is, not copied.
    pub fn find_or_add<K>(&mut self, key: K, add: impl FnOnce() -> V) -> (u32, bool)
    where
        K: AsRef<str> + Into<CompactString>,
    {
        let Slots {
            index,
            slots,
            free,
            hasher,
            ..
        } = self;
        let hash = hasher.hash_one(key.as_ref());
        if let Some(&i) = index.find(hash, |&i| slots[i as usize].key == key.as_ref()) {
            return (i, false);
        }
        let slot = Slot {
            live: true,
            key: key.into(),
            hash,
            value: add(),
        };
        let i = match free.pop() {
            Some(i) => {
                slots[i as usize] = slot;
                i
            }
            None => {
                slots.push(slot);
                (slots.len() - 1) as u32
            }
        };
        index.insert_unique(hash, i, |&j| slots[j as usize].hash);
        (i, true)
    }

    /// The entry in slot `i`, from [`Slots::find`] or [`Slots::find_or_add`]
    /// while the entry was kept (busy).
    pub fn get_mut(&mut self, i: u32) -> &mut V {
        &mut self.slots[i as usize].value
    }

    /// The key of slot `i` (kept, as for [`Slots::get_mut`]).
    pub fn key(&self, i: u32) -> &str {
        &self.slots[i as usize].key
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every tracked key and its entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.slots.iter().filter(|s| s.live).map(|s| (s.key.as_str(), &s.value))
    }

    /// Frees the slots of the entries that `goes`; returns how many went.
    /// Their index entries go in one pass over the index, in order, rather
    /// than one lookup (two cache misses) each.
    fn evict(&mut self, goes: impl Fn(&V) -> bool) -> usize {
        let mut gone = std::mem::take(&mut self.scratch);
        gone.clear();
        gone.resize(self.slots.len().div_ceil(64), 0);
        let mut n = 0;
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.live && goes(&s.value) {
                s.live = false;
                s.key = CompactString::default();
                self.free.push(i as u32);
                gone[i / 64] |= 1 << (i % 64);
                n += 1;
            }
        }
        if n > 0 {
            self.index.retain(|&mut i| gone[i as usize / 64] & (1 << (i % 64)) == 0);
        }
        self.scratch = gone;
        n
    }

    /// Removes entries idle for at least `idle_ms`; returns how many went.
    pub fn evict_idle(&mut self, now_ms: u64, idle_ms: u64) -> usize {
        self.evict(|v| is_idle(v, now_ms, idle_ms))
    }

    /// When full (`len ≥ max`): evicts idle entries and then the least
    /// recently used ones, until a tenth of the room is free. Returns how
    /// many entries went. Idle entries are the least recently seen, so
    /// evicting "all idle, then the oldest of the rest" is one cutoff on
    /// the last-seen time: one pass finds it, one evicts.
    pub fn make_room(&mut self, max: usize, now_ms: u64, idle_ms: u64) -> usize {
        let len = self.len();
        if len < max {
            return 0;
        }
        let mut seen = std::mem::take(&mut self.scratch);
        seen.clear();
        seen.extend(self.iter().filter(|(_, v)| !v.busy()).map(|(_, v)| v.last_seen_ms()));
        let excess = (len - (max - max / 10)).min(seen.len());
        let lru = (excess > 0).then(|| *seen.select_nth_unstable(excess - 1).1);
        self.scratch = seen;
        self.evict(|v| is_idle(v, now_ms, idle_ms) || (!v.busy() && lru.is_some_and(|c| v.last_seen_ms() <= c)))
    }
}

/// Whether an entry has nothing in flight and was last used `idle_ms` or
/// more before `now_ms`.
fn is_idle<V: Idle>(v: &V, now_ms: u64, idle_ms: u64) -> bool {
    !v.busy() && now_ms.saturating_sub(v.last_seen_ms()) >= idle_ms
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
        let mut map = Slots::default();
        for i in 0..100u64 {
            // Every tenth entry is busy, and busy entries are the oldest.
            let busy = i % 10 == 0;
            map.find_or_add(&format!("k{i}"), || Entry { busy, seen: i });
        }
        let gone = map.make_room(100, 100, 1_000);
        assert_eq!(gone, 10);
        assert_eq!(map.len(), 90);
        for i in 0..100u64 {
            let kept = map.find(&format!("k{i}")).is_some();
            let oldest_idle = i % 10 != 0 && i <= 11;
            assert_eq!(kept, !oldest_idle, "k{i}");
        }
    }

    #[test]
    fn idle_entries_go_first_and_a_map_with_room_is_left_alone() {
        let mut map = Slots::default();
        for i in 0..10u64 {
            map.find_or_add(&format!("k{i}"), || Entry {
                busy: false,
                seen: i * 100,
            });
        }
        assert_eq!(map.make_room(11, 1_000, 500), 0);
        // Full: entries idle for 500 ms or more (seen at 0..=500) go, which is enough.
        assert_eq!(map.make_room(10, 1_000, 500), 6);
        assert_eq!(map.len(), 4);
        // Freed slots are reused, and the kept entries are still found.
        let (_, added) = map.find_or_add("new", || Entry {
            busy: false,
            seen: 1_000,
        });
        assert!(added);
        assert_eq!(map.slots.len(), 10);
        assert!((6..10).all(|i| map.find(&format!("k{i}")).is_some()));
    }
}
