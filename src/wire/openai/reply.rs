//! `chat.completion` bodies and their usage, read and written.

use super::request::kind_key;
use super::Dialect;
use crate::wire::message::{ToolCall, ToolKind};
use crate::wire::reply::{Finish, Reply, Usage};
use serde_json::{json, Value};

/// Usage from a `usage` object (cached counts of OpenAI and DeepSeek).
pub fn usage_of(u: &Value) -> Option<Usage> {
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

/// A tool call as chat completions write it.
pub(super) fn call_json(c: &ToolCall) -> Value {
    match c.kind {
        ToolKind::Function => {
            json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
        }
        ToolKind::Custom => json!({"id": c.id, "type": "custom", "custom": {"name": c.name, "input": c.arguments}}),
    }
}

/// `usage` of a completion in `dialect`.
pub fn usage(u: Usage, dialect: Dialect) -> Value {
    let (input, output, cached) = (u64::from(u.input), u64::from(u.output), u64::from(u.cached_input));
    let mut v = json!({
        "prompt_tokens": input,
        "completion_tokens": output,
        "total_tokens": input + output,
    });
    if dialect == Dialect::DeepSeek {
        v["prompt_cache_hit_tokens"] = json!(cached);
        v["prompt_cache_miss_tokens"] = json!(input.saturating_sub(cached));
    } else {
        v["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    v
}

fn text_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

fn calls_of(m: &Value) -> Vec<ToolCall> {
    let call = |c: &Value| {
        let (kind, input) = match c.get("type").and_then(Value::as_str) {
            Some("custom") => (ToolKind::Custom, "/custom/input"),
            _ => (ToolKind::Function, "/function/arguments"),
        };
        let name = format!("/{}/name", kind_key(kind));
        ToolCall {
            id: c.get("id").and_then(Value::as_str).unwrap_or("").to_string(),
            name: c.pointer(&name).and_then(Value::as_str).unwrap_or("").to_string(),
            arguments: match c.pointer(input) {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            },
            kind,
        }
    };
    m.get("tool_calls")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(call).collect())
        .unwrap_or_default()
}

/// Reads a `chat.completion` body (its first choice).
pub fn parse_reply(v: &Value) -> Reply {
    let m = v.pointer("/choices/0/message").unwrap_or(&Value::Null);
    Reply {
        id: v.get("id").and_then(Value::as_str).unwrap_or("").to_string(),
        model: v.get("model").and_then(Value::as_str).unwrap_or("").to_string(),
        text: text_of(m.get("content")),
        reasoning: text_of(m.get("reasoning_content")),
        refusal: text_of(m.get("refusal")),
        tool_calls: calls_of(m),
        finish: v
            .pointer("/choices/0/finish_reason")
            .and_then(Value::as_str)
            .map(Finish::from_openai),
        usage: v.get("usage").and_then(usage_of),
    }
}

/// What a response needs besides the answer.
#[derive(Clone, Debug)]
pub struct Frame {
    /// The answer's id.
    pub id: String,
    /// The model named in it.
    pub model: String,
    /// Unix seconds.
    pub created: u64,
    /// Which server's format.
    pub dialect: Dialect,
}

/// A `chat.completion` body for `r`.
pub fn render_reply(f: &Frame, r: &Reply) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": if r.text.is_empty() && (!r.tool_calls.is_empty() || !r.refusal.is_empty()) { Value::Null } else { json!(r.text) },
    });
    if !r.tool_calls.is_empty() {
        let calls: Vec<Value> = r.tool_calls.iter().map(call_json).collect();
        message["tool_calls"] = Value::Array(calls);
    }
    message["refusal"] = if r.refusal.is_empty() {
        Value::Null
    } else {
        json!(r.refusal)
    };
    if !r.reasoning.is_empty() {
        message["reasoning_content"] = json!(r.reasoning);
    }
    let finish = r.finish.unwrap_or(if r.tool_calls.is_empty() {
        Finish::Stop
    } else {
        Finish::ToolCalls
    });
    let mut v = json!({
        "id": f.id,
        "object": "chat.completion",
        "created": f.created,
        "model": f.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish.openai()}],
    });
    if let Some(u) = r.usage {
        v["usage"] = usage(u, f.dialect);
    }
    v
}
