//! Pacing virtual time against the wall clock.
//!
//! Demo and replay run on tokio's paused clock, which jumps to the next timer
//! whenever the runtime is idle. The pacer holds virtual time to at most
//! wall time × speed by blocking the runtime thread in short slices, and
//! holds it still while paused. Speed and pause are shared with the console.

use crate::clock::Clock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Shared speed control: a factor (virtual seconds per wall second) and pause.
#[derive(Debug)]
pub struct Pace {
    factor_bits: AtomicU64,
    paused: AtomicBool,
    steps: AtomicU64,
}

/// The slowest and fastest speeds the console offers.
pub const SPEEDS: &[f64] = &[0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0];

impl Pace {
    /// Running at `factor` × real time.
    pub fn new(factor: f64) -> Arc<Self> {
        Arc::new(Self {
            factor_bits: AtomicU64::new(factor.to_bits()),
            paused: AtomicBool::new(false),
            steps: AtomicU64::new(0),
        })
    }

    /// The speed factor.
    pub fn factor(&self) -> f64 {
        f64::from_bits(self.factor_bits.load(Ordering::Relaxed))
    }

    /// Sets the speed factor.
    pub fn set_factor(&self, f: f64) {
        self.factor_bits.store(f.to_bits(), Ordering::Relaxed);
    }

    /// The next speed up (`up`) or down in [`SPEEDS`].
    pub fn step_speed(&self, up: bool) -> f64 {
        let f = self.factor();
        let next = if up {
            SPEEDS.iter().copied().find(|s| *s > f + 1e-9).unwrap_or(f)
        } else {
            SPEEDS.iter().rev().copied().find(|s| *s < f - 1e-9).unwrap_or(f)
        };
        self.set_factor(next);
        next
    }

    /// Whether virtual time is held still.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Pauses or resumes.
    pub fn set_paused(&self, p: bool) {
        self.paused.store(p, Ordering::Relaxed);
    }

    /// While paused, lets virtual time run one second.
    pub fn step(&self) {
        self.steps.fetch_add(1, Ordering::Relaxed);
    }

    /// Runs forever, pacing `clock` (spawn it on the runtime being paced).
    pub async fn run(self: Arc<Self>, clock: Clock) {
        const SLICE: Duration = Duration::from_millis(4);
        let mut wall0 = std::time::Instant::now();
        let mut virt0 = clock.elapsed();
        let mut factor = self.factor();
        let mut stepped = self.steps.load(Ordering::Relaxed);
        loop {
            if self.is_paused() {
                let steps = self.steps.load(Ordering::Relaxed);
                if steps != stepped {
                    stepped = steps;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                } else {
                    // Staying runnable keeps the paused clock from advancing.
                    std::thread::sleep(SLICE);
                    tokio::task::yield_now().await;
                }
                wall0 = std::time::Instant::now();
                virt0 = clock.elapsed();
                continue;
            }
            if self.factor() != factor {
                factor = self.factor();
                wall0 = std::time::Instant::now();
                virt0 = clock.elapsed();
            }
            let virt = clock.elapsed().saturating_sub(virt0).as_secs_f64();
            let ahead = virt / factor - wall0.elapsed().as_secs_f64();
            if ahead > 0.0 {
                std::thread::sleep(Duration::from_secs_f64(ahead).min(SLICE));
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
}
