//! The MCP server fusebox is at `/mcp`: the upstream servers' tools, each
//! call through the runner's tool path. A tool whose breaker is open, whose
//! pool is full or that failed answers at once with `isError` and a
//! message a model can act on, or with its last good answer to the same
//! arguments, marked stale (`_meta["fusebox/stale_ms"]`).

use super::Upstreams;
use crate::otel::ids::RequestIds;
use crate::runner::tool::ToolFailure;
use crate::runner::tool_call::{ToolEnd, ToolRequest};
use crate::runner::Runner;
use crate::target::Target;
use crate::telemetry::events::EventKind;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ListToolsResult,
    PaginatedRequestParams, ResultType, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::ServerHandler;
use std::sync::Arc;

/// Who an HTTP request is from (the user its calls are billed to), as the
/// gateway that let it in says.
pub type Who = Arc<dyn Fn(&http::request::Parts) -> String + Send + Sync>;

/// The proxy's handler (one per MCP session, all sharing the runner).
#[derive(Clone)]
pub struct Proxy {
    runner: Arc<Runner>,
    upstreams: Arc<Upstreams>,
    who: Who,
    ids: Arc<RequestIds>,
}

impl Proxy {
    /// The proxy of `upstreams`' tools through `runner`, its callers named
    /// by `who`, its calls numbered from `ids` (the gateway's, which its
    /// chat calls share, so a recording names each request once).
    pub fn new(runner: Arc<Runner>, upstreams: Arc<Upstreams>, who: Who, ids: Arc<RequestIds>) -> Self {
        Self {
            runner,
            upstreams,
            who,
            ids,
        }
    }

    /// Why `name` cannot be called now, in words a model can act on.
    fn unavailable(&self, name: &str, why: &ToolFailure) -> String {
        let target = Target::tool(name);
        match why {
            ToolFailure::Open => {
                let now = self.runner.clock().now();
                let probe = self
                    .runner
                    .registry()
                    .iter()
                    .find(|t| t.target == target)
                    .and_then(|t| t.breaker.view(now).next_probe_ms);
                let reason = self
                    .runner
                    .events()
                    .recent(200)
                    .into_iter()
                    .rev()
                    .find_map(|e| match e.kind {
                        EventKind::Transition(t) if t.breaker == target => Some(t.reason),
                        _ => None,
                    });
                let retry = probe.map_or(String::new(), |ms| format!("; retry in {} s", ms.div_ceil(1000)));
                format!(
                    "{name} is unavailable (breaker open: {}){retry}; do not call it again for this request",
                    reason.as_deref().unwrap_or("by an operator")
                )
            }
            ToolFailure::PoolFull => format!("{name} is busy (every slot of its pool is taken); try again shortly"),
            ToolFailure::Drill => {
                format!("{name} is off for a resilience drill; answer without it")
            }
            ToolFailure::Failed(label, _) => format!("{name} failed ({label}); try again later or answer without it"),
        }
    }
}

/// The session a call counts against: the one the caller names with
/// `x-fusebox-session` (to share it with its chat calls), else its MCP
/// session.
fn session_of(parts: &http::request::Parts) -> Option<String> {
    [crate::wire::fusebox::SESSION, "mcp-session-id"]
        .iter()
        .find_map(|h| parts.headers.get(*h)?.to_str().ok().filter(|s| !s.is_empty()))
        .map(str::to_string)
}

/// `answer` (a `CallToolResult` as JSON) marked stale: `age` ms old,
/// served because of `why`.
fn stale(answer: &str, age_ms: u64, why: &str) -> Option<CallToolResult> {
    let mut v: serde_json::Value = serde_json::from_str(answer).ok()?;
    let meta = v
        .as_object_mut()?
        .entry("_meta")
        .or_insert_with(|| serde_json::json!({}));
    let m = meta.as_object_mut()?;
    m.insert("fusebox/stale_ms".into(), age_ms.into());
    m.insert("fusebox/why".into(), why.into());
    serde_json::from_value(v).ok().map(complete)
}

/// A server's answer (a `CallToolResult` as JSON), to pass on.
fn relayed(answer: &str) -> Result<CallToolResult, serde_json::Error> {
    serde_json::from_str(answer).map(complete)
}

/// `r` with its `resultType`, which the 2026-07-28 protocol requires and
/// a server on an older one does not send (there, absent means
/// `complete`); rmcp leaves it out again for a client on an older one.
fn complete(mut r: CallToolResult) -> CallToolResult {
    r.result_type.get_or_insert(ResultType::COMPLETE);
    r
}

fn error_text(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .upstreams
            .offered()
            .iter()
            .map(|o| {
                let mut t = o.tool.clone();
                t.name = o.name.clone().into();
                t
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if self.upstreams.get(&name).is_none() {
            return Err(ErrorData::invalid_params(format!("no tool `{name}`"), None));
        }
        let arguments = request
            .arguments
            .map(serde_json::Value::Object)
            .unwrap_or_else(|| serde_json::json!({}));
        let parts = context.extensions.get::<http::request::Parts>();
        let req = ToolRequest::new(
            parts.map_or_else(|| self.ids.next(&http::HeaderMap::new()), |p| self.ids.next(&p.headers)),
            parts.map_or_else(|| "anonymous".to_string(), |p| (self.who)(p)),
            parts.and_then(session_of),
            &name,
            arguments.to_string(),
        );
        let (end, _) = self.runner.tool(&req).await;
        let result = match end {
            ToolEnd::Answer(json) => relayed(&json).unwrap_or_else(|e| error_text(format!("{name}: {e}"))),
            ToolEnd::Stale { answer, age, why } => stale(&answer, age.as_millis() as u64, &why.end().to_string())
                .unwrap_or_else(|| error_text(self.unavailable(&name, &why))),
            ToolEnd::Unavailable(ToolFailure::Failed(_, Some(answer))) => {
                relayed(&answer).unwrap_or_else(|e| error_text(format!("{name}: {e}")))
            }
            ToolEnd::Unavailable(why) => error_text(self.unavailable(&name, &why)),
            ToolEnd::Refused(why) => error_text(why),
        };
        Ok(result.into())
    }
}
