//! Replaying a traffic log: every recorded request is re-driven through the
//! runner at its recorded time, against the recorded behaviour of each
//! provider and tool (`--providers recorded`) or the configured ones
//! (`live`). The runner decides anew, possibly under another config: that is
//! the what-if engine.
//!
//! The log is streamed: the reader stays at most a horizon ahead of virtual
//! time, attempts are indexed only until their request ends, so memory is
//! bounded by the traffic within the horizon, not by the log's length.

mod calls;
mod driver;
pub mod prefetch;
mod progress;
mod recorded;
mod request;
mod runtime;

pub use calls::{ReadAttempt, RecordedCalls};
pub use driver::{replay, ReplayOptions, Replayed, HORIZON};
pub use progress::{RecordedOutcomes, ReplayEnd};
pub use recorded::{RecordedProvider, RecordedTools};
pub use request::{agent_request, embeddings_call, gateway_call};
pub use runtime::{replay_clock, runtime, VirtualRuntime};

use crate::clock::{Clock, Seed};
use crate::config::Config;
use crate::provider::Provider;
use crate::runner::RunnerParts;
use std::sync::Arc;

/// Runner parts for `--providers recorded`: every configured provider and
/// every tool answer from one recorded calls, which [`replay`] feeds.
pub fn recorded_parts(cfg: &Config, clock: Clock, seed: Seed) -> (RunnerParts, Arc<RecordedCalls>) {
    let calls = Arc::new(RecordedCalls::default());
    let mut parts = RunnerParts::mock(clock, seed);
    for name in cfg.providers.keys() {
        let provider: Arc<dyn Provider> = Arc::new(RecordedProvider::new(name, calls.clone(), clock));
        parts.providers.insert(name.clone(), provider);
    }
    parts.tools = Some(Arc::new(RecordedTools::new(calls.clone(), clock)));
    (parts, calls)
}
