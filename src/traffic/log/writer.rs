//! Recording traffic: the runner's events become traffic-log v1 lines,
//! written by one thread (`--record FILE`).
//!
//! The event subscription is bounded and never drops anything: when the
//! writer falls behind, emitters wait (back-pressure). The writer batches
//! lines, syncs to disk by policy (every write, at most N ms after a write,
//! or when the OS likes, lines reaching the OS within a second), rotates by
//! size, and flushes when the bus closes it. A crash leaves at most a torn
//! last line, which readers skip. A write error stops the recording with a
//! [`EventKind::RecordingFailed`] event at once, and is the run's error at
//! its end; from then on every record is counted as dropped
//! ([`Recorder::dropped`]), with those not yet pushed out when it failed.
//! Message content is recorded only when asked (`full`), or as a hash; auth
//! headers never are.

use super::rate_headers;
use super::{AttemptRec, Header, Key, OperatorRec, OutcomeRec, Record, RequestRec, TransitionRec};
use crate::clock::hash_str;
use crate::runner::agent::answer_key;

use crate::telemetry::events::{Event, EventBus, EventKind};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Events the recorder's channel holds before emitters wait for it.
pub const CHANNEL: usize = 1 << 16;

/// How long written lines wait in the buffer under `--fsync os` at most
/// before they are handed to the OS.
const OS_FLUSH: Duration = Duration::from_secs(1);

/// When the log is synced to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    /// After every record (safest, slowest).
    Always,
    /// At most this long after a record was written.
    Every(Duration),
    /// Left to the operating system.
    Os,
}

impl std::str::FromStr for Fsync {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(Fsync::Always),
            "os" => Ok(Fsync::Os),
            ms => ms
                .parse::<u64>()
                .ok()
                .filter(|m| *m > 0)
                .map(|m| Fsync::Every(Duration::from_millis(m)))
                .ok_or_else(|| format!("`{s}`: use `always`, `os` or a number of milliseconds such as 1000")),
        }
    }
}

/// How much message content is recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RecordedContent {
    /// None (the default: privacy first).
    #[default]
    None,
    /// A hash of the content only.
    Hash,
    /// The messages themselves.
    Full,
}

/// Recording settings.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// Sync policy.
    pub fsync: Fsync,
    /// How much message content is recorded.
    pub content: RecordedContent,
    /// Start a new file past this size (the old one becomes `FILE.1`, `FILE.2`, …).
    pub rotate_bytes: Option<u64>,
}

impl Default for RecordOptions {
    fn default() -> Self {
        Self {
            fsync: Fsync::Every(Duration::from_millis(1000)),
            content: RecordedContent::None,
            rotate_bytes: None,
        }
    }
}

/// What a finished recording wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordStats {
    /// Records written (header lines included).
    pub records: u64,
    /// Files written (more than one after rotation).
    pub files: u32,
}

/// A running recorder; [`Recorder::finish`] after closing the event bus.
pub struct Recorder {
    thread: JoinHandle<io::Result<RecordStats>>,
    dropped: Arc<AtomicU64>,
}

impl Recorder {
    /// Starts writing every event of `bus` from now on to `path`,
    /// beginning with `header`.
    pub fn start(path: &Path, opts: RecordOptions, header: Header, bus: &Arc<EventBus>) -> io::Result<Self> {
        let file = Writer::create(path, header, opts.rotate_bytes)?;
        let events = bus.subscribe_bounded(CHANNEL);
        let bus = bus.clone();
        let dropped = Arc::new(AtomicU64::new(0));
        let lost = dropped.clone();
        let thread = std::thread::Builder::new()
            .name("fusebox-recorder".into())
            .spawn(move || {
                let shown = file.path.display().to_string();
                let done = run(file, opts, &events, &lost);
                if let Err(e) = &done {
                    tracing::error!(path = %shown, "recording stopped: {e}");
                    // Emitted by another thread: this one goes on emptying
                    // the channel, so no emitter waits for it (itself
                    // included) and every record after the failure counts.
                    let failed = EventKind::RecordingFailed {
                        path: shown,
                        error: e.to_string(),
                    };
                    let bus = bus.clone();
                    let announced = std::thread::spawn(move || bus.emit(failed));
                    let salt = Salt::new();
                    for ev in events.iter() {
                        if record_of(&ev, 0, RecordedContent::None, &salt).is_some() {
                            lost.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let _ = announced.join();
                }
                done
            })?;
        Ok(Self { thread, dropped })
    }

    /// Records that could not be written: those not yet pushed out when a
    /// write failed, and every one after (the recording has stopped).
    pub fn dropped(&self) -> Arc<AtomicU64> {
        self.dropped.clone()
    }

    /// Waits until every event sent before the bus closed is written,
    /// flushed and synced.
    pub fn finish(self) -> io::Result<RecordStats> {
        self.thread
            .join()
            .map_err(|_| io::Error::other("the recorder thread panicked"))?
    }
}

struct Writer {
    path: PathBuf,
    out: BufWriter<File>,
    header: Header,
    bytes: u64,
    rotate: Option<u64>,
    stats: RecordStats,
    /// Records not yet pushed out to the OS: lost if a write fails.
    unpushed: u64,
}

impl Writer {
    fn create(path: &Path, header: Header, rotate: Option<u64>) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).write(true).truncate(true).open(path)?;
        let mut w = Self {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 16, file),
            header,
            bytes: 0,
            rotate,
            stats: RecordStats { records: 0, files: 1 },
            unpushed: 0,
        };
        w.line(Record::Header(w.header.clone()))?;
        Ok(w)
    }

    fn line(&mut self, r: Record) -> io::Result<()> {
        // What the reader takes, whatever the record holds.
        let text = super::check::line_of(r);
        self.unpushed += 1;
        self.out.write_all(text.as_bytes())?;
        self.out.write_all(b"\n")?;
        self.bytes += text.len() as u64 + 1;
        self.stats.records += 1;
        Ok(())
    }

    fn write(&mut self, r: Record) -> io::Result<()> {
        if self.rotate.is_some_and(|max| self.bytes >= max) {
            self.sync()?;
            let n = self.stats.files;
            let mut moved = self.path.clone().into_os_string();
            moved.push(format!(".{n}"));
            std::fs::rename(&self.path, PathBuf::from(moved))?;
            let file = File::create(&self.path)?;
            self.out = BufWriter::with_capacity(1 << 16, file);
            self.bytes = 0;
            self.stats.files += 1;
            self.line(Record::Header(self.header.clone()))?;
        }
        self.line(r)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_data()?;
        self.unpushed = 0;
        Ok(())
    }

    /// Pushes buffered lines out as `fsync` asks: to the disk, or to the OS.
    fn push(&mut self, fsync: Fsync) -> io::Result<()> {
        match fsync {
            Fsync::Os => {
                self.out.flush()?;
                self.unpushed = 0;
                Ok(())
            }
            _ => self.sync(),
        }
    }
}

/// When buffered lines are due to be pushed out: the fsync policy as a
/// deadline that starts at the first line written since the last push
/// (apart from the clock, so it is tested without waiting).
#[derive(Debug)]
struct Due {
    fsync: Fsync,
    at: Option<Instant>,
}

impl Due {
    fn new(fsync: Fsync) -> Self {
        Self { fsync, at: None }
    }

    /// A line was written at `now`: whether the lines are due now.
    fn wrote(&mut self, now: Instant) -> bool {
        let within = match self.fsync {
            Fsync::Always => return true,
            Fsync::Every(d) => d,
            Fsync::Os => OS_FLUSH,
        };
        now >= *self.at.get_or_insert(now + within)
    }

    /// How long the writer may wait for more before the lines are due
    /// (None: nothing is waiting).
    fn wait(&self, now: Instant) -> Option<Duration> {
        self.at.map(|at| at.saturating_duration_since(now))
    }

    /// The lines were pushed out.
    fn pushed(&mut self) {
        self.at = None;
    }
}

/// Writes the events of `events` until the bus closes it; on a write
/// error, counts the records it had not pushed out in `dropped`.
fn run(mut w: Writer, opts: RecordOptions, events: &Receiver<Event>, dropped: &AtomicU64) -> io::Result<RecordStats> {
    let done = write_all(&mut w, opts, events);
    if done.is_err() {
        dropped.fetch_add(w.unpushed, Ordering::Relaxed);
    }
    done.map(|()| w.stats)
}

fn write_all(w: &mut Writer, opts: RecordOptions, events: &Receiver<Event>) -> io::Result<()> {
    let mut due = Due::new(opts.fsync);
    let mut last_t = 0u64;
    let salt = Salt::new();
    loop {
        let ev = match due.wait(Instant::now()) {
            None => events.recv().ok(),
            Some(wait) => match events.recv_timeout(wait) {
                Ok(ev) => Some(ev),
                Err(RecvTimeoutError::Timeout) => {
                    w.push(opts.fsync)?;
                    due.pushed();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => None,
            },
        };
        // None: the bus closed the subscription.
        let Some(ev) = ev else { break };
        // Lines are non-decreasing in time even if emitters race.
        last_t = last_t.max(ev.t_ms);
        let Some(r) = record_of(&ev, last_t, opts.content, &salt) else {
            continue;
        };
        w.write(r)?;
        if due.wrote(Instant::now()) {
            w.push(opts.fsync)?;
            due.pushed();
        }
    }
    // A clean end: everything on disk, whatever the policy.
    w.sync()
}

/// A recording's own secret for the cache keys it writes: keys are equal
/// within one recording exactly when the runner's were, and nothing said
/// can be tested against them.
pub struct Salt(ahash::RandomState);

impl Salt {
    /// A new, random salt.
    pub fn new() -> Self {
        Self(ahash::RandomState::new())
    }

    /// `key` as this recording writes it.
    pub fn key(&self, key: u64) -> Key {
        Key(self.0.hash_one(key))
    }
}

impl Default for Salt {
    fn default() -> Self {
        Self::new()
    }
}

/// The log record of an event, if it has one.
pub fn record_of(ev: &Event, t_ms: u64, content: RecordedContent, salt: &Salt) -> Option<Record> {
    // Cache keys, where content is not kept, so a replay's caches hit as the run's did.
    let keyed = content != RecordedContent::Full;
    Some(match &ev.kind {
        EventKind::Request(arrival) => {
            let r = &arrival.request;
            let chars: usize = r.messages.iter().map(|m| m.weight()).sum();
            let text = || {
                r.messages
                    .iter()
                    .map(|m| format!("{}:{}", m.role, m.content.text()))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            Record::Request(RequestRec {
                t_ms,
                id: r.id.into(),
                user: r.user.clone(),
                sub_user: r.sub_user.clone(),
                session: r.session.clone(),
                route: r.route.clone(),
                prompt_tokens: crate::request::tokens_in_chars(chars),
                max_tokens: r.max_tokens,
                tools: r.tools.clone(),
                critical_tools: r.critical_tools.clone(),
                max_steps: (r.max_steps > 0).then_some(r.max_steps),
                messages: (content == RecordedContent::Full).then(|| r.messages.to_vec()),
                content_hash: (content == RecordedContent::Hash).then(|| format!("{:016x}", hash_str(&text()))),
                answer_key: keyed.then(|| salt.key(answer_key(r))),
                via: arrival.via,
                priority: r.priority,
                tenant: r.tenant.clone(),
                choices: r.choices,
                reach: r.reach.clone(),
                stream: r.stream,
            })
        }
        EventKind::Attempt(a) => Record::Attempt(AttemptRec {
            t_ms,
            request: a.request.into(),
            target: a.target.clone(),
            model: a.model.as_deref().map(Into::into),
            status: a.status,
            transport: a.transport,
            latency_ms: a.latency_ms,
            input_tokens: a.input_tokens,
            output_tokens: a.output_tokens,
            headers: rate_headers(&a.rate),
            semantic_failure: a.semantic_failure.clone(),
            tool_calls: a.tool_calls.clone(),
            tool_keys: if keyed {
                a.tool_keys.iter().map(|k| salt.key(*k)).collect()
            } else {
                Vec::new()
            },
            answer: a
                .answer
                .as_deref()
                .filter(|_| content == RecordedContent::Full)
                .map(str::to_string),
            response_id: a.response_id.clone(),
            cut: a.cut,
            cost_usd: a.cut.map(|_| a.cost_usd),
        }),
        EventKind::Outcome(o) => Record::Outcome(OutcomeRec {
            t_ms,
            request: o.request.into(),
            level: o.level,
            chain: o.path(),
            quality: o.quality,
            tokens: o.tokens,
            cost_usd: o.cost_usd,
            missing: o.missing.clone(),
            key: o.key.clone(),
        }),
        EventKind::Transition(t) => Record::Transition(TransitionRec::of(t_ms, t)),
        EventKind::Operator {
            command,
            by,
            applied: true,
            ..
        } => Record::Operator(OperatorRec::of(t_ms, command, by)),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_due_by_policy_from_the_first_unpushed_write() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut every = Due::new(Fsync::Every(Duration::from_millis(100)));
        assert_eq!(every.wait(t0), None, "nothing written, nothing due");
        assert!(!every.wrote(ms(0)));
        assert!(!every.wrote(ms(60)), "the deadline runs from the first write");
        assert_eq!(every.wait(ms(60)), Some(Duration::from_millis(40)));
        assert_eq!(every.wait(ms(150)), Some(Duration::ZERO), "overdue while idle");
        assert!(every.wrote(ms(100)));
        every.pushed();
        assert_eq!(every.wait(ms(100)), None);
        assert!(!every.wrote(ms(120)));
        assert_eq!(every.wait(ms(120)), Some(Duration::from_millis(100)));

        let mut always = Due::new(Fsync::Always);
        assert!(always.wrote(t0));

        let mut os = Due::new(Fsync::Os);
        assert!(!os.wrote(t0));
        assert_eq!(os.wait(t0), Some(OS_FLUSH), "reaches the OS within a second");
    }
}
