//! OpenAI's Responses API as agents use it without server-side state:
//! `input` items (messages, `function_call`, `function_call_output`),
//! `instructions`, function tools, whole or streamed answers. No upstream
//! speaks it here: a request is read into the typed conversation and served
//! by chat-completions or messages models; the answer is written back as a
//! `response` object or its stream of semantic events.

use super::message::{Content, ImageSource, Message, Part, Role, ToolCall, ToolKind, ToolSpec};
use super::reply::{Delta, Finish, Reply, Usage};
use super::request::{self as rq, BadRequest, Obj, Params, Request};
use super::WireKind;
use serde_json::{json, Value};
use std::sync::Arc;

/// Reads a `POST /v1/responses` body.
pub fn parse_request(bytes: &[u8]) -> Result<Request, BadRequest> {
    let (_, obj) = rq::body(bytes)?;
    let model = rq::model(&obj)?;
    if obj.get("previous_response_id").is_some_and(|v| !v.is_null()) {
        return Err(BadRequest::field(
            "previous_response_id",
            "fusebox keeps no responses: send the whole conversation in `input` instead",
        ));
    }
    if obj.get("conversation").is_some_and(|v| !v.is_null()) {
        return Err(BadRequest::field(
            "conversation",
            "fusebox keeps no conversations: send the whole conversation in `input` instead",
        ));
    }
    let mut messages = Vec::new();
    if let Some(i) = rq::opt_str(&obj, "instructions", "instructions")? {
        messages.push(Message::system(i));
    }
    match obj.get("input") {
        None | Some(Value::Null) => return Err(BadRequest::field("input", "field required")),
        Some(Value::String(s)) => messages.push(Message::user(s.as_str())),
        Some(Value::Array(items)) => read_items(items, &mut messages)?,
        Some(_) => return Err(BadRequest::field("input", "expected a string or an array of items")),
    }
    if messages.iter().all(|m| m.role.instructs()) {
        return Err(BadRequest::field("input", "must contain at least one item"));
    }
    let tools = rq::allowed_tools(&obj, tools(&obj)?);
    let mut needs = Vec::new();
    let response_format = match rq::opt_obj(&obj, "text", "text")?.and_then(|t| t.get("format")) {
        Some(f) if f.get("type").and_then(Value::as_str).is_some_and(|t| t != "text") => {
            needs.push(("text.format", WireKind::OpenAi));
            Some(format_of(f))
        }
        _ => None,
    };
    let reasoning_effort = rq::opt_obj(&obj, "reasoning", "reasoning")?
        .and_then(|r| r.get("effort"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let params = Params {
        wire: WireKind::OpenAi,
        tool_choice: rq::tool_choice(&obj)?,
        parallel_tool_calls: rq::opt_bool(&obj, "parallel_tool_calls", "parallel_tool_calls")?,
        temperature: rq::opt_f64(&obj, "temperature", "temperature")?,
        top_p: rq::opt_f64(&obj, "top_p", "top_p")?,
        stop: Vec::new(),
        max_tokens: rq::opt_u32(&obj, "max_output_tokens", "max_output_tokens")?,
        completion_tokens_key: false,
        user: rq::opt_str(&obj, "user", "user")?
            .or(rq::opt_str(&obj, "safety_identifier", "safety_identifier")?)
            .map(str::to_string),
        needs,
        response_format,
        reasoning_effort,
        raw: None,
        from_client: true,
        headers: Vec::new(),
    };
    Ok(Request {
        model,
        messages,
        tools,
        stream: rq::opt_bool(&obj, "stream", "stream")?.unwrap_or(false),
        include_usage: true,
        params,
    })
}

/// `text.format` as chat completions' `response_format`.
fn format_of(f: &Value) -> Value {
    match f.get("type").and_then(Value::as_str) {
        Some("json_schema") => {
            let mut schema = Obj::new();
            for k in ["name", "schema", "strict", "description"] {
                if let Some(v) = f.get(k) {
                    schema.insert(k.into(), v.clone());
                }
            }
            json!({"type": "json_schema", "json_schema": schema})
        }
        _ => json!({"type": "json_object"}),
    }
}

fn content(v: &Value, path: &str) -> Result<Content, BadRequest> {
    let parts = match v {
        Value::String(s) => return Ok(Content::Text(s.as_str().into())),
        Value::Array(p) => p,
        _ => {
            return Err(BadRequest::field(
                path,
                "expected a string or an array of content parts",
            ))
        }
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, p) in parts.iter().enumerate() {
        let pp = format!("{path}[{j}]");
        let part = rq::object(p, &pp)?;
        match rq::required_str(part, "type", &format!("{pp}.type"))? {
            "input_text" | "output_text" | "text" => {
                out.push(Part::text(rq::required_str(part, "text", &format!("{pp}.text"))?))
            }
            "input_image" => {
                let url = rq::opt_str(part, "image_url", &format!("{pp}.image_url"))?.ok_or_else(|| {
                    BadRequest::field(
                        format!("{pp}.image_url"),
                        "field required (fusebox keeps no files: send images by URL or as a data: URL)",
                    )
                })?;
                out.push(Part::Image {
                    source: ImageSource::from_url(url),
                    detail: rq::opt_str(part, "detail", &format!("{pp}.detail"))?.map(Arc::from),
                });
            }
            "refusal" => {}
            other => {
                return Err(BadRequest::field(
                    format!("{pp}.type"),
                    &format!("unsupported content type `{other}`; fusebox reads input_text and input_image"),
                ))
            }
        }
    }
    Ok(match out.as_slice() {
        [Part::Text { text }] => Content::Text(text.clone()),
        _ => Content::Parts(out.into()),
    })
}

/// Reads `input` items: messages in order, a run of `function_call`
/// items as the assistant turn that made them (with the text before them),
/// each `function_call_output` as a tool result.
fn read_items(items: &[Value], out: &mut Vec<Message>) -> Result<(), BadRequest> {
    for (i, item) in items.iter().enumerate() {
        let path = format!("input[{i}]");
        let it = rq::object(item, &path)?;
        let ty = rq::opt_str(it, "type", &format!("{path}.type"))?.unwrap_or("message");
        match ty {
            "message" => {
                let role = match rq::required_str(it, "role", &format!("{path}.role"))? {
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    "system" => Role::System,
                    "developer" => Role::Developer,
                    _ => {
                        return Err(BadRequest::field(
                            format!("{path}.role"),
                            "unsupported role; expected one of user, assistant, system, developer",
                        ))
                    }
                };
                let c = it
                    .get("content")
                    .ok_or_else(|| BadRequest::field(format!("{path}.content"), "field required"))?;
                out.push(Message::new(role, content(c, &format!("{path}.content"))?));
            }
            "function_call" => {
                let call = ToolCall {
                    kind: ToolKind::Function,
                    id: rq::required_str(it, "call_id", &format!("{path}.call_id"))?.to_string(),
                    name: rq::required_str(it, "name", &format!("{path}.name"))?.to_string(),
                    arguments: rq::opt_str(it, "arguments", &format!("{path}.arguments"))?
                        .unwrap_or("{}")
                        .to_string(),
                };
                match out.last_mut() {
                    Some(m) if m.role == Role::Assistant => {
                        let mut calls = m.tool_calls.to_vec();
                        calls.push(call);
                        m.tool_calls = calls.into();
                    }
                    _ => out.push(Message::assistant("", vec![call])),
                }
            }
            "function_call_output" => {
                let id = rq::required_str(it, "call_id", &format!("{path}.call_id"))?;
                let c = it
                    .get("output")
                    .ok_or_else(|| BadRequest::field(format!("{path}.output"), "field required"))?;
                let mut m = Message::new(Role::Tool, content(c, &format!("{path}.output"))?);
                m.tool_call_id = Some(id.into());
                out.push(m);
            }
            // A reasoning model's own notes, of use to it alone.
            "reasoning" => {}
            "item_reference" => {
                return Err(BadRequest::field(
                    format!("{path}.type"),
                    "fusebox keeps no responses: send the item itself, not a reference to it",
                ))
            }
            other => {
                return Err(BadRequest::field(
                    format!("{path}.type"),
                    &format!(
                    "unsupported item type `{other}`; fusebox reads message, function_call and function_call_output"
                ),
                ))
            }
        }
    }
    Ok(())
}

fn tools(obj: &Obj) -> Result<Vec<ToolSpec>, BadRequest> {
    let mut out = Vec::new();
    for (i, t) in rq::array(obj, "tools", "tools")?.iter().enumerate() {
        let path = format!("tools[{i}]");
        let t = rq::object(t, &path)?;
        match rq::required_str(t, "type", &format!("{path}.type"))? {
            "function" => out.push(ToolSpec {
                kind: ToolKind::Function,
                name: rq::tool_name(t, &format!("{path}.name"))?.into(),
                description: rq::opt_str(t, "description", &format!("{path}.description"))?
                    .unwrap_or_default()
                    .into(),
                schema: rq::schema(t, "parameters", &format!("{path}.parameters"))?.into(),
            }),
            "custom" => {
                return Err(BadRequest::field(
                    format!("{path}.type"),
                    "custom tools are served on /v1/chat/completions, not here: fusebox serves function tools on /v1/responses",
                ))
            }
            other => {
                return Err(BadRequest::field(
                    format!("{path}.type"),
                    &format!("unsupported tool type `{other}`: fusebox serves function tools (hosted tools need OpenAI's own Responses API)"),
                ))
            }
        }
    }
    Ok(out)
}

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

    fn message(&self, i: usize) -> String {
        format!("msg_{}{i:02}", self.stem)
    }

    fn call(&self, i: usize) -> String {
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

fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if text.is_empty() && status == "in_progress" {
        json!([])
    } else {
        json!([{"type": "output_text", "text": text, "annotations": [], "logprobs": []}])
    };
    json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
}

fn call_item(id: &str, c: &ToolCall, status: &str) -> Value {
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

/// A `response` object for `r` (`status`: `completed`, `in_progress`,
/// `failed`, `incomplete`).
fn object(
    ids: &Ids,
    echo: &Echo,
    model: &str,
    created: u64,
    status: &str,
    output: Vec<Value>,
    u: Option<Usage>,
) -> Value {
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

fn status_of(r: &Reply) -> &'static str {
    if r.finish == Some(Finish::Length) {
        "incomplete"
    } else {
        "completed"
    }
}

/// A whole `response` object for `r`.
pub fn render_reply(ids: &Ids, echo: &Echo, created: u64, r: &Reply) -> Value {
    object(ids, echo, &r.model, created, status_of(r), output(ids, r), r.usage)
}

/// Writes pieces as the Responses API's semantic stream events.
#[derive(Debug)]
pub struct EventWriter {
    ids: Ids,
    echo: Echo,
    model: String,
    created: u64,
    seq: u64,
    started: bool,
    /// The answer so far (its tool calls, and why it ended).
    reply: Reply,
    /// Output items written so far (done ones as they ended).
    items: Vec<Value>,
    /// The message being written: its output index, number and text.
    message: Option<(usize, usize, String)>,
    /// Messages begun so far (each has its own id).
    messages: usize,
    /// Tool calls not done yet: the stream's index of each, its output
    /// index and its place in `reply.tool_calls`. A call stays open until
    /// text follows or the answer ends, so arguments of calls streamed
    /// side by side each reach their own call.
    calls: Vec<(u32, usize, usize)>,
    /// The stream's index of every call begun.
    begun: Vec<u32>,
    usage: Usage,
}

impl EventWriter {
    /// A writer of the response `ids` (echoing `echo`) for `model`.
    pub fn new(ids: Ids, echo: Echo, model: impl Into<String>, created: u64) -> Self {
        Self {
            ids,
            echo,
            model: model.into(),
            created,
            seq: 0,
            started: false,
            reply: Reply::default(),
            items: Vec::new(),
            message: None,
            messages: 0,
            calls: Vec::new(),
            begun: Vec::new(),
            usage: Usage::default(),
        }
    }

    fn event(&mut self, name: &str, mut data: Value, out: &mut Vec<u8>) {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        super::anthropic::event(name, &data, out);
    }

    fn snapshot(&self, status: &str) -> Value {
        let u = (status != "in_progress").then_some(self.usage);
        object(
            &self.ids,
            &self.echo,
            &self.model,
            self.created,
            status,
            self.items.clone(),
            u,
        )
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let r = self.snapshot("in_progress");
        self.event("response.created", json!({"response": r}), out);
        self.event("response.in_progress", json!({"response": r}), out);
    }

    fn close_message(&mut self, out: &mut Vec<u8>) {
        let Some((at, m, text)) = self.message.take() else {
            return;
        };
        let id = self.ids.message(m);
        self.event(
            "response.output_text.done",
            json!({"item_id": id, "output_index": at, "content_index": 0, "text": text, "logprobs": []}),
            out,
        );
        let part = json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
        self.event(
            "response.content_part.done",
            json!({"item_id": id, "output_index": at, "content_index": 0, "part": part}),
            out,
        );
        self.items[at] = message_item(&id, &text, "completed");
        let item = self.items[at].clone();
        self.event(
            "response.output_item.done",
            json!({"output_index": at, "item": item}),
            out,
        );
    }

    fn close_calls(&mut self, out: &mut Vec<u8>) {
        for (_, at, c) in std::mem::take(&mut self.calls) {
            let id = self.ids.call(c);
            let call = self.reply.tool_calls[c].clone();
            self.event(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": at, "arguments": call.arguments}),
                out,
            );
            self.items[at] = call_item(&id, &call, "completed");
            let item = self.items[at].clone();
            self.event(
                "response.output_item.done",
                json!({"output_index": at, "item": item}),
                out,
            );
        }
    }

    fn text(&mut self, t: &str, out: &mut Vec<u8>) {
        if self.message.is_none() {
            self.close_calls(out);
            let (at, m) = (self.items.len(), self.messages);
            self.messages += 1;
            let id = self.ids.message(m);
            let item = message_item(&id, "", "in_progress");
            self.items.push(item.clone());
            self.event(
                "response.output_item.added",
                json!({"output_index": at, "item": item}),
                out,
            );
            let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
            self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": at, "content_index": 0, "part": part}),
                out,
            );
            self.message = Some((at, m, String::new()));
        }
        let Some((at, m, text)) = self.message.as_mut() else {
            return;
        };
        text.push_str(t);
        let (at, id) = (*at, self.ids.message(*m));
        self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": at, "content_index": 0, "delta": t, "logprobs": []}),
            out,
        );
    }

    fn call_start(&mut self, index: u32, id: &str, name: &str, out: &mut Vec<u8>) {
        // A call's start said again (some servers repeat it in every
        // chunk) starts no second call.
        if self.begun.contains(&index) {
            return;
        }
        self.begun.push(index);
        self.close_message(out);
        let c = self.reply.tool_calls.len();
        let call = ToolCall::new(id, name, "");
        self.reply.tool_calls.push(call.clone());
        let at = self.items.len();
        let item = call_item(&self.ids.call(c), &call, "in_progress");
        self.items.push(item.clone());
        self.event(
            "response.output_item.added",
            json!({"output_index": at, "item": item}),
            out,
        );
        self.calls.push((index, at, c));
    }

    fn call_args(&mut self, index: u32, fragment: &str, out: &mut Vec<u8>) {
        let Some(&(_, at, c)) = self.calls.iter().find(|(i, ..)| *i == index) else {
            return;
        };
        self.reply.tool_calls[c].arguments.push_str(fragment);
        self.event(
            "response.function_call_arguments.delta",
            json!({"item_id": self.ids.call(c), "output_index": at, "delta": fragment}),
            out,
        );
    }

    /// Writes `d` to `out`.
    pub fn write(&mut self, d: &Delta, out: &mut Vec<u8>) {
        match d {
            Delta::Usage(u) => {
                self.usage.merge(u);
                return;
            }
            Delta::Start { model, .. } if !model.is_empty() && !self.started => self.model.clone_from(model),
            _ => {}
        }
        self.start(out);
        match d {
            Delta::Start { .. } | Delta::Usage(_) | Delta::Reasoning(_) | Delta::OtherBlock => {}
            Delta::Text(t) | Delta::Refusal(t) => self.text(t, out),
            Delta::ToolStart { index, id, name } => self.call_start(*index, id, name, out),
            Delta::ToolArgs { index, fragment } => self.call_args(*index, fragment, out),
            Delta::Finish(f) => self.reply.finish = Some(*f),
            Delta::Done => {
                self.close_message(out);
                self.close_calls(out);
                let status = status_of(&self.reply);
                let r = self.snapshot(status);
                let name = if status == "incomplete" {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                self.event(name, json!({"response": r}), out);
            }
        }
    }

    /// Ends a stream cut short: an `error` event, then `response.failed`.
    pub fn fail(&mut self, code: &str, message: &str, out: &mut Vec<u8>) {
        self.start(out);
        self.event("error", json!({"code": code, "message": message, "param": null}), out);
        let mut r = self.snapshot("failed");
        r["error"] = json!({"code": code, "message": message});
        self.event("response.failed", json!({"response": r}), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(out: &[u8]) -> Vec<Value> {
        String::from_utf8_lossy(out)
            .split("\n\n")
            .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn each_item_has_its_own_id_text_and_arguments() {
        let mut w = EventWriter::new(Ids::new(7), Echo::default(), "gpt-4o", 0);
        let start = |index, id: &str| Delta::ToolStart {
            index,
            id: id.into(),
            name: "get_order".into(),
        };
        let args = |index, fragment: &str| Delta::ToolArgs {
            index,
            fragment: fragment.into(),
        };
        let mut out = Vec::new();
        for d in [
            Delta::Text("Looking.".into()),
            start(0, "call_a"),
            start(1, "call_b"),
            start(1, "call_b"),
            args(1, r#"{"order_id":"2"}"#),
            args(0, r#"{"order_id":"1"}"#),
            Delta::Text("Both found.".into()),
            Delta::Done,
        ] {
            w.write(&d, &mut out);
        }
        let evs = events(&out);
        let done = evs.last().unwrap();
        assert_eq!(done["type"], "response.completed");
        let output = done["response"]["output"].as_array().unwrap();
        let summary: Vec<(&str, &str, String)> = output
            .iter()
            .map(|i| {
                let what = match i["type"].as_str().unwrap() {
                    "message" => i["content"][0]["text"].as_str().unwrap().to_string(),
                    _ => format!(
                        "{} {}",
                        i["call_id"].as_str().unwrap(),
                        i["arguments"].as_str().unwrap()
                    ),
                };
                (i["type"].as_str().unwrap(), i["id"].as_str().unwrap(), what)
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("message", "msg_000000000000000700", "Looking.".to_string()),
                (
                    "function_call",
                    "fc_000000000000000700",
                    r#"call_a {"order_id":"1"}"#.to_string()
                ),
                (
                    "function_call",
                    "fc_000000000000000701",
                    r#"call_b {"order_id":"2"}"#.to_string()
                ),
                ("message", "msg_000000000000000701", "Both found.".to_string()),
            ]
        );
        // The deltas name the item they belong to.
        let deltas: Vec<(u64, &str)> = evs
            .iter()
            .filter(|e| e["type"] == "response.function_call_arguments.delta")
            .map(|e| (e["output_index"].as_u64().unwrap(), e["item_id"].as_str().unwrap()))
            .collect();
        assert_eq!(deltas, [(2, "fc_000000000000000701"), (1, "fc_000000000000000700")]);
        let seq: Vec<u64> = evs.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect();
        assert!(seq.windows(2).all(|w| w[1] == w[0] + 1));
    }
}
