//! A streamed answer on its way to the client. The response body drives
//! the call itself: the handler runs it until the answer's first content
//! arrives (then the response starts: status, `x-fusebox-*` headers), and
//! each time the client's connection wants more, the call runs on until it
//! waits for the upstream, and what it wrote meanwhile goes out in one
//! write: as the upstream sent it when that is the client's API,
//! translated otherwise. The stream ends with the upstream's own end, its
//! last chunk carrying `fusebox: {level, chain, quality}`, or, cut, with an
//! error event in the client's API (never a clean end). A client that goes
//! away drops the body, and with it the call; one that stops reading
//! loses it too (`stall.rs`).

use super::client_api::{Client, Writer};
use super::error::GatewayError;
use super::reply::{outcome_headers, respond};
use super::stall::{Call, Watched};
use super::Gateway;
use crate::outcome::Outcome;
use crate::provider::Piece;
use crate::runner::chat::{Chat, ChatEnd, ChatRequest, CutBy};
use crate::runner::stream::{StreamHead, StreamSink};
use crate::wire::{Api, Delta};
use axum::body::Body;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use std::sync::Arc;

/// What the call has written for the client and not yet sent.
#[derive(Default)]
struct Out {
    /// Bytes of the stream, in order.
    bytes: Vec<u8>,
    /// What was known at the first byte, once the stream started.
    head: Option<StreamHead>,
    /// The whole response, when the client's stream never started.
    whole: Option<Response>,
}

type SharedOut = Arc<parking_lot::Mutex<Out>>;

/// What the buffer of a stream's bytes starts with room for.
const FIRST_ROOM: usize = 4 * 1024;

/// The error type a stream cut by `by` ends with, in the client's words.
fn cut_type(by: CutBy) -> &'static str {
    use crate::provider::ErrorKind;
    match by {
        CutBy::Upstream(ErrorKind::Overloaded) => "overloaded_error",
        CutBy::Upstream(ErrorKind::RateLimited) => "rate_limit_error",
        CutBy::Upstream(ErrorKind::Timeout | ErrorKind::Deadline) => "timeout_error",
        CutBy::Upstream(_) => "server_error",
        CutBy::Budget => "budget_exceeded",
    }
}

/// The client's end of a streamed call.
struct ClientSink {
    client: Client,
    n: u64,
    out: SharedOut,
    writer: Option<Writer>,
}

impl ClientSink {
    /// Writes how the call ended: the held end with the outcome in its last
    /// chunk, or an error event; or, when the client's stream never
    /// started, the whole response.
    fn finish(mut self, chat: Chat) {
        // The writer is made when the client's stream starts.
        if self.writer.is_none() {
            self.out.lock().whole = Some(respond(&self.client, self.n, chat, true));
            return;
        }
        let mut out = Vec::new();
        match chat.end {
            ChatEnd::Streamed { tail, .. } => {
                // Sized once: the tail's events as they came, and room for the
                // outcome written into the last.
                let size = tail.iter().map(|(_, p, _)| p.raw.len()).sum::<usize>() + 256;
                let mut end = Vec::with_capacity(size);
                for (kind, p, own) in &tail {
                    encode(&self.client, self.writer.as_mut(), (*kind, p, *own), &mut end);
                }
                let mut o = self.out.lock();
                o.bytes.reserve(end.len() + 256);
                with_meta(&end, &Meta::of(&chat.outcome), &mut o.bytes);
                return;
            }
            ChatEnd::Cut { reason, by } => self.error(cut_type(by), &reason, &mut out),
            _ => {
                let why = chat
                    .outcome
                    .user_message
                    .clone()
                    .unwrap_or_else(|| "the answer ended early".into());
                self.error("server_error", &why, &mut out);
            }
        }
        self.out.lock().bytes.extend_from_slice(&out);
    }

    /// Ends a call the gateway's close cut short: an error event, or, when
    /// the client's stream never started, a 503.
    fn cut_short(mut self) {
        let message = super::closing::CUT;
        if self.writer.is_none() {
            let e = GatewayError::new(self.client.api, StatusCode::SERVICE_UNAVAILABLE, message);
            self.out.lock().whole = Some(e.into_response());
            return;
        }
        let mut out = Vec::new();
        self.error("server_error", message, &mut out);
        self.out.lock().bytes.extend_from_slice(&out);
    }

    fn error(&mut self, kind: &str, message: &str, out: &mut Vec<u8>) {
        if let Some(w) = self.writer.as_mut() {
            w.fail(kind, message, out);
        }
    }
}

impl StreamSink for ClientSink {
    fn start(&mut self, head: StreamHead) {
        self.writer = Some(Writer::new(&self.client, self.n, &head.id, &head.model));
        let mut o = self.out.lock();
        o.head = Some(head);
        // Room for a usual answer's events between the client's reads,
        // not grown to it event by event.
        o.bytes.reserve(FIRST_ROOM);
    }

    fn piece(&mut self, kind: Api, piece: &Piece, own: bool) {
        let mut o = self.out.lock();
        encode(&self.client, self.writer.as_mut(), (kind, piece, own), &mut o.bytes);
    }

    /// A chat completion's chunks name the model that wrote them; the
    /// other APIs name one model, at their start.
    fn resumed_by(&mut self, model: &str) {
        if let Some(w) = self.writer.as_mut() {
            w.rename(model);
        }
    }

    fn backlog(&self) -> usize {
        self.out.lock().bytes.len()
    }
}

/// `p` (of `kind`, `own` when from the first upstream that streamed) in
/// `client`'s API, by its `writer` once its stream started: as the
/// upstream sent it when that is the client's API (bar the usage chunk
/// fusebox asked for and the client did not), else (or when it has no
/// bytes of its own) written anew.
fn encode(client: &Client, writer: Option<&mut Writer>, (kind, p, own): (Api, &Piece, bool), out: &mut Vec<u8>) {
    if p.raw.starts_with(b":") {
        // A keep-alive comment means the same in either API.
        out.extend_from_slice(&p.raw);
        return;
    }
    let Some(w) = writer else { return };
    let api = client.api;
    if own && !p.raw.is_empty() && api.takes_as_sent(kind) {
        p.deltas.iter().for_each(|d| w.observe(d));
        let usage_only = !p.deltas.is_empty() && p.deltas.iter().all(|d| matches!(d, Delta::Usage(_)));
        if !(api == Api::Chat && usage_only && !client.include_usage) {
            out.extend_from_slice(&p.raw);
        }
        return;
    }
    p.deltas.iter().for_each(|d| w.write(d, out));
}

/// The outcome as the last chunk carries it (members in the order a JSON
/// object of them is written: by name).
#[derive(serde::Serialize)]
struct Meta<'a> {
    chain: Chain<'a>,
    level: &'static str,
    quality: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
}

impl<'a> Meta<'a> {
    fn of(o: &'a Outcome) -> Self {
        Self {
            chain: Chain(&o.chain),
            level: o.level.as_str(),
            quality: o.quality,
            request_id: o.key.as_deref(),
        }
    }
}

/// The hops, each as its ASCII text.
struct Chain<'a>(&'a [crate::outcome::Hop]);

impl serde::Serialize for Chain<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        struct Ascii<'h>(&'h crate::outcome::Hop);
        impl serde::Serialize for Ascii<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(&self.0.ascii())
            }
        }
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        self.0.iter().try_for_each(|h| seq.serialize_element(&Ascii(h)))?;
        seq.end()
    }
}

/// `events` with `fusebox: meta` added to the last event whose data is a
/// JSON object (the usage or finish chunk; `message_stop`): written in
/// before the object's closing brace, the rest left as it was; appended
/// to `out`.
fn with_meta(events: &[u8], meta: &impl serde::Serialize, out: &mut Vec<u8>) {
    // The last `data: {…}` line: its closing brace.
    let close = memchr::memmem::rfind_iter(events, b"data: {")
        .find(|&at| at == 0 || events[at - 1] == b'\n')
        .and_then(|start| {
            let line = &events[start..];
            let line = &line[..memchr::memchr(b'\n', line).unwrap_or(line.len())];
            let end = line.iter().rposition(|&b| b == b'}')?;
            Some((
                start + end,
                line.get(6..end)
                    .is_some_and(|inner| inner.iter().any(|b| !b.is_ascii_whitespace() && *b != b'{')),
            ))
        });
    let Some((brace, has_members)) = close else {
        out.extend_from_slice(events);
        return;
    };
    out.extend_from_slice(&events[..brace]);
    if has_members {
        out.push(b',');
    }
    out.extend_from_slice(b"\"fusebox\":");
    // Writing to memory cannot fail.
    let _ = serde_json::to_writer(&mut *out, meta);
    out.extend_from_slice(&events[brace..]);
}

/// The client's stream: runs the call whenever the connection wants more,
/// and hands over what it wrote meanwhile.
struct Drive {
    call: Option<Watched>,
    out: SharedOut,
}

impl futures_util::Stream for Drive {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if self.call.as_ref().is_some_and(|call| call.poll(cx)) {
            self.call = None;
        }
        let mut out = self.out.lock();
        match (out.bytes.is_empty(), self.call.is_some()) {
            (false, _) => {
                // Copied out, the buffer kept for what is written next (not
                // grown again from nothing each time), unless a burst made it
                // larger than a stream holds back.
                let bytes = Bytes::copy_from_slice(&out.bytes);
                out.bytes.clear();
                if out.bytes.capacity() > crate::limits::STREAM_BACKLOG {
                    out.bytes = Vec::new();
                }
                Poll::Ready(Some(Ok(bytes)))
            }
            (true, true) => Poll::Pending,
            (true, false) => Poll::Ready(None),
        }
    }
}

/// Runs `req`, answering with a stream that starts at the answer's first
/// content (or, when none comes, with the whole response).
pub(super) async fn streamed(gw: Arc<Gateway>, client: Client, req: ChatRequest) -> Response {
    let arrived = std::time::Instant::now();
    let api = client.api;
    let out = SharedOut::default();
    let sink = ClientSink {
        client,
        n: req.id,
        out: out.clone(),
        writer: None,
    };
    let runner = gw.runner.clone();
    let closing = gw.closing.clone();
    let mut call: Call = Box::pin(async move {
        let mut sink = sink;
        // Past the gateway's drain time the call is dropped (its outcome
        // counted as for a client that left) and the stream ends on an error.
        let chat = closing.until_cut(runner.chat(req, Some(&mut sink))).await;
        match chat {
            Some(chat) => sink.finish(chat),
            None => sink.cut_short(),
        }
    });
    // Run the call until the stream starts or the call ends.
    let done = std::future::poll_fn(|cx| match call.as_mut().poll(cx) {
        std::task::Poll::Ready(()) => std::task::Poll::Ready(true),
        std::task::Poll::Pending if out.lock().head.is_some() => std::task::Poll::Ready(false),
        std::task::Poll::Pending => std::task::Poll::Pending,
    })
    .await;
    let head = {
        let mut o = out.lock();
        if let Some(whole) = o.whole.take() {
            return whole;
        }
        o.head.take()
    };
    let Some(head) = head else {
        // Every end writes a stream or a response; this is a bug, said so.
        let e = GatewayError::new(
            api,
            StatusCode::INTERNAL_SERVER_ERROR,
            "the call ended without an answer",
        );
        return e.into_response();
    };
    gw.latency.observe(arrived.elapsed());
    let body = Body::from_stream(Drive {
        call: (!done).then(|| gw.stalls.watch(call)),
        out,
    });
    let mut resp = super::event_stream(body);
    let h = resp.headers_mut();
    outcome_headers(h, head.level, &head.chain, Some((head.quality, head.attempts)));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::{Hop, HopEnd};
    use serde_json::json;

    #[test]
    fn the_outcome_is_written_as_a_json_object_of_it_would_be() {
        let hops = [
            Hop {
                name: "gpt-4o".into(),
                end: HopEnd::Failed("503".into()),
                tries: 3,
            },
            Hop {
                name: "claude-é".into(),
                end: HopEnd::Ok,
                tries: 1,
            },
        ];
        for request_id in [None, Some("req-1")] {
            let meta = Meta {
                chain: Chain(&hops),
                level: "fallback",
                quality: 0.85,
                request_id,
            };
            let mut object = json!({"level": "fallback", "chain": hops.iter().map(|h| h.ascii().to_string()).collect::<Vec<_>>(), "quality": 0.85});
            if let Some(id) = request_id {
                object["request_id"] = json!(id);
            }
            assert_eq!(serde_json::to_string(&meta).unwrap(), object.to_string());
        }
    }

    fn with_meta(events: &[u8], meta: &serde_json::Value) -> Vec<u8> {
        let mut out = b"before".to_vec();
        super::with_meta(events, meta, &mut out);
        assert!(out.starts_with(b"before"));
        out.split_off(6)
    }

    #[test]
    fn the_outcome_goes_in_the_last_json_chunk() {
        let events = b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
        let out = String::from_utf8(with_meta(events, &json!({"level": "none"}))).unwrap();
        assert_eq!(
            out,
            "data: {\"a\":1}\n\ndata: {\"b\":2,\"fusebox\":{\"level\":\"none\"}}\n\ndata: [DONE]\n\n"
        );
        let events = b"event: message_delta\ndata: {\"type\":\"message_delta\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let out = String::from_utf8(with_meta(events, &json!(1))).unwrap();
        assert!(
            out.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\",\"fusebox\":1}\n\n"),
            "{out}"
        );
        let out = String::from_utf8(with_meta(b"data: {}\n\n", &json!(2))).unwrap();
        assert_eq!(out, "data: {\"fusebox\":2}\n\n");
    }
}
