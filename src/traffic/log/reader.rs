//! Reading a log line by line in bounded memory.

use super::check::{diagnose, validate};
use super::error::{bad, Bad};
use super::ids::Ids;
use super::{AttemptRec, Header, LogError, LogId, OutcomeRec, Record, MAX_LINE_BYTES, MAX_SPAN_MS, VERSION};
use crate::outcome::Level;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read as _};
use std::path::{Path, PathBuf};

/// What one non-blank line turned out to be.
// Made and taken apart once per line: boxing the record would cost an
// allocation per line for nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Parsed {
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
    /// Request ids read so far and the numbers they run under ([`Ids`]).
    ids: Ids,
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
            ids: Ids::default(),
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
                        self.accept(&mut rec, first);
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
        if o.t_ms < self.last_t_ms || self.ids.number_of(&o.request).is_none() {
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
            Record::Request(r) if self.ids.is_read(&r.id) => Err(bad("id", format!("duplicate request id {}", r.id))),
            Record::Attempt(AttemptRec { request, .. }) | Record::Outcome(OutcomeRec { request, .. })
                if self.ids.number_of(request).is_none() =>
            {
                Err(bad(
                    "request",
                    format!("unknown request {request} (no earlier request line)"),
                ))
            }
            _ => Ok(()),
        }
    }

    /// Updates the reader's state for an accepted record, and gives the
    /// request id it names its number.
    fn accept(&mut self, rec: &mut Record, first: bool) {
        match rec {
            Record::Header(h) if first => self.header = Some(h.clone()),
            Record::Request(r) => self.ids.read(&mut r.id),
            Record::Attempt(AttemptRec { request, .. }) | Record::Outcome(OutcomeRec { request, .. }) => {
                // Checked before: the request was read.
                let n = self.ids.number_of(request).unwrap_or_default();
                request.number(n);
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
    request: LogId,
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
