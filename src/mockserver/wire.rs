//! Wire requests (OpenAI / DeepSeek chat completions, Anthropic messages)
//! into [`LlmRequest`]s, with errors that name the offending field.

use super::Flavor;
use crate::clock::hash_str;
use crate::provider::{LlmRequest, Message, ToolSpec};
use axum::http::HeaderMap;
use serde_json::{Map, Value};
use std::str::FromStr;

/// Output cap when an OpenAI-style request sets none.
const DEFAULT_MAX_TOKENS: u32 = 4_096;

/// Header carrying the agent request id (u64).
pub(crate) const H_REQUEST: &str = "x-fusebox-request";
/// Header carrying the agent-loop step (u32).
pub(crate) const H_STEP: &str = "x-fusebox-step";
/// Header carrying the attempt number (u32).
pub(crate) const H_ATTEMPT: &str = "x-fusebox-attempt";

/// A malformed request: which field, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BadRequest {
    /// Field path (`messages[2].content`, `max_tokens`, a header name), if one is to blame.
    pub field: Option<String>,
    /// Human-readable message (names the field).
    pub message: String,
}

impl BadRequest {
    fn field(field: impl Into<String>, problem: &str) -> Self {
        let field = field.into();
        Self {
            message: format!("{field}: {problem}"),
            field: Some(field),
        }
    }

    fn body(message: String) -> Self {
        Self { field: None, message }
    }
}

/// A parsed call.
#[derive(Clone, Debug)]
pub(crate) struct WireCall {
    /// What the planner sees.
    pub req: LlmRequest,
    /// `stream: true`.
    pub stream: bool,
    /// `stream_options.include_usage: true` (OpenAI-style only).
    pub include_usage: bool,
    /// The end user the caller names (OpenAI's `user` field).
    pub user: Option<String>,
}

type Obj = Map<String, Value>;

/// Parses a request body of `flavor` plus the `x-fusebox-*` headers.
pub(crate) fn parse(flavor: Flavor, headers: &HeaderMap, body: &[u8]) -> Result<WireCall, BadRequest> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| BadRequest::body(format!("request body is not valid JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| BadRequest::body("request body must be a JSON object".into()))?;
    let request_id = match header_num::<u64>(headers, H_REQUEST)? {
        Some(id) => id,
        None => hash_str(&String::from_utf8_lossy(body)),
    };
    let step = header_num::<u32>(headers, H_STEP)?.unwrap_or(0);
    let attempt = header_num::<u32>(headers, H_ATTEMPT)?.unwrap_or(0);
    let model = required_str(obj, "model", "model")?;
    if model.is_empty() {
        return Err(BadRequest::field("model", "must not be empty"));
    }
    let stream = opt_bool(obj, "stream", "stream")?.unwrap_or(false);
    let (messages, tools, max_tokens, include_usage) = match flavor {
        Flavor::Anthropic => {
            let mut messages = Vec::new();
            match obj.get("system") {
                None | Some(Value::Null) => {}
                Some(s) => messages.push(Message::new("system", content_text(s, "system")?)),
            }
            messages.extend(messages_of(obj, &["user", "assistant"], false)?);
            let max = opt_u32(obj, "max_tokens", "max_tokens")?
                .ok_or_else(|| BadRequest::field("max_tokens", "field required"))?;
            (messages, anthropic_tools(obj)?, max, false)
        }
        Flavor::OpenAi | Flavor::DeepSeek => {
            let roles = ["system", "developer", "user", "assistant", "tool", "function"];
            let messages = messages_of(obj, &roles, true)?;
            let max = match opt_u32(obj, "max_completion_tokens", "max_completion_tokens")? {
                Some(m) => m,
                None => opt_u32(obj, "max_tokens", "max_tokens")?.unwrap_or(DEFAULT_MAX_TOKENS),
            };
            let include_usage = match obj.get("stream_options") {
                None | Some(Value::Null) => false,
                Some(Value::Object(o)) => {
                    opt_bool(o, "include_usage", "stream_options.include_usage")?.unwrap_or(false)
                }
                Some(_) => return Err(BadRequest::field("stream_options", "expected an object")),
            };
            (messages, openai_tools(obj)?, max, include_usage)
        }
    };
    Ok(WireCall {
        req: LlmRequest {
            request_id,
            step,
            attempt,
            model: model.into(),
            messages: messages.into(),
            tools: tools.into(),
            max_tokens,
        },
        stream,
        include_usage,
        user: opt_str(obj, "user", "user")?.map(str::to_string),
    })
}

fn header_num<T: FromStr>(headers: &HeaderMap, name: &str) -> Result<Option<T>, BadRequest> {
    let Some(v) = headers.get(name) else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| BadRequest::field(name, "header must be an unsigned integer"))
}

fn required_str<'a>(obj: &'a Obj, key: &str, path: &str) -> Result<&'a str, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(BadRequest::field(path, "field required")),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(BadRequest::field(path, "expected a string")),
    }
}

fn opt_str<'a>(obj: &'a Obj, key: &str, path: &str) -> Result<Option<&'a str>, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(BadRequest::field(path, "expected a string")),
    }
}

fn opt_bool(obj: &Obj, key: &str, path: &str) -> Result<Option<bool>, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(BadRequest::field(path, "expected a boolean")),
    }
}

fn opt_u32(obj: &Obj, key: &str, path: &str) -> Result<Option<u32>, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(0) => Err(BadRequest::field(path, "must be at least 1")),
            Some(n) => Ok(Some(n)),
            None => Err(BadRequest::field(path, "expected a positive integer")),
        },
    }
}

/// The text of a content value: a string, or the text of an array of parts
/// (`text` parts, and the content of Anthropic `tool_result` blocks; other
/// part types carry no text and are skipped).
fn content_text(v: &Value, path: &str) -> Result<String, BadRequest> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            for (j, p) in parts.iter().enumerate() {
                let pp = format!("{path}[{j}]");
                let part = p
                    .as_object()
                    .ok_or_else(|| BadRequest::field(pp.as_str(), "expected a content part object"))?;
                match required_str(part, "type", &format!("{pp}.type"))? {
                    "text" => texts.push(required_str(part, "text", &format!("{pp}.text"))?.to_string()),
                    "tool_result" => match part.get("content") {
                        None | Some(Value::Null) => {}
                        Some(c) => texts.push(content_text(c, &format!("{pp}.content"))?),
                    },
                    _ => {}
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(BadRequest::field(
            path,
            "expected a string or an array of content parts",
        )),
    }
}

fn messages_of(obj: &Obj, roles: &[&str], assistant_may_omit: bool) -> Result<Vec<Message>, BadRequest> {
    let arr = match obj.get("messages") {
        None | Some(Value::Null) => return Err(BadRequest::field("messages", "field required")),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(BadRequest::field("messages", "expected an array")),
    };
    if arr.is_empty() {
        return Err(BadRequest::field("messages", "must contain at least one message"));
    }
    let mut out = Vec::with_capacity(arr.len());
    for (i, m) in arr.iter().enumerate() {
        let path = format!("messages[{i}]");
        let m = m
            .as_object()
            .ok_or_else(|| BadRequest::field(path.as_str(), "expected an object"))?;
        let role_path = format!("{path}.role");
        let role = required_str(m, "role", &role_path)?;
        if !roles.contains(&role) {
            let expected = format!("unsupported role; expected one of {}", roles.join(", "));
            return Err(BadRequest::field(role_path, &expected));
        }
        let content_path = format!("{path}.content");
        let content = match m.get("content") {
            None | Some(Value::Null) if assistant_may_omit && role == "assistant" => String::new(),
            None | Some(Value::Null) => return Err(BadRequest::field(content_path, "field required")),
            Some(c) => content_text(c, &content_path)?,
        };
        out.push(Message::new(role, content));
    }
    Ok(out)
}

fn tools_array(obj: &Obj) -> Result<&[Value], BadRequest> {
    match obj.get("tools") {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(BadRequest::field("tools", "expected an array")),
    }
}

fn schema(obj: &Obj, key: &str, path: &str) -> Result<Value, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(serde_json::json!({"type": "object", "properties": {}})),
        Some(v @ Value::Object(_)) => Ok(v.clone()),
        Some(_) => Err(BadRequest::field(path, "expected a JSON schema object")),
    }
}

fn tool_name<'a>(obj: &'a Obj, path: &str) -> Result<&'a str, BadRequest> {
    let name = required_str(obj, "name", path)?;
    if name.is_empty() {
        return Err(BadRequest::field(path, "must not be empty"));
    }
    Ok(name)
}

fn openai_tools(obj: &Obj) -> Result<Vec<ToolSpec>, BadRequest> {
    let mut out = Vec::new();
    for (i, t) in tools_array(obj)?.iter().enumerate() {
        let path = format!("tools[{i}]");
        let t = t
            .as_object()
            .ok_or_else(|| BadRequest::field(path.as_str(), "expected an object"))?;
        if let Some(ty) = opt_str(t, "type", &format!("{path}.type"))? {
            if ty != "function" {
                return Err(BadRequest::field(
                    format!("{path}.type"),
                    "unsupported tool type; expected function",
                ));
            }
        }
        let fpath = format!("{path}.function");
        let f = match t.get("function") {
            Some(Value::Object(f)) => f,
            None | Some(Value::Null) => return Err(BadRequest::field(fpath, "field required")),
            Some(_) => return Err(BadRequest::field(fpath, "expected an object")),
        };
        out.push(ToolSpec {
            name: tool_name(f, &format!("{fpath}.name"))?.into(),
            description: opt_str(f, "description", &format!("{fpath}.description"))?
                .unwrap_or_default()
                .into(),
            schema: schema(f, "parameters", &format!("{fpath}.parameters"))?.into(),
        });
    }
    Ok(out)
}

fn anthropic_tools(obj: &Obj) -> Result<Vec<ToolSpec>, BadRequest> {
    let mut out = Vec::new();
    for (i, t) in tools_array(obj)?.iter().enumerate() {
        let path = format!("tools[{i}]");
        let t = t
            .as_object()
            .ok_or_else(|| BadRequest::field(path.as_str(), "expected an object"))?;
        out.push(ToolSpec {
            name: tool_name(t, &format!("{path}.name"))?.into(),
            description: opt_str(t, "description", &format!("{path}.description"))?
                .unwrap_or_default()
                .into(),
            schema: schema(t, "input_schema", &format!("{path}.input_schema"))?.into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(flavor: Flavor, v: Value) -> Result<WireCall, BadRequest> {
        parse(flavor, &HeaderMap::new(), v.to_string().as_bytes())
    }

    #[test]
    fn openai_request() {
        let c = p(
            Flavor::OpenAi,
            json!({"model":"gpt-4o","max_completion_tokens":7,"stream":true,"stream_options":{"include_usage":true},
                "messages":[{"role":"system","content":"be brief"},
                            {"role":"user","content":[{"type":"text","text":"order #12"},{"type":"image_url","image_url":{}}]},
                            {"role":"assistant","content":null,"tool_calls":[]}],
                "tools":[{"type":"function","function":{"name":"get_order","parameters":{"type":"object"}}}]}),
        );
        let Ok(c) = c else { panic!("{c:?}") };
        assert!(c.stream && c.include_usage);
        assert_eq!(c.req.max_tokens, 7);
        assert_eq!(&*c.req.messages[1].content, "order #12");
        assert_eq!(&*c.req.messages[2].content, "");
        assert_eq!(&*c.req.tools[0].name, "get_order");
    }

    #[test]
    fn anthropic_request() {
        let c = p(
            Flavor::Anthropic,
            json!({"model":"claude-haiku","max_tokens":5,"system":[{"type":"text","text":"sys"}],
                "messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}],
                "tools":[{"name":"get_order","input_schema":{"type":"object"}}]}),
        );
        let Ok(c) = c else { panic!("{c:?}") };
        assert_eq!(&*c.req.messages[0].role, "system");
        assert_eq!(&*c.req.messages[1].content, "ok");
        assert_eq!(c.req.max_tokens, 5);
    }

    #[test]
    fn errors_name_the_field() {
        let field = |f: Flavor, v: Value| p(f, v).err().and_then(|e| e.field);
        let m = json!([{"role":"user","content":"hi"}]);
        assert_eq!(field(Flavor::OpenAi, json!({"messages": m})), Some("model".into()));
        assert_eq!(
            field(Flavor::Anthropic, json!({"model":"x","messages": m})),
            Some("max_tokens".into())
        );
        assert_eq!(
            field(
                Flavor::OpenAi,
                json!({"model":"x","messages":[{"role":"user","content":5}]})
            ),
            Some("messages[0].content".into())
        );
        assert_eq!(
            field(
                Flavor::Anthropic,
                json!({"model":"x","max_tokens":1,"messages":[{"role":"system","content":"s"}]})
            ),
            Some("messages[0].role".into())
        );
        assert_eq!(
            field(
                Flavor::OpenAi,
                json!({"model":"x","messages":m,"tools":[{"type":"function","function":{}}]})
            ),
            Some("tools[0].function.name".into())
        );
        assert_eq!(
            field(Flavor::OpenAi, json!({"model":"x","messages":m,"max_tokens":-1})),
            Some("max_tokens".into())
        );
        assert!(parse(Flavor::OpenAi, &HeaderMap::new(), b"{nope").is_err());
        let mut h = HeaderMap::new();
        h.insert(H_STEP, axum::http::HeaderValue::from_static("two"));
        let e = parse(
            Flavor::OpenAi,
            &h,
            json!({"model":"x","messages":m}).to_string().as_bytes(),
        );
        assert_eq!(e.err().and_then(|e| e.field), Some(H_STEP.into()));
    }
}
