//! Retries: exponential backoff with full jitter that honours Retry-After,
//! and a retry budget (retries ≤ a share of requests, Envoy/tower style) so
//! an outage does not turn into a retry storm; hedged calls have a budget
//! of their own, counted beside it. A tenant alone in wanting hedges may
//! use all of it; once another asks, no one tenant takes more than half.

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

/// One second of the window: which second, requests, retries, hedges.
type Slot = (u64, u32, u32, u32);

/// The most asks for a hedge remembered by tenant (a bound on what many
/// hedges can make the budget hold; past it the oldest are forgotten).
const HEDGERS: usize = 4_096;

/// An ask for a hedge in the window: its second, its tenant (a key) and
/// whether it was granted.
type Ask = (u64, u64, bool);

/// Retries (and hedges) allowed as a share of recent requests (10-second
/// window).
pub struct RetryBudget {
    ratio: f64,
    min_per_s: u32,
    hedge_ratio: f64,
    origin: Instant,
    slots: Mutex<[Slot; SLOTS]>,
    /// The window's asks for a hedge.
    hedgers: Mutex<std::collections::VecDeque<Ask>>,
}

impl RetryBudget {
    /// A budget allowing `ratio` retries per request plus `min_per_s` per second.
    pub fn new(cfg: &RetryConfig, origin: Instant) -> Self {
        Self {
            ratio: cfg.budget_ratio,
            min_per_s: cfg.budget_min_per_s,
            hedge_ratio: cfg.hedge_ratio,
            origin,
            slots: Mutex::new([(u64::MAX, 0, 0, 0); SLOTS]),
            hedgers: Mutex::default(),
        }
    }

    fn sec(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_secs()
    }

    /// Counts one request.
    pub fn deposit(&self, now: Instant) {
        let s = self.sec(now);
        let mut g = self.slots.lock();
        current(&mut g, s).1 += 1;
    }

    /// Takes one retry from the budget, if there is room.
    pub fn try_withdraw(&self, now: Instant) -> bool {
        let s = self.sec(now);
        let mut g = self.slots.lock();
        let (reqs, retries, _) = window(&g, s);
        let allowed = (self.min_per_s as u64 * SLOTS as u64) as f64 + self.ratio * reqs as f64;
        let room = (retries as f64) < allowed;
        if room {
            current(&mut g, s).2 += 1;
        }
        room
    }

    /// Counts a retry another budget (the fleet's) allowed.
    pub fn count_retry(&self, now: Instant) {
        let s = self.sec(now);
        current(&mut self.slots.lock(), s).2 += 1;
    }

    /// Takes one hedged call of `tenant`'s (a key) from its budget, if
    /// there is room and, where another tenant asked for one in the
    /// window, the tenant has taken less than half of it (at least one).
    /// Alone, a tenant may use it all: a cap no one contends for would
    /// only leave slow calls unhedged.
    pub fn try_hedge(&self, now: Instant, tenant: u64) -> bool {
        let s = self.sec(now);
        let mut g = self.slots.lock();
        let (reqs, _, hedges) = window(&g, s);
        let allowed = self.hedge_ratio * reqs as f64;
        let mut hedgers = self.hedgers.lock();
        while hedgers.front().is_some_and(|h| s.saturating_sub(h.0) >= SLOTS as u64) || hedgers.len() >= HEDGERS {
            hedgers.pop_front();
        }
        let theirs = hedgers.iter().filter(|h| h.1 == tenant && h.2).count();
        let contended = hedgers.iter().any(|h| h.1 != tenant);
        let cap = if contended { (allowed / 2.0).max(1.0) } else { allowed };
        let granted = (hedges as f64) < allowed && (theirs as f64) < cap;
        hedgers.push_back((s, tenant, granted));
        if granted {
            current(&mut g, s).3 += 1;
        }
        granted
    }
}

/// Requests, retries and hedges of the window ending at second `s`.
fn window(slots: &[Slot; SLOTS], s: u64) -> (u64, u64, u64) {
    let live = slots
        .iter()
        .filter(|slot| slot.0 != u64::MAX && s.saturating_sub(slot.0) < SLOTS as u64);
    live.fold((0, 0, 0), |(q, r, h), slot| {
        (q + slot.1 as u64, r + slot.2 as u64, h + slot.3 as u64)
    })
}

/// Second `s`'s slot, emptied first if it held an older second.
fn current(slots: &mut [Slot; SLOTS], s: u64) -> &mut Slot {
    let slot = &mut slots[(s % SLOTS as u64) as usize];
    if slot.0 != s {
        *slot = (s, 0, 0, 0);
    }
    slot
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

    #[test]
    fn retries_another_budget_granted_fill_the_window() {
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
        for _ in 0..15 {
            b.count_retry(now);
        }
        let granted = (0..100).filter(|_| b.try_withdraw(now)).count();
        assert_eq!(granted, 5, "20 allowed, 15 taken elsewhere");
    }

    #[tokio::test(start_paused = true)]
    async fn hedges_have_a_budget_of_their_own() {
        let cfg = RetryConfig {
            budget_ratio: 0.2,
            budget_min_per_s: 0,
            hedge_ratio: 0.05,
            ..RetryConfig::default()
        };
        let now = Instant::now();
        let b = RetryBudget::new(&cfg, now);
        assert!(!b.try_hedge(now, 1), "no request, no hedge");
        for _ in 0..100 {
            b.deposit(now);
        }
        assert_eq!((0..100).filter(|t| b.try_hedge(now, *t)).count(), 5);
        assert_eq!(
            (0..100).filter(|_| b.try_withdraw(now)).count(),
            20,
            "retries untouched"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_one_tenant_takes_more_than_half_the_hedges_others_want() {
        let cfg = RetryConfig {
            hedge_ratio: 0.1,
            ..RetryConfig::default()
        };
        let now = Instant::now();
        let b = RetryBudget::new(&cfg, now);
        for _ in 0..100 {
            b.deposit(now);
        }
        // Ten hedges in the window: the slow tenant gets five once
        // another has asked.
        assert!(b.try_hedge(now, 100));
        assert_eq!((0..100).filter(|_| b.try_hedge(now, 7)).count(), 5);
        assert_eq!((0..100).filter(|t| b.try_hedge(now, 101 + t)).count(), 4);
        tokio::time::advance(Duration::from_secs(11)).await;
        let later = Instant::now();
        for _ in 0..100 {
            b.deposit(later);
        }
        // Alone in the window, it may use them all.
        assert_eq!((0..100).filter(|_| b.try_hedge(later, 7)).count(), 10);
        // Another's ask, refused while none is left, makes it contended:
        // as the budget grows the slow tenant is held to half of it, and
        // the other is served.
        assert!(!b.try_hedge(later, 100));
        tokio::time::advance(Duration::from_secs(1)).await;
        let grown = Instant::now();
        for _ in 0..100 {
            b.deposit(grown);
        }
        assert!(!b.try_hedge(grown, 7), "ten of twenty is its half");
        assert!(b.try_hedge(grown, 100));
    }
}
