//! A provider request as the mock server reads it: the body by
//! [`crate::wire`], checked as strictly as the real APIs check tool turns,
//! plus the `x-fusebox-*` headers that key the mock's plan.

use super::Provider;
use crate::clock::hash_str;
use crate::provider::LlmRequest;
use crate::wire::message::check_tool_turns;
use crate::wire::{anthropic, fusebox, openai, Api, BadRequest};
use axum::http::HeaderMap;
use std::str::FromStr;
use std::sync::Arc;

/// Output cap when an OpenAI-style request sets none.
const DEFAULT_MAX_TOKENS: u32 = 4_096;

/// A parsed call.
#[derive(Clone, Debug)]
pub(crate) struct WireCall {
    /// What the plan sees.
    pub req: LlmRequest,
    /// `stream: true`.
    pub stream: bool,
    /// `stream_options.include_usage: true` (OpenAI-style only).
    pub include_usage: bool,
}

/// Parses a request body of `provider` plus the `x-fusebox-*` headers.
pub(crate) fn parse(provider: Provider, headers: &HeaderMap, body: &[u8]) -> Result<WireCall, BadRequest> {
    let r = match provider.api() {
        Api::Messages => anthropic::parse_request(body)?,
        _ => openai::parse_request(body)?,
    };
    check_tool_turns(&r.messages).map_err(|why| BadRequest::field("messages", &why))?;
    let request_id = match header_num::<u64>(headers, fusebox::REQUEST)? {
        Some(id) => id,
        None => hash_str(&String::from_utf8_lossy(body)),
    };
    let max_tokens = r.params.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    Ok(WireCall {
        req: LlmRequest {
            request_id,
            step: header_num::<u32>(headers, fusebox::STEP)?.unwrap_or(0),
            attempt: header_num::<u32>(headers, fusebox::ATTEMPT)?.unwrap_or(0),
            model: r.model.as_str().into(),
            messages: r.messages.into(),
            tools: r.tools.into(),
            max_tokens,
            params: Arc::new(r.params),
            own_messages: true,
            stream: Some(r.stream),
        },
        stream: r.stream,
        include_usage: r.include_usage,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Part, Role};
    use serde_json::{json, Value};

    fn p(provider: Provider, v: Value) -> Result<WireCall, BadRequest> {
        parse(provider, &HeaderMap::new(), v.to_string().as_bytes())
    }

    #[test]
    fn openai_request() {
        let c = p(
            Provider::OpenAi,
            json!({"model":"gpt-4o","max_completion_tokens":7,"stream":true,"stream_options":{"include_usage":true},
                "messages":[{"role":"system","content":"be brief"},
                            {"role":"user","content":[{"type":"text","text":"order #12"},{"type":"image_url","image_url":{"url":"https://x/a.png"}}]},
                            {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_order","arguments":"{}"}}]},
                            {"role":"tool","tool_call_id":"call_1","content":"shipped"}],
                "tools":[{"type":"function","function":{"name":"get_order","parameters":{"type":"object"}}}]}),
        );
        let Ok(c) = c else { panic!("{c:?}") };
        assert!(c.stream && c.include_usage);
        assert_eq!(c.req.max_tokens, 7);
        assert_eq!(c.req.messages[1].content.text(), "order #12");
        assert!(matches!(c.req.messages[1].content.parts()[1], Part::Image { .. }));
        assert_eq!(c.req.messages[2].tool_calls[0].id, "call_1");
        assert_eq!(c.req.messages[3].tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(&*c.req.tools[0].name, "get_order");
    }

    #[test]
    fn anthropic_request() {
        let c = p(
            Provider::Anthropic,
            json!({"model":"claude-haiku","max_tokens":5,"system":[{"type":"text","text":"sys"}],
                "messages":[{"role":"user","content":"hi"},
                            {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"get_order","input":{}}]},
                            {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok"}]}],
                "tools":[{"name":"get_order","input_schema":{"type":"object"}}]}),
        );
        let Ok(c) = c else { panic!("{c:?}") };
        assert_eq!(c.req.messages[0].role, Role::System);
        assert_eq!(c.req.messages[3].role, Role::Tool);
        assert_eq!(c.req.messages[3].content.text(), "ok");
        assert_eq!(c.req.max_tokens, 5);
    }

    #[test]
    fn a_tool_result_without_its_call_is_refused_as_the_api_refuses_it() {
        let e = p(
            Provider::OpenAi,
            json!({"model":"gpt-4o","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"call_9","content":"x"}]}),
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("messages"));
        assert!(
            e.message.contains("preceeding message with 'tool_calls'"),
            "{}",
            e.message
        );
    }

    #[test]
    fn errors_name_the_field() {
        let field = |f: Provider, v: Value| p(f, v).err().and_then(|e| e.field);
        let m = json!([{"role":"user","content":"hi"}]);
        assert_eq!(field(Provider::OpenAi, json!({"messages": m})), Some("model".into()));
        assert_eq!(
            field(Provider::Anthropic, json!({"model":"x","messages": m})),
            Some("max_tokens".into())
        );
        assert_eq!(
            field(
                Provider::OpenAi,
                json!({"model":"x","messages":[{"role":"user","content":5}]})
            ),
            Some("messages[0].content".into())
        );
        assert_eq!(
            field(
                Provider::Anthropic,
                json!({"model":"x","max_tokens":1,"messages":[{"role":"system","content":"s"}]})
            ),
            Some("messages[0].role".into())
        );
        assert_eq!(
            field(
                Provider::OpenAi,
                json!({"model":"x","messages":m,"tools":[{"type":"function","function":{}}]})
            ),
            Some("tools[0].function.name".into())
        );
        assert_eq!(
            field(Provider::OpenAi, json!({"model":"x","messages":m,"max_tokens":-1})),
            Some("max_tokens".into())
        );
        assert!(parse(Provider::OpenAi, &HeaderMap::new(), b"{nope").is_err());
        let mut h = HeaderMap::new();
        h.insert(fusebox::STEP, axum::http::HeaderValue::from_static("two"));
        let e = parse(
            Provider::OpenAi,
            &h,
            json!({"model":"x","messages":m}).to_string().as_bytes(),
        );
        assert_eq!(e.err().and_then(|e| e.field), Some(fusebox::STEP.into()));
    }
}
