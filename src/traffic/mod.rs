//! The traffic that drives the runner: the demo load and its scenarios
//! (`load/`), the log format, its reader and writer (`log/`), replay
//! (`replay/`), pacing and the run's summary.

pub mod load;
pub mod log;
pub mod pace;
pub mod replay;
pub mod summary;
