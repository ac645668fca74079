//! The circuit breaker: closed → open → half-open with a progressive probe
//! ramp, plus the operator states forced-open, forced-closed and disabled.
//!
//! Trips on consecutive failures, on the failure rate or slow-call rate over a
//! sliding window (only with a minimum number of calls), and at once on a
//! failed call whose token cost exceeds a threshold. What counts as a failure
//! (HTTP errors, timeouts, semantic failures, truncated streams, token-rate
//! collapse) is decided by the caller's [`CallRecord`]. Every transition is
//! emitted as an event with a reason in words.

mod handle;
mod machine;
mod types;
mod watch;
mod window;

pub use handle::*;
pub use types::*;
pub use watch::*;
