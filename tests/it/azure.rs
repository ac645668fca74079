//! Azure OpenAI through the gateway, against the mock server's Azure
//! routes: what Azure adds to OpenAI's wire (its content filter's results
//! on the prompt and each choice, and a stream's first chunk with no
//! choices) reaches a chat client as Azure sent it, and an Anthropic
//! client's stream, translated, still holds; a prompt its content filter
//! refuses is the caller's.

use fusebox::clock::{Clock, Seed};
use fusebox::config::{Config, ProviderKind};
use fusebox::gateway::GatewayOptions;
use fusebox::mockserver::MockServer;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::target::Target;
use serde_json::{json, Value};
use std::sync::Arc;

/// A gateway whose route (`chain`) starts with gpt-4o, on Azure OpenAI
/// at the mock; its root URL and the runner.
async fn gateway(chain: &[&str]) -> (String, Arc<Runner>) {
    let mock = MockServer::new(Seed(5), Default::default());
    let mock = format!("http://{}", mock.spawn("127.0.0.1:0").await.unwrap());
    // SAFETY of the test: the variable name is unique to this test.
    unsafe { std::env::set_var("FUSEBOX_TEST_AZURE_WIRE_KEY", "azure-key") };
    let mut cfg = Config::default();
    let p = cfg.providers.get_mut("openai").unwrap();
    p.kind = ProviderKind::AzureOpenai;
    p.base_url = Some(mock.clone());
    p.api_key_env = Some("FUSEBOX_TEST_AZURE_WIRE_KEY".into());
    p.api_version = Some("2024-10-21".into());
    cfg.routes.get_mut("default").unwrap().chain = chain.iter().map(|m| m.to_string()).collect();
    let mut parts = RunnerParts::mock(Clock::system(), Seed(5));
    parts.providers = fusebox::provider::http::build(&cfg, Clock::system(), Some(&mock)).unwrap();
    let runner = Runner::new(cfg, parts).unwrap();
    let addr = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", GatewayOptions::default())
        .await
        .unwrap()
        .addr;
    (format!("http://{addr}"), runner)
}

fn ask(stream: bool) -> Value {
    json!({"model": "default", "stream": stream, "max_tokens": 16,
        "messages": [{"role": "user", "content": "Where is order #38100?"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_s_filter_results_reach_a_chat_client_and_a_translated_stream_holds() {
    let (base, _) = gateway(&["gpt-4o"]).await;
    let http = reqwest::Client::new();
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&ask(false))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["prompt_filter_results"][0]["content_filter_results"]["hate"]["filtered"], false,
        "{v}"
    );
    assert!(v["choices"][0]["content_filter_results"].is_object(), "{v}");

    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&ask(true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let first = text.lines().find(|l| l.starts_with("data: ")).unwrap_or_default();
    let first: Value = serde_json::from_str(&first["data: ".len()..]).unwrap();
    assert_eq!(first["choices"], json!([]), "Azure's first chunk, as sent: {text}");
    assert!(first["prompt_filter_results"].is_array(), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");

    let r = http
        .post(format!("{base}/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(&ask(true))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("event: message_start") && text.contains("event: message_stop"),
        "{text}"
    );
    assert!(
        !text.contains("prompt_filter_results"),
        "translated, not passed on: {text}"
    );
}

/// A prompt Azure's content filter refuses is the caller's to change: the
/// 400 reaches the client as Azure sent it, no other model is tried and
/// the provider's breaker counts nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_azure_s_filter_refuses_is_the_caller_s() {
    let (base, runner) = gateway(&["gpt-4o", "claude-haiku"]).await;
    let mut body = ask(false);
    body["messages"][0]["content"] = json!(format!("Where is order #38100? {}", fusebox::mockserver::FILTERED));
    let r = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], "content_filter", "{v}");
    assert_eq!(
        v["error"]["innererror"]["content_filter_result"]["violence"]["filtered"], true,
        "{v}"
    );
    let now = runner.clock().now();
    for target in [Target::provider("openai"), Target::model("gpt-4o")] {
        let t = runner.catalog().registry().find(&target).unwrap();
        assert_eq!(
            t.breaker.view(now).calls_in_window,
            0,
            "{target:?}: not the provider's failure"
        );
    }
    let haiku = crate::common::entry(&runner, "model:claude-haiku");
    assert_eq!(
        haiku.stats.attempts.get(),
        0,
        "no other model tried for the caller's prompt"
    );
}
