//! The Anthropic messages wire format: bodies, stream events and errors.

use super::play::{fragments, keepalives, text_pieces, Beat, Timeline};
use super::{Answer, Ctx, Timing};
use crate::provider::{ToolCall, Usage};
use serde_json::{json, Value};
use std::time::Duration;

/// SSE comment sent while the model stalls.
pub(crate) const KEEPALIVE: &[u8] = b": keep-alive\n\n";

fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn stop_reason(a: &Answer) -> &'static str {
    if a.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

/// A tool call's `input`: the arguments object, or (when the model wrote
/// something that is not a JSON object) the raw string, so the client sees
/// the schema violation.
fn tool_input(c: &ToolCall) -> Value {
    match serde_json::from_str::<Value>(&c.arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::String(c.arguments.clone()),
    }
}

/// A non-streamed message.
pub(crate) fn message(ctx: &Ctx, a: &Answer) -> Value {
    let mut content = Vec::new();
    if !a.text.is_empty() {
        content.push(json!({"type": "text", "text": a.text}));
    }
    for (i, c) in a.tool_calls.iter().enumerate() {
        content.push(json!({"type": "tool_use", "id": ctx.tool_id(i), "name": c.name, "input": tool_input(c)}));
    }
    json!({
        "id": ctx.id,
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": content,
        "stop_reason": stop_reason(a),
        "stop_sequence": null,
        "usage": usage(a.usage, a.usage.output),
    })
}

fn usage(u: Usage, output: u32) -> Value {
    json!({
        "input_tokens": u.input,
        "output_tokens": output,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": u.cached_input,
    })
}

fn message_start(ctx: &Ctx, u: Usage) -> String {
    let m = json!({
        "id": ctx.id,
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
        "usage": usage(u, 1),
    });
    event("message_start", &json!({"type": "message_start", "message": m}))
}

const PING: &str = "event: ping\ndata: {\"type\": \"ping\"}\n\n";

fn block_start(index: usize, block: Value) -> String {
    event(
        "content_block_start",
        &json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn block_delta(index: usize, delta: Value) -> String {
    event(
        "content_block_delta",
        &json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn block_stop(index: usize) -> String {
    event(
        "content_block_stop",
        &json!({"type": "content_block_stop", "index": index}),
    )
}

/// One step of a stream: sent now, or sent then followed by a time step.
enum Ev {
    Now(String),
    Tick(String),
}

/// A streamed answer: keep-alives during the stall, `message_start`, each
/// content block (`content_block_start`, a `ping` after the first, deltas
/// spread over the generation time, `content_block_stop`), `message_delta`
/// with the stop reason and cumulative output tokens, `message_stop`.
pub(crate) fn stream(ctx: &Ctx, a: &Answer, t: &Timing) -> Vec<Beat> {
    let mut evs = vec![Ev::Now(message_start(ctx, a.usage))];
    let mut index = 0;
    if !a.text.is_empty() {
        evs.push(Ev::Now(block_start(index, json!({"type": "text", "text": ""}))));
        evs.push(Ev::Now(PING.into()));
        for p in text_pieces(a.text) {
            evs.push(Ev::Tick(block_delta(index, json!({"type": "text_delta", "text": p}))));
        }
        evs.push(Ev::Now(block_stop(index)));
        index += 1;
    }
    for (i, c) in a.tool_calls.iter().enumerate() {
        let block = json!({"type": "tool_use", "id": ctx.tool_id(i), "name": c.name, "input": {}});
        evs.push(Ev::Now(block_start(index, block)));
        if index == 0 {
            evs.push(Ev::Now(PING.into()));
        }
        for f in fragments(&c.arguments) {
            evs.push(Ev::Tick(block_delta(
                index,
                json!({"type": "input_json_delta", "partial_json": f}),
            )));
        }
        evs.push(Ev::Now(block_stop(index)));
        index += 1;
    }
    if index == 0 {
        evs.push(Ev::Now(PING.into()));
    }
    let delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason(a), "stop_sequence": null},
        "usage": {"output_tokens": a.usage.output},
    });
    evs.push(Ev::Now(event("message_delta", &delta)));
    evs.push(Ev::Now(event("message_stop", &json!({"type": "message_stop"}))));
    let ticks = evs.iter().filter(|e| matches!(e, Ev::Tick(_))).count().max(1);
    let step = t.gen / u32::try_from(ticks).unwrap_or(u32::MAX);
    let mut tl = Timeline::new(keepalives(t.stall, KEEPALIVE), t.start, step);
    for e in evs {
        match e {
            Ev::Now(s) => tl.now(s),
            Ev::Tick(s) => tl.tick(s),
        }
    }
    tl.into_beats()
}

/// A stream cut short: `message_start`, a text block start and `ping` at
/// `first`, then `text` in deltas until `end`; no block stop, no
/// `message_delta`, no `message_stop`.
pub(crate) fn truncated_stream(ctx: &Ctx, text: &str, u: Usage, first: Duration, end: Duration) -> Vec<Beat> {
    let pieces = text_pieces(text);
    let n = u32::try_from(pieces.len() + 1).unwrap_or(u32::MAX);
    let mut tl = Timeline::new(Vec::new(), first, end.saturating_sub(first) / n);
    tl.now(message_start(ctx, u));
    if !pieces.is_empty() {
        tl.now(block_start(0, json!({"type": "text", "text": ""})));
    }
    tl.tick(PING);
    for p in pieces {
        tl.tick(block_delta(0, json!({"type": "text_delta", "text": p})));
    }
    tl.into_beats()
}

/// An in-band overload: `message_start`, then an `error` event.
pub(crate) fn overloaded_stream(ctx: &Ctx, u: Usage, message: &str) -> String {
    let err = json!({"type": "error", "error": {"type": "overloaded_error", "message": message}});
    format!("{}{}", message_start(ctx, u), event("error", &err))
}

/// The error type for an HTTP status.
pub(crate) fn error_type(code: u16) -> &'static str {
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
pub(crate) fn error(code: u16, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type(code), "message": message}})
}
