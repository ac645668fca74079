//! A striped counter for hot-path statistics: each thread adds to its own
//! cache line, so cores do not fight over one; reads sum the stripes.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const STRIPES: usize = 8;

#[repr(align(128))]
#[derive(Default)]
struct Stripe(AtomicU64);

/// A monotonically increasing counter, cheap to bump from many threads.
#[derive(Default)]
pub struct Counter {
    stripes: [Stripe; STRIPES],
}

pub(super) fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    MINE.with(|s| *s)
}

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.stripes[stripe()].0.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// The total.
    pub fn get(&self) -> u64 {
        self.stripes.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_across_threads() {
        let c = std::sync::Arc::new(Counter::default());
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || (0..1000).for_each(|_| c.inc()))
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        c.add(5);
        assert_eq!(c.get(), 4005);
    }
}
