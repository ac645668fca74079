//! A latency histogram for the hot path: fixed buckets (the upper bounds
//! Prometheus scrapes), counted per thread stripe so cores do not fight
//! over one cache line; reads sum the stripes. Percentiles are estimated
//! from the buckets, over any window a view keeps two copies apart.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets (ms); a last one holds everything slower.
pub const BOUNDS_MS: [u64; 16] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_000, 4_000, 8_000, 15_000, 30_000, 60_000, 120_000, 300_000,
];
const BUCKETS: usize = BOUNDS_MS.len() + 1;
const STRIPES: usize = 8;

#[repr(align(128))]
#[derive(Default)]
struct Stripe {
    counts: [AtomicU64; BUCKETS],
    sum_ms: AtomicU64,
}

/// Latencies of one kind of call to one target.
#[derive(Default)]
pub struct Histogram {
    stripes: [Stripe; STRIPES],
}

impl Histogram {
    /// Counts one call that took `ms`.
    #[inline]
    pub fn record(&self, ms: u64) {
        let b = BOUNDS_MS.partition_point(|&bound| bound < ms);
        let s = &self.stripes[super::counter::stripe() % STRIPES];
        s.counts[b].fetch_add(1, Ordering::Relaxed);
        s.sum_ms.fetch_add(ms, Ordering::Relaxed);
    }

    /// A copy of the counts.
    pub fn view(&self) -> HistogramView {
        let mut v = HistogramView::default();
        for s in &self.stripes {
            for (c, n) in v.counts.iter_mut().zip(&s.counts) {
                *c += n.load(Ordering::Relaxed);
            }
            v.sum_ms += s.sum_ms.load(Ordering::Relaxed);
        }
        v
    }
}

/// The counts of a [`Histogram`] at one instant (not cumulative: each
/// bucket's own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistogramView {
    /// Calls per bucket ([`BOUNDS_MS`], then the rest).
    pub counts: [u64; BUCKETS],
    /// Sum of their latencies (ms).
    pub sum_ms: u64,
}

impl HistogramView {
    /// Calls counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// What was counted since `earlier` (a copy of the same histogram).
    pub fn since(&self, earlier: &HistogramView) -> HistogramView {
        let mut v = *self;
        for (c, e) in v.counts.iter_mut().zip(&earlier.counts) {
            *c = c.saturating_sub(*e);
        }
        v.sum_ms = v.sum_ms.saturating_sub(earlier.sum_ms);
        v
    }

    /// The `q` quantile (0..=1) in ms, interpolated within its bucket; None
    /// without calls. Beyond the last bound it is that bound.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            if seen + n >= rank {
                let lo = if i == 0 { 0 } else { BOUNDS_MS[i - 1] };
                let Some(&hi) = BOUNDS_MS.get(i) else { return Some(lo) };
                let within = (rank - seen) as f64 / n as f64;
                return Some(lo + ((hi - lo) as f64 * within).round() as u64);
            }
            seen += n;
        }
        BOUNDS_MS.last().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_land_in_their_bucket_and_percentiles_follow() {
        let h = Histogram::default();
        for ms in [3, 7, 7, 40, 40, 40, 40, 40, 900, 400_000] {
            h.record(ms);
        }
        let v = h.view();
        assert_eq!(v.count(), 10);
        assert_eq!(
            (v.counts[0], v.counts[1], v.counts[3], v.counts[7], v.counts[16]),
            (1, 2, 5, 1, 1)
        );
        assert_eq!(v.sum_ms, 3 + 14 + 200 + 900 + 400_000);
        // The 5th call is in (25, 50]: two of its five.
        assert_eq!(v.quantile(0.5), Some(35));
        assert_eq!(v.quantile(0.9), Some(1_000));
        assert_eq!(v.quantile(1.0), Some(300_000), "beyond the last bound");
        assert_eq!(HistogramView::default().quantile(0.5), None);
        // A window is the difference of two copies.
        h.record(7);
        let w = h.view().since(&v);
        assert_eq!((w.count(), w.quantile(0.99)), (1, Some(10)));
    }

    #[test]
    fn a_bound_itself_is_in_its_bucket() {
        let h = Histogram::default();
        h.record(5);
        h.record(6);
        assert_eq!(h.view().counts[..2], [1, 1]);
    }
}
