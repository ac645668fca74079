//! Converse answers and ConverseStream events, read; Bedrock's exceptions
//! named in fusebox's in-band error vocabulary.

use crate::wire::message::{ToolCall, ToolKind};
use crate::wire::openai::StreamError;
use crate::wire::reply::{Delta, Finish, Reply, Usage};
use serde_json::Value;
use smallvec::SmallVec;
use std::borrow::Cow;

fn n(v: &Value, p: &str) -> u32 {
    v.pointer(p)
        .and_then(Value::as_u64)
        .map_or(0, |x| x.min(u64::from(u32::MAX)) as u32)
}

/// Usage from `usage`: Bedrock counts tokens read from its cache apart
/// from `inputTokens`; [`Usage::input`] is every prompt token.
fn usage_of(u: &Value) -> Usage {
    let cached = n(u, "/cacheReadInputTokens");
    Usage {
        input: n(u, "/inputTokens")
            .saturating_add(cached)
            .saturating_add(n(u, "/cacheWriteInputTokens")),
        output: n(u, "/outputTokens"),
        cached_input: cached,
    }
}

fn finish_of(reason: &str) -> Finish {
    match reason {
        "tool_use" => Finish::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => Finish::Length,
        "guardrail_intervened" | "content_filtered" => Finish::Filtered,
        _ => Finish::Stop,
    }
}

/// Reads a Converse answer.
pub fn parse_reply(v: &Value) -> Reply {
    let mut r = Reply {
        finish: v.get("stopReason").and_then(Value::as_str).map(finish_of),
        usage: v.get("usage").map(usage_of),
        ..Reply::default()
    };
    let blocks = v.pointer("/output/message/content").and_then(Value::as_array);
    for b in blocks.into_iter().flatten() {
        if let Some(t) = b.get("text").and_then(Value::as_str) {
            r.text.push_str(t);
        } else if let Some(u) = b.get("toolUse") {
            let s = |k: &str| u.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            r.tool_calls.push(ToolCall {
                id: s("toolUseId"),
                name: s("name"),
                arguments: u.get("input").map_or_else(|| "{}".into(), Value::to_string),
                kind: ToolKind::Function,
            });
        } else if let Some(t) = b
            .pointer("/reasoningContent/reasoningText/text")
            .and_then(Value::as_str)
        {
            r.reasoning.push_str(t);
        }
    }
    r
}

/// A Bedrock exception's type (`ThrottlingException`,
/// `throttlingException`, with or without its namespace) in the words
/// fusebox classifies in-band errors by; `api_error` for the rest.
pub fn error_type(exception: &str) -> &'static str {
    let name = exception.split(':').next().unwrap_or("");
    let name = name.rsplit('#').next().unwrap_or(name);
    match name.to_ascii_lowercase().as_str() {
        "throttlingexception" | "modelnotreadyexception" | "servicequotaexceededexception" => "rate_limit_error",
        "serviceunavailableexception" => "overloaded_error",
        "validationexception" => "invalid_request_error",
        "accessdeniedexception"
        | "unrecognizedclientexception"
        | "invalidsignatureexception"
        | "expiredtokenexception"
        | "incompletesignatureexception" => "authentication_error",
        "resourcenotfoundexception" => "not_found_error",
        _ => "api_error",
    }
}

/// Reads ConverseStream events into deltas, remembering which content
/// block is which tool call.
#[derive(Debug, Default)]
pub struct ConverseEventReader {
    /// Content block index → tool call index.
    tools: Vec<(u32, u32)>,
}

/// A `contentBlockDelta` event, as much of it as is read.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDeltaIn<'a> {
    #[serde(default)]
    content_block_index: u32,
    #[serde(borrow)]
    delta: DeltaIn<'a>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeltaIn<'a> {
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_use: Option<ToolInputIn<'a>>,
    #[serde(default, borrow)]
    reasoning_content: Option<ReasoningIn<'a>>,
}

#[derive(serde::Deserialize)]
struct ToolInputIn<'a> {
    #[serde(borrow)]
    input: Cow<'a, str>,
}

#[derive(serde::Deserialize)]
struct ReasoningIn<'a> {
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    text: Option<Cow<'a, str>>,
}

/// More tool calls than this in one answer are not tracked.
const MAX_TOOLS: usize = 1024;

impl ConverseEventReader {
    /// Reads event `name` (an [`super::EventFrames`] name) with JSON `data`;
    /// an exception is `Err`.
    pub fn read(&mut self, name: &str, data: &str) -> Result<SmallVec<[Delta; 2]>, StreamError> {
        if let Some(exception) = name.strip_prefix("exception:").or_else(|| name.strip_prefix("error:")) {
            let message = serde_json::from_str::<Value>(data)
                .ok()
                .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_else(|| data.to_string());
            return Err(StreamError {
                kind: error_type(exception).into(),
                message: format!("{exception}: {message}"),
            });
        }
        let mut out = SmallVec::new();
        if name == "contentBlockDelta" {
            // The stream's bulk: read into borrowed types, not a whole value.
            let Ok(e) = serde_json::from_str::<BlockDeltaIn>(data) else {
                return Err(StreamError::malformed(data));
            };
            let d = e.delta;
            if let Some(t) = d.text {
                out.push(Delta::Text(t.into_owned()));
            } else if let Some(u) = d.tool_use {
                if let Some(&(_, index)) = self.tools.iter().find(|(b, _)| *b == e.content_block_index) {
                    out.push(Delta::ToolArgs {
                        index,
                        fragment: u.input.into_owned(),
                    });
                }
            } else if let Some(t) = d.reasoning_content.and_then(|r| r.text) {
                out.push(Delta::Reasoning(t.into_owned()));
            }
            return Ok(out);
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else {
            return Err(StreamError::malformed(data));
        };
        let block = n(&v, "/contentBlockIndex");
        match name {
            "messageStart" => out.push(Delta::Start {
                id: String::new(),
                model: String::new(),
            }),
            "contentBlockStart" => {
                if let Some(u) = v.pointer("/start/toolUse").filter(|_| self.tools.len() < MAX_TOOLS) {
                    let index = self.tools.len() as u32;
                    self.tools.push((block, index));
                    let s = |k: &str| u.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    out.push(Delta::ToolStart {
                        index,
                        id: s("toolUseId"),
                        name: s("name"),
                    });
                }
            }
            "messageStop" => {
                let reason = v.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
                out.push(Delta::Finish(finish_of(reason)));
            }
            "metadata" => {
                if let Some(u) = v.get("usage") {
                    out.push(Delta::Usage(usage_of(u)));
                }
                out.push(Delta::Done);
            }
            _ => {}
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_and_a_stream_are_read_with_their_tool_calls_and_usage() {
        let v = json!({"output": {"message": {"role": "assistant", "content": [
            {"text": "Checking."},
            {"toolUse": {"toolUseId": "tooluse_1", "name": "get_order", "input": {"order_id": "38100"}}}]}},
            "stopReason": "tool_use", "usage": {"inputTokens": 20, "outputTokens": 7, "totalTokens": 27, "cacheReadInputTokens": 5}});
        let r = parse_reply(&v);
        assert_eq!(r.text, "Checking.");
        assert_eq!(r.finish, Some(Finish::ToolCalls));
        assert_eq!(
            (r.tool_calls[0].id.as_str(), r.tool_calls[0].arguments.as_str()),
            ("tooluse_1", r#"{"order_id":"38100"}"#)
        );
        assert_eq!(
            r.usage,
            Some(Usage {
                input: 25,
                output: 7,
                cached_input: 5
            })
        );
        let mut s = ConverseEventReader::default();
        s.read(
            "contentBlockStart",
            r#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"t1","name":"f"}}}"#,
        )
        .unwrap();
        let d = s
            .read(
                "contentBlockDelta",
                r#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"a\":"}}}"#,
            )
            .unwrap();
        assert_eq!(
            d[0],
            Delta::ToolArgs {
                index: 0,
                fragment: "{\"a\":".into()
            }
        );
        let e = s
            .read("exception:throttlingException", r#"{"message":"Too many tokens"}"#)
            .unwrap_err();
        assert_eq!(e.kind, "rate_limit_error");
        assert_eq!(
            error_type("ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"),
            "rate_limit_error"
        );
        assert_eq!(error_type("InvalidSignatureException"), "authentication_error");
    }
}
