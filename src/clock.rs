//! The one clock and the seeded randomness every engine decision reads.
//!
//! All timing goes through [`Clock`], built on `tokio::time::Instant`, so a
//! paused tokio runtime makes every window, cooldown and refill exact and lets
//! replays run in virtual time. Randomness comes from [`Seed`], which derives
//! an independent stream per purpose and key: decisions then do not depend on
//! the order in which concurrent tasks happen to draw numbers.

use std::cell::Cell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

thread_local! {
    /// While [`Steps`] are on for this thread: virtual time as of its
    /// runtime's last wake-up ([`note_step`]).
    static STEPPED: Cell<Option<Instant>> = const { Cell::new(None) };
    static STEPS_ON: Cell<bool> = const { Cell::new(false) };
    /// The last instant [`Clock::ms_at`] converted, from which origin, and
    /// its result: every task woken at a step of virtual time converts that
    /// same instant, several times.
    static LAST_MS: Cell<Option<(Instant, Instant, u64)>> = const { Cell::new(None) };
}

/// Virtual time read once per step. In a paused runtime that advances on
/// its own, time moves only while the runtime parks: between wake-ups
/// every read gives the same instant. A read of tokio's clock takes its
/// lock through the runtime's thread-local context, several times per
/// request in a replay; so a replay's runtime calls [`note_step`] at each
/// wake-up (`on_thread_unpark`), and while [`Steps`] are on, [`Clock::now`]
/// on that thread returns the time noted. Nothing may call
/// `tokio::time::advance` on such a runtime.
#[must_use = "steps are on while this lives"]
pub struct Steps(());

impl Steps {
    /// Turns steps on for this thread (around its runtime's `block_on`).
    pub fn on() -> Self {
        STEPPED.set(None);
        STEPS_ON.set(true);
        Self(())
    }
}

impl Drop for Steps {
    /// The noted time was the runtime's, and this thread may run another.
    fn drop(&mut self) {
        STEPS_ON.set(false);
        STEPPED.set(None);
    }
}

/// Notes the time at a runtime's wake-up, if steps are on for this thread.
pub fn note_step() {
    if STEPS_ON.get() {
        STEPPED.set(Some(Instant::now()));
    }
}

/// The injected clock: a monotonic origin plus the wall time it corresponds to.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: Instant,
    wall_origin_ms: u64,
}

impl Clock {
    /// A clock starting now, anchored to the given wall time (ms since the Unix epoch).
    pub fn with_wall_anchor(wall_origin_ms: u64) -> Self {
        Self {
            origin: Instant::now(),
            wall_origin_ms,
        }
    }

    /// A clock anchored to the system's wall time; used at the binary's edge only.
    pub fn system() -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Self::with_wall_anchor(wall)
    }

    /// The current monotonic instant.
    #[inline]
    pub fn now(&self) -> Instant {
        STEPPED.get().unwrap_or_else(Instant::now)
    }

    /// The instant the clock started.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Time since the clock started.
    #[inline]
    pub fn elapsed(&self) -> Duration {
        self.now().saturating_duration_since(self.origin)
    }

    /// Milliseconds since the clock started.
    #[inline]
    pub fn elapsed_ms(&self) -> u64 {
        self.ms_at(self.now())
    }

    /// Milliseconds from the clock's origin to `at`.
    #[inline]
    pub fn ms_at(&self, at: Instant) -> u64 {
        if let Some((last, origin, ms)) = LAST_MS.get() {
            if last == at && origin == self.origin {
                return ms;
            }
        }
        let ms = at.saturating_duration_since(self.origin).as_millis() as u64;
        LAST_MS.set(Some((at, self.origin, ms)));
        ms
    }

    /// Wall time now, in ms since the Unix epoch (anchor + monotonic elapsed).
    pub fn wall_ms(&self) -> u64 {
        self.wall_origin_ms + self.elapsed_ms()
    }

    /// Wall time at which the clock started, in ms since the Unix epoch.
    pub fn wall_origin_ms(&self) -> u64 {
        self.wall_origin_ms
    }
}

/// The run's seed; derives deterministic random streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seed(pub u64);

impl Seed {
    /// A random stream for one purpose and key (e.g. jitter for request 42).
    pub fn stream(self, purpose: u64, key: u64) -> fastrand::Rng {
        fastrand::Rng::with_seed(mix(self.0 ^ mix(purpose) ^ mix(key.wrapping_add(0x9e37))))
    }

    /// A deterministic 64-bit value for one purpose and key.
    pub fn value(self, purpose: u64, key: u64) -> u64 {
        mix(self.0 ^ mix(purpose.wrapping_mul(31)) ^ mix(key))
    }
}

/// Stream purposes, so two uses never share a sequence.
pub mod purpose {
    /// Retry backoff jitter.
    pub const JITTER: u64 = 1;
    /// Mock provider decisions (tool calls, token counts).
    pub const MOCK: u64 = 2;
    /// Demo load generation.
    pub const LOAD: u64 = 3;
    /// Fault injection rates.
    pub const FAULT: u64 = 4;
}

/// A 64-bit finaliser (SplitMix64's) used to decorrelate seeds and keys.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stable 64-bit hash of a string (FNV-1a), for content hashes and keys.
pub fn hash_str(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.as_bytes() {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn elapsed_follows_the_paused_clock() {
        let c = Clock::with_wall_anchor(1_000);
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(c.elapsed_ms(), 1500);
        assert_eq!(c.wall_ms(), 2500);
    }

    #[tokio::test(start_paused = true)]
    async fn ms_at_converts_from_each_clock_s_own_origin() {
        let a = Clock::with_wall_anchor(0);
        tokio::time::advance(Duration::from_millis(250)).await;
        let b = Clock::with_wall_anchor(0);
        tokio::time::advance(Duration::from_millis(100)).await;
        let now = Instant::now();
        assert_eq!((a.ms_at(now), b.ms_at(now), a.ms_at(now)), (350, 100, 350));
        assert_eq!((a.ms_at(a.origin()), b.elapsed_ms()), (0, 100));
    }

    #[test]
    fn streams_are_deterministic_and_distinct() {
        let s = Seed(7);
        assert_eq!(s.stream(1, 2).u64(..), s.stream(1, 2).u64(..));
        assert_ne!(s.stream(1, 2).u64(..), s.stream(1, 3).u64(..));
        assert_ne!(s.stream(1, 2).u64(..), s.stream(2, 2).u64(..));
        assert_eq!(hash_str("abc"), hash_str("abc"));
    }
}
