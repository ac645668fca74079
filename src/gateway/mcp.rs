//! `/mcp`: the MCP proxy (Streamable HTTP, rmcp's sessions kept in
//! process) behind a guard that holds each session to the key that
//! opened it and keeps their number and idle life within bounds
//! (`crate::mcp::sessions`), refusing past them with a JSON-RPC error.

use super::auth::Caller;
use super::error::{closing, read_bytes};
use super::extract::name_in;
use super::Gateway;
use crate::mcp::sessions::{McpLimits, Refused, Sessions};
use crate::mcp::{proxy::Proxy, Link, LinkLimits, Upstreams};
use crate::wire::fusebox;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;

/// The header naming a client's MCP session.
const SESSION_ID: &str = "mcp-session-id";

/// What the guard keeps: the sessions' holders and rmcp's sessions.
pub(super) struct McpGate {
    sessions: Sessions,
    manager: Arc<LocalSessionManager>,
}

/// `/mcp` over `upstreams`: rmcp's service behind the guard, called
/// straight (no router or middleware between them, each of which would
/// box and clone services on every request); and the work that closes
/// idle sessions beside it (to be spawned; it ends with the service).
pub(super) fn endpoint(
    gw: &Arc<Gateway>,
    upstreams: Arc<Upstreams>,
    limits: McpLimits,
) -> (McpService, impl std::future::Future<Output = ()> + Send + 'static) {
    let mut manager = LocalSessionManager::default();
    // rmcp's own idle timeout is a safety net behind the guard's.
    manager.session_config.keep_alive = Some(limits.idle + limits.idle / 2);
    let gate = Arc::new(McpGate {
        sessions: Sessions::new(limits),
        manager: Arc::new(manager),
    });
    let sweep = close_idle(Arc::downgrade(&gate), gw.runner.clone());
    let rmcp = Arc::new(service(gw, upstreams, gate.manager.clone()));
    let service = McpService {
        gw: gw.clone(),
        gate,
        rmcp,
    };
    (service, sweep)
}

/// `/mcp`: each request through the guard to rmcp's service.
#[derive(Clone)]
pub(super) struct McpService {
    gw: Arc<Gateway>,
    gate: Arc<McpGate>,
    rmcp: Arc<StreamableHttpService<Proxy, LocalSessionManager>>,
}

impl tower::Service<Request> for McpService {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = futures_util::future::BoxFuture<'static, Result<Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(guard(&this, req).await) })
    }
}

impl McpService {
    /// rmcp's answer to `req`.
    async fn run(&self, req: Request) -> Response {
        self.rmcp.handle(req).await.into_response()
    }
}

/// The MCP proxy. Unguarded (loopback development) it answers only
/// requests to a loopback `Host`, against DNS rebinding; where calls need
/// credentials, any host the gateway is reached by.
fn service(
    gw: &Gateway,
    upstreams: Arc<Upstreams>,
    manager: Arc<LocalSessionManager>,
) -> StreamableHttpService<Proxy, LocalSessionManager> {
    // A caller key names the user; without keys, the `x-fusebox-user` header.
    let who: crate::mcp::proxy::Who = Arc::new(|parts: &http::request::Parts| {
        let given = parts
            .headers
            .get(fusebox::name::USER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Caller::user_of(Caller::of(&parts.extensions).as_deref(), given).user
    });
    let reach: crate::mcp::proxy::Reach = Arc::new(|parts: &http::request::Parts| {
        Caller::of(&parts.extensions)
            .map(|c| c.mcp.clone())
            .filter(|servers| !servers.is_empty())
    });
    let callers = crate::mcp::proxy::Callers { who, reach };
    let (runner, ids) = (gw.runner.clone(), gw.ids.clone());
    let config = StreamableHttpServerConfig::default();
    let config = if gw.access.calls_guarded() {
        config.disable_allowed_hosts()
    } else {
        config
    };
    // Each client session its own link to the servers.
    let proxy = move || {
        let link = Link::new(upstreams.clone(), LinkLimits::default());
        Ok(Proxy::new(runner.clone(), link, callers.clone(), ids.clone()))
    };
    StreamableHttpService::new(proxy, manager, config)
}

/// Closes the sessions idle past their life, every few seconds, until the
/// gateway is gone.
async fn close_idle(gate: std::sync::Weak<McpGate>, runner: Arc<crate::runner::Runner>) {
    let every = {
        let Some(g) = gate.upgrade() else { return };
        (g.sessions.limits().idle / 4).clamp(
            std::time::Duration::from_millis(100),
            std::time::Duration::from_secs(10),
        )
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(g) = gate.upgrade() else { return };
        let expired = g.sessions.expire(runner.clock().now());
        close(&g.manager, expired).await;
    }
}

async fn close(manager: &LocalSessionManager, ids: Vec<Box<str>>) {
    for id in ids {
        let _ = manager.close_session(&Arc::from(id)).await;
    }
}

/// Lets a request to `/mcp` through if the session it names is its key's,
/// or if it opens one there is room for; else a JSON-RPC error: 404 for a
/// session that is not the caller's (as for one that never was: the
/// client opens a new one), 429 past the key's bound, 503 past the
/// gateway's. A POST's body must be a JSON-RPC message (else -32700 or
/// -32600, as JSON-RPC says, where rmcp answers 415; read here only
/// where rmcp does not read it first, so a session's calls are parsed
/// once); rmcp's other refusals in plain text are given as JSON-RPC
/// errors too (a `tools/call` with params MCP does not allow is the
/// proxy's to refuse: `proxy.rs`). A session
/// ended by its client (`DELETE`) is answered 204: rmcp says 202, which
/// MCP clients take for a failure (the Python SDK warns "Session
/// termination failed: 202").
async fn guard(mcp: &McpService, req: Request) -> Response {
    let (gw, gate) = (&mcp.gw, &mcp.gate);
    if let Err((_, why)) = name_in(
        fusebox::SESSION,
        req.headers().get(fusebox::name::SESSION).map(HeaderValue::as_bytes),
    ) {
        return rpc_error(StatusCode::BAD_REQUEST, -32602, &why, None);
    }
    let owner = Caller::of(req.extensions()).map(|c| c.key.clone());
    let now = gw.runner.clock().now();
    let session = req
        .headers()
        .get(SESSION_ID)
        .map(|v| v.to_str().unwrap_or_default().to_string());
    if let Some(id) = &session {
        if !gate.sessions.touch(id, owner.as_deref(), now) {
            return rpc_error(
                StatusCode::NOT_FOUND,
                -32001,
                "Session not found: it ended, was idle too long, or was opened with another key; initialize a new one",
                None,
            );
        }
    }
    let (req, body) = match req.method() {
        &Method::POST => match body_of(req, gw.opts.max_body).await {
            Ok(read) => read,
            Err(refused) => return refused,
        },
        _ => (req, None),
    };
    // In a session rmcp reads the message; it is read here only where
    // rmcp refuses it, to say why as JSON-RPC does.
    let message = match (&session, &body) {
        (None, Some(body)) => match message_of(body) {
            Ok(m) => Some(m),
            Err((code, why)) => return rpc_error(StatusCode::BAD_REQUEST, code, &why, None),
        },
        _ => None,
    };
    let delete = req.method() == Method::DELETE;
    let opens = session.is_none()
        && message
            .as_ref()
            .is_some_and(|m| m.method.as_deref() == Some("initialize"));
    if !opens {
        let r = mcp.run(req).await;
        if let Some(body) = body.filter(|_| refused_in_words(&r)) {
            if let Err((code, why)) = message_of(&body) {
                return rpc_error(StatusCode::BAD_REQUEST, code, &why, None);
            }
        }
        let mut r = rpc_errors(r).await;
        if let Some(id) = session.filter(|_| delete && r.status().is_success()) {
            gate.sessions.close(&id);
            if r.status() == StatusCode::ACCEPTED {
                *r.status_mut() = StatusCode::NO_CONTENT;
            }
        }
        return r;
    }
    // An `initialize` without a session opens one (where rmcp keeps them).
    let mut expired = Vec::new();
    let opening = gate.sessions.open(owner.as_deref(), now, &mut expired);
    close(&gate.manager, expired).await;
    let opening = match opening {
        Ok(o) => o,
        Err(refused) => {
            let status = match refused {
                Refused::Full(_) => StatusCode::SERVICE_UNAVAILABLE,
                Refused::PerKey { .. } => StatusCode::TOO_MANY_REQUESTS,
            };
            let id = message.and_then(|m| m.id);
            let mut r = rpc_error(status, -32000, &refused.to_string(), id);
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(60u32));
            return r;
        }
    };
    let r = rpc_errors(mcp.run(req).await).await;
    if let Some(id) = r.headers().get(SESSION_ID).and_then(|v| v.to_str().ok()) {
        opening.opened(id, gw.runner.clock().now());
    }
    r
}

/// A POST's body read (within the gateway's bound), with the request to
/// pass on; the body kept where it is sent as JSON.
async fn body_of(req: Request, max: usize) -> Result<(Request, Option<bytes::Bytes>), Response> {
    let (parts, body) = req.into_parts();
    let body = match read_bytes(body, max).await {
        Ok(b) => b,
        Err((status, why)) => return Err(closing(rpc_error(status, -32600, &why, None))),
    };
    let json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| t.trim_start().get(..16))
        .is_some_and(|t| t.eq_ignore_ascii_case("application/json"));
    // What is not sent as JSON is rmcp's to refuse (415).
    let kept = json.then(|| body.clone());
    Ok((Request::from_parts(parts, Body::from(body)), kept))
}

/// The message `body` holds, or why it is not one as a JSON-RPC error's
/// code and words: -32700 not JSON, -32600 not one JSON-RPC 2.0 message.
fn message_of(body: &[u8]) -> Result<Message, (i32, String)> {
    let invalid = || {
        let why = "Invalid Request: the body is not one JSON-RPC 2.0 message (an object with \"jsonrpc\": \"2.0\")";
        (-32600, why.to_string())
    };
    match serde_json::from_slice::<Peek>(body) {
        Ok(m) if m.jsonrpc.as_deref() == Some("2.0") => Ok(Message {
            method: m.method,
            id: m.id,
        }),
        Ok(_) => Err(invalid()),
        Err(e) if e.is_data() => Err(invalid()),
        Err(e) => Err((-32700, format!("Parse error: {e}"))),
    }
}

/// Whether `r` is a refusal rmcp gave in plain text (406, 400, 405, 415).
fn refused_in_words(r: &Response) -> bool {
    r.status().is_client_error()
        && r.headers()
            .get(header::CONTENT_TYPE)
            .is_none_or(|t| t.as_bytes().starts_with(b"text/plain"))
}

/// `r`, an error rmcp gave in plain text (406, 400, 405, 415), as a
/// JSON-RPC error with the same status and words, which MCP clients read.
async fn rpc_errors(r: Response) -> Response {
    if !refused_in_words(&r) {
        return r;
    }
    let (parts, body) = r.into_parts();
    let said = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let said = String::from_utf8_lossy(&said);
    let reason = parts.status.canonical_reason().unwrap_or("refused");
    let message = if said.trim().is_empty() { reason } else { said.trim() };
    let code = if parts.status == StatusCode::NOT_FOUND {
        -32001
    } else {
        -32600
    };
    let mut out = rpc_error(parts.status, code, message, None);
    if let Some(allow) = parts.headers.get(header::ALLOW) {
        out.headers_mut().insert(header::ALLOW, allow.clone());
    }
    out
}

/// A JSON-RPC message as the guard reads it.
#[derive(serde::Deserialize)]
struct Peek<'a> {
    #[serde(default, borrow, deserialize_with = "crate::wire::text::opt")]
    jsonrpc: Option<std::borrow::Cow<'a, str>>,
    method: Option<String>,
    id: Option<serde_json::Value>,
}

/// What the guard reads of a JSON-RPC message.
struct Message {
    method: Option<String>,
    id: Option<serde_json::Value>,
}

/// A JSON-RPC error answer with HTTP `status`.
fn rpc_error(status: StatusCode, code: i32, message: &str, id: Option<serde_json::Value>) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(serde_json::Value::Null),
        "error": {"code": code, "message": message},
    });
    (status, axum::Json(body)).into_response()
}
