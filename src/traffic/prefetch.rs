//! Reading a traffic log on its own thread, a few batches ahead, so parsing
//! runs on the second core while the replay drives the runner on the first.
//!
//! The consumer blocks (it does not `.await`) when the reader falls behind:
//! a replay in virtual time must not let the runtime go idle, or the paused
//! clock would jump ahead while the next records are still being parsed.

use super::log::{LogError, LogReader, Record};
use std::sync::mpsc::{sync_channel, Receiver};

/// Records per batch handed over.
const BATCH: usize = 1024;
/// Batches buffered ahead of the consumer.
const AHEAD: usize = 8;

enum Msg {
    Records(Vec<Record>),
    /// The end of the log or its first error, with the reader (for its counts).
    End(Result<(), LogError>, Box<LogReader>),
}

/// A [`LogReader`] running on a thread of its own.
pub struct Prefetched {
    rx: Receiver<Msg>,
    batch: std::vec::IntoIter<Record>,
    reader: Option<Box<LogReader>>,
}

impl Prefetched {
    /// Starts reading `reader` on a new thread, handing over the records
    /// `keep` accepts. The others are checked but dropped there: handing
    /// them over and freeing them would cost the consumer's thread.
    pub fn spawn(mut reader: LogReader, keep: impl Fn(&Record) -> bool + Send + 'static) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(AHEAD);
        std::thread::Builder::new()
            .name("log-reader".into())
            .spawn(move || loop {
                let mut batch = Vec::with_capacity(BATCH);
                let end = loop {
                    match reader.next_record() {
                        Ok(Some(r)) if !keep(&r) => {}
                        Ok(Some(r)) => {
                            batch.push(r);
                            if batch.len() == BATCH {
                                break None;
                            }
                        }
                        Ok(None) => break Some(Ok(())),
                        Err(e) => break Some(Err(e)),
                    }
                };
                // A send fails only when the replay was dropped: stop reading.
                if tx.send(Msg::Records(batch)).is_err() {
                    return;
                }
                if let Some(end) = end {
                    let _ = tx.send(Msg::End(end, Box::new(reader)));
                    return;
                }
            })?;
        Ok(Self {
            rx,
            batch: Vec::new().into_iter(),
            reader: None,
        })
    }

    /// The next record; `Ok(None)` at the end of the log.
    pub fn next_record(&mut self) -> Result<Option<Record>, LogError> {
        loop {
            if let Some(r) = self.batch.next() {
                return Ok(Some(r));
            }
            if self.reader.is_some() {
                return Ok(None);
            }
            match self.rx.recv() {
                Ok(Msg::Records(b)) => self.batch = b.into_iter(),
                Ok(Msg::End(end, reader)) => {
                    self.reader = Some(reader);
                    end?;
                }
                // The thread died without an end message (it panicked).
                Err(_) => {
                    return Err(LogError::Io {
                        path: "traffic log".into(),
                        source: std::io::Error::other("the log reader thread stopped unexpectedly"),
                    })
                }
            }
        }
    }

    /// Bad lines skipped so far (final once the end was reached).
    pub fn bad_lines(&self) -> u64 {
        self.reader.as_ref().map_or(0, |r| r.bad_lines())
    }
}
