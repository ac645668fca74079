//! The floor for `mcp_overhead`: an MCP proxy with no resilience at all,
//! built with `rmcp` as fusebox's is (a Streamable HTTP server with
//! in-process sessions in front, an `rmcp` client to the server behind,
//! one current-thread runtime). What it adds is what any `rmcp` proxy of
//! this shape adds on a machine; fusebox's own work is the difference.
//!
//! Run by the harness (`mcp_overhead --bare target/dist/examples/mcp_bare_proxy`)
//! as `mcp_bare_proxy UPSTREAM_URL`; it says `http://ADDR/mcp` on stderr.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use std::sync::Arc;

/// fusebox's allocator, so that the difference is the proxies' work and
/// not their allocators'.
#[global_allocator]
static GLOBAL: fusebox::alloc::Mimalloc = fusebox::alloc::Mimalloc;

#[derive(Clone)]
struct Forward(Peer<RoleClient>);

impl ServerHandler for Forward {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .0
            .list_all_tools()
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        r: CallToolRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let result = self
            .0
            .call_tool(r)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(result.into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let upstream = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: mcp_bare_proxy UPSTREAM_URL"))?;
    let client = ().serve(rmcp::transport::StreamableHttpClientTransport::from_uri(upstream)).await?;
    let forward = Forward(client.peer().clone());
    let svc = rmcp::transport::streamable_http_server::StreamableHttpService::new(
        move || Ok(forward.clone()),
        Arc::new(rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default()),
        Default::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    eprintln!("mcp_bare_proxy: http://{}/mcp", listener.local_addr()?);
    axum::serve(listener, axum::Router::new().nest_service("/mcp", svc)).await?;
    Ok(())
}
