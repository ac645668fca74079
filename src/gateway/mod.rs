//! Gateway mode (`fusebox serve`): the HTTP front door agents point their
//! base URL at. OpenAI chat completions, Anthropic messages and OpenAI
//! responses (and embeddings) run through the runner (budgets, limiter,
//! breakers, retries, fallback chain); a call to a model of the client's
//! own API passes its body and the upstream's answer through, a call to
//! the other API is translated both ways, and the degradation metadata
//! comes in `x-fusebox-*` headers and the stream's last chunk.

pub mod accept;
mod auth;
mod chat;
mod client_api;
pub mod closing;
mod conns;
mod embeddings;
mod error;
mod extract;
mod live;
mod mcp;
mod metrics;
mod reply;
mod request_key;
mod stall;
mod stream;

use crate::command::{Command, Issuer};
use crate::otel::ids::RequestIds;
use crate::runner::Runner;
use crate::target::Target;
pub use accept::{ConnCounts, ConnLimits};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use error::GatewayError;
use metrics::Latency;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tower::Layer;

pub use auth::needs_token;

/// Request bodies larger than this are refused with 413 unless configured.
pub const DEFAULT_MAX_BODY: usize = 4 << 20;

/// Gateway settings.
#[derive(Clone)]
pub struct GatewayOptions {
    /// Bearer token every request must carry (required off loopback).
    pub auth_token: Option<String>,
    /// Largest request body accepted (bytes).
    pub max_body: usize,
    /// Operator commands are refused (`serve --readonly`).
    pub readonly: bool,
    /// Connections at most, and the header timeout.
    pub conns: ConnLimits,
    /// The fleet this instance belongs to: its shared caller keys apply.
    pub fleet: Option<Arc<crate::fleet::Fleet>>,
    /// The MCP servers whose tools it offers at `/mcp`.
    pub mcp: Option<Arc<crate::mcp::Upstreams>>,
    /// The bounds on the sessions at `/mcp`.
    pub mcp_limits: crate::mcp::sessions::McpLimits,
    /// Records the traffic recorder could not write (`serve --record`),
    /// shown at `/metrics`.
    pub records_dropped: Arc<AtomicU64>,
    /// Where callers' `traceparent`s go, when traces are exported.
    pub traces: Option<crate::otel::Parents>,
    /// Off loopback, serve calls without caller keys, each as the user it
    /// names (`serve --allow-anonymous`).
    pub allow_anonymous: bool,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        Self {
            auth_token: None,
            max_body: DEFAULT_MAX_BODY,
            readonly: false,
            conns: ConnLimits::default(),
            fleet: None,
            mcp: None,
            mcp_limits: Default::default(),
            records_dropped: Arc::default(),
            traces: None,
            allow_anonymous: false,
        }
    }
}

/// What every handler shares.
struct Gateway {
    runner: Arc<Runner>,
    opts: GatewayOptions,
    /// Request ids: what the console, a recording and traces of this run
    /// name requests by.
    ids: Arc<RequestIds>,
    latency: Latency,
    /// Open and refused connections.
    conns: Arc<ConnCounts>,
    /// Who may do what.
    access: auth::Access,
    /// Event watchers dropped for falling behind.
    watchers_dropped: Arc<AtomicU64>,
    /// Streamed calls running, watched for clients that stop reading.
    stalls: Arc<stall::Stalls>,
    /// Whether it is closing.
    closing: closing::Watch,
}

type Shared = State<Arc<Gateway>>;

impl Gateway {
    /// The gateway over `runner`, letting in whom `access` says; `conns`
    /// counts its connections.
    fn new(
        runner: Arc<Runner>,
        opts: GatewayOptions,
        access: auth::Access,
        conns: Arc<ConnCounts>,
        closing: closing::Watch,
    ) -> Arc<Self> {
        let ids = Arc::new(RequestIds::new(opts.traces.clone()));
        Arc::new(Gateway {
            runner,
            opts,
            access,
            ids,
            latency: Latency::default(),
            conns,
            watchers_dropped: Arc::default(),
            stalls: Arc::default(),
            closing,
        })
    }
}

/// The routes inside what every request passes on its way in: its name,
/// then the check of its key (where keys or a token are configured).
/// Wrapped around the router as a whole, not layered onto each route:
/// axum boxes a route's future once more for every layer on it, on every
/// request. Every handler reads its body with its own bound (an
/// OpenAI-shaped 413), so axum's default body limit has nothing to do.
type App = request_key::Tagged<auth::Checked<Router>>;

/// Work that runs beside the routes while the gateway serves.
type Beside = Vec<futures_util::future::BoxFuture<'static, ()>>;

/// `gw`'s routes behind its door, and the work they need beside them (to
/// be spawned).
fn app(gw: Arc<Gateway>) -> (App, Beside) {
    let mut beside: Beside = Vec::new();
    if let Some(fleet) = gw.opts.fleet.clone() {
        let (keys, closing) = (follow_keys(gw.clone(), fleet), gw.closing.draining());
        beside.push(Box::pin(async move {
            tokio::select! {
                () = keys => {}
                () = closing => {}
            }
        }));
    }
    let router = Router::new()
        .route("/v1/chat/completions", post(chat::completions))
        .route("/chat/completions", post(chat::completions))
        .route("/v1/messages", post(chat::messages))
        .route("/v1/responses", post(chat::responses))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics::metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/_fusebox/commands", post(command))
        .route("/_fusebox/snapshot", get(live::snapshot))
        .route("/_fusebox/snapshots", get(live::snapshots))
        .route("/_fusebox/events", get(live::events));
    let router = match gw.opts.mcp.clone() {
        Some(upstreams) => {
            let (mcp, sweep) = mcp::endpoint(&gw, upstreams, gw.opts.mcp_limits);
            beside.push(Box::pin(sweep));
            router
                .route_service("/mcp", mcp.clone())
                .route_service("/mcp/{*rest}", mcp)
        }
        None => router,
    };
    let routes = router.fallback(not_found).with_state(gw.clone());
    let door = auth::Checked {
        gw: gw.access.checks().then_some(gw),
        inner: routes,
    };
    (request_key::Tag::default().layer(door), beside)
}

/// How often an instance reads the fleet's keys: a revoked key stops
/// working everywhere within this (and a round trip).
const KEYS_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

/// Keeps the gateway's keys those of the fleet (and their users' budgets
/// theirs); while Redis is unreachable the last ones read stay.
async fn follow_keys(gw: Arc<Gateway>, fleet: Arc<crate::fleet::Fleet>) {
    let mut last = None;
    loop {
        match fleet.shared_keys().await {
            Ok(shared) if last.as_ref() != Some(&shared) => {
                gw.access.refresh(gw.runner.config(), &shared);
                for k in shared.keys.values() {
                    if let Some(own) = k.budgets {
                        gw.runner.budgets().set_own(&k.user, own);
                    }
                }
                last = Some(shared);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "the fleet's keys cannot be read now"),
        }
        tokio::time::sleep(KEYS_EVERY).await;
    }
}

/// A gateway serving.
pub struct Serving {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// What its operator should know of who may do what, said at start.
    pub notes: Vec<String>,
    /// Closes it, losing no request.
    pub closer: closing::Closer,
}

/// Binds `addr`, serves the gateway in a spawned task and returns the bound
/// address. Off loopback every door needs a credential: calls a caller key
/// (in a fleet, one in its store by now) unless anonymous calls are
/// allowed, admin endpoints an operator token, or both the one token.
pub async fn spawn(runner: Arc<Runner>, addr: &str, opts: GatewayOptions) -> anyhow::Result<Serving> {
    let listener = accept::listen(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr()?;
    let access = auth::Access::new(runner.config(), opts.auth_token.clone(), opts.fleet.is_some());
    if let Some(fleet) = &opts.fleet {
        let shared = fleet
            .shared_keys()
            .await
            .map_err(|e| anyhow::anyhow!("cannot read the fleet's caller keys: {e}"))?;
        access.refresh(runner.config(), &shared);
    }
    if let Some(why) = access.open_door(opts.allow_anonymous).filter(|_| needs_token(&local)) {
        anyhow::bail!(
            "{local} is not a loopback address: {why} (--auth-token-env VAR names a variable that holds a token)"
        );
    }
    let notes = access.notes();
    for n in &notes {
        tracing::warn!("{n}");
    }
    let limits = opts.conns;
    let counts = Arc::new(ConnCounts::default());
    let (closer, watch) = closing::Closer::new(runner.clone());
    let stop = watch.draining();
    let (app, beside) = app(Gateway::new(runner, opts, access, counts.clone(), watch));
    for work in beside {
        tokio::spawn(work);
    }
    tokio::spawn(accept::serve(listener, app, limits, counts, stop));
    tracing::info!(%local, "gateway listening");
    Ok(Serving {
        addr: local,
        notes,
        closer,
    })
}

/// `f`'s output, or `None` if the gateway's drain time ends first (then
/// `f` is dropped: a request ends in its outcome as when its client goes).
async fn until_cut<T>(gw: &Gateway, f: impl std::future::Future<Output = T>) -> Option<T> {
    gw.closing.until_cut(f).await
}

/// `GET /v1/models`: every route and every model, as OpenAI model objects;
/// `fusebox.kind` says which each id is (`route` with its chain, `model`
/// with its provider and the models it falls back to when named).
async fn models(State(gw): Shared) -> Response {
    let r = &gw.runner;
    let names = |chain: &[usize]| {
        chain
            .iter()
            .map(|&m| r.catalog().models()[m].name.to_string())
            .collect::<Vec<_>>()
    };
    let mut routes: Vec<_> = r.catalog().routes().values().collect();
    routes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut data: Vec<_> = routes
        .iter()
        .map(|route| {
            json!({"id": route.name, "object": "model", "created": 0, "owned_by": "fusebox",
                   "fusebox": {"kind": "route", "chain": names(&route.chain)}})
        })
        .collect();
    for m in r.catalog().models() {
        let Some(route) = r.catalog().model_routes().get(&*m.name) else {
            continue;
        };
        if r.catalog().routes().contains_key(&*m.name) {
            continue;
        }
        let provider = &r.catalog().providers()[m.provider].name;
        data.push(
            json!({"id": m.name, "object": "model", "created": 0, "owned_by": provider,
                         "fusebox": {"kind": "model", "provider": provider, "api_name": m.api_name,
                                     "fallbacks": names(&route.chain[1..])}}),
        );
    }
    Json(json!({"object": "list", "data": data})).into_response()
}

/// Liveness: the process answers.
async fn healthz() -> &'static str {
    "ok\n"
}

/// Readiness: this process can take a request — it is not closing and
/// has descriptors left for both client connections and upstream calls
/// (with every connection busy the probe's own is refused at accept,
/// which a probe counts as not ready). Upstream
/// health is not readiness: while every model's breaker is open this
/// instance still answers (fallbacks, deferral, clear 503s), and taking
/// every instance out of rotation would turn those into refused
/// connections. It is on `/metrics` and `/_fusebox/snapshot`.
async fn readyz(State(gw): Shared) -> Response {
    let unready = |why: String| (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")).into_response();
    if gw.closing.phase() != closing::Phase::Open {
        return unready("shutting down".into());
    }
    if let Some(what) = crate::descriptors::spent() {
        return unready(format!("overloaded: every descriptor for {what} is in use"));
    }
    (StatusCode::OK, "ready\n").into_response()
}

/// The largest operator command body.
const MAX_COMMAND_BYTES: usize = 64 * 1024;

/// `POST /_fusebox/commands`: an operator command (the console's actions as
/// JSON, e.g. `{"action":"force_open","target":"provider:openai"}`), issued
/// by the `x-fusebox-operator` header's name. Behind the same token as the
/// rest of the gateway.
async fn command(State(gw): Shared, req: axum::extract::Request) -> Result<Response, GatewayError> {
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    if gw.opts.readonly {
        return Err(GatewayError::openai(
            StatusCode::FORBIDDEN,
            "this gateway runs --readonly: operator commands are refused (restart it without --readonly to allow them)",
        ));
    }
    let body = error::read_body(body, MAX_COMMAND_BYTES, crate::wire::Api::Chat).await?;
    // An operator token names its holder; else the header does.
    let by = match parts.extensions.get::<Arc<auth::Operator>>() {
        Some(op) => Issuer::operator(&op.name),
        None => Issuer::operator(
            headers
                .get(crate::wire::fusebox::OPERATOR)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("api"),
        ),
    };
    let cmd: Command = match serde_json::from_slice(&body) {
        Ok(c) => c,
        Err(e) => {
            gw.runner
                .operations()
                .refuse(&String::from_utf8_lossy(&body), &by, &e.to_string());
            // A target no target can be is the target's fault.
            let target = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| Some(Target::parse_provider(v.get("target")?.as_str()?).is_err()));
            let why = format!("not a command ({e}); e.g. {{\"action\":\"force_open\",\"target\":\"provider:openai\"}}");
            return Err(
                GatewayError::openai(StatusCode::BAD_REQUEST, why).param(target.unwrap_or(false).then_some("target"))
            );
        }
    };
    match gw.runner.operations().command(&cmd, &by).await {
        Ok(()) => Ok(Json(json!({"applied": cmd})).into_response()),
        Err(e) => Err(GatewayError::openai(StatusCode::BAD_REQUEST, e.to_string()).param(Some(&e.field()))),
    }
}

async fn not_found(uri: axum::http::Uri) -> GatewayError {
    GatewayError::openai(
        StatusCode::NOT_FOUND,
        format!(
            "no route {uri}: fusebox serves POST /v1/chat/completions, POST /v1/messages, POST /v1/responses, POST /v1/embeddings, GET /v1/models, /metrics, /healthz, /readyz"
        ),
    )
}

/// A `text/event-stream` answer: not cached, not buffered by a proxy in
/// front (`x-accel-buffering: no`), so each event reaches the client as
/// it is written.
fn event_stream(body: axum::body::Body) -> axum::response::Response {
    use axum::http::{header, HeaderName, HeaderValue};
    const ACCEL_BUFFERING: HeaderName = HeaderName::from_static("x-accel-buffering");
    let mut resp = answer(body, "text/event-stream");
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(ACCEL_BUFFERING, HeaderValue::from_static("no"));
    resp
}

/// A response of `body` and its content type, its header map made once
/// with room for every header an answer carries (its own, the outcome's,
/// its request's name), not grown on the way.
fn answer(body: axum::body::Body, content_type: &'static str) -> axum::response::Response {
    use axum::http::{header, HeaderValue};
    let mut resp = axum::response::Response::new(body);
    let h = resp.headers_mut();
    h.reserve(8);
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
