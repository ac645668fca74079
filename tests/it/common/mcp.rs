//! A real MCP server for the tests (an `rmcp` server on loopback, its
//! orders tools failing or slowing down on demand) and a real MCP client.

use fusebox::clock::{Clock, Seed};
use fusebox::config::{Config, ToolConfig};
use fusebox::gateway::GatewayOptions;
use fusebox::mcp::{McpTools, Upstreams};
use fusebox::runner::{Runner, RunnerParts};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
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
pub struct Orders {
    /// Calls per tool: get_order, send_email.
    pub calls: [AtomicU32; 2],
    /// Every call fails (`isError`, as a 503 would be said).
    pub down: AtomicBool,
    /// get_order takes this long (ms).
    pub slow_ms: AtomicU32,
    /// `resources/read` calls.
    pub reads: AtomicU32,
}

#[derive(Clone)]
struct Upstream(Arc<Orders>);

pub fn tools() -> Vec<Tool> {
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
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
    }

    /// `orders://today` reads (failing while down); any other URI is not found.
    async fn read_resource(
        &self,
        r: ReadResourceRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.0.reads.fetch_add(1, Ordering::SeqCst);
        if r.uri != "orders://today" {
            return Err(ErrorData::resource_not_found(format!("no resource {}", r.uri), None));
        }
        if self.0.down.load(Ordering::SeqCst) {
            return Err(ErrorData::internal_error("orders: HTTP 503", None));
        }
        Ok(ReadResourceResult::new(vec![ResourceContents::text("3 orders", r.uri)]).into())
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
pub async fn upstream(state: Arc<Orders>) -> String {
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
pub async fn client(url: &str) -> RunningService<RoleClient, ()> {
    // Its HTTP client takes the process's TLS provider (fusebox installs
    // one when it connects to MCP servers; a test may not have yet).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_string());
    ().serve(transport).await.expect("an MCP session")
}

pub fn call(name: &str, args: serde_json::Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_string());
    p.arguments = args.as_object().cloned();
    p
}

pub fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// fusebox serving `/mcp` in front of the upstream at `url`, get_order
/// with a pool of 2 (no queue), a 60 s cache and a breaker that opens
/// after 3 failures in a row (probing after a minute); its `/mcp` URL and
/// the runner.
pub async fn proxy(url: &str) -> (String, Arc<Runner>) {
    proxy_with(url, Config::default(), 60_000).await
}

/// [`proxy`] over `base`, `get_order`'s breaker cooling down for
/// `cooldown_ms` of real time (short only where a test waits for a probe).
pub async fn proxy_with(url: &str, base: Config, cooldown_ms: u64) -> (String, Arc<Runner>) {
    let cfg = with_orders(Some(url), base);
    let get_order = ToolConfig {
        pool: 2,
        queue: 0,
        cache_ttl_s: 60,
        breaker: Some(fusebox::config::BreakerConfig {
            consecutive_failures: 3,
            cooldown_ms,
            half_open_ramp: vec![1],
            ..cfg.breaker.clone()
        }),
        ..ToolConfig::default()
    };
    serve_mcp(cfg, [("get_order".to_string(), get_order)].into()).await
}

/// A gateway offering the tools of `cfg`'s MCP servers, as `configured`
/// sets them; its `/mcp` URL and the runner.
pub async fn serve_mcp(cfg: Config, configured: BTreeMap<String, ToolConfig>) -> (String, Arc<Runner>) {
    serve_mcp_with(cfg, configured, GatewayOptions::default()).await
}

/// [`serve_mcp`] with the gateway's options `opts`.
pub async fn serve_mcp_with(
    mut cfg: Config,
    configured: BTreeMap<String, ToolConfig>,
    opts: GatewayOptions,
) -> (String, Arc<Runner>) {
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
        ..opts
    };
    let addr = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", opts)
        .await
        .unwrap()
        .addr;
    (format!("http://{addr}/mcp"), runner)
}

/// The stdio orders server (`examples/mcp_stdio_orders.rs`; `cargo test`
/// builds it).
pub fn stdio_orders() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_fusebox"))
        .parent()
        .unwrap()
        .join("examples")
        .join("mcp_stdio_orders")
}

/// `base` with one MCP server, `orders`: at `url`, or else the stdio
/// orders server.
pub fn with_orders(url: Option<&str>, base: Config) -> Config {
    let orders = fusebox::config::mcp::McpServerConfig {
        url: url.map(str::to_string),
        command: match url {
            Some(_) => Vec::new(),
            None => vec![stdio_orders().to_string_lossy().into_owned()],
        },
        env: Default::default(),
        input_timeout_s: 600,
    };
    Config {
        mcp: [("orders".to_string(), orders)].into(),
        ..base
    }
}
