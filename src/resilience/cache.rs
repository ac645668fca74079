//! The result cache behind the "cached result" degradation: LRU with a TTL,
//! returning the entry's age so a stale answer can be labelled as such.
//!
//! Entries live in slots linked in order of use (most recent first) and are
//! found through an index of slot numbers: a full cache takes a new entry
//! into the slot of the least recently used one, with no allocation, and
//! the whole cache is a few contiguous arrays (a replay puts an answer per
//! request).

use crate::clock::mix;
use hashbrown::HashTable;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// No slot (the ends of the list).
const NIL: u32 = u32::MAX;

/// An LRU + TTL cache of results keyed by a 64-bit content hash.
pub struct ResultCache {
    inner: Mutex<Lru>,
}

struct Entry {
    key: u64,
    at: Instant,
    /// None in a free slot.
    value: Option<Arc<str>>,
    /// Neighbours in order of use: `prev` was used more recently.
    prev: u32,
    next: u32,
}

struct Lru {
    index: HashTable<u32>,
    slots: Vec<Entry>,
    /// Slots of expired entries, to be reused.
    free: Vec<u32>,
    /// The most and the least recently used entries.
    head: u32,
    tail: u32,
    capacity: usize,
}

impl Lru {
    fn find(&self, key: u64) -> Option<u32> {
        self.index
            .find(mix(key), |&i| self.slots[i as usize].key == key)
            .copied()
    }

    /// Takes slot `i` out of the order of use.
    fn unlink(&mut self, i: u32) {
        let (prev, next) = {
            let e = &self.slots[i as usize];
            (e.prev, e.next)
        };
        match prev {
            NIL => self.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
    }

    /// Makes slot `i` the most recently used.
    fn push_front(&mut self, i: u32) {
        let old = self.head;
        {
            let e = &mut self.slots[i as usize];
            e.prev = NIL;
            e.next = old;
        }
        match old {
            NIL => self.tail = i,
            h => self.slots[h as usize].prev = i,
        }
        self.head = i;
    }

    /// Removes slot `i` (holding a key) from the index.
    fn unindex(&mut self, i: u32) {
        if let Ok(e) = self.index.find_entry(mix(self.slots[i as usize].key), |&j| j == i) {
            e.remove();
        }
    }

    fn put(&mut self, key: u64, at: Instant, value: Arc<str>) {
        if let Some(i) = self.find(key) {
            let e = &mut self.slots[i as usize];
            (e.at, e.value) = (at, Some(value));
            self.unlink(i);
            self.push_front(i);
            return;
        }
        let entry = Entry {
            key,
            at,
            value: Some(value),
            prev: NIL,
            next: NIL,
        };
        let i = if self.index.len() >= self.capacity {
            // Full: the least recently used entry makes way.
            let i = self.tail;
            self.unlink(i);
            self.unindex(i);
            self.slots[i as usize] = entry;
            i
        } else if let Some(i) = self.free.pop() {
            self.slots[i as usize] = entry;
            i
        } else {
            self.slots.push(entry);
            (self.slots.len() - 1) as u32
        };
        let slots = &self.slots;
        self.index.insert_unique(mix(key), i, |&j| mix(slots[j as usize].key));
        self.push_front(i);
    }

    fn get(&mut self, key: u64, ttl: Duration, now: Instant) -> Option<(Arc<str>, Duration)> {
        let i = self.find(key)?;
        let age = now.saturating_duration_since(self.slots[i as usize].at);
        self.unlink(i);
        if age > ttl {
            self.unindex(i);
            self.slots[i as usize].value = None;
            self.free.push(i);
            return None;
        }
        self.push_front(i);
        Some((self.slots[i as usize].value.clone()?, age))
    }
}

impl ResultCache {
    /// A cache holding at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        // Slot numbers are u32, and NIL is not one.
        let capacity = capacity.clamp(1, NIL as usize - 1);
        // Room set aside up front (it costs nothing until used) spares the
        // copies of a growing table.
        let room = capacity.min(1 << 16);
        Self {
            inner: Mutex::new(Lru {
                index: HashTable::with_capacity(room),
                slots: Vec::with_capacity(room),
                free: Vec::new(),
                head: NIL,
                tail: NIL,
                capacity,
            }),
        }
    }

    /// Stores a fresh result.
    pub fn put(&self, key: u64, value: Arc<str>, now: Instant) {
        self.inner.lock().put(key, now, value);
    }

    /// A result no older than `ttl`, with its age.
    pub fn get(&self, key: u64, ttl: Duration, now: Instant) -> Option<(Arc<str>, Duration)> {
        self.inner.lock().get(key, ttl, now)
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.inner.lock().index.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ttl_and_lru() {
        let c = ResultCache::new(2);
        let t0 = Instant::now();
        c.put(1, "a".into(), t0);
        c.put(2, "b".into(), t0);
        c.put(3, "c".into(), t0);
        assert!(
            c.get(1, Duration::from_secs(60), t0).is_none(),
            "evicted as least recent"
        );
        tokio::time::advance(Duration::from_secs(30)).await;
        let (v, age) = c.get(2, Duration::from_secs(60), Instant::now()).unwrap();
        assert_eq!((&*v, age), ("b", Duration::from_secs(30)));
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(c.get(2, Duration::from_secs(60), Instant::now()).is_none(), "expired");
    }

    proptest::proptest! {
        /// Without expiry, it keeps what the `lru` crate's cache keeps.
        #[test]
        fn keeps_what_an_lru_keeps(capacity in 1usize..5, ops in proptest::collection::vec((0u64..8, proptest::bool::ANY), 0..60)) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
            let _in_runtime = rt.enter();
            let (c, now, ttl) = (ResultCache::new(capacity), Instant::now(), Duration::from_secs(60));
            let mut model = lru::LruCache::new(std::num::NonZeroUsize::new(capacity).unwrap());
            for (n, (key, put)) in ops.into_iter().enumerate() {
                if put {
                    c.put(key, n.to_string().into(), now);
                    model.put(key, n.to_string());
                } else {
                    let got = c.get(key, ttl, now).map(|(v, _)| v.to_string());
                    proptest::prop_assert_eq!(got, model.get(&key).cloned());
                }
                proptest::prop_assert_eq!(c.len(), model.len());
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn use_keeps_an_entry_and_expired_slots_are_reused() {
        let c = ResultCache::new(3);
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        for k in 1..=3 {
            c.put(k, k.to_string().into(), t0);
        }
        // 1 is used and 2 rewritten, so 3 is the least recently used.
        assert!(c.get(1, ttl, t0).is_some());
        c.put(2, "two".into(), t0);
        c.put(4, "4".into(), t0);
        let held = |c: &ResultCache| -> Vec<u64> { (1..=5).filter(|&k| c.get(k, ttl, t0).is_some()).collect() };
        assert_eq!(held(&c), [1, 2, 4]);
        assert_eq!(&*c.get(2, ttl, t0).unwrap().0, "two");
        // An expired entry goes when asked for, and its slot takes the next.
        let later = t0 + Duration::from_secs(61);
        assert!(c.get(1, ttl, later).is_none());
        assert_eq!(c.len(), 2);
        c.put(5, "5".into(), later);
        assert_eq!(c.inner.lock().slots.len(), 3, "no slot was added");
        assert_eq!(held(&c), [2, 4, 5]);
        // Full again: the least recently used (2: `held` asked in key order) goes.
        c.put(6, "6".into(), later);
        assert_eq!(held(&c), [4, 5]);
        assert_eq!(c.get(6, ttl, t0).map(|(v, _)| v), Some("6".into()));
    }
}
