//! Chat-completions requests: read from a client, written for an upstream
//! (the client's body passed on, or the typed call rendered).

use super::reply::call_json;
use super::{Dialect, ROLES};
use crate::wire::message::{Content, ImageSource, Message, Origin, Part, Role, ToolCall, ToolKind, ToolSpec};
use crate::wire::raw::{to_raw, RawBody};
use crate::wire::request::{self as rq, BadRequest, Obj, Outgoing, Params, Request, ToolChoice};
use crate::wire::Api;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use smallvec::SmallVec;
use std::fmt::Display;
use std::sync::Arc;

/// Reads a chat-completions request body.
pub fn parse_request(bytes: &[u8]) -> Result<Request, BadRequest> {
    match usual::request(rq::raw_body(bytes)?) {
        Ok(request) => Ok(request),
        Err(raw) => read_generally(raw),
    }
}

/// Reads a request of any shape, naming what is wrong with it.
fn read_generally(raw: RawBody) -> Result<Request, BadRequest> {
    let mut obj = rq::members(&raw, &["messages"])?;
    let model = rq::model(&obj)?;
    let stream = rq::opt_bool(&obj, "stream", "stream")?.unwrap_or(false);
    let messages = match raw.get("messages").and_then(usual::messages) {
        Some(m) => m,
        None => {
            if let Some(v) = raw.get("messages") {
                obj.insert("messages".into(), rq::member("messages", v)?);
            }
            messages_of(&obj)?
        }
    };
    let tools = rq::allowed_tools(&obj, tools(&obj)?);
    let (max_tokens, completion_tokens_key) =
        match rq::opt_tokens(&obj, "max_completion_tokens", "max_completion_tokens")? {
            Some(m) => (Some(m), true),
            None => (rq::opt_tokens(&obj, "max_tokens", "max_tokens")?, false),
        };
    let include_usage = match rq::opt_obj(&obj, "stream_options", "stream_options")? {
        Some(o) => rq::opt_bool(o, "include_usage", "stream_options.include_usage")?.unwrap_or(false),
        None => false,
    };
    let mut needs = Vec::new();
    if tools.iter().any(|t| t.kind == ToolKind::Custom) {
        needs.push(("custom tools", Api::Chat));
    }
    let choices = rq::opt_u32(&obj, "n", "n")?.filter(|&n| n > 1);
    if choices.is_some() {
        needs.push(("n > 1", Api::Chat));
    }
    if rq::opt_bool(&obj, "logprobs", "logprobs")? == Some(true) {
        needs.push(("logprobs", Api::Chat));
    }
    if let Some(f) = rq::opt_obj(&obj, "response_format", "response_format")? {
        if rq::opt_str(f, "type", "response_format.type")?.is_some_and(|t| t != "text") {
            needs.push(("response_format", Api::Chat));
        }
    }
    if obj.get("audio").is_some_and(|a| !a.is_null()) {
        needs.push(("audio output", Api::Chat));
    }
    if messages
        .iter()
        .any(|m| m.content.parts().iter().any(|p| matches!(p, Part::Opaque { .. })))
    {
        needs.push(("audio or file content", Api::Chat));
    }
    let params = Params {
        wire: Api::Chat,
        tool_choice: rq::tool_choice(&obj)?,
        parallel_tool_calls: rq::opt_bool(&obj, "parallel_tool_calls", "parallel_tool_calls")?,
        temperature: rq::opt_f64(&obj, "temperature", "temperature")?,
        top_p: rq::opt_f64(&obj, "top_p", "top_p")?,
        stop: rq::stop_list(&obj, "stop")?,
        max_tokens,
        choices,
        completion_tokens_key,
        user: rq::opt_str(&obj, "user", "user")?.map(str::to_string),
        needs,
        response_format: obj.get("response_format").filter(|f| !f.is_null()).cloned(),
        reasoning_effort: rq::opt_str(&obj, "reasoning_effort", "reasoning_effort")?.map(str::to_string),
        raw: Some(Arc::new(raw)),
        from_client: true,
        headers: Vec::new(),
    };
    Ok(Request {
        model,
        messages,
        tools,
        stream,
        include_usage,
        params,
    })
}

fn messages_of(obj: &Obj) -> Result<Vec<Message>, BadRequest> {
    let arr = rq::messages_array(obj)?;
    let mut out = Vec::with_capacity(arr.len());
    for (i, m) in arr.iter().enumerate() {
        let path = rq::Index(&"messages", i);
        let m = rq::object(m, path)?;
        let role_path = rq::Key(&path, "role");
        let role = match role_named(rq::required_str(m, "role", role_path)?) {
            Some(role) => role,
            None => {
                let expected = format!("unsupported role; expected one of {}", ROLES.join(", "));
                return Err(BadRequest::field(role_path, &expected));
            }
        };
        let content_path = rq::Key(&path, "content");
        let tool_calls = match role {
            Role::Assistant => calls(m, &rq::Key(&path, "tool_calls"))?,
            _ => Vec::new(),
        };
        let mut refusal = rq::opt_str(m, "refusal", rq::Key(&path, "refusal"))?.map(Arc::from);
        let content = match m.get("content") {
            None | Some(Value::Null) if role == Role::Assistant => Content::default(),
            None | Some(Value::Null) => return Err(BadRequest::field(content_path, "field required")),
            Some(c) => content(c, &content_path, &mut refusal)?,
        };
        out.push(message(
            i,
            role,
            content,
            tool_calls,
            Said {
                refusal,
                name: rq::opt_str(m, "name", rq::Key(&path, "name"))?,
                tool_call_id: match role {
                    Role::Tool => rq::opt_str(m, "tool_call_id", rq::Key(&path, "tool_call_id"))?,
                    _ => None,
                },
                reasoning: rq::opt_str(m, "reasoning_content", rq::Key(&path, "reasoning_content"))?,
            },
        ));
    }
    Ok(out)
}

/// What a message may say besides its content and calls.
struct Said<'a> {
    refusal: Option<Arc<str>>,
    name: Option<&'a str>,
    tool_call_id: Option<&'a str>,
    reasoning: Option<&'a str>,
}

/// Message `i` of a client's `messages`, read.
fn message(i: usize, role: Role, content: Content, tool_calls: Vec<ToolCall>, said: Said) -> Message {
    let mut msg = Message::assistant(content, tool_calls);
    msg.role = role;
    msg.refusal = said.refusal;
    msg.name = said.name.map(Arc::from);
    if role == Role::Tool {
        msg.tool_call_id = said.tool_call_id.map(Arc::from);
    }
    msg.reasoning = said.reasoning.map(Arc::from);
    msg.origin = Some(Origin {
        index: i as u32,
        pieces: 1,
    });
    msg
}

mod usual;

/// The role a message names, of those chat completions know.
fn role_named(role: &str) -> Option<Role> {
    Some(match role {
        "system" => Role::System,
        "developer" => Role::Developer,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" | "function" => Role::Tool,
        _ => return None,
    })
}

/// A message's content: a string, or parts (`text`, `image_url`; a
/// `refusal` part goes to `refusal`; others are kept as they are).
fn content(v: &Value, path: &dyn Display, refusal: &mut Option<Arc<str>>) -> Result<Content, BadRequest> {
    let parts = match v {
        Value::String(s) => return Ok(Content::Text(s.as_str().into())),
        Value::Array(parts) => parts,
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
        let part = p
            .as_object()
            .ok_or_else(|| BadRequest::field(pp, "expected a content part object"))?;
        match rq::required_str(part, "type", rq::Key(&pp, "type"))? {
            "text" => out.push(Part::text(rq::required_str(part, "text", rq::Key(&pp, "text"))?)),
            "image_url" => {
                let ipath = rq::Key(&pp, "image_url");
                let image = match part.get("image_url") {
                    Some(Value::String(url)) => (url.as_str(), None),
                    Some(Value::Object(o)) => (
                        rq::required_str(o, "url", rq::Key(&ipath, "url"))?,
                        rq::opt_str(o, "detail", rq::Key(&ipath, "detail"))?,
                    ),
                    _ => return Err(BadRequest::field(ipath, "expected an object with a url")),
                };
                out.push(Part::Image {
                    source: ImageSource::from_url(image.0),
                    detail: image.1.map(Arc::from),
                });
            }
            "refusal" => {
                *refusal = Some(rq::required_str(part, "refusal", rq::Key(&pp, "refusal"))?.into());
            }
            _ => out.push(Part::Opaque {
                wire: Api::Chat,
                value: Arc::new(p.clone()),
            }),
        }
    }
    Ok(Content::Parts(out.into()))
}

fn calls(m: &Obj, path: &dyn Display) -> Result<Vec<ToolCall>, BadRequest> {
    let mut out = Vec::new();
    for (i, c) in rq::array(m, "tool_calls", path)?.iter().enumerate() {
        let cp = rq::Index(&path, i);
        let c = rq::object(c, cp)?;
        let id = rq::opt_str(c, "id", rq::Key(&cp, "id"))?
            .unwrap_or_default()
            .to_string();
        let kind = match rq::opt_str(c, "type", rq::Key(&cp, "type"))? {
            Some("custom") => ToolKind::Custom,
            _ => ToolKind::Function,
        };
        let key = kind_key(kind);
        let f = rq::opt_obj(c, key, rq::Key(&cp, key))?
            .ok_or_else(|| BadRequest::field(format!("{cp}.{key}"), "field required"))?;
        let input = if kind == ToolKind::Custom { "input" } else { "arguments" };
        out.push(ToolCall {
            id,
            name: rq::required_str(f, "name", rq::Key(&rq::Key(&cp, key), "name"))?.to_string(),
            arguments: match f.get(input) {
                Some(Value::String(s)) => s.clone(),
                None | Some(Value::Null) => String::new(),
                Some(other) => other.to_string(),
            },
            kind,
        });
    }
    Ok(out)
}

/// The member holding a tool's or a call's details: `function` or `custom`.
pub(super) fn kind_key(kind: ToolKind) -> &'static str {
    match kind {
        ToolKind::Function => "function",
        ToolKind::Custom => "custom",
    }
}

fn tools(obj: &Obj) -> Result<Vec<ToolSpec>, BadRequest> {
    let mut out = Vec::new();
    for (i, t) in rq::array(obj, "tools", "tools")?.iter().enumerate() {
        let path = rq::Index(&"tools", i);
        let t = rq::object(t, path)?;
        let kind = match rq::opt_str(t, "type", rq::Key(&path, "type"))? {
            None | Some("function") => ToolKind::Function,
            Some("custom") => ToolKind::Custom,
            Some(other) => {
                return Err(BadRequest::field(
                    format!("{path}.type"),
                    &format!("unsupported tool type `{other}`; expected function or custom"),
                ))
            }
        };
        let key = kind_key(kind);
        let fpath = rq::Key(&path, key);
        let f = rq::opt_obj(t, key, fpath)?.ok_or_else(|| BadRequest::field(fpath, "field required"))?;
        let schema = match kind {
            ToolKind::Function => rq::schema(f, "parameters", rq::Key(&fpath, "parameters"))?,
            ToolKind::Custom => f.get("format").cloned().unwrap_or_else(|| json!({"type": "text"})),
        };
        out.push(ToolSpec {
            name: rq::tool_name(f, rq::Key(&fpath, "name"))?.into(),
            description: rq::opt_str(f, "description", rq::Key(&fpath, "description"))?
                .unwrap_or_default()
                .into(),
            schema: schema.into(),
            kind,
        });
    }
    Ok(out)
}

/// Renders a call as a chat-completions body: the client's own body when it
/// speaks this API (only `model`, a lowered output cap, `stream` and
/// `stream_options.include_usage` replaced, and the messages where fusebox
/// changed them), else the typed call. `Err` names what this API cannot
/// honour.
pub fn render_request(o: &Outgoing, dialect: Dialect) -> Result<Vec<u8>, String> {
    if let Some(raw) = o.passthrough(Api::Chat) {
        return passthrough(raw, o, dialect);
    }
    if let Some(why) = o.params.cannot_honour(Api::Chat) {
        return Err(why);
    }
    let mut b = Obj::new();
    b.insert("model".into(), json!(o.model));
    b.insert("messages".into(), Value::Array(render_messages(o.messages, dialect)?));
    let p = o.params;
    if !o.tools.is_empty() {
        let tools: Vec<Value> = o
            .tools
            .iter()
            .map(|t| match t.kind {
                ToolKind::Function => json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.schema}}),
                ToolKind::Custom => json!({"type": "custom", "custom": {"name": t.name, "description": t.description, "format": t.schema}}),
            })
            .collect();
        b.insert("tools".into(), Value::Array(tools));
        if let Some(c) = &p.tool_choice {
            b.insert("tool_choice".into(), render_choice(c, o.tools));
        }
        if let Some(par) = p.parallel_tool_calls {
            b.insert("parallel_tool_calls".into(), json!(par));
        }
    }
    if p.sends_cap() {
        b.insert(dialect.cap_key(p.completion_tokens_key).into(), json!(o.max_tokens));
    }
    if let Some(t) = p.temperature {
        b.insert("temperature".into(), json!(t));
    }
    if let Some(t) = p.top_p {
        b.insert("top_p".into(), json!(t));
    }
    if !p.stop.is_empty() {
        b.insert("stop".into(), json!(p.stop));
    }
    if let Some(u) = &p.user {
        b.insert("user".into(), json!(u));
    }
    if let Some(f) = &p.response_format {
        b.insert("response_format".into(), f.clone());
    }
    if let Some(e) = &p.reasoning_effort {
        b.insert("reasoning_effort".into(), json!(e));
    }
    b.insert("stream".into(), json!(o.stream));
    if o.stream {
        b.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(Value::Object(b).to_string().into_bytes())
}

/// The client's body, with what fusebox must change replaced.
fn passthrough(raw: &RawBody, o: &Outgoing, dialect: Dialect) -> Result<Vec<u8>, String> {
    /// `stream_options` asking for usage, where the client sent none.
    static USAGE_ASKED: std::sync::LazyLock<Box<RawValue>> =
        std::sync::LazyLock::new(|| to_raw(&serde_json::json!({"include_usage": true})));
    let mut set: SmallVec<[(&str, std::borrow::Cow<'_, RawValue>); 5]> = SmallVec::new();
    let owned = |v: Box<RawValue>| std::borrow::Cow::Owned(v);
    set.push(("model", owned(to_raw(&o.model))));
    if !o.own_messages {
        set.push((
            "messages",
            owned(rq::kept_messages(raw, o.messages, |run| render_messages(run, dialect))?),
        ));
    }
    if o.params.max_tokens.is_some_and(|cap| o.max_tokens < cap) {
        let key = if o.params.completion_tokens_key {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        set.push((key, owned(to_raw(&o.max_tokens))));
    }
    let client_streams = raw.read::<bool>("stream").and_then(Result::ok).unwrap_or(false);
    if client_streams != o.stream {
        set.push(("stream", owned(to_raw(&o.stream))));
    }
    if o.stream {
        // Usage is settled from the stream's last chunk: ask for it,
        // keeping whatever else the client put in `stream_options`.
        match raw.read::<Obj>("stream_options") {
            None => set.push(("stream_options", std::borrow::Cow::Borrowed(&**USAGE_ASKED))),
            Some(so) => {
                let mut so = so.unwrap_or_default();
                if so.get("include_usage") != Some(&Value::Bool(true)) {
                    so.insert("include_usage".into(), Value::Bool(true));
                    set.push(("stream_options", owned(to_raw(&so))));
                }
            }
        }
    }
    let set: SmallVec<[(&str, &RawValue); 5]> = set.iter().map(|(k, v)| (*k, &**v)).collect();
    Ok(raw.render(&set, &[]))
}

fn render_choice(c: &ToolChoice, tools: &[ToolSpec]) -> Value {
    match c {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool(name) => {
            let kind = tools
                .iter()
                .find(|t| *t.name == **name)
                .map_or(ToolKind::Function, |t| t.kind);
            json!({"type": kind_key(kind), kind_key(kind): {"name": name}})
        }
    }
}

/// Typed messages as chat-completions messages. `Err` names a part this API
/// cannot carry.
pub fn render_messages(messages: &[Message], dialect: Dialect) -> Result<Vec<Value>, String> {
    messages.iter().map(|m| render_message(m, dialect)).collect()
}

fn render_message(m: &Message, dialect: Dialect) -> Result<Value, String> {
    let role = match (m.role, dialect) {
        (Role::Developer, Dialect::DeepSeek | Dialect::Compatible) => "system",
        (r, _) => r.as_str(),
    };
    let mut v = Obj::new();
    v.insert("role".into(), json!(role));
    let content = match (&m.content, m.role) {
        (c, Role::Assistant) if c.is_empty() && !m.tool_calls.is_empty() => Value::Null,
        (Content::Text(t), _) => json!(t),
        (Content::Parts(parts), role) => {
            let mut out = Vec::with_capacity(parts.len());
            for p in parts.iter() {
                match p {
                    Part::Text { text } => out.push(json!({"type": "text", "text": text})),
                    Part::Image { .. } if role == Role::Tool => {
                        return Err("cannot honour an image in a tool result".into())
                    }
                    Part::Image { source, detail } => {
                        let mut image = json!({"url": source.to_url()});
                        if let Some(d) = detail {
                            image["detail"] = json!(d);
                        }
                        out.push(json!({"type": "image_url", "image_url": image}));
                    }
                    Part::Opaque { wire: Api::Chat, value } => out.push((**value).clone()),
                    p if p.droppable() => {}
                    p => return Err(format!("cannot honour {} content", p.kind())),
                }
            }
            if m.role == Role::Assistant && out.iter().all(|p| p["type"] == "text") {
                // Assistant content as text: the form every compatible server reads.
                json!(m.content.text())
            } else {
                Value::Array(out)
            }
        }
    };
    v.insert("content".into(), content);
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m.tool_calls.iter().map(call_json).collect();
        v.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = &m.tool_call_id {
        v.insert("tool_call_id".into(), json!(id));
    }
    if let Some(name) = m.name.as_ref().filter(|_| m.role != Role::Tool) {
        v.insert("name".into(), json!(name));
    }
    if let Some(r) = &m.refusal {
        v.insert("refusal".into(), json!(r));
    }
    Ok(Value::Object(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Content, Message, Role};

    /// The body fusebox writes for `messages` with `params`, as JSON.
    fn written(params: &Params, dialect: Dialect) -> Value {
        let messages = [Message::new(Role::Developer, Content::Text("Be brief.".into()))];
        let o = Outgoing {
            model: "m",
            messages: &messages,
            own_messages: false,
            tools: &[],
            params,
            max_tokens: 300,
            stream: false,
        };
        serde_json::from_slice(&render_request(&o, dialect).unwrap()).unwrap()
    }

    /// `messages` of every shape: what the one-pass read gives, when it
    /// reads them, is what the general read gives, and a whole request
    /// reads alike either way.
    #[test]
    fn usual_messages_read_in_one_pass_as_the_general_read_reads_them() {
        let read_generally = |messages: &str| {
            let mut obj = Obj::new();
            obj.insert("messages".into(), serde_json::from_str(messages).unwrap());
            messages_of(&obj)
        };
        let usual = [
            r#"[{"role":"system","content":"Be brief."},{"role":"user","content":"Where is \"order\" #1?\n","name":"ann"}]"#,
            r#"[{"role":"developer","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_order","arguments":"{\"id\":1}"}},{"id":"c2","type":"custom","custom":{"name":"sh","input":"ls"}}],"refusal":null,"reasoning_content":"r"},{"role":"tool","tool_call_id":"c1","content":"ok","name":"get_order"},{"role":"function","content":"f"}]"#,
            r#"[{"role":"assistant","refusal":"no"},{"role":"user","content":""}]"#,
            r#"[{"role":"assistant","content":"a","tool_calls":[{"function":{"name":"f"}}],"extra":{"k":[1]}}]"#,
        ];
        for m in usual {
            let fast = usual::messages(m).unwrap_or_else(|| panic!("not read in one pass: {m}"));
            assert_eq!(Ok(fast), read_generally(m), "{m}");
        }
        // Others are the general read's, errors named as ever.
        let others = [
            r#"[]"#,
            r#"null"#,
            r#"[{"role":"user","content":[{"type":"text","text":"parts"}]}]"#,
            r#"[{"role":"user"}]"#,
            r#"[{"role":"robot","content":"x"}]"#,
            r#"[{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":{"name":"f","arguments":{"k":1}}}]}]"#,
            r#"[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"custom","function":{"name":"f"}}]}]"#,
            r#"[{"role":"user","content":"a","role":"user"}]"#,
            r#"[{"role":"user","content":"a","name":7}]"#,
            r#"[{"role":"user","content":"","tool_call_id":5}]"#,
            r#"[["user","hi"]]"#,
            r#"[{"role":"assistant","content":null,"tool_calls":[["c","function",{"name":"f"}]]}]"#,
            r#"[{"role":"assistant","content":null,"tool_calls":[{"id":"c","function":["f","{}"]}]}]"#,
        ];
        for m in others {
            assert!(usual::messages(m).is_none(), "{m}");
        }
        for m in usual.iter().chain(&others) {
            let body = format!(r#"{{"model":"gpt-4o","messages":{m}}}"#);
            let whole = parse_request(body.as_bytes()).map(|r| r.messages);
            let mut obj = Obj::new();
            obj.insert("messages".into(), serde_json::from_str(m).unwrap());
            assert_eq!(whole, messages_of(&obj), "{m}");
        }
    }

    /// Bodies of every shape: what the one-pass read gives, when it reads
    /// one, is what the general read gives.
    #[test]
    fn usual_requests_read_in_one_pass_as_the_general_read_reads_them() {
        let m = r#"[{"role":"user","content":"hi"}]"#;
        let tools = r#"[{"type":"function","function":{"name":"get_order","parameters":{"type":"object"}}},{"type":"custom","custom":{"name":"sh"}}]"#;
        let usual = [
            format!(r#"{{"model":"gpt-4o","messages":{m},"max_tokens":64,"stream":false}}"#),
            format!(
                r#"{{"model":"gpt-4o","messages":{m},"stream":true,"stream_options":{{"include_usage":true,"x":1}}}}"#
            ),
            format!(
                r#"{{"model":"a","messages":{m},"max_completion_tokens":5,"max_tokens":9,"temperature":0.2,"top_p":1,"user":"u\n","reasoning_effort":"low","parallel_tool_calls":false}}"#
            ),
            format!(r#"{{"model":"a","messages":{m},"tools":{tools},"tool_choice":"required","stop":["x"]}}"#),
            format!(
                r#"{{"model":"a","messages":{m},"tools":{tools},"tool_choice":{{"type":"allowed_tools","allowed_tools":{{"mode":"auto","tools":[{{"type":"function","function":{{"name":"get_order"}}}}]}}}}}}"#
            ),
            format!(
                r#"{{"model":"a","model":"b","messages":{m},"stream":null,"stream_options":null,"max_tokens":null,"user":null,"stop":"s"}}"#
            ),
            format!(r#"{{"model":"a","messages":{m},"max_completion_tokens":null,"max_tokens":7}}"#),
        ];
        let read = |body: &str| rq::raw_body(body.as_bytes()).unwrap();
        for body in &usual {
            let fast = usual::request(read(body)).unwrap_or_else(|_| panic!("not read in one pass: {body}"));
            let general = read_generally(read(body)).unwrap();
            assert_eq!(format!("{fast:?}"), format!("{general:?}"), "{body}");
        }
        // Others are the general read's, errors named as ever.
        let others = [
            format!(r#"{{"model":"a","messages":{m},"seed":1}}"#),
            format!(r#"{{"model":"","messages":{m}}}"#),
            format!(r#"{{"messages":{m}}}"#),
            r#"{"model":"a","messages":[]}"#.to_string(),
            r#"{"model":"a","messages":[["user","hi"]]}"#.to_string(),
            r#"{"model":"a","messages":[{"role":"user","content":[{"type":"text","text":"p"}]}]}"#.to_string(),
            format!(r#"{{"model":"a","messages":{m},"stream":"yes"}}"#),
            format!(r#"{{"model":"a","messages":{m},"stream_options":[true]}}"#),
            format!(r#"{{"model":"a","messages":{m},"stream_options":{{"include_usage":1}}}}"#),
            format!(r#"{{"model":"a","messages":{m},"max_tokens":0}}"#),
            format!(r#"{{"model":"a","messages":{m},"max_tokens":64.0}}"#),
            format!(r#"{{"model":"a","messages":{m},"max_tokens":1000000000000}}"#),
            format!(r#"{{"model":"a","messages":{m},"temperature":"hot"}}"#),
            format!(r#"{{"model":"a","messages":{m},"temperature":1e400}}"#),
            format!(r#"{{"model":"a","messages":{m},"user":5}}"#),
            format!(r#"{{"model":"a","messages":{m},"tools":[{{"type":"web"}}]}}"#),
            format!(r#"{{"model":"a","messages":{m},"tool_choice":"maybe"}}"#),
            format!(r#"{{"model":"a","messages":{m},"stop":[1]}}"#),
            format!(r#"{{"model":"a","messages":{m},"n":2}}"#),
        ];
        for body in &others {
            assert!(usual::request(read(body)).is_err(), "{body}");
        }
        for body in usual.iter().chain(&others) {
            let whole = parse_request(body.as_bytes()).map(|r| format!("{r:?}"));
            assert_eq!(whole, read_generally(read(body)).map(|r| format!("{r:?}")), "{body}");
        }
    }

    #[test]
    fn the_cap_and_roles_fusebox_writes_are_the_servers_own() {
        let own = Params::default();
        let openai = written(&own, Dialect::OpenAi);
        assert_eq!(openai["max_completion_tokens"], 300);
        assert!(openai.get("max_tokens").is_none());
        assert_eq!(openai["messages"][0]["role"], "developer");
        for d in [Dialect::Compatible, Dialect::DeepSeek] {
            let v = written(&own, d);
            assert_eq!(v["max_tokens"], 300, "{d:?}");
            assert!(v.get("max_completion_tokens").is_none(), "{d:?}");
            assert_eq!(v["messages"][0]["role"], "system", "{d:?}");
        }
        // A client's call without a cap (the Responses API's, or another
        // API's where it is optional) is sent without one.
        let client = Params {
            from_client: true,
            ..Params::default()
        };
        for d in [Dialect::OpenAi, Dialect::Compatible] {
            let v = written(&client, d);
            assert!(v.get("max_tokens").is_none() && v.get("max_completion_tokens").is_none());
        }
    }
}
