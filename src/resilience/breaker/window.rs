//! The sliding window of recent outcomes, by count or by time.

use crate::config::{BreakerConfig, WindowKind};
use tokio::time::Instant;

/// The sliding window of recent outcomes.
pub(super) enum Window {
    /// Last N calls: a ring of flags with running totals.
    Count {
        ring: Vec<u8>,
        head: usize,
        len: usize,
        fails: u32,
        slows: u32,
    },
    /// Calls in the last N seconds: one bucket per second.
    Time { origin: Instant, buckets: Vec<Bucket> },
}

#[derive(Clone, Copy, Default)]
pub(super) struct Bucket {
    sec: u64,
    calls: u32,
    fails: u32,
    slows: u32,
}

const FAIL: u8 = 1;
const SLOW: u8 = 2;

impl Window {
    pub(super) fn new(cfg: &BreakerConfig, origin: Instant) -> Self {
        let n = cfg.window_size.max(1) as usize;
        match cfg.window {
            WindowKind::Count => Window::Count {
                ring: vec![0; n],
                head: 0,
                len: 0,
                fails: 0,
                slows: 0,
            },
            WindowKind::Time => Window::Time {
                origin,
                buckets: vec![Bucket::default(); n],
            },
        }
    }

    pub(super) fn clear(&mut self) {
        match self {
            Window::Count {
                ring,
                head,
                len,
                fails,
                slows,
            } => {
                ring.iter_mut().for_each(|f| *f = 0);
                *head = 0;
                *len = 0;
                *fails = 0;
                *slows = 0;
            }
            Window::Time { buckets, .. } => buckets.iter_mut().for_each(|b| *b = Bucket::default()),
        }
    }

    pub(super) fn push(&mut self, now: Instant, failed: bool, slow: bool) {
        match self {
            Window::Count {
                ring,
                head,
                len,
                fails,
                slows,
            } => {
                let old = ring[*head];
                if *len == ring.len() {
                    *fails -= (old & FAIL) as u32;
                    *slows -= ((old & SLOW) >> 1) as u32;
                } else {
                    *len += 1;
                }
                let flags = (failed as u8) | ((slow as u8) << 1);
                ring[*head] = flags;
                *fails += failed as u32;
                *slows += slow as u32;
                *head = (*head + 1) % ring.len();
            }
            Window::Time { origin, buckets } => {
                let sec = now.saturating_duration_since(*origin).as_secs();
                let n = buckets.len();
                let b = &mut buckets[(sec % n as u64) as usize];
                if b.sec != sec {
                    *b = Bucket {
                        sec,
                        ..Bucket::default()
                    };
                }
                b.calls += 1;
                b.fails += failed as u32;
                b.slows += slow as u32;
            }
        }
    }

    /// (calls, failures, slow calls) currently in the window.
    pub(super) fn totals(&self, now: Instant) -> (u32, u32, u32) {
        match self {
            Window::Count { len, fails, slows, .. } => (*len as u32, *fails, *slows),
            Window::Time { origin, buckets } => {
                let sec = now.saturating_duration_since(*origin).as_secs();
                let n = buckets.len() as u64;
                buckets
                    .iter()
                    .filter(|b| b.calls > 0 && sec.saturating_sub(b.sec) < n)
                    .fold((0, 0, 0), |(c, f, s), b| (c + b.calls, f + b.fails, s + b.slows))
            }
        }
    }
}
