//! The Anthropic client: `/v1/messages` with tools (`tool_use` blocks),
//! non-streaming or streaming events (`message_start`, `content_block_*`
//! with `text_delta` / `input_json_delta`, cumulative usage in
//! `message_delta`, `message_stop`, in-band `event: error`).

use super::headers::anthropic_feedback;
use super::http::{
    header_getter, read_body, read_sse, status_error, transport_error, wire_role, with_ids, Endpoint, StreamStop,
};
use super::{ErrorKind, LlmRequest, LlmResponse, Message, Provider, ProviderError, ToolCall, Usage};
use crate::clock::Clock;
use serde_json::{json, Value};

/// An Anthropic provider.
pub struct AnthropicClient {
    http: reqwest::Client,
    ep: Endpoint,
    clock: Clock,
}

/// The API version sent with every request.
pub const VERSION: &str = "2023-06-01";

impl AnthropicClient {
    /// A client for `ep`.
    pub fn new(http: reqwest::Client, ep: Endpoint, clock: Clock) -> Self {
        Self { http, ep, clock }
    }

    /// The request body: system messages go to `system`, the rest alternate
    /// user/assistant (consecutive turns of one role are merged).
    pub fn body(req: &LlmRequest, stream: bool) -> Value {
        let system: Vec<&str> = req
            .messages
            .iter()
            .filter(|m| &*m.role == "system")
            .map(|m| &*m.content)
            .collect();
        let mut turns: Vec<(String, String)> = Vec::new();
        for Message { role, content } in req.messages.iter().filter(|m| &*m.role != "system") {
            let role = if wire_role(role) == "assistant" {
                "assistant"
            } else {
                "user"
            };
            match turns.last_mut() {
                Some((r, c)) if r == role => {
                    c.push_str("\n\n");
                    c.push_str(content);
                }
                _ => turns.push((role.to_string(), content.to_string())),
            }
        }
        let messages: Vec<Value> = turns.iter().map(|(r, c)| json!({"role": r, "content": c})).collect();
        let mut b = json!({"model": &*req.model, "max_tokens": req.max_tokens, "messages": messages, "stream": stream});
        if !system.is_empty() {
            b["system"] = Value::String(system.join("\n\n"));
        }
        if !req.tools.is_empty() {
            let tools: Vec<Value> = req
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.schema}))
                .collect();
            b["tools"] = Value::Array(tools);
        }
        b
    }
}

/// The error kind of an Anthropic error type (in-band or in a body).
fn error_kind(t: &str) -> ErrorKind {
    match t {
        "overloaded_error" => ErrorKind::Overloaded,
        "rate_limit_error" => ErrorKind::RateLimited,
        "invalid_request_error" => ErrorKind::BadRequest,
        "authentication_error" | "permission_error" => ErrorKind::Auth,
        "not_found_error" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::TooLarge,
        _ => ErrorKind::ServerError,
    }
}

fn tool_input(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "{}".into(),
    }
}

#[derive(Default)]
struct Block {
    tool: Option<String>,
    json: String,
}

#[derive(Default)]
struct Assembly {
    text: String,
    blocks: Vec<Block>,
    input: u32,
    output: u32,
    stopped: bool,
}

impl Assembly {
    /// Takes one event; an in-band `error` event ends the stream with it.
    fn event(&mut self, name: &str, v: &Value) -> Option<ProviderError> {
        let n = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_u64)
                .map(|x| x.min(u32::MAX as u64) as u32)
        };
        match name {
            "message_start" => {
                self.input = n("/message/usage/input_tokens").unwrap_or(0);
                self.output = n("/message/usage/output_tokens").unwrap_or(0);
            }
            "content_block_start" => {
                let i = n("/index").unwrap_or(self.blocks.len() as u32) as usize;
                if i > 1024 {
                    return None;
                }
                while self.blocks.len() <= i {
                    self.blocks.push(Block::default());
                }
                let b = v.get("content_block");
                if b.and_then(|b| b.get("type")).and_then(Value::as_str) == Some("tool_use") {
                    self.blocks[i].tool = b
                        .and_then(|b| b.get("name"))
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    // Input normally arrives as deltas; a complete input here is kept.
                    if let Some(input) = b
                        .and_then(|b| b.get("input"))
                        .filter(|x| x.as_object().is_some_and(|o| !o.is_empty()))
                    {
                        self.blocks[i].json = input.to_string();
                    }
                }
            }
            "content_block_delta" => {
                let i = n("/index").unwrap_or(0) as usize;
                match v.pointer("/delta/type").and_then(Value::as_str) {
                    Some("text_delta") => self
                        .text
                        .push_str(v.pointer("/delta/text").and_then(Value::as_str).unwrap_or("")),
                    Some("input_json_delta") => {
                        if let Some(b) = self.blocks.get_mut(i) {
                            b.json
                                .push_str(v.pointer("/delta/partial_json").and_then(Value::as_str).unwrap_or(""));
                        }
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(o) = n("/usage/output_tokens") {
                    self.output = o;
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let t = v.pointer("/error/type").and_then(Value::as_str).unwrap_or("api_error");
                let msg = v
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("error event in stream");
                let mut e = ProviderError::new(error_kind(t), None, format!("{t}: {msg}"));
                e.usage = Usage {
                    input: self.input,
                    output: self.output,
                    cached_input: 0,
                };
                return Some(e);
            }
            _ => {}
        }
        None
    }

    fn calls(&mut self) -> Vec<ToolCall> {
        std::mem::take(&mut self.blocks)
            .into_iter()
            .filter_map(|b| {
                b.tool.map(|name| ToolCall {
                    name,
                    arguments: if b.json.is_empty() { "{}".into() } else { b.json },
                })
            })
            .collect()
    }
}

#[async_trait::async_trait]
impl Provider for AnthropicClient {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        let name = &self.ep.name;
        let start = self.clock.now();
        let mut b = with_ids(self.http.post(&self.ep.url), req)
            .header("anthropic-version", VERSION)
            .json(&Self::body(req, self.ep.stream));
        if let Some(k) = &self.ep.key {
            b = b.header("x-api-key", k.expose());
        }
        let resp = b.send().await.map_err(|e| transport_error(name, &e))?;
        let status = resp.status().as_u16();
        let rate = anthropic_feedback(&header_getter(resp.headers()), self.clock.wall_ms());
        if !(200..300).contains(&status) {
            let body = read_body(name, resp).await.unwrap_or_default();
            let mut e = status_error(name, status, &body, rate);
            if let Some(t) = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.pointer("/error/type").and_then(Value::as_str).map(str::to_string))
            {
                if status == 400 || status == 413 {
                    e.kind = error_kind(&t).max_client(e.kind);
                }
            }
            return Err(e);
        }
        let (text, tool_calls, usage) = if self.ep.stream {
            self.read_stream(resp).await?
        } else {
            let body = read_body(name, resp).await?;
            let v: Value = serde_json::from_slice(&body).map_err(|e| {
                ProviderError::new(
                    ErrorKind::Truncated,
                    None,
                    format!("{name}: unreadable response body: {e}"),
                )
            })?;
            let mut text = String::new();
            let mut calls = Vec::new();
            for block in v.get("content").and_then(Value::as_array).into_iter().flatten() {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
                    Some("tool_use") => calls.push(ToolCall {
                        name: block.get("name").and_then(Value::as_str).unwrap_or("").to_string(),
                        arguments: tool_input(block.get("input")),
                    }),
                    _ => {}
                }
            }
            let n = |p: &str| {
                v.pointer(p)
                    .and_then(Value::as_u64)
                    .map(|x| x.min(u32::MAX as u64) as u32)
                    .unwrap_or(0)
            };
            let usage = Usage {
                input: n("/usage/input_tokens"),
                output: n("/usage/output_tokens"),
                cached_input: n("/usage/cache_read_input_tokens"),
            };
            (text, calls, usage)
        };
        let elapsed = self.clock.now().saturating_duration_since(start);
        Ok(LlmResponse::measured(text.into(), tool_calls, usage, rate, elapsed))
    }
}

impl AnthropicClient {
    async fn read_stream(&self, resp: reqwest::Response) -> Result<(String, Vec<ToolCall>, Usage), ProviderError> {
        let name = &self.ep.name;
        let mut acc = Assembly::default();
        let cut = |acc: &Assembly, kind: ErrorKind, why: String| {
            let mut e = ProviderError::new(kind, None, format!("{name}: {why}"));
            e.usage = Usage {
                input: acc.input,
                output: acc.output,
                cached_input: 0,
            };
            e
        };
        let read = read_sse(name, resp, self.ep.idle, |ev| {
            let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
                tracing::debug!(provider = %name, "skipping a stream event that is not JSON");
                return None;
            };
            let kind = ev
                .event
                .as_deref()
                .or_else(|| v.get("type").and_then(Value::as_str))
                .unwrap_or("")
                .to_string();
            acc.event(&kind, &v)
        })
        .await;
        match read {
            Err(StreamStop::Transport(kind, why)) => return Err(cut(&acc, kind, why)),
            Err(StreamStop::Event(e)) => return Err(e),
            Ok(()) => {}
        }
        if !acc.stopped {
            return Err(cut(
                &acc,
                ErrorKind::Truncated,
                "stream ended without message_stop".into(),
            ));
        }
        let calls = acc.calls();
        let usage = Usage {
            input: acc.input,
            output: acc.output,
            cached_input: 0,
        };
        Ok((std::mem::take(&mut acc.text), calls, usage))
    }
}

trait ClientKind {
    fn max_client(self, status_kind: ErrorKind) -> ErrorKind;
}

impl ClientKind for ErrorKind {
    /// Keeps the status's client-error kind unless the body names a more
    /// specific one (e.g. `request_too_large`).
    fn max_client(self, status_kind: ErrorKind) -> ErrorKind {
        if self == ErrorKind::TooLarge {
            self
        } else {
            status_kind
        }
    }
}
