//! The OpenAI-compatible client (OpenAI, DeepSeek, vLLM, llama.cpp, Ollama):
//! `/chat/completions` with tools, non-streaming or SSE streaming with
//! `stream_options.include_usage`; tool-call deltas assembled; usage read
//! (cached and DeepSeek cache hit/miss tokens); rate-limit headers parsed.

use super::headers::{openai_feedback, retry_after};
use super::http::{
    header_getter, read_body, read_sse, status_error, transport_error, wire_role, with_ids, Endpoint, StreamStop,
};
use super::{ErrorKind, LlmRequest, LlmResponse, Provider, ProviderError, ToolCall, Usage};
use crate::clock::Clock;
use crate::resilience::limiter::RateFeedback;
use serde_json::{json, Value};

/// Which dialect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// OpenAI and generic OpenAI-compatible servers.
    OpenAi,
    /// DeepSeek: cache hit/miss usage fields, keep-alive empty lines, no rate headers.
    DeepSeek,
}

/// An OpenAI-compatible provider.
pub struct OpenAiClient {
    http: reqwest::Client,
    ep: Endpoint,
    flavor: Flavor,
    clock: Clock,
}

impl OpenAiClient {
    /// A client for `ep`.
    pub fn new(http: reqwest::Client, ep: Endpoint, flavor: Flavor, clock: Clock) -> Self {
        Self {
            http,
            ep,
            flavor,
            clock,
        }
    }

    /// The request body.
    pub fn body(req: &LlmRequest, stream: bool) -> Value {
        let messages: Vec<Value> = req
            .messages
            .iter()
            .map(|m| json!({"role": wire_role(&m.role), "content": m.content}))
            .collect();
        let mut b = json!({"model": &*req.model, "messages": messages, "max_tokens": req.max_tokens, "stream": stream});
        if !req.tools.is_empty() {
            let tools: Vec<Value> = req
                .tools
                .iter()
                .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.schema}}))
                .collect();
            b["tools"] = Value::Array(tools);
        }
        if stream {
            b["stream_options"] = json!({"include_usage": true});
        }
        b
    }

    fn feedback(&self, h: &reqwest::header::HeaderMap) -> RateFeedback {
        let get = header_getter(h);
        match self.flavor {
            Flavor::OpenAi => openai_feedback(&get, self.clock.wall_ms()),
            Flavor::DeepSeek => RateFeedback {
                retry_after: retry_after(&get, self.clock.wall_ms()),
                ..RateFeedback::default()
            },
        }
    }
}

/// Usage from an OpenAI-style `usage` object.
pub fn usage(u: &Value) -> Option<Usage> {
    let n = |p: &str| {
        u.pointer(p)
            .and_then(Value::as_u64)
            .map(|v| v.min(u32::MAX as u64) as u32)
    };
    Some(Usage {
        input: n("/prompt_tokens")?,
        output: n("/completion_tokens").unwrap_or(0),
        cached_input: n("/prompt_tokens_details/cached_tokens")
            .or_else(|| n("/prompt_cache_hit_tokens"))
            .unwrap_or(0),
    })
}

/// Rough output tokens when a server sends no usage.
fn estimate_tokens(text: &str, calls: &[ToolCall]) -> u32 {
    let chars = text.len() + calls.iter().map(|c| c.name.len() + c.arguments.len()).sum::<usize>();
    (chars as u32).div_ceil(4)
}

/// A tool call being assembled from stream deltas.
#[derive(Default)]
struct PartialCall {
    name: String,
    arguments: String,
}

/// Assembles a streamed answer.
#[derive(Default)]
struct Assembly {
    text: String,
    calls: Vec<PartialCall>,
    usage: Option<Usage>,
    done: bool,
}

impl Assembly {
    /// Takes one chunk; an in-band error ends the stream with that error.
    fn chunk(&mut self, v: &Value) -> Option<ProviderError> {
        if let Some(err) = v.get("error") {
            let msg = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("error event in stream")
                .to_string();
            return Some(ProviderError::new(ErrorKind::ServerError, None, msg));
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()).and_then(usage) {
            self.usage = Some(u);
        }
        let delta = v.pointer("/choices/0/delta")?;
        if let Some(t) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(t);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                let i = c
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(self.calls.len() as u64) as usize;
                if i > 1024 {
                    continue;
                }
                while self.calls.len() <= i {
                    self.calls.push(PartialCall::default());
                }
                let p = &mut self.calls[i];
                if let Some(n) = c.pointer("/function/name").and_then(Value::as_str) {
                    p.name.push_str(n);
                }
                if let Some(a) = c.pointer("/function/arguments").and_then(Value::as_str) {
                    p.arguments.push_str(a);
                }
            }
        }
        None
    }

    fn tool_calls(&mut self) -> Vec<ToolCall> {
        std::mem::take(&mut self.calls)
            .into_iter()
            .map(|p| ToolCall {
                name: p.name,
                arguments: p.arguments,
            })
            .collect()
    }
}

/// Tool calls of a non-streamed message.
fn message_calls(m: &Value) -> Vec<ToolCall> {
    m.get("tool_calls")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|c| ToolCall {
                    name: c
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    arguments: match c.pointer("/function/arguments") {
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                        None => String::new(),
                    },
                })
                .collect()
        })
        .unwrap_or_default()
}

#[async_trait::async_trait]
impl Provider for OpenAiClient {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        let name = &self.ep.name;
        let start = self.clock.now();
        let mut b = with_ids(self.http.post(&self.ep.url), req).json(&Self::body(req, self.ep.stream));
        if let Some(k) = &self.ep.key {
            b = b.bearer_auth(k.expose());
        }
        let resp = b.send().await.map_err(|e| transport_error(name, &e))?;
        let status = resp.status().as_u16();
        let rate = self.feedback(resp.headers());
        if !(200..300).contains(&status) {
            let body = read_body(name, resp).await.unwrap_or_default();
            return Err(status_error(name, status, &body, rate));
        }
        let (text, tool_calls, usage) = if self.ep.stream {
            self.read_stream(resp, req).await?
        } else {
            let body = read_body(name, resp).await?;
            // DeepSeek sends empty lines while the request is queued.
            let v: Value = serde_json::from_slice(body.trim_ascii()).map_err(|e| {
                let kind = if body.is_empty() {
                    ErrorKind::Reset
                } else {
                    ErrorKind::Truncated
                };
                ProviderError::new(kind, None, format!("{name}: unreadable response body: {e}"))
            })?;
            let m = v.pointer("/choices/0/message").cloned().unwrap_or(Value::Null);
            let text = m.get("content").and_then(Value::as_str).unwrap_or("").to_string();
            let calls = message_calls(&m);
            let u = v.get("usage").and_then(usage);
            (text, calls, u)
        };
        let usage = usage.unwrap_or_else(|| Usage {
            input: (req.prompt_chars() as u32).div_ceil(4),
            output: estimate_tokens(&text, &tool_calls),
            cached_input: 0,
        });
        let elapsed = self.clock.now().saturating_duration_since(start);
        Ok(LlmResponse::measured(text.into(), tool_calls, usage, rate, elapsed))
    }
}

impl OpenAiClient {
    async fn read_stream(
        &self,
        resp: reqwest::Response,
        req: &LlmRequest,
    ) -> Result<(String, Vec<ToolCall>, Option<Usage>), ProviderError> {
        let name = &self.ep.name;
        let mut acc = Assembly::default();
        let cut = |acc: &mut Assembly, kind: ErrorKind, why: String| {
            let calls = acc.tool_calls();
            let mut e = ProviderError::new(kind, None, format!("{name}: {why}"));
            e.usage = acc.usage.unwrap_or(Usage {
                input: (req.prompt_chars() as u32).div_ceil(4),
                output: estimate_tokens(&acc.text, &calls),
                cached_input: 0,
            });
            e
        };
        let read = read_sse(name, resp, self.ep.idle, |ev| {
            if ev.data.trim() == "[DONE]" {
                acc.done = true;
                return None;
            }
            match serde_json::from_str::<Value>(&ev.data) {
                Ok(v) => acc.chunk(&v),
                Err(_) => {
                    tracing::debug!(provider = %name, "skipping a stream event that is not JSON");
                    None
                }
            }
        })
        .await;
        match read {
            Err(StreamStop::Transport(kind, why)) => return Err(cut(&mut acc, kind, why)),
            Err(StreamStop::Event(e)) => return Err(e),
            Ok(()) if !acc.done => {
                return Err(cut(
                    &mut acc,
                    ErrorKind::Truncated,
                    "stream ended without [DONE]".into(),
                ))
            }
            Ok(()) => {}
        }
        let calls = acc.tool_calls();
        Ok((std::mem::take(&mut acc.text), calls, acc.usage))
    }
}
