//! The usual chat request, read in one pass from the client's members:
//! each member one fusebox reads (or passes on) as usual, of its usual
//! type, `messages` of text content and tool calls whose arguments are
//! text. Anything else (content parts, a member of another type or one
//! this read does not know, a role or call that is wrong) is left to the
//! general read, which reads every shape and names what is wrong; what
//! this read gives is what the general read would.

use super::{message, Said, ToolCall, ToolKind};
use crate::limits::MAX_TOKENS;
use crate::wire::message::{Content, Message, Role};
use crate::wire::raw::RawBody;
use crate::wire::request::{self as rq, Obj, Params, Request};
use crate::wire::text::Object;
use crate::wire::Api;
use serde::Deserialize;
use std::borrow::Cow;
use std::sync::Arc;

/// The request, or the body back for the general read.
pub(super) fn request(raw: RawBody) -> Result<Request, RawBody> {
    match read(&raw) {
        Some(mut r) => {
            r.params.raw = Some(Arc::new(raw));
            Ok(r)
        }
        None => Err(raw),
    }
}

/// The members read, as the general read reads them.
#[derive(Default)]
struct Members<'a> {
    model: Text<'a>,
    messages: Option<&'a str>,
    stream: Option<bool>,
    include_usage: Option<bool>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    user: Text<'a>,
    reasoning_effort: Text<'a>,
    parallel_tool_calls: Option<bool>,
    /// `tools`, `tool_choice` and `stop`, for the general readers of each.
    rest: Obj,
}

fn read(raw: &RawBody) -> Option<Request> {
    let m = members(raw)?;
    let model = m.model.filter(|m| !m.is_empty())?.into_owned();
    let messages = messages(m.messages?)?;
    let tools = rq::allowed_tools(&m.rest, super::tools(&m.rest).ok()?);
    let needs = match tools.iter().any(|t| t.kind == ToolKind::Custom) {
        true => vec![("custom tools", Api::Chat)],
        false => Vec::new(),
    };
    let (max_tokens, completion_tokens_key) = match m.max_completion_tokens {
        Some(cap) => (Some(cap), true),
        None => (m.max_tokens, false),
    };
    Some(Request {
        model,
        messages,
        tools,
        stream: m.stream.unwrap_or(false),
        include_usage: m.include_usage.unwrap_or(false),
        params: Params {
            wire: Api::Chat,
            tool_choice: rq::tool_choice(&m.rest).ok()?,
            parallel_tool_calls: m.parallel_tool_calls,
            temperature: m.temperature,
            top_p: m.top_p,
            stop: rq::stop_list(&m.rest, "stop").ok()?,
            max_tokens,
            choices: None,
            completion_tokens_key,
            user: m.user.map(Cow::into_owned),
            needs,
            response_format: None,
            reasoning_effort: m.reasoning_effort.map(Cow::into_owned),
            raw: None,
            from_client: true,
            headers: Vec::new(),
        },
    })
}

/// Each member read from its text; `None` at the first one not usual. A
/// repeated member's last value stands, as in the general read.
fn members(raw: &RawBody) -> Option<Members<'_>> {
    let mut m = Members::default();
    for (key, t) in raw.members() {
        match key {
            "model" => m.model = text(t)?,
            "messages" => m.messages = Some(t),
            "stream" => m.stream = json(t)?,
            "stream_options" => m.include_usage = include_usage(t)?,
            "max_tokens" => m.max_tokens = tokens(t)?,
            "max_completion_tokens" => m.max_completion_tokens = tokens(t)?,
            "temperature" => m.temperature = json(t)?,
            "top_p" => m.top_p = json(t)?,
            "user" => m.user = text(t)?,
            "reasoning_effort" => m.reasoning_effort = text(t)?,
            "parallel_tool_calls" => m.parallel_tool_calls = json(t)?,
            "tools" | "tool_choice" | "stop" => {
                m.rest.insert(key.into(), json(t)?);
            }
            _ => return None,
        }
    }
    Some(m)
}

/// `t` read as a `T`, or `None`.
fn json<'a, T: Deserialize<'a>>(t: &'a str) -> Option<T> {
    serde_json::from_str(t).ok()
}

/// A string or `null`, borrowed where it has no escapes.
fn text(t: &str) -> Option<Text<'_>> {
    #[derive(Deserialize)]
    struct Str<'a>(#[serde(borrow, deserialize_with = "crate::wire::text::opt")] Text<'a>);
    json::<Str>(t).map(|s| s.0)
}

/// An output cap: a whole number from 1 to [`MAX_TOKENS`], or `null`.
fn tokens(t: &str) -> Option<Option<u32>> {
    match json::<Option<u64>>(t)? {
        None => Some(None),
        Some(n) if (1..=u64::from(MAX_TOKENS)).contains(&n) => Some(Some(n as u32)),
        Some(_) => None,
    }
}

/// `stream_options.include_usage`: `stream_options` an object or `null`.
fn include_usage(t: &str) -> Option<Option<bool>> {
    #[derive(Deserialize)]
    struct Options {
        #[serde(default)]
        include_usage: Option<bool>,
    }
    let options: Option<Object<Options>> = json(t)?;
    Some(options.and_then(|o| o.0.include_usage))
}

type Text<'a> = Option<Cow<'a, str>>;

#[derive(Deserialize)]
struct Msg<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    content: Text<'a>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<Object<Call<'a>>>>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    refusal: Text<'a>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    name: Text<'a>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    tool_call_id: Text<'a>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    reasoning_content: Text<'a>,
}

#[derive(Deserialize)]
struct Call<'a> {
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    id: Text<'a>,
    #[serde(default, borrow, rename = "type", deserialize_with = "crate::wire::text::opt")]
    kind: Text<'a>,
    #[serde(default, borrow)]
    function: Option<Object<Function<'a>>>,
    #[serde(default, borrow)]
    custom: Option<Object<Custom<'a>>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    arguments: Text<'a>,
}

#[derive(Deserialize)]
struct Custom<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    input: Text<'a>,
}

/// The messages, or `None` for the general read to take them.
pub(super) fn messages(text: &str) -> Option<Vec<Message>> {
    let wire: Vec<Object<Msg>> = serde_json::from_str(text).ok()?;
    if wire.is_empty() {
        return None;
    }
    wire.into_iter().enumerate().map(|(i, m)| one(i, m.0)).collect()
}

fn one(i: usize, m: Msg) -> Option<Message> {
    let role = super::role_named(&m.role)?;
    let tool_calls = match role {
        Role::Assistant => m
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .map(|c| call(c.0))
            .collect::<Option<Vec<_>>>()?,
        _ => Vec::new(),
    };
    let content = match m.content {
        Some(text) => Content::Text(text.as_ref().into()),
        None if role == Role::Assistant => Content::default(),
        None => return None,
    };
    let said = Said {
        refusal: m.refusal.as_deref().map(Into::into),
        name: m.name.as_deref(),
        tool_call_id: m.tool_call_id.as_deref(),
        reasoning: m.reasoning_content.as_deref(),
    };
    Some(message(i, role, content, tool_calls, said))
}

fn call(c: Call) -> Option<ToolCall> {
    let (kind, name, arguments) = match c.kind.as_deref() {
        Some("custom") => c.custom.map(|Object(f)| (ToolKind::Custom, f.name, f.input))?,
        _ => c.function.map(|Object(f)| (ToolKind::Function, f.name, f.arguments))?,
    };
    Some(ToolCall {
        id: c.id.map(Cow::into_owned).unwrap_or_default(),
        name: name.into_owned(),
        arguments: arguments.map(Cow::into_owned).unwrap_or_default(),
        kind,
    })
}
