//! Chat-completion stream chunks, read into pieces and written from them,
//! and the error bodies and chunks.

use super::reply::usage;
use super::Frame;
use crate::wire::reply::{Delta, Finish, Usage};
use serde_json::{json, Value};
use smallvec::SmallVec;
use std::borrow::Cow;

/// An in-band stream error: the message and the error's type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamError {
    /// The error's type or code (`server_error`, `overloaded_error`, …).
    pub kind: String,
    /// What the upstream said.
    pub message: String,
}

impl StreamError {
    /// The kind of an event whose data cannot be read.
    pub const MALFORMED: &'static str = "malformed_event";

    /// An event whose `data` cannot be read (not JSON, or not an event of
    /// the API's stream).
    pub fn malformed(data: &str) -> Self {
        let mut end = data.len().min(80);
        while !data.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            kind: Self::MALFORMED.into(),
            message: format!("an event that cannot be read: {}", &data[..end]),
        }
    }

    /// Whether the event could not be read (rather than said an error).
    pub fn is_malformed(&self) -> bool {
        self.kind == Self::MALFORMED
    }
}

/// A stream chunk, as much of it as is read (the rest is skipped unparsed).
#[derive(serde::Deserialize)]
struct ChunkIn<'a> {
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    model: Option<Cow<'a, str>>,
    /// The first choice (a chunk carries one; any more are skipped unread).
    #[serde(default, borrow, deserialize_with = "crate::wire::text::first")]
    choices: Option<ChoiceIn<'a>>,
    #[serde(default)]
    usage: Option<UsageIn>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(serde::Deserialize)]
struct UsageIn {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<CachedIn>,
    /// DeepSeek's count of prompt tokens served from its cache.
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(serde::Deserialize)]
struct CachedIn {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl UsageIn {
    fn usage(&self) -> Option<Usage> {
        let n = |v: Option<u64>| v.map(|v| v.min(u64::from(u32::MAX)) as u32);
        Some(Usage {
            input: n(self.prompt_tokens)?,
            output: n(self.completion_tokens).unwrap_or(0),
            cached_input: n(self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens))
                .or(n(self.prompt_cache_hit_tokens))
                .unwrap_or(0),
        })
    }
}

#[derive(serde::Deserialize)]
struct ChoiceIn<'a> {
    #[serde(default, borrow)]
    delta: Option<DeltaIn<'a>>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct DeltaIn<'a> {
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    role: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    refusal: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<CallIn<'a>>>,
}

#[derive(serde::Deserialize)]
struct CallIn<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionIn<'a>>,
    /// A custom tool's call: its input is free text.
    #[serde(default, borrow)]
    custom: Option<CustomIn<'a>>,
}

#[derive(serde::Deserialize)]
struct CustomIn<'a> {
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    input: Option<Cow<'a, str>>,
}

#[derive(serde::Deserialize)]
struct FunctionIn<'a> {
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    arguments: Option<Cow<'a, str>>,
}

/// Reads one stream chunk (`data:` of an SSE event) into pieces; an
/// in-band error chunk is `Err`.
pub fn decode_chunk(data: &str) -> Result<SmallVec<[Delta; 2]>, StreamError> {
    let mut out = SmallVec::new();
    if data.trim() == "[DONE]" {
        out.push(Delta::Done);
        return Ok(out);
    }
    let Ok(c) = serde_json::from_str::<ChunkIn>(data) else {
        return Err(StreamError::malformed(data));
    };
    if let Some(err) = c.error.filter(|e| !e.is_null()) {
        return Err(StreamError {
            kind: err
                .get("type")
                .or_else(|| err.get("code"))
                .and_then(Value::as_str)
                .unwrap_or("server_error")
                .to_string(),
            message: err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("error event in stream")
                .to_string(),
        });
    }
    let (delta, finish) = match c.choices {
        Some(ch) => (ch.delta, ch.finish_reason),
        None => (None, None),
    };
    if let Some(d) = delta {
        if d.role.is_some() {
            out.push(Delta::Start {
                id: c.id.unwrap_or_default().into_owned(),
                model: c.model.unwrap_or_default().into_owned(),
            });
        }
        for (t, make) in [
            (d.content, Delta::Text as fn(String) -> Delta),
            (d.reasoning_content, Delta::Reasoning),
            (d.refusal, Delta::Refusal),
        ] {
            if let Some(t) = t.filter(|t| !t.is_empty()) {
                out.push(make(t.into_owned()));
            }
        }
        for (n, call) in d.tool_calls.into_iter().flatten().enumerate() {
            let index = call.index.unwrap_or(n as u64).min(u32::MAX as u64) as u32;
            let (name, arguments) = match (call.function, call.custom) {
                (Some(f), _) => (f.name, f.arguments),
                (None, Some(c)) => (c.name, c.input),
                (None, None) => (None, None),
            };
            if call.id.is_some() || name.is_some() {
                out.push(Delta::ToolStart {
                    index,
                    id: call.id.unwrap_or_default().into_owned(),
                    name: name.unwrap_or_default().into_owned(),
                });
            }
            if let Some(a) = arguments.filter(|a| !a.is_empty()) {
                out.push(Delta::ToolArgs {
                    index,
                    fragment: a.into_owned(),
                });
            }
        }
    }
    if let Some(f) = finish {
        out.push(Delta::Finish(Finish::from_openai(&f)));
    }
    if let Some(u) = c.usage.as_ref().and_then(UsageIn::usage) {
        out.push(Delta::Usage(u));
    }
    Ok(out)
}

/// Writes pieces as chat-completion chunks (SSE events).
#[derive(Clone, Debug)]
pub struct ChunkWriter {
    frame: Frame,
    /// Send the usage chunk (the client asked for it).
    pub include_usage: bool,
    usage: Option<Usage>,
    started: bool,
    /// The upstream's own usage chunk went out (passed on as sent).
    usage_sent: bool,
}

impl ChunkWriter {
    /// A writer of chunks with `frame`'s id and model.
    pub fn new(frame: Frame, include_usage: bool) -> Self {
        Self {
            frame,
            include_usage,
            usage: None,
            started: false,
            usage_sent: false,
        }
    }

    /// The chunks written from now on name `model` (another model goes on
    /// with the answer).
    pub fn rename(&mut self, model: &str) {
        model.clone_into(&mut self.frame.model);
    }

    /// Usage as the stream said it so far.
    fn add_usage(&mut self, u: &Usage) {
        self.usage.get_or_insert_default().merge(u);
    }

    fn chunk(&self, delta: Value, finish: Option<Finish>, out: &mut Vec<u8>) {
        let v = json!({
            "id": self.frame.id,
            "object": "chat.completion.chunk",
            "created": self.frame.created,
            "model": self.frame.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish.map(Finish::openai)}],
        });
        event(&v, out);
    }

    /// Takes `d` as written elsewhere (a chunk passed on as the upstream
    /// sent it), so what this writer writes next follows on from it.
    pub fn observe(&mut self, d: &Delta) {
        match d {
            Delta::Usage(u) => {
                self.add_usage(u);
                self.usage_sent = true;
            }
            Delta::Done => {}
            _ => self.started = true,
        }
    }

    /// Writes `d` to `out` (the usage chunk is written before `[DONE]`).
    pub fn write(&mut self, d: &Delta, out: &mut Vec<u8>) {
        if !self.started && !matches!(d, Delta::Done | Delta::Usage(_)) {
            self.started = true;
            self.chunk(json!({"role": "assistant", "content": ""}), None, out);
        }
        match d {
            Delta::Start { .. } | Delta::OtherBlock => {}
            Delta::Text(t) => self.chunk(json!({"content": t}), None, out),
            Delta::Reasoning(t) => self.chunk(json!({"reasoning_content": t}), None, out),
            Delta::Refusal(t) => self.chunk(json!({"refusal": t}), None, out),
            Delta::ToolStart { index, id, name } => self.chunk(
                json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
                None,
                out,
            ),
            Delta::ToolArgs { index, fragment } => self.chunk(
                json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}),
                None,
                out,
            ),
            Delta::Usage(u) => self.add_usage(u),
            Delta::Finish(f) => self.chunk(json!({}), Some(*f), out),
            Delta::Done => {
                if let (true, false, Some(u)) = (self.include_usage, self.usage_sent, self.usage) {
                    let v = json!({
                        "id": self.frame.id,
                        "object": "chat.completion.chunk",
                        "created": self.frame.created,
                        "model": self.frame.model,
                        "choices": [],
                        "usage": usage(u, self.frame.dialect),
                    });
                    event(&v, out);
                }
                out.extend_from_slice(DONE);
            }
        }
    }
}

/// The stream's terminator.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// SSE comment a server sends while the model stalls.
pub const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// `v` as one SSE `data:` event.
pub fn event(v: &Value, out: &mut Vec<u8>) {
    crate::wire::sse::write_json(None, v, out);
}

/// The error `type` and `code` for an HTTP status.
fn error_kind(code: u16) -> (&'static str, Option<&'static str>) {
    match code {
        400 => ("invalid_request_error", None),
        401 => ("invalid_request_error", Some("invalid_api_key")),
        402 => ("invalid_request_error", Some("insufficient_balance")),
        403 => ("invalid_request_error", Some("permission_denied")),
        404 => ("invalid_request_error", Some("not_found")),
        413 => ("invalid_request_error", Some("request_too_large")),
        422 => ("invalid_request_error", Some("invalid_parameters")),
        429 => ("rate_limit_exceeded", Some("rate_limit_exceeded")),
        500..=599 => ("server_error", None),
        _ => ("invalid_request_error", None),
    }
}

/// The error body for an HTTP status: `{"error":{"message","type","param","code"}}`.
pub fn error(code: u16, message: &str, param: Option<&str>) -> Value {
    let (ty, c) = error_kind(code);
    json!({"error": {"message": message, "type": ty, "param": param, "code": c}})
}

/// An in-band error chunk ending a stream that had started: OpenAI sends
/// `data: {"error": {...}}` and no `[DONE]`.
pub fn error_chunk(kind: &str, message: &str, out: &mut Vec<u8>) {
    event(
        &json!({"error": {"message": message, "type": kind, "param": null, "code": kind}}),
        out,
    );
}
