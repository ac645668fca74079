//! The fleet's retry budget: retries (and hedges) of every instance draw
//! from one budget in the store, `floor + ratio × requests` of the fleet
//! over the last [`RETRY_WINDOW_S`] seconds, so a fleet of N cannot retry
//! N times what one instance may. Each instance counts its requests into
//! it once a second ([`SharedRetries::share`]) and with each retry it
//! asks for; a budget that refused is not asked again within the same
//! second. While the store is unreachable each instance's own budget
//! decides (at its own floor, counting what the fleet granted it before),
//! and the retries it allowed are counted into the store's window once it
//! answers again, so the window after an outage holds them.

use super::store::{RetryAsk, RetryShare, Store, RETRY_WINDOW_S};
use crate::runner::Runner;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The store key of the fleet's retry budget.
const KEY: &str = "fusebox:retry-budget";

/// This instance's part in the fleet's retry budget.
pub struct SharedRetries {
    store: Arc<dyn Store>,
    runner: Arc<Runner>,
    budget: RetryShare,
    /// Of the runner's requests, those counted into the budget so far.
    counted: AtomicU64,
    /// The second (runner clock) the budget last refused in, plus one.
    refused: AtomicU64,
    /// Retries made on the instance's own budget while the store was
    /// away, not yet counted into it.
    alone: AtomicU64,
}

impl SharedRetries {
    /// `runner`'s part in the budget in `store`, as its `[retry]` config says.
    pub fn new(store: Arc<dyn Store>, runner: Arc<Runner>) -> Self {
        let cfg = &runner.config().retry;
        let budget = RetryShare {
            ratio: cfg.budget_ratio,
            floor: f64::from(cfg.budget_min_per_s) * RETRY_WINDOW_S as f64,
        };
        Self {
            counted: AtomicU64::new(runner.totals().requests.load(Ordering::Relaxed)),
            store,
            runner,
            budget,
            refused: AtomicU64::new(0),
            alone: AtomicU64::new(0),
        }
    }

    /// Requests received since they were last counted into the budget.
    fn uncounted(&self) -> u64 {
        let total = self.runner.totals().requests.load(Ordering::Relaxed);
        total.saturating_sub(self.counted.swap(total, Ordering::Relaxed))
    }

    /// Takes one retry from the fleet's budget; None when the store cannot
    /// be reached (the instance's own budget decides).
    pub async fn take(&self) -> Option<bool> {
        let second = self.runner.clock().elapsed_ms() / 1_000 + 1;
        let status = self.runner.store();
        if self.refused.load(Ordering::Relaxed) == second {
            status.note_retry(false);
            return Some(false);
        }
        let (requests, alone) = (self.uncounted(), self.alone.swap(0, Ordering::Relaxed));
        let ask = RetryAsk {
            requests,
            taken: alone,
            want: 1,
        };
        match self.store.retry(KEY, ask, self.budget, None).await {
            Ok(granted) => {
                let ok = granted > 0;
                if !ok {
                    self.refused.store(second, Ordering::Relaxed);
                }
                status.note_retry(ok);
                Some(ok)
            }
            Err(e) => {
                self.unsent(requests, alone);
                tracing::debug!(error = %e, "retry budget round trip failed");
                None
            }
        }
    }

    /// Notes a retry the instance's own budget allowed while the store
    /// could not say.
    pub fn retried_alone(&self) {
        self.alone.fetch_add(1, Ordering::Relaxed);
    }

    /// Keeps what a failed round trip was to count for the next.
    fn unsent(&self, requests: u64, alone: u64) {
        self.counted.fetch_sub(requests, Ordering::Relaxed);
        self.alone.fetch_add(alone, Ordering::Relaxed);
    }

    /// Counts this instance's requests into the budget once a second, for
    /// as long as the runtime runs.
    pub async fn share(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let (requests, alone) = (self.uncounted(), self.alone.swap(0, Ordering::Relaxed));
            if requests == 0 && alone == 0 {
                continue;
            }
            let ask = RetryAsk {
                requests,
                taken: alone,
                want: 0,
            };
            if let Err(e) = self.store.retry(KEY, ask, self.budget, None).await {
                self.unsent(requests, alone);
                tracing::debug!(error = %e, "retry budget round trip failed");
            }
        }
    }
}
