//! The MCP proxy with a real MCP server (an `rmcp` server on loopback) and
//! a real MCP client (`rmcp`) calling fusebox's `/mcp`: the tool list is
//! the upstream's; a call passes through; a failing tool's breaker opens
//! and then answers at once without reaching the upstream; only an
//! idempotent tool is retried; a pool of 2 admits 2 calls; a cached answer
//! is served, marked stale, when the upstream is down.

use crate::common::mcp::{call, client, proxy, proxy_with, serve_mcp, text, upstream, with_orders, Orders};
use fusebox::config::{Config, ToolConfig};
use fusebox::runner::Runner;
use rmcp::ServiceExt;
use serde_json::json;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The status of an MCP `initialize` sent to `url` as if to `host`, and
/// the session it opened.
async fn initialize_as(url: &str, host: &str, key: Option<&str>) -> (u16, Option<String>) {
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
    let r = r.send().await.unwrap();
    let session = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (r.status().as_u16(), session)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_pass_through_and_a_failing_one_is_cut_off() {
    let state = Arc::new(Orders::default());
    let url = upstream(state.clone()).await;
    let (base, _runner) = proxy(&url).await;
    let direct = client(&url).await;
    let through = client(&base).await;
    // Unguarded (loopback development), only a loopback Host is answered.
    let (status, session) = initialize_as(&base, "127.0.0.1", None).await;
    assert_eq!(status, 200);
    assert_eq!(initialize_as(&base, "rebound.example", None).await.0, 403);
    // A client ending its session is answered 204, as MCP clients expect.
    let ended = reqwest::Client::new()
        .delete(&base)
        .header("mcp-session-id", session.unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status().as_u16(), 204);
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
    let (base, runner) = proxy(&url).await;
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
    // The console's row of the tool shows its pool.
    let snapshot = runner.snapshot(0, 0);
    let row = snapshot
        .breakers
        .iter()
        .find(|b| b.target.to_string() == "tool:get_order")
        .unwrap();
    let pool = row.pool.expect("a tool's row has its pool");
    assert_eq!((pool.in_use, pool.size, pool.queue, pool.refused), (0, 2, 0, 1));
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
    use fusebox::resilience::breaker::BreakerState;
    use fusebox::target::Target;
    let state = Arc::new(Orders::default());
    let url = upstream(state.clone()).await;
    let key = crate::common::caller_key("sk-team-01234567", "team");
    let cfg = Config {
        keys: [("team-app".to_string(), key)].into(),
        ..Config::default()
    };
    let (base, runner) = proxy_with(&url, cfg, 50).await;
    let transport = rmcp::transport::StreamableHttpClientTransport::from_config(
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(base.clone())
            .auth_header("sk-team-01234567"),
    );
    let through = ().serve(transport).await.expect("a session with the key");
    // Behind keys, whatever host a load balancer forwards it as; not without one.
    assert_eq!(
        initialize_as(&base, "gateway.example", Some("sk-team-01234567"))
            .await
            .0,
        200
    );
    assert_eq!(initialize_as(&base, "gateway.example", None).await.0, 401);
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
        r.catalog()
            .registry()
            .iter()
            .find(|t| t.target == target)
            .map(|t| t.breaker.view(now).state)
    };
    runner
        .operations()
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
        .operations()
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

/// A stdio server fusebox starts, one process per client session: its
/// tools pass through; when it crashes, the session's next call starts a
/// new process, which answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_that_crashes_is_restarted() {
    let cfg = with_orders(None, Config::default());
    let get_order = ToolConfig {
        idempotent: false,
        ..ToolConfig::default()
    };
    let (url, _runner) = serve_mcp(cfg, [("get_order".to_string(), get_order)].into()).await;
    let through = client(&url).await;
    let ask = || call("get_order", json!({"order_id": "9"}));
    let first = text(&through.call_tool(ask()).await.unwrap());
    assert!(first.starts_with("order \"9\": shipped (pid "), "{first}");
    let crashed = through.call_tool(call("crash", json!({}))).await.unwrap();
    assert_eq!(crashed.is_error, Some(true), "{crashed:?}");
    let again = text(&through.call_tool(ask()).await.unwrap());
    assert!(again.starts_with("order \"9\": shipped (pid "), "{again}");
    assert_ne!(again, first, "a new process answers");
    // Another client session has a process of its own.
    let other = client(&url).await;
    let its = text(&other.call_tool(ask()).await.unwrap());
    assert!(its.starts_with("order \"9\": shipped (pid "), "{its}");
    assert_ne!(its, again, "its own process");
}

/// The JSON-RPC answer to `body` sent in `session` at `url`, read from
/// JSON or from the event stream rmcp answers a request with.
async fn rpc(url: &str, session: &str, body: serde_json::Value) -> serde_json::Value {
    let r = reqwest::Client::new()
        .post(url)
        .header("host", "127.0.0.1")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .json(&body)
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    let json = std::iter::once(text.as_str())
        .chain(text.lines().filter_map(|l| l.strip_prefix("data:")))
        .find_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
        .filter(|v| v.get("id").is_some());
    json.unwrap_or_else(|| panic!("no JSON-RPC answer in {text}"))
}

/// A `tools/call` whose `arguments` is not an object (an array, a string)
/// is refused as invalid params (-32602, naming `arguments`), not as an
/// unknown method; the upstream is not called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_arguments_that_are_not_an_object_are_invalid_params() {
    let state = Arc::new(Orders::default());
    let url = upstream(state.clone()).await;
    let (base, _runner) = proxy(&url).await;
    let (status, session) = initialize_as(&base, "127.0.0.1", None).await;
    assert_eq!(status, 200);
    let session = session.unwrap();
    let _ = reqwest::Client::new()
        .post(&base)
        .header("host", "127.0.0.1")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .unwrap();
    for (id, arguments) in [(7, json!(["38291"])), (8, json!("38291"))] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "get_order", "arguments": arguments}});
        let answer = rpc(&base, &session, body).await;
        assert_eq!(answer["id"], id, "{answer}");
        assert_eq!(answer["error"]["code"], -32602, "{arguments}: {answer}");
        let said = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(said.contains("arguments") && said.contains("object"), "{said}");
    }
    // An object is called as ever.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "get_order", "arguments": {"order_id": "38291"}}});
    let answer = rpc(&base, &session, body).await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(state.calls[0].load(Ordering::SeqCst), 1, "called once, for the object");
}

/// A tool whose server asks the caller's person something (the wait set
/// aside, as `mcp/link.rs` does for an elicitation) or, with `aside` off,
/// simply takes that long; then it works 100 ms of its own.
struct Asks {
    aside: bool,
}

#[async_trait::async_trait]
impl fusebox::tools::ToolExecutor for Asks {
    async fn call(&self, _: &str, _: &str, _: u64, _: u32) -> Result<Arc<str>, fusebox::provider::ProviderError> {
        let waiting = self
            .aside
            .then(fusebox::tools::aside::Aside::current)
            .flatten()
            .map(|a| a.begin());
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(waiting);
        tokio::time::sleep(Duration::from_millis(100)).await;
        Ok(Arc::from("{\"content\":[]}"))
    }
}

/// A runner whose one tool `ask` is `exec`: a 5 s timeout, a breaker that
/// trips on one slow (over 1 s) or failed call.
fn asking(exec: Asks) -> Arc<Runner> {
    use fusebox::clock::{Clock, Seed};
    let mut cfg = Config::default();
    let ask = ToolConfig {
        timeout_ms: 5_000,
        idempotent: false,
        breaker: Some(fusebox::config::BreakerConfig {
            consecutive_failures: 1,
            minimum_calls: 1,
            slow_call_ms: 1_000,
            slow_call_rate: 0.5,
            ..cfg.breaker.clone()
        }),
        ..ToolConfig::default()
    };
    cfg.tools = [("ask".to_string(), ask)].into();
    cfg.validate("test").unwrap();
    let mut parts = fusebox::runner::RunnerParts::mock(Clock::system(), Seed(1));
    parts.tools = Some(Arc::new(exec));
    Runner::new(cfg, parts).unwrap()
}

/// A call waiting 60 s on a person (an elicitation) is neither cut by the
/// tool's 5 s timeout nor judged slow by its breaker; the same 60 s not
/// set aside times out and trips it.
#[tokio::test(start_paused = true)]
async fn waiting_on_a_person_is_not_slowness() {
    use fusebox::resilience::breaker::BreakerState;
    use fusebox::runner::tool_call::{ToolEnd, ToolRequest};
    let target = fusebox::target::Target::tool("ask");
    for (aside, answered) in [(true, true), (false, false)] {
        let r = asking(Asks { aside });
        for i in 0..3 {
            let req = ToolRequest::new(i, "alice".into(), None, "ask", "{}".into());
            let (end, _) = r.tool(&req).await;
            assert_eq!(
                matches!(end, ToolEnd::Answer(_)),
                answered,
                "aside {aside}, call {i}: {end:?}"
            );
            if !answered {
                break;
            }
        }
        let state = r.catalog().registry().find(&target).unwrap().breaker.state();
        let expected = if aside {
            BreakerState::Closed
        } else {
            BreakerState::Open
        };
        assert_eq!(state, expected, "aside {aside}");
    }
}

/// A server whose one tool, `confirm`, asks the caller's person (an
/// elicitation) and says what came of it.
#[derive(Clone)]
struct Confirms;

impl rmcp::ServerHandler for Confirms {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(rmcp::model::ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _r: Option<rmcp::model::PaginatedRequestParams>,
        _c: rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::model::ErrorData> {
        let schema = Arc::new(json!({"type": "object"}).as_object().unwrap().clone());
        let tool = rmcp::model::Tool::new("confirm", "Ask the person to confirm", schema);
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        _r: rmcp::model::CallToolRequestParams,
        c: rmcp::service::RequestContext<rmcp::service::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::model::ErrorData> {
        use rmcp::model::{ContentBlock, ElicitRequestParams, ElicitationSchema, Request, ServerRequest};
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: "Ship it?".into(),
            requested_schema: ElicitationSchema::new(Default::default()),
        };
        let asked = c
            .peer
            .send_request(ServerRequest::ElicitRequest(Request::new(params)))
            .await;
        let said = match asked {
            Ok(r) => format!("answered {r:?}"),
            Err(e) => format!("no answer: {e}"),
        };
        Ok(rmcp::model::CallToolResult::success(vec![ContentBlock::text(said)]).into())
    }
}

/// A client that can be asked but whose person never answers.
#[derive(Clone)]
struct Silent;

impl rmcp::ClientHandler for Silent {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("silent", "1"),
        )
    }

    async fn create_elicitation(
        &self,
        _r: rmcp::model::ElicitRequestParams,
        _c: rmcp::service::RequestContext<rmcp::service::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::model::ErrorData> {
        std::future::pending().await
    }
}

/// A person who never answers: past the server's `input_timeout_s` (1 s
/// here, real time: the gateway's HTTP stack keeps a paused clock from
/// advancing) the server is told no answer came, its tool says so, and
/// its breaker counted nothing against it. (That the wait is not the
/// tool's time is `waiting_on_a_person_is_not_slowness`, on a paused clock.)
#[tokio::test(flavor = "current_thread")]
async fn a_person_who_never_answers_ends_the_wait_with_a_clear_error() {
    use rmcp::transport::streamable_http_server::{session::local::LocalSessionManager, StreamableHttpService};
    let svc = StreamableHttpService::new(
        || Ok(Confirms),
        Arc::new(LocalSessionManager::default()),
        Default::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().nest_service("/mcp", svc)).await });
    let mut cfg = with_orders(Some(&url), Config::default());
    cfg.mcp.get_mut("orders").unwrap().input_timeout_s = 1;
    let (proxied, runner) = serve_mcp(cfg, Default::default()).await;
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(proxied);
    let client = Silent.serve(transport).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(30), client.call_tool(call("confirm", json!({}))))
        .await
        .expect("the wait is bounded")
        .unwrap();
    let said = text(&r);
    assert!(
        said.contains("no answer") && said.contains("the client did not answer within 1 s"),
        "{said}"
    );
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let target = fusebox::target::Target::tool("confirm");
    let t = runner.catalog().registry().find(&target).unwrap();
    assert_eq!(t.breaker.state(), fusebox::resilience::breaker::BreakerState::Closed);
}

/// A server's resources have a breaker of their own (`orders/resources`):
/// its failures open it, and then a read is refused at once without
/// reaching the server, while its tools still answer; a read of a
/// resource that does not exist is the caller's mistake and feeds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_s_resources_have_a_breaker_of_their_own() {
    use rmcp::model::ReadResourceRequestParams;
    let state = Arc::new(Orders::default());
    let url = upstream(state.clone()).await;
    let cfg = with_orders(Some(&url), Config::default());
    let resources = ToolConfig {
        breaker: Some(fusebox::config::BreakerConfig {
            consecutive_failures: 3,
            cooldown_ms: 60_000,
            ..cfg.breaker.clone()
        }),
        ..ToolConfig::default()
    };
    let (proxied, runner) = serve_mcp(cfg, [("orders/resources".to_string(), resources)].into()).await;
    let through = client(&proxied).await;
    let read = |uri: &str| ReadResourceRequestParams::new(uri);
    let today = through.read_resource(read("orders://today")).await.unwrap();
    assert!(format!("{today:?}").contains("3 orders"), "{today:?}");
    for i in 0..5 {
        let e = through
            .read_resource(read(&format!("orders://day/{i}")))
            .await
            .unwrap_err();
        assert!(
            e.to_string().contains("no resource orders://day/"),
            "the server's own error: {e}"
        );
    }
    let target = fusebox::target::Target::tool("orders/resources");
    let breaker = || runner.catalog().registry().find(&target).unwrap().breaker.state();
    assert_eq!(
        breaker(),
        fusebox::resilience::breaker::BreakerState::Closed,
        "the caller's mistakes"
    );
    state.down.store(true, Ordering::SeqCst);
    // A read is retried (reads are idempotent): its three tries fail.
    let reads = state.reads.load(Ordering::SeqCst);
    let e = through.read_resource(read("orders://today")).await.unwrap_err();
    assert!(
        e.to_string().contains("orders: HTTP 503"),
        "passed on as the server gave it: {e}"
    );
    assert_eq!(state.reads.load(Ordering::SeqCst), reads + 3);
    assert_eq!(breaker(), fusebox::resilience::breaker::BreakerState::Open);
    let reads = reads + 3;
    let e = through.read_resource(read("orders://today")).await.unwrap_err();
    assert!(e.to_string().contains("breaker open"), "{e}");
    assert_eq!(
        state.reads.load(Ordering::SeqCst),
        reads,
        "refused without reaching the server"
    );
    state.down.store(false, Ordering::SeqCst);
    let r = through
        .call_tool(call("get_order", json!({"order_id": "7"})))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "its tools still answer: {}", text(&r));
}

/// The pid a stdio orders server gave in its answer.
fn pid_in(answer: &str) -> u32 {
    let at = answer.find("(pid ").expect("a pid") + 5;
    answer[at..].trim_end_matches(')').parse().expect("a pid")
}

/// A client session's own stdio server process ends with the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_session_s_server_process_ends_with_it() {
    let cfg = with_orders(None, Config::default());
    let (url, _runner) = serve_mcp(cfg, Default::default()).await;
    let through = client(&url).await;
    let answer = text(
        &through
            .call_tool(call("get_order", json!({"order_id": "1"})))
            .await
            .unwrap(),
    );
    let pid = pid_in(&answer);
    let alive = || std::path::Path::new(&format!("/proc/{pid}")).exists() && !zombie(pid);
    assert!(alive(), "{answer}");
    through.cancel().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "process {pid} outlived its client's session"
        );
        tokio::time::sleep(Duration::from_millis(20)).await; // polling a process's real exit
    }
}

/// Whether process `pid` has exited and waits to be reaped.
fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

/// Two servers behind one `/mcp`: their tools of one name are offered under
/// each server's name and reach their own server; a key limited to one
/// server sees and reaches only that one's tools and resources.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_servers_share_mcp_and_a_key_reaches_only_its_own() {
    use rmcp::model::ReadResourceRequestParams;
    let (a, b) = (Arc::new(Orders::default()), Arc::new(Orders::default()));
    let server = |url: String| fusebox::config::mcp::McpServerConfig {
        url: Some(url),
        command: Vec::new(),
        env: Default::default(),
        input_timeout_s: 600,
    };
    let key = |secret: &str, mcp: &[&str]| fusebox::config::KeyConfig {
        mcp: mcp.iter().map(|s| s.to_string()).collect(),
        ..crate::common::caller_key(secret, "team")
    };
    let cfg = Config {
        mcp: [
            ("a".to_string(), server(upstream(a.clone()).await)),
            ("b".to_string(), server(upstream(b.clone()).await)),
        ]
        .into(),
        keys: [
            ("only-a".to_string(), key("sk-only-a-0123456789", &["a"])),
            ("all".to_string(), key("sk-all-0123456789", &[])),
        ]
        .into(),
        ..Config::default()
    };
    let (url, _runner) = serve_mcp(cfg, Default::default()).await;
    let as_key = |secret: &'static str| {
        let url = url.clone();
        async move {
            let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url)
                .auth_header(secret);
            let t = rmcp::transport::StreamableHttpClientTransport::from_config(config);
            ().serve(t).await.expect("a session")
        }
    };
    let all = as_key("sk-all-0123456789").await;
    let mut names: Vec<String> = all
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["a__get_order", "a__send_email", "b__get_order", "b__send_email"]
    );
    let r = all
        .call_tool(call("b__get_order", json!({"order_id": "1"})))
        .await
        .unwrap();
    assert!(text(&r).starts_with("get_order done"), "{}", text(&r));
    assert_eq!(b.calls[0].load(Ordering::SeqCst), 1, "b's own get_order");
    assert_eq!(a.calls[0].load(Ordering::SeqCst), 0);

    let only_a = as_key("sk-only-a-0123456789").await;
    let names: Vec<String> = only_a
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(
        names,
        ["a__get_order", "a__send_email"],
        "b's tools are not there for it"
    );
    let e = only_a
        .call_tool(call("b__get_order", json!({"order_id": "1"})))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no tool `b__get_order`"), "{e}");
    assert_eq!(b.calls[0].load(Ordering::SeqCst), 1, "b never reached");
    // Neither server lists `orders://today`: with two, no server is its.
    let e = only_a
        .read_resource(ReadResourceRequestParams::new("orders://today"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no MCP server here has the resource"), "{e}");
}
