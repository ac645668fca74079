//! The MCP proxy with a real MCP server (an `rmcp` server on loopback) and
//! a real MCP client (`rmcp`) calling fusebox's `/mcp`: the tool list is
//! the upstream's; a call passes through; a failing tool's breaker opens
//! and then answers at once without reaching the upstream; only an
//! idempotent tool is retried; a pool of 2 admits 2 calls; a cached answer
//! is served, marked stale, when the upstream is down.

use fusebox::clock::{Clock, Seed};
use fusebox::config::{Config, ToolConfig};
use fusebox::gateway::GatewayOptions;
use fusebox::mcp::{McpTools, Upstreams};
use fusebox::runner::{Runner, RunnerParts};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the upstream server does, and what it saw.
#[derive(Default)]
struct Orders {
    /// Calls per tool: get_order, send_email.
    calls: [AtomicU32; 2],
    /// Every call fails (`isError`, as a 503 would be said).
    down: AtomicBool,
    /// get_order takes this long (ms).
    slow_ms: AtomicU32,
}

#[derive(Clone)]
struct Upstream(Arc<Orders>);

fn tools() -> Vec<Tool> {
    let schema = |props: serde_json::Value, required: &[&str]| {
        let v = json!({"type": "object", "properties": props, "required": required});
        Arc::new(v.as_object().unwrap().clone())
    };
    vec![
        Tool::new(
            "get_order",
            "Look an order up by id",
            schema(json!({"order_id": {"type": "string"}}), &["order_id"]),
        )
        .annotate(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "send_email",
            "Send an e-mail",
            schema(json!({"to": {"type": "string"}}), &["to"]),
        ),
    ]
}

impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        r: CallToolRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let i = usize::from(r.name != "get_order");
        self.0.calls[i].fetch_add(1, Ordering::SeqCst);
        let slow = self.0.slow_ms.load(Ordering::SeqCst);
        if slow > 0 {
            tokio::time::sleep(Duration::from_millis(slow.into())).await;
        }
        if self.0.down.load(Ordering::SeqCst) {
            return Ok(CallToolResult::error(vec![ContentBlock::text("orders: HTTP 503")]).into());
        }
        let args = serde_json::Value::Object(r.arguments.unwrap_or_default());
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("{} done: {args}", r.name))]).into())
    }
}

/// The upstream on loopback; its `/mcp` URL.
async fn upstream(state: Arc<Orders>) -> String {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    let svc = rmcp::transport::streamable_http_server::StreamableHttpService::new(
        move || Ok(Upstream(state.clone())),
        Arc::new(LocalSessionManager::default()),
        Default::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", svc);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

/// A client of the MCP server at `url`.
async fn client(url: &str) -> RunningService<RoleClient, ()> {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_string());
    ().serve(transport).await.expect("an MCP session")
}

/// fusebox serving `/mcp` in front of the upstream at `url`, get_order
/// with a pool of 2 (no queue), a 60 s cache and a breaker that opens
/// after 3 failures in a row (and probes after 50 ms); its `/mcp` URL and
/// the runner.
async fn proxy(url: &str) -> (String, Arc<Runner>) {
    proxy_with(url, Config::default()).await
}

async fn proxy_with(url: &str, base: Config) -> (String, Arc<Runner>) {
    let orders = fusebox::config::mcp::McpServerConfig {
        url: Some(url.into()),
        command: Vec::new(),
    };
    let cfg = Config {
        mcp: [("orders".to_string(), orders)].into(),
        ..base
    };
    let get_order = ToolConfig {
        pool: 2,
        queue: 0,
        cache_ttl_s: 60,
        breaker: Some(fusebox::config::BreakerConfig {
            consecutive_failures: 3,
            cooldown_ms: 50,
            half_open_ramp: vec![1],
            ..cfg.breaker.clone()
        }),
        ..ToolConfig::default()
    };
    serve_mcp(cfg, [("get_order".to_string(), get_order)].into()).await
}

/// A gateway offering the tools of `cfg`'s MCP servers, as `configured`
/// sets them; its `/mcp` URL and the runner.
async fn serve_mcp(mut cfg: Config, configured: BTreeMap<String, ToolConfig>) -> (String, Arc<Runner>) {
    let upstreams = Upstreams::connect(&cfg.mcp)
        .await
        .unwrap_or_else(|e| panic!("{e} (cargo test builds the example servers)"));
    cfg.tools = upstreams.tool_configs(&configured);
    cfg.validate("test").unwrap();
    let mut parts = RunnerParts::mock(Clock::system(), Seed(1));
    parts.tools = Some(Arc::new(McpTools(upstreams.clone())));
    let runner = Runner::new(cfg, parts).unwrap();
    let opts = GatewayOptions {
        mcp: Some(upstreams),
        ..GatewayOptions::default()
    };
    let addr = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", opts)
        .await
        .unwrap();
    (format!("http://{addr}/mcp"), runner)
}

/// The status of an MCP `initialize` sent to `url` as if to `host`.
async fn initialize_as(url: &str, host: &str, key: Option<&str>) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let mut r = reqwest::Client::new()
        .post(url)
        .header("host", host)
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    r.send().await.unwrap().status().as_u16()
}

fn call(name: &str, args: serde_json::Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_string());
    p.arguments = args.as_object().cloned();
    p
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_pass_through_and_a_failing_one_is_cut_off() {
    let state = Arc::new(Orders::default());
    let url = upstream(state.clone()).await;
    let (base, _runner) = proxy(&url).await;
    let direct = client(&url).await;
    let through = client(&base).await;
    // Unguarded (loopback development), only a loopback Host is answered.
    assert_eq!(initialize_as(&base, "127.0.0.1", None).await, 200);
    assert_eq!(initialize_as(&base, "rebound.example", None).await, 403);
    assert_eq!(
        through.list_all_tools().await.unwrap(),
        direct.list_all_tools().await.unwrap(),
        "the upstream's tools, as it lists them"
    );
    let ask = || call("get_order", json!({"order_id": "38291"}));
    let got = through.call_tool(ask()).await.unwrap();
    assert_eq!(got, direct.call_tool(ask()).await.unwrap(), "its answer, unchanged");
    assert_eq!(state.calls[0].load(Ordering::SeqCst), 2);

    // Down: the upstream's own error answer comes back; the breaker
    // counts it and, an idempotent tool, it is retried.
    state.down.store(true, Ordering::SeqCst);
    let other = || call("get_order", json!({"order_id": "1"}));
    let before = state.calls[0].load(Ordering::SeqCst);
    let r = through.call_tool(other()).await.unwrap();
    assert_eq!((r.is_error, text(&r)), (Some(true), "orders: HTTP 503".to_string()));
    assert!(state.calls[0].load(Ordering::SeqCst) - before >= 2, "retried");
    // Open after 3 failures in a row: an explicit answer, no upstream call.
    for _ in 0..3 {
        let _ = through.call_tool(other()).await.unwrap();
    }
    let seen = state.calls[0].load(Ordering::SeqCst);
    let r = through.call_tool(other()).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(
        text(&r).starts_with("get_order is unavailable (breaker open: 3 consecutive failures"),
        "{}",
        text(&r)
    );
    assert!(
        text(&r).ends_with("do not call it again for this request"),
        "{}",
        text(&r)
    );
    assert_eq!(
        state.calls[0].load(Ordering::SeqCst),
        seen,
        "the upstream is not called"
    );
    // An order asked before is answered from the cache, marked stale.
    let r = through.call_tool(ask()).await.unwrap();
    assert_eq!(text(&r), text(&got), "the cached answer");
    let meta = r.meta.expect("marked");
    assert!(meta.0.get("fusebox/stale_ms").is_some_and(|v| v.is_u64()), "{meta:?}");
    assert_eq!(state.calls[0].load(Ordering::SeqCst), seen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_idempotent_tool_is_retried_and_a_pool_of_two_admits_two() {
    let state = Arc::new(Orders::default());
    let url = upstream(state.clone()).await;
    let (base, _runner) = proxy(&url).await;
    let through = client(&base).await;
    state.down.store(true, Ordering::SeqCst);
    let r = through
        .call_tool(call("send_email", json!({"to": "ana@example.com"})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        state.calls[1].load(Ordering::SeqCst),
        1,
        "send_email says nothing of idempotence: called once"
    );
    state.down.store(false, Ordering::SeqCst);
    // Three at once on a pool of 2 without a queue: two run, one is busy.
    state.slow_ms.store(300, Ordering::SeqCst);
    let one = |id: &str| through.call_tool(call("get_order", json!({"order_id": id})));
    let (a, b, c) = tokio::join!(one("a"), one("b"), one("c"));
    let results = [a.unwrap(), b.unwrap(), c.unwrap()];
    let busy: Vec<_> = results.iter().filter(|r| r.is_error == Some(true)).collect();
    assert_eq!(busy.len(), 1, "{results:?}");
    assert!(text(busy[0]).contains("busy"), "{}", text(busy[0]));
    assert_eq!(
        state.calls[0].load(Ordering::SeqCst),
        2,
        "the third never reached the upstream"
    );
    // Arguments the tool's schema refuses never reach it either.
    let r = through.call_tool(call("get_order", json!({"id": 5}))).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("order_id"), "{}", text(&r));
    assert_eq!(state.calls[0].load(Ordering::SeqCst), 2);
}

/// An operator's force-open cuts an MCP tool off like any target; after a
/// failing spell the breaker probes and closes once the upstream is back;
/// a caller key names the user its calls are made as.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_command_mcp_tools_and_a_breaker_recovers() {
    use fusebox::command::{Command, Issuer};
    use fusebox::config::access::SecretHash;
    use fusebox::resilience::breaker::BreakerState;
    use fusebox::target::Target;
    let state = Arc::new(Orders::default());
    let url = upstream(state.clone()).await;
    let key = fusebox::config::KeyConfig {
        hash: SecretHash::of("sk-team-01234567"),
        user: "team".into(),
        routes: Vec::new(),
        expires: None,
        budgets: None,
        sub_users: false,
    };
    let cfg = Config {
        keys: [("team-app".to_string(), key)].into(),
        ..Config::default()
    };
    let (base, runner) = proxy_with(&url, cfg).await;
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(base.clone())
            .auth_header("sk-team-01234567"),
    );
    let through = ().serve(transport).await.expect("a session with the key");
    // Behind keys, whatever host a load balancer forwards it as; not without one.
    assert_eq!(
        initialize_as(&base, "gateway.example", Some("sk-team-01234567")).await,
        200
    );
    assert_eq!(initialize_as(&base, "gateway.example", None).await, 401);
    let mut events = runner.events().subscribe();
    let ask = || call("get_order", json!({"order_id": "7"}));
    assert_ne!(through.call_tool(ask()).await.unwrap().is_error, Some(true));
    let users: Vec<String> = std::iter::from_fn(|| events.try_recv().ok())
        .filter_map(|e| match e.kind {
            fusebox::telemetry::events::EventKind::Outcome(o) => Some(o.user.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(users, ["team"], "made as the key's user");
    let target = Target::tool("get_order");
    let state_of = |r: &Runner| {
        let now = r.clock().now();
        r.registry()
            .iter()
            .find(|t| t.target == target)
            .map(|t| t.breaker.view(now).state)
    };
    runner
        .apply(&Command::ForceOpen { target: target.clone() }, &Issuer::operator("ana"))
        .unwrap();
    let seen = state.calls[0].load(Ordering::SeqCst);
    let r = through
        .call_tool(call("get_order", json!({"order_id": "8"})))
        .await
        .unwrap();
    assert!(
        text(&r).starts_with("get_order is unavailable (breaker open: "),
        "{}",
        text(&r)
    );
    assert_eq!(state.calls[0].load(Ordering::SeqCst), seen);
    runner
        .apply(&Command::Reset { target: target.clone() }, &Issuer::operator("ana"))
        .unwrap();
    // Down until it opens, then back: a probe after the cooldown closes it.
    state.down.store(true, Ordering::SeqCst);
    for i in 0..3 {
        let _ = through
            .call_tool(call("get_order", json!({"order_id": format!("x{i}")})))
            .await
            .unwrap();
    }
    assert_eq!(state_of(&runner), Some(Some(BreakerState::Open)));
    state.down.store(false, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while through
        .call_tool(call("get_order", json!({"order_id": "y"})))
        .await
        .unwrap()
        .is_error
        == Some(true)
    {
        assert!(std::time::Instant::now() < deadline, "no probe got through");
        tokio::time::sleep(Duration::from_millis(10)).await; // polling the real clock's cooldown
    }
    assert_eq!(
        state_of(&runner),
        Some(Some(BreakerState::Closed)),
        "the probe closed it"
    );
}

/// A stdio server fusebox starts: its tools pass through; when it crashes,
/// calls fail fast (never reaching a dead process) while it is restarted,
/// and then a new process answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_that_crashes_is_restarted() {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_fusebox"));
    let server = bin.parent().unwrap().join("examples").join("mcp_stdio_orders");
    let orders = fusebox::config::mcp::McpServerConfig {
        url: None,
        command: vec![server.to_string_lossy().into_owned()],
    };
    let cfg = Config {
        mcp: [("orders".to_string(), orders)].into(),
        ..Config::default()
    };
    // Calls fail while it restarts (not retried here, to see them); its
    // breaker, opened by them, probes again soon.
    let get_order = ToolConfig {
        idempotent: false,
        breaker: Some(fusebox::config::BreakerConfig {
            cooldown_ms: 50,
            half_open_ramp: vec![1],
            ..cfg.breaker.clone()
        }),
        ..ToolConfig::default()
    };
    let (url, _runner) = serve_mcp(cfg, [("get_order".to_string(), get_order)].into()).await;
    let through = client(&url).await;
    let ask = || call("get_order", json!({"order_id": "9"}));
    let first = text(&through.call_tool(ask()).await.unwrap());
    assert!(first.starts_with("order \"9\": shipped (pid "), "{first}");
    let crashed = through.call_tool(call("crash", json!({}))).await.unwrap();
    assert_eq!(crashed.is_error, Some(true), "{crashed:?}");
    // Until it is back, a call fails at once, saying why.
    let r = through.call_tool(ask()).await.unwrap();
    assert_eq!(r.is_error, Some(true), "the server is down: {}", text(&r));
    assert!(text(&r).starts_with("get_order failed"), "{}", text(&r));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let again = loop {
        let r = through.call_tool(ask()).await.unwrap();
        if r.is_error != Some(true) {
            break text(&r);
        }
        assert!(std::time::Instant::now() < deadline, "not restarted: {}", text(&r));
        tokio::time::sleep(Duration::from_millis(20)).await; // polling the restart's real-time backoff
    };
    assert!(again.starts_with("order \"9\": shipped (pid "), "{again}");
    assert_ne!(again, first, "a new process answers");
}
