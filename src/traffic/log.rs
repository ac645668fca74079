//! Traffic log format v1: one JSON object per line (JSONL), written while
//! serving and read back by replay. See `docs/traffic-log.md`.
//!
//! [`LogReader`] streams a log line by line, reusing one buffer, so memory
//! stays bounded whatever the file size; the only state that grows is the set
//! of request ids seen, needed to reject attempts and outcomes for requests
//! that were never logged. It is a compressed bitmap: ids numbered in order
//! (as fusebox writes them) take a few bytes per thousand, scattered ids up to
//! about 8 bytes each.

use crate::provider::Message;
use crate::runner::outcome::Level;
use crate::runner::request::Via;
use compact_str::CompactString;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read as _};
use std::path::{Path, PathBuf};

/// The format version this module writes and reads.
pub const VERSION: u32 = 1;

/// The operator actions a log may record.
pub const OPERATOR_ACTIONS: [&str; 9] = [
    "force_open",
    "force_closed",
    "disable",
    "reset",
    "freeze_refill",
    "unfreeze_refill",
    "set_fault",
    "drill_on",
    "drill_off",
];

/// The longest line the reader accepts; a longer one is a bad line (and is
/// skipped without being buffered whole), so one runaway line cannot exhaust
/// memory.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// One record (one line of the log).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// The first line: format version, start time and seed.
    Header(Header),
    /// A request entered the runner.
    Request(RequestRec),
    /// One call to a provider or tool on behalf of a request.
    Attempt(AttemptRec),
    /// How a request ended.
    Outcome(OutcomeRec),
    /// A breaker changed state (informational; replay recomputes these).
    Transition(TransitionRec),
    /// An operator command from the console or the control API.
    Operator(OperatorRec),
}

impl Record {
    /// Milliseconds since the start of the log (0 for the header).
    pub fn t_ms(&self) -> u64 {
        match self {
            Record::Header(_) => 0,
            Record::Request(r) => r.t_ms,
            Record::Attempt(r) => r.t_ms,
            Record::Outcome(r) => r.t_ms,
            Record::Transition(r) => r.t_ms,
            Record::Operator(r) => r.t_ms,
        }
    }

    /// Moves the record `by` milliseconds earlier (the header stays).
    fn shift_back(&mut self, by: u64) {
        let t = match self {
            Record::Header(_) => return,
            Record::Request(r) => &mut r.t_ms,
            Record::Attempt(r) => &mut r.t_ms,
            Record::Outcome(r) => &mut r.t_ms,
            Record::Transition(r) => &mut r.t_ms,
            Record::Operator(r) => &mut r.t_ms,
        };
        *t -= by;
    }

    /// The `kind` written on the line.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Header(_) => "header",
            Record::Request(_) => "request",
            Record::Attempt(_) => "attempt",
            Record::Outcome(_) => "outcome",
            Record::Transition(_) => "transition",
            Record::Operator(_) => "operator",
        }
    }

    /// The record as one JSON line, without the trailing newline.
    pub fn to_line(&self) -> String {
        // Serializing these types cannot fail (string keys, derived impls);
        // should it ever, an empty line is written, which readers skip.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The header line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// Format version ([`VERSION`]).
    pub v: u32,
    /// Wall-clock start of the log (RFC 3339).
    pub started_at: String,
    /// The run's seed.
    pub seed: u64,
}

impl Header {
    /// `started_at` in ms since the Unix epoch (None if it does not parse).
    pub fn started_ms(&self) -> Option<u64> {
        let t = humantime::parse_rfc3339_weak(&self.started_at).ok()?;
        Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as u64)
    }
}

/// A request line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestRec {
    /// Milliseconds since the start.
    pub t_ms: u64,
    /// Request id, unique within the log.
    pub id: u64,
    /// User.
    pub user: CompactString,
    /// Session.
    pub session: CompactString,
    /// Route.
    pub route: CompactString,
    /// Prompt size (tokens).
    pub prompt_tokens: u32,
    /// Output cap (tokens).
    pub max_tokens: u32,
    /// Names of the tools available to the agent.
    pub tools: Vec<String>,
    /// Tools without which the answer fails rather than degrades.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub critical_tools: Vec<String>,
    /// Agent step cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// The conversation (only with content recording `full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    /// Hash of the conversation (only with content recording `hash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// Its key in the answer cache, salted (when content is not recorded):
    /// requests share one exactly when they asked the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_key: Option<Key>,
    /// How it came in: the agent loop, the gateway, embeddings.
    #[serde(default, skip_serializing_if = "Via::is_agent")]
    pub via: Via,
}

/// A cache key as a recording keeps it: 16 hex digits of a salted hash,
/// so recorded calls share a key exactly when they shared one, and what
/// they said cannot be recovered from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key(pub u64);

impl Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:016x}", self.0))
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        match u64::from_str_radix(&s, 16) {
            Ok(k) if s.len() == 16 => Ok(Key(k)),
            _ => Err(serde::de::Error::custom(format!("expected 16 hex digits, found `{s}`"))),
        }
    }
}

/// How an attempt failed below HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// No answer in time.
    Timeout,
    /// Could not connect.
    Connect,
    /// Connection reset.
    Reset,
    /// The body or stream ended early.
    Truncated,
}

impl Transport {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Timeout => "timeout",
            Transport::Connect => "connect",
            Transport::Reset => "reset",
            Transport::Truncated => "truncated",
        }
    }
}

/// An attempt line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptRec {
    /// Milliseconds since the start.
    pub t_ms: u64,
    /// The request's id.
    pub request: u64,
    /// `provider:NAME` or `tool:NAME`.
    pub target: CompactString,
    /// Model, for provider attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<CompactString>,
    /// HTTP status, or `None` when there was no response.
    pub status: Option<u16>,
    /// Transport failure, if any.
    pub transport: Option<Transport>,
    /// Time taken.
    pub latency_ms: u64,
    /// Input tokens charged.
    pub input_tokens: u32,
    /// Output tokens charged.
    pub output_tokens: u32,
    /// Rate-limit and retry-after response headers (lower-case names; never auth).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Why a 200 was still a failure (e.g. malformed tool call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic_failure: Option<String>,
    /// Tool names the model asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
    /// Each of those calls' key in the tool result cache, salted (when
    /// content is not recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_keys: Vec<Key>,
}

/// An outcome line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutcomeRec {
    /// Milliseconds since the start.
    pub t_ms: u64,
    /// The request's id.
    pub request: u64,
    /// Degradation level.
    pub level: Level,
    /// The path walked.
    pub chain: Vec<String>,
    /// Estimated quality (0..=1).
    pub quality: f64,
    /// Tokens consumed by all attempts.
    pub tokens: u64,
    /// Cost of all attempts (USD).
    pub cost_usd: f64,
    /// Components that were unavailable.
    pub missing: Vec<String>,
}

/// A breaker transition line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionRec {
    /// Milliseconds since the start.
    pub t_ms: u64,
    /// Breaker name.
    pub breaker: String,
    /// State before.
    pub from: String,
    /// State after.
    pub to: String,
    /// Why.
    pub reason: String,
}

/// An operator command line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperatorRec {
    /// Milliseconds since the start.
    pub t_ms: u64,
    /// One of [`OPERATOR_ACTIONS`].
    pub action: String,
    /// What it applies to (a breaker, provider, tool, ...).
    pub target: String,
    /// Action arguments (e.g. the fault for `set_fault`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Map<String, Value>>,
    /// Who issued it.
    pub by: String,
}

/// Why a log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file could not be opened or read. (The I/O error is part of the
    /// message, not a source, so a report does not say it twice.)
    #[error("{}: {error}", path.display())]
    Io {
        /// The log.
        path: PathBuf,
        /// The underlying error.
        error: io::Error,
    },
    /// The file has no lines.
    #[error("{}: empty log (no lines)", path.display())]
    Empty {
        /// The log.
        path: PathBuf,
    },
    /// A bad line, naming file, line number (1-based) and field (empty when
    /// the line is not a JSON object at all).
    #[error("{}:{line}: {}{message}", path.display(), field_prefix(field))]
    BadLine {
        /// The log.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// The offending field, or empty when the line as a whole is bad.
        field: String,
        /// What is wrong.
        message: String,
    },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("field `{field}`: ")
    }
}

/// A problem with one line: (field, message).
type Bad = (String, String);

fn bad(field: &str, message: impl Into<String>) -> Bad {
    (field.to_string(), message.into())
}

/// What one non-blank line turned out to be.
enum Parsed {
    Record(Record),
    UnknownKind(String),
    NotJson(String),
    Bad(Bad),
}

/// The result of reading one physical line.
enum Read {
    Eof,
    Line { newline: bool, too_long: bool },
}

/// Streaming reader of a traffic log. Reads line by line into one reused
/// buffer, so memory is bounded regardless of file size (apart from the set of
/// request ids seen; see the module docs). After an error the reader is
/// finished and yields nothing more.
pub struct LogReader {
    path: PathBuf,
    reader: Box<dyn BufRead + Send>,
    buf: Vec<u8>,
    /// `buf` holds the first line, read by `open` but not yet processed:
    /// (ended with a newline, too long).
    pending: Option<(bool, bool)>,
    header: Option<Header>,
    skip_bad_lines: bool,
    /// A non-blank line has been consumed (a header is only allowed before).
    started: bool,
    line_no: u64,
    last_t_ms: u64,
    /// Where the log's time starts: 0 with a header, else the first
    /// record's `t_ms` (None until it is read). Records are returned with
    /// times since then; checks use the times as written.
    origin_ms: Option<u64>,
    /// Request ids read so far: compressed, so sequential ids take a few
    /// bytes per thousand and a lookup stays in cache.
    seen_requests: roaring::RoaringTreemap,
    bad_lines: u64,
    unknown_kinds: u64,
    torn_lines: u64,
    warned_kinds: Vec<String>,
    /// Outcome lines are checked but not built or returned.
    check_only_outcomes: bool,
    done: bool,
    /// Segments of the same recording still to read, in order
    /// ([`LogReader::open_all`]).
    more: VecDeque<PathBuf>,
    /// No line of the current segment (after the first) was read yet: its
    /// header, a copy of the first segment's, is skipped.
    segment_start: bool,
}

impl std::fmt::Debug for LogReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogReader")
            .field("path", &self.path)
            .field("line_no", &self.line_no)
            .field("header", &self.header)
            .field("bad_lines", &self.bad_lines)
            .field("unknown_kinds", &self.unknown_kinds)
            .field("torn_lines", &self.torn_lines)
            .finish_non_exhaustive()
    }
}

impl LogReader {
    /// Opens `path`, reading the header eagerly if the first line is one. With
    /// `skip_bad_lines`, bad lines are skipped and counted instead of failing.
    /// An empty file (no non-blank lines) is [`LogError::Empty`].
    pub fn open(path: &Path, skip_bad_lines: bool) -> Result<Self, LogError> {
        let file = File::open(path).map_err(|error| LogError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        Self::from_reader(path, BufReader::with_capacity(64 << 10, file), skip_bad_lines)
    }

    /// Opens the segments of one recording and reads them as one log, in
    /// the order given: `FILE.1 FILE.2 … FILE`, as `--rotate-mb` leaves
    /// them (a request's attempts may be in the segment after its own).
    /// Errors name the segment and its line.
    pub fn open_all(paths: &[PathBuf], skip_bad_lines: bool) -> Result<Self, LogError> {
        let Some((first, rest)) = paths.split_first() else {
            return Err(LogError::Empty { path: PathBuf::new() });
        };
        let mut me = Self::open(first, skip_bad_lines)?;
        me.more = rest.iter().cloned().collect();
        Ok(me)
    }

    /// At the end of a segment: goes on to the next, if any is left.
    fn next_segment(&mut self) -> Result<bool, LogError> {
        let Some(path) = self.more.pop_front() else {
            return Ok(false);
        };
        let file = File::open(&path).map_err(|error| LogError::Io {
            path: path.clone(),
            error,
        })?;
        self.reader = Box::new(BufReader::with_capacity(64 << 10, file));
        self.path = path;
        self.line_no = 0;
        self.segment_start = true;
        Ok(true)
    }

    /// Like [`LogReader::open`] over any buffered reader; `name` is used in
    /// error messages.
    pub fn from_reader(
        name: impl Into<PathBuf>,
        reader: impl BufRead + Send + 'static,
        skip_bad_lines: bool,
    ) -> Result<Self, LogError> {
        let mut me = LogReader {
            path: name.into(),
            reader: Box::new(reader),
            buf: Vec::with_capacity(1024),
            pending: None,
            header: None,
            skip_bad_lines,
            started: false,
            line_no: 0,
            last_t_ms: 0,
            origin_ms: None,
            seen_requests: roaring::RoaringTreemap::new(),
            bad_lines: 0,
            unknown_kinds: 0,
            torn_lines: 0,
            warned_kinds: Vec::new(),
            check_only_outcomes: false,
            done: false,
            more: VecDeque::new(),
            segment_start: false,
        };
        loop {
            match me.read_line()? {
                Read::Eof => return Err(LogError::Empty { path: me.path }),
                Read::Line { .. } if is_blank(&me.buf) => continue,
                Read::Line { newline, too_long } => {
                    if !too_long {
                        if let Ok(Record::Header(h)) = parse_record(&me.buf) {
                            if h.v == VERSION {
                                me.header = Some(h);
                                me.origin_ms = Some(0);
                                me.started = true;
                                return Ok(me);
                            }
                        }
                    }
                    // Processed (and possibly reported) by the first `next_record`.
                    me.pending = Some((newline, too_long));
                    return Ok(me);
                }
            }
        }
    }

    /// Outcome lines are still checked (a bad one is reported as ever) but
    /// not built or returned: a consumer that does not use them saves most
    /// of their cost, a third of a typical log's lines.
    pub fn check_only_outcomes(&mut self) {
        self.check_only_outcomes = true;
    }

    /// The header, if the log has one.
    pub fn header(&self) -> Option<&Header> {
        self.header.as_ref()
    }

    /// The log's path (or the name given to [`LogReader::from_reader`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bad lines skipped (only with `skip_bad_lines`).
    pub fn bad_lines(&self) -> u64 {
        self.bad_lines
    }

    /// Lines of an unknown kind, skipped.
    pub fn unknown_kinds(&self) -> u64 {
        self.unknown_kinds
    }

    /// Torn last lines skipped (0 or 1).
    pub fn torn_lines(&self) -> u64 {
        self.torn_lines
    }

    /// The number of the last line read (1-based; 0 before any).
    pub fn line_no(&self) -> u64 {
        self.line_no
    }

    /// The next record; `Ok(None)` at the end of the log (and after an error).
    /// The header is not returned here; see [`LogReader::header`].
    pub fn next_record(&mut self) -> Result<Option<Record>, LogError> {
        if self.done {
            return Ok(None);
        }
        let out = self.next_inner();
        if !matches!(out, Ok(Some(_))) {
            self.done = true;
        }
        out
    }

    fn next_inner(&mut self) -> Result<Option<Record>, LogError> {
        loop {
            let (newline, too_long) = match self.pending.take() {
                Some(p) => p,
                None => match self.read_line()? {
                    Read::Eof if self.segment_start => {
                        return Err(LogError::Empty {
                            path: self.path.clone(),
                        })
                    }
                    Read::Eof if self.next_segment()? => continue,
                    Read::Eof => return Ok(None),
                    Read::Line { newline, too_long } => (newline, too_long),
                },
            };
            let result = if too_long {
                Parsed::Bad(bad("", format!("line longer than {MAX_LINE_BYTES} bytes")))
            } else if is_blank(&self.buf) {
                continue;
            } else if self.check_only_outcomes && self.outcome_checks_out() {
                self.started = true;
                self.segment_start = false;
                continue;
            } else {
                parse_line(&self.buf)
            };
            let first = !self.started;
            self.started = true;
            let segment_first = std::mem::take(&mut self.segment_start);
            let problem = match result {
                Parsed::Record(Record::Header(h)) if segment_first && h.v == VERSION => continue,
                Parsed::Record(mut rec) => match self.check(&rec, first) {
                    Ok(()) => {
                        self.accept(&rec, first);
                        let origin = *self.origin_ms.get_or_insert(rec.t_ms());
                        if origin > 0 {
                            rec.shift_back(origin);
                        }
                        return Ok(Some(rec));
                    }
                    Err(b) => b,
                },
                Parsed::UnknownKind(mut kind) => {
                    self.unknown_kinds += 1;
                    if let Some((i, _)) = kind.char_indices().nth(64) {
                        kind.truncate(i);
                    }
                    if self.warned_kinds.len() < 16 && !self.warned_kinds.contains(&kind) {
                        tracing::warn!(path = %self.path.display(), line = self.line_no, kind = %kind,
                            "skipping records of unknown kind (written by a newer version?)");
                        self.warned_kinds.push(kind);
                    }
                    continue;
                }
                Parsed::NotJson(msg) if !newline => {
                    // No trailing newline and not JSON: the writer crashed mid-line.
                    self.torn_lines += 1;
                    tracing::warn!(path = %self.path.display(), line = self.line_no, error = %msg,
                        "skipping torn last line");
                    if self.next_segment()? {
                        continue;
                    }
                    return Ok(None);
                }
                Parsed::NotJson(msg) => bad("", format!("not JSON: {msg}")),
                Parsed::Bad(b) => b,
            };
            if self.skip_bad_lines {
                self.bad_lines += 1;
                tracing::debug!(path = %self.path.display(), line = self.line_no, field = %problem.0,
                    message = %problem.1, "skipping bad line");
                continue;
            }
            return Err(LogError::BadLine {
                path: self.path.clone(),
                line: self.line_no,
                field: problem.0,
                message: problem.1,
            });
        }
    }

    /// Whether the line read is a good outcome line (then accepted). When
    /// not, the line goes the usual way, which says what is wrong with it.
    fn outcome_checks_out(&mut self) -> bool {
        let Some(rest) = self.buf.strip_prefix(b"{\"kind\":\"outcome\"") else {
            return false;
        };
        if !rest.starts_with(b",") {
            return false;
        }
        let Some(o) = std::str::from_utf8(&self.buf)
            .ok()
            .and_then(|text| serde_json::from_str::<OutcomeCheck>(text).ok())
        else {
            return false;
        };
        if o.t_ms < self.last_t_ms || !self.seen_requests.contains(o.request) {
            return false;
        }
        self.last_t_ms = o.t_ms;
        true
    }

    /// Checks that need the reader's state: ordering, known requests, header placement.
    fn check(&self, rec: &Record, first: bool) -> Result<(), Bad> {
        if let Record::Header(h) = rec {
            if !first {
                return Err(bad("kind", "a header is only allowed on the first line"));
            }
            if h.v != VERSION {
                return Err(bad(
                    "v",
                    format!("unsupported version {} (this reader reads {VERSION})", h.v),
                ));
            }
            return Ok(());
        }
        let t = rec.t_ms();
        if t < self.last_t_ms {
            return Err(bad("t_ms", format!("goes backwards ({t} after {})", self.last_t_ms)));
        }
        // Times run from the header's start (0), else from the first record.
        let origin = self.origin_ms.unwrap_or(if self.header.is_some() { 0 } else { t });
        if t - origin > MAX_SPAN_MS {
            return Err(bad(
                "t_ms",
                format!(
                    "{t} is {} days after the log's start; a log spans at most {} days (an epoch timestamp where milliseconds since the start belong?)",
                    (t - origin) / 86_400_000,
                    MAX_SPAN_MS / 86_400_000
                ),
            ));
        }
        match rec {
            Record::Request(r) if self.seen_requests.contains(r.id) => {
                Err(bad("id", format!("duplicate request id {}", r.id)))
            }
            Record::Attempt(AttemptRec { request, .. }) | Record::Outcome(OutcomeRec { request, .. })
                if !self.seen_requests.contains(*request) =>
            {
                Err(bad(
                    "request",
                    format!("unknown request {request} (no earlier request line)"),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Updates the reader's state for an accepted record.
    fn accept(&mut self, rec: &Record, first: bool) {
        match rec {
            Record::Header(h) if first => self.header = Some(h.clone()),
            Record::Request(r) => {
                self.seen_requests.insert(r.id);
            }
            _ => {}
        }
        self.last_t_ms = self.last_t_ms.max(rec.t_ms());
    }

    /// Reads one physical line into `buf` (without the `\n` or `\r\n`),
    /// buffering at most [`MAX_LINE_BYTES`].
    fn read_line(&mut self) -> Result<Read, LogError> {
        self.buf.clear();
        if self.buf.capacity() > 1 << 20 {
            // Don't keep a huge buffer around after one long line.
            self.buf.shrink_to(64 << 10);
        }
        // Room for the line and its newline; `read_until` finds it with memchr.
        let limit = MAX_LINE_BYTES as u64 + 1;
        let n = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| self.io_error(source))?;
        if n == 0 {
            return Ok(Read::Eof);
        }
        self.line_no += 1;
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
            return Ok(Read::Line {
                newline: true,
                too_long: false,
            });
        }
        if n as u64 == limit {
            // Too long: drop what was read and discard the rest of the line.
            self.buf.clear();
            self.reader.skip_until(b'\n').map_err(|source| self.io_error(source))?;
            return Ok(Read::Line {
                newline: true,
                too_long: true,
            });
        }
        Ok(Read::Line {
            newline: false,
            too_long: false,
        })
    }

    fn io_error(&self, error: io::Error) -> LogError {
        LogError::Io {
            path: self.path.clone(),
            error,
        }
    }
}

impl Iterator for LogReader {
    type Item = Result<Record, LogError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Parses one non-blank line: the fast path deserializes straight into a
/// [`Record`]; only on failure is the line re-read to say what is wrong.
fn parse_line(line: &[u8]) -> Parsed {
    match parse_record(line) {
        Ok(rec) => match validate(&rec) {
            Ok(()) => Parsed::Record(rec),
            Err(b) => Parsed::Bad(b),
        },
        Err(e) => diagnose(line, e),
    }
}

/// Deserializes a line into a [`Record`]. Lines that start with `{"kind":"NAME"`
/// (as written by [`Record::to_line`]) go straight into the variant's struct,
/// which ignores the `kind` field as unknown; this skips the buffering an
/// internally tagged enum needs and roughly halves the parse time. Anything
/// else goes through the tagged enum.
fn parse_record(line: &[u8]) -> Result<Record, serde_json::Error> {
    /// A line checked as UTF-8 once is parsed as text: serde_json then does
    /// not check every string it reads again.
    fn direct<T: DeserializeOwned>(line: &[u8], wrap: fn(T) -> Record) -> Result<Record, serde_json::Error> {
        match std::str::from_utf8(line) {
            Ok(text) => serde_json::from_str::<T>(text).map(wrap),
            Err(_) => serde_json::from_slice::<T>(line).map(wrap),
        }
    }
    let kind = line
        .strip_prefix(b"{\"kind\":\"")
        .and_then(|rest| rest.iter().position(|&b| b == b'"').map(|end| &rest[..end]));
    match kind {
        Some(b"request") => direct(line, Record::Request),
        Some(b"attempt") => direct(line, Record::Attempt),
        Some(b"outcome") => direct(line, Record::Outcome),
        Some(b"transition") => direct(line, Record::Transition),
        Some(b"operator") => direct(line, Record::Operator),
        Some(b"header") => direct(line, Record::Header),
        _ => serde_json::from_slice::<Record>(line),
    }
}

/// An outcome line read as [`OutcomeRec`] would be (same fields, same
/// types) without building it: strings are checked, not kept.
#[derive(Deserialize)]
struct OutcomeCheck {
    t_ms: u64,
    request: u64,
    #[serde(rename = "level")]
    _level: Level,
    #[serde(rename = "chain")]
    _chain: Strings,
    #[serde(rename = "quality")]
    _quality: f64,
    #[serde(rename = "tokens")]
    _tokens: u64,
    #[serde(rename = "cost_usd")]
    _cost_usd: f64,
    #[serde(rename = "missing")]
    _missing: Strings,
}

/// A list of strings, checked and dropped as it is read.
struct Strings;

impl<'de> Deserialize<'de> for Strings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Seq;
        impl<'de> serde::de::Visitor<'de> for Seq {
            type Value = Strings;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of strings")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Strings, A::Error> {
                while seq.next_element::<Str>()?.is_some() {}
                Ok(Strings)
            }
        }
        d.deserialize_seq(Seq)
    }
}

/// A string, checked and dropped.
struct Str;

impl<'de> Deserialize<'de> for Str {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = Str;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E>(self, _: &str) -> Result<Str, E> {
                Ok(Str)
            }
        }
        d.deserialize_str(Text)
    }
}

/// The longest a log may span: ten years.
pub const MAX_SPAN_MS: u64 = 10 * 365 * 86_400_000;
/// The largest replayed prompt and output cap (tokens): beyond any model's
/// context window.
pub const MAX_TOKENS: u32 = 2_000_000;

/// Checks on one record alone that serde does not make.
fn validate(rec: &Record) -> Result<(), Bad> {
    match rec {
        Record::Request(r) if r.prompt_tokens > MAX_TOKENS => Err(bad(
            "prompt_tokens",
            format!("{} is more than {MAX_TOKENS}", r.prompt_tokens),
        )),
        Record::Request(r) if r.max_tokens > MAX_TOKENS => {
            Err(bad("max_tokens", format!("{} is more than {MAX_TOKENS}", r.max_tokens)))
        }
        Record::Request(r) => {
            let max = crate::limits::MAX_NAME_LEN;
            match [("user", &r.user), ("session", &r.session), ("route", &r.route)]
                .into_iter()
                .find(|(_, n)| n.len() > max)
            {
                Some((field, _)) => Err(bad(field, format!("longer than {max} bytes"))),
                None => Ok(()),
            }
        }
        Record::Operator(op) if !OPERATOR_ACTIONS.contains(&op.action.as_str()) => Err(bad(
            "action",
            format!(
                "unknown action `{}`, expected one of {}",
                op.action,
                OPERATOR_ACTIONS.join(", ")
            ),
        )),
        Record::Operator(op) if op.action == "set_fault" => {
            let spec = op.args.as_ref().and_then(|a| a.get("fault"));
            match spec.map(crate::provider::fault::FaultSpec::deserialize) {
                Some(Ok(f)) => match f.check() {
                    Ok(()) => Ok(()),
                    Err(e) => Err(bad("args.fault", e.to_string())),
                },
                Some(Err(e)) => Err(bad("args.fault", format!("not a fault: {e}"))),
                None => Err(bad(
                    "args.fault",
                    r#"set_fault needs its fault, e.g. {"fault":{"fault":{"type":"status","code":503},"rate":0.5}}"#,
                )),
            }
        }
        Record::Attempt(a) => {
            let name = a
                .target
                .strip_prefix("provider:")
                .or_else(|| a.target.strip_prefix("tool:"));
            match name {
                Some(n) if !n.is_empty() => Ok(()),
                _ => Err(bad(
                    "target",
                    format!("`{}` is not `provider:NAME` or `tool:NAME`", a.target),
                )),
            }
        }
        _ => Ok(()),
    }
}

/// Finds which field of a line that failed to deserialize is at fault.
fn diagnose(line: &[u8], err: serde_json::Error) -> Parsed {
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Parsed::NotJson(describe(&e)),
    };
    let Some(obj) = value.as_object() else {
        return Parsed::Bad(bad("", "not a JSON object"));
    };
    let kind = match obj.get("kind") {
        None => return Parsed::Bad(bad("kind", "missing")),
        Some(Value::String(k)) => k.as_str(),
        Some(other) => return Parsed::Bad(bad("kind", format!("must be a string, not {other}"))),
    };
    let found = match kind {
        "header" => check_header(obj),
        "request" => check_request(obj),
        "attempt" => check_attempt(obj),
        "outcome" => check_outcome(obj),
        "transition" => check_transition(obj),
        "operator" => check_operator(obj),
        _ => return Parsed::UnknownKind(kind.to_string()),
    };
    match found {
        Err(b) => Parsed::Bad(b),
        // Not pinned on one field (e.g. a duplicate key): serde's message,
        // naming the field when it does.
        Ok(()) => {
            let msg = describe(&err);
            let field = msg
                .split_once("field `")
                .and_then(|(_, rest)| rest.split_once('`'))
                .map_or("kind", |(f, _)| f)
                .to_string();
            Parsed::Bad((field, msg))
        }
    }
}

/// serde_json's message, with its position given as a column (the line is
/// always 1 within one log line, which reads oddly next to the file's line).
fn describe(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    if e.line() == 0 {
        return msg;
    }
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match msg.strip_suffix(&suffix) {
        Some(head) => format!("{head} at column {}", e.column()),
        None => msg,
    }
}

/// A required field of type `T`.
fn req<T: DeserializeOwned>(obj: &Map<String, Value>, name: &str) -> Result<(), Bad> {
    match obj.get(name) {
        None => Err(bad(name, "missing")),
        Some(v) => T::deserialize(v).map(drop).map_err(|e| bad(name, e.to_string())),
    }
}

/// An optional field of type `T` (absent is fine).
fn opt<T: DeserializeOwned>(obj: &Map<String, Value>, name: &str) -> Result<(), Bad> {
    match obj.get(name) {
        None => Ok(()),
        Some(v) => T::deserialize(v).map(drop).map_err(|e| bad(name, e.to_string())),
    }
}

fn check_header(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u32>(o, "v")?;
    req::<String>(o, "started_at")?;
    req::<u64>(o, "seed")
}

fn check_request(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u64>(o, "t_ms")?;
    req::<u64>(o, "id")?;
    req::<String>(o, "user")?;
    req::<String>(o, "session")?;
    req::<String>(o, "route")?;
    req::<u32>(o, "prompt_tokens")?;
    req::<u32>(o, "max_tokens")?;
    req::<Vec<String>>(o, "tools")?;
    opt::<Vec<String>>(o, "critical_tools")?;
    opt::<Option<u32>>(o, "max_steps")?;
    opt::<Option<Vec<Message>>>(o, "messages")?;
    opt::<Option<String>>(o, "content_hash")?;
    opt::<Option<Key>>(o, "answer_key")?;
    opt::<Via>(o, "via")
}

fn check_attempt(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u64>(o, "t_ms")?;
    req::<u64>(o, "request")?;
    req::<String>(o, "target")?;
    opt::<Option<String>>(o, "model")?;
    // Always written (possibly null); a missing one reads as null, as serde does.
    opt::<Option<u16>>(o, "status")?;
    opt::<Option<Transport>>(o, "transport")?;
    req::<u64>(o, "latency_ms")?;
    req::<u32>(o, "input_tokens")?;
    req::<u32>(o, "output_tokens")?;
    opt::<BTreeMap<String, String>>(o, "headers")?;
    opt::<Option<String>>(o, "semantic_failure")?;
    opt::<Vec<String>>(o, "tool_calls")?;
    opt::<Vec<Key>>(o, "tool_keys")
}

fn check_outcome(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u64>(o, "t_ms")?;
    req::<u64>(o, "request")?;
    req::<Level>(o, "level")?;
    req::<Vec<String>>(o, "chain")?;
    req::<f64>(o, "quality")?;
    req::<u64>(o, "tokens")?;
    req::<f64>(o, "cost_usd")?;
    req::<Vec<String>>(o, "missing")
}

fn check_transition(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u64>(o, "t_ms")?;
    req::<String>(o, "breaker")?;
    req::<String>(o, "from")?;
    req::<String>(o, "to")?;
    req::<String>(o, "reason")
}

fn check_operator(o: &Map<String, Value>) -> Result<(), Bad> {
    req::<u64>(o, "t_ms")?;
    req::<String>(o, "action")?;
    req::<String>(o, "target")?;
    opt::<Option<Map<String, Value>>>(o, "args")?;
    req::<String>(o, "by")
}
