//! `chat.completion` bodies and their usage, read and written.

use super::request::kind_key;
use super::Dialect;
use crate::wire::message::{ToolCall, ToolKind};
use crate::wire::reply::{Finish, Reply, Usage};
use serde_json::{json, Value};

/// Usage from a `usage` object (cached counts of OpenAI and DeepSeek).
pub fn usage_of(u: &Value) -> Option<Usage> {
    let n = |p: &str| {
        u.pointer(p)
            .and_then(Value::as_u64)
            .map(|v| v.min(u32::MAX as u64) as u32)
    };
    Some(Usage {
        input: n("/prompt_tokens")?,
        output: n("/completion_tokens").unwrap_or(0),
        cached_input: n("/prompt_tokens_details/cached_tokens")
            .or_else(|| n("/prompt_cache_hit_tokens"))
            .unwrap_or(0),
    })
}

/// A tool call as chat completions write it.
pub(super) fn call_json(c: &ToolCall) -> Value {
    match c.kind {
        ToolKind::Function => {
            json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
        }
        ToolKind::Custom => json!({"id": c.id, "type": "custom", "custom": {"name": c.name, "input": c.arguments}}),
    }
}

/// `usage` of a completion in `dialect`.
pub fn usage(u: Usage, dialect: Dialect) -> Value {
    let (input, output, cached) = (u64::from(u.input), u64::from(u.output), u64::from(u.cached_input));
    let mut v = json!({
        "prompt_tokens": input,
        "completion_tokens": output,
        "total_tokens": input + output,
    });
    if dialect == Dialect::DeepSeek {
        v["prompt_cache_hit_tokens"] = json!(cached);
        v["prompt_cache_miss_tokens"] = json!(input.saturating_sub(cached));
    } else {
        v["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    v
}

fn text_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

fn calls_of(m: &Value) -> Vec<ToolCall> {
    let call = |c: &Value| {
        let (kind, input) = match c.get("type").and_then(Value::as_str) {
            Some("custom") => (ToolKind::Custom, "/custom/input"),
            _ => (ToolKind::Function, "/function/arguments"),
        };
        let name = format!("/{}/name", kind_key(kind));
        ToolCall {
            id: c.get("id").and_then(Value::as_str).unwrap_or("").to_string(),
            name: c.pointer(&name).and_then(Value::as_str).unwrap_or("").to_string(),
            arguments: match c.pointer(input) {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            },
            kind,
        }
    };
    m.get("tool_calls")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(call).collect())
        .unwrap_or_default()
}

/// Reads a `chat.completion` body (its first choice) from its bytes: in
/// one pass into the fields fusebox reads, or, for a body of another
/// shape than the usual (content as parts, arguments as an object, a
/// field of another type), as [`parse_reply`] reads it. `Err` when the
/// body is not JSON.
pub fn read_reply(body: &[u8]) -> Result<Reply, serde_json::Error> {
    // Text checked once as a whole, not each string as it is read.
    let usual = match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str::<typed::Completion>(text),
        Err(_) => serde_json::from_slice::<typed::Completion>(body),
    };
    match usual {
        Ok(c) => Ok(c.into()),
        Err(_) => serde_json::from_slice::<Value>(body).map(|v| parse_reply(&v)),
    }
}

/// The usual `chat.completion` body, borrowed from its bytes where no
/// escape is in the way; members fusebox does not read are skipped.
mod typed {
    use super::{Finish, ToolCall, ToolKind, Usage};
    use serde::Deserialize;
    use std::borrow::Cow;

    type Text<'a> = Option<Cow<'a, str>>;

    fn own(t: Text) -> String {
        t.map(Cow::into_owned).unwrap_or_default()
    }

    #[derive(Deserialize)]
    pub(super) struct Completion<'a> {
        #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
        id: Text<'a>,
        #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
        model: Text<'a>,
        /// The first choice (any more are skipped unread).
        #[serde(default, borrow, deserialize_with = "crate::wire::text::first")]
        choices: Option<Choice<'a>>,
        #[serde(default)]
        usage: Option<Counts>,
    }

    #[derive(Deserialize)]
    struct Choice<'a> {
        #[serde(default, borrow)]
        message: Option<Message<'a>>,
        #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
        finish_reason: Text<'a>,
    }

    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
        content: Text<'a>,
        #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
        reasoning_content: Text<'a>,
        #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
        refusal: Text<'a>,
        #[serde(default, borrow)]
        tool_calls: Option<Vec<Call<'a>>>,
    }

    #[derive(Deserialize)]
    struct Call<'a> {
        #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
        id: Text<'a>,
        #[serde(default, borrow, rename = "type", deserialize_with = "crate::wire::text::opt")]
        kind: Text<'a>,
        #[serde(default, borrow)]
        function: Option<Function<'a>>,
        #[serde(default, borrow)]
        custom: Option<Custom<'a>>,
    }

    #[derive(Deserialize)]
    struct Function<'a> {
        #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
        name: Text<'a>,
        #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
        arguments: Text<'a>,
    }

    #[derive(Deserialize)]
    struct Custom<'a> {
        #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
        name: Text<'a>,
        #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
        input: Text<'a>,
    }

    #[derive(Deserialize)]
    struct Counts {
        #[serde(default)]
        prompt_tokens: Option<u64>,
        #[serde(default)]
        completion_tokens: Option<u64>,
        #[serde(default)]
        prompt_tokens_details: Option<Details>,
        #[serde(default)]
        prompt_cache_hit_tokens: Option<u64>,
    }

    #[derive(Deserialize)]
    struct Details {
        #[serde(default)]
        cached_tokens: Option<u64>,
    }

    fn count(n: u64) -> u32 {
        n.min(u64::from(u32::MAX)) as u32
    }

    impl From<Counts> for Option<Usage> {
        fn from(u: Counts) -> Self {
            Some(Usage {
                input: count(u.prompt_tokens?),
                output: u.completion_tokens.map_or(0, count),
                cached_input: u
                    .prompt_tokens_details
                    .and_then(|d| d.cached_tokens)
                    .or(u.prompt_cache_hit_tokens)
                    .map_or(0, count),
            })
        }
    }

    impl From<Call<'_>> for ToolCall {
        fn from(c: Call) -> Self {
            let (kind, name, arguments) = match (c.kind.as_deref(), c.function, c.custom) {
                (Some("custom"), _, custom) => {
                    let (n, i) = custom.map_or((None, None), |c| (c.name, c.input));
                    (ToolKind::Custom, n, i)
                }
                (_, function, _) => {
                    let (n, a) = function.map_or((None, None), |f| (f.name, f.arguments));
                    (ToolKind::Function, n, a)
                }
            };
            ToolCall {
                id: own(c.id),
                name: own(name),
                arguments: own(arguments),
                kind,
            }
        }
    }

    impl From<Completion<'_>> for super::Reply {
        fn from(c: Completion) -> Self {
            let (message, finish) = match c.choices {
                Some(first) => (first.message, first.finish_reason),
                None => (None, None),
            };
            let m = message.unwrap_or(Message {
                content: None,
                reasoning_content: None,
                refusal: None,
                tool_calls: None,
            });
            super::Reply {
                id: own(c.id),
                model: own(c.model),
                text: own(m.content),
                reasoning: own(m.reasoning_content),
                refusal: own(m.refusal),
                tool_calls: m
                    .tool_calls
                    .unwrap_or_default()
                    .into_iter()
                    .map(ToolCall::from)
                    .collect(),
                finish: finish.as_deref().map(Finish::from_openai),
                usage: c.usage.and_then(Option::from),
            }
        }
    }
}

/// Reads a `chat.completion` body (its first choice).
pub fn parse_reply(v: &Value) -> Reply {
    let m = v.pointer("/choices/0/message").unwrap_or(&Value::Null);
    Reply {
        id: v.get("id").and_then(Value::as_str).unwrap_or("").to_string(),
        model: v.get("model").and_then(Value::as_str).unwrap_or("").to_string(),
        text: text_of(m.get("content")),
        reasoning: text_of(m.get("reasoning_content")),
        refusal: text_of(m.get("refusal")),
        tool_calls: calls_of(m),
        finish: v
            .pointer("/choices/0/finish_reason")
            .and_then(Value::as_str)
            .map(Finish::from_openai),
        usage: v.get("usage").and_then(usage_of),
    }
}

/// What a response needs besides the answer.
#[derive(Clone, Debug)]
pub struct Frame {
    /// The answer's id.
    pub id: String,
    /// The model named in it.
    pub model: String,
    /// Unix seconds.
    pub created: u64,
    /// Which server's format.
    pub dialect: Dialect,
}

/// A `chat.completion` body for `r`.
pub fn render_reply(f: &Frame, r: &Reply) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": if r.text.is_empty() && (!r.tool_calls.is_empty() || !r.refusal.is_empty()) { Value::Null } else { json!(r.text) },
    });
    if !r.tool_calls.is_empty() {
        let calls: Vec<Value> = r.tool_calls.iter().map(call_json).collect();
        message["tool_calls"] = Value::Array(calls);
    }
    message["refusal"] = if r.refusal.is_empty() {
        Value::Null
    } else {
        json!(r.refusal)
    };
    if !r.reasoning.is_empty() {
        message["reasoning_content"] = json!(r.reasoning);
    }
    let finish = r.finish.unwrap_or(if r.tool_calls.is_empty() {
        Finish::Stop
    } else {
        Finish::ToolCalls
    });
    let mut v = json!({
        "id": f.id,
        "object": "chat.completion",
        "created": f.created,
        "model": f.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish.openai()}],
    });
    if let Some(u) = r.usage {
        v["usage"] = usage(u, f.dialect);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bodies of every shape an upstream may send: the one-pass read gives
    /// what the general read gives.
    #[test]
    fn a_body_read_in_one_pass_reads_as_the_general_read_does() {
        let bodies = [
            // The usual: text, usage with cached tokens, a finish.
            r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"there\"\n\u00e9","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4}}}"#,
            // Tool calls, a custom one among them; DeepSeek's usage and reasoning.
            r#"{"id":"x","model":"deepseek-chat","choices":[{"message":{"content":null,"reasoning_content":"think","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_order","arguments":"{\"id\":1}"}},{"id":"c2","type":"custom","custom":{"name":"sh","input":"ls"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":7,"completion_tokens":2,"prompt_cache_hit_tokens":5,"prompt_cache_miss_tokens":2}}"#,
            // Content as parts; arguments as an object; an id that is a number.
            r#"{"id":5,"model":"m","choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"tool_calls":[{"id":"c","function":{"name":"f","arguments":{"k":1}}}]}}]}"#,
            // No choices, no usage; usage without prompt tokens; a refusal.
            r#"{"choices":[]}"#,
            r#"{"choices":null,"usage":{"completion_tokens":3}}"#,
            r#"{"choices":[{"message":{"content":null,"refusal":"no"},"finish_reason":"content_filter"},{"message":{"content":"second"}}]}"#,
            // A count beyond u32, a negative one, a duplicate member.
            r#"{"choices":[{"message":{"content":"a"}}],"usage":{"prompt_tokens":99999999999,"completion_tokens":-1}}"#,
            r#"{"id":"a","id":"b","choices":[{"message":{"content":"a"}}]}"#,
        ];
        for b in bodies {
            let general = parse_reply(&serde_json::from_str::<Value>(b).unwrap());
            assert_eq!(read_reply(b.as_bytes()).unwrap(), general, "{b}");
        }
        // The usual shapes are read in the one pass.
        for b in &bodies[..2] {
            assert!(serde_json::from_str::<typed::Completion>(b).is_ok(), "{b}");
        }
        let r = read_reply(bodies[1].as_bytes()).unwrap();
        assert_eq!(r.tool_calls[1].kind, ToolKind::Custom);
        assert_eq!(r.tool_calls[0].arguments, r#"{"id":1}"#);
        assert_eq!(r.usage.map(|u| u.cached_input), Some(5));
        assert!(read_reply(b"{\"choices\": [").is_err());
    }
}
