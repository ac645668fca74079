//! Per-tool bulkheads: a pool of concurrent calls with a bounded queue, so a
//! slow tool cannot take every worker and starve the others.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a call got no slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BulkheadFull {
    /// The queue was already full.
    QueueFull,
    /// Waited `timeout` in the queue.
    TimedOut,
}

/// One tool's pool.
pub struct Bulkhead {
    slots: Arc<Semaphore>,
    size: u32,
    queue: u32,
    waiting: AtomicU32,
    rejected: AtomicU64,
}

/// A pool's live figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolView {
    /// Slots taken.
    pub in_use: u32,
    /// Slots.
    pub size: u32,
    /// Calls waiting for a slot.
    pub waiting: u32,
    /// Room to wait.
    pub queue: u32,
    /// Calls refused since start (queue full, or waited too long).
    pub refused: u64,
}

impl Bulkhead {
    /// A pool of `size` slots with room for `queue` waiters.
    pub fn new(size: u32, queue: u32) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(size as usize)),
            size,
            queue,
            waiting: AtomicU32::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    /// Takes a slot, waiting in the queue at most `timeout`.
    pub async fn enter(&self, timeout: Duration) -> Result<OwnedSemaphorePermit, BulkheadFull> {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            return Ok(p);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= self.queue {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return Err(BulkheadFull::QueueFull);
        }
        let r = tokio::time::timeout(timeout, self.slots.clone().acquire_owned()).await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        match r {
            Ok(Ok(p)) => Ok(p),
            _ => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                Err(BulkheadFull::TimedOut)
            }
        }
    }

    /// Live figures.
    pub fn view(&self) -> PoolView {
        let free = self.slots.available_permits() as u32;
        PoolView {
            in_use: self.size.saturating_sub(free),
            size: self.size,
            waiting: self.waiting.load(Ordering::Relaxed),
            queue: self.queue,
            refused: self.rejected.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn full_queue_rejects_at_once_and_waiters_time_out() {
        let b = Arc::new(Bulkhead::new(1, 1));
        let held = b.enter(Duration::from_secs(1)).await.unwrap();
        let b2 = b.clone();
        let waiter = tokio::spawn(async move { b2.enter(Duration::from_secs(1)).await.map(|_| ()) });
        tokio::task::yield_now().await;
        assert_eq!(
            b.enter(Duration::from_secs(1)).await.err(),
            Some(BulkheadFull::QueueFull)
        );
        assert_eq!(waiter.await.unwrap(), Err(BulkheadFull::TimedOut));
        drop(held);
        assert!(b.enter(Duration::from_secs(1)).await.is_ok());
        assert_eq!(b.view().refused, 2);
    }
}
