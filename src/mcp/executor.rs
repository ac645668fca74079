//! The offered tools' calls (and each server's other requests, run as the
//! tools `SERVER/resources`, …), made on the servers that have them: in
//! the caller's own session with that server where the call is made for a
//! client of `/mcp` ([`Call`]), else in the catalog session. A call that
//! the server answers with `isError`, or with an error of its own, or not
//! at all, fails (the breaker counts it); an error that says the request
//! was wrong (invalid params, no such resource) is the caller's and feeds
//! no breaker. The server's `isError` answer and its errors still go back
//! to the caller as the server gave them.

use super::link::{Call, Failure};
use super::Upstreams;
use crate::provider::{ErrorKind, ProviderError};
use crate::tools::ToolExecutor;
use rmcp::model::{CallToolRequestParams, ClientRequest, ErrorCode, Request, ServerResult};
use rmcp::service::ServiceError;
use std::sync::Arc;

/// Calls the offered tools on their servers; an answer is the server's
/// result as JSON.
pub struct McpTools(pub Arc<Upstreams>);

/// Whether an error a server answered with says the request was wrong.
fn callers(code: ErrorCode) -> bool {
    [
        ErrorCode::INVALID_PARAMS,
        ErrorCode::INVALID_REQUEST,
        ErrorCode::METHOD_NOT_FOUND,
        ErrorCode::RESOURCE_NOT_FOUND,
    ]
    .contains(&code)
}

/// A failed request in the runner's terms; the server's own error is kept
/// with `call` to pass on.
fn failure(name: &str, e: Failure, call: Option<&Call>) -> ProviderError {
    let e = match e {
        Failure::Open(why) => return ProviderError::new(ErrorKind::Connect, None, format!("{name}: {why}")),
        Failure::Service(e) => e,
    };
    let kind = match &e {
        ServiceError::McpError(err) if callers(err.code) => ErrorKind::BadRequest,
        ServiceError::McpError(_) => ErrorKind::ServerError,
        ServiceError::Timeout { .. } => ErrorKind::Timeout,
        ServiceError::TransportClosed => ErrorKind::Reset,
        ServiceError::Cancelled { .. } => ErrorKind::Left,
        _ => ErrorKind::Connect,
    };
    let text = format!("{name}: {e}");
    if let (ServiceError::McpError(err), Some(call)) = (e, call) {
        call.failed(err);
    }
    ProviderError::new(kind, None, text)
}

impl McpTools {
    /// Server `server`'s answer to the request `request` makes, in the
    /// caller's session with it where there is one.
    async fn send(
        &self,
        name: &str,
        server: usize,
        request: impl Fn() -> ClientRequest,
        call: Option<&Arc<Call>>,
    ) -> Result<ServerResult, ProviderError> {
        match call {
            Some(call) => call
                .link
                .send(server, request, call)
                .await
                .map_err(|e| failure(name, e, Some(call))),
            None => {
                let peer = self.0.peer(server).map_err(|server| {
                    ProviderError::new(
                        ErrorKind::Connect,
                        None,
                        format!("{name}: the MCP server {server} is reconnecting (its session ended)"),
                    )
                })?;
                peer.send_request(request())
                    .await
                    .map_err(|e| failure(name, Failure::Service(e), None))
            }
        }
    }

    /// The server whose requests of a family run as the tool `name`.
    fn family_server(&self, name: &str) -> Option<usize> {
        let (server, family) = name.rsplit_once('/')?;
        let i = (0..self.0.len()).find(|&i| self.0.name(i) == server)?;
        super::Family::ALL.iter().any(|f| f.as_str() == family).then_some(i)
    }
}

#[async_trait::async_trait]
impl ToolExecutor for McpTools {
    async fn call(&self, name: &str, args: &str, _request: u64, _attempt: u32) -> Result<Arc<str>, ProviderError> {
        let call = Call::current();
        if let Some(server) = self.family_server(name) {
            let Some(request) = call.as_ref().and_then(|c| c.request.as_ref()) else {
                return Err(ProviderError::new(
                    ErrorKind::BadRequest,
                    None,
                    format!("{name}: asked for outside a client's MCP session"),
                ));
            };
            let result = self.send(name, server, || request.clone(), call.as_ref()).await?;
            return Ok(serde_json::to_string(&result).unwrap_or_default().into());
        }
        let Some(o) = self.0.get(name) else {
            return Err(ProviderError::new(
                ErrorKind::NotFound,
                None,
                format!("no tool `{name}`"),
            ));
        };
        // The client's own arguments, taken from its request (a call made
        // for a client of `/mcp`), else `args` read.
        let own = call.as_ref().filter(|c| c.request.is_none());
        let parsed = match own {
            Some(c) => {
                c.answered(None);
                None
            }
            None => match serde_json::from_str::<serde_json::Value>(args) {
                Ok(serde_json::Value::Object(m)) => Some(m),
                _ if args.trim().is_empty() => None,
                _ => {
                    return Err(ProviderError::new(
                        ErrorKind::BadRequest,
                        None,
                        format!("{name}: arguments are not a JSON object"),
                    ))
                }
            },
        };
        let request = || {
            let mut params = CallToolRequestParams::new(o.tool.name.clone());
            params.arguments = match own {
                Some(c) => c.arguments.as_deref().and_then(serde_json::Value::as_object).cloned(),
                None => parsed.clone(),
            };
            ClientRequest::CallToolRequest(Request::new(params))
        };
        let result = match self.send(name, o.server, request, call.as_ref()).await? {
            ServerResult::CallToolResult(r) => r,
            other => {
                return Err(ProviderError::new(
                    ErrorKind::ServerError,
                    None,
                    format!("{name}: the server answered a tool call with {other:?}"),
                ))
            }
        };
        let failed = result.is_error == Some(true);
        // A failure's answer is the runner's to relay; a good one, only
        // where it keeps it.
        let json: Arc<str> = match &call {
            Some(c) if !c.text && !failed => Arc::from(""),
            _ => serde_json::to_string(&result).unwrap_or_default().into(),
        };
        if let Some(c) = &call {
            c.answered(Some(result));
        }
        if failed {
            let mut e = ProviderError::new(ErrorKind::ServerError, None, format!("{name} answered with an error"));
            e.answer = Some(json);
            return Err(e);
        }
        Ok(json)
    }
}
