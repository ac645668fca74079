//! The gateway as a faithful proxy, against a strict upstream (see
//! `common::strict`): what a client sends reaches the provider unchanged
//! but for the documented rewrites, what the provider answers reaches the
//! client unchanged, tool loops keep their ids, and a fallback to the other
//! API is translated so the conversation still holds.

use crate::common::strict::{Api, Strict, CUSTOM_INPUT};
use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::gateway::GatewayOptions;
use fusebox::provider::anthropic::AnthropicClient;
use fusebox::provider::http::{Endpoint, Secret};
use fusebox::provider::openai::OpenAiClient;
use fusebox::provider::Provider;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::wire::openai::Dialect;
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A gateway over two providers at the strict upstream: `openai` (OpenAI
/// API, model gpt-4o) and `anthropic` (model claude-haiku).
pub struct Proxy {
    pub upstream: Strict,
    pub runner: Arc<Runner>,
    pub base: String,
    pub http: reqwest::Client,
}

pub fn config(toml_routes: &str) -> Config {
    let text = format!(
        r#"
[providers.openai]
kind = "openai-compatible"
base_url = "http://unused"
[providers.anthropic]
kind = "anthropic"
base_url = "http://unused"
[models.gpt-4o]
provider = "openai"
input_per_m = 2.5
output_per_m = 10.0
[models.claude-haiku]
provider = "anthropic"
api_name = "claude-3-5-haiku-latest"
input_per_m = 0.8
output_per_m = 4.0
quality = 0.85
[retry]
max_retries = 0
{toml_routes}
"#
    );
    Config::parse(&text, "test.toml").expect("test config")
}

pub const ROUTES: &str = r#"
[routes.default]
chain = ["gpt-4o", "claude-haiku"]
[routes.claude-first]
chain = ["claude-haiku", "gpt-4o"]
"#;

/// The HTTP clients of `cfg`'s providers, pointed at `base`.
pub fn clients(cfg: &Config, base: &str, clock: Clock) -> HashMap<String, Arc<dyn Provider>> {
    // Loopback is plain HTTP: the client `build` gives such providers.
    let http = fusebox::provider::upstream::Upstream::new().unwrap();
    let mut out: HashMap<String, Arc<dyn Provider>> = HashMap::new();
    for (name, p) in &cfg.providers {
        let anthropic = name == "anthropic";
        let ep = Endpoint {
            name: name.clone(),
            url: format!(
                "{base}{}",
                if anthropic {
                    "/v1/messages"
                } else {
                    "/v1/chat/completions"
                }
            ),
            key: Some(Secret::new("test-key".into())),
            stream: p.stream,
            idle: Duration::from_secs(10),
        };
        let c: Arc<dyn Provider> = if anthropic {
            Arc::new(AnthropicClient::new(http.clone(), ep, clock))
        } else if p.kind == fusebox::config::ProviderKind::Bedrock {
            let ep = Endpoint {
                url: base.to_string(),
                ..ep
            };
            let credentials = aws_credential_types::Credentials::new(
                crate::common::strict_bedrock::KEY_ID,
                crate::common::strict_bedrock::SECRET,
                None,
                None,
                "test",
            );
            Arc::new(fusebox::provider::bedrock::BedrockClient::new(
                http.clone(),
                ep,
                "us-east-1".into(),
                credentials,
                clock,
            ))
        } else if p.kind == fusebox::config::ProviderKind::Gemini {
            let ep = Endpoint {
                url: format!("{base}/v1beta"),
                ..ep
            };
            Arc::new(fusebox::provider::gemini::GeminiClient::new(http.clone(), ep, clock))
        } else {
            Arc::new(OpenAiClient::new(http.clone(), ep, Dialect::Compatible, clock))
        };
        out.insert(name.clone(), c);
    }
    out
}

impl Proxy {
    pub async fn start(cfg: Config) -> Proxy {
        let upstream = Strict::start().await;
        let clock = Clock::system();
        let mut parts = RunnerParts::mock(clock, Seed(3));
        parts.providers = clients(&cfg, &upstream.base(), clock);
        let runner = Runner::new(cfg, parts).unwrap();
        let addr = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", GatewayOptions::default())
            .await
            .unwrap()
            .addr;
        Proxy {
            upstream,
            runner,
            base: format!("http://{addr}"),
            http: reqwest::Client::new(),
        }
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.post_with(path, body, &[]).await
    }

    pub async fn post_with(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut b = self.http.post(format!("{}{path}", self.base)).json(body);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.send().await.unwrap()
    }
}

pub fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

pub fn get_order_tool() -> Value {
    json!({"type": "function", "function": {
        "name": "get_order", "description": "Look up an order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}})
}

fn anthropic_tool() -> Value {
    json!({"name": "get_order", "description": "Look up an order",
           "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}})
}

/// The first turn of an OpenAI tool loop.
pub fn openai_turn1(model: &str) -> Value {
    json!({
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "Where is order #38100?"}
        ],
        "tools": [get_order_tool()],
    })
}

/// Runs an OpenAI client's two-turn tool loop; the final answer's body.
pub async fn openai_tool_loop(p: &Proxy, model: &str) -> (reqwest::header::HeaderMap, Value) {
    let mut body = openai_turn1(model);
    let r = p.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let v: Value = r.json().await.unwrap();
    let msg = v["choices"][0]["message"].clone();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let call = msg["tool_calls"][0].clone();
    assert_eq!(call["function"]["name"], "get_order");
    let id = call["id"].as_str().unwrap().to_string();
    body["messages"].as_array_mut().unwrap().push(msg);
    body["messages"].as_array_mut().unwrap().push(json!({
        "role": "tool", "tool_call_id": id, "content": "shipped on Monday"
    }));
    let r = p.post("/v1/chat/completions", &body).await;
    let headers = r.headers().clone();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    (headers, r.json().await.unwrap())
}

#[tokio::test]
async fn an_openai_tool_loop_keeps_the_upstream_ids_and_its_answer_as_sent() {
    let p = Proxy::start(config(ROUTES)).await;
    let (h, v) = openai_tool_loop(&p, "default").await;
    assert_eq!(h["x-fusebox-level"], "none");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "The order service says: shipped on Monday"
    );
    // The upstream's answer as it sent it: its id, fingerprint and extra fields.
    assert_eq!(v["id"], "chatcmpl-strict1");
    assert_eq!(v["system_fingerprint"], "fp_strict");
    assert_eq!(v["service_tier"], "default");
    let bodies = p.upstream.bodies(Api::OpenAi);
    assert_eq!(bodies.len(), 2);
    let second = &bodies[1]["messages"];
    assert_eq!(second[2]["tool_calls"][0]["id"], "call_abc123");
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["tool_call_id"], "call_abc123");
}

#[tokio::test]
async fn every_field_reaches_the_upstream_unchanged_but_the_model() {
    let p = Proxy::start(config(ROUTES)).await;
    let body = json!({
        "model": "default",
        "messages": [
            {"role": "developer", "content": "Answer in JSON."},
            {"role": "user", "name": "alice", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "high"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
            ]}
        ],
        "temperature": 0.3, "top_p": 0.9, "seed": 42, "stop": ["\n\n", "END"],
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}},
        "tools": [get_order_tool()], "tool_choice": "none", "parallel_tool_calls": false,
        "presence_penalty": 0.5, "frequency_penalty": 0.25, "logit_bias": {"50256": -100},
        "metadata": {"team": "support"}, "store": false, "user": "alice",
        "x_vendor_extension": {"keep": [1, 2, 3]},
    });
    let r = p.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let got = p.upstream.bodies(Api::OpenAi).pop().unwrap();
    let mut want = body.clone();
    want["model"] = json!("gpt-4o");
    assert_eq!(got, want, "only the model is rewritten; no max_tokens is added");
}

#[tokio::test]
async fn an_anthropic_tool_loop_through_v1_messages() {
    let p = Proxy::start(config(ROUTES)).await;
    let mut body = json!({
        "model": "claude-haiku",
        "max_tokens": 300,
        "system": [{"type": "text", "text": "You are a support agent.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Where is order #38100?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
        ]}],
        "tools": [anthropic_tool()],
        "temperature": 0.2, "top_k": 5, "stop_sequences": ["END"], "metadata": {"user_id": "alice"},
    });
    let r = p.post("/v1/messages", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(header(&r, "x-fusebox-level"), "none");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["id"], "msg_strict1", "the upstream's own answer");
    assert_eq!(v["stop_reason"], "tool_use");
    let call = v["content"][0].clone();
    assert_eq!(call["id"], "toolu_abc123");
    let first = p.upstream.bodies(Api::Anthropic).pop().unwrap();
    let mut want = body.clone();
    want["model"] = json!("claude-3-5-haiku-latest");
    assert_eq!(first, want, "only the model is rewritten (to its api_name)");
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": v["content"]}));
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_abc123", "content": "shipped on Monday"}
        ]}));
    let r = p.post("/v1/messages", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["content"][0]["text"], "The order service says: shipped on Monday");
    let second = p.upstream.bodies(Api::Anthropic).pop().unwrap();
    assert_eq!(second["messages"][2]["content"][0]["tool_use_id"], "toolu_abc123");
}

/// Routes that trim the conversation on a fallback hop to a model of the
/// same API.
const TRIMMED: &str = r#"
[models.gpt-4o-mini]
provider = "openai"
input_per_m = 0.15
output_per_m = 0.6
[models.claude-sonnet]
provider = "anthropic"
api_name = "claude-sonnet-4-5"
input_per_m = 3.0
output_per_m = 15.0
[routes.trimmed]
chain = ["gpt-4o", "gpt-4o-mini"]
trim_prompt_on_fallback = true
[routes.trimmed-anthropic]
chain = ["claude-haiku", "claude-sonnet"]
trim_prompt_on_fallback = true
"#;

#[tokio::test]
async fn a_trimmed_hop_sends_the_messages_it_keeps_as_the_client_wrote_them() {
    let p = Proxy::start(config(TRIMMED)).await;
    p.upstream.set_model_down("gpt-4o");
    let kept = [
        json!({"role": "developer", "content": "Be brief.", "name": "policy"}),
        json!({"role": "user", "name": "bob", "content": [
            {"type": "text", "text": "Where is order #38100?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/label.png", "detail": "low"}}]}),
        json!({"role": "assistant", "content": null, "audio": {"id": "audio_1"}, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_order", "arguments": "{\"order_id\":\"38100\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": "in transit"}),
    ];
    let messages = vec![
        kept[0].clone(),
        json!({"role": "user", "content": "An older question"}),
        json!({"role": "assistant", "content": "An older answer", "audio": {"id": "audio_0"}}),
        kept[1].clone(),
        kept[2].clone(),
        kept[3].clone(),
    ];
    let body = json!({"model": "trimmed", "messages": messages, "tools": [get_order_tool()]});
    let r = p.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(header(&r, "x-fusebox-level"), "fallback");
    let bodies = p.upstream.bodies(Api::OpenAi);
    assert_eq!(
        bodies[0]["messages"],
        json!(messages),
        "the first hop gets the whole conversation"
    );
    let second = bodies.last().unwrap();
    assert_eq!(second["model"], "gpt-4o-mini");
    assert_eq!(
        second["messages"],
        json!(kept),
        "the instructions and the last turn on, each element as sent (`audio` too)"
    );
}

#[tokio::test]
async fn a_trimmed_anthropic_hop_keeps_signatures_and_cache_control() {
    let p = Proxy::start(config(TRIMMED)).await;
    p.upstream.set_model_down("claude-3-5-haiku-latest");
    let system = json!([{"type": "text", "text": "You are a support agent.", "cache_control": {"type": "ephemeral"}}]);
    let kept = [
        json!({"role": "user", "content": [
            {"type": "text", "text": "Where is order #38100?", "cache_control": {"type": "ephemeral"}}]}),
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should look it up.", "signature": "sig_abc"},
            {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {"order_id": "38100"}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "in transit", "cache_control": {"type": "ephemeral"}}]}),
    ];
    let messages = vec![
        json!({"role": "user", "content": "An older question"}),
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Old thoughts.", "signature": "sig_old"},
            {"type": "text", "text": "An older answer"}]}),
        kept[0].clone(),
        kept[1].clone(),
        kept[2].clone(),
    ];
    let body = json!({"model": "trimmed-anthropic", "max_tokens": 300, "system": system,
                      "messages": messages, "tools": [anthropic_tool()]});
    let r = p.post("/v1/messages", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(header(&r, "x-fusebox-level"), "fallback");
    let second = p.upstream.bodies(Api::Anthropic).pop().unwrap();
    assert_eq!(second["model"], "claude-sonnet-4-5");
    assert_eq!(second["system"], system, "the instructions as sent");
    assert_eq!(second["messages"], json!(kept), "the last turn on, each block as sent");
}

#[tokio::test]
async fn a_named_model_answers_and_a_header_forbids_falling_back() {
    let p = Proxy::start(config(ROUTES)).await;
    let r = p.post("/v1/chat/completions", &openai_turn1("claude-haiku")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-fusebox-chain"), "claude-haiku ok");
    assert_eq!(header(&r, "x-fusebox-level"), "none");
    assert!(p.upstream.bodies(Api::OpenAi).is_empty(), "gpt-4o was not asked");
    // Down, it falls back to what follows it in its route...
    p.upstream.set_down(Api::Anthropic, true);
    let r = p.post("/v1/chat/completions", &openai_turn1("claude-haiku")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-fusebox-level"), "fallback");
    assert!(
        header(&r, "x-fusebox-chain").ends_with("gpt-4o ok"),
        "{}",
        header(&r, "x-fusebox-chain")
    );
    // ...unless the client says none.
    let r = p
        .post_with(
            "/v1/chat/completions",
            &openai_turn1("claude-haiku"),
            &[("x-fusebox-fallback", "none")],
        )
        .await;
    assert_eq!(r.status(), 503);
    assert!(!header(&r, "x-fusebox-chain").contains("gpt-4o"));
    let models: Value = p
        .http
        .get(format!("{}/v1/models", p.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kind = |id: &str| {
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .map(|m| m["fusebox"]["kind"].clone())
    };
    assert_eq!(kind("default"), Some(json!("route")));
    assert_eq!(kind("claude-haiku"), Some(json!("model")));
}

#[tokio::test]
async fn a_route_can_forbid_named_models_to_fall_back() {
    let routes = r#"
[routes.default]
chain = ["claude-haiku", "gpt-4o"]
named_fallback = false
"#;
    let p = Proxy::start(config(routes)).await;
    p.upstream.set_down(Api::Anthropic, true);
    let r = p.post("/v1/chat/completions", &openai_turn1("claude-haiku")).await;
    assert_eq!(r.status(), 503);
    assert!(p.upstream.bodies(Api::OpenAi).is_empty());
}

#[tokio::test]
async fn a_tool_loop_falls_back_across_apis_both_ways() {
    // OpenAI client, OpenAI primary down: Anthropic answers both turns.
    let p = Proxy::start(config(ROUTES)).await;
    p.upstream.set_down(Api::OpenAi, true);
    let (h, v) = openai_tool_loop(&p, "default").await;
    assert_eq!(h["x-fusebox-level"], "fallback");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "The order service says: shipped on Monday"
    );
    let second = p.upstream.bodies(Api::Anthropic).pop().unwrap();
    assert_eq!(second["system"], "You are a support agent.");
    assert_eq!(second["messages"][1]["content"][0]["type"], "tool_use");
    assert_eq!(second["messages"][1]["content"][0]["id"], "toolu_abc123");
    assert_eq!(second["messages"][2]["content"][0]["tool_use_id"], "toolu_abc123");

    // Anthropic client, Anthropic primary down: OpenAI answers both turns.
    let p = Proxy::start(config(ROUTES)).await;
    p.upstream.set_down(Api::Anthropic, true);
    let mut body = json!({
        "model": "claude-first", "max_tokens": 200, "system": "You are a support agent.",
        "messages": [{"role": "user", "content": "Where is order #38100?"}],
        "tools": [anthropic_tool()],
    });
    let r = p.post("/v1/messages", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["content"][0]["type"], "tool_use");
    assert_eq!(v["content"][0]["id"], "call_abc123");
    assert_eq!(v["content"][0]["input"], json!({"order_id": "38100"}));
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": v["content"]}));
    body["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_abc123", "content": "shipped on Monday"}
        ]}));
    let r = p.post("/v1/messages", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(header(&r, "x-fusebox-level"), "fallback");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["content"][0]["text"], "The order service says: shipped on Monday");
    let second = p.upstream.bodies(Api::OpenAi).pop().unwrap();
    assert_eq!(
        second["messages"][0],
        json!({"role": "system", "content": "You are a support agent."})
    );
    assert_eq!(second["messages"][2]["tool_calls"][0]["id"], "call_abc123");
    assert_eq!(second["messages"][3]["tool_call_id"], "call_abc123");
    // The route lowers the cap on a fallback hop (max_tokens_factor 0.5).
    assert_eq!(second["max_tokens"], 100);
}

#[tokio::test]
async fn a_call_of_an_anthropic_defined_tool_is_the_clients_to_run() {
    let p = Proxy::start(config(ROUTES)).await;
    let body = json!({
        "model": "claude-first", "max_tokens": 300,
        "messages": [{"role": "user", "content": "List the files."}],
        "tools": [{"type": "bash_20250124", "name": "bash"}, anthropic_tool()],
    });
    let r = p.post("/v1/messages", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(header(&r, "x-fusebox-level"), "none", "not a hallucinated tool");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["content"][0]["name"], "bash");
    assert_eq!(p.upstream.bodies(Api::Anthropic).pop().unwrap()["tools"], body["tools"]);
    // An OpenAI model cannot run Anthropic's tools: it is skipped, saying so.
    p.upstream.set_down(Api::Anthropic, true);
    let r = p.post("/v1/messages", &body).await;
    let chain = header(&r, "x-fusebox-chain").to_string();
    assert!(
        chain.contains("gpt-4o skipped: cannot honour Anthropic-defined tools"),
        "{chain}"
    );
    assert!(p.upstream.bodies(Api::OpenAi).is_empty());
}

#[tokio::test]
async fn the_clients_api_headers_go_on_with_its_body_and_only_with_it() {
    let p = Proxy::start(config(ROUTES)).await;
    let body = json!({
        "model": "claude-first", "max_tokens": 300,
        "messages": [{"role": "user", "content": "Hello"}],
    });
    let r = p
        .http
        .post(format!("{}/v1/messages", p.base))
        .header("anthropic-version", "2023-01-01")
        .header("anthropic-beta", "context-1m-2025-08-07")
        .header("anthropic-beta", "fine-grained-tool-streaming-2025-05-14")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let got = p.upstream.received().pop().unwrap().headers;
    let all = |n: &str| {
        got.get_all(n)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(all("anthropic-version"), ["2023-01-01"]);
    assert_eq!(
        all("anthropic-beta"),
        ["context-1m-2025-08-07", "fine-grained-tool-streaming-2025-05-14"]
    );
    // Translated for the other API, the call carries none of them.
    p.upstream.set_down(Api::Anthropic, true);
    let r = p
        .http
        .post(format!("{}/v1/messages", p.base))
        .header("anthropic-beta", "context-1m-2025-08-07")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let got = p.upstream.received().pop().unwrap();
    assert_eq!(got.api, Api::OpenAi);
    assert!(got.headers.get("anthropic-beta").is_none());
    // An OpenAI client's beta header goes on with its body.
    let r = p
        .http
        .post(format!("{}/v1/chat/completions", p.base))
        .header("openai-beta", "assistants=v2")
        .json(&openai_turn1("default"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let got = p.upstream.received().pop().unwrap().headers;
    assert_eq!(got.get("openai-beta").unwrap(), "assistants=v2");
}

#[tokio::test]
async fn allowed_tools_are_what_the_model_may_call_in_either_api() {
    let p = Proxy::start(config(ROUTES)).await;
    let mut body = openai_turn1("default");
    let refund = json!({"type": "function", "function": {"name": "refund", "parameters": {"type": "object"}}});
    // The first tool offered is the one the fake calls: `refund`, which the
    // choice does not allow.
    body["tools"] = json!([refund, get_order_tool()]);
    body["tool_choice"] = json!({"type": "allowed_tools", "allowed_tools": {
        "mode": "required", "tools": [{"type": "function", "function": {"name": "get_order"}}]}});
    let r = p.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // The OpenAI model got the body as sent; its call of `refund` is not
    // allowed, so the Anthropic model was asked, offered `get_order` only.
    assert_eq!(p.upstream.bodies(Api::OpenAi)[0]["tool_choice"], body["tool_choice"]);
    let chain = header(&r, "x-fusebox-chain").to_string();
    assert!(chain.starts_with("gpt-4o failed semantic"), "{chain}");
    let sent = p.upstream.bodies(Api::Anthropic).pop().unwrap();
    let names: Vec<&str> = sent["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["get_order"]);
    assert_eq!(sent["tool_choice"]["type"], "any");
}

#[tokio::test]
async fn a_request_the_other_api_cannot_honour_skips_it_with_the_reason() {
    let p = Proxy::start(config(ROUTES)).await;
    p.upstream.set_down(Api::OpenAi, true);
    let mut body = openai_turn1("default");
    body["response_format"] =
        json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}});
    let r = p.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 503);
    let chain = header(&r, "x-fusebox-chain").to_string();
    assert!(
        chain.contains("claude-haiku skipped: cannot honour response_format"),
        "{chain}"
    );
    assert!(p.upstream.bodies(Api::Anthropic).is_empty());
}

/// A request no model it may reach can carry is the client's to change: a
/// 400 saying why, not a 503 that suggests trying again.
#[tokio::test]
async fn a_request_no_model_can_honour_is_a_bad_request_saying_why() {
    let p = Proxy::start(config(ROUTES)).await;
    let mut body = openai_turn1("claude-haiku");
    body["response_format"] =
        json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}});
    let r = p
        .post_with("/v1/chat/completions", &body, &[("x-fusebox-fallback", "none")])
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no model of route `claude-haiku` can serve this request as asked"),
        "{message}"
    );
    assert!(
        message.contains("claude-haiku cannot honour response_format"),
        "{message}"
    );
    assert!(p.upstream.received().is_empty());
}

fn custom_tool() -> Value {
    json!({"type": "custom", "custom": {"name": "sql", "description": "Runs a read-only SQL query",
           "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: /SELECT .+/"}}}})
}

#[tokio::test]
async fn a_custom_tool_loop_passes_through_and_another_api_is_skipped_for_it() {
    let p = Proxy::start(config(ROUTES)).await;
    let mut body = openai_turn1("default");
    body["tools"] = json!([custom_tool()]);
    body["tool_choice"] = json!({"type": "custom", "custom": {"name": "sql"}});
    let r = p.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(
        header(&r, "x-fusebox-level"),
        "none",
        "a free-text call is no semantic failure"
    );
    let v: Value = r.json().await.unwrap();
    let call = v["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(call["type"], "custom");
    assert_eq!(call["custom"]["input"], CUSTOM_INPUT);
    let mut want = body.clone();
    want["model"] = json!("gpt-4o");
    assert_eq!(p.upstream.bodies(Api::OpenAi).pop().unwrap(), want);
    // Turn two: the call and its result go on as sent.
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
    messages.push(json!({"role": "tool", "tool_call_id": "call_abc123", "content": "in transit"}));
    body.as_object_mut().unwrap().remove("tool_choice");
    let r = p.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "The order service says: in transit"
    );
    let mut want = body.clone();
    want["model"] = json!("gpt-4o");
    assert_eq!(p.upstream.bodies(Api::OpenAi).pop().unwrap(), want);
    // Streamed, the call arrives as the upstream streamed it.
    let mut streamed = openai_turn1("default");
    streamed["tools"] = json!([custom_tool()]);
    streamed["stream"] = json!(true);
    let r = p.post("/v1/chat/completions", &streamed).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains(r#""custom":{"input":"SELECT status"#), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    // Anthropic's API has no custom tools: that hop is skipped, not served.
    p.upstream.set_down(Api::OpenAi, true);
    let r = p.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 503);
    let chain = header(&r, "x-fusebox-chain").to_string();
    assert!(
        chain.contains("claude-haiku skipped: cannot honour custom tools"),
        "{chain}"
    );
    assert!(p.upstream.bodies(Api::Anthropic).is_empty());
}

#[tokio::test]
async fn the_clients_own_mistake_comes_back_as_the_upstream_said_and_is_not_retried() {
    let p = Proxy::start(config(ROUTES)).await;
    let mut body = openai_turn1("default");
    body["stream_options"] = json!({"include_usage": true});
    let r = p.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "stream_options");
    assert_eq!(p.upstream.received().len(), 1, "not retried, no fallback");
    let t = crate::common::entry(&p.runner, "provider:openai");
    let view = t.breaker.view(p.runner.clock().now());
    assert_eq!(view.calls_in_window, 0, "not counted against the breaker");
}

#[tokio::test]
async fn a_prompt_too_long_for_every_model_is_the_clients_to_shorten() {
    let p = Proxy::start(config(ROUTES)).await;
    let refusal = json!({"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens.",
                         "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"});
    p.upstream.state.faults.lock().refuse = Some(refusal.clone());
    *p.upstream.state.anthropic_too_large.lock() = true;
    // Each model is asked once (one with a longer context might take it),
    // then the client gets the first model's refusal as it sent it.
    let r = p.post("/v1/chat/completions", &openai_turn1("default")).await;
    assert_eq!(r.status(), 400);
    assert_eq!(
        header(&r, "x-fusebox-chain"),
        "gpt-4o failed 400, claude-haiku failed 413"
    );
    let v: Value = r.json().await.unwrap();
    assert_eq!(v, json!({ "error": refusal }));
    let statuses: Vec<u16> = p.upstream.received().iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![400, 413]);
    // A model that takes it answers.
    *p.upstream.state.anthropic_too_large.lock() = false;
    let r = p.post("/v1/chat/completions", &openai_turn1("default")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-fusebox-chain"), "gpt-4o failed 400, claude-haiku ok");
}

/// A random valid chat-completions request: messages of every role, tool
/// loops with matching ids, content parts, sampling parameters and
/// unknown fields.
fn arb_request() -> impl Strategy<Value = Value> {
    let text = "[a-zA-Z0-9 #?.,é]{0,40}";
    let user = prop_oneof![
        text.prop_map(|t| json!({"role": "user", "content": t})),
        (text, "[a-z]{1,8}").prop_map(|(t, f)| json!({"role": "user", "content": [
            {"type": "text", "text": t},
            {"type": "image_url", "image_url": {"url": format!("https://example.com/{f}.png")}}
        ]})),
    ];
    let turn = prop_oneof![
        user.clone().prop_map(|u| vec![u]),
        (text, "[a-z0-9]{4,12}", user.clone()).prop_map(|(t, id, u)| vec![
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": format!("call_{id}"), "type": "function", "function": {"name": "get_order", "arguments": "{\"order_id\":\"1\"}"}}]}),
            json!({"role": "tool", "tool_call_id": format!("call_{id}"), "content": t}),
            u,
        ]),
        (text, user).prop_map(|(t, u)| vec![json!({"role": "assistant", "content": t}), u]),
    ];
    let options = (
        prop::option::of(0.0f64..2.0),
        prop::option::of(0.0f64..1.0),
        prop::option::of(any::<u32>()),
        prop::option::of(1u32..4096),
        prop::option::of(prop::collection::vec("[a-z]{1,4}", 1..4)),
        prop::option::of(any::<bool>()),
        prop::option::of("[a-z]{1,10}"),
        any::<bool>(),
    );
    (
        prop::option::of(text.prop_map(|t| json!({"role": "system", "content": t}))),
        prop::collection::vec(turn, 1..4),
        options,
    )
        .prop_map(
            |(system, turns, (temp, top_p, seed, max, stop, parallel, extra, tools))| {
                let mut messages: Vec<Value> = system.into_iter().collect();
                messages.push(json!({"role": "user", "content": "start"}));
                messages.extend(turns.into_iter().flatten());
                let mut b = json!({"model": "default", "messages": messages});
                let o = b.as_object_mut().unwrap();
                let mut put = |k: &str, v: Option<Value>| {
                    if let Some(v) = v {
                        o.insert(k.into(), v);
                    }
                };
                put("temperature", temp.map(|t| json!((t * 100.0).round() / 100.0)));
                put("top_p", top_p.map(|t| json!((t * 100.0).round() / 100.0)));
                put("seed", seed.map(|s| json!(s)));
                put("max_completion_tokens", max.map(|m| json!(m)));
                put("stop", stop.map(|s| json!(s)));
                put("parallel_tool_calls", parallel.map(|p| json!(p)));
                put("x_extra", extra.map(|e| json!({"v": e})));
                if tools {
                    o.insert("tools".into(), json!([get_order_tool()]));
                    o.insert("tool_choice".into(), json!("auto"));
                }
                b
            },
        )
}

#[test]
fn any_valid_request_reaches_the_upstream_as_sent_but_its_model() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let p = rt.block_on(Proxy::start(config(ROUTES)));
    let cfg = ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    };
    proptest!(cfg, |(body in arb_request())| {
        let status = rt.block_on(async { p.post("/v1/chat/completions", &body).await.status() });
        prop_assert_eq!(status, 200);
        let got = p.upstream.bodies(Api::OpenAi).pop().unwrap();
        let mut want = body.clone();
        want["model"] = json!("gpt-4o");
        prop_assert_eq!(got, want);
    });
}

#[tokio::test]
async fn the_agent_loop_converses_with_real_apis_as_an_agent_does() {
    use fusebox::outcome::Level;
    use fusebox::request::AgentRequest;
    let routes = format!(
        "{ROUTES}[providers.gemini]\nkind = \"gemini\"\nbase_url = \"http://unused\"\n[models.gemini-flash]\nprovider = \"gemini\"\n\
         api_name = \"gemini-2.5-flash\"\ninput_per_m = 0.3\noutput_per_m = 2.5\n\
         [routes.gemini-first]\nchain = [\"gemini-flash\", \"gpt-4o\"]\n\
         [providers.bedrock]\nkind = \"bedrock\"\nregion = \"us-east-1\"\n[models.claude-bedrock]\nprovider = \"bedrock\"\n\
         api_name = \"anthropic.claude-3-5-haiku-20241022-v1:0\"\ninput_per_m = 0.8\noutput_per_m = 4.0\n\
         [routes.bedrock-first]\nchain = [\"claude-bedrock\", \"gpt-4o\"]\n"
    );
    for (route, api) in [
        ("default", Api::OpenAi),
        ("claude-first", Api::Anthropic),
        ("gemini-first", Api::Gemini),
        ("bedrock-first", Api::Bedrock),
    ] {
        let p = Proxy::start(config(&routes)).await;
        let req = AgentRequest {
            id: 1,
            user: "alice".into(),
            session: "alice/s".into(),
            route: route.into(),
            messages: [
                fusebox::provider::Message::system("You are a support agent."),
                fusebox::provider::Message::user("Where is order #38100?"),
            ]
            .into(),
            tools: vec!["get_order".into()],
            max_tokens: 256,
            max_steps: 4,
            ..AgentRequest::default()
        };
        let o = p.runner.run(&req).await;
        assert_eq!(o.level, Level::None, "{route}: {:?}", o);
        let answer = o.answer.unwrap();
        assert!(answer.starts_with("The order service says: "), "{answer}");
        let received = p.upstream.received();
        assert!(received.iter().all(|r| r.status == 200), "{received:?}");
        let bodies = p.upstream.bodies(api);
        assert_eq!(bodies.len(), 2, "one tool call, then the answer");
        let second = &bodies[1];
        match api {
            Api::OpenAi => {
                assert_eq!(second["messages"][2]["tool_calls"][0]["id"], "call_abc123");
                assert_eq!(second["messages"][3]["tool_call_id"], "call_abc123");
            }
            Api::Anthropic => {
                assert_eq!(second["messages"][1]["content"][0]["id"], "toolu_abc123");
                assert_eq!(second["messages"][2]["content"][0]["tool_use_id"], "toolu_abc123");
            }
            Api::Bedrock => {
                // The call sent back as a toolUse, its result a toolResult
                // for its id (the fake checks the signature of each).
                let messages = &second["messages"];
                assert_eq!(messages[1]["content"][0]["toolUse"]["toolUseId"], "tooluse_abc123");
                assert_eq!(messages[2]["content"][0]["toolResult"]["toolUseId"], "tooluse_abc123");
                assert_eq!(second["system"][0]["text"], "You are a support agent.");
            }
            Api::Gemini => {
                // The call sent back with the signature the model gave it
                // (the fake refuses it without), its result named for it.
                let call = &second["contents"][1]["parts"][0];
                assert_eq!(call["functionCall"]["name"], "get_order");
                assert_eq!(call["thoughtSignature"], crate::common::strict_gemini::SIGNATURE);
                assert_eq!(
                    second["contents"][2]["parts"][0]["functionResponse"]["name"],
                    "get_order"
                );
                assert_eq!(
                    second["systemInstruction"]["parts"][0]["text"],
                    "You are a support agent."
                );
            }
        }
    }
}

fn responses_tool() -> Value {
    json!({"type": "function", "name": "get_order", "description": "Look up an order", "strict": false,
           "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}})
}

#[tokio::test]
async fn a_responses_api_tool_loop_is_served_by_chat_models() {
    let p = Proxy::start(config(ROUTES)).await;
    let mut body = json!({
        "model": "default", "instructions": "You are a support agent.",
        "input": "Where is order #38100?", "tools": [responses_tool()], "store": false,
    });
    let r = p.post("/v1/responses", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    let call = v["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap()
        .clone();
    assert_eq!(call["call_id"], "call_abc123");
    assert_eq!(call["name"], "get_order");
    assert_eq!(v["usage"]["total_tokens"], 37);
    body["input"] = json!([
        {"role": "user", "content": "Where is order #38100?"},
        call,
        {"type": "function_call_output", "call_id": "call_abc123", "output": "shipped on Monday"}
    ]);
    let r = p.post("/v1/responses", &body).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let v: Value = r.json().await.unwrap();
    let msg = &v["output"][0];
    assert_eq!(msg["type"], "message");
    assert_eq!(msg["content"][0]["type"], "output_text");
    assert_eq!(msg["content"][0]["text"], "The order service says: shipped on Monday");
    let second = p.upstream.bodies(Api::OpenAi).pop().unwrap();
    let m = second["messages"].as_array().unwrap();
    assert_eq!(m[0], json!({"role": "system", "content": "You are a support agent."}));
    assert_eq!(m[2]["tool_calls"][0]["id"], "call_abc123");
    assert_eq!(m[3]["tool_call_id"], "call_abc123");
    assert_eq!(second["tools"][0]["function"]["name"], "get_order");
    for cap in ["max_tokens", "max_completion_tokens"] {
        assert!(second.get(cap).is_none(), "{cap}: the client set no cap");
    }
}

#[tokio::test]
async fn a_streamed_response_is_a_stream_of_semantic_events() {
    let p = Proxy::start(config(ROUTES)).await;
    let body = json!({"model": "claude-haiku", "input": "Where is order #38100?", "stream": true});
    let r = p.post("/v1/responses", &body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "text/event-stream");
    let text = r.text().await.unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"response.created"));
    assert_eq!(types.last(), Some(&"response.completed"));
    for want in [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_item.done",
    ] {
        assert!(types.contains(&want), "{want}: {types:?}");
    }
    let seq: Vec<u64> = events.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect();
    assert!(seq.windows(2).all(|w| w[1] == w[0] + 1), "{seq:?}");
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, crate::common::strict::ANSWER);
    let done = events.last().unwrap();
    assert_eq!(
        done["response"]["output"][0]["content"][0]["text"],
        crate::common::strict::ANSWER
    );
    assert_eq!(done["response"]["usage"]["output_tokens"], 12);
    assert_eq!(done["fusebox"]["level"], "none");
}

#[tokio::test]
async fn the_responses_api_without_server_state_says_so() {
    let p = Proxy::start(config(ROUTES)).await;
    let r = p
        .post(
            "/v1/responses",
            &json!({"model": "default", "input": "hi", "previous_response_id": "resp_1"}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "previous_response_id");
    assert!(v["error"]["message"].as_str().unwrap().contains("whole conversation"));
    assert!(p.upstream.received().is_empty());
}
