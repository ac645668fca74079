//! A small stdio MCP server, for trying fusebox in front of one (and for
//! the tests): `get_order` answers with the order and this process's id,
//! `crash` ends the process at once, as a crashing server would,
//! `environment` answers with the environment it was started with (one
//! `NAME=value` a line). It says it is ready on stderr.
//! (`command = ["target/debug/examples/mcp_stdio_orders"]`)

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use std::sync::Arc;

#[derive(Clone)]
struct Orders;

impl ServerHandler for Orders {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let object = |v: serde_json::Value| Arc::new(v.as_object().cloned().unwrap_or_default());
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "get_order",
                "Look an order up by id",
                object(serde_json::json!({"type": "object", "properties": {"order_id": {"type": "string"}}})),
            ),
            Tool::new(
                "crash",
                "End the server at once",
                object(serde_json::json!({"type": "object"})),
            ),
            Tool::new(
                "environment",
                "The server's environment",
                object(serde_json::json!({"type": "object"})),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        r: CallToolRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if r.name == "crash" {
            std::process::exit(1);
        }
        if r.name == "environment" {
            let text: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
            return Ok(CallToolResult::success(vec![ContentBlock::text(text.join("\n"))]).into());
        }
        let id = r
            .arguments
            .as_ref()
            .and_then(|a| a.get("order_id"))
            .cloned()
            .unwrap_or_default();
        let text = format!("order {id}: shipped (pid {})", std::process::id());
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    eprintln!("orders server ready (pid {})", std::process::id());
    let running = Orders.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
