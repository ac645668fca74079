//! The durable spool behind the "async defer" degradation: deferred requests
//! are appended to a JSONL file and survive a restart; each ends with a
//! `done` line once re-driven to a final outcome.

use crate::request::AgentRequest;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// A problem with the spool file.
#[derive(Debug, thiserror::Error)]
#[error("spool {path}: {source}")]
pub struct SpoolError {
    path: String,
    source: std::io::Error,
}

/// A deferred request waiting to be re-driven.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Deferred {
    /// The request as it came in.
    pub request: AgentRequest,
    /// When it was deferred (ms since the runner started).
    pub deferred_at_ms: u64,
    /// Why.
    pub reason: String,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Line {
    Add(Box<Deferred>),
    Done { id: u64, level: String },
}

/// The spool: a file plus the pending requests in memory.
pub struct Spool {
    path: PathBuf,
    file: Mutex<File>,
    pending: Mutex<Vec<Deferred>>,
}

impl Spool {
    /// Opens (or creates) the spool; requests left pending by an earlier run
    /// are loaded and the file is compacted to just those.
    pub fn open(path: &Path) -> Result<Self, SpoolError> {
        let err = |source| SpoolError {
            path: path.display().to_string(),
            source,
        };
        let mut pending: Vec<Deferred> = Vec::new();
        if path.exists() {
            let f = File::open(path).map_err(err)?;
            for line in BufReader::new(f).lines() {
                let line = line.map_err(err)?;
                // A torn last line from a crash is skipped.
                match serde_json::from_str::<Line>(&line) {
                    Ok(Line::Add(d)) => pending.push(*d),
                    Ok(Line::Done { id, .. }) => pending.retain(|d| d.request.id != id),
                    Err(_) => tracing::warn!(path = %path.display(), "skipping unreadable spool line"),
                }
            }
        }
        let tmp = path.with_extension("compact");
        {
            let mut f = File::create(&tmp).map_err(err)?;
            for d in &pending {
                let line = serde_json::to_string(&Line::Add(Box::new(d.clone()))).map_err(|e| err(e.into()))?;
                writeln!(f, "{line}").map_err(err)?;
            }
            f.sync_all().map_err(err)?;
        }
        std::fs::rename(&tmp, path).map_err(err)?;
        let file = OpenOptions::new().append(true).open(path).map_err(err)?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            pending: Mutex::new(pending),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(&self, line: &Line) -> Result<(), SpoolError> {
        let err = |source| SpoolError {
            path: self.path.display().to_string(),
            source,
        };
        let text = serde_json::to_string(line).map_err(|e| err(e.into()))?;
        let mut f = self.file.lock();
        writeln!(f, "{text}").map_err(err)?;
        f.sync_data().map_err(err)
    }

    /// Durably records a deferred request.
    pub fn add(&self, d: Deferred) -> Result<(), SpoolError> {
        self.append(&Line::Add(Box::new(d.clone())))?;
        self.pending.lock().push(d);
        Ok(())
    }

    /// Records that a deferred request ended with `level`.
    pub fn done(&self, id: u64, level: &str) -> Result<(), SpoolError> {
        self.append(&Line::Done {
            id,
            level: level.to_string(),
        })?;
        self.pending.lock().retain(|d| d.request.id != id);
        Ok(())
    }

    /// The requests still waiting, oldest first.
    pub fn pending(&self) -> Vec<Deferred> {
        self.pending.lock().clone()
    }

    /// How many requests are waiting.
    pub fn len(&self) -> usize {
        self.pending.lock().len()
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: u64) -> Deferred {
        Deferred {
            request: AgentRequest {
                id,
                ..AgentRequest::default()
            },
            deferred_at_ms: id * 10,
            reason: "all models down".into(),
        }
    }

    #[test]
    fn pending_requests_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool.jsonl");
        {
            let s = Spool::open(&path).unwrap();
            s.add(req(1)).unwrap();
            s.add(req(2)).unwrap();
            s.done(1, "fallback").unwrap();
        }
        // Simulate a crash mid-write: a torn last line.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        write!(f, "{{\"op\":\"add\",\"requ").unwrap();
        drop(f);
        let s = Spool::open(&path).unwrap();
        assert_eq!(s.pending(), vec![req(2)]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1, "compacted to the pending request");
    }
}
