//! Responses API requests read into the typed conversation.

use crate::wire::message::{Content, ImageSource, Message, Part, Role, ToolCall, ToolKind, ToolSpec};
use crate::wire::request::{self as rq, BadRequest, Obj, Params, Request};
use crate::wire::Api;
use serde_json::{json, Value};
use std::fmt::Display;
use std::sync::Arc;

/// Reads a `POST /v1/responses` body.
pub fn parse_request(bytes: &[u8]) -> Result<Request, BadRequest> {
    let (_, obj) = rq::body(bytes, &[])?;
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
            needs.push(("text.format", Api::Chat));
            Some(format_of(f))
        }
        _ => None,
    };
    let reasoning_effort = rq::opt_obj(&obj, "reasoning", "reasoning")?
        .and_then(|r| r.get("effort"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let params = Params {
        wire: Api::Chat,
        tool_choice: rq::tool_choice(&obj)?,
        parallel_tool_calls: rq::opt_bool(&obj, "parallel_tool_calls", "parallel_tool_calls")?,
        temperature: rq::opt_f64(&obj, "temperature", "temperature")?,
        top_p: rq::opt_f64(&obj, "top_p", "top_p")?,
        stop: Vec::new(),
        max_tokens: rq::opt_tokens(&obj, "max_output_tokens", "max_output_tokens")?,
        choices: None,
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

fn content(v: &Value, path: &dyn Display) -> Result<Content, BadRequest> {
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
        let pp = rq::Index(&path, j);
        let part = rq::object(p, pp)?;
        match rq::required_str(part, "type", rq::Key(&pp, "type"))? {
            "input_text" | "output_text" | "text" => {
                out.push(Part::text(rq::required_str(part, "text", rq::Key(&pp, "text"))?))
            }
            "input_image" => {
                let url = rq::opt_str(part, "image_url", rq::Key(&pp, "image_url"))?.ok_or_else(|| {
                    BadRequest::field(
                        format!("{pp}.image_url"),
                        "field required (fusebox keeps no files: send images by URL or as a data: URL)",
                    )
                })?;
                out.push(Part::Image {
                    source: ImageSource::from_url(url),
                    detail: rq::opt_str(part, "detail", rq::Key(&pp, "detail"))?.map(Arc::from),
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
        let path = rq::Index(&"input", i);
        let it = rq::object(item, path)?;
        let ty = rq::opt_str(it, "type", rq::Key(&path, "type"))?.unwrap_or("message");
        match ty {
            "message" => {
                let role = match rq::required_str(it, "role", rq::Key(&path, "role"))? {
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
                out.push(Message::new(role, content(c, &rq::Key(&path, "content"))?));
            }
            "function_call" => {
                let call = ToolCall {
                    kind: ToolKind::Function,
                    id: rq::required_str(it, "call_id", rq::Key(&path, "call_id"))?.to_string(),
                    name: rq::required_str(it, "name", rq::Key(&path, "name"))?.to_string(),
                    arguments: rq::opt_str(it, "arguments", rq::Key(&path, "arguments"))?
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
                let id = rq::required_str(it, "call_id", rq::Key(&path, "call_id"))?;
                let c = it
                    .get("output")
                    .ok_or_else(|| BadRequest::field(format!("{path}.output"), "field required"))?;
                let mut m = Message::new(Role::Tool, content(c, &rq::Key(&path, "output"))?);
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
        let path = rq::Index(&"tools", i);
        let t = rq::object(t, path)?;
        match rq::required_str(t, "type", rq::Key(&path, "type"))? {
            "function" => out.push(ToolSpec {
                kind: ToolKind::Function,
                name: rq::tool_name(t, rq::Key(&path, "name"))?.into(),
                description: rq::opt_str(t, "description", rq::Key(&path, "description"))?
                    .unwrap_or_default()
                    .into(),
                schema: rq::schema(t, "parameters", rq::Key(&path, "parameters"))?.into(),
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
