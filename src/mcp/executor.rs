//! The offered tools' calls, made on the servers that have them. A call
//! that the server answers with `isError`, or with an MCP error, or not at
//! all, fails (the breaker counts it); an `isError` answer still goes back
//! to the caller as the server gave it.

use super::Upstreams;
use crate::provider::{ErrorKind, ProviderError};
use crate::tools::ToolExecutor;
use rmcp::model::CallToolRequestParams;
use rmcp::service::ServiceError;
use std::sync::Arc;

/// Calls the offered tools on their servers; an answer is the server's
/// `CallToolResult` as JSON.
pub struct McpTools(pub Arc<Upstreams>);

/// A failed call in the runner's terms.
fn failure(name: &str, e: &ServiceError) -> ProviderError {
    let kind = match e {
        ServiceError::McpError(_) => ErrorKind::ServerError,
        ServiceError::Timeout { .. } => ErrorKind::Timeout,
        ServiceError::TransportClosed => ErrorKind::Reset,
        _ => ErrorKind::Connect,
    };
    ProviderError::new(kind, None, format!("{name}: {e}"))
}

#[async_trait::async_trait]
impl ToolExecutor for McpTools {
    async fn call(&self, name: &str, args: &str, _request: u64, _attempt: u32) -> Result<Arc<str>, ProviderError> {
        let Some(o) = self.0.get(name) else {
            return Err(ProviderError::new(
                ErrorKind::NotFound,
                None,
                format!("no tool `{name}`"),
            ));
        };
        let arguments = match serde_json::from_str::<serde_json::Value>(args) {
            Ok(serde_json::Value::Object(m)) => Some(m),
            _ if args.trim().is_empty() => None,
            _ => {
                return Err(ProviderError::new(
                    ErrorKind::BadRequest,
                    None,
                    format!("{name}: arguments are not a JSON object"),
                ))
            }
        };
        let mut params = CallToolRequestParams::new(o.tool.name.clone());
        params.arguments = arguments;
        let peer = self.0.peer(o.server).map_err(|server| {
            ProviderError::new(
                ErrorKind::Connect,
                None,
                format!("{name}: the MCP server {server} is reconnecting (its session ended)"),
            )
        })?;
        let result = peer.call_tool(params).await.map_err(|e| failure(name, &e))?;
        let json: Arc<str> = serde_json::to_string(&result).unwrap_or_default().into();
        if result.is_error == Some(true) {
            let mut e = ProviderError::new(ErrorKind::ServerError, None, format!("{name} answered with an error"));
            e.answer = Some(json);
            return Err(e);
        }
        Ok(json)
    }
}
