//! Tenants apart, each attack tried as a hostile tenant would on loopback:
//! a call asking for many choices spends no more than its user's budget; a
//! key's routes bound every hop of a fallback chain; a session, chat or
//! MCP, is its opener's alone; a gateway beyond loopback starts only with
//! its doors guarded; the admin endpoints are closed to callers once keys
//! exist; a stdio MCP server sees none of the gateway's secrets.

use crate::common::mcp::{call, serve_mcp_with, text, upstream, with_orders, Orders};
use crate::common::redis::Redis;
use crate::faithful::{config, Proxy, ROUTES};
use fusebox::config::access::{Grant, OperatorConfig, SecretHash};
use fusebox::config::{Config, KeyConfig};
use fusebox::gateway::GatewayOptions;
use fusebox::mcp::sessions::McpLimits;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const ALICE: &str = "sk-alice-0123456789";
const BOB: &str = "sk-bob-0123456789";
const ANA: &str = "op-ana-0123456789";

fn key(secret: &str, user: &str, routes: &[&str]) -> KeyConfig {
    KeyConfig {
        hash: SecretHash::of(secret),
        user: user.into(),
        routes: routes.iter().map(|r| r.to_string()).collect(),
        mcp: Vec::new(),
        expires: None,
        budgets: None,
        sub_users: false,
        priority: Default::default(),
    }
}

fn with_keys(mut cfg: Config, keys: &[(&str, KeyConfig)]) -> Config {
    cfg.keys = keys.iter().map(|(n, k)| (n.to_string(), k.clone())).collect();
    cfg.validate("test").unwrap();
    cfg
}

fn chat(model: &str) -> Value {
    json!({"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "Where is order #38100?"}]})
}

impl Proxy {
    async fn call_as(&self, secret: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
        let mut r = self
            .http
            .post(format!("{}/v1/chat/completions", self.base))
            .bearer_auth(secret)
            .json(body);
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let r = r.send().await.unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    /// Tokens billed to `user` in the current minute.
    fn spent_this_minute(&self, user: &str) -> f64 {
        let now = self.runner.clock().elapsed_ms();
        self.runner
            .budgets()
            .top_users(100, now)
            .into_iter()
            .find(|u| u.user == user)
            .map_or(0.0, |u| u.tokens[0])
    }
}

/// `n = 128` multiplies what a call may produce by 128: all of it is
/// reserved before the call, so the user's spend stays within its
/// budget (settled to what the choices used), and a call whose worst case
/// alone is over the budget is a 400, not served.
#[tokio::test]
async fn many_choices_are_reserved_whole_and_spend_stays_within_the_budget() {
    let mut cfg = config(ROUTES);
    cfg.budgets.user_tokens_per_minute = 5_000;
    let p = Proxy::start(cfg).await;
    let mut body = chat("default");
    body["n"] = json!(128);
    body["user"] = json!("mallory");
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(p.post("/v1/chat/completions", &body).await.status().as_u16());
    }
    // Each call reserves 128 × 16 output tokens and its prompt (about 2,060)
    // and uses 25 + 128 × 12 = 1,561: two fit in 5,000, a third does not.
    assert_eq!(statuses, [200, 200, 429, 429, 429, 429]);
    let spent = p.spent_this_minute("mallory");
    assert_eq!(spent, 2.0 * 1_561.0, "settled to what the choices used");
    assert!(spent <= 5_000.0);
    assert_eq!(p.upstream.received().len(), 2, "refused calls never reach the provider");
    // A worst case no budget window can hold is the client's to fix.
    body["max_tokens"] = json!(64);
    body["user"] = json!("trent");
    let r = p.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"].as_str().unwrap().contains("can never be served"),
        "{v}"
    );
}

/// A key allowed only `gpt-4o` is not answered by `claude-haiku` when
/// gpt-4o fails, though gpt-4o's route falls back to it; a key allowed
/// the route is.
#[tokio::test]
async fn a_key_s_routes_bound_every_hop_of_a_fallback_chain() {
    let cfg = with_keys(
        config(ROUTES),
        &[
            ("alice-app", key(ALICE, "alice", &["gpt-4o"])),
            ("bob-app", key(BOB, "bob", &["default"])),
        ],
    );
    let p = Proxy::start(cfg).await;
    p.upstream.set_model_down("gpt-4o");
    let (status, v) = p.call_as(ALICE, &chat("gpt-4o"), &[]).await;
    assert_eq!(status, 503, "{v}");
    let anthropic = |p: &Proxy| {
        p.upstream
            .received()
            .iter()
            .filter(|r| r.api == crate::common::strict::Api::Anthropic)
            .count()
    };
    assert_eq!(anthropic(&p), 0, "claude-haiku is beyond alice's key");
    // Nor may it name the route that reaches claude-haiku.
    assert_eq!(p.call_as(ALICE, &chat("default"), &[]).await.0, 403);
    let (status, v) = p.call_as(BOB, &chat("default"), &[]).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(anthropic(&p), 1, "the route's chain is within bob's key");
}

/// A session belongs to the user that opened it: Alice naming Bob's
/// session neither spends nor blocks his quota, she gets one of her own.
#[tokio::test]
async fn a_chat_session_is_its_user_s_alone() {
    let mut cfg = with_keys(
        config(ROUTES),
        &[
            ("alice-app", key(ALICE, "alice", &[])),
            ("bob-app", key(BOB, "bob", &[])),
        ],
    );
    cfg.sessions.max_steps = 1;
    let p = Proxy::start(cfg).await;
    let session = [("x-fusebox-session", "bob-42")];
    assert_eq!(p.call_as(BOB, &chat("default"), &session).await.0, 200);
    let (status, v) = p.call_as(BOB, &chat("default"), &session).await;
    assert_eq!(status, 429, "bob's one step is used: {v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("step quota"), "{v}");
    // Alice names it: a session of her own, with its own step.
    assert_eq!(p.call_as(ALICE, &chat("default"), &session).await.0, 200);
    assert_eq!(p.call_as(ALICE, &chat("default"), &session).await.0, 429);
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#;

/// An MCP request to `url` with `secret`, in session `session`.
async fn mcp(
    url: &str,
    method: reqwest::Method,
    secret: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, Option<String>, String) {
    let mut r = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(secret)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-06-18")
        .body(body.to_string());
    if let Some(s) = session {
        r = r.header("mcp-session-id", s);
    }
    let r = r.send().await.unwrap();
    let id = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (r.status().as_u16(), id, r.text().await.unwrap_or_default())
}

async fn keyed_mcp(limits: McpLimits) -> String {
    let url = upstream(Arc::new(Orders::default())).await;
    let cfg = with_keys(
        with_orders(Some(&url), Config::default()),
        &[
            ("alice-app", key(ALICE, "alice", &[])),
            ("bob-app", key(BOB, "bob", &[])),
        ],
    );
    let opts = GatewayOptions {
        mcp_limits: limits,
        ..GatewayOptions::default()
    };
    serve_mcp_with(cfg, Default::default(), opts).await.0
}

/// An MCP session is the key's that opened it: another key naming its id
/// is told there is no such session (as for one that never was), and
/// cannot end it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_is_its_key_s_alone() {
    use reqwest::Method;
    let url = keyed_mcp(McpLimits::default()).await;
    let (status, session, _) = mcp(&url, Method::POST, ALICE, None, INITIALIZE).await;
    assert_eq!(status, 200);
    let session = session.expect("a session");
    let (status, _, body) = mcp(&url, Method::POST, BOB, Some(&session), LIST).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("Session not found"), "{body}");
    assert_eq!(mcp(&url, Method::DELETE, BOB, Some(&session), "").await.0, 404);
    let (status, _, body) = mcp(&url, Method::POST, ALICE, Some(&session), LIST).await;
    assert_eq!(status, 200, "still alice's: {body}");
    assert!(body.contains("get_order"), "{body}");
    assert_eq!(mcp(&url, Method::DELETE, ALICE, Some(&session), "").await.0, 204);
    assert_eq!(mcp(&url, Method::POST, ALICE, Some(&session), LIST).await.0, 404);
}

/// MCP sessions are bounded per key and in all, refused past the bound
/// with a JSON-RPC error the client can read; and a session header the
/// chat path would refuse is refused here too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_are_bounded_per_key_and_in_all() {
    use reqwest::Method;
    let limits = McpLimits {
        sessions: 3,
        per_key: 2,
        idle: Duration::from_secs(300),
    };
    let url = keyed_mcp(limits).await;
    let mut alice = Vec::new();
    for _ in 0..2 {
        let (status, s, _) = mcp(&url, Method::POST, ALICE, None, INITIALIZE).await;
        assert_eq!(status, 200);
        alice.push(s.unwrap());
    }
    let (status, s, body) = mcp(&url, Method::POST, ALICE, None, INITIALIZE).await;
    assert_eq!((status, s), (429, None), "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["id"], 7, "{v}");
    assert!(v["error"]["message"].as_str().unwrap().contains("alice-app"), "{v}");
    assert_eq!(mcp(&url, Method::POST, BOB, None, INITIALIZE).await.0, 200);
    let (status, _, body) = mcp(&url, Method::POST, BOB, None, INITIALIZE).await;
    assert_eq!(status, 503, "the gateway's bound: {body}");
    // Ending one makes room.
    assert_eq!(mcp(&url, Method::DELETE, ALICE, Some(&alice[0]), "").await.0, 204);
    assert_eq!(mcp(&url, Method::POST, BOB, None, INITIALIZE).await.0, 200);
    let long = "s".repeat(300);
    let r = reqwest::Client::new()
        .post(&url)
        .bearer_auth(ALICE)
        .header("accept", "application/json, text/event-stream")
        .header("x-fusebox-session", long)
        .body(INITIALIZE)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("longer than 256 bytes"));
}

/// Once caller keys exist, a caller key opens no admin endpoint, and
/// without operator tokens they are closed to everyone (loopback too).
#[tokio::test]
async fn the_admin_endpoints_are_closed_to_callers_once_keys_exist() {
    let cfg = with_keys(config(ROUTES), &[("alice-app", key(ALICE, "alice", &[]))]);
    let p = Proxy::start(cfg.clone()).await;
    let force = json!({"action": "force_open", "target": "provider:openai"});
    for secret in [None, Some(ALICE)] {
        for path in ["/metrics", "/_fusebox/snapshot"] {
            let mut r = p.http.get(format!("{}{path}", p.base));
            if let Some(s) = secret {
                r = r.bearer_auth(s);
            }
            let r = r.send().await.unwrap();
            assert_eq!(r.status(), 401, "{path}");
        }
        let mut r = p.http.post(format!("{}/_fusebox/commands", p.base)).json(&force);
        if let Some(s) = secret {
            r = r.bearer_auth(s);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 401);
        let v: Value = r.json().await.unwrap();
        assert!(
            v["error"]["message"].as_str().unwrap().contains("operator token"),
            "{v}"
        );
    }
    let now = p.runner.clock().now();
    assert!(
        p.runner.catalog().registry().iter().all(|t| t.breaker.would_admit(now)),
        "nothing applied"
    );
    // With an operator token, its holder operates.
    let mut cfg = cfg;
    cfg.operators = [(
        "ana".to_string(),
        OperatorConfig {
            hash: SecretHash::of(ANA),
            scope: Grant::Operate,
        },
    )]
    .into();
    let p = Proxy::start(cfg).await;
    let r = p
        .http
        .post(format!("{}/_fusebox/commands", p.base))
        .bearer_auth(ANA)
        .json(&force)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

fn fusebox(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(args)
        .output()
        .expect("run fusebox")
}

/// Fleet mode beyond loopback with no caller keys anywhere refuses to
/// start, saying why and what to do; with `--allow-anonymous` it starts;
/// once the fleet's store has a key, it starts and calls need one.
#[test]
fn a_fleet_gateway_beyond_loopback_needs_keys_or_allow_anonymous() {
    let Some(redis) = Redis::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fb.toml");
    std::fs::write(
        &cfg,
        format!(
            "[operators.ana]\nhash = \"{}\"\nscope = \"operate\"\n",
            SecretHash::of(ANA)
        ),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let url = redis.url();
    let base = [
        "serve",
        "--headless",
        "--listen",
        "0.0.0.0:0",
        "--config",
        cfg,
        "--state",
        &url,
    ];
    let o = fusebox(&base);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("not a loopback address"), "{err}");
    assert!(
        err.contains("--allow-anonymous") && err.contains("fusebox keys new"),
        "{err}"
    );
    let anonymous = crate::common::Serve::start_with(&[&base[2..], &["--allow-anonymous"]].concat());
    let body = r#"{"model":"default","messages":[{"role":"user","content":"hi"}]}"#;
    assert_eq!(
        blocking_post(&anonymous.base, None, body),
        200,
        "anonymous calls are served, as asked"
    );
    drop(anonymous);
    let made = fusebox(&["keys", "new", "app", "--user", "alice", "--state", &url]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    // Shared on the store, the secret is what it prints on stdout.
    let secret = String::from_utf8_lossy(&made.stdout)
        .split_whitespace()
        .find(|w| w.starts_with("fbx_"))
        .expect("the key")
        .to_string();
    let keyed = crate::common::Serve::start_with(&base[2..]);
    assert_eq!(
        blocking_post(&keyed.base, None, body),
        401,
        "a key is needed from the start"
    );
    assert_eq!(blocking_post(&keyed.base, Some(&secret), body), 200);
}

/// POSTs `body` to `base`'s chat completions with `secret`, from a
/// thread of its own (the test is not async); the status.
fn blocking_post(base: &str, secret: Option<&str>, body: &str) -> u16 {
    let url = format!("{base}/v1/chat/completions");
    let (secret, body) = (secret.map(str::to_string), body.to_string());
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let mut r = reqwest::Client::new()
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body);
                if let Some(s) = secret {
                    r = r.bearer_auth(s);
                }
                r.send().await.unwrap().status().as_u16()
            })
    })
    .join()
    .unwrap()
}

/// A config file in `dir`: `before`, then the stdio orders server with
/// `server` lines of its own; its path.
fn with_stdio_orders(dir: &tempfile::TempDir, before: &str, server: &str) -> String {
    let cfg = dir.path().join("fb.toml");
    let orders = crate::common::mcp::stdio_orders();
    let text = format!(
        "{before}[mcp.orders]\ncommand = [{:?}]\n{server}",
        orders.display().to_string()
    );
    std::fs::write(&cfg, text).unwrap();
    cfg.to_str().unwrap().to_string()
}

/// A stdio MCP server starts with a clean environment: none of the
/// gateway's provider keys or its token, only PATH, HOME and what its
/// config names; what it says on stderr goes to the log, not the console.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_mcp_server_sees_none_of_the_gateway_s_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = with_stdio_orders(&dir, "", "env = { ORDERS_REGION = \"${TEST_REGION}\" }\n");
    let logs = dir.path().join("logs");
    let log_dir = logs.to_str().unwrap().to_string();
    let serve = tokio::task::spawn_blocking(move || {
        let args = [
            "--config",
            &cfg,
            "--auth-token-env",
            "GATEWAY_TOKEN",
            "--log-dir",
            &log_dir,
        ];
        let envs = [
            ("OPENAI_API_KEY", "sk-live-provider-secret"),
            ("ANTHROPIC_API_KEY", "sk-ant-provider-secret"),
            ("GATEWAY_TOKEN", "gateway-token-secret"),
            ("TEST_REGION", "eu-west"),
        ];
        crate::common::Serve::start_with_env(&args, &envs)
    })
    .await
    .unwrap();
    let url = format!("{}/mcp", serve.base);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url)
            .auth_header("gateway-token-secret"),
    );
    let through = rmcp::ServiceExt::serve((), transport).await.expect("an MCP session");
    let env = text(&through.call_tool(call("environment", json!({}))).await.unwrap());
    for secret in [
        "sk-live-provider-secret",
        "sk-ant-provider-secret",
        "gateway-token-secret",
    ] {
        assert!(!env.contains(secret), "{env}");
    }
    let names: Vec<&str> = env.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
    assert!(
        names.iter().all(|n| ["HOME", "ORDERS_REGION", "PATH"].contains(n)),
        "{names:?}"
    );
    assert!(env.contains("ORDERS_REGION=eu-west"), "{env}");
    // Its stderr is in the log.
    let logged: String = std::fs::read_dir(&logs)
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap())
        .collect();
    assert!(logged.contains("orders server ready"), "{logged}");
}

/// What `/mcp` refuses is refused as JSON-RPC says, in a body MCP
/// clients read: a body that is not JSON is a parse error (-32700), JSON
/// that is not one message an invalid request (-32600), each a 400 (not
/// rmcp's 415), opening a session or in one; rmcp's own refusals (406
/// without the accepted types, 405) keep their status with a JSON-RPC
/// error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_refusals_are_json_rpc_errors() {
    use reqwest::Method;
    let url = keyed_mcp(McpLimits::default()).await;
    let error = |body: &str| -> (i64, String) {
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
        (
            v["error"]["code"].as_i64().unwrap(),
            v["error"]["message"].as_str().unwrap().to_string(),
        )
    };
    let (status, session, _) = mcp(&url, Method::POST, ALICE, None, INITIALIZE).await;
    assert_eq!(status, 200);
    for session in [None, session.as_deref()] {
        let (status, _, body) = mcp(&url, Method::POST, ALICE, session, "{nope").await;
        assert_eq!((status, error(&body).0), (400, -32700), "{session:?}: {body}");
        for not_one in [r#"{"hello":1}"#, "[]", r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#] {
            let (status, _, body) = mcp(&url, Method::POST, ALICE, session, not_one).await;
            assert_eq!((status, error(&body).0), (400, -32600), "{session:?} {not_one}: {body}");
        }
    }
    let r = reqwest::Client::new()
        .post(&url)
        .bearer_auth(ALICE)
        .header("content-type", "application/json")
        .body(INITIALIZE)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
    let (code, message) = error(&r.text().await.unwrap());
    assert_eq!(code, -32600);
    assert!(
        message.contains("accept both application/json and text/event-stream"),
        "{message}"
    );
    let (status, _, body) = mcp(&url, Method::PUT, ALICE, None, "").await;
    assert_eq!((status, error(&body).0), (405, -32600), "{body}");
}

/// What one client can throw at `serve` to grow it: 10 watchers of every
/// call's record that never read, 20,000 MCP `initialize`s, 20,000 calls
/// each naming a session of its own. Each is bounded: the process stays
/// under the bound `docs/limits.md` states, the watchers are dropped and
/// counted, the sessions past the bound refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_s_memory_stays_bounded_whatever_one_client_throws_at_it() {
    use tokio::io::AsyncWriteExt;
    // An upstream that answers at once, so the attack is all that takes time.
    let mock = fusebox::mockserver::MockServer::instant(fusebox::clock::Seed(3), Arc::default());
    let upstream = mock.spawn("127.0.0.1:0").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fast = format!(
        "[providers.fast]\nkind = \"openai-compatible\"\nbase_url = \"http://{upstream}/v1\"\napi_key_env = \"FAST_KEY\"\n\
         [models.gpt-4o]\nprovider = \"fast\"\ninput_per_m = 2.5\noutput_per_m = 10.0\n\
         [routes.default]\nchain = [\"gpt-4o\"]\n"
    );
    let cfg = with_stdio_orders(&dir, &fast, "");
    let serve = tokio::task::spawn_blocking(move || {
        crate::common::Serve::start_with_env(&["--config", &cfg], &[("FAST_KEY", "mock-key")])
    })
    .await
    .unwrap();
    let base = serve.base.clone();
    let started_kb = serve.rss_kb();
    let host = base.trim_start_matches("http://").to_string();
    let mut watchers = Vec::new();
    for _ in 0..10 {
        // A small window, so the kernel's buffers do not take the backlog.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut s = socket.connect(host.parse().unwrap()).await.unwrap();
        let ask = format!("GET /_fusebox/events?records=calls HTTP/1.1\r\nHost: {host}\r\n\r\n");
        s.write_all(ask.as_bytes()).await.unwrap();
        watchers.push(s); // never read
    }
    let http = reqwest::Client::new();
    let statuses = |n: usize, make: Arc<dyn Fn(usize) -> reqwest::RequestBuilder + Send + Sync>| async move {
        let mut counts = std::collections::BTreeMap::new();
        let mut tasks = tokio::task::JoinSet::new();
        for lane in 0..16 {
            let make = make.clone();
            tasks.spawn(async move {
                let mut seen = Vec::new();
                for i in (lane..n).step_by(16) {
                    seen.push(make(i).send().await.map_or(0, |r| r.status().as_u16()));
                }
                seen
            });
        }
        while let Some(seen) = tasks.join_next().await {
            for s in seen.unwrap() {
                *counts.entry(s).or_insert(0) += 1;
            }
        }
        counts
    };
    let (h, url) = (http.clone(), format!("{base}/mcp"));
    let initialized = statuses(
        20_000,
        Arc::new(move |_| {
            h.post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(INITIALIZE)
        }),
    )
    .await;
    let (h, url) = (http.clone(), format!("{base}/v1/chat/completions"));
    let called = statuses(
        20_000,
        Arc::new(move |i| {
            h.post(&url).header("x-fusebox-session", format!("{i:0>256}")).json(
                &json!({"model": "default", "max_tokens": 16, "user": format!("user-{i}"),
                              "messages": [{"role": "user", "content": "hi"}]}),
            )
        }),
    )
    .await;
    let rss_mb = serve.rss_kb() / 1024;
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let dropped = metrics
        .lines()
        .find_map(|l| l.strip_prefix("fusebox_watchers_dropped_total "))
        .unwrap_or("?")
        .to_string();
    eprintln!(
        "serve RSS {rss_mb} MB (from {} MB); initialize: {initialized:?}; calls: {called:?}; watchers dropped {dropped}",
        started_kb / 1024
    );
    assert_eq!(
        initialized.get(&200),
        Some(&McpLimits::default().sessions),
        "{initialized:?}"
    );
    assert_eq!(initialized.get(&503), Some(&(20_000 - McpLimits::default().sessions)));
    assert_eq!(called.get(&200), Some(&20_000), "{called:?}");
    assert_eq!(dropped, "10", "every stalled watcher dropped");
    assert!(rss_mb < SERVE_RSS_BOUND_MB, "serve grew to {rss_mb} MB");
    drop(watchers);
}

/// The bound `docs/limits.md` states for `serve` under one hostile client.
const SERVE_RSS_BOUND_MB: u64 = 300;

/// A provider short of capacity sheds a waiting call with 429, a
/// Retry-After and the reason; `x-fusebox-priority` is honoured only as
/// far as the caller's key allows, and a bad one is refused naming it.
#[tokio::test]
async fn a_shed_call_says_why_and_a_key_caps_its_priority() {
    let mut cfg = config("[routes.solo]\nchain = [\"gpt-4o\"]\n");
    cfg.providers.get_mut("openai").unwrap().concurrency = 1;
    let q = &mut cfg.limiter.queue;
    q.enabled = true;
    (q.deadline_ms.critical, q.deadline_ms.default, q.deadline_ms.batch) = (1, 1, 1);
    let ops = KeyConfig {
        priority: fusebox::config::Priority::Critical,
        ..key(BOB, "ops", &[])
    };
    let p = Proxy::start(with_keys(cfg, &[("alice", key(ALICE, "alice", &[])), ("ops", ops)])).await;
    // The one slot is taken: every call waits, and is shed at its deadline.
    let openai = crate::common::provider_slot(&p.runner, "openai");
    let held = openai.limiter.try_acquire(40, 10, tokio::time::Instant::now()).unwrap();
    let shed = |secret: &'static str, asked: &'static str| {
        let p = &p;
        async move {
            let r = p
                .http
                .post(format!("{}/v1/chat/completions", p.base))
                .bearer_auth(secret)
                .header("x-fusebox-priority", asked)
                .json(&chat("solo"))
                .send()
                .await
                .unwrap();
            let after = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
            let body: Value = r.json().await.unwrap();
            (body["error"]["message"].as_str().unwrap_or_default().to_string(), after)
        }
    };
    // Alice's key allows `default` at most: asking `critical` gets that.
    let (message, after) = shed(ALICE, "critical").await;
    assert!(
        message.contains("shed: provider `openai` is short of capacity and this default call waited its deadline"),
        "{message}"
    );
    assert_eq!(after.as_deref(), Some("1"));
    let (message, _) = shed(BOB, "critical").await;
    assert!(message.contains("this critical call"), "{message}");
    let (message, _) = shed(BOB, "batch").await;
    assert!(message.contains("this batch call"), "{message}");
    let (status, body) = p
        .call_as(ALICE, &chat("solo"), &[("x-fusebox-priority", "urgent")])
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "x-fusebox-priority", "{body}");
    let q = openai.limiter.view(tokio::time::Instant::now()).queue.unwrap();
    assert_eq!((q.waiting, q.shed), ([0, 0, 0], [1, 1, 1]));
    assert_eq!(q.shed_most, [("ops".to_string(), 2), ("alice".to_string(), 1)]);
    // With its slot back, the provider answers.
    openai.limiter.release(held, tokio::time::Instant::now());
    let (status, _) = p.call_as(ALICE, &chat("solo"), &[]).await;
    assert_eq!(status, 200);
}

/// Without keys, `x-fusebox-priority` can make a call less urgent but no
/// more than the operator gives its tenant or route, unless the config
/// trusts callers.
#[tokio::test]
async fn without_keys_a_callers_priority_is_the_operators() {
    let shed_as = |trust: bool| async move {
        let mut cfg = config(
            "[routes.solo]\nchain = [\"gpt-4o\"]\n\n[limiter.queue.tenants.ops]\nusers = [\"pager\"]\npriority = \"critical\"\n",
        );
        cfg.providers.get_mut("openai").unwrap().concurrency = 1;
        let q = &mut cfg.limiter.queue;
        q.enabled = true;
        q.trust_priority = trust;
        (q.deadline_ms.critical, q.deadline_ms.default, q.deadline_ms.batch) = (1, 1, 1);
        let p = Proxy::start(cfg).await;
        let openai = crate::common::provider_slot(&p.runner, "openai");
        let held = openai.limiter.try_acquire(40, 10, tokio::time::Instant::now()).unwrap();
        let mut said = Vec::new();
        for (user, asked) in [("flood", "critical"), ("flood", "batch"), ("pager", "critical")] {
            let r = p
                .http
                .post(format!("{}/v1/chat/completions", p.base))
                .header("x-fusebox-user", user)
                .header("x-fusebox-priority", asked)
                .json(&chat("solo"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 429);
            let body: Value = r.json().await.unwrap();
            let m = body["error"]["message"].as_str().unwrap_or_default().to_string();
            said.push(
                ["critical", "default", "batch"]
                    .into_iter()
                    .find(|p| m.contains(&format!("this {p} call"))),
            );
        }
        openai.limiter.release(held, tokio::time::Instant::now());
        said
    };
    assert_eq!(shed_as(false).await, [Some("default"), Some("batch"), Some("critical")]);
    assert_eq!(shed_as(true).await, [Some("critical"), Some("batch"), Some("critical")]);
}

/// With `tenant_header`, a call without a key uses the fair share of the
/// tenant the operator's edge names, whatever user it says; a key's call
/// stays its user's.
#[tokio::test]
async fn the_operators_tenant_header_names_whose_share_a_call_uses() {
    let mut cfg = config("[routes.solo]\nchain = [\"gpt-4o\"]\n");
    cfg.providers.get_mut("openai").unwrap().concurrency = 1;
    let q = &mut cfg.limiter.queue;
    q.enabled = true;
    q.tenant_header = Some("x-org".into());
    (q.deadline_ms.critical, q.deadline_ms.default, q.deadline_ms.batch) = (1, 1, 1);
    let p = Proxy::start(cfg).await;
    let openai = crate::common::provider_slot(&p.runner, "openai");
    let held = openai.limiter.try_acquire(40, 10, tokio::time::Instant::now()).unwrap();
    for (user, org) in [
        ("u1", Some("acme")),
        ("u2", Some("acme")),
        ("u3", Some("acme")),
        ("u4", None),
    ] {
        let mut r = p
            .http
            .post(format!("{}/v1/chat/completions", p.base))
            .header("x-fusebox-user", user);
        if let Some(org) = org {
            r = r.header("x-org", org);
        }
        assert_eq!(r.json(&chat("solo")).send().await.unwrap().status(), 429);
    }
    let q = openai.limiter.view(tokio::time::Instant::now()).queue.unwrap();
    assert_eq!(q.shed_most, [("acme".to_string(), 3), ("u4".to_string(), 1)]);
    openai.limiter.release(held, tokio::time::Instant::now());
}
