//! Anthropic `message` bodies and their usage, read and written.

use crate::wire::message::{ToolCall, ToolKind};
use crate::wire::reply::{Finish, Reply, Usage};
use serde_json::{json, Value};

pub(super) fn n(v: &Value, p: &str) -> Option<u32> {
    v.pointer(p)
        .and_then(Value::as_u64)
        .map(|x| x.min(u32::MAX as u64) as u32)
}

/// Usage from a `usage` object. Anthropic counts prompt tokens read from
/// and written to its cache apart from `input_tokens`; [`Usage::input`]
/// is every prompt token, as OpenAI counts them.
pub(super) fn usage_of(u: &Value) -> Usage {
    let cached = n(u, "/cache_read_input_tokens").unwrap_or(0);
    let input = n(u, "/input_tokens")
        .unwrap_or(0)
        .saturating_add(cached)
        .saturating_add(n(u, "/cache_creation_input_tokens").unwrap_or(0));
    Usage {
        input,
        output: n(u, "/output_tokens").unwrap_or(0),
        cached_input: cached,
    }
}

/// Reads a `message` body.
pub fn parse_reply(v: &Value) -> Reply {
    let mut r = Reply {
        id: v.get("id").and_then(Value::as_str).unwrap_or("").to_string(),
        model: v.get("model").and_then(Value::as_str).unwrap_or("").to_string(),
        finish: v.get("stop_reason").and_then(Value::as_str).map(Finish::from_anthropic),
        usage: v.get("usage").map(usage_of),
        ..Reply::default()
    };
    for block in v.get("content").and_then(Value::as_array).into_iter().flatten() {
        let s = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or("");
        match s("type") {
            "text" => r.text.push_str(s("text")),
            "thinking" => r.reasoning.push_str(s("thinking")),
            "tool_use" => r.tool_calls.push(ToolCall {
                kind: ToolKind::Function,
                id: s("id").to_string(),
                name: s("name").to_string(),
                arguments: match block.get("input") {
                    Some(Value::String(a)) => a.clone(),
                    Some(other) => other.to_string(),
                    None => "{}".into(),
                },
            }),
            _ => {}
        }
    }
    r
}

/// A tool call's `input`: the arguments object, or (when the model wrote
/// something that is not a JSON object) the raw string, so the client sees
/// the schema violation.
fn input_of(c: &ToolCall) -> Value {
    match serde_json::from_str::<Value>(&c.arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::String(c.arguments.clone()),
    }
}

/// `usage` as Anthropic writes it: `input_tokens` without those read from the cache.
pub(super) fn usage(u: Usage) -> Value {
    json!({
        "input_tokens": u.input.saturating_sub(u.cached_input),
        "output_tokens": u.output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached_input,
    })
}

/// A `message` body for `r`, with `id` and `model`.
pub fn render_reply(id: &str, model: &str, r: &Reply) -> Value {
    let mut content = Vec::new();
    if !r.text.is_empty() {
        content.push(json!({"type": "text", "text": r.text}));
    }
    if !r.refusal.is_empty() {
        content.push(json!({"type": "text", "text": r.refusal}));
    }
    for c in &r.tool_calls {
        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input_of(c)}));
    }
    let finish = r.finish.unwrap_or(if r.tool_calls.is_empty() {
        Finish::Stop
    } else {
        Finish::ToolCalls
    });
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": finish.anthropic(),
        "stop_sequence": null,
        "usage": usage(r.usage.unwrap_or_default()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_counts_every_prompt_token_and_is_written_back_as_read() {
        let said = json!({"input_tokens": 12, "output_tokens": 30,
                          "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 500});
        let u = usage_of(&said);
        assert_eq!((u.input, u.cached_input, u.output), (2512, 2000, 30));
        let written = usage(Usage {
            input: 2012,
            output: 30,
            cached_input: 2000,
        });
        assert_eq!(written["input_tokens"], 12);
        assert_eq!(written["cache_read_input_tokens"], 2000);
        assert_eq!(usage_of(&written).input, 2012);
    }
}
