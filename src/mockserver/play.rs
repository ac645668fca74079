//! Timed response bodies: a script of byte chunks, each sent at its offset
//! from the request's arrival (tokio time, so a paused clock drives it).

use axum::body::Body;
use bytes::Bytes;
use std::io;
use std::time::Duration;
use tokio::time::Instant;

/// One chunk of a body and when it is due (offset from the request's arrival).
#[derive(Clone, Debug)]
pub(crate) struct Beat {
    /// Due time.
    pub at: Duration,
    /// Bytes to send.
    pub data: Bytes,
}

/// Builds a script: chunks at the current time, and ticks that advance it.
#[derive(Debug)]
pub(crate) struct Timeline {
    beats: Vec<Beat>,
    at: Duration,
    step: Duration,
}

impl Timeline {
    /// A script starting with `beats`, continuing at `start`, each tick `step` apart.
    pub(crate) fn new(beats: Vec<Beat>, start: Duration, step: Duration) -> Self {
        Self { beats, at: start, step }
    }

    /// Sends `data` at the current time.
    pub(crate) fn now(&mut self, data: impl Into<Bytes>) {
        self.beats.push(Beat {
            at: self.at,
            data: data.into(),
        });
    }

    /// Sends `data` at the current time, then advances by one step.
    pub(crate) fn tick(&mut self, data: impl Into<Bytes>) {
        self.now(data);
        self.at += self.step;
    }

    /// The script.
    pub(crate) fn into_beats(self) -> Vec<Beat> {
        self.beats
    }
}

/// Keep-alive `line`s during a stall: one at once, then one a second.
pub(crate) fn keepalives(stall: Duration, line: &'static [u8]) -> Vec<Beat> {
    let mut beats = Vec::new();
    let mut at = Duration::ZERO;
    while at < stall {
        beats.push(Beat {
            at,
            data: Bytes::from_static(line),
        });
        at += Duration::from_secs(1);
    }
    beats
}

/// A body playing `beats` relative to `t0`, then ending (cleanly) at `end` if
/// given. Beats already due when one is sent go with it, in one chunk, as a
/// server that has them all at hand writes them.
pub(crate) fn script_body(t0: Instant, beats: Vec<Beat>, end: Option<Duration>) -> Body {
    let stream = futures_util::stream::unfold((beats.into_iter().peekable(), end), move |(mut it, end)| async move {
        match it.next() {
            Some(b) => {
                // What is due already goes at once, not at the timer's next tick.
                if Instant::now() < t0 + b.at {
                    tokio::time::sleep_until(t0 + b.at).await;
                }
                let due = Instant::now().saturating_duration_since(t0);
                let mut data = b.data;
                if it.peek().is_some_and(|n| n.at <= due) {
                    let mut joined = data.to_vec();
                    while let Some(n) = it.next_if(|n| n.at <= due) {
                        joined.extend_from_slice(&n.data);
                    }
                    data = joined.into();
                }
                Some((Ok::<Bytes, io::Error>(data), (it, end)))
            }
            None => {
                if let Some(e) = end {
                    tokio::time::sleep_until(t0 + e).await;
                }
                None
            }
        }
    });
    Body::from_stream(stream)
}

/// A body that fails at once, making the server abort the connection.
pub(crate) fn failing_body() -> Body {
    Body::from_stream(futures_util::stream::once(async {
        Err::<Bytes, io::Error>(io::Error::new(io::ErrorKind::ConnectionReset, "mock server reset"))
    }))
}

/// `text` in pieces of a few words (each piece keeps its trailing space).
pub(crate) fn text_pieces(text: &str) -> Vec<&str> {
    const WORDS: usize = 3;
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut words = 0;
    for (i, c) in text.char_indices() {
        if c == ' ' {
            words += 1;
            if words == WORDS {
                let end = i + c.len_utf8();
                pieces.push(&text[start..end]);
                start = end;
                words = 0;
            }
        }
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

/// `s` in fragments of at most a dozen bytes (on character boundaries).
pub(crate) fn fragments(s: &str) -> Vec<&str> {
    const LEN: usize = 12;
    let mut out = Vec::new();
    let mut start = 0;
    while start < s.len() {
        let mut end = (start + LEN).min(s.len());
        while !s.is_char_boundary(end) {
            end += 1;
        }
        out.push(&s[start..end]);
        start = end;
    }
    out
}

/// Cuts `s` about halfway, on a character boundary.
pub(crate) fn half(s: &str) -> &str {
    let mut end = s.len() / 2;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_rejoin() {
        let t = "Order #1 is in transit and should arrive";
        let p = text_pieces(t);
        assert_eq!(p.concat(), t);
        assert_eq!(p[0], "Order #1 is ");
        let a = r#"{"order_id":"38291","é":"x"}"#;
        assert_eq!(fragments(a).concat(), a);
        assert!(fragments(a).len() >= 2);
        assert_eq!(fragments(""), Vec::<&str>::new());
        assert!(half("ééé").len() <= 3);
    }

    #[test]
    fn keepalives_every_second() {
        assert_eq!(keepalives(Duration::ZERO, b"x").len(), 0);
        assert_eq!(keepalives(Duration::from_millis(1), b"x").len(), 1);
        assert_eq!(keepalives(Duration::from_millis(2_500), b"x").len(), 3);
    }
}
