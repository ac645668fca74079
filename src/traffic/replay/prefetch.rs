//! Reading a traffic log on its own thread, a few batches ahead, so parsing
//! (and whatever the consumer can prepare from a record alone) runs on the
//! second core while the replay drives the runner on the first.
//!
//! The consumer blocks (it does not `.await`) when the reader falls behind:
//! a replay in virtual time must not let the runtime go idle, or the paused
//! clock would jump ahead while the next records are still being parsed.
//!
//! A record the consumer needs only later (a request, due when virtual time
//! reaches it) can be split: a small item handed over in order at once, and
//! a body kept on the reader's thread and made ready just before the
//! consumer asks for it. What is made then is still in a cache when the
//! consumer uses it, instead of made seconds ahead and evicted since.

use crate::traffic::log::{LogError, LogReader, Record};
use crossbeam_channel::{bounded, unbounded, Receiver, Select, Sender, TrySendError};
use std::collections::VecDeque;

/// Records per batch handed over.
const BATCH: usize = 1024;
/// Batches buffered ahead of the consumer.
const AHEAD: usize = 8;
/// Bodies per batch handed over: each hand-over may wake the other thread,
/// which costs more than a few more bodies made early.
const BODIES: usize = 256;
/// Batches of bodies buffered ahead of the consumer (one more is made
/// ready): bodies are made some hundreds of requests before they are needed.
const BODY_BATCHES_AHEAD: usize = 2;
/// Records read between two top-ups of the bodies.
const TOP_UP_EVERY: usize = 16;

/// What the reader makes of a record.
pub enum Split<T, P> {
    /// An item, handed over in order.
    Now(T),
    /// An item handed over in order, and a part kept on the reader's thread
    /// until the consumer is about to ask for its body ([`Prefetched::next_body`]).
    Later(T, P),
    /// Nothing: the record is checked, then dropped on the reader's thread.
    Skip,
}

enum Msg<T> {
    Records(Vec<T>),
    /// The end of the log or its first error, with the reader (for its counts).
    End(Result<(), LogError>, Box<LogReader>),
}

/// Something the consumer is done with, handed back to be dropped.
type Garbage = Box<dyn Send>;

/// Things handed back to the reader's thread at a time.
const GIVE_BACK: usize = 1024;

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
/// makes of each record: items in order, and bodies, made just in time.
pub struct Prefetched<T, B> {
    rx: Receiver<Msg<T>>,
    bodies_rx: Receiver<Vec<B>>,
    back: Sender<Garbage>,
    batch: std::vec::IntoIter<T>,
    bodies: std::vec::IntoIter<B>,
    reader: Option<Box<LogReader>>,
}

impl<T: Send + 'static, B: Send + 'static> Prefetched<T, B> {
    /// Starts reading `reader` on a new thread. `split` says what each
    /// record becomes ([`Split`]), given the record and its line in the log;
    /// `finish` makes a kept part into the body
    /// the consumer takes, in the order the parts were kept. Both may keep
    /// what they share in `state`, which lives on the reader's thread.
    pub fn spawn<S: Send + 'static, P: Send + 'static>(
        reader: LogReader,
        state: S,
        split: impl Fn(&mut S, Record, u64) -> Split<T, P> + Send + 'static,
        finish: impl FnMut(&mut S, P) -> B + Send + 'static,
    ) -> std::io::Result<Self> {
        let (tx, rx) = bounded(AHEAD);
        let (bodies_tx, bodies_rx) = bounded(BODY_BATCHES_AHEAD);
        let (back, garbage) = unbounded::<Garbage>();
        std::thread::Builder::new().name("log-reader".into()).spawn(move || {
            let mut reader = Some(reader);
            // Item messages not yet handed over: a batch, and the end.
            let mut outbox: VecDeque<Msg<T>> = VecDeque::new();
            let mut bodies = Bodies {
                state,
                kept: VecDeque::new(),
                made: Vec::new(),
                finish,
                tx: bodies_tx,
            };
            loop {
                if outbox.is_empty() {
                    if let Some(mut r) = reader.take() {
                        let Some((batch, end)) = read_batch(&mut r, &split, &mut bodies) else {
                            return;
                        };
                        outbox.push_back(Msg::Records(batch));
                        match end {
                            Some(end) => outbox.push_back(Msg::End(end, Box::new(r))),
                            None => reader = Some(r),
                        }
                    }
                }
                if !bodies.top_up() {
                    return;
                }
                if outbox.is_empty() && bodies.made.is_empty() {
                    // All handed over: no more bodies come (a consumer
                    // asking for one learns so), and what the consumer
                    // hands back is freed until it is gone.
                    drop(bodies);
                    garbage.iter().for_each(drop);
                    return;
                }
                // Hand over whichever the consumer takes first, freeing
                // garbage meanwhile; stop once the consumer is gone.
                let mut sel = Select::new();
                let items = (!outbox.is_empty()).then(|| sel.send(&tx));
                let made = (!bodies.made.is_empty()).then(|| sel.send(&bodies.tx));
                sel.recv(&garbage);
                let op = sel.select();
                let gone = if Some(op.index()) == items {
                    let msg = outbox.pop_front().expect("an item message is ready");
                    op.send(&tx, msg).is_err()
                } else if Some(op.index()) == made {
                    op.send(&bodies.tx, std::mem::take(&mut bodies.made)).is_err()
                } else {
                    op.recv(&garbage).is_err()
                };
                if gone {
                    return;
                }
            }
        })?;
        Ok(Self {
            rx,
            bodies_rx,
            back,
            batch: Vec::new().into_iter(),
            bodies: Vec::new().into_iter(),
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
                Err(_) => return Err(stopped()),
            }
        }
    }

    /// The body of the next [`Split::Later`] item, in order (an error if
    /// the reader's thread stopped, or was asked for more than it kept).
    pub fn next_body(&mut self) -> Result<B, LogError> {
        loop {
            if let Some(b) = self.bodies.next() {
                return Ok(b);
            }
            self.bodies = self.bodies_rx.recv().map_err(|_| stopped())?.into_iter();
        }
    }

    /// The log reader, back from its thread once the end was reached (for
    /// its counts of lines skipped).
    pub fn finished(&self) -> Option<&LogReader> {
        self.reader.as_deref()
    }
}

/// The reader's thread stopped without handing over what was asked of it.
fn stopped() -> LogError {
    LogError::Io {
        path: "traffic log".into(),
        error: std::io::Error::other("the log reader thread stopped unexpectedly"),
    }
}

/// The kept parts, and the bodies made from them, on the reader's thread.
struct Bodies<S, P, B, F> {
    /// What `split` and `finish` share.
    state: S,
    kept: VecDeque<P>,
    /// The next batch, made and not yet handed over.
    made: Vec<B>,
    finish: F,
    tx: Sender<Vec<B>>,
}

impl<S, P, B, F: FnMut(&mut S, P) -> B> Bodies<S, P, B, F> {
    /// Makes and hands over bodies while the consumer has room for them,
    /// keeping the next batch made; false once the consumer is gone.
    fn top_up(&mut self) -> bool {
        loop {
            if self.made.is_empty() {
                let n = self.kept.len().min(BODIES);
                let (state, finish) = (&mut self.state, &mut self.finish);
                self.made = self.kept.drain(..n).map(|p| finish(state, p)).collect();
            }
            if self.made.is_empty() {
                return true;
            }
            match self.tx.try_send(std::mem::take(&mut self.made)) {
                Ok(()) => {}
                Err(TrySendError::Full(made)) => {
                    self.made = made;
                    return true;
                }
                Err(TrySendError::Disconnected(_)) => return false,
            }
        }
    }
}

/// A batch of items, and the end of the log (or its first error) if the
/// batch reached it.
type Batch<T> = (Vec<T>, Option<Result<(), LogError>>);

/// Reads records until a batch of items is full, keeping the parts `split`
/// keeps; the end of the log or its first error ends the batch early.
/// Bodies are topped up as it goes, so parsing a batch never keeps the
/// consumer waiting for one. None once the consumer is gone.
fn read_batch<S, T, P, B>(
    reader: &mut LogReader,
    split: &impl Fn(&mut S, Record, u64) -> Split<T, P>,
    bodies: &mut Bodies<S, P, B, impl FnMut(&mut S, P) -> B>,
) -> Option<Batch<T>> {
    let mut batch = Vec::with_capacity(BATCH);
    for n in 1.. {
        match reader.next_record() {
            Ok(Some(r)) => match split(&mut bodies.state, r, reader.line_no()) {
                Split::Now(t) => batch.push(t),
                Split::Later(t, p) => {
                    batch.push(t);
                    bodies.kept.push_back(p);
                }
                Split::Skip => {}
            },
            Ok(None) => return Some((batch, Some(Ok(())))),
            Err(e) => return Some((batch, Some(Err(e)))),
        }
        if batch.len() == BATCH {
            break;
        }
        if n % TOP_UP_EVERY == 0 && !bodies.top_up() {
            return None;
        }
    }
    Some((batch, None))
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
    fn hands_over_what_split_makes_in_order() {
        let mut p = Prefetched::spawn(
            log(3000),
            (),
            |_, r, _| match r {
                Record::Request(q) if q.id.n() % 2 == 0 => Split::Now(q.id.n()),
                _ => Split::Skip,
            },
            |_, ()| (),
        )
        .unwrap();
        let mut got = Vec::new();
        while let Some(id) = p.next_item().unwrap() {
            got.push(id);
        }
        assert_eq!(got, (1..=1500).map(|i| i * 2).collect::<Vec<_>>());
    }

    #[test]
    fn bodies_come_in_order_and_are_made_only_shortly_before_they_are_asked_for() {
        let made = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = made.clone();
        let mut p = Prefetched::spawn(
            log(3000),
            0u64,
            |_, r, _| match r {
                Record::Request(q) if q.id.n() % 3 == 0 => Split::Later(q.id.n(), q.id.n() * 10),
                Record::Request(q) => Split::Now(q.id.n()),
                _ => Split::Skip,
            },
            // The state shared with `split` lives on: it counts the bodies.
            move |finished: &mut u64, part: u64| {
                *finished += 1;
                counted.store(*finished as usize, std::sync::atomic::Ordering::Relaxed);
                part + 1
            },
        )
        .unwrap();
        // Every item can be taken before any body: the reader never waits
        // for the consumer to take bodies.
        let items: Vec<u64> = std::iter::from_fn(|| p.next_item().unwrap()).collect();
        assert_eq!(items, (1..=3000).collect::<Vec<_>>());
        let early = made.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            early <= (BODY_BATCHES_AHEAD + 1) * BODIES,
            "{early} bodies made before any was asked for"
        );
        let bodies: Vec<u64> = (0..1000).map(|_| p.next_body().unwrap()).collect();
        assert_eq!(bodies, (1..=1000).map(|i| i * 30 + 1).collect::<Vec<_>>());
        assert!(p.next_body().is_err(), "no body is left");
    }

    #[test]
    fn what_is_given_back_is_dropped_on_the_reader_thread() {
        let (tx, dropped_on) = std::sync::mpsc::channel();
        let mut p = Prefetched::spawn(log(10), (), |_, r, _| Split::<_, ()>::Now(r), |_, ()| ()).unwrap();
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
