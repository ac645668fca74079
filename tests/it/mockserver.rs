//! The HTTP mock server through real sockets with a plain HTTP client: the
//! three wire formats (non-stream and SSE), tool calls, every fault, the
//! rate-limit headers and quota, the control API and authentication.

use fusebox::clock::Seed;
use fusebox::mockserver::MockServer;
use fusebox::provider::fault::{Fault, FaultSpec, FaultTable};
use fusebox::provider::mock::{MockProvider, MockReply};
use fusebox::provider::{LlmRequest, Message, ToolCall, ToolKind, ToolSpec};
use fusebox::target::Target;
use futures_util::future::join_all;
use reqwest::header::HeaderMap;
use reqwest::{Client, Response};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const SEED: Seed = Seed(11);
const USER: &str = "Where is my order #38291?";

struct Mock {
    base: String,
    faults: Arc<FaultTable>,
    http: Client,
}

async fn mock() -> Mock {
    let faults = Arc::new(FaultTable::default());
    let server = MockServer::new(SEED, faults.clone());
    let addr = server.spawn("127.0.0.1:0").await.unwrap();
    Mock {
        base: format!("http://{addr}"),
        faults,
        http: Client::builder().timeout(Duration::from_secs(20)).build().unwrap(),
    }
}

/// A server with one fault on every call of `provider`.
async fn faulty(provider: &str, fault: Fault) -> Mock {
    let m = mock().await;
    m.faults.set(&Target::provider(provider), FaultSpec::always(fault));
    m
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Api {
    OpenAi,
    DeepSeek,
    Anthropic,
}

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::OpenAi => "/v1/chat/completions",
            Api::DeepSeek => "/chat/completions",
            Api::Anthropic => "/v1/messages",
        }
    }

    fn model(self) -> &'static str {
        match self {
            Api::OpenAi => "gpt-4o",
            Api::DeepSeek => "deepseek-chat",
            Api::Anthropic => "claude-haiku",
        }
    }

    fn provider(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::DeepSeek => "deepseek",
            Api::Anthropic => "anthropic",
        }
    }
}

const TOOLS: [&str; 2] = ["get_order", "lookup_shipping"];

fn body(api: Api, stream: bool, tools: bool) -> Value {
    let mut b = match api {
        Api::Anthropic => json!({
            "model": api.model(),
            "max_tokens": 5,
            "system": "You are a support agent.",
            "messages": [{"role": "user", "content": USER}],
        }),
        _ => json!({
            "model": api.model(),
            "max_tokens": 5,
            "messages": [
                {"role": "system", "content": "You are a support agent."},
                {"role": "user", "content": [{"type": "text", "text": USER}]},
            ],
        }),
    };
    if stream {
        b["stream"] = json!(true);
        if api != Api::Anthropic {
            b["stream_options"] = json!({"include_usage": true});
        }
    }
    if tools {
        let schema =
            json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]});
        b["tools"] = TOOLS
            .iter()
            .map(|n| match api {
                Api::Anthropic => json!({"name": n, "description": "d", "input_schema": schema}),
                _ => json!({"type": "function", "function": {"name": n, "description": "d", "parameters": schema}}),
            })
            .collect();
    }
    b
}

impl Mock {
    fn post(&self, api: Api, path: &str, body: &Value) -> reqwest::RequestBuilder {
        let b = self.http.post(format!("{}{path}", self.base)).json(body);
        match api {
            Api::Anthropic => b
                .header("x-api-key", "sk-ant-test")
                .header("anthropic-version", "2023-06-01"),
            _ => b.bearer_auth("sk-test"),
        }
    }

    async fn call(&self, api: Api, body: &Value, request: u64) -> Response {
        self.post(api, api.path(), body)
            .header("x-fusebox-request", request.to_string())
            .send()
            .await
            .unwrap()
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name)
        .unwrap_or_else(|| panic!("missing header {name}"))
        .to_str()
        .unwrap()
}

fn header_u64(h: &HeaderMap, name: &str) -> u64 {
    header(h, name).parse().unwrap()
}

/// The `data:` payloads of an SSE body, in order (comments excluded).
fn data_lines(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.strip_prefix("data: ")).collect()
}

/// The `event:` names of an SSE body, in order.
fn event_names(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.strip_prefix("event: ")).collect()
}

/// Parsed OpenAI-style stream chunks (everything but `[DONE]`).
fn chunks(text: &str) -> Vec<Value> {
    data_lines(text)
        .into_iter()
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// The first request id whose plan (for `provider`, with the tools offered, at
/// step 0, under `fault`) has tool calls satisfying `want`.
fn request_where(provider: &str, model: &str, fault: Fault, want: impl Fn(&[ToolCall]) -> bool) -> u64 {
    let faults = Arc::new(FaultTable::default());
    faults.set(&Target::provider(provider), FaultSpec::always(fault));
    let p = MockProvider::new(provider, SEED, faults);
    let tools: Vec<ToolSpec> = TOOLS
        .iter()
        .map(|n| ToolSpec {
            name: (*n).into(),
            description: "d".into(),
            schema: json!({}).into(),
            kind: ToolKind::Function,
        })
        .collect();
    (1..1_000)
        .find(|&id| {
            let req = LlmRequest {
                request_id: id,
                step: 0,
                attempt: 0,
                model: model.into(),
                messages: vec![Message::user(USER)].into(),
                tools: tools.clone().into(),
                max_tokens: 5,
                ..LlmRequest::default()
            };
            matches!(p.plan(&req), MockReply::Answer { tool_calls, .. } if want(&tool_calls))
        })
        .unwrap()
}

/// A request id whose healthy plan calls tools.
fn tool_calling_request(provider: &str, model: &str) -> u64 {
    request_where(provider, model, Fault::Healthy, |c| !c.is_empty())
}

// ---------------------------------------------------------------- formats --

#[tokio::test]
async fn openai_non_stream() {
    let m = mock().await;
    let r = m.call(Api::OpenAi, &body(Api::OpenAi, false, false), 1).await;
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert!(header(&h, "content-type").starts_with("application/json"));
    assert!(header(&h, "x-request-id").starts_with("chatcmpl-"));
    assert_eq!(header_u64(&h, "x-ratelimit-limit-requests"), 1_000);
    assert_eq!(header_u64(&h, "x-ratelimit-limit-tokens"), 1_000_000);
    assert_eq!(header_u64(&h, "x-ratelimit-remaining-requests"), 999);
    assert!(header_u64(&h, "x-ratelimit-remaining-tokens") < 1_000_000);
    assert!(header(&h, "x-ratelimit-reset-requests").ends_with('s'));
    assert!(header(&h, "x-ratelimit-reset-tokens").ends_with('s'));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-4o");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    let c = &v["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    assert!(c["message"]["content"].as_str().unwrap().contains("Order #38291"));
    assert_eq!(c["finish_reason"], "stop");
    let u = &v["usage"];
    assert_eq!(u["completion_tokens"], 5);
    assert!(u["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap())
    );
}

#[tokio::test]
async fn openai_stream_with_usage() {
    let m = mock().await;
    let r = m.call(Api::OpenAi, &body(Api::OpenAi, true, false), 2).await;
    assert_eq!(r.status(), 200);
    assert!(header(r.headers(), "content-type").starts_with("text/event-stream"));
    assert!(r.headers().contains_key("x-ratelimit-remaining-tokens"));
    let text = r.text().await.unwrap();
    assert_eq!(data_lines(&text).last(), Some(&"[DONE]"));
    let cs = chunks(&text);
    assert!(cs
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk" && c["model"] == "gpt-4o"));
    assert_eq!(cs[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = cs
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(content.starts_with("Order #38291 is in transit"), "{content}");
    assert!(
        cs.iter()
            .filter(|c| c["choices"][0]["delta"]["content"].is_string())
            .count()
            > 1
    );
    let finish: Vec<&Value> = cs
        .iter()
        .filter(|c| !c["choices"][0]["finish_reason"].is_null())
        .collect();
    assert_eq!(finish.len(), 1);
    assert_eq!(finish[0]["choices"][0]["finish_reason"], "stop");
    let last = cs.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], 5);
    assert!(last["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn openai_stream_without_usage_option_has_no_usage_chunk() {
    let m = mock().await;
    let mut b = body(Api::OpenAi, true, false);
    b["stream_options"] = json!({"include_usage": false});
    let text = m.call(Api::OpenAi, &b, 2).await.text().await.unwrap();
    assert_eq!(data_lines(&text).last(), Some(&"[DONE]"));
    assert!(chunks(&text).iter().all(|c| c.get("usage").is_none()));
}

#[tokio::test]
async fn deepseek_both_routes_and_cache_usage() {
    let m = mock().await;
    for path in ["/chat/completions", "/deepseek/chat/completions"] {
        let r = m
            .post(Api::DeepSeek, path, &body(Api::DeepSeek, false, false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(!r.headers().keys().any(|k| k.as_str().contains("ratelimit")));
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "deepseek-chat");
        let u = &v["usage"];
        assert_eq!(u["prompt_cache_hit_tokens"], 0);
        assert_eq!(u["prompt_cache_miss_tokens"], u["prompt_tokens"]);
    }
    let text = m
        .call(Api::DeepSeek, &body(Api::DeepSeek, true, false), 3)
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(data_lines(&text).last(), Some(&"[DONE]"));
    let last = chunks(&text).pop().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert!(last["usage"]["prompt_cache_miss_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn anthropic_non_stream() {
    let m = mock().await;
    let r = m.call(Api::Anthropic, &body(Api::Anthropic, false, false), 4).await;
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert!(header(&h, "request-id").starts_with("msg_"));
    for bucket in ["requests", "tokens", "input-tokens", "output-tokens"] {
        let limit = header_u64(&h, &format!("anthropic-ratelimit-{bucket}-limit"));
        let left = header_u64(&h, &format!("anthropic-ratelimit-{bucket}-remaining"));
        assert!(left < limit, "{bucket}: {left} of {limit}");
        let reset = header(&h, &format!("anthropic-ratelimit-{bucket}-reset"));
        let at = humantime::parse_rfc3339(reset).unwrap();
        assert!(at > std::time::SystemTime::now() - Duration::from_secs(5), "{reset}");
    }
    assert_eq!(header_u64(&h, "anthropic-ratelimit-requests-limit"), 1_000);
    assert_eq!(header_u64(&h, "anthropic-ratelimit-input-tokens-limit"), 400_000);
    assert_eq!(header_u64(&h, "anthropic-ratelimit-output-tokens-limit"), 200_000);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(v["role"], "assistant");
    assert_eq!(v["model"], "claude-haiku");
    assert_eq!(v["content"][0]["type"], "text");
    assert!(v["content"][0]["text"].as_str().unwrap().contains("Order #38291"));
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"]["output_tokens"], 5);
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn anthropic_stream_event_order() {
    let m = mock().await;
    let r = m.call(Api::Anthropic, &body(Api::Anthropic, true, false), 5).await;
    assert_eq!(r.status(), 200);
    assert!(header(r.headers(), "content-type").starts_with("text/event-stream"));
    let text = r.text().await.unwrap();
    let names = event_names(&text);
    let datas: Vec<Value> = data_lines(&text)
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(names.len(), datas.len());
    for (n, d) in names.iter().zip(&datas) {
        assert_eq!(d["type"], *n, "event name and data type agree");
    }
    let deltas = names.iter().filter(|n| **n == "content_block_delta").count();
    assert!(deltas > 1);
    let mut expected = vec!["message_start", "content_block_start", "ping"];
    expected.extend(std::iter::repeat_n("content_block_delta", deltas));
    expected.extend(["content_block_stop", "message_delta", "message_stop"]);
    assert_eq!(names, expected);
    assert_eq!(datas[0]["message"]["usage"]["output_tokens"], 1);
    assert!(datas[0]["message"]["usage"]["input_tokens"].as_u64().unwrap() > 0);
    let text: String = datas
        .iter()
        .filter(|d| d["type"] == "content_block_delta")
        .map(|d| {
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(text.starts_with("Order #38291"), "{text}");
    let md = &datas[datas.len() - 2];
    assert_eq!(md["delta"]["stop_reason"], "end_turn");
    assert_eq!(md["usage"]["output_tokens"], 5);
}

#[tokio::test]
async fn same_request_same_answer() {
    let m = mock().await;
    let b = body(Api::OpenAi, false, false);
    let a: Value = m.call(Api::OpenAi, &b, 77).await.json().await.unwrap();
    let c: Value = m.call(Api::OpenAi, &b, 77).await.json().await.unwrap();
    assert_eq!(a["id"], c["id"]);
    assert_eq!(a["choices"], c["choices"]);
}

// ------------------------------------------------------------- tool calls --

fn assert_valid_args(args: &str) {
    let v: Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("{args}: {e}"));
    assert_eq!(v["order_id"], "38291");
}

#[tokio::test]
async fn openai_tool_calls() {
    let m = mock().await;
    let id = tool_calling_request("openai", "gpt-4o");
    let v: Value = m
        .call(Api::OpenAi, &body(Api::OpenAi, false, true), id)
        .await
        .json()
        .await
        .unwrap();
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls");
    assert!(c["message"]["content"].is_null());
    let call = &c["message"]["tool_calls"][0];
    assert!(call["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_order");
    assert_valid_args(call["function"]["arguments"].as_str().unwrap());

    let text = m
        .call(Api::OpenAi, &body(Api::OpenAi, true, true), id)
        .await
        .text()
        .await
        .unwrap();
    let cs = chunks(&text);
    let calls: Vec<&Value> = cs
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
        .filter(|t| t["index"] == 0)
        .collect();
    assert_eq!(calls[0]["id"], call["id"]);
    assert_eq!(calls[0]["function"]["name"], "get_order");
    assert_eq!(calls[0]["function"]["arguments"], "");
    assert!(calls.len() > 2, "arguments come in fragments");
    let args: String = calls
        .iter()
        .filter_map(|t| t["function"]["arguments"].as_str())
        .collect();
    assert_valid_args(&args);
    let finish = cs.iter().find(|c| !c["choices"][0]["finish_reason"].is_null()).unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn anthropic_tool_use() {
    let m = mock().await;
    let id = tool_calling_request("anthropic", "claude-haiku");
    let v: Value = m
        .call(Api::Anthropic, &body(Api::Anthropic, false, true), id)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["stop_reason"], "tool_use");
    let block = &v["content"][0];
    assert_eq!(block["type"], "tool_use");
    assert!(block["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(block["name"], "get_order");
    assert_eq!(block["input"], json!({"order_id": "38291"}));

    let text = m
        .call(Api::Anthropic, &body(Api::Anthropic, true, true), id)
        .await
        .text()
        .await
        .unwrap();
    let datas: Vec<Value> = data_lines(&text)
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let start = datas.iter().find(|d| d["type"] == "content_block_start").unwrap();
    assert_eq!(start["content_block"]["type"], "tool_use");
    assert_eq!(start["content_block"]["name"], "get_order");
    let json: String = datas
        .iter()
        .filter(|d| d["type"] == "content_block_delta" && d["index"] == 0)
        .map(|d| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap().to_string()
        })
        .collect();
    assert_valid_args(&json);
    let md = datas.iter().find(|d| d["type"] == "message_delta").unwrap();
    assert_eq!(md["delta"]["stop_reason"], "tool_use");
    assert_eq!(event_names(&text).last(), Some(&"message_stop"));
}

#[tokio::test]
async fn hallucinated_tool_names() {
    for api in [Api::OpenAi, Api::Anthropic] {
        let m = faulty(api.provider(), Fault::Hallucinate).await;
        let v: Value = m.call(api, &body(api, false, true), 9).await.json().await.unwrap();
        let name = match api {
            Api::Anthropic => v["content"][0]["name"].clone(),
            _ => v["choices"][0]["message"]["tool_calls"][0]["function"]["name"].clone(),
        };
        let name = name.as_str().unwrap();
        assert!(!TOOLS.contains(&name), "{name} should not be an offered tool");
    }
}

#[tokio::test]
async fn bad_arguments() {
    let parses = |c: &[ToolCall]| serde_json::from_str::<Value>(&c[0].arguments).is_ok();
    for api in [Api::OpenAi, Api::Anthropic] {
        let m = faulty(api.provider(), Fault::BadArguments).await;
        // Both kinds: arguments that are not JSON, and JSON that violates the schema.
        let broken = request_where(api.provider(), api.model(), Fault::BadArguments, |c| !parses(c));
        let wrong = request_where(api.provider(), api.model(), Fault::BadArguments, parses);
        for request in [broken, wrong] {
            let v: Value = m
                .call(api, &body(api, false, true), request)
                .await
                .json()
                .await
                .unwrap();
            let text = m.call(api, &body(api, true, true), request).await.text().await.unwrap();
            let datas: Vec<Value> = data_lines(&text)
                .into_iter()
                .filter(|d| *d != "[DONE]")
                .map(|d| serde_json::from_str(d).unwrap())
                .collect();
            let (whole, streamed): (String, String) = match api {
                Api::Anthropic => {
                    let whole = match &v["content"][0]["input"] {
                        // Not JSON: sent as the raw string.
                        Value::String(raw) => raw.clone(),
                        input => input.to_string(),
                    };
                    let streamed = datas
                        .iter()
                        .filter(|d| d["type"] == "content_block_delta")
                        .map(|d| d["delta"]["partial_json"].as_str().unwrap().to_string())
                        .collect();
                    (whole, streamed)
                }
                _ => {
                    let whole = v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    let streamed = datas
                        .iter()
                        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
                        .collect();
                    (whole, streamed)
                }
            };
            let parsed = serde_json::from_str::<Value>(&streamed);
            assert_eq!(parsed.is_ok(), request == wrong, "{api:?}: {streamed}");
            if let Ok(v) = parsed {
                assert!(!v["order_id"].is_string(), "{streamed} should violate the schema");
            }
            if request == broken {
                assert_eq!(whole, streamed);
            }
            assert_eq!(serde_json::from_str::<Value>(&whole).is_ok(), request == wrong);
        }
    }
}

// ----------------------------------------------------------------- faults --

#[tokio::test]
async fn rate_limited_429_with_retry_after() {
    let fault = Fault::Status {
        code: 429,
        retry_after_ms: Some(2_500),
    };
    for api in [Api::OpenAi, Api::DeepSeek, Api::Anthropic] {
        let m = faulty(api.provider(), fault.clone()).await;
        let r = m.call(api, &body(api, false, false), 1).await;
        assert_eq!(r.status(), 429);
        let h = r.headers().clone();
        assert_eq!(header(&h, "retry-after"), "3");
        assert_eq!(header(&h, "retry-after-ms"), "2500");
        let v: Value = r.json().await.unwrap();
        match api {
            Api::Anthropic => {
                assert_eq!(v["type"], "error");
                assert_eq!(v["error"]["type"], "rate_limit_error");
                assert!(v["error"]["message"].is_string());
                // Every token limit reads empty until the retry-after, coherently.
                for bucket in ["tokens", "input-tokens", "output-tokens"] {
                    assert_eq!(header(&h, &format!("anthropic-ratelimit-{bucket}-remaining")), "0");
                    let reset = header(&h, &format!("anthropic-ratelimit-{bucket}-reset"));
                    let at = humantime::parse_rfc3339(reset).unwrap();
                    let now = std::time::SystemTime::now();
                    assert!(
                        at >= now + Duration::from_secs(1) && at <= now + Duration::from_secs(4),
                        "{reset}"
                    );
                }
                assert_ne!(header(&h, "anthropic-ratelimit-requests-remaining"), "0");
            }
            _ => {
                assert_eq!(v["error"]["type"], "rate_limit_exceeded");
                assert_eq!(v["error"]["code"], "rate_limit_exceeded");
                assert!(v["error"]["param"].is_null());
                assert!(v["error"]["message"].is_string());
                if api == Api::OpenAi {
                    assert_eq!(header(&h, "x-ratelimit-remaining-tokens"), "0");
                    assert_eq!(header(&h, "x-ratelimit-reset-tokens"), "2.5s");
                }
            }
        }
    }
}

#[tokio::test]
async fn server_errors_in_provider_shape() {
    let cases = [
        (Api::OpenAi, 500, "server_error"),
        (Api::OpenAi, 503, "server_error"),
        (Api::DeepSeek, 503, "server_error"),
        (Api::Anthropic, 500, "api_error"),
        (Api::Anthropic, 503, "overloaded_error"),
        (Api::Anthropic, 529, "overloaded_error"),
    ];
    for (api, code, ty) in cases {
        let m = faulty(
            api.provider(),
            Fault::Status {
                code,
                retry_after_ms: None,
            },
        )
        .await;
        let r = m.call(api, &body(api, false, false), 1).await;
        assert_eq!(r.status(), code);
        assert!(!r.headers().contains_key("retry-after"));
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], ty, "{api:?} {code}");
        if api == Api::Anthropic {
            assert_eq!(v["type"], "error");
        }
    }
}

#[tokio::test]
async fn anthropic_529_in_band_when_streaming() {
    let m = faulty(
        "anthropic",
        Fault::Status {
            code: 529,
            retry_after_ms: None,
        },
    )
    .await;
    let r = m.call(Api::Anthropic, &body(Api::Anthropic, true, false), 1).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert_eq!(event_names(&text), ["message_start", "error"]);
    let err: Value = serde_json::from_str(data_lines(&text)[1]).unwrap();
    assert_eq!(
        err,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    );
}

#[tokio::test]
async fn timeout_holds_the_connection() {
    let m = faulty("openai", Fault::Timeout).await;
    let t0 = Instant::now();
    let e = m
        .post(Api::OpenAi, Api::OpenAi.path(), &body(Api::OpenAi, false, false))
        .timeout(Duration::from_millis(600))
        .send()
        .await
        .unwrap_err();
    assert!(e.is_timeout(), "{e:?}");
    assert!(t0.elapsed() >= Duration::from_millis(600));
}

#[tokio::test]
async fn refused_and_reset_cut_the_connection() {
    for (api, fault) in [
        (Api::OpenAi, Fault::ConnectionRefused),
        (Api::Anthropic, Fault::ConnectionRefused),
        (Api::OpenAi, Fault::Reset),
        (Api::DeepSeek, Fault::Reset),
    ] {
        let m = faulty(api.provider(), fault.clone()).await;
        for stream in [false, true] {
            let t0 = Instant::now();
            let r = m.post(api, api.path(), &body(api, stream, false)).send().await;
            let e = match r {
                Err(e) => e,
                Ok(r) => panic!("{api:?} {fault:?}: got a response {}", r.status()),
            };
            assert!(!e.is_timeout(), "{e:?}");
            assert!(t0.elapsed() < Duration::from_secs(5));
        }
        // The server itself is fine: the next call on a new connection works once healthy.
        m.faults
            .set(&Target::provider(api.provider()), FaultSpec::always(Fault::Healthy));
        assert_eq!(m.call(api, &body(api, false, false), 1).await.status(), 200);
    }
}

#[tokio::test]
async fn truncated_streams_lack_their_terminator() {
    let m = faulty("openai", Fault::Truncated).await;
    let text = m
        .call(Api::OpenAi, &body(Api::OpenAi, true, false), 1)
        .await
        .text()
        .await
        .unwrap();
    assert!(!data_lines(&text).contains(&"[DONE]"));
    let cs = chunks(&text);
    assert_eq!(cs[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(cs.iter().all(|c| c["choices"][0]["finish_reason"].is_null()));

    let m = faulty("anthropic", Fault::Truncated).await;
    let text = m
        .call(Api::Anthropic, &body(Api::Anthropic, true, false), 1)
        .await
        .text()
        .await
        .unwrap();
    let names = event_names(&text);
    assert_eq!(names.first(), Some(&"message_start"));
    assert!(!names.contains(&"message_stop") && !names.contains(&"message_delta"));
}

#[tokio::test]
async fn truncated_non_stream_is_cut_mid_json() {
    for api in [Api::OpenAi, Api::Anthropic, Api::DeepSeek] {
        let m = faulty(api.provider(), Fault::Truncated).await;
        let r = m.call(api, &body(api, false, false), 1).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(text.starts_with('{'));
        assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
    }
}

#[tokio::test]
async fn keep_alive_stall_before_content() {
    let stall = Fault::KeepAliveStall { ms: 1_200 };
    let streams = [Api::OpenAi, Api::DeepSeek, Api::Anthropic].map(|api| {
        let stall = stall.clone();
        async move {
            let m = faulty(api.provider(), stall).await;
            let t0 = Instant::now();
            let text = m.call(api, &body(api, true, false), 1).await.text().await.unwrap();
            assert!(t0.elapsed() >= Duration::from_millis(1_200));
            let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
            assert_eq!(lines[..2], [": keep-alive", ": keep-alive"], "{api:?}");
            assert!(lines.iter().skip(2).all(|l| !l.starts_with(':')), "{api:?}");
            assert!(text.contains("Order #38291"), "{api:?}");
        }
    });
    // DeepSeek without streaming: headers at once, empty lines, then the JSON.
    let plain = async {
        let m = faulty("deepseek", stall.clone()).await;
        let r = m.call(Api::DeepSeek, &body(Api::DeepSeek, false, false), 1).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(text.starts_with("\n\n{"), "{text:?}");
        let v: Value = serde_json::from_str(text.trim_start()).unwrap();
        assert_eq!(v["object"], "chat.completion");
    };
    tokio::join!(join_all(streams), plain);
}

#[tokio::test]
async fn token_blowup_inflates_usage() {
    let m = faulty("openai", Fault::TokenBlowup { factor: 3 }).await;
    let v: Value = m
        .call(Api::OpenAi, &body(Api::OpenAi, false, false), 1)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 15);
}

#[tokio::test]
async fn fault_rate_applies_to_a_share_of_calls() {
    let m = mock().await;
    m.faults.set(
        &Target::provider("openai"),
        FaultSpec {
            fault: Fault::Status {
                code: 500,
                retry_after_ms: None,
            },
            rate: 0.5,
        },
    );
    let b = body(Api::OpenAi, false, false);
    let calls = (0..12).map(|id| m.call(Api::OpenAi, &b, id));
    let codes: Vec<u16> = join_all(calls).await.iter().map(|r| r.status().as_u16()).collect();
    assert!(codes.contains(&200) && codes.contains(&500), "{codes:?}");
}

// ---------------------------------------------------------------- quotas --

/// Sends a stream request reserving `max_tokens` and returns its headers
/// (streams answer their headers at once; the body is dropped).
async fn reserve(m: &Mock, api: Api, request: u64, max_tokens: u32) -> Response {
    let mut b = body(api, true, false);
    b["max_tokens"] = json!(max_tokens);
    m.call(api, &b, request).await
}

#[tokio::test]
async fn remaining_tokens_go_down() {
    let m = mock().await;
    let left = |r: &Response, h: &str| header_u64(r.headers(), h);
    // Large reservations, so the linear refill between the calls cannot hide them.
    let first = reserve(&m, Api::OpenAi, 1, 50_000).await;
    let second = reserve(&m, Api::OpenAi, 2, 50_000).await;
    assert_eq!(second.status(), 200);
    assert!(left(&second, "x-ratelimit-remaining-tokens") < left(&first, "x-ratelimit-remaining-tokens"));
    assert!(left(&second, "x-ratelimit-remaining-requests") < left(&first, "x-ratelimit-remaining-requests"));
    assert_ne!(header(second.headers(), "x-ratelimit-reset-tokens"), "0s");

    let first = reserve(&m, Api::Anthropic, 1, 20_000).await;
    let second = reserve(&m, Api::Anthropic, 2, 20_000).await;
    for h in [
        "anthropic-ratelimit-output-tokens-remaining",
        "anthropic-ratelimit-tokens-remaining",
        "anthropic-ratelimit-requests-remaining",
    ] {
        assert!(left(&second, h) < left(&first, h), "{h}");
    }
}

fn retry_after_of(h: &HeaderMap) -> u64 {
    let secs: u64 = header(h, "retry-after").parse().unwrap();
    let ms: u64 = header(h, "retry-after-ms").parse().unwrap();
    assert!(ms <= secs * 1000 && ms + 1000 > secs * 1000, "{secs} s vs {ms} ms");
    secs
}

#[tokio::test]
async fn exhausted_quota_answers_429() {
    let m = mock().await;
    // OpenAI: 1M tokens a minute; 600k + 600k does not fit, the wait is ~12 s.
    assert_eq!(reserve(&m, Api::OpenAi, 1, 600_000).await.status(), 200);
    let r = reserve(&m, Api::OpenAi, 2, 600_000).await;
    assert_eq!(r.status(), 429);
    let secs = retry_after_of(r.headers());
    assert!((10..=14).contains(&secs), "{secs}");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert!(v["error"]["message"].as_str().unwrap().contains("tokens"));

    // Anthropic: 200k output tokens a minute.
    assert_eq!(reserve(&m, Api::Anthropic, 1, 150_000).await.status(), 200);
    let r = reserve(&m, Api::Anthropic, 2, 150_000).await;
    assert_eq!(r.status(), 429);
    let secs = retry_after_of(r.headers());
    assert!((28..=32).contains(&secs), "{secs}");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("output tokens"));
    // More than the limit itself: refused with no point in retrying.
    let r = reserve(&m, Api::Anthropic, 3, 250_000).await;
    assert_eq!(r.status(), 429);
    assert!(!r.headers().contains_key("retry-after"));
}

// ----------------------------------------------------------- control API --

#[tokio::test]
async fn control_api_round_trip() {
    let m = mock().await;
    let url = format!("{}/_fusebox/faults", m.base);
    let v: Value = m.http.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(v, json!({}));

    let put = json!({
        "provider:openai": {"fault": {"type": "status", "code": 503}, "rate": 1.0},
        "tool:get_order": {"fault": {"type": "latency", "ms": 250}},
    });
    let r = m.http.put(&url).json(&put).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let expected = json!({
        "provider:openai": {"fault": {"type": "status", "code": 503, "retry_after_ms": null}, "rate": 1.0},
        "tool:get_order": {"fault": {"type": "latency", "ms": 250}, "rate": 1.0},
    });
    assert_eq!(r.json::<Value>().await.unwrap(), expected);
    let v: Value = m.http.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(v, expected);
    assert_eq!(
        m.faults.get(&Target::provider("openai")).map(|s| s.fault),
        Some(Fault::Status {
            code: 503,
            retry_after_ms: None
        })
    );
    let r = m.call(Api::OpenAi, &body(Api::OpenAi, false, false), 1).await;
    assert_eq!(r.status(), 503);

    let clear = json!({"provider:openai": {"fault": {"type": "healthy"}}});
    let r = m.http.put(&url).json(&clear).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = m.http.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(v.as_object().unwrap().keys().collect::<Vec<_>>(), ["tool:get_order"]);
    assert_eq!(
        m.call(Api::OpenAi, &body(Api::OpenAi, false, false), 1).await.status(),
        200
    );
}

#[tokio::test]
async fn control_api_rejects_bad_tables() {
    let m = mock().await;
    let url = format!("{}/_fusebox/faults", m.base);
    let cases: [(&str, &str); 4] = [
        ("{not json", "invalid fault table"),
        (r#"{"provider:openai": {"fault": {"type": "explode"}}}"#, "explode"),
        (r#"{"provider:openai": {"fault": {"type": "status"}}}"#, "code"),
        (
            r#"{"provider:openai": {"fault": {"type": "timeout"}, "rate": 2.0}}"#,
            "rate",
        ),
    ];
    for (body, needle) in cases {
        let r = m
            .http
            .put(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.unwrap();
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(needle), "{msg} should mention {needle}");
    }
    // Nothing was applied.
    assert!(m.faults.all().is_empty());
}

// ------------------------------------------------------ auth and requests --

/// `fusebox mock` answers a call with no key at all (trying a config
/// without keys, as against a keyless local server), but still refuses a
/// malformed credential and a missing `anthropic-version`.
#[tokio::test]
async fn a_keyless_mock_answers_calls_without_a_key_but_not_bad_ones() {
    let server = MockServer::keyless(SEED, Arc::new(FaultTable::default()));
    let base = format!("http://{}", server.spawn("127.0.0.1:0").await.unwrap());
    let http = Client::new();
    for api in [Api::OpenAi, Api::DeepSeek] {
        let post = || {
            http.post(format!("{base}{}", api.path()))
                .json(&body(api, false, false))
        };
        assert_eq!(post().send().await.unwrap().status(), 200, "{api:?} without a key");
        let bad = post().header("authorization", "Basic abc").send().await.unwrap();
        assert_eq!(bad.status(), 401, "{api:?} with a malformed key");
    }
    let post = || {
        http.post(format!("{base}/v1/messages"))
            .json(&body(Api::Anthropic, false, false))
    };
    let r = post().header("anthropic-version", "2023-06-01").send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        post().send().await.unwrap().status(),
        400,
        "anthropic-version is still required"
    );
    // The version the current SDK sends (anthropic 2.14) is one; a word is not.
    for (version, status) in [
        ("2026-10-21", 200),
        ("latest", 400),
        ("2022-12-31", 400),
        ("2023-13-01", 400),
    ] {
        let r = post().header("anthropic-version", version).send().await.unwrap();
        assert_eq!(r.status(), status, "anthropic-version: {version}");
    }
}

#[tokio::test]
async fn missing_auth_is_401_in_each_shape() {
    let m = mock().await;
    for api in [Api::OpenAi, Api::DeepSeek] {
        let r = m
            .http
            .post(format!("{}{}", m.base, api.path()))
            .json(&body(api, false, false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "invalid_api_key");
        let r = m
            .http
            .post(format!("{}{}", m.base, api.path()))
            .header("authorization", "Bearer ")
            .json(&body(api, false, false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }
    let r = m
        .http
        .post(format!("{}/v1/messages", m.base))
        .header("anthropic-version", "2023-06-01")
        .json(&body(Api::Anthropic, false, false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");
    let r = m
        .http
        .post(format!("{}/v1/messages", m.base))
        .header("x-api-key", "sk-ant-secret-value")
        .json(&body(Api::Anthropic, false, false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("anthropic-version") && !text.contains("sk-ant-secret-value"),
        "{text}"
    );
    // The current Anthropic SDK sends its key as a bearer token.
    let r = m
        .http
        .post(format!("{}/v1/messages", m.base))
        .header("anthropic-version", "2023-06-01")
        .bearer_auth("sk-ant-test")
        .json(&body(Api::Anthropic, false, false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn malformed_requests_are_400_naming_the_field() {
    let m = mock().await;
    let mut b = body(Api::OpenAi, false, false);
    b.as_object_mut().unwrap().remove("model");
    let r = m.call(Api::OpenAi, &b, 1).await;
    assert_eq!(r.status(), 400);
    assert!(r.headers().contains_key("x-ratelimit-remaining-requests"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "model");

    let mut b = body(Api::OpenAi, false, false);
    b["messages"][1]["content"] = json!(42);
    let v: Value = m.call(Api::OpenAi, &b, 1).await.json().await.unwrap();
    assert_eq!(v["error"]["param"], "messages[1].content");

    let mut b = body(Api::Anthropic, false, false);
    b.as_object_mut().unwrap().remove("max_tokens");
    let r = m.call(Api::Anthropic, &b, 1).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("max_tokens"));

    let r = m
        .post(Api::DeepSeek, "/chat/completions", &json!([1, 2]))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let r = m
        .post(Api::OpenAi, Api::OpenAi.path(), &body(Api::OpenAi, false, false))
        .header("x-fusebox-step", "two")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "x-fusebox-step");
}

#[tokio::test]
async fn models_and_unknown_routes() {
    let m = mock().await;
    let r = m
        .http
        .get(format!("{}/v1/models", m.base))
        .bearer_auth("k")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["gpt-4o", "claude-haiku", "deepseek-chat"]);
    let r = m.http.get(format!("{}/v1/models", m.base)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = m.http.get(format!("{}/v2/nothing", m.base)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("/v2/nothing"));
}
