//! The gateway over real loopback sockets: an OpenAI-style client (reqwest,
//! the OpenAI wire format) → `fusebox serve`'s router → the runner → the
//! mock providers behind the HTTP mock server.

use fusebox::clock::{Clock, Seed};
use fusebox::command::Issuer;
use fusebox::config::Config;
use fusebox::gateway::GatewayOptions;
use fusebox::mockserver::MockServer;
use fusebox::provider::fault::{Fault, FaultSpec, FaultTable};
use fusebox::resilience::breaker::BreakerState;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::target::Target;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

pub struct Fleet {
    pub runner: Arc<Runner>,
    pub faults: Arc<FaultTable>,
    pub base: String,
    pub http: reqwest::Client,
}

/// The gateway as `fusebox serve` sets it up, over instant mock providers.
pub async fn gateway(cfg: Config, opts: GatewayOptions) -> Fleet {
    let clock = Clock::system();
    let mut parts = RunnerParts::mock(clock, Seed(5));
    let mock = MockServer::instant(Seed(5), parts.faults.clone());
    let mock_addr = mock.spawn("127.0.0.1:0").await.unwrap();
    parts.providers = fusebox::provider::http::build(&cfg, clock, Some(&format!("http://{mock_addr}"))).unwrap();
    let faults = parts.faults.clone();
    let runner = Runner::new(cfg, parts).unwrap();
    let addr = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", opts)
        .await
        .unwrap()
        .addr;
    Fleet {
        runner,
        faults,
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
    }
}

pub fn ask(model: &str, user: &str) -> Value {
    json!({
        "model": model,
        "user": user,
        "max_tokens": 64,
        "messages": [
            {"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": "Where is order #38100?"}
        ]
    })
}

impl Fleet {
    pub async fn post(&self, body: &Value) -> reqwest::Response {
        self.http
            .post(format!("{}/v1/chat/completions", self.base))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn get(&self, path: &str) -> String {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
}

#[tokio::test]
async fn answers_in_the_openai_format_with_degradation_headers() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let r = f.post(&ask("default", "alice")).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-fusebox-level"), "none");
    assert_eq!(header(&r, "x-fusebox-chain"), "gpt-4o ok");
    assert_eq!(header(&r, "x-fusebox-quality"), "1.00");
    assert_eq!(header(&r, "x-fusebox-attempts"), "1");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert!(v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .contains("38100"));
    assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0);
    // A model name reaches the route that starts with it.
    let r = f.post(&ask("gpt-4o", "alice")).await;
    assert_eq!(r.status(), 200);
    let models = f.get("/v1/models").await;
    for id in ["default", "gpt-4o", "claude-haiku"] {
        assert!(models.contains(&format!("\"id\":\"{id}\"")), "{models}");
    }
}

#[tokio::test]
async fn session_quotas_apply_to_named_sessions_only() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let steps = f.runner.config().sessions.max_steps;
    // Unnamed calls of one user are not one endless conversation.
    for _ in 0..steps + 5 {
        assert_eq!(f.post(&ask("default", "kim")).await.status(), 200);
    }
    // A named session is held to its step quota.
    let mut refused = 0;
    for _ in 0..steps + 5 {
        let r = f
            .http
            .post(format!("{}/v1/chat/completions", f.base))
            .header("x-fusebox-session", "kim/s1")
            .json(&ask("default", "kim"))
            .send()
            .await
            .unwrap();
        if r.status() == 429 {
            refused += 1;
        }
    }
    assert_eq!(refused, 5);
}

#[tokio::test]
async fn streams_server_sent_events_that_end_with_done() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let mut body = ask("default", "bob");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = f.post(&body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "text/event-stream");
    let text = r.text().await.unwrap();
    let events: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(events.last(), Some(&"[DONE]"));
    let mut content = String::new();
    let mut usage = None;
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e).unwrap();
        assert_eq!(v["object"], "chat.completion.chunk");
        if let Some(c) = v["choices"][0]["delta"]["content"].as_str() {
            content.push_str(c);
        }
        if v["usage"].is_object() {
            usage = Some(v["usage"]["total_tokens"].as_u64().unwrap());
        }
    }
    assert!(content.contains("38100"), "{content}");
    assert!(usage.unwrap() > 0);
    // The streamed call's time to first token is counted on its targets.
    let t = crate::common::entry(&f.runner, "model:gpt-4o").stats.view();
    assert_eq!((t.ttft.count(), t.latency.count()), (1, 1));
}

#[tokio::test]
async fn a_cut_stream_of_the_demo_is_continued_by_the_fallback_without_a_word_twice() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    f.faults
        .set(&Target::provider("openai"), FaultSpec::always(Fault::Truncated));
    let mut body = ask("default", "dan");
    body["stream"] = json!(true);
    let text = f.post(&body).await.text().await.unwrap();
    let content: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::to_string))
        .collect();
    // Begun by gpt-4o, finished by claude-haiku: each part once.
    assert_eq!(
        content, "Order #38100 is in transit and should arrive within 2 days (claude-haiku).",
        "{text}"
    );
    assert!(text.contains("claude-haiku ok resumed"), "{text}");
}

#[tokio::test]
async fn a_down_primary_falls_back_transparently() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    f.faults
        .set(&Target::provider("openai"), FaultSpec::always(Fault::ConnectionRefused));
    for stream in [false, true] {
        let mut body = ask("default", "carol");
        body["stream"] = json!(stream);
        let r = f.post(&body).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "x-fusebox-level"), "fallback");
        let chain = header(&r, "x-fusebox-chain").to_string();
        assert!(
            chain.starts_with("gpt-4o failed") && chain.ends_with("claude-haiku ok"),
            "{chain}"
        );
        let text = r.text().await.unwrap();
        assert!(text.contains("claude-haiku"), "the fallback model answered: {text}");
    }
}

#[tokio::test]
async fn a_hallucinated_tool_call_is_a_semantic_failure_against_the_request_tools() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    f.faults
        .set(&Target::provider("openai"), FaultSpec::always(Fault::Hallucinate));
    let mut body = ask("default", "dan");
    body["tools"] = json!([{"type": "function", "function": {
        "name": "get_order", "description": "Look up an order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}
    }}]);
    let r = f.post(&body).await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-fusebox-level"), "fallback");
    assert!(header(&r, "x-fusebox-chain").starts_with("gpt-4o failed semantic"));
    let v: Value = r.json().await.unwrap();
    for call in v["choices"][0]["message"]["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
    {
        assert_eq!(
            call["function"]["name"], "get_order",
            "only offered tools reach the client"
        );
    }
}

/// Tools whose schema no answer can meet (`id` where the mock providers'
/// models send `order_id`): every answer is a semantic failure, and the
/// 503 says which check failed, so the client knows what to fix.
#[tokio::test]
async fn answers_that_fail_the_request_s_tool_schemas_are_named_in_the_503() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let mut body = ask("default", "dan");
    body["tools"] = json!([{"type": "function", "function": {
        "name": "get_order", "description": "Look up an order",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"], "additionalProperties": false}
    }}]);
    let r = f.post(&body).await;
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("failed the request's own checks") && msg.contains("get_order"),
        "{msg}"
    );
    assert!(msg.contains("gpt-4o: "), "{msg}");
}

#[tokio::test]
async fn an_exhausted_user_budget_is_a_429_with_retry_after() {
    let mut cfg = Config::default();
    cfg.budgets.user_tokens_per_minute = 2_000;
    let f = gateway(cfg, GatewayOptions::default()).await;
    let mut refused = None;
    for _ in 0..50 {
        let r = f.post(&ask("default", "eve")).await;
        if r.status() == 429 {
            refused = Some(r);
            break;
        }
        assert_eq!(r.status(), 200);
    }
    let r = refused.expect("eve's per-minute budget runs out");
    assert_eq!(header(&r, "retry-after"), "60");
    assert_eq!(header(&r, "x-fusebox-level"), "failed");
    let v: Value = r.json().await.unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(msg.contains("eve") && msg.contains("tokens/minute"), "{msg}");
    assert_eq!(v["error"]["type"], "rate_limit_exceeded");
    // Someone else is not affected.
    assert_eq!(f.post(&ask("default", "frank")).await.status(), 200);
}

#[tokio::test]
async fn every_model_down_is_a_503_with_the_graceful_message() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    for p in ["openai", "anthropic", "deepseek"] {
        f.faults.set(
            &Target::provider(p),
            FaultSpec::always(Fault::Status {
                code: 503,
                retry_after_ms: None,
            }),
        );
    }
    let r = f.post(&ask("default", "gina")).await;
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["message"].as_str().unwrap(),
        f.runner.config().degradation.user_message
    );
}

#[tokio::test]
async fn failures_open_the_breaker_and_metrics_show_it() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    f.faults.set(
        &Target::provider("openai"),
        FaultSpec::always(Fault::Status {
            code: 500,
            retry_after_ms: None,
        }),
    );
    for _ in 0..20 {
        assert_eq!(
            f.post(&ask("default", "hal")).await.status(),
            200,
            "claude-haiku answers"
        );
    }
    let now = f.runner.clock().now();
    let t = crate::common::entry(&f.runner, "provider:openai");
    assert_eq!(t.breaker.view(now).state, Some(BreakerState::Open));
    // Short-circuited now: the open breaker is skipped without a call.
    let r = f.post(&ask("default", "hal")).await;
    assert!(header(&r, "x-fusebox-chain").starts_with("gpt-4o skipped open"));

    let text = f.get("/metrics").await;
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
    let value = |name: &str, labels: &[(&str, &str)]| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                // OpenMetrics counters end in `_total`, which this parser
                // (Prometheus text format) reads as untyped samples.
                prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            })
    };
    let open = [("target", "provider:openai"), ("state", "open")];
    assert_eq!(value("fusebox_breaker_state", &open), Some(1.0), "{text}");
    let closed = [("target", "provider:anthropic"), ("state", "closed")];
    assert_eq!(value("fusebox_breaker_state", &closed), Some(1.0));
    assert_eq!(value("fusebox_requests_total", &[("level", "fallback")]), Some(21.0));
    assert_eq!(value("fusebox_fallbacks_total", &[]), Some(21.0));
    assert!(value("fusebox_attempts_total", &[("target", "provider:openai")]).unwrap() >= 5.0);
    assert!(value("fusebox_retries_total", &[("target", "provider:openai")]).unwrap() >= 1.0);
    assert!(value(
        "fusebox_limiter_available_ratio",
        &[("provider", "openai"), ("bucket", "tpm")]
    )
    .is_some());
    assert!(scrape
        .samples
        .iter()
        .any(|s| s.metric == "fusebox_request_duration_seconds"
            && matches!(s.value, prometheus_parse::Value::Histogram(_))));
    // Each target's call latencies, as a histogram whose count is its
    // finished calls.
    let calls = |target: &str| {
        scrape.samples.iter().find_map(|s| match &s.value {
            prometheus_parse::Value::Histogram(h)
                if s.metric == "fusebox_call_duration_seconds" && s.labels.get("target") == Some(target) =>
            {
                Some(h.iter().map(|b| (b.less_than, b.count)).collect::<Vec<_>>())
            }
            _ => None,
        })
    };
    let haiku = calls("provider:anthropic").expect("a histogram per target");
    let t = crate::common::entry(&f.runner, "provider:anthropic").stats.view();
    assert_eq!(
        haiku.last().map(|b| b.1),
        Some((t.ok + t.failed + t.client_errors) as f64)
    );
    assert!(
        haiku.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "cumulative: {haiku:?}"
    );
    assert_eq!(haiku.last().map(|b| b.0), Some(f64::INFINITY));
}

#[tokio::test]
async fn two_hundred_concurrent_clients_each_get_exactly_one_answer() {
    let f = Arc::new(gateway(Config::default(), GatewayOptions::default()).await);
    f.faults.set(
        &Target::provider("openai"),
        FaultSpec {
            fault: Fault::Status {
                code: 503,
                retry_after_ms: None,
            },
            rate: 0.3,
        },
    );
    let mut set = tokio::task::JoinSet::new();
    for i in 0..200 {
        let f = f.clone();
        set.spawn(async move {
            let mut body = ask("default", &format!("user-{}", i % 40));
            body["stream"] = json!(i % 2 == 0);
            let r = f.post(&body).await;
            let status = r.status().as_u16();
            let body = r.text().await.unwrap();
            (status, body)
        });
    }
    let mut ok = 0;
    while let Some(r) = set.join_next().await {
        let (status, body) = r.unwrap();
        assert!(matches!(status, 200 | 429 | 503), "{status} {body}");
        if status == 200 {
            ok += 1;
        }
    }
    assert!(ok >= 190, "{ok} of 200 answered");
    let by_level = f.runner.by_level();
    assert_eq!(
        by_level.iter().sum::<u64>(),
        200,
        "one outcome per request: {by_level:?}"
    );
}

#[tokio::test]
async fn a_client_that_goes_away_releases_its_slots_and_is_charged_what_was_reserved() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    f.faults.set(
        &Target::provider("openai"),
        FaultSpec::always(Fault::Latency { ms: 30_000 }),
    );
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let openai = f
        .runner
        .catalog()
        .providers()
        .iter()
        .position(|p| p.name == "openai")
        .unwrap();
    let in_flight = || {
        f.runner.catalog().providers()[openai]
            .limiter
            .view(f.runner.clock().now())
            .concurrency
            .0
    };
    let reserved = || f.runner.budgets().global_view(f.runner.clock().elapsed_ms()).tokens[0];
    let call = client
        .post(format!("{}/v1/chat/completions", f.base))
        .json(&ask("default", "ivan"))
        .send();
    // The call is in flight upstream when the client gives up.
    let (r, held) = tokio::join!(call, async {
        wait_for(|| in_flight() == 1).await;
        reserved()
    });
    assert!(held > 0.0, "the call holds a budget reservation");
    assert!(r.unwrap_err().is_timeout());
    // The server notices the disconnect and drops the call: its slots are
    // given back, and the tokens it may be billed for stay charged.
    wait_for(|| in_flight() == 0).await;
    assert_eq!(reserved(), held);
    let t = crate::common::entry(&f.runner, "provider:openai");
    assert_eq!(t.breaker.view(f.runner.clock().now()).probes_in_flight, 0);
    // The abandoned request still has its one outcome, and is counted apart.
    assert_eq!(f.runner.by_level(), [0, 0, 0, 0, 1]);
    assert!(f.get("/metrics").await.contains("fusebox_requests_abandoned_total 1"));
}

/// Waits (up to 10 s of real time) for something the server does on its own.
async fn wait_for(cond: impl Fn() -> bool) {
    for _ in 0..1_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not reached in 10 s");
}

#[tokio::test]
async fn bad_requests_are_refused_with_the_field_named() {
    let opts = GatewayOptions {
        max_body: 10_000,
        ..GatewayOptions::default()
    };
    let f = gateway(Config::default(), opts).await;
    let r = f
        .post(&json!({"model": "default", "messages": [{"role": "user"}]}))
        .await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "messages[0].content");
    let r = f.post(&ask("no-such-model", "x")).await;
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert!(v["error"]["message"].as_str().unwrap().contains("no-such-model"));
    // Nested deeper than the reader goes: refused naming the member, in
    // either API (not taken for a member left out).
    let nested = "[".repeat(1_000) + &"]".repeat(1_000);
    for (path, more) in [("/v1/chat/completions", ""), ("/v1/messages", r#""max_tokens":16,"#)] {
        let r = f
            .http
            .post(format!("{}{path}", f.base))
            .header("content-type", "application/json")
            .body(format!(r#"{{"model":"default",{more}"messages":{nested}}}"#))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{path}");
        let v: Value = r.json().await.unwrap();
        let said = v["error"]["message"].as_str().unwrap();
        assert!(
            said.starts_with("messages: cannot be read: recursion limit exceeded"),
            "{path}: {said}"
        );
    }
    // A cap past any integer the gateway takes is said to be too large,
    // with the largest it takes, in either API.
    for (path, field) in [
        ("/v1/chat/completions", "max_tokens"),
        ("/v1/chat/completions", "max_completion_tokens"),
        ("/v1/messages", "max_tokens"),
    ] {
        let mut huge = ask("default", "x");
        huge.as_object_mut().unwrap().remove("max_tokens");
        huge[field] = json!(4_294_967_296u64);
        let r = f
            .http
            .post(format!("{}{path}", f.base))
            .json(&huge)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{path} {field}");
        let v: Value = r.json().await.unwrap();
        let said = v["error"]["message"].as_str().unwrap();
        assert!(
            said.contains("4294967296 is too large") && said.contains("at most 2000000"),
            "{path} {field}: {said}"
        );
    }
    let mut big = ask("default", "x");
    big["messages"][1]["content"] = json!("a".repeat(20_000));
    let r = f.post(&big).await;
    assert_eq!(r.status(), 413);
    assert_eq!(header(&r, "connection"), "close", "its body was not read whole");
    assert_eq!(f.runner.by_level().iter().sum::<u64>(), 0, "refused before the runner");
}

#[tokio::test]
async fn with_a_token_every_call_needs_the_bearer() {
    let opts = GatewayOptions {
        auth_token: Some("s3cret-token".into()),
        ..GatewayOptions::default()
    };
    let f = gateway(Config::default(), opts).await;
    assert_eq!(f.post(&ask("default", "x")).await.status(), 401);
    let wrong = f
        .http
        .post(format!("{}/v1/chat/completions", f.base))
        .bearer_auth("s3cret-tokeN")
        .json(&ask("default", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let right = f
        .http
        .post(format!("{}/v1/chat/completions", f.base))
        .bearer_auth("s3cret-token")
        .json(&ask("default", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200);
    assert_eq!(f.get("/healthz").await, "ok\n", "health probes need no token");
}

#[test]
fn only_loopback_may_be_served_without_a_token() {
    assert!(!fusebox::gateway::needs_token(&"127.0.0.1:8787".parse().unwrap()));
    assert!(!fusebox::gateway::needs_token(&"[::1]:8787".parse().unwrap()));
    assert!(fusebox::gateway::needs_token(&"0.0.0.0:8787".parse().unwrap()));
    assert!(fusebox::gateway::needs_token(&"10.1.2.3:8787".parse().unwrap()));
}

#[tokio::test]
async fn embeddings_pass_through_the_named_models_breaker_limiter_and_budget() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let post = |body: Value| f.http.post(format!("{}/v1/embeddings", f.base)).json(&body).send();
    let r = post(json!({"model": "gpt-4o", "input": ["where is my order", "refund policy"], "user": "jo"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-fusebox-level"), "none");
    assert_eq!(header(&r, "x-fusebox-chain"), "gpt-4o ok");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
    assert_eq!(v["data"][1]["index"], 1);
    assert_eq!(v["data"][0]["embedding"].as_array().unwrap().len(), 16);
    let tokens = v["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(tokens > 0);
    let jo = f.runner.budgets().top_users(5, f.runner.clock().elapsed_ms());
    let jo = jo.iter().find(|u| u.user == "jo").unwrap();
    assert_eq!(
        jo.tokens[0] as u64, tokens,
        "the user is charged what the upstream counted"
    );
    // A model whose provider has no embeddings endpoint is the caller's to
    // change (a 400 saying so); an open breaker refuses at once.
    let r = post(json!({"model": "claude-haiku", "input": "x"})).await.unwrap();
    assert_eq!(r.status(), 400);
    let said: Value = r.json().await.unwrap();
    let said = said["error"]["message"].as_str().unwrap().to_string();
    assert!(said.contains("embeddings"), "{said}");
    f.runner
        .operations()
        .apply(
            &serde_json::from_value(json!({"action": "force_open", "target": "provider:openai"})).unwrap(),
            &Issuer::operator("test"),
        )
        .unwrap();
    let r = post(json!({"model": "gpt-4o", "input": "x"})).await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(header(&r, "x-fusebox-chain"), "gpt-4o skipped open");
    // Bad input names the field; an unknown model is a 404.
    let r = post(json!({"model": "gpt-4o", "input": 5.5})).await.unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["param"], "input");
    let r = post(json!({"model": "nope", "input": "x"})).await.unwrap();
    assert_eq!(r.status(), 404);
    let [none, .., failed] = f.runner.by_level();
    assert_eq!((none, failed), (1, 2), "one outcome per call that reached the runner");
}

/// Readiness says whether this process can take a request, not whether
/// its providers are well: with every provider's breaker open it stays
/// ready (and its callers get a clear 503), so a Service does not take
/// every instance out of rotation in an outage.
#[tokio::test]
async fn a_provider_outage_leaves_the_gateway_ready() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let readyz = || async {
        let r = f.http.get(format!("{}/readyz", f.base)).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(readyz().await, (200, "ready\n".to_string()));
    let providers: Vec<String> = f
        .runner
        .catalog()
        .providers()
        .iter()
        .map(|p| p.name.to_string())
        .collect();
    for p in &providers {
        let open = json!({"action": "force_open", "target": format!("provider:{p}")});
        f.runner
            .operations()
            .apply(&serde_json::from_value(open).unwrap(), &Issuer::operator("test"))
            .unwrap();
    }
    let r = f.post(&ask("gpt-4o", "ann")).await;
    assert_eq!(r.status(), 503, "the outage is told to the caller");
    assert_eq!(readyz().await, (200, "ready\n".to_string()), "and is not readiness");
}
