//! `response` objects: what they echo of the request, their ids and output
//! items.

use crate::wire::message::ToolCall;
use crate::wire::reply::{Finish, Reply, Usage};
use serde_json::{json, Value};

/// What a `response` object echoes of its request.
#[derive(Clone, Debug, Default)]
pub struct Echo {
    /// `tools`, as sent.
    pub tools: Value,
    /// `tool_choice`, as sent (`auto` when absent).
    pub tool_choice: Value,
    /// `parallel_tool_calls` (true when absent).
    pub parallel_tool_calls: bool,
    /// `instructions`.
    pub instructions: Value,
    /// `max_output_tokens`.
    pub max_output_tokens: Value,
    /// `temperature`, `top_p`.
    pub temperature: Value,
    /// `top_p`.
    pub top_p: Value,
    /// `metadata`.
    pub metadata: Value,
}

impl Echo {
    /// What `bytes` (a request body already read) asked for.
    pub fn of(bytes: &[u8]) -> Self {
        let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        let get = |k: &str| v.get(k).cloned().unwrap_or(Value::Null);
        Self {
            tools: v.get("tools").cloned().unwrap_or_else(|| json!([])),
            tool_choice: v.get("tool_choice").cloned().unwrap_or_else(|| json!("auto")),
            parallel_tool_calls: v.get("parallel_tool_calls").and_then(Value::as_bool).unwrap_or(true),
            instructions: get("instructions"),
            max_output_tokens: get("max_output_tokens"),
            temperature: get("temperature"),
            top_p: get("top_p"),
            metadata: v.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }
    }
}

/// The ids of a response and its items.
#[derive(Clone, Debug)]
pub struct Ids {
    /// `resp_…`.
    pub response: String,
    /// A stem for item ids.
    pub stem: String,
}

impl Ids {
    /// Ids derived from `n`.
    pub fn new(n: u64) -> Self {
        Self {
            response: format!("resp_{n:016x}"),
            stem: format!("{n:016x}"),
        }
    }

    pub(super) fn message(&self, i: usize) -> String {
        format!("msg_{}{i:02}", self.stem)
    }

    pub(super) fn call(&self, i: usize) -> String {
        format!("fc_{}{i:02}", self.stem)
    }
}

fn usage(u: Usage) -> Value {
    json!({
        "input_tokens": u.input,
        "input_tokens_details": {"cached_tokens": u.cached_input},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.total(),
    })
}

pub(super) fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if text.is_empty() && status == "in_progress" {
        json!([])
    } else {
        json!([{"type": "output_text", "text": text, "annotations": [], "logprobs": []}])
    };
    json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
}

pub(super) fn call_item(id: &str, c: &ToolCall, status: &str) -> Value {
    json!({"id": id, "type": "function_call", "status": status, "call_id": c.id, "name": c.name, "arguments": c.arguments})
}

/// The output items of an answer: its text as a message, each tool call
/// as a `function_call`.
fn output(ids: &Ids, r: &Reply) -> Vec<Value> {
    let mut out = Vec::new();
    let text = if r.text.is_empty() { &r.refusal } else { &r.text };
    if !text.is_empty() || r.tool_calls.is_empty() {
        out.push(message_item(&ids.message(0), text, "completed"));
    }
    for (i, c) in r.tool_calls.iter().enumerate() {
        out.push(call_item(&ids.call(i), c, "completed"));
    }
    out
}

/// What every `response` object of one answer says alike.
pub(super) struct Head<'a> {
    /// Its ids.
    pub ids: &'a Ids,
    /// The request's settings, echoed.
    pub echo: &'a Echo,
    /// The model that answers.
    pub model: &'a str,
    /// When it was created (Unix seconds).
    pub created: u64,
}

/// A `response` object of `head` (`status`: `completed`, `in_progress`,
/// `failed`, `incomplete`).
pub(super) fn object(head: &Head<'_>, status: &str, output: Vec<Value>, u: Option<Usage>) -> Value {
    let Head {
        ids,
        echo,
        model,
        created,
    } = *head;
    json!({
        "id": ids.response,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": null,
        "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "instructions": echo.instructions,
        "max_output_tokens": echo.max_output_tokens,
        "model": model,
        "output": output,
        "parallel_tool_calls": echo.parallel_tool_calls,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": false,
        "temperature": echo.temperature,
        "text": {"format": {"type": "text"}},
        "tool_choice": echo.tool_choice,
        "tools": echo.tools,
        "top_p": echo.top_p,
        "truncation": "disabled",
        "usage": u.map(usage),
        "user": null,
        "metadata": echo.metadata,
    })
}

pub(super) fn status_of(r: &Reply) -> &'static str {
    if r.finish == Some(Finish::Length) {
        "incomplete"
    } else {
        "completed"
    }
}

/// A whole `response` object for `r`.
pub fn render_reply(ids: &Ids, echo: &Echo, created: u64, r: &Reply) -> Value {
    let head = Head {
        ids,
        echo,
        model: &r.model,
        created,
    };
    object(&head, status_of(r), output(ids, r), r.usage)
}
