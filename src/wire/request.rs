//! A request as a client sent it, read into typed values: the conversation,
//! the tools, and the parameters fusebox must understand to render the call
//! for another API, next to the client's own body for an upstream of the
//! same API. Errors name the offending field.

use super::message::{Message, ToolSpec};
use super::raw::RawBody;
use super::Api;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::fmt::Display;
use std::sync::Arc;

/// Which tool the model must (or must not) call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool calls.
    None,
    /// Some tool call (OpenAI `required`, Anthropic `any`).
    Required,
    /// This tool.
    Tool(String),
}

/// What a client asked for besides the conversation and tools.
#[derive(Clone, Debug, Default)]
pub struct Params {
    /// The API the client speaks.
    pub wire: Api,
    /// Tool choice.
    pub tool_choice: Option<ToolChoice>,
    /// `parallel_tool_calls` (Anthropic: the inverse of `disable_parallel_tool_use`).
    pub parallel_tool_calls: Option<bool>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// The client's output cap, when it set one.
    pub max_tokens: Option<u32>,
    /// Choices asked for (OpenAI's `n`), when more than one: each may use
    /// the whole output cap.
    pub choices: Option<u32>,
    /// The client's cap was `max_completion_tokens` (OpenAI's newer name).
    pub completion_tokens_key: bool,
    /// The end user the client names (OpenAI `user`, Anthropic `metadata.user_id`).
    pub user: Option<String>,
    /// What only one API can do, named (`response_format`, `n > 1`,
    /// `logprobs` only OpenAI's; `thinking` only Anthropic's): a model of
    /// another API cannot honour the request and is skipped.
    pub needs: Vec<(&'static str, Api)>,
    /// OpenAI's `response_format` (read from the client's request, for a
    /// translated call to an OpenAI model).
    pub response_format: Option<Value>,
    /// OpenAI's `reasoning_effort`.
    pub reasoning_effort: Option<String>,
    /// The client's body: what an upstream of the client's API is sent,
    /// with only the members fusebox must change replaced.
    pub raw: Option<Arc<RawBody>>,
    /// A client wrote the request (not fusebox's own agent loop).
    pub from_client: bool,
    /// The client's headers that only its API reads (`anthropic-beta`,
    /// `anthropic-version`, `openai-beta`): sent on with its body.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

impl Params {
    /// Whether the output cap is sent (to an API where it is optional):
    /// where the client set one, and on the calls fusebox makes itself.
    pub fn sends_cap(&self) -> bool {
        self.max_tokens.is_some() || !self.from_client
    }

    /// The most output tokens one call may produce: the cap on each
    /// choice times the choices (what a budget must hold before the call).
    pub fn output_bound(&self, cap: u32) -> u32 {
        cap.saturating_mul(self.choices.unwrap_or(1).max(1))
    }

    /// Whether the client asked the model to reason before it answers
    /// (OpenAI's `reasoning_effort`, Anthropic's `thinking`).
    pub fn asks_reasoning(&self) -> bool {
        self.reasoning_effort.is_some() || self.needs.iter().any(|(n, _)| *n == "thinking")
    }

    /// Why a model of API `to` cannot serve this request, if it cannot.
    pub fn cannot_honour(&self, to: Api) -> Option<String> {
        self.needs
            .iter()
            .find(|(_, only)| *only != to)
            .map(|(n, _)| format!("cannot honour {n}"))
    }
}

/// A client's request, read.
#[derive(Clone, Debug)]
pub struct Request {
    /// The model (or route) asked for.
    pub model: String,
    /// The conversation, instructions included, in order.
    pub messages: Vec<Message>,
    /// Tools offered (function tools).
    pub tools: Vec<ToolSpec>,
    /// `stream: true`.
    pub stream: bool,
    /// The client asked for usage in the stream (OpenAI `stream_options.include_usage`).
    pub include_usage: bool,
    /// Everything else.
    pub params: Params,
}

/// A malformed request: which field, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRequest {
    /// Field path (`messages[2].content`, `max_tokens`, a header name), if one is to blame.
    pub field: Option<String>,
    /// Human-readable message (names the field).
    pub message: String,
}

impl BadRequest {
    /// `field` has `problem`.
    pub fn field(field: impl Display, problem: &str) -> Self {
        let field = field.to_string();
        Self {
            message: format!("{field}: {problem}"),
            field: Some(field),
        }
    }

    /// The body as a whole is wrong.
    pub fn body(message: String) -> Self {
        Self { field: None, message }
    }
}

impl std::fmt::Display for BadRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A JSON object.
pub(crate) type Obj = Map<String, Value>;

/// Element `.1` of the array at path `.0` (`messages[2]`): a path written
/// out only when an error names it.
#[derive(Clone, Copy)]
pub(crate) struct Index<'a>(pub &'a dyn Display, pub usize);

impl Display for Index<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}[{}]", self.0, self.1)
    }
}

/// Member `.1` of the object at path `.0` (`messages[2].content`).
#[derive(Clone, Copy)]
pub(crate) struct Key<'a>(pub &'a dyn Display, pub &'a str);

impl Display for Key<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// Reads a request body: a JSON object, as members (for pass-through) and
/// as a value (for reading), but for the members named in `lazy`, which
/// its reader reads from the members itself.
pub(crate) fn body(bytes: &[u8], lazy: &[&str]) -> Result<(RawBody, Obj), BadRequest> {
    let raw = raw_body(bytes)?;
    let obj = members(&raw, lazy)?;
    Ok((raw, obj))
}

/// Reads a request body as members: a JSON object, or refused saying why.
pub(crate) fn raw_body(bytes: &[u8]) -> Result<RawBody, BadRequest> {
    RawBody::parse(bytes).map_err(|e| {
        if e.is_data() {
            BadRequest::body("request body must be a JSON object".into())
        } else {
            BadRequest::body(format!("request body is not valid JSON: {e}"))
        }
    })
}

/// The members of `raw` read as values, but for those named in `lazy`.
pub(crate) fn members(raw: &RawBody, lazy: &[&str]) -> Result<Obj, BadRequest> {
    let mut obj = Obj::new();
    // One pass; a repeated key's last value stands, as in the raw body.
    for (key, v) in raw.members().filter(|(k, _)| !lazy.contains(k)) {
        obj.insert(key.to_string(), member(key, v)?);
    }
    Ok(obj)
}

/// A member's value read from its text (valid JSON): refused, naming the
/// member, only where it nests deeper than the reader goes (128 levels)
/// or holds a number no float can.
pub(crate) fn member(key: &str, v: &str) -> Result<Value, BadRequest> {
    serde_json::from_str(v).map_err(|e| BadRequest::field(key, &format!("cannot be read: {e}")))
}

pub(crate) fn required_str<'a>(obj: &'a Obj, key: &str, path: impl Display) -> Result<&'a str, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(BadRequest::field(path, "field required")),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(BadRequest::field(path, "expected a string")),
    }
}

pub(crate) fn opt_str<'a>(obj: &'a Obj, key: &str, path: impl Display) -> Result<Option<&'a str>, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(BadRequest::field(path, "expected a string")),
    }
}

pub(crate) fn opt_bool(obj: &Obj, key: &str, path: impl Display) -> Result<Option<bool>, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(BadRequest::field(path, "expected a boolean")),
    }
}

pub(crate) fn opt_u32(obj: &Obj, key: &str, path: impl Display) -> Result<Option<u32>, BadRequest> {
    opt_at_most(obj, key, path, u32::MAX, "")
}

/// An output cap (`max_tokens` and its kin): at most
/// [`crate::limits::MAX_TOKENS`], beyond any model's output.
pub(crate) fn opt_tokens(obj: &Obj, key: &str, path: impl Display) -> Result<Option<u32>, BadRequest> {
    opt_at_most(obj, key, path, crate::limits::MAX_TOKENS, ", beyond any model's output")
}

/// A positive integer of at most `max`; past it, refused as too large,
/// naming `max` (and `why` it is the bound).
fn opt_at_most(obj: &Obj, key: &str, path: impl Display, max: u32, why: &str) -> Result<Option<u32>, BadRequest> {
    let Some(v) = obj.get(key).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    // Past u64 a whole number reads as a float.
    let whole = v.as_u64().map(|n| n as f64).or(v.as_f64().filter(|x| x.fract() == 0.0));
    match (v.as_u64(), whole) {
        (Some(0), _) => Err(BadRequest::field(path, "must be at least 1")),
        (Some(n), _) if n <= u64::from(max) => Ok(Some(n as u32)),
        (_, Some(x)) if x > f64::from(max) => Err(BadRequest::field(
            path,
            &format!("{v} is too large: at most {max}{why}"),
        )),
        _ => Err(BadRequest::field(path, "expected a positive integer")),
    }
}

pub(crate) fn opt_f64(obj: &Obj, key: &str, path: impl Display) -> Result<Option<f64>, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| BadRequest::field(path, "expected a number")),
    }
}

pub(crate) fn opt_obj<'a>(obj: &'a Obj, key: &str, path: impl Display) -> Result<Option<&'a Obj>, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(_) => Err(BadRequest::field(path, "expected an object")),
    }
}

pub(crate) fn array<'a>(obj: &'a Obj, key: &str, path: impl Display) -> Result<&'a [Value], BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(BadRequest::field(path, "expected an array")),
    }
}

pub(crate) fn object(v: &Value, path: impl Display) -> Result<&Obj, BadRequest> {
    v.as_object()
        .ok_or_else(|| BadRequest::field(path, "expected an object"))
}

/// A stop parameter: a string or an array of strings.
pub(crate) fn stop_list(obj: &Obj, key: &str) -> Result<Vec<String>, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| BadRequest::field(format!("{key}[{i}]"), "expected a string"))
            })
            .collect(),
        Some(_) => Err(BadRequest::field(key, "expected a string or an array of strings")),
    }
}

/// OpenAI's `tool_choice`: `auto`, `none`, `required`, a function by name
/// (`{"type": "function", "function": {"name"}}` in chat completions,
/// `{"type": "function", "name"}` in responses), or `allowed_tools` (its
/// mode; the tools it allows are [`allowed_tools`]).
pub(crate) fn tool_choice(obj: &Obj) -> Result<Option<ToolChoice>, BadRequest> {
    if let Some(a) = allowed_of(obj) {
        return Ok(Some(match a.get("mode").and_then(Value::as_str) {
            Some("required") => ToolChoice::Required,
            Some("auto") | None => ToolChoice::Auto,
            Some(_) => return Err(BadRequest::field("tool_choice.mode", "expected auto or required")),
        }));
    }
    Ok(match obj.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            _ => {
                return Err(BadRequest::field(
                    "tool_choice",
                    "expected auto, none, required or a function",
                ))
            }
        }),
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .or_else(|| o.get("custom"))
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| BadRequest::field("tool_choice.function.name", "field required"))?;
            Some(ToolChoice::Tool(name.to_string()))
        }
        Some(_) => return Err(BadRequest::field("tool_choice", "expected a string or an object")),
    })
}

/// `tool_choice: {"type": "allowed_tools", …}`: the object holding its
/// `mode` and `tools` (nested under `allowed_tools` in chat completions).
fn allowed_of(obj: &Obj) -> Option<&Obj> {
    let c = obj.get("tool_choice")?.as_object()?;
    (c.get("type")?.as_str()? == "allowed_tools")
        .then(|| c.get("allowed_tools").and_then(Value::as_object).unwrap_or(c))
}

/// `tools` cut to the functions an `allowed_tools` choice allows: what the
/// model may call, and what a model of the other API is offered.
pub(crate) fn allowed_tools(obj: &Obj, tools: Vec<ToolSpec>) -> Vec<ToolSpec> {
    let Some(list) = allowed_of(obj).and_then(|a| a.get("tools")).and_then(Value::as_array) else {
        return tools;
    };
    let names: Vec<&str> = list
        .iter()
        .filter_map(|t| {
            t.get("function")
                .or_else(|| t.get("custom"))
                .and_then(|f| f.get("name"))
                .or_else(|| t.get("name"))
        })
        .filter_map(Value::as_str)
        .collect();
    tools.into_iter().filter(|t| names.contains(&&*t.name)).collect()
}

/// A tool's JSON schema (an empty object schema when absent).
pub(crate) fn schema(obj: &Obj, key: &str, path: impl Display) -> Result<Value, BadRequest> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(serde_json::json!({"type": "object", "properties": {}})),
        Some(v @ Value::Object(_)) => Ok(v.clone()),
        Some(_) => Err(BadRequest::field(path, "expected a JSON schema object")),
    }
}

/// A tool's name: a non-empty string.
pub(crate) fn tool_name(obj: &Obj, path: impl Display) -> Result<&str, BadRequest> {
    let name = required_str(obj, "name", &path)?;
    if name.is_empty() {
        return Err(BadRequest::field(path, "must not be empty"));
    }
    Ok(name)
}

/// The conversation's messages array: present and not empty.
pub(crate) fn messages_array(obj: &Obj) -> Result<&[Value], BadRequest> {
    match obj.get("messages") {
        None | Some(Value::Null) => Err(BadRequest::field("messages", "field required")),
        Some(Value::Array(a)) if a.is_empty() => {
            Err(BadRequest::field("messages", "must contain at least one message"))
        }
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(BadRequest::field("messages", "expected an array")),
    }
}

/// The model asked for: a non-empty string.
pub(crate) fn model(obj: &Obj) -> Result<String, BadRequest> {
    let model = required_str(obj, "model", "model")?;
    if model.is_empty() {
        return Err(BadRequest::field("model", "must not be empty"));
    }
    Ok(model.to_string())
}

/// One call as a provider client renders it for its API.
#[derive(Clone, Copy, Debug)]
pub struct Outgoing<'a> {
    /// The model, as the provider names it.
    pub model: &'a str,
    /// The conversation.
    pub messages: &'a [Message],
    /// Whether `messages` are the client's own, as its body has them (so a
    /// body passed through keeps its messages as sent).
    pub own_messages: bool,
    /// Tools offered.
    pub tools: &'a [ToolSpec],
    /// The client's parameters.
    pub params: &'a Params,
    /// Output cap of this call (the client's, or lowered by the route's
    /// degradation on a fallback hop).
    pub max_tokens: u32,
    /// Stream the answer.
    pub stream: bool,
}

/// The client's `messages` for a conversation fusebox changed (trimmed,
/// or an answer's prefix appended): each element all of whose messages
/// remain is written as the client sent it, and each run of the others by
/// `render` (in this API), so what fusebox does not read (a thinking
/// block's signature, `cache_control`, extra fields) stays as sent.
pub(crate) fn kept_messages(
    raw: &RawBody,
    messages: &[Message],
    render: impl Fn(&[Message]) -> Result<Vec<Value>, String>,
) -> Result<Box<RawValue>, String> {
    let elements: Vec<&RawValue> = raw.read("messages").and_then(Result::ok).unwrap_or_default();
    let mut out = String::from("[");
    let push = |out: &mut String, text: &str| {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(text);
    };
    let flush = |out: &mut String, run: &[Message]| -> Result<(), String> {
        for v in render(run)? {
            push(out, &v.to_string());
        }
        Ok(())
    };
    let (mut i, mut run) = (0, 0);
    while i < messages.len() {
        let whole = messages[i].origin.and_then(|o| {
            let end = i + o.pieces as usize;
            let intact = end <= messages.len() && messages[i..end].iter().all(|m| m.origin == Some(o));
            intact
                .then(|| elements.get(o.index as usize).map(|e| (end, *e)))
                .flatten()
        });
        match whole {
            Some((end, element)) => {
                flush(&mut out, &messages[run..i])?;
                push(&mut out, element.get());
                (i, run) = (end, end);
            }
            None => i += 1,
        }
    }
    flush(&mut out, &messages[run..])?;
    out.push(']');
    RawValue::from_string(out).map_err(|e| format!("messages written as invalid JSON: {e}"))
}

impl Outgoing<'_> {
    /// Refuses custom (free-text) tools, offered or called, for an API
    /// whose tools are all functions.
    pub fn functions_only(&self) -> Result<(), String> {
        let custom = self.tools.iter().any(|t| t.kind == crate::wire::ToolKind::Custom)
            || self
                .messages
                .iter()
                .any(|m| m.tool_calls.iter().any(|c| c.kind == crate::wire::ToolKind::Custom));
        match custom {
            true => Err("cannot honour custom tools".into()),
            false => Ok(()),
        }
    }

    /// The client's body, when it may be passed on to an upstream of `wire`.
    pub fn passthrough(&self, wire: Api) -> Option<&RawBody> {
        (self.params.wire == wire)
            .then_some(self.params.raw.as_deref())
            .flatten()
    }

    /// The client's own headers for an upstream of `wire`: those of its
    /// API, when its body is passed on (a body fusebox wrote anew may not
    /// do what a beta header says it does).
    pub fn client_headers(&self, wire: Api) -> &[(http::HeaderName, http::HeaderValue)] {
        match self.passthrough(wire) {
            Some(_) => &self.params.headers,
            None => &[],
        }
    }
}
