//! What a log holds, read without replaying it: whether it has attempts,
//! how long it runs.

use super::{LogError, LogReader, Record};

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
pub fn length_ms(paths: &[std::path::PathBuf]) -> Option<u64> {
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
