//! Anthropic messages requests: read from a client, written for an upstream
//! (the client's body passed on, or the typed call rendered).

use crate::wire::message::{Content, ImageSource, Message, Origin, Part, Role, ToolCall, ToolKind, ToolSpec};
use crate::wire::raw::{to_raw, RawBody};
use crate::wire::request::{self as rq, BadRequest, Obj, Outgoing, Params, Request, ToolChoice};
use crate::wire::Api;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use smallvec::SmallVec;
use std::fmt::Display;
use std::sync::Arc;

/// Reads a messages request body.
pub fn parse_request(bytes: &[u8]) -> Result<Request, BadRequest> {
    let (raw, obj) = rq::body(bytes, &[])?;
    let model = rq::model(&obj)?;
    let stream = rq::opt_bool(&obj, "stream", "stream")?.unwrap_or(false);
    let max_tokens = rq::opt_tokens(&obj, "max_tokens", "max_tokens")?
        .ok_or_else(|| BadRequest::field("max_tokens", "field required"))?;
    let mut messages = Vec::new();
    match obj.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(Message::system(s.as_str())),
        Some(Value::Array(blocks)) => {
            let mut text = Vec::new();
            for (i, b) in blocks.iter().enumerate() {
                let b = rq::object(b, rq::Index(&"system", i))?;
                text.push(rq::required_str(b, "text", rq::Key(&rq::Index(&"system", i), "text"))?);
            }
            messages.push(Message::system(text.join("\n")));
        }
        Some(_) => {
            return Err(BadRequest::field(
                "system",
                "expected a string or an array of text blocks",
            ))
        }
    }
    read_messages(&obj, &mut messages)?;
    let (tools, offered) = tools(&obj)?;
    let mut needs = Vec::new();
    if offered.server {
        needs.push(("server tools", Api::Messages));
    }
    if offered.defined {
        needs.push(("Anthropic-defined tools", Api::Messages));
    }
    if let Some(t) = rq::opt_obj(&obj, "thinking", "thinking")? {
        if rq::opt_str(t, "type", "thinking.type")? == Some("enabled") {
            needs.push(("thinking", Api::Messages));
        }
    }
    if messages.iter().any(|m| {
        m.content
            .parts()
            .iter()
            .any(|p| matches!(p, Part::Opaque { .. }) && !p.droppable())
    }) {
        needs.push(("document content", Api::Messages));
    }
    let (tool_choice, parallel_tool_calls) = tool_choice(&obj)?;
    let user = match rq::opt_obj(&obj, "metadata", "metadata")? {
        Some(m) => rq::opt_str(m, "user_id", "metadata.user_id")?.map(str::to_string),
        None => None,
    };
    let params = Params {
        wire: Api::Messages,
        tool_choice,
        parallel_tool_calls,
        temperature: rq::opt_f64(&obj, "temperature", "temperature")?,
        top_p: rq::opt_f64(&obj, "top_p", "top_p")?,
        stop: rq::stop_list(&obj, "stop_sequences")?,
        max_tokens: Some(max_tokens),
        choices: None,
        completion_tokens_key: false,
        user,
        needs,
        response_format: None,
        reasoning_effort: None,
        raw: Some(Arc::new(raw)),
        from_client: true,
        headers: Vec::new(),
    };
    Ok(Request {
        model,
        messages,
        tools,
        stream,
        include_usage: false,
        params,
    })
}

/// Reads `messages`: a user turn's `tool_result` blocks become tool
/// messages (before what else the turn says), an assistant's `tool_use`
/// blocks its tool calls.
fn read_messages(obj: &Obj, out: &mut Vec<Message>) -> Result<(), BadRequest> {
    for (i, m) in rq::messages_array(obj)?.iter().enumerate() {
        let start = out.len();
        read_turn(i, m, out)?;
        let origin = Origin {
            index: i as u32,
            pieces: (out.len() - start) as u32,
        };
        out[start..].iter_mut().for_each(|m| m.origin = Some(origin));
    }
    Ok(())
}

/// Reads turn `i` into messages (none for a turn with nothing in it).
fn read_turn(i: usize, m: &Value, out: &mut Vec<Message>) -> Result<(), BadRequest> {
    let path = rq::Index(&"messages", i);
    let m = rq::object(m, path)?;
    let role_path = rq::Key(&path, "role");
    let role = match rq::required_str(m, "role", role_path)? {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        _ => {
            return Err(BadRequest::field(
                role_path,
                "unsupported role; expected one of user, assistant",
            ))
        }
    };
    let cpath = rq::Key(&path, "content");
    let blocks = match m.get("content") {
        None | Some(Value::Null) => return Err(BadRequest::field(cpath, "field required")),
        Some(Value::String(s)) => {
            out.push(Message::new(role, s.as_str()));
            return Ok(());
        }
        Some(Value::Array(b)) => b,
        Some(_) => {
            return Err(BadRequest::field(
                cpath,
                "expected a string or an array of content parts",
            ))
        }
    };
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    let mut reasoning = String::new();
    for (j, b) in blocks.iter().enumerate() {
        let bp = rq::Index(&cpath, j);
        let block = b
            .as_object()
            .ok_or_else(|| BadRequest::field(bp, "expected a content part object"))?;
        match rq::required_str(block, "type", rq::Key(&bp, "type"))? {
            "tool_result" => {
                let id = rq::required_str(block, "tool_use_id", rq::Key(&bp, "tool_use_id"))?;
                let content = match block.get("content") {
                    None | Some(Value::Null) => Content::default(),
                    Some(Value::String(s)) => Content::Text(s.as_str().into()),
                    Some(Value::Array(inner)) => Content::Parts(
                        inner
                            .iter()
                            .enumerate()
                            .map(|(k, p)| part(p, &rq::Index(&rq::Key(&bp, "content"), k)))
                            .collect::<Result<Vec<_>, _>>()?
                            .into(),
                    ),
                    Some(_) => {
                        return Err(BadRequest::field(
                            format!("{bp}.content"),
                            "expected a string or blocks",
                        ))
                    }
                };
                let mut msg = Message::new(Role::Tool, content);
                msg.tool_call_id = Some(id.into());
                msg.is_error = rq::opt_bool(block, "is_error", rq::Key(&bp, "is_error"))?.unwrap_or(false);
                out.push(msg);
            }
            "tool_use" if role == Role::Assistant => calls.push(ToolCall {
                kind: ToolKind::Function,
                id: rq::required_str(block, "id", rq::Key(&bp, "id"))?.to_string(),
                name: rq::required_str(block, "name", rq::Key(&bp, "name"))?.to_string(),
                arguments: match block.get("input") {
                    Some(v @ Value::Object(_)) => v.to_string(),
                    Some(Value::String(s)) => s.clone(),
                    _ => "{}".into(),
                },
            }),
            "thinking" => {
                if let Some(t) = block.get("thinking").and_then(Value::as_str) {
                    reasoning.push_str(t);
                }
                parts.push(part(b, &bp)?);
            }
            _ => parts.push(part(b, &bp)?),
        }
    }
    if parts.is_empty() && calls.is_empty() {
        return Ok(());
    }
    let content = match parts.as_slice() {
        [] => Content::default(),
        [Part::Text { text }] => Content::Text(text.clone()),
        _ => Content::Parts(parts.into()),
    };
    let mut msg = Message::assistant(content, calls);
    msg.role = role;
    if !reasoning.is_empty() {
        msg.reasoning = Some(reasoning.into());
    }
    out.push(msg);
    Ok(())
}

/// One content block: `text`, `image` (base64 or URL), or kept as sent.
fn part(v: &Value, path: &dyn Display) -> Result<Part, BadRequest> {
    let b = v
        .as_object()
        .ok_or_else(|| BadRequest::field(path, "expected a content part object"))?;
    Ok(match rq::required_str(b, "type", rq::Key(&path, "type"))? {
        "text" => Part::text(rq::required_str(b, "text", rq::Key(&path, "text"))?),
        "image" => {
            let sp = rq::Key(&path, "source");
            let s = rq::opt_obj(b, "source", sp)?.ok_or_else(|| BadRequest::field(sp, "field required"))?;
            let source = match rq::required_str(s, "type", rq::Key(&sp, "type"))? {
                "base64" => ImageSource::Base64 {
                    media_type: rq::required_str(s, "media_type", rq::Key(&sp, "media_type"))?.into(),
                    data: rq::required_str(s, "data", rq::Key(&sp, "data"))?.into(),
                },
                "url" => ImageSource::Url(rq::required_str(s, "url", rq::Key(&sp, "url"))?.into()),
                _ => {
                    return Ok(Part::Opaque {
                        wire: Api::Messages,
                        value: Arc::new(v.clone()),
                    })
                }
            };
            Part::Image { source, detail: None }
        }
        _ => Part::Opaque {
            wire: Api::Messages,
            value: Arc::new(v.clone()),
        },
    })
}

/// Which of Anthropic's own tools a request offers besides custom ones.
#[derive(Default)]
struct Offered {
    /// Tools Anthropic runs (web search, code execution, …): their calls
    /// and results come back as blocks of their own, not as `tool_use`.
    server: bool,
    /// Tools Anthropic defines and the client runs (bash, the text
    /// editor, computer use, memory): the model calls them by name.
    defined: bool,
}

/// Anthropic-defined tools the client runs, by their type's prefix.
const CLIENT_RUN: [&str; 4] = ["bash_", "text_editor_", "computer_", "memory_"];

/// The tools the model may call as `tool_use` (custom ones and
/// Anthropic-defined ones, whose arguments Anthropic's schema governs), and
/// which of Anthropic's own tools were offered.
fn tools(obj: &Obj) -> Result<(Vec<ToolSpec>, Offered), BadRequest> {
    let mut out = Vec::new();
    let mut offered = Offered::default();
    for (i, t) in rq::array(obj, "tools", "tools")?.iter().enumerate() {
        let path = rq::Index(&"tools", i);
        let t = rq::object(t, path)?;
        match rq::opt_str(t, "type", rq::Key(&path, "type"))? {
            None | Some("custom") => {}
            Some(ty) if CLIENT_RUN.iter().any(|p| ty.starts_with(p)) => {
                offered.defined = true;
                out.push(ToolSpec {
                    kind: ToolKind::Function,
                    name: rq::tool_name(t, rq::Key(&path, "name"))?.into(),
                    description: "".into(),
                    schema: Arc::new(json!({"type": "object"})),
                });
                continue;
            }
            Some(_) => {
                offered.server = true;
                continue;
            }
        }
        out.push(ToolSpec {
            kind: ToolKind::Function,
            name: rq::tool_name(t, rq::Key(&path, "name"))?.into(),
            description: rq::opt_str(t, "description", rq::Key(&path, "description"))?
                .unwrap_or_default()
                .into(),
            schema: rq::schema(t, "input_schema", rq::Key(&path, "input_schema"))?.into(),
        });
    }
    Ok((out, offered))
}

fn tool_choice(obj: &Obj) -> Result<(Option<ToolChoice>, Option<bool>), BadRequest> {
    let Some(c) = rq::opt_obj(obj, "tool_choice", "tool_choice")? else {
        return Ok((None, None));
    };
    let choice = match rq::required_str(c, "type", "tool_choice.type")? {
        "auto" => ToolChoice::Auto,
        "any" => ToolChoice::Required,
        "none" => ToolChoice::None,
        "tool" => ToolChoice::Tool(rq::required_str(c, "name", "tool_choice.name")?.to_string()),
        _ => {
            return Err(BadRequest::field(
                "tool_choice.type",
                "expected auto, any, tool or none",
            ))
        }
    };
    let parallel = rq::opt_bool(c, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use")?.map(|d| !d);
    Ok((Some(choice), parallel))
}

/// Renders a call as a messages body: the client's own body when it speaks
/// this API (only `model`, a lowered `max_tokens`, `stream`, and the
/// conversation where fusebox changed it, replaced), else the typed call.
/// `Err` names what this API cannot honour.
pub fn render_request(o: &Outgoing) -> Result<Vec<u8>, String> {
    if let Some(raw) = o.passthrough(Api::Messages) {
        return passthrough(raw, o);
    }
    if let Some(why) = o.params.cannot_honour(Api::Messages) {
        return Err(why);
    }
    o.functions_only()?;
    let (system, messages) = render_messages(o.messages)?;
    let p = o.params;
    let mut b = Obj::new();
    b.insert("model".into(), json!(o.model));
    b.insert("max_tokens".into(), json!(o.max_tokens));
    if let Some(s) = system {
        b.insert("system".into(), json!(s));
    }
    b.insert("messages".into(), Value::Array(messages));
    let history_has_tools = o
        .messages
        .iter()
        .any(|m| !m.tool_calls.is_empty() || m.role == Role::Tool);
    if o.tools.is_empty() && history_has_tools {
        return Err("cannot honour tool calls in the conversation without tools offered".into());
    }
    if !o.tools.is_empty() {
        let tools: Vec<Value> = o
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.schema}))
            .collect();
        b.insert("tools".into(), Value::Array(tools));
        let mut choice = match &p.tool_choice {
            None => None,
            Some(ToolChoice::Auto) => Some(json!({"type": "auto"})),
            Some(ToolChoice::None) => Some(json!({"type": "none"})),
            Some(ToolChoice::Required) => Some(json!({"type": "any"})),
            Some(ToolChoice::Tool(name)) => Some(json!({"type": "tool", "name": name})),
        };
        if p.parallel_tool_calls == Some(false) && p.tool_choice != Some(ToolChoice::None) {
            choice.get_or_insert_with(|| json!({"type": "auto"}))["disable_parallel_tool_use"] = json!(true);
        }
        if let Some(c) = choice {
            b.insert("tool_choice".into(), c);
        }
    }
    // Anthropic's range is 0..1 where OpenAI's is 0..2.
    if let Some(t) = p.temperature {
        b.insert("temperature".into(), json!(t.clamp(0.0, 1.0)));
    }
    if let Some(t) = p.top_p {
        b.insert("top_p".into(), json!(t));
    }
    if !p.stop.is_empty() {
        b.insert("stop_sequences".into(), json!(p.stop));
    }
    if let Some(u) = &p.user {
        b.insert("metadata".into(), json!({"user_id": u}));
    }
    b.insert("stream".into(), json!(o.stream));
    Ok(Value::Object(b).to_string().into_bytes())
}

fn passthrough(raw: &RawBody, o: &Outgoing) -> Result<Vec<u8>, String> {
    let mut set: SmallVec<[(&str, Box<RawValue>); 5]> = SmallVec::new();
    set.push(("model", to_raw(&o.model)));
    // A changed conversation (trimmed, resumed) keeps every instruction,
    // so `system` stays as sent.
    if !o.own_messages {
        let messages = rq::kept_messages(raw, o.messages, |run| render_messages(run).map(|(_, turns)| turns))?;
        set.push(("messages", messages));
    }
    if o.params.max_tokens.is_some_and(|cap| o.max_tokens < cap) {
        set.push(("max_tokens", to_raw(&o.max_tokens)));
    }
    let client_streams = raw.read::<bool>("stream").and_then(Result::ok).unwrap_or(false);
    if client_streams != o.stream {
        set.push(("stream", to_raw(&o.stream)));
    }
    let set: SmallVec<[(&str, &RawValue); 5]> = set.iter().map(|(k, v)| (*k, &**v)).collect();
    Ok(raw.render(&set, &[]))
}

fn block_of(p: &Part) -> Result<Option<Value>, String> {
    Ok(Some(match p {
        Part::Text { text } if text.is_empty() => return Ok(None),
        Part::Text { text } => json!({"type": "text", "text": text}),
        Part::Image { source, .. } => {
            let source = match source {
                ImageSource::Url(url) => json!({"type": "url", "url": url}),
                ImageSource::Base64 { media_type, data } => {
                    json!({"type": "base64", "media_type": media_type, "data": data})
                }
            };
            json!({"type": "image", "source": source})
        }
        Part::Opaque {
            wire: Api::Messages,
            value,
        } => (**value).clone(),
        p if p.droppable() => return Ok(None),
        p => return Err(format!("cannot honour {} content", p.kind())),
    }))
}

/// Typed messages as `system` text and alternating turns of blocks: tool
/// results are user turns of `tool_result` blocks, tool calls `tool_use`
/// blocks, and consecutive turns of one role are merged. `Err` names a
/// part this API cannot carry.
pub fn render_messages(messages: &[Message]) -> Result<(Option<String>, Vec<Value>), String> {
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, mut blocks) = match m.role {
            Role::System | Role::Developer => {
                system.push(m.content.text().into_owned());
                continue;
            }
            Role::User => ("user", Vec::new()),
            Role::Assistant => ("assistant", Vec::new()),
            Role::Tool => {
                let mut inner = Vec::new();
                for p in m.content.parts().iter() {
                    inner.extend(block_of(p)?);
                }
                let mut r = json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.as_deref().unwrap_or(""),
                    "content": inner,
                });
                if m.is_error {
                    r["is_error"] = json!(true);
                }
                ("user", vec![r])
            }
        };
        if m.role != Role::Tool {
            for p in m.content.parts().iter() {
                blocks.extend(block_of(p)?);
            }
            for c in m.tool_calls.iter() {
                let input = c.arguments_object()?;
                blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
            }
        }
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            // Tool results lead their turn, as the API wants them.
            Some((r, b)) if *r == role => {
                if m.role == Role::Tool {
                    let at = b.iter().take_while(|x| x["type"] == "tool_result").count();
                    b.splice(at..at, blocks);
                } else {
                    b.extend(blocks);
                }
            }
            _ => turns.push((role, blocks)),
        }
    }
    // A prefilled answer (the last turn the assistant's) may not end in whitespace.
    if let Some(("assistant", blocks)) = turns.last_mut() {
        if let Some(Value::String(t)) = blocks.last_mut().and_then(|b| b.get_mut("text")) {
            let trimmed = t.trim_end().len();
            t.truncate(trimmed);
        }
    }
    let messages = turns
        .into_iter()
        .map(|(role, blocks)| json!({"role": role, "content": blocks}))
        .collect();
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    Ok((system, messages))
}
