//! Retries: exponential backoff with full jitter that honours Retry-After,
//! and a retry budget (retries ≤ a share of requests, Envoy/tower style) so
//! an outage does not turn into a retry storm.

use crate::clock::{purpose, Seed};
use crate::config::RetryConfig;
use parking_lot::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// Backoff for retry number `attempt` (0 = first retry) of call `key`.
pub fn backoff(cfg: &RetryConfig, seed: Seed, key: u64, attempt: u32, retry_after: Option<Duration>) -> Duration {
    let cap = Duration::from_millis(cfg.cap_ms);
    if let Some(ra) = retry_after {
        return ra.min(cap);
    }
    let ceiling = cfg.base_ms.saturating_mul(1u64 << attempt.min(30)).min(cfg.cap_ms);
    let mut rng = seed.stream(purpose::JITTER, key.wrapping_mul(64).wrapping_add(attempt as u64));
    Duration::from_millis(rng.u64(0..=ceiling))
}

const SLOTS: usize = 10;

/// Retries allowed as a share of recent requests (10-second window).
pub struct RetryBudget {
    ratio: f64,
    min_per_s: u32,
    origin: Instant,
    slots: Mutex<[(u64, u32, u32); SLOTS]>,
}

impl RetryBudget {
    /// A budget allowing `ratio` retries per request plus `min_per_s` per second.
    pub fn new(cfg: &RetryConfig, origin: Instant) -> Self {
        Self {
            ratio: cfg.budget_ratio,
            min_per_s: cfg.budget_min_per_s,
            origin,
            slots: Mutex::new([(u64::MAX, 0, 0); SLOTS]),
        }
    }

    fn sec(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_secs()
    }

    /// Counts one request.
    pub fn deposit(&self, now: Instant) {
        let s = self.sec(now);
        let mut g = self.slots.lock();
        let slot = &mut g[(s % SLOTS as u64) as usize];
        if slot.0 != s {
            *slot = (s, 0, 0);
        }
        slot.1 += 1;
    }

    /// Takes one retry from the budget, if there is room.
    pub fn try_withdraw(&self, now: Instant) -> bool {
        let s = self.sec(now);
        let mut g = self.slots.lock();
        let (mut reqs, mut retries) = (0u64, 0u64);
        for slot in g.iter() {
            if slot.0 != u64::MAX && s.saturating_sub(slot.0) < SLOTS as u64 {
                reqs += slot.1 as u64;
                retries += slot.2 as u64;
            }
        }
        let allowed = (self.min_per_s as u64 * SLOTS as u64) as f64 + self.ratio * reqs as f64;
        if (retries as f64) < allowed {
            let slot = &mut g[(s % SLOTS as u64) as usize];
            if slot.0 != s {
                *slot = (s, 0, 0);
            }
            slot.2 += 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_jittered_and_honours_retry_after() {
        let cfg = RetryConfig::default();
        for attempt in 0..6 {
            let d = backoff(&cfg, Seed(1), 9, attempt, None);
            assert!(d <= Duration::from_millis((cfg.base_ms << attempt).min(cfg.cap_ms)));
        }
        assert_eq!(backoff(&cfg, Seed(1), 9, 0, None), backoff(&cfg, Seed(1), 9, 0, None));
        assert_eq!(
            backoff(&cfg, Seed(1), 9, 3, Some(Duration::from_secs(7))),
            Duration::from_secs(7)
        );
        assert_eq!(
            backoff(&cfg, Seed(1), 9, 3, Some(Duration::from_secs(999))),
            Duration::from_millis(cfg.cap_ms)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn budget_caps_retries_at_the_ratio() {
        let cfg = RetryConfig {
            budget_ratio: 0.2,
            budget_min_per_s: 0,
            ..RetryConfig::default()
        };
        let now = Instant::now();
        let b = RetryBudget::new(&cfg, now);
        for _ in 0..100 {
            b.deposit(now);
        }
        let granted = (0..100).filter(|_| b.try_withdraw(now)).count();
        assert_eq!(granted, 20);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(!b.try_withdraw(Instant::now()), "old requests left the window");
    }
}
