//! AWS event-stream framing (`application/vnd.amazon.eventstream`), read
//! with `aws-smithy-eventstream`: each whole frame becomes an event named
//! for what it is (`:event-type`; `exception:` and the exception's type;
//! `error:` and its code), its payload the event's data, so a stream is
//! read by the same machinery as Server-Sent Events.

use crate::wire::sse::{SseEvent, SseItem};
use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::Message;

/// The most of one frame kept while it arrives.
const MAX_FRAME: usize = 16 << 20;

/// Frames being read from a body's chunks.
#[derive(Debug, Default)]
pub struct EventFrames {
    decoder: MessageFrameDecoder,
    buf: bytes::BytesMut,
}

fn header<'m>(m: &'m Message, name: &str) -> &'m str {
    m.headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| h.value().as_string().ok())
        .map_or("", |s| s.as_str())
}

impl EventFrames {
    /// Reads `chunk`: the frames it completes, as events. A frame that
    /// fails its checksum or its bounds, or is longer than [`MAX_FRAME`],
    /// ends the stream (`Err`).
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseItem>, String> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        loop {
            match self.decoder.decode_frame(&mut self.buf) {
                Ok(DecodedFrame::Complete(m)) => {
                    let name = match header(&m, ":message-type") {
                        "exception" => format!("exception:{}", header(&m, ":exception-type")),
                        "error" => format!("error:{}", header(&m, ":error-code")),
                        _ => header(&m, ":event-type").to_string(),
                    };
                    let data = match header(&m, ":message-type") {
                        "error" => header(&m, ":error-message").to_string(),
                        _ => String::from_utf8_lossy(m.payload()).into_owned(),
                    };
                    out.push(SseItem::Event(SseEvent {
                        event: Some(name),
                        data,
                        id: None,
                        raw: None,
                    }));
                }
                // The decoder buffers what a frame's prelude announces, up to 4 GiB.
                Ok(DecodedFrame::Incomplete) if self.buf.len() > MAX_FRAME => {
                    return Err("an event-stream frame over 16 MiB".into())
                }
                Ok(DecodedFrame::Incomplete) => return Ok(out),
                Err(e) => return Err(format!("an event-stream frame that cannot be read: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::{Header, HeaderValue};

    fn frame(kind: &'static str, name_header: &'static str, name: &'static str, payload: &str) -> Vec<u8> {
        let m = Message::new(payload.as_bytes().to_vec())
            .add_header(Header::new(":message-type", HeaderValue::String(kind.into())))
            .add_header(Header::new(name_header, HeaderValue::String(name.into())));
        let mut out = Vec::new();
        write_message_to(&m, &mut out).unwrap();
        out
    }

    /// Frames split anywhere are read whole; an exception is named so; a
    /// corrupt frame ends the stream.
    #[test]
    fn frames_split_anywhere_are_read_as_events() {
        let mut wire = frame(
            "event",
            ":event-type",
            "contentBlockDelta",
            r#"{"delta":{"text":"Hi"}}"#,
        );
        wire.extend(frame(
            "exception",
            ":exception-type",
            "throttlingException",
            r#"{"message":"slow"}"#,
        ));
        let mut f = EventFrames::default();
        let mut got = Vec::new();
        for b in &wire {
            got.extend(f.feed(std::slice::from_ref(b)).unwrap());
        }
        let names: Vec<_> = got
            .iter()
            .map(|i| match i {
                SseItem::Event(e) => (e.event.clone().unwrap(), e.data.clone()),
                SseItem::Comment(_) => unreachable!(),
            })
            .collect();
        assert_eq!(
            names,
            [
                (
                    "contentBlockDelta".to_string(),
                    r#"{"delta":{"text":"Hi"}}"#.to_string()
                ),
                (
                    "exception:throttlingException".to_string(),
                    r#"{"message":"slow"}"#.to_string()
                )
            ]
        );
        let mut bad = frame("event", ":event-type", "x", "{}");
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(EventFrames::default().feed(&bad).is_err());
    }

    /// A prelude announcing a frame past the bound is refused once that
    /// much has come, not buffered further.
    #[test]
    fn a_frame_past_the_bound_ends_the_stream() {
        let mut f = EventFrames::default();
        let mut prelude = (u32::MAX).to_be_bytes().to_vec();
        prelude.extend([0u8; 8]);
        assert!(f.feed(&prelude).is_ok_and(|e| e.is_empty()));
        let mb = vec![0u8; 1 << 20];
        let fed: Vec<bool> = (0..17).map(|_| f.feed(&mb).is_ok()).collect();
        assert_eq!(fed.iter().filter(|ok| **ok).count(), 16, "{fed:?}");
    }
}
