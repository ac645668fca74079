//! The MCP server fusebox is at `/mcp`: what the upstream servers offer
//! (tools, resources, prompts, completion, logging), each request through
//! the runner's tool path in the client's own sessions with the servers
//! (`link.rs`). A tool whose breaker is open, whose pool is full or that
//! failed answers at once with `isError` and a message a model can act
//! on, or with its last good answer to the same arguments, marked stale
//! (`_meta["fusebox/stale_ms"]`); another request so refused is a
//! JSON-RPC error saying why. An error the server answered with is passed
//! on as it is.

// Logging is deprecated by SEP-2577 but still in the protocols clients speak.
#![allow(deprecated)]

use super::link::{Call, Link};
use super::{Family, Upstreams};
use crate::otel::ids::RequestIds;
use crate::runner::tool_call::{ToolEnd, ToolRequest};
use crate::runner::Runner;
use crate::runner::ToolFailure;
use crate::target::Target;
use crate::telemetry::events::EventKind;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest, CompleteRequestParams, CompleteResult,
    ContentBlock, CustomRequest, CustomResult, ErrorData, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Reference, Request, RequestOptionalParam,
    ResultType, ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::ServerHandler;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// Who an HTTP request is from (the user its calls are billed to), as the
/// gateway that let it in says.
pub type Who = Arc<dyn Fn(&http::request::Parts) -> String + Send + Sync>;

/// The MCP servers an HTTP request's caller may reach, by name (`None`:
/// all), as the gateway that let it in says.
pub type Reach = Arc<dyn Fn(&http::request::Parts) -> Option<Arc<[String]>> + Send + Sync>;

/// How the gateway names and bounds the callers of `/mcp`.
#[derive(Clone)]
pub struct Callers {
    /// Who each is.
    pub who: Who,
    /// What each may reach.
    pub reach: Reach,
}

/// The proxy's handler: one per client session, with its own link to the
/// servers, all sharing the runner.
pub struct Proxy {
    runner: Arc<Runner>,
    upstreams: Arc<Upstreams>,
    callers: Callers,
    ids: Arc<RequestIds>,
    link: Arc<Link>,
}

/// How one family's list is paged: `make` its request with some params,
/// `next` a page's cursor, `join` the pages of several servers as one.
struct Pages<M, N, J> {
    make: M,
    next: N,
    join: J,
}

impl Proxy {
    /// The proxy of `link`'s servers through `runner`, its callers named
    /// and bounded by `callers`, its calls numbered from `ids` (the
    /// gateway's, which its chat calls share, so a recording names each
    /// request once).
    pub fn new(runner: Arc<Runner>, link: Arc<Link>, callers: Callers, ids: Arc<RequestIds>) -> Self {
        Self {
            runner,
            upstreams: link.upstreams_arc(),
            callers,
            ids,
            link,
        }
    }

    /// The servers the caller of `context` may reach, by name (`None`: all).
    fn named(&self, context: &RequestContext<RoleServer>) -> Option<Arc<[String]>> {
        context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| (self.callers.reach)(p))
    }

    /// Whether server `i` is among `named`.
    fn among(&self, named: Option<&[String]>, i: usize) -> bool {
        named.is_none_or(|n| n.iter().any(|s| s == self.upstreams.name(i)))
    }

    /// The servers the caller of `context` may reach.
    fn reach(&self, context: &RequestContext<RoleServer>) -> Vec<usize> {
        let named = self.named(context);
        (0..self.upstreams.len())
            .filter(|&i| self.among(named.as_deref(), i))
            .collect()
    }

    /// The servers offering `family` that the caller of `context` may reach.
    fn offering(&self, family: Family, context: &RequestContext<RoleServer>) -> Vec<usize> {
        let reach = self.reach(context);
        self.upstreams.offering(family).filter(|s| reach.contains(s)).collect()
    }

    /// The runner's request for the tool `name` with `arguments`, from
    /// the caller of `context`.
    fn tool_request(&self, name: &str, arguments: String, context: &RequestContext<RoleServer>) -> ToolRequest {
        let parts = context.extensions.get::<http::request::Parts>();
        ToolRequest::new(
            parts.map_or_else(|| self.ids.next(&http::HeaderMap::new()), |p| self.ids.next(&p.headers)),
            parts.map_or_else(|| "anonymous".to_string(), |p| (self.callers.who)(p)),
            parts.and_then(session_of),
            name,
            arguments,
        )
    }

    /// The client's request of `context` in this session, `request` to send.
    fn call_of(&self, context: &RequestContext<RoleServer>, request: Option<ClientRequest>) -> Call {
        self.link.client_is(&context.peer);
        let mut call = Call::new(
            self.link.clone(),
            context.id.clone(),
            context.meta.get_progress_token(),
            context.ct.clone(),
        );
        call.request = request;
        call
    }

    /// Server `server`'s answer to `request` of `family` (its params
    /// `args`), through the family's tool.
    async fn ask<R: DeserializeOwned>(
        &self,
        family: Family,
        server: usize,
        request: ClientRequest,
        args: &impl serde::Serialize,
        context: &RequestContext<RoleServer>,
    ) -> Result<R, ErrorData> {
        let name = family.tool(self.upstreams.name(server));
        let call = Arc::new(self.call_of(context, Some(request)));
        // The tool's arguments are the request's params (an object; none: `{}`).
        let args = match serde_json::to_value(args) {
            Ok(v @ serde_json::Value::Object(_)) => v.to_string(),
            _ => "{}".to_string(),
        };
        let req = self.tool_request(&name, args, context);
        let (end, _) = call.clone().scope(self.runner.tool(&req)).await;
        let json = match end {
            ToolEnd::Answer(json) | ToolEnd::Stale { answer: json, .. } => json,
            ToolEnd::Unavailable(why) => {
                return Err(call
                    .error()
                    .unwrap_or_else(|| ErrorData::internal_error(self.unavailable(&name, &why), None)))
            }
            ToolEnd::Refused(why) => return Err(ErrorData::invalid_request(why, None)),
        };
        serde_json::from_str(&json).map_err(|e| ErrorData::internal_error(format!("{name}: {e}"), None))
    }

    /// A list of `family`'s: where one server offers it to this caller,
    /// its page for `request` as it gave it (its cursor passed on); else
    /// every page of each server's (up to [`MAX_PAGES`] each), joined as
    /// `pages` says.
    async fn list<R: DeserializeOwned>(
        &self,
        family: Family,
        request: Option<PaginatedRequestParams>,
        pages: Pages<
            impl Fn(Option<PaginatedRequestParams>) -> ClientRequest,
            impl Fn(&R) -> Option<String>,
            impl FnOnce(Vec<(usize, R)>) -> R,
        >,
        context: &RequestContext<RoleServer>,
    ) -> Result<R, ErrorData> {
        let Pages { make, next, join } = pages;
        let servers = self.offering(family, context);
        if let [server] = servers[..] {
            return self.ask(family, server, make(request.clone()), &request, context).await;
        }
        let mut pages = Vec::new();
        for server in servers {
            let mut cursor = None;
            for _ in 0..MAX_PAGES {
                let params = cursor
                    .clone()
                    .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
                let page: R = self.ask(family, server, make(params), &cursor, context).await?;
                cursor = next(&page);
                pages.push((server, page));
                if cursor.is_none() {
                    break;
                }
            }
        }
        Ok(join(pages))
    }

    /// Why `name` cannot be called now, in words a model can act on.
    fn unavailable(&self, name: &str, why: &ToolFailure) -> String {
        let target = Target::tool(name);
        match why {
            ToolFailure::Open => {
                let now = self.runner.clock().now();
                let probe = self
                    .runner
                    .catalog()
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

/// The most pages of one server's list gathered where several servers
/// share `/mcp`.
const MAX_PAGES: usize = 64;

/// A method no server here offers.
fn not_offered(method: &str) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!("{method}: no MCP server behind this gateway offers it"),
        None,
    )
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

/// Why `params`, a `tools/call`'s that rmcp could not read, are not
/// what MCP says (an object with the tool's `name` and its `arguments`
/// as an object).
fn bad_call(params: Option<&serde_json::Value>) -> &'static str {
    use serde_json::Value;
    let Some(params) = params.and_then(Value::as_object) else {
        return "Invalid params: tools/call takes an object with the tool's `name` and its `arguments`";
    };
    if !params.get("name").is_some_and(Value::is_string) {
        return "Invalid params: `name` must be the tool's name, a string";
    }
    match params.get("arguments") {
        None | Some(Value::Null | Value::Object(_)) => {
            "Invalid params: tools/call's params are not as MCP has them (see its `_meta` and `task`)"
        }
        Some(_) => "Invalid params: `arguments` must be an object of the tool's arguments by name",
    }
}

fn error_text(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        let mut caps = ServerCapabilities::builder().enable_tools().build();
        for server in 0..self.upstreams.len() {
            let theirs = self.upstreams.capabilities(server);
            if let Some(r) = &theirs.resources {
                let ours = caps.resources.get_or_insert_with(Default::default);
                ours.subscribe = Some(ours.subscribe == Some(true) || r.subscribe == Some(true));
                ours.list_changed = Some(ours.list_changed == Some(true) || r.list_changed == Some(true));
            }
            if let Some(p) = &theirs.prompts {
                let ours = caps.prompts.get_or_insert_with(Default::default);
                ours.list_changed = Some(ours.list_changed == Some(true) || p.list_changed == Some(true));
            }
            if theirs.completions.is_some() {
                caps.completions.get_or_insert_with(Default::default);
            }
            if theirs.logging.is_some() {
                caps.logging.get_or_insert_with(Default::default);
            }
        }
        let config = ServerConfig::new(caps);
        match self.upstreams.instructions() {
            Some(i) => config.with_instructions(i),
            None => config,
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.link.client_is(&context.peer);
        let reach = self.reach(&context);
        let tools = self
            .upstreams
            .offered()
            .iter()
            .filter(|o| reach.contains(&o.server))
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
        if !self
            .upstreams
            .get(&name)
            .is_some_and(|o| self.among(self.named(&context).as_deref(), o.server))
        {
            return Err(ErrorData::invalid_params(format!("no tool `{name}`"), None));
        }
        let read = request.arguments.map(|a| Arc::new(serde_json::Value::Object(a)));
        let text = match &read {
            Some(a) => serde_json::to_string(a).unwrap_or_default(),
            None => "{}".to_string(),
        };
        let mut req = self.tool_request(&name, text, &context);
        req.read = read.clone();
        let mut call = self.call_of(&context, None);
        call.arguments = read;
        call.text = self.runner.keeps_answers_of(&name);
        let call = Arc::new(call);
        let (end, _) = call.clone().scope(self.runner.tool(&req)).await;
        // The server's answer as it came, else (a cached one) its text.
        let relayed = |json: &str| match call.answer() {
            Some(r) => complete(r),
            None => relayed(json).unwrap_or_else(|e| error_text(format!("{name}: {e}"))),
        };
        let result = match end {
            ToolEnd::Answer(json) => relayed(&json),
            ToolEnd::Stale { answer, age, why } => stale(
                &answer,
                age.as_millis() as u64,
                &crate::outcome::HopEnd::from(&why).to_string(),
            )
            .unwrap_or_else(|| error_text(self.unavailable(&name, &why))),
            ToolEnd::Unavailable(ToolFailure::Failed(_, Some(answer))) => relayed(&answer),
            ToolEnd::Unavailable(why) => match (&why, call.error()) {
                // The server's own error, as it gave it.
                (ToolFailure::Failed(..), Some(e)) => return Err(e),
                _ => error_text(self.unavailable(&name, &why)),
            },
            ToolEnd::Refused(why) => error_text(why),
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let make = |params| {
            ClientRequest::ListResourcesRequest(RequestOptionalParam {
                params,
                ..Default::default()
            })
        };
        let join = |pages: Vec<(usize, ListResourcesResult)>| {
            ListResourcesResult::with_all_items(pages.into_iter().flat_map(|(_, p)| p.resources).collect())
        };
        let next = |r: &ListResourcesResult| r.next_cursor.clone();
        self.list(Family::Resources, request, Pages { make, next, join }, &context)
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let make = |params| {
            ClientRequest::ListResourceTemplatesRequest(RequestOptionalParam {
                params,
                ..Default::default()
            })
        };
        let join = |pages: Vec<(usize, ListResourceTemplatesResult)>| {
            ListResourceTemplatesResult::with_all_items(
                pages.into_iter().flat_map(|(_, p)| p.resource_templates).collect(),
            )
        };
        let next = |r: &ListResourceTemplatesResult| r.next_cursor.clone();
        self.list(Family::Resources, request, Pages { make, next, join }, &context)
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let server = self.resource_server(&request.uri, &context)?;
        let req = ClientRequest::ReadResourceRequest(Request::new(request.clone()));
        let r: ReadResourceResult = self.ask(Family::Resources, server, req, &request, &context).await?;
        Ok(r.into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let server = self.resource_server(&request.uri, &context)?;
        self.link.subscribe(server, &request.uri)?;
        let req = ClientRequest::SubscribeRequest(Request::new(request.clone()));
        let r: Result<serde_json::Value, _> = self.ask(Family::Resources, server, req, &request, &context).await;
        if r.is_err() {
            self.link.unsubscribe(server, &request.uri);
        }
        r.map(drop)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let server = self.resource_server(&request.uri, &context)?;
        self.link.unsubscribe(server, &request.uri);
        let req = ClientRequest::UnsubscribeRequest(Request::new(request.clone()));
        self.ask::<serde_json::Value>(Family::Resources, server, req, &request, &context)
            .await
            .map(drop)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let make = |params| {
            ClientRequest::ListPromptsRequest(RequestOptionalParam {
                params,
                ..Default::default()
            })
        };
        let names = self.upstreams.names();
        // Several servers: each prompt under the name it is offered as.
        let join = |pages: Vec<(usize, ListPromptsResult)>| {
            let prompts = pages.into_iter().flat_map(|(server, p)| {
                p.prompts.into_iter().map(move |mut prompt| {
                    prompt.name = names.prompt_as(server, &prompt.name);
                    prompt
                })
            });
            ListPromptsResult::with_all_items(prompts.collect())
        };
        let next = |r: &ListPromptsResult| r.next_cursor.clone();
        self.list(Family::Prompts, request, Pages { make, next, join }, &context)
            .await
    }

    async fn get_prompt(
        &self,
        mut request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let (server, own) = self.prompt_server(&request.name, &context)?;
        request.name = own;
        let req = ClientRequest::GetPromptRequest(Request::new(request.clone()));
        let r: GetPromptResult = self.ask(Family::Prompts, server, req, &request, &context).await?;
        Ok(r.into())
    }

    async fn complete(
        &self,
        mut request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let server = match &mut request.r#ref {
            Reference::Prompt(p) => {
                let (server, own) = self.prompt_server(&p.name, &context)?;
                p.name = own;
                server
            }
            Reference::Resource(r) => self.resource_server(&r.uri, &context)?,
            _ => {
                return Err(ErrorData::invalid_params(
                    "a completion's ref is a prompt or a resource",
                    None,
                ))
            }
        };
        if !Family::Completion.offered_by(self.upstreams.capabilities(server)) {
            return Err(not_offered("completion/complete"));
        }
        let req = ClientRequest::CompleteRequest(Request::new(request.clone()));
        self.ask(Family::Completion, server, req, &request, &context).await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let servers = self.offering(Family::Logging, &context);
        if servers.is_empty() {
            return Err(not_offered("logging/setLevel"));
        }
        for server in servers {
            let req = ClientRequest::SetLevelRequest(Request::new(request.clone()));
            self.ask::<serde_json::Value>(Family::Logging, server, req, &request, &context)
                .await?;
        }
        Ok(())
    }

    /// A request rmcp could not read as any method it knows: a
    /// `tools/call` whose params MCP does not allow is invalid params
    /// (-32602, saying which), anything else an unknown method.
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        match request.method.as_str() {
            "tools/call" => Err(ErrorData::invalid_params(bad_call(request.params.as_ref()), None)),
            _ => Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                request.method,
                None,
            )),
        }
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        for peer in self.link.opened().await {
            let _ = peer.notify_roots_list_changed().await;
        }
    }
}

impl Proxy {
    /// The server of the resource at `uri`, where the caller of `context`
    /// may reach it.
    fn resource_server(&self, uri: &str, context: &RequestContext<RoleServer>) -> Result<usize, ErrorData> {
        let offering = self.offering(Family::Resources, context);
        if offering.is_empty() {
            return Err(not_offered("resources"));
        }
        self.upstreams
            .names()
            .resource(uri)
            .filter(|s| offering.contains(s))
            .ok_or_else(|| ErrorData::resource_not_found(format!("no MCP server here has the resource {uri}"), None))
    }

    /// The server and its own name of the prompt offered as `name`, where
    /// the caller of `context` may reach it.
    fn prompt_server(&self, name: &str, context: &RequestContext<RoleServer>) -> Result<(usize, String), ErrorData> {
        let offering = self.offering(Family::Prompts, context);
        if offering.is_empty() {
            return Err(not_offered("prompts"));
        }
        self.upstreams
            .names()
            .prompt(name)
            .filter(|(s, _)| offering.contains(s))
            .ok_or_else(|| ErrorData::invalid_params(format!("no prompt `{name}`"), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each way a `tools/call`'s params are not what MCP says, in words.
    #[test]
    fn a_tool_call_s_bad_params_are_named() {
        let bad = [
            (None, "takes an object"),
            (Some(json!(["t", {}])), "takes an object"),
            (Some(json!("t")), "takes an object"),
            (Some(json!({"arguments": {}})), "`name`"),
            (Some(json!({"name": 7})), "`name`"),
            (Some(json!({"name": "t", "arguments": ["x"]})), "`arguments`"),
            (Some(json!({"name": "t", "arguments": "x"})), "`arguments`"),
            (Some(json!({"name": "t", "_meta": 3})), "not as MCP has them"),
        ];
        for (params, says) in bad {
            assert!(
                bad_call(params.as_ref()).contains(says),
                "{params:?}: {}",
                bad_call(params.as_ref())
            );
        }
    }
}
