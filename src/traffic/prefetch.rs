//! Reading a traffic log on its own thread, a few batches ahead, so parsing
//! (and whatever the consumer can prepare from a record alone) runs on the
//! second core while the replay drives the runner on the first.
//!
//! The consumer blocks (it does not `.await`) when the reader falls behind:
//! a replay in virtual time must not let the runtime go idle, or the paused
//! clock would jump ahead while the next records are still being parsed.

use super::log::{LogError, LogReader, Record};
use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};

/// Records per batch handed over.
const BATCH: usize = 1024;
/// Batches buffered ahead of the consumer.
const AHEAD: usize = 8;

enum Msg<T> {
    Records(Vec<T>),
    /// The end of the log or its first error, with the reader (for its counts).
    End(Result<(), LogError>, Box<LogReader>),
}

/// Something the consumer is done with, handed back to be dropped.
type Garbage = Box<dyn Send>;

/// Things handed back to the reader's thread at a time.
const GIVE_BACK: usize = 256;

/// Hands things the consumer is done with back to the reader's thread, to be
/// dropped there, [`GIVE_BACK`] at a time ([`Prefetched::give_back`]).
pub struct GiveBack<G> {
    tx: Sender<Garbage>,
    pending: Vec<G>,
}

impl<G: Send + 'static> GiveBack<G> {
    /// Queues `g` to be dropped on the reader's thread.
    pub fn put(&mut self, g: G) {
        self.pending.push(g);
        if self.pending.len() == GIVE_BACK {
            let batch = std::mem::replace(&mut self.pending, Vec::with_capacity(GIVE_BACK));
            let _ = self.tx.send(Box::new(batch));
        }
    }
}

/// A [`LogReader`] running on a thread of its own, handing over what it
/// makes of each record.
pub struct Prefetched<T> {
    rx: Receiver<Msg<T>>,
    back: Sender<Garbage>,
    batch: std::vec::IntoIter<T>,
    reader: Option<Box<LogReader>>,
}

impl<T: Send + 'static> Prefetched<T> {
    /// Starts reading `reader` on a new thread, handing over what `prepare`
    /// makes of each record. Records it turns into None are checked but
    /// dropped there: handing them over and freeing them would cost the
    /// consumer's thread.
    pub fn spawn(
        mut reader: LogReader,
        prepare: impl Fn(Record) -> Option<T> + Send + 'static,
    ) -> std::io::Result<Self> {
        let (tx, rx) = bounded(AHEAD);
        let (back, garbage) = unbounded::<Garbage>();
        std::thread::Builder::new().name("log-reader".into()).spawn(move || {
            // Sends `msg`, freeing garbage while the consumer is not ready
            // for it; false once the consumer is gone.
            let send = |msg: Msg<T>| {
                let mut msg = Some(msg);
                loop {
                    select! {
                        send(tx, msg.take().expect("sent once")) -> sent => return sent.is_ok(),
                        recv(garbage) -> g => drop(g),
                    }
                }
            };
            loop {
                let mut batch = Vec::with_capacity(BATCH);
                let end = loop {
                    match reader.next_record() {
                        Ok(Some(r)) => {
                            if let Some(item) = prepare(r) {
                                batch.push(item);
                                if batch.len() == BATCH {
                                    break None;
                                }
                            }
                        }
                        Ok(None) => break Some(Ok(())),
                        Err(e) => break Some(Err(e)),
                    }
                };
                if !send(Msg::Records(batch)) {
                    return;
                }
                if let Some(end) = end {
                    if send(Msg::End(end, Box::new(reader))) {
                        // Free what the consumer hands back until it is gone.
                        garbage.iter().for_each(drop);
                    }
                    return;
                }
            }
        })?;
        Ok(Self {
            rx,
            back,
            batch: Vec::new().into_iter(),
            reader: None,
        })
    }

    /// A handle that hands things back to the reader's thread to be
    /// dropped there. What was allocated there (the records' strings) is
    /// freed faster there, and off the consumer's core; once the reader has
    /// stopped it is dropped where it is.
    pub fn give_back<G: Send + 'static>(&self) -> GiveBack<G> {
        GiveBack {
            tx: self.back.clone(),
            pending: Vec::with_capacity(GIVE_BACK),
        }
    }

    /// The next item; `Ok(None)` at the end of the log.
    pub fn next_item(&mut self) -> Result<Option<T>, LogError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A log of `n` requests, one per millisecond.
    fn log(n: u64) -> LogReader {
        let text: String = (1..=n)
            .map(|i| {
                format!(
                    "{{\"kind\":\"request\",\"t_ms\":{i},\"id\":{i},\"user\":\"u\",\"session\":\"s\",\
                     \"route\":\"default\",\"prompt_tokens\":10,\"max_tokens\":10,\"tools\":[]}}\n"
                )
            })
            .collect();
        LogReader::from_reader("test.jsonl", std::io::Cursor::new(text), false).unwrap()
    }

    /// Reports the name of the thread it is dropped on.
    struct Noted(std::sync::mpsc::Sender<String>);

    impl Drop for Noted {
        fn drop(&mut self) {
            let _ = self.0.send(std::thread::current().name().unwrap_or("?").to_string());
        }
    }

    #[test]
    fn hands_over_what_prepare_makes_in_order() {
        let mut p = Prefetched::spawn(log(3000), |r| match r {
            Record::Request(q) if q.id % 2 == 0 => Some(q.id),
            _ => None,
        })
        .unwrap();
        let mut got = Vec::new();
        while let Some(id) = p.next_item().unwrap() {
            got.push(id);
        }
        assert_eq!(got, (1..=1500).map(|i| i * 2).collect::<Vec<_>>());
    }

    #[test]
    fn what_is_given_back_is_dropped_on_the_reader_thread() {
        let (tx, dropped_on) = std::sync::mpsc::channel();
        let mut p = Prefetched::spawn(log(10), Some).unwrap();
        let mut back = p.give_back();
        // A full batch is sent at once; the rest waits in the handle.
        for _ in 0..GIVE_BACK + 3 {
            back.put(Noted(tx.clone()));
        }
        while p.next_item().unwrap().is_some() {}
        drop(back);
        let threads: Vec<String> = (0..GIVE_BACK + 3)
            .map(|_| dropped_on.recv_timeout(std::time::Duration::from_secs(10)).unwrap())
            .collect();
        let on_reader = threads.iter().filter(|t| *t == "log-reader").count();
        assert_eq!(
            on_reader, GIVE_BACK,
            "the full batch is freed on the reader's thread: {threads:?}"
        );
        drop(p);
    }
}
