//! The replay's runtime and clock: virtual time, stepped at `--speed max`.

use crate::clock::{note_step, Clock, Steps};

/// The replay's runtime, in virtual time, with tokio's I/O driver only when
/// something does I/O (live providers, a calls's store, the console): on
/// timers alone, each step of virtual time saves a poll syscall. When
/// `stepped` (at `--speed max`, where nothing but the runtime moves time),
/// the clock is read once per step ([`Steps`]).
pub fn runtime(io: bool, stepped: bool) -> std::io::Result<VirtualRuntime> {
    let mut b = tokio::runtime::Builder::new_current_thread();
    if io {
        b.enable_all();
    } else {
        b.enable_time();
    }
    if stepped {
        b.on_thread_unpark(note_step);
    }
    Ok(VirtualRuntime {
        rt: b.start_paused(true).build()?,
        stepped,
    })
}

/// A replay's runtime ([`runtime`]).
pub struct VirtualRuntime {
    rt: tokio::runtime::Runtime,
    stepped: bool,
}

impl VirtualRuntime {
    /// Runs `f` to its end on this thread.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        let _steps = self.stepped.then(Steps::on);
        self.rt.block_on(f)
    }
}

/// The clock a replay of a log with `header` runs on (outside a calls): its
/// wall time is the recording's, so times written as dates in recorded
/// headers (an HTTP-date `retry-after`) mean what they meant then. Made
/// in the replay's runtime, like any clock.
pub fn replay_clock(header: Option<&crate::traffic::log::Header>) -> Clock {
    Clock::with_wall_anchor(header.and_then(crate::traffic::log::Header::started_ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::time::Instant;

    /// Runs 50 tasks sleeping different times on a stepped runtime; every
    /// read of the clock gives tokio's time. Returns the virtual time taken.
    fn sleepers(rt: &VirtualRuntime) -> u64 {
        rt.block_on(async {
            let clock = Clock::with_wall_anchor(0);
            assert_eq!(clock.now(), Instant::now(), "before the first step");
            let tasks: Vec<_> = (0..50u64)
                .map(|i| {
                    tokio::spawn(async move {
                        for k in 0..5u64 {
                            tokio::time::sleep(Duration::from_millis((i * 7 + k * 13) % 40 + 1)).await;
                            assert_eq!(clock.now(), Instant::now(), "task {i}, sleep {k}");
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            clock.elapsed_ms()
        })
    }

    #[test]
    fn a_stepped_clock_reads_tokio_s_time_and_forgets_it_with_its_runtime() {
        let first = sleepers(&runtime(false, true).unwrap());
        assert!(first >= 40, "{first}");
        // A second runtime on this thread starts at its own time, not at
        // the first one's last step.
        assert_eq!(sleepers(&runtime(false, true).unwrap()), first);
    }
}
