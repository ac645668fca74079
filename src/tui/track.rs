//! What the console remembers of each breaker row over time: its calls a
//! second for two minutes, every 5 s for ten and every 30 s for an hour,
//! and copies of its latency and time-to-first-token histograms to take each
//! span's figures from.
//! A row's track is under 16 KiB whatever the traffic (`docs/limits.md`).

use crate::telemetry::histogram::HistogramView;
use std::collections::VecDeque;

/// How far back the sparklines and latency columns look (`t` cycles it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Span {
    /// The last two minutes, a sample a second.
    #[default]
    TwoMinutes,
    /// The last ten minutes, a sample every 5 s.
    TenMinutes,
    /// The last hour, a sample every 30 s.
    Hour,
}

impl Span {
    /// Every span, shortest first.
    pub const ALL: [Span; 3] = [Span::TwoMinutes, Span::TenMinutes, Span::Hour];

    /// Its name on screen.
    pub fn label(self) -> &'static str {
        match self {
            Span::TwoMinutes => "2 min",
            Span::TenMinutes => "10 min",
            Span::Hour => "1 h",
        }
    }

    /// The next longer one (after the hour, two minutes again).
    pub fn next(self) -> Span {
        Self::ALL[(self.index() + 1) % Self::ALL.len()]
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Seconds per calls sample.
    fn step_s(self) -> u32 {
        [1, 5, 30][self.index()]
    }

    /// Its length in seconds.
    pub fn seconds(self) -> u32 {
        self.step_s() * SAMPLES as u32
    }
}

/// Calls samples kept per span.
pub const SAMPLES: usize = 120;
/// Latency copies kept per span: one every span / `COPIES`, and one more
/// so the oldest is a whole span back.
const COPIES: usize = 12;

/// One breaker row's history.
#[derive(Clone, Debug, Default)]
pub struct Track {
    /// Its attempts counter at the last sample.
    last_attempts: Option<u64>,
    /// Seconds sampled.
    seconds: u32,
    /// Calls per sample, oldest first, one ring per [`Span`].
    calls: [VecDeque<u32>; 3],
    /// Calls since each longer span's last sample.
    pending: [u32; 3],
    /// Latency and time-to-first-token histograms, oldest first, one ring
    /// per [`Span`].
    latency: [VecDeque<[HistogramView; 2]>; 3],
}

fn push<T>(q: &mut VecDeque<T>, max: usize, v: T) {
    if q.len() == max {
        q.pop_front();
    }
    q.push_back(v);
}

impl Track {
    /// Takes a second's sample: the row's attempts counter and its latency
    /// and time-to-first-token histograms now (a counter that went back, a
    /// restart, counts from 0).
    pub fn sample(&mut self, attempts: u64, latency: HistogramView, ttft: HistogramView) {
        let prev = self.last_attempts.replace(attempts).unwrap_or(attempts);
        let calls = u32::try_from(attempts.checked_sub(prev).unwrap_or(attempts)).unwrap_or(u32::MAX);
        self.seconds += 1;
        for span in Span::ALL {
            let i = span.index();
            self.pending[i] = self.pending[i].saturating_add(calls);
            if self.seconds.is_multiple_of(span.step_s()) {
                push(&mut self.calls[i], SAMPLES, std::mem::take(&mut self.pending[i]));
            }
            if (self.seconds - 1).is_multiple_of(span.seconds() / COPIES as u32) {
                push(&mut self.latency[i], COPIES + 1, [latency, ttft]);
            }
        }
    }

    /// Calls per sample over `span`, oldest first.
    pub fn calls(&self, span: Span) -> &VecDeque<u32> {
        &self.calls[span.index()]
    }

    /// Latencies from a whole `span` back to `now` (the row's histogram in
    /// the snapshot on screen), or all of `now` while less than the span has
    /// been sampled; None without calls.
    pub fn latency(&self, span: Span, now: &HistogramView) -> Option<HistogramView> {
        self.window(span, 0, now)
    }

    /// Times to first token over `span`, likewise.
    pub fn ttft(&self, span: Span, now: &HistogramView) -> Option<HistogramView> {
        self.window(span, 1, now)
    }

    fn window(&self, span: Span, which: usize, now: &HistogramView) -> Option<HistogramView> {
        let copies = &self.latency[span.index()];
        let window = match copies.front() {
            Some(first) if copies.len() > COPIES => now.since(&first[which]),
            _ => *now,
        };
        (window.count() > 0).then_some(window)
    }

    /// Samples start again from the next one (the display was frozen, so
    /// the time between is not the row's): calls kept, latency copies not.
    pub fn restart(&mut self) {
        self.last_attempts = None;
        self.latency.iter_mut().for_each(VecDeque::clear);
    }
}

/// Bytes one row's full track takes (for `docs/limits.md`'s bound).
pub const TRACK_BYTES: usize = std::mem::size_of::<Track>()
    + 3 * SAMPLES * std::mem::size_of::<u32>()
    + 3 * (COPIES + 1) * 2 * std::mem::size_of::<HistogramView>();
const _: () = assert!(TRACK_BYTES < 16 * 1024, "the bound docs/limits.md states");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hour_is_kept_at_thirty_seconds_and_no_more() {
        let mut t = Track::default();
        // Two hours at 1 call a second, the last 10 minutes at 2.
        let mut attempts = 0;
        for s in 0..7_200u64 {
            attempts += if s >= 6_600 { 2 } else { 1 };
            t.sample(attempts, HistogramView::default(), HistogramView::default());
        }
        let hour = t.calls(Span::Hour);
        assert_eq!(hour.len(), SAMPLES);
        assert_eq!(hour.iter().sum::<u32>(), 3_600 + 600);
        assert_eq!(*hour.back().unwrap(), 60);
        assert_eq!(*hour.front().unwrap(), 30);
        let ten = t.calls(Span::TenMinutes);
        assert_eq!(ten.iter().sum::<u32>(), 1_200);
        assert_eq!(t.calls(Span::TwoMinutes).iter().sum::<u32>(), 240);
        for span in Span::ALL {
            assert!(t.latency[span.index()].len() <= COPIES + 1);
        }
    }

    #[test]
    fn each_span_s_latency_starts_a_whole_span_back() {
        let mut t = Track::default();
        let mut h = HistogramView::default();
        for s in 0..7_200u64 {
            h.counts[0] += 1;
            h.sum_ms += 1;
            t.sample(s, h, h);
        }
        for span in Span::ALL {
            let n = t.latency(span, &h).unwrap().count();
            let secs = u64::from(span.seconds());
            assert!(n >= secs && n <= secs + secs / COPIES as u64, "{span:?}: {n}");
        }
    }

    #[test]
    fn a_restarted_counter_counts_from_zero() {
        let mut t = Track::default();
        t.sample(100, HistogramView::default(), HistogramView::default());
        t.sample(110, HistogramView::default(), HistogramView::default());
        t.sample(3, HistogramView::default(), HistogramView::default());
        assert_eq!(
            t.calls(Span::TwoMinutes).iter().copied().collect::<Vec<_>>(),
            [0, 10, 3]
        );
    }
}
