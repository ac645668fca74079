//! Traffic log format v1: one JSON object per line (JSONL), written while
//! serving and read back by replay. See `docs/traffic-log.md`.
//!
//! [`LogReader`] streams a log line by line, reusing one buffer, so memory
//! stays bounded whatever the file size; the only state that grows is the set
//! of request ids seen, needed to reject attempts and outcomes for requests
//! that were never logged. It is a compressed bitmap: ids numbered in order
//! (as fusebox writes them) take a few bytes per thousand, scattered ids up to
//! about 8 bytes each.

mod check;
mod error;
mod format;
mod id;
mod ids;
mod query;
mod rate;
mod reader;
pub mod writer;

pub use check::{fit, line_of, MAX_SPAN_MS, MAX_TOKENS};
pub use error::LogError;
pub use format::*;
pub use id::STRING_IDS_FROM;
pub use query::{has_attempts, length_ms};
pub use rate::{rate_headers, recorded_rate};
pub use reader::LogReader;
