//! Server-Sent Events: the one writer every stream fusebox sends goes
//! through, and an incremental parser following the WHATWG
//! `text/event-stream` rules, fed with arbitrary byte chunks.
//!
//! Lines end with CRLF, LF or CR (a CRLF may be split across chunks); a
//! leading UTF-8 BOM is skipped; invalid UTF-8 is replaced lossily. Memory is
//! bounded: a line, or the data of one event, longer than the configured
//! maximum is an error. An event read whole from one chunk in the form the
//! writer writes keeps its bytes, so a proxy passes it on without writing
//! it again.

use std::borrow::Cow;
use std::collections::VecDeque;

/// Writes one event: `event: NAME` where given, a `data:` line per line
/// of `data` (as the format requires of data with newlines), a blank line.
pub fn write_event(name: Option<&str>, data: &str, out: &mut Vec<u8>) {
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    let mut rest = data.as_bytes();
    loop {
        let (line, more) = match memchr::memchr(b'\n', rest) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.push(b'\n');
        match more {
            Some(more) => rest = more,
            None => break,
        }
    }
    out.push(b'\n');
}

/// Writes `v` as one event's data, in JSON (one line: JSON text holds no
/// raw newline).
pub fn write_json(name: Option<&str>, v: &impl serde::Serialize, out: &mut Vec<u8>) {
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    // Writing to memory fails only for a value JSON cannot hold (a map
    // with non-string keys), which fusebox never writes.
    let _ = serde_json::to_writer(&mut *out, v);
    out.extend_from_slice(b"\n\n");
}

/// Default maximum length of one line (and of one event's data): 8 MiB.
pub const DEFAULT_MAX_LINE: usize = 8 * 1024 * 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";
/// Line buffers up to this capacity are reused between lines.
const KEEP_LINE_CAPACITY: usize = 64 * 1024;

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` when absent or empty (the spec's `message`).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The last event ID (it persists across events, as per spec; an empty
    /// `id:` resets it to `None`).
    pub id: Option<String>,
    /// The event's bytes as they came, where they are what [`write_event`]
    /// writes for it (read from one chunk by [`SseParser::feed_bytes`]), so
    /// it is passed on without being written again.
    pub raw: Option<bytes::Bytes>,
}

/// What the parser yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseItem {
    /// A dispatched event.
    Event(SseEvent),
    /// A comment line (`: keep-alive`): the text after `:`, one leading space stripped.
    Comment(String),
}

/// An event or comment as the parser dispatches it, borrowed from the
/// parser's buffers (a reader that decodes it at once copies nothing).
#[derive(Debug)]
pub enum ItemRef<'a> {
    /// A dispatched event.
    Event(EventRef<'a>),
    /// A comment line: the text after `:`, one leading space stripped.
    Comment(Cow<'a, str>),
}

/// A dispatched event, borrowed; see [`SseEvent`] for its fields.
#[derive(Debug)]
pub struct EventRef<'a> {
    /// The `event:` field; `None` when absent or empty.
    pub event: Option<&'a str>,
    /// The `data:` lines joined with `\n`.
    pub data: &'a str,
    /// The last event ID.
    pub id: Option<&'a str>,
    /// The event's bytes as they came, as [`SseEvent::raw`].
    pub raw: Option<bytes::Bytes>,
}

impl ItemRef<'_> {
    /// The item, owned.
    pub fn owned(&self) -> SseItem {
        match self {
            ItemRef::Event(e) => SseItem::Event(SseEvent {
                event: e.event.map(str::to_owned),
                data: e.data.to_owned(),
                id: e.id.map(str::to_owned),
                raw: e.raw.clone(),
            }),
            ItemRef::Comment(c) => SseItem::Comment(c.clone().into_owned()),
        }
    }
}

impl<'a> From<&'a SseItem> for ItemRef<'a> {
    fn from(item: &'a SseItem) -> Self {
        match item {
            SseItem::Event(e) => ItemRef::Event(EventRef {
                event: e.event.as_deref(),
                data: &e.data,
                id: e.id.as_deref(),
                raw: e.raw.clone(),
            }),
            SseItem::Comment(c) => ItemRef::Comment(Cow::Borrowed(c)),
        }
    }
}

/// Why the parser gave up on a stream.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SseError {
    /// A line was longer than the limit (bytes, excluding its terminator).
    #[error("SSE line longer than {limit} bytes")]
    LineTooLong {
        /// The configured limit.
        limit: usize,
    },
    /// The data of one event grew beyond the limit (bytes).
    #[error("SSE event data longer than {limit} bytes")]
    EventTooLarge {
        /// The configured limit.
        limit: usize,
    },
}

/// An incremental SSE parser; see the module docs.
///
/// After an error the parser refuses further input (every `feed` returns the
/// same error) until [`SseParser::finish`] resets it.
#[derive(Clone, Debug)]
pub struct SseParser {
    max_line: usize,
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The previous chunk ended with CR: a leading LF of the next one belongs to it.
    after_cr: bool,
    /// No line has been completed yet (the BOM check is still due).
    first_line: bool,
    /// Data buffer: each `data` value followed by `\n` (its allocation
    /// kept from event to event).
    data: String,
    /// Event type buffer (empty: none).
    event: String,
    /// Last event ID buffer.
    id: Option<String>,
    /// A field line was seen since the last blank line.
    pending: bool,
    /// The error that stopped the parser.
    failed: Option<SseError>,
    /// What the last `finish` found.
    partial: bool,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with the default 8 MiB line limit.
    pub fn new() -> Self {
        Self::with_max_line(DEFAULT_MAX_LINE)
    }

    /// A parser whose lines (and event data) may not exceed `max` bytes.
    pub fn with_max_line(max: usize) -> Self {
        Self {
            max_line: max,
            line: Vec::new(),
            after_cr: false,
            first_line: true,
            data: String::new(),
            event: String::new(),
            id: None,
            pending: false,
            failed: None,
            partial: false,
        }
    }

    /// Parses the next chunk of the stream; chunks may split anywhere.
    ///
    /// On error the items parsed from this chunk are dropped: the stream
    /// should be abandoned.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseItem>, SseError> {
        let mut out = Vec::new();
        self.feed_with(chunk, None, &mut |item| out.push(item.owned()))?;
        Ok(out)
    }

    /// [`SseParser::feed`], adding to `out`; an event read whole from
    /// `chunk` in the form [`write_event`] writes keeps its bytes (a slice
    /// of `chunk`, no copy) as [`SseEvent::raw`].
    pub fn feed_bytes(&mut self, chunk: &bytes::Bytes, out: &mut VecDeque<SseItem>) -> Result<(), SseError> {
        let before = out.len();
        self.feed_each(chunk, |item| out.push_back(item.owned()))
            .inspect_err(|_| out.truncate(before))
    }

    /// [`SseParser::feed_bytes`], each item handed to `emit` as it is
    /// dispatched, borrowed (nothing copied for a reader that decodes it
    /// at once). On error, what was handed over from this chunk is to be
    /// dropped.
    pub fn feed_each(&mut self, chunk: &bytes::Bytes, mut emit: impl FnMut(ItemRef<'_>)) -> Result<(), SseError> {
        self.feed_with(chunk, Some(chunk), &mut emit)
    }

    fn feed_with(
        &mut self,
        chunk: &[u8],
        whole: Option<&bytes::Bytes>,
        emit: &mut impl FnMut(ItemRef<'_>),
    ) -> Result<(), SseError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.feed_inner(chunk, whole, emit).inspect_err(|e| {
            self.line = Vec::new();
            self.data = String::new();
            self.failed = Some(e.clone());
        })
    }

    fn feed_inner(
        &mut self,
        chunk: &[u8],
        whole: Option<&bytes::Bytes>,
        emit: &mut impl FnMut(ItemRef<'_>),
    ) -> Result<(), SseError> {
        let mut rest = chunk;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        // Where in `chunk` the pending event began, while every line of it
        // came from `chunk` as `write_event` writes it; and whether it has
        // a `data:` line yet.
        let mut verbatim: Option<(usize, bool)> = None;
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', rest) {
            let (body, tail) = rest.split_at(pos);
            if self.line.is_empty() {
                self.check_len(body.len())?;
                let start = chunk.len() - rest.len();
                let fresh = !self.pending;
                // The bytes of the event this line ends, if it ends one as
                // written by `write_event`.
                let raw = match (body.is_empty(), tail[0], verbatim, whole) {
                    (true, b'\n', Some((from, true)), Some(whole)) => Some(whole.slice(from..start + 1)),
                    _ => None,
                };
                let line = self.process_line(body, raw, emit)?;
                verbatim = match (line, verbatim, tail[0]) {
                    (_, _, b'\r') | (Line::Blank, _, _) => None,
                    (Line::Data, Some((from, _)), _) => Some((from, true)),
                    (Line::Data, None, _) if fresh => Some((start, true)),
                    (Line::Event, None, _) if fresh => Some((start, false)),
                    _ => None,
                };
            } else {
                verbatim = None;
                self.check_len(self.line.len() + body.len())?;
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(body);
                let r = self.process_line(&line, None, emit);
                // Keep the allocation, unless an unusually long line inflated it.
                if line.capacity() <= KEEP_LINE_CAPACITY {
                    line.clear();
                    self.line = line;
                }
                r?;
            }
            // `tail` starts with the terminator.
            let cr = tail.first() == Some(&b'\r');
            rest = &tail[1..];
            if cr {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        if !rest.is_empty() {
            self.check_len(self.line.len() + rest.len())?;
            self.line.extend_from_slice(rest);
        }
        Ok(())
    }

    fn check_len(&self, len: usize) -> Result<(), SseError> {
        if len > self.max_line {
            Err(SseError::LineTooLong { limit: self.max_line })
        } else {
            Ok(())
        }
    }

    /// Handles one complete line (without terminator), saying what it was;
    /// `raw` is the event's bytes as they came, where a blank line ends one
    /// written as `write_event` writes it.
    fn process_line(
        &mut self,
        mut line: &[u8],
        raw: Option<bytes::Bytes>,
        emit: &mut impl FnMut(ItemRef<'_>),
    ) -> Result<Line, SseError> {
        let mut bom = false;
        if self.first_line {
            self.first_line = false;
            bom = line.starts_with(BOM);
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        if line.is_empty() {
            self.dispatch(raw, emit);
            return Ok(Line::Blank);
        }
        if let Some(text) = line.strip_prefix(b":") {
            let text = text.strip_prefix(b" ").unwrap_or(text);
            emit(ItemRef::Comment(lossy_str(text)));
            return Ok(Line::Other);
        }
        self.pending = true;
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        // Written as `write_event` writes it: `NAME: VALUE`, text as it was.
        let spaced = line.get(field.len() + 1) == Some(&b' ') && !bom;
        match field {
            b"data" => {
                let value = lossy_str(value);
                if self.data.len() + value.len() + 1 > self.max_line {
                    return Err(SseError::EventTooLarge { limit: self.max_line });
                }
                // Room for the line and its `\n` at once (an event's one line, as a rule).
                self.data.reserve(value.len() + 1);
                self.data.push_str(&value);
                self.data.push('\n');
                if spaced && matches!(value, Cow::Borrowed(_)) {
                    return Ok(Line::Data);
                }
            }
            b"event" => {
                let value = lossy_str(value);
                let named = spaced && !value.is_empty() && matches!(value, Cow::Borrowed(_));
                self.event.clear();
                self.event.push_str(&value);
                if named {
                    return Ok(Line::Event);
                }
            }
            // Per spec an ID containing NUL is ignored.
            b"id" if !value.contains(&0) => self.id = (!value.is_empty()).then(|| lossy(value)),
            // `retry`, unknown fields and NUL-bearing IDs are ignored.
            _ => {}
        }
        Ok(Line::Other)
    }

    /// A blank line: dispatches the buffered event, if any.
    fn dispatch(&mut self, raw: Option<bytes::Bytes>, emit: &mut impl FnMut(ItemRef<'_>)) {
        self.pending = false;
        if self.data.is_empty() && self.event.is_empty() {
            return;
        }
        let data = self.data.strip_suffix('\n').unwrap_or(&self.data);
        emit(ItemRef::Event(EventRef {
            event: (!self.event.is_empty()).then_some(self.event.as_str()),
            data,
            id: self.id.as_deref(),
            raw,
        }));
        self.event.clear();
        // Keep the allocation, unless an unusually large event inflated it.
        if self.data.capacity() <= KEEP_LINE_CAPACITY {
            self.data.clear();
        } else {
            self.data = String::new();
        }
    }

    /// Ends the stream. An unterminated last line is still processed (so a
    /// trailing comment is reported), but an event without its terminating
    /// blank line is discarded, as per spec; [`SseParser::had_partial_event`]
    /// tells whether that happened. The parser is then reset for a new stream.
    pub fn finish(&mut self) -> Vec<SseItem> {
        let mut out = Vec::new();
        if self.failed.is_none() && !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            // The line was length-checked when buffered; a data overflow here
            // only concerns the event about to be discarded, so it is moot.
            let _ = self.process_line(&line, None, &mut |item| out.push(item.owned()));
        }
        // A field line (even the cut last one) not followed by a blank line.
        let partial = self.pending || self.failed.is_some();
        *self = Self::with_max_line(self.max_line);
        self.partial = partial;
        out
    }

    /// Whether the last [`SseParser::finish`] discarded a pending event or a
    /// cut line (the stream ended mid-event), or the parser had failed.
    pub fn had_partial_event(&self) -> bool {
        self.partial
    }
}

/// What a line was, for telling whether an event came as `write_event`
/// writes it.
enum Line {
    /// The blank line that ends an event.
    Blank,
    /// `data: VALUE`, the value valid UTF-8.
    Data,
    /// `event: NAME`, the name valid UTF-8 and not empty.
    Event,
    /// Anything else (a field written otherwise, a comment, `id`, `retry`).
    Other,
}

fn lossy(b: &[u8]) -> String {
    lossy_str(b).into_owned()
}

/// `b` as text, invalid UTF-8 replaced. Valid text (all but always) is
/// checked by the word-at-a-time validation rather than the lossy
/// reader's byte-at-a-time one.
fn lossy_str(b: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(b) {
        Ok(s) => s.into(),
        Err(_) => String::from_utf8_lossy(b),
    }
}

/// The `data` of each event in `out`, read as JSON (for tests of writers).
#[cfg(test)]
pub(crate) fn data_of(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(out)
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[cfg(test)]
mod writer_tests {
    use super::*;

    #[test]
    fn what_the_writer_writes_the_parser_reads_back_as_it_was() {
        let mut out = Vec::new();
        write_event(Some("delta"), "line one\nline two", &mut out);
        write_json(None, &serde_json::json!({"a": "b\nc"}), &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "event: delta\ndata: line one\ndata: line two\n\ndata: {\"a\":\"b\\nc\"}\n\n"
        );
        let events = SseParser::new().feed(&out).unwrap();
        let data: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                SseItem::Event(e) => Some((e.event.as_deref(), e.data.as_str())),
                SseItem::Comment(_) => None,
            })
            .collect();
        assert_eq!(
            data,
            vec![(Some("delta"), "line one\nline two"), (None, "{\"a\":\"b\\nc\"}")]
        );
    }
}
