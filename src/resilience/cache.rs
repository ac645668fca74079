//! The result cache behind the "cached result" degradation: LRU with a TTL,
//! returning the entry's age so a stale answer can be labelled as such.

use lru::LruCache;
use parking_lot::Mutex;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// An LRU + TTL cache of results keyed by a 64-bit content hash.
pub struct ResultCache {
    inner: Mutex<LruCache<u64, (Instant, Arc<str>)>>,
}

impl ResultCache {
    /// A cache holding at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        let cap = NonZeroUsize::new(capacity.max(1)).unwrap_or(NonZeroUsize::MIN);
        Self {
            inner: Mutex::new(LruCache::new(cap)),
        }
    }

    /// Stores a fresh result.
    pub fn put(&self, key: u64, value: Arc<str>, now: Instant) {
        self.inner.lock().put(key, (now, value));
    }

    /// A result no older than `ttl`, with its age.
    pub fn get(&self, key: u64, ttl: Duration, now: Instant) -> Option<(Arc<str>, Duration)> {
        let mut g = self.inner.lock();
        let (at, v) = g.get(&key)?;
        let age = now.saturating_duration_since(*at);
        if age > ttl {
            g.pop(&key);
            return None;
        }
        Some((v.clone(), age))
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.inner.lock().len()
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
}
