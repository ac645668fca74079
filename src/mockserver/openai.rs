//! The OpenAI chat-completions wire format (also DeepSeek's, which adds
//! prompt-cache counts to `usage`): bodies, stream chunks and errors.

use super::play::{fragments, keepalives, text_pieces, Beat, Timeline};
use super::{Answer, Ctx, Flavor, Timing};
use crate::provider::Usage;
use serde_json::{json, Value};
use std::time::Duration;

/// SSE comment sent while the model stalls.
pub(crate) const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// `usage` of a completion.
pub(crate) fn usage(ctx: &Ctx, u: Usage) -> Value {
    let (input, output, cached) = (u64::from(u.input), u64::from(u.output), u64::from(u.cached_input));
    let mut v = json!({
        "prompt_tokens": input,
        "completion_tokens": output,
        "total_tokens": input + output,
    });
    if ctx.flavor == Flavor::DeepSeek {
        v["prompt_cache_hit_tokens"] = json!(cached);
        v["prompt_cache_miss_tokens"] = json!(input.saturating_sub(cached));
    } else {
        v["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    v
}

fn finish_reason(a: &Answer) -> &'static str {
    if a.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

/// A non-streamed `chat.completion`.
pub(crate) fn completion(ctx: &Ctx, a: &Answer) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": if a.text.is_empty() && !a.tool_calls.is_empty() { Value::Null } else { json!(a.text) },
    });
    if !a.tool_calls.is_empty() {
        let calls: Vec<Value> = a
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({
                    "id": ctx.tool_id(i),
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                })
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": ctx.id,
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason(a)}],
        "usage": usage(ctx, a.usage),
    })
}

fn chunk(ctx: &Ctx, delta: Value, finish: Option<&str>) -> String {
    let v = json!({
        "id": ctx.id,
        "object": "chat.completion.chunk",
        "created": ctx.created,
        "model": ctx.model,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
    });
    format!("data: {v}\n\n")
}

/// A streamed answer: keep-alives during the stall, the role, content and
/// tool-call pieces spread over the generation time, the finish chunk, the
/// usage chunk if asked for, and `[DONE]`.
pub(crate) fn stream(ctx: &Ctx, a: &Answer, t: &Timing) -> Vec<Beat> {
    let mut deltas = Vec::new();
    for p in text_pieces(a.text) {
        deltas.push(json!({"content": p}));
    }
    for (i, c) in a.tool_calls.iter().enumerate() {
        deltas.push(json!({"tool_calls": [{
            "index": i,
            "id": ctx.tool_id(i),
            "type": "function",
            "function": {"name": c.name, "arguments": ""},
        }]}));
        for f in fragments(&c.arguments) {
            deltas.push(json!({"tool_calls": [{"index": i, "function": {"arguments": f}}]}));
        }
    }
    let step = t.gen / u32::try_from(deltas.len().max(1)).unwrap_or(u32::MAX);
    let mut tl = Timeline::new(keepalives(t.stall, KEEPALIVE), t.start, step);
    tl.now(chunk(ctx, json!({"role": "assistant"}), None));
    for d in deltas {
        tl.tick(chunk(ctx, d, None));
    }
    tl.now(chunk(ctx, json!({}), Some(finish_reason(a))));
    if ctx.include_usage {
        let v = json!({
            "id": ctx.id,
            "object": "chat.completion.chunk",
            "created": ctx.created,
            "model": ctx.model,
            "choices": [],
            "usage": usage(ctx, a.usage),
        });
        tl.now(format!("data: {v}\n\n"));
    }
    tl.now("data: [DONE]\n\n");
    tl.into_beats()
}

/// A stream cut short: the role at `first`, then `text` in pieces until `end`;
/// no finish chunk, no usage, no `[DONE]`.
pub(crate) fn truncated_stream(ctx: &Ctx, text: &str, first: Duration, end: Duration) -> Vec<Beat> {
    let pieces = text_pieces(text);
    let n = u32::try_from(pieces.len() + 1).unwrap_or(u32::MAX);
    let mut tl = Timeline::new(Vec::new(), first, end.saturating_sub(first) / n);
    tl.tick(chunk(ctx, json!({"role": "assistant"}), None));
    for p in pieces {
        tl.tick(chunk(ctx, json!({"content": p}), None));
    }
    tl.into_beats()
}

/// The error body for an HTTP status: `{"error":{"message","type","param","code"}}`.
pub(crate) fn error(code: u16, message: &str, param: Option<&str>) -> Value {
    let (ty, c): (&str, Option<&str>) = match code {
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
    };
    json!({"error": {"message": message, "type": ty, "param": param, "code": c}})
}
