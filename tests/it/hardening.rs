//! Hostile and careless input: faults out of bounds, names no target can
//! have, commands on a read-only gateway. Each is refused with the field
//! named, and nothing of it is kept.

use crate::gateway::{gateway, Fleet};
use fusebox::config::Config;
use fusebox::gateway::GatewayOptions;
use fusebox::provider::fault::FaultSpec;
use serde_json::{json, Value};

impl Fleet {
    async fn command(&self, body: &Value) -> (u16, Value) {
        let r = self
            .http
            .post(format!("{}/_fusebox/commands", self.base))
            .json(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }
}

fn set_fault(fault: Value, rate: f64) -> Value {
    json!({"action": "set_fault", "target": "provider:openai", "fault": {"fault": fault, "rate": rate}})
}

#[tokio::test]
async fn faults_out_of_bounds_are_refused_naming_the_field() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let cases = [
        (
            json!({"type": "keep_alive_stall", "ms": u64::MAX}),
            1.0,
            "fault.fault.ms",
        ),
        (
            json!({"type": "latency", "ms": 1_000_000_000u64}),
            1.0,
            "fault.fault.ms",
        ),
        (json!({"type": "status", "code": 0}), 1.0, "fault.fault.code"),
        (json!({"type": "status", "code": 200}), 1.0, "fault.fault.code"),
        (json!({"type": "status", "code": 999}), 1.0, "fault.fault.code"),
        (json!({"type": "status", "code": 503}), -1.0, "fault.rate"),
        (json!({"type": "status", "code": 503}), 2.0, "fault.rate"),
        (json!({"type": "status", "code": 503}), 1e308, "fault.rate"),
        (
            json!({"type": "slow_tokens", "tokens_per_s": 0.0}),
            1.0,
            "fault.fault.tokens_per_s",
        ),
        (
            json!({"type": "slow_tokens", "tokens_per_s": -1.0}),
            1.0,
            "fault.fault.tokens_per_s",
        ),
        (
            json!({"type": "token_blowup", "factor": 4_000_000_000u32}),
            1.0,
            "fault.fault.factor",
        ),
    ];
    for (fault, rate, field) in cases {
        let (status, v) = f.command(&set_fault(fault.clone(), rate)).await;
        assert_eq!(status, 400, "{fault} at {rate}: {v}");
        assert_eq!(v["error"]["param"], field, "{fault}: {v}");
    }
    assert!(f.faults.all().is_empty(), "nothing was set: {:?}", f.faults.all());
    // In bounds, it applies.
    let (status, _) = f
        .command(&set_fault(json!({"type": "keep_alive_stall", "ms": 2_000}), 0.5))
        .await;
    assert_eq!(status, 200);
    assert_eq!(f.faults.all().len(), 1);
}

#[tokio::test]
async fn a_target_no_target_can_have_is_refused_and_not_kept() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let mut events = f.runner.events().subscribe();
    let huge = "x".repeat(60_000);
    for target in [huge.as_str(), "provider:open\nai", ""] {
        let (status, v) = f.command(&json!({"action": "force_open", "target": target})).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["param"], "target");
        assert!(
            v["error"]["message"].as_str().unwrap().len() < 400,
            "the message is bounded"
        );
    }
    // What the events keep of it is bounded too.
    let mut kept = 0;
    while let Ok(ev) = events.try_recv() {
        if let fusebox::telemetry::events::EventKind::CommandRefused { sent, reason, .. } = ev.kind {
            assert!(
                sent.len() <= 128 && reason.len() < 400,
                "{} {}",
                sent.len(),
                reason.len()
            );
            kept += 1;
        }
    }
    assert_eq!(kept, 3, "each refusal is still on the audit trail");
}

#[tokio::test]
async fn a_readonly_gateway_refuses_commands() {
    let opts = GatewayOptions {
        readonly: true,
        ..GatewayOptions::default()
    };
    let f = gateway(Config::default(), opts).await;
    let (status, v) = f
        .command(&json!({"action": "force_open", "target": "provider:openai"}))
        .await;
    assert_eq!(status, 403);
    assert!(v["error"]["message"].as_str().unwrap().contains("--readonly"), "{v}");
    let t = crate::common::entry(&f.runner, "provider:openai");
    assert_ne!(
        t.breaker.view(f.runner.clock().now()).state,
        Some(fusebox::resilience::breaker::BreakerState::ForcedOpen)
    );
}

#[test]
fn every_way_of_setting_a_fault_shares_one_check() {
    let spec: FaultSpec =
        serde_json::from_value(json!({"fault": {"type": "keep_alive_stall", "ms": u64::MAX}})).unwrap();
    let e = spec.check().unwrap_err();
    assert_eq!(e.field, "fault.ms");
    // A scenario file with it is refused at load, naming the step.
    let text = r#"
name = "x"
description = "x"
rps = 1.0
users = 1
[[timeline]]
at_s = 1
target = "provider:openai"
fault = { type = "latency", ms = 99999999999 }
"#;
    let e = fusebox::traffic::load::scenario::Scenario::parse(text, "x.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("timeline[0].fault.ms"), "{e}");
}

#[tokio::test]
async fn names_a_caller_gives_are_bounded_text() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let long = "u".repeat(300);
    let r = f.post(&crate::gateway::ask("default", &long)).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "user", "{v}");
    let send = |name: &'static str, value: reqwest::header::HeaderValue| {
        f.http
            .post(format!("{}/v1/chat/completions", f.base))
            .header(name, value)
            .json(&json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    let r = send(
        "x-fusebox-user",
        reqwest::header::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "x-fusebox-user", "{v}");
    let r = send(
        "x-fusebox-session",
        reqwest::header::HeaderValue::from_str(&long).unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 400);
    let r = f.post(&crate::gateway::ask(&"m".repeat(300), "u")).await;
    assert_eq!(r.status(), 400);
    assert_eq!(f.runner.by_level().iter().sum::<u64>(), 0, "refused before the runner");
    assert!(f.runner.budgets().top_users(8, 0).is_empty(), "no key kept");
}

#[tokio::test]
async fn a_garbled_chunked_body_is_a_bad_request_and_a_big_command_a_json_413() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let addr = f.base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut got = vec![0u8; 4096];
    let n = s.read(&mut got).await.unwrap();
    let head = String::from_utf8_lossy(&got[..n]).to_lowercase();
    assert!(head.starts_with("http/1.1 400"), "{head}");
    assert!(
        head.contains("connection: close"),
        "the body was not read whole: {head}"
    );
    let big = json!({"action": "force_open", "target": "x".repeat(100_000)});
    let (status, v) = f.command(&big).await;
    assert_eq!(status, 413);
    assert!(v["error"]["message"].as_str().unwrap().contains("larger than"), "{v}");
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let opts = GatewayOptions {
        auth_token: Some("t0ken".into()),
        ..GatewayOptions::default()
    };
    let f = gateway(Config::default(), opts).await;
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let r = f
            .http
            .get(format!("{}/v1/models", f.base))
            .header("authorization", format!("{scheme} t0ken"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{scheme}");
    }
    let r = f
        .http
        .get(format!("{}/v1/models", f.base))
        .header("authorization", "Basic t0ken")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

/// A request head past the bound is a 431; one of ordinary size (headers
/// of a few KiB, as SDKs send) is served.
#[tokio::test]
async fn an_oversized_request_head_is_refused_and_an_ordinary_one_served() {
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let get = |value: String| {
        f.http
            .get(format!("{}/v1/models", f.base))
            .header("x-padding", value)
            .send()
    };
    let r = get("p".repeat(fusebox::limits::MAX_HEAD_BYTES + 1)).await.unwrap();
    assert_eq!(r.status(), 431);
    let r = get("p".repeat(8 * 1024)).await.unwrap();
    assert_eq!(r.status(), 200);
}

/// Open connections as `/metrics` says.
async fn open_connections(f: &Fleet) -> u64 {
    let text = f
        .http
        .get(format!("{}/metrics", f.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("fusebox_connections_open "))
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_flood_of_half_sent_headers_neither_blocks_nor_stays() {
    use tokio::io::AsyncWriteExt;
    let opts = GatewayOptions {
        conns: fusebox::gateway::ConnLimits {
            max_connections: 1_000,
            header_timeout: std::time::Duration::from_millis(300),
            ..Default::default()
        },
        ..GatewayOptions::default()
    };
    let f = gateway(Config::default(), opts).await;
    let addr = f.base.trim_start_matches("http://").to_string();
    let mut flood = Vec::new();
    for _ in 0..400 {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        flood.push(s);
    }
    // While they hang, the gateway answers.
    let health = f.http.get(format!("{}/healthz", f.base)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let r = f.post(&crate::gateway::ask("default", "u")).await;
    assert_eq!(r.status(), 200);
    assert!(open_connections(&f).await >= 400);
    // After the header timeout the server has closed them.
    let mut open = u64::MAX;
    for _ in 0..200 {
        open = open_connections(&f).await;
        if open <= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(open <= 2, "{open} connections still open");
    drop(flood);
}

#[tokio::test]
async fn connections_past_the_limit_take_the_slots_of_idle_ones() {
    let opts = GatewayOptions {
        conns: fusebox::gateway::ConnLimits {
            max_connections: 50,
            header_timeout: std::time::Duration::from_secs(3600),
            ..Default::default()
        },
        ..GatewayOptions::default()
    };
    let f = gateway(Config::default(), opts).await;
    let addr = f.base.trim_start_matches("http://").to_string();
    let mut idle = Vec::new();
    for _ in 0..80 {
        idle.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    // The 30 past the limit, then this scrape, each took the slot of the
    // connection idle longest; none was refused.
    let text = f.get("/metrics").await;
    let count = |name: &str| -> u64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("{text}"))
    };
    assert_eq!(count("fusebox_connections_evicted_total "), 31);
    assert_eq!(count("fusebox_connections_refused_total "), 0);
    assert_eq!(count("fusebox_connections_open "), 50);
    drop(idle);
}

#[tokio::test]
async fn a_request_no_budget_can_ever_hold_is_a_bad_request_not_a_429() {
    let mut cfg = Config::default();
    cfg.budgets.user_tokens_per_minute = 10_000;
    let f = gateway(cfg, GatewayOptions::default()).await;
    let mut body = crate::gateway::ask("default", "u");
    body["max_tokens"] = json!(2_000_000);
    let r = f.post(&body).await;
    assert_eq!(r.status(), 400);
    assert!(r.headers().get("retry-after").is_none());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "max_tokens");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("can never be served"),
        "{v}"
    );
    // A cap the budget can hold is served.
    body["max_tokens"] = json!(6_000);
    assert_eq!(f.post(&body).await.status(), 200);
}

/// An embeddings input no budget window can ever hold is the client's to
/// change: a 400 saying why, not a 429 to wait on.
#[tokio::test]
async fn an_embedding_no_budget_can_ever_hold_is_a_bad_request_not_a_429() {
    let mut cfg = Config::default();
    cfg.budgets.user_tokens_per_minute = 100;
    let f = gateway(cfg, GatewayOptions::default()).await;
    let post = |input: String| {
        f.http
            .post(format!("{}/v1/embeddings", f.base))
            .json(&json!({"model": "gpt-4o", "input": input, "user": "u"}))
            .send()
    };
    let r = post("word ".repeat(2_000)).await.unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.headers().get("retry-after").is_none());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "input", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("can never be served"),
        "{v}"
    );
    assert_eq!(post("where is my order".into()).await.unwrap().status(), 200);
}
