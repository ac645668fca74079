//! Anthropic stream events, read into pieces and written from them, and
//! the error bodies and events.

use super::reply::{n, usage, usage_of};
use crate::wire::reply::{Delta, Finish, Usage};
use serde_json::{json, Value};
use smallvec::SmallVec;

/// An in-band stream error (`event: error`).
pub use crate::wire::openai::StreamError;

/// What a content block of a stream being read is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    Text,
    Tool(u32),
    Other,
}

/// Reads stream events into pieces, remembering which block is which.
#[derive(Debug, Default)]
pub struct EventReader {
    blocks: Vec<Block>,
    tools: u32,
}

/// More blocks than this in one answer are not tracked.
const MAX_BLOCKS: usize = 1024;

impl EventReader {
    /// Reads event `name` with JSON `data`; an `error` event is `Err`.
    pub fn read(&mut self, name: &str, data: &str) -> Result<SmallVec<[Delta; 2]>, StreamError> {
        let mut out = SmallVec::new();
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return Err(StreamError::malformed(data));
        };
        let name = if name.is_empty() {
            v.get("type").and_then(Value::as_str).unwrap_or("")
        } else {
            name
        };
        let index = n(&v, "/index").unwrap_or(0) as usize;
        match name {
            "message_start" => {
                let m = v.get("message").unwrap_or(&Value::Null);
                out.push(Delta::Start {
                    id: m.get("id").and_then(Value::as_str).unwrap_or("").to_string(),
                    model: m.get("model").and_then(Value::as_str).unwrap_or("").to_string(),
                });
                if let Some(u) = m.get("usage") {
                    out.push(Delta::Usage(usage_of(u)));
                }
            }
            "content_block_start" if index < MAX_BLOCKS => {
                let b = v.get("content_block").unwrap_or(&Value::Null);
                let kind = match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        if let Some(t) = b.get("text").and_then(Value::as_str).filter(|t| !t.is_empty()) {
                            out.push(Delta::Text(t.to_string()));
                        }
                        Block::Text
                    }
                    Some("tool_use") => {
                        let i = self.tools;
                        self.tools += 1;
                        out.push(Delta::ToolStart {
                            index: i,
                            id: b.get("id").and_then(Value::as_str).unwrap_or("").to_string(),
                            name: b.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
                        });
                        // Input normally arrives as deltas; a complete input here is kept.
                        if let Some(input) = b.get("input").filter(|x| x.as_object().is_some_and(|o| !o.is_empty())) {
                            out.push(Delta::ToolArgs {
                                index: i,
                                fragment: input.to_string(),
                            });
                        }
                        Block::Tool(i)
                    }
                    _ => {
                        out.push(Delta::OtherBlock);
                        Block::Other
                    }
                };
                while self.blocks.len() <= index {
                    self.blocks.push(Block::Other);
                }
                self.blocks[index] = kind;
            }
            "content_block_delta" => {
                let d = v.get("delta").unwrap_or(&Value::Null);
                let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => out.push(Delta::Text(s("text"))),
                    Some("thinking_delta") => out.push(Delta::Reasoning(s("thinking"))),
                    Some("input_json_delta") => {
                        if let Some(Block::Tool(i)) = self.blocks.get(index) {
                            out.push(Delta::ToolArgs {
                                index: *i,
                                fragment: s("partial_json"),
                            });
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(f) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    out.push(Delta::Finish(Finish::from_anthropic(f)));
                }
                if let Some(u) = v.get("usage") {
                    out.push(Delta::Usage(usage_of(u)));
                }
            }
            "message_stop" => out.push(Delta::Done),
            "error" => {
                return Err(StreamError {
                    kind: v
                        .pointer("/error/type")
                        .and_then(Value::as_str)
                        .unwrap_or("api_error")
                        .to_string(),
                    message: v
                        .pointer("/error/message")
                        .and_then(Value::as_str)
                        .unwrap_or("error event in stream")
                        .to_string(),
                })
            }
            _ => {}
        }
        Ok(out)
    }
}

/// Writes pieces as stream events, opening and closing content blocks.
#[derive(Debug)]
pub struct EventWriter {
    id: String,
    model: String,
    started: bool,
    /// The open block and its index.
    open: Option<(Block, usize)>,
    next: usize,
    /// Block index of each tool call.
    tool_blocks: Vec<usize>,
    usage: Usage,
    finish: Option<Finish>,
    /// The upstream's own `message_delta` went out (passed on as sent):
    /// the end writes only `message_stop`.
    delta_sent: bool,
}

/// `event: NAME` with `data` as one SSE event.
pub fn event(name: &str, data: &Value, out: &mut Vec<u8>) {
    crate::wire::sse::write_json(Some(name), data, out);
}

/// The `ping` event.
pub const PING: &[u8] = b"event: ping\ndata: {\"type\": \"ping\"}\n\n";

impl EventWriter {
    /// A writer of a message with `id` and `model`.
    pub fn new(id: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            model: model.into(),
            started: false,
            open: None,
            next: 0,
            tool_blocks: Vec::new(),
            usage: Usage::default(),
            finish: None,
            delta_sent: false,
        }
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let m = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": usage(Usage { output: self.usage.output.max(1), ..self.usage }),
        });
        event("message_start", &json!({"type": "message_start", "message": m}), out);
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((_, i)) = self.open.take() {
            event(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": i}),
                out,
            );
        }
    }

    fn open(&mut self, kind: Block, block: Value, out: &mut Vec<u8>) -> usize {
        self.close(out);
        let i = self.next;
        self.next += 1;
        event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": i, "content_block": block}),
            out,
        );
        if i == 0 {
            out.extend_from_slice(PING);
        }
        self.open = Some((kind, i));
        i
    }

    fn text(&mut self, t: &str, out: &mut Vec<u8>) {
        let i = match self.open {
            Some((Block::Text, i)) => i,
            _ => self.open(Block::Text, json!({"type": "text", "text": ""}), out),
        };
        let d = json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": t}});
        event("content_block_delta", &d, out);
    }

    /// Takes `d` as written elsewhere (an event passed on as the upstream
    /// sent it), so what this writer writes next follows on from it: its
    /// blocks are numbered after those, its text continues an open block.
    pub fn observe(&mut self, d: &Delta) {
        let mut scratch = Vec::new();
        self.delta_sent |= matches!(d, Delta::Finish(_));
        if let Delta::OtherBlock = d {
            self.start(&mut scratch);
            self.open(Block::Other, Value::Null, &mut scratch);
        }
        self.write(d, &mut scratch);
    }

    /// Writes `d` to `out`.
    pub fn write(&mut self, d: &Delta, out: &mut Vec<u8>) {
        if let Delta::Usage(u) = d {
            self.usage.merge(u);
            return;
        }
        self.start(out);
        match d {
            // Its content is not known here: only a block passed on as sent
            // (see `observe`) is written.
            Delta::Start { .. } | Delta::Usage(_) | Delta::OtherBlock => {}
            Delta::Reasoning(t) => {
                let i = match self.open {
                    Some((Block::Other, i)) => i,
                    _ => self.open(Block::Other, json!({"type": "thinking", "thinking": ""}), out),
                };
                let d = json!({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": t}});
                event("content_block_delta", &d, out);
            }
            Delta::Text(t) | Delta::Refusal(t) => self.text(t, out),
            // A call's start said again (some servers repeat it in every
            // chunk) opens no second block.
            Delta::ToolStart { index, .. }
                if self.tool_blocks.get(*index as usize).is_some_and(|&b| b != usize::MAX) => {}
            Delta::ToolStart { index, id, name } => {
                let block = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                let b = self.open(Block::Tool(*index), block, out);
                let i = *index as usize;
                if i < MAX_BLOCKS {
                    self.tool_blocks.resize(self.tool_blocks.len().max(i + 1), usize::MAX);
                    self.tool_blocks[i] = b;
                }
            }
            Delta::ToolArgs { index, fragment } => {
                let Some(&b) = self.tool_blocks.get(*index as usize).filter(|&&b| b != usize::MAX) else {
                    return;
                };
                let d = json!({"type": "content_block_delta", "index": b,
                               "delta": {"type": "input_json_delta", "partial_json": fragment}});
                event("content_block_delta", &d, out);
            }
            Delta::Finish(f) => self.finish = Some(*f),
            Delta::Done if self.delta_sent => event("message_stop", &json!({"type": "message_stop"}), out),
            Delta::Done => {
                self.close(out);
                if self.next == 0 {
                    out.extend_from_slice(PING);
                }
                let finish = self.finish.unwrap_or(if self.tool_blocks.is_empty() {
                    Finish::Stop
                } else {
                    Finish::ToolCalls
                });
                let delta = json!({
                    "type": "message_delta",
                    "delta": {"stop_reason": finish.anthropic(), "stop_sequence": null},
                    "usage": usage(self.usage),
                });
                event("message_delta", &delta, out);
                event("message_stop", &json!({"type": "message_stop"}), out);
            }
        }
    }
}

/// The error type for an HTTP status.
pub fn error_type(code: u16) -> &'static str {
    match code {
        400 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The error body for an HTTP status: `{"type":"error","error":{"type","message"}}`.
pub fn error(code: u16, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type(code), "message": message}})
}

/// An in-band `error` event ending a stream that had started.
pub fn error_event(kind: &str, message: &str, out: &mut Vec<u8>) {
    event(
        "error",
        &json!({"type": "error", "error": {"type": kind, "message": message}}),
        out,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::sse::data_of as events;
    use serde_json::json;

    #[test]
    fn blocks_passed_on_unread_keep_their_places_for_what_is_written_next() {
        let upstream = [
            json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 5, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "thinking", "thinking": ""}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "thinking_delta", "thinking": "Look it up."}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "signature_delta", "signature": "sig"}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "Order 38100 is"}}),
        ];
        let mut reader = EventReader::default();
        let mut writer = EventWriter::new("msg_1", "claude");
        for e in &upstream {
            let name = e["type"].as_str().unwrap();
            for d in reader.read(name, &e.to_string()).unwrap() {
                writer.observe(&d);
            }
        }
        // The answer goes on (a resumed hop): in the open text block, then
        // in a block after all four the client has.
        let mut out = Vec::new();
        writer.write(&Delta::Text(" in transit.".into()), &mut out);
        let call = Delta::ToolStart {
            index: 0,
            id: "toolu_1".into(),
            name: "get_order".into(),
        };
        writer.write(&call, &mut out);
        let got: Vec<(String, u64)> = events(&out)
            .iter()
            .map(|e| (e["type"].as_str().unwrap().to_string(), e["index"].as_u64().unwrap()))
            .collect();
        let want = [
            ("content_block_delta", 3),
            ("content_block_stop", 3),
            ("content_block_start", 4),
        ];
        assert_eq!(got, want.map(|(t, i)| (t.to_string(), i)));
    }
}
