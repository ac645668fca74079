//! Replaying a traffic log: every recorded request is re-driven through the
//! runner at its recorded time, against the recorded behaviour of each
//! provider and tool (`--providers recorded`) or the configured ones
//! (`live`). The runner decides anew, possibly under another config: that is
//! the what-if engine.
//!
//! The log is streamed: the reader stays at most a horizon ahead of virtual
//! time, attempts are indexed only until their request ends, so memory is
//! bounded by the traffic within the horizon, not by the log's length.

mod driver;
mod fleet;
mod progress;
mod recorded;
mod request;
mod runtime;

pub use driver::{replay, ReplayOptions, Replayed, HORIZON};
pub use fleet::{ReadAttempt, RecordedFleet};
pub use progress::{RecordedOutcomes, ReplayEnd};
pub use recorded::{RecordedProvider, RecordedTools};
pub use request::{agent_request, command, embeddings_call, gateway_call};
pub use runtime::{replay_clock, runtime, VirtualRuntime};

use super::log::{LogError, LogReader, Record};
use crate::clock::{Clock, Seed};
use crate::config::Config;
use crate::provider::Provider;
use crate::runner::RunnerParts;
use std::sync::Arc;

/// Runner parts for `--providers recorded`: every configured provider and
/// every tool answer from one recorded fleet, which [`replay`] feeds.
pub fn recorded_parts(cfg: &Config, clock: Clock, seed: Seed) -> (RunnerParts, Arc<RecordedFleet>) {
    let fleet = Arc::new(RecordedFleet::default());
    let mut parts = RunnerParts::mock(clock, seed);
    for name in cfg.providers.keys() {
        let provider: Arc<dyn Provider> = Arc::new(RecordedProvider::new(name, fleet.clone(), clock));
        parts.providers.insert(name.clone(), provider);
    }
    parts.tools = Some(Arc::new(RecordedTools::new(fleet.clone(), clock)));
    (parts, fleet)
}

/// Whether the log (its segments, in order) has an attempt record: read up
/// to the first one, so a recorded log answers at once.
pub fn has_attempts(paths: &[std::path::PathBuf], skip_bad_lines: bool) -> Result<bool, LogError> {
    let mut reader = LogReader::open_all(paths, skip_bad_lines)?;
    reader.check_only_outcomes();
    while let Some(r) = reader.next_record()? {
        if matches!(r, Record::Attempt(_)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// How long a log runs (the `t_ms` of its last record, from its first in a
/// log without a header), read from its ends (the first segment's head,
/// the last one's tail) without scanning the whole log; None if no record
/// is found there.
pub fn log_length_ms(paths: &[std::path::PathBuf]) -> Option<u64> {
    use std::io::{BufRead, Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(paths.first()?).ok()?;
    let first = std::io::BufReader::new(&mut f)
        .lines()
        .map_while(Result::ok)
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str::<serde_json::Value>(&l).ok())?;
    let origin = match first.get("kind").and_then(serde_json::Value::as_str) {
        Some("header") => 0,
        _ => first.get("t_ms").and_then(serde_json::Value::as_u64)?,
    };
    if paths.len() > 1 {
        f = std::fs::File::open(paths.last()?).ok()?;
    }
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(256 << 10);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).ok()?;
    String::from_utf8_lossy(&tail)
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v.get("t_ms").and_then(serde_json::Value::as_u64))
        .map(|last| last.saturating_sub(origin))
}
