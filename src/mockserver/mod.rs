//! The HTTP mock server (`fusebox mock`): the wire formats of OpenAI,
//! Anthropic and DeepSeek over real sockets, driven by the same fault model
//! and the same per-call plan ([`MockProvider::plan`]) as the in-process
//! mock, so the real HTTP clients are exercised end to end.
//!
//! Routes (the path decides the wire format and the fault target):
//!
//! | route                                   | format     | fault target         |
//! |-----------------------------------------|------------|----------------------|
//! | `POST /v1/chat/completions`             | OpenAI     | `provider:openai`    |
//! | `POST /chat/completions`, `POST /deepseek/chat/completions` | DeepSeek | `provider:deepseek` |
//! | `POST /v1/messages`                     | Anthropic  | `provider:anthropic` |
//! | `POST /openai/deployments/{d}/{chat/completions,embeddings}?api-version=V`, `POST /openai/v1/{chat/completions,embeddings}` | Azure OpenAI | `provider:azure` |
//!
//! Azure's routes refuse a deployment URL without an `api-version` (404) and
//! a prompt holding [`FILTERED`] as its content filter refuses one (400
//! `content_filter`).
//! | `GET /v1/models`                        | OpenAI list | –                   |
//! | `GET`/`PUT /_fusebox/faults`            | control API | –                   |
//!
//! Determinism: the plan is keyed by the `x-fusebox-request` header (else a
//! hash of the body), `x-fusebox-step` and `x-fusebox-attempt`
//! ([`crate::wire::fusebox`]); a client that retries an identical body
//! without bumping the attempt gets the identical plan.

use crate::clock::{mix, purpose, Seed};
use crate::provider::fault::FaultTable;
use crate::provider::mock::{MockProvider, MockReply, Profile};
use crate::provider::{ToolCall, Usage};
use crate::wire::Api;
use auth::{check_auth, has_api_key, has_bearer, header_str};
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use conn::{ConnHandle, KillableListener};
use quota::{Cost, Quota};
use respond::{
    cut, error_response, plan_label, put, quota_exhausted, request_id_header, retry_after_headers, sse_response,
};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::{sleep_until, Instant};

mod anthropic;
mod auth;
mod conn;
mod control;
mod embeddings;
mod openai;
pub(crate) mod play;
mod quota;
mod respond;
pub(crate) mod wire;

/// The only `anthropic-version` accepted.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Largest request body accepted (larger gets a 413).
const MAX_BODY: usize = 8 << 20;
/// How long a `timeout` fault holds the connection before giving up with a 504.
const HOLD: Duration = Duration::from_secs(3_600);

/// Which provider a route imitates: its API, and within the chat
/// completions API its dialect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Provider {
    /// OpenAI.
    OpenAi,
    /// DeepSeek (OpenAI-compatible, cache counts in usage, no rate-limit headers).
    DeepSeek,
    /// Anthropic.
    Anthropic,
    /// Azure OpenAI (OpenAI's wire at a resource's deployment URLs, the
    /// key in `api-key`).
    Azure,
}

impl Provider {
    /// The provider name (fault target `provider:NAME`).
    fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::DeepSeek => "deepseek",
            Provider::Azure => "azure",
            Provider::Anthropic => "anthropic",
        }
    }

    /// The API it speaks.
    pub(crate) fn api(self) -> Api {
        match self {
            Provider::OpenAi | Provider::DeepSeek | Provider::Azure => Api::Chat,
            Provider::Anthropic => Api::Messages,
        }
    }
}

/// What a response needs to know about its request.
pub(crate) struct Ctx {
    provider: Provider,
    model: String,
    id: String,
    key: u64,
    created: u64,
    include_usage: bool,
}

impl Ctx {
    fn new(seed: Seed, provider: Provider, call: &wire::WireCall) -> Self {
        let r = &call.req;
        let key = mix(r.request_id) ^ (u64::from(r.step) << 48) ^ (u64::from(r.attempt) << 56);
        let key = seed.value(purpose::MOCK, key ^ mix(provider as u64 + 1));
        let id = match provider.api() {
            Api::Messages => format!("msg_{key:016x}"),
            _ => format!("chatcmpl-{key:016x}"),
        };
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            provider,
            model: r.model.to_string(),
            id,
            key,
            created,
            include_usage: call.include_usage,
        }
    }

    /// The frame of an OpenAI-format answer.
    fn openai_frame(&self) -> crate::wire::openai::Frame {
        crate::wire::openai::Frame {
            id: self.id.clone(),
            model: self.model.clone(),
            created: self.created,
            dialect: match self.provider {
                Provider::DeepSeek => crate::wire::openai::Dialect::DeepSeek,
                _ => crate::wire::openai::Dialect::OpenAi,
            },
        }
    }

    /// An answer's content as a reply, its tool calls with this server's ids.
    fn reply(&self, a: &Answer) -> crate::wire::Reply {
        let tool_calls: Vec<ToolCall> = a
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| ToolCall::new(self.tool_id(i), c.name.as_str(), c.arguments.as_str()))
            .collect();
        crate::wire::Reply {
            id: self.id.clone(),
            model: self.model.clone(),
            text: a.text.to_string(),
            finish: Some(if tool_calls.is_empty() {
                crate::wire::Finish::Stop
            } else {
                crate::wire::Finish::ToolCalls
            }),
            tool_calls,
            usage: Some(a.usage),
            ..Default::default()
        }
    }

    /// The id of tool call `i` (`call_…` / `toolu_…`).
    fn tool_id(&self, i: usize) -> String {
        let v = mix(self.key ^ (i as u64 + 1));
        match self.provider.api() {
            Api::Messages => format!("toolu_{v:016x}"),
            _ => format!("call_{v:016x}"),
        }
    }
}

/// The content of an answer.
pub(crate) struct Answer<'a> {
    text: &'a str,
    tool_calls: &'a [ToolCall],
    usage: Usage,
}

/// When an answer's parts are due, from the request's arrival.
pub(crate) struct Timing {
    /// Keep-alives until then.
    stall: Duration,
    /// First token (stall + ttft).
    start: Duration,
    /// Generation time of the whole output.
    gen: Duration,
}

/// One provider behind the server.
struct Backend {
    mock: MockProvider,
    profile: Profile,
    quota: Option<Quota>,
}

impl Backend {
    fn new(name: &str, seed: Seed, faults: &Arc<FaultTable>, quota: Option<Quota>, profile: Option<Profile>) -> Self {
        let profile = profile.unwrap_or_else(|| Profile::for_name(name));
        Self {
            mock: MockProvider::with_profile(name, seed, faults.clone(), profile),
            profile,
            quota,
        }
    }

    /// Rate-limit headers of the quota now, taking nothing.
    fn rate_now(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(q) = &self.quota {
            q.peek().write_headers(&mut h);
        }
        h
    }
}

/// The HTTP mock server: OpenAI, Anthropic and DeepSeek endpoints with
/// per-provider mock plans, rate-limit quotas and a fault-control API.
pub struct MockServer {
    seed: Seed,
    faults: Arc<FaultTable>,
    openai: Backend,
    deepseek: Backend,
    anthropic: Backend,
    azure: Backend,
    /// A call with no credential at all is answered, as a keyless local
    /// server (vLLM, Ollama) answers; a malformed one is still refused.
    keyless: bool,
}

impl MockServer {
    /// A server whose plans derive from `seed` and whose faults live in `faults`.
    pub fn new(seed: Seed, faults: Arc<FaultTable>) -> Arc<Self> {
        Arc::new(Self::with_keys(seed, faults, false))
    }

    /// Like [`MockServer::new`], also answering calls that carry no key
    /// (`fusebox mock`: trying a config without keys).
    pub fn keyless(seed: Seed, faults: Arc<FaultTable>) -> Arc<Self> {
        Arc::new(Self::with_keys(seed, faults, true))
    }

    fn with_keys(seed: Seed, faults: Arc<FaultTable>, keyless: bool) -> Self {
        Self {
            seed,
            openai: Backend::new("openai", seed, &faults, Some(Quota::openai()), None),
            deepseek: Backend::new("deepseek", seed, &faults, None, None),
            anthropic: Backend::new("anthropic", seed, &faults, Some(Quota::anthropic()), None),
            azure: Backend::new("azure", seed, &faults, Some(Quota::openai()), None),
            faults,
            keyless,
        }
    }

    /// A server that answers at once and has no quotas: for measuring the
    /// overhead of the HTTP path, not for behaviour.
    pub fn instant(seed: Seed, faults: Arc<FaultTable>) -> Arc<Self> {
        let p = Some(Profile::INSTANT);
        Arc::new(Self {
            seed,
            openai: Backend::new("openai", seed, &faults, None, p),
            deepseek: Backend::new("deepseek", seed, &faults, None, p),
            anthropic: Backend::new("anthropic", seed, &faults, None, p),
            azure: Backend::new("azure", seed, &faults, None, p),
            faults,
            keyless: false,
        })
    }

    /// The fault table the server reads (and the control API writes).
    pub fn faults(&self) -> &Arc<FaultTable> {
        &self.faults
    }

    fn backend(&self, provider: Provider) -> &Backend {
        match provider {
            Provider::OpenAi => &self.openai,
            Provider::DeepSeek => &self.deepseek,
            Provider::Anthropic => &self.anthropic,
            Provider::Azure => &self.azure,
        }
    }

    /// The routes. Served through [`MockServer::spawn`], connection faults
    /// (refused, reset) cut the socket; served any other way they end the
    /// response with a body error instead.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/v1/chat/completions", post(openai_chat))
            .route("/chat/completions", post(deepseek_chat))
            .route("/deepseek/chat/completions", post(deepseek_chat))
            .route("/v1/messages", post(anthropic_messages))
            .route(
                "/openai/deployments/{deployment}/chat/completions",
                post(azure_deployment_chat),
            )
            .route("/openai/v1/chat/completions", post(azure_chat))
            .route(
                "/openai/deployments/{deployment}/embeddings",
                post(azure_deployment_embeddings),
            )
            .route("/openai/v1/embeddings", post(azure_embeddings))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/models", get(models))
            .route("/_fusebox/faults", get(control::get_faults).put(control::put_faults))
            .fallback(not_found)
            .with_state(self.clone())
    }

    /// Binds `addr` (`"127.0.0.1:0"` for an ephemeral port), serves in a
    /// spawned task and returns the bound address.
    pub async fn spawn(self: &Arc<Self>, addr: &str) -> std::io::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let app = self.router().into_make_service_with_connect_info::<ConnHandle>();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(KillableListener::new(listener), app).await {
                tracing::error!(error = %e, "mock server stopped");
            }
        });
        tracing::info!(%local, "mock server listening");
        Ok(local)
    }

    /// One provider call: auth, parse, plan, quota, then the plan on the wire.
    async fn call(&self, provider: Provider, req: Request) -> Response {
        let arrived = Instant::now();
        let (parts, body) = req.into_parts();
        let conn = parts.extensions.get::<ConnectInfo<ConnHandle>>().map(|c| c.0.clone());
        if let Some(resp) = check_auth(provider, &parts.headers, self.keyless) {
            return resp;
        }
        let backend = self.backend(provider);
        let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
            Ok(b) => b,
            Err(_) => {
                let msg = format!("request body unreadable or larger than {} MiB", MAX_BODY >> 20);
                return error_response(provider, 413, &msg, None, backend.rate_now());
            }
        };
        let call = match wire::parse(provider, &parts.headers, &bytes) {
            Ok(c) => c,
            Err(e) => return error_response(provider, 400, &e.message, e.field.as_deref(), backend.rate_now()),
        };
        if provider == Provider::Azure && bytes.windows(FILTERED.len()).any(|w| w == FILTERED.as_bytes()) {
            return azure_filtered();
        }
        let serving = backend.mock.serve();
        let plan = backend.mock.plan(&call.req);
        tracing::debug!(
            provider = provider.name(),
            request = call.req.request_id,
            step = call.req.step,
            attempt = call.req.attempt,
            stream = call.stream,
            plan = plan_label(&plan),
            "mock server call"
        );
        if plan == MockReply::Refused {
            return cut(conn.as_ref(), false);
        }
        let input = ((call.req.prompt_chars() as f64 / backend.profile.chars_per_token).ceil() as u64).max(1);
        let mut headers = HeaderMap::new();
        if let Some(q) = &backend.quota {
            let generates = matches!(plan, MockReply::Answer { .. } | MockReply::Truncated { .. });
            let cost = Cost {
                requests: 1,
                input: if generates { input } else { 0 },
                output: if generates { u64::from(call.req.max_tokens) } else { 0 },
            };
            match q.take(cost) {
                Ok(mut snap) => {
                    if let MockReply::Status {
                        code: 429,
                        quota: true,
                        retry_after,
                        ..
                    } = &plan
                    {
                        snap.tokens_exhausted = Some(retry_after.unwrap_or(Duration::from_secs(60)));
                    }
                    snap.write_headers(&mut headers);
                }
                Err(ex) => return quota_exhausted(provider, ex),
            }
        }
        let ctx = Ctx::new(self.seed, provider, &call);
        put(&mut headers, request_id_header(provider), ctx.id.clone());
        let exchange = Exchange {
            backend,
            ctx,
            stream: call.stream,
            input: u32::try_from(input).unwrap_or(u32::MAX),
            headers,
            conn,
            arrived,
        };
        served_to_the_end(exchange.play(plan).await, serving)
    }
}

/// A response that counts as served until its body is done: a stream's
/// body plays after its head is sent (and is dropped if its client goes).
fn served_to_the_end(resp: Response, serving: crate::provider::mock::ServedCall) -> Response {
    let streamed = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if !streamed {
        return resp;
    }
    resp.map(|body| {
        Body::from_stream(futures_util::StreamExt::map(body.into_data_stream(), move |chunk| {
            let _served = &serving;
            chunk
        }))
    })
}

/// One call being answered.
struct Exchange<'a> {
    backend: &'a Backend,
    ctx: Ctx,
    stream: bool,
    /// Estimated prompt tokens.
    input: u32,
    /// Response headers so far (rate limits, request id).
    headers: HeaderMap,
    conn: Option<ConnHandle>,
    arrived: Instant,
}

impl Exchange<'_> {
    /// Plays `plan` on the wire.
    async fn play(self, plan: MockReply) -> Response {
        let Exchange {
            backend,
            ctx,
            stream,
            input,
            mut headers,
            conn,
            arrived,
        } = self;
        let provider = ctx.provider;
        match plan {
            MockReply::Answer {
                text,
                tool_calls,
                usage,
                ttft,
                stall,
                tokens_per_s,
            } => {
                let a = Answer {
                    text: &text,
                    tool_calls: &tool_calls,
                    usage,
                };
                answer(&ctx, stream, headers, arrived, &a, (ttft, stall, tokens_per_s)).await
            }
            MockReply::Status {
                code,
                retry_after,
                message,
                delay,
                ..
            } => {
                sleep_until(arrived + delay).await;
                if provider.api() == Api::Messages && code == 529 && stream {
                    let usage = Usage {
                        input,
                        ..Usage::default()
                    };
                    let body = anthropic::overloaded_stream(&ctx, usage, &message);
                    return sse_response(headers, Body::from(body));
                }
                if let Some(ra) = retry_after {
                    retry_after_headers(&mut headers, ra);
                }
                error_response(provider, code, &message, None, headers)
            }
            MockReply::Timeout => {
                sleep_until(arrived + HOLD).await;
                error_response(provider, 504, "Upstream request timed out.", None, headers)
            }
            MockReply::Refused => cut(conn.as_ref(), false),
            MockReply::Reset { delay } => {
                sleep_until(arrived + delay).await;
                cut(conn.as_ref(), true)
            }
            MockReply::Truncated { text, usage, delay } => {
                if stream {
                    let first = Duration::from_millis(backend.profile.ttft_ms).min(delay);
                    let beats = match provider.api() {
                        Api::Messages => anthropic::truncated_stream(&ctx, &text, usage, first, delay),
                        _ => openai::truncated_stream(&ctx, &text, first, delay),
                    };
                    return sse_response(headers, play::script_body(arrived, beats, Some(delay)));
                }
                sleep_until(arrived + delay).await;
                let a = Answer {
                    text: &text,
                    tool_calls: &[],
                    usage,
                };
                let full = match provider.api() {
                    Api::Messages => anthropic::message(&ctx, &a),
                    _ => openai::completion(&ctx, &a),
                }
                .to_string();
                let body = play::half(&full).to_string();
                headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
                (StatusCode::OK, headers, body).into_response()
            }
        }
    }
}

/// Plays an answer: streamed, or whole after its time to first token and
/// generation (given with the stall and the tokens per second).
async fn answer(
    ctx: &Ctx,
    stream: bool,
    mut headers: HeaderMap,
    arrived: Instant,
    a: &Answer<'_>,
    (ttft, stall, tokens_per_s): (Duration, Duration, f64),
) -> Response {
    let provider = ctx.provider;
    let gen = Duration::try_from_secs_f64(f64::from(a.usage.output) / tokens_per_s.max(0.01)).unwrap_or(HOLD);
    let t = Timing {
        stall,
        start: stall + ttft,
        gen,
    };
    if stream {
        let beats = match provider.api() {
            Api::Messages => anthropic::stream(ctx, a, &t),
            _ => openai::stream(ctx, a, &t),
        };
        return sse_response(headers, play::script_body(arrived, beats, None));
    }
    let body = match provider.api() {
        Api::Messages => anthropic::message(ctx, a),
        _ => openai::completion(ctx, a),
    };
    let done = t.start + gen;
    if provider == Provider::DeepSeek && !stall.is_zero() {
        // DeepSeek keeps a waiting non-stream request alive with empty lines.
        let mut beats = play::keepalives(stall, b"\n");
        beats.push(play::Beat {
            at: done,
            data: body.to_string().into(),
        });
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        return (StatusCode::OK, headers, play::script_body(arrived, beats, None)).into_response();
    }
    // An instant answer is not made to wait for the timer's next tick.
    if !done.is_zero() {
        sleep_until(arrived + done).await;
    }
    (StatusCode::OK, headers, Json(body)).into_response()
}

async fn embeddings(State(server): State<Arc<MockServer>>, req: Request) -> Response {
    server.embeddings(Provider::OpenAi, req).await
}

/// The request id a call's plan is keyed by: the header's, else a hash of the body.
fn wire_request_id(headers: &HeaderMap, body: &[u8]) -> u64 {
    header_str(headers, crate::wire::fusebox::REQUEST)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| crate::clock::hash_str(&String::from_utf8_lossy(body)))
}

async fn openai_chat(State(server): State<Arc<MockServer>>, req: Request) -> Response {
    server.call(Provider::OpenAi, req).await
}

async fn deepseek_chat(State(server): State<Arc<MockServer>>, req: Request) -> Response {
    server.call(Provider::DeepSeek, req).await
}

async fn anthropic_messages(State(server): State<Arc<MockServer>>, req: Request) -> Response {
    server.call(Provider::Anthropic, req).await
}

/// Azure OpenAI's v1 API: the deployment named by the body's `model`.
async fn azure_chat(State(server): State<Arc<MockServer>>, req: Request) -> Response {
    server.call(Provider::Azure, req).await
}

/// What Azure's content filter (as this mock has it) refuses in a prompt.
pub const FILTERED: &str = "#content-filter";

/// Azure's answer to a prompt its content filter refused: a 400 saying
/// which category, as Azure words it.
fn azure_filtered() -> Response {
    let flagged = |filtered: bool, severity: &str| json!({"filtered": filtered, "severity": severity});
    let body = json!({"error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
        "type": null,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {
                "hate": flagged(false, "safe"),
                "jailbreak": {"filtered": false, "detected": false},
                "self_harm": flagged(false, "safe"),
                "sexual": flagged(false, "safe"),
                "violence": flagged(true, "medium"),
            },
        },
    }});
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

/// Whether a deployment URL names an `api-version`; without one Azure
/// answers that there is no such resource.
fn unversioned(req: &Request) -> Option<Response> {
    let versioned = req.uri().query().is_some_and(|q| {
        q.split('&')
            .any(|p| p.strip_prefix("api-version=").is_some_and(|v| !v.is_empty()))
    });
    let body = json!({"error": {"code": "404", "message": "Resource not found"}});
    (!versioned).then(|| (StatusCode::NOT_FOUND, Json(body)).into_response())
}

/// A deployment's chat completions URL.
async fn azure_deployment_chat(State(server): State<Arc<MockServer>>, req: Request) -> Response {
    match unversioned(&req) {
        Some(refused) => refused,
        None => server.call(Provider::Azure, req).await,
    }
}

/// Azure OpenAI's v1 embeddings: the deployment named by the body's `model`.
async fn azure_embeddings(State(server): State<Arc<MockServer>>, req: Request) -> Response {
    server.embeddings(Provider::Azure, req).await
}

/// A deployment's embeddings URL.
async fn azure_deployment_embeddings(State(server): State<Arc<MockServer>>, req: Request) -> Response {
    match unversioned(&req) {
        Some(refused) => refused,
        None => server.embeddings(Provider::Azure, req).await,
    }
}

/// `GET /v1/models`: an OpenAI-style list (either provider's credentials accepted).
async fn models(headers: HeaderMap) -> Response {
    if !has_bearer(&headers) && !has_api_key(&headers) {
        return error_response(
            Provider::OpenAi,
            401,
            "You didn't provide an API key. Send it in the Authorization header (Authorization: Bearer KEY).",
            None,
            HeaderMap::new(),
        );
    }
    let model =
        |id: &str, owner: &str| json!({"id": id, "object": "model", "created": 1_715_367_049, "owned_by": owner});
    Json(json!({
        "object": "list",
        "data": [
            model("gpt-4o", "openai"),
            model("claude-haiku", "anthropic"),
            model("deepseek-chat", "deepseek"),
        ],
    }))
    .into_response()
}

async fn not_found(req: Request) -> Response {
    let msg = format!("Unknown request URL: {} {}.", req.method(), req.uri().path());
    let body =
        json!({"error": {"message": msg, "type": "invalid_request_error", "param": null, "code": "unknown_url"}});
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}
