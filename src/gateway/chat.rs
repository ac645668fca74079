//! `POST /v1/chat/completions`, `POST /v1/messages` and `POST
//! /v1/responses`: read the client's request in its API, find what its
//! `model` names, run the call through the runner, and answer in the
//! client's API: the upstream's own body when a model of the client's API
//! answered, a translation otherwise.

use super::auth::Caller;
use super::{Gateway, Shared};
use crate::limits::MAX_NAME_LEN;
use crate::runner::chat::{Chat, ChatEnd, ChatRequest};
use crate::wire::{anthropic, fusebox, openai, responses, BadRequest, Request, WireKind};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The longest deadline a client may ask for: an hour.
const MAX_DEADLINE_MS: u64 = 3_600_000;

/// The API a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Api {
    /// OpenAI chat completions.
    Chat,
    /// Anthropic messages.
    Messages,
    /// OpenAI responses (no upstream speaks it: always translated).
    Responses,
}

impl Api {
    /// The upstream API whose answers this client takes as sent.
    pub(super) fn wire(self) -> Option<WireKind> {
        match self {
            Api::Chat => Some(WireKind::OpenAi),
            Api::Messages => Some(WireKind::Anthropic),
            Api::Responses => None,
        }
    }

    fn parse(self, body: &[u8]) -> Result<Request, BadRequest> {
        match self {
            Api::Chat => openai::parse_request(body),
            Api::Messages => anthropic::parse_request(body),
            Api::Responses => responses::parse_request(body),
        }
    }

    /// The client's headers that only this API reads, to send on with its
    /// body (every value of each, in order).
    fn own_headers(self, headers: &HeaderMap) -> Vec<(&'static str, HeaderValue)> {
        let names: &[&'static str] = match self {
            Api::Chat => &["openai-beta"],
            Api::Messages => &["anthropic-version", "anthropic-beta"],
            Api::Responses => &[],
        };
        names
            .iter()
            .flat_map(|&n| headers.get_all(n).iter().map(move |v| (n, v.clone())))
            .collect()
    }

    /// An error in this API's shape.
    pub(super) fn error(self, status: StatusCode, message: &str, param: Option<&str>) -> Response {
        let body = match self {
            Api::Chat | Api::Responses => openai::error(status.as_u16(), message, param),
            Api::Messages => anthropic::error(status.as_u16(), message),
        };
        (status, axum::Json(body)).into_response()
    }
}

/// A client: its API and what its answer's form depends on.
#[derive(Clone, Debug)]
pub(super) struct Client {
    pub api: Api,
    /// It asked for usage in its stream (chat completions).
    pub include_usage: bool,
    /// What a Responses answer echoes of the request.
    pub echo: Option<responses::Echo>,
}

pub(super) async fn completions(State(gw): Shared, req: axum::extract::Request) -> Response {
    handle(gw, Api::Chat, req).await
}

pub(super) async fn messages(State(gw): Shared, req: axum::extract::Request) -> Response {
    handle(gw, Api::Messages, req).await
}

pub(super) async fn responses(State(gw): Shared, req: axum::extract::Request) -> Response {
    handle(gw, Api::Responses, req).await
}

async fn handle(gw: Arc<Gateway>, api: Api, req: axum::extract::Request) -> Response {
    let arrived = Instant::now();
    let (parts, body) = req.into_parts();
    let body = match super::read_body(body, gw.opts.max_body).await {
        Ok(b) => b,
        Err((status, why)) => return super::closing(api.error(status, &why, None)),
    };
    let mut asked = match api.parse(&body) {
        Ok(r) => r,
        Err(e) => return api.error(StatusCode::BAD_REQUEST, &e.message, e.field.as_deref()),
    };
    asked.params.headers = api.own_headers(&parts.headers);
    if asked.model.len() > MAX_NAME_LEN {
        let why = format!("model is longer than {MAX_NAME_LEN} bytes");
        return api.error(StatusCode::BAD_REQUEST, &why, Some("model"));
    }
    if gw.runner.route_for(&asked.model).is_none() {
        return unknown_model(&gw, api, &asked.model);
    }
    let caller = Caller::of(&parts.extensions);
    if let Some(why) = caller.as_ref().and_then(|c| c.refusal(&asked.model)) {
        return api.error(StatusCode::FORBIDDEN, &why, Some("model"));
    }
    let stream = asked.stream;
    let client = Client {
        api,
        include_usage: asked.include_usage,
        echo: (api == Api::Responses).then(|| responses::Echo::of(&body)),
    };
    let key = parts
        .extensions
        .get::<super::request_key::RequestKey>()
        .map(|k| compact_str::CompactString::from(&*k.0));
    let req = match chat_request(&gw, &parts.headers, asked, caller.as_deref(), key) {
        Ok(r) => r,
        Err((field, why)) => return api.error(StatusCode::BAD_REQUEST, &why, Some(field)),
    };
    if stream {
        return super::stream::streamed(gw, client, req).await;
    }
    let id = req.id;
    // Dropped with this handler when the client disconnects (or the
    // gateway's drain time is over): the upstream call is cancelled and its
    // reservations released (see `Runner::chat`).
    let Some(chat) = super::until_cut(&gw, gw.runner.chat(req, None)).await else {
        return api.error(StatusCode::SERVICE_UNAVAILABLE, super::closing::CUT, None);
    };
    gw.latency.observe(arrived.elapsed());
    respond(&client, id, chat, false)
}

fn unknown_model(gw: &Gateway, api: Api, model: &str) -> Response {
    let mut known: Vec<&str> = gw.runner.routes().keys().map(String::as_str).collect();
    known.sort_unstable();
    api.error(
        StatusCode::NOT_FOUND,
        &format!(
            "model `{model}` is neither a route nor a configured model; routes: {} (GET /v1/models lists all)",
            known.join(", ")
        ),
        Some("model"),
    )
}

/// A name a client gives (user, session): text of at most [`MAX_NAME_LEN`]
/// bytes; `Err` names the field and why not.
pub(super) fn name_in(field: &'static str, value: Option<&[u8]>) -> Result<Option<String>, (&'static str, String)> {
    let Some(v) = value else { return Ok(None) };
    let Ok(s) = std::str::from_utf8(v) else {
        return Err((field, format!("{field} is not UTF-8 text")));
    };
    if s.len() > MAX_NAME_LEN {
        return Err((field, format!("{field} is longer than {MAX_NAME_LEN} bytes")));
    }
    Ok(Some(s.to_string()))
}

/// The runner's call for what a client `asked`, made as `caller` where a
/// key let it in.
fn chat_request(
    gw: &Gateway,
    headers: &HeaderMap,
    asked: Request,
    caller: Option<&Caller>,
    key: Option<compact_str::CompactString>,
) -> Result<ChatRequest, (&'static str, String)> {
    let header = |name| headers.get(name).map(HeaderValue::as_bytes);
    let given = match name_in("user", asked.params.user.as_deref().map(str::as_bytes))? {
        Some(u) => Some(u),
        None => name_in(fusebox::USER, header(fusebox::USER))?,
    };
    let billed = Caller::user_of(caller, given);
    // Beyond any model's output, and beyond what a recording holds.
    let max = crate::traffic::log::MAX_TOKENS;
    if let Some(cap) = asked.params.max_tokens.filter(|&c| c > max) {
        return Err((
            "max_tokens",
            format!("max_tokens {cap} is more than {max}, beyond any model's output"),
        ));
    }
    // Session quotas (steps, concurrency, tokens per conversation) apply to
    // the conversations an agent names; an unnamed call is a conversation of
    // its own, or every call of a user would add up to one endless one.
    let session = name_in(fusebox::SESSION, header(fusebox::SESSION))?;
    let fallback = !header(fusebox::FALLBACK).is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"none"));
    let deadline_ms = match header(fusebox::DEADLINE_MS) {
        None => None,
        Some(v) => match std::str::from_utf8(v).ok().and_then(|s| s.trim().parse::<u64>().ok()) {
            Some(ms) if (1..=MAX_DEADLINE_MS).contains(&ms) => Some(ms),
            _ => {
                return Err((
                    fusebox::DEADLINE_MS,
                    format!(
                        "{} is milliseconds, a whole number from 1 to {MAX_DEADLINE_MS}",
                        fusebox::DEADLINE_MS
                    ),
                ))
            }
        },
    };
    let id = gw.ids.next(headers);
    Ok(ChatRequest {
        id,
        user: billed.user,
        sub_user: billed.sub_user,
        session,
        route: asked.model,
        messages: asked.messages.into(),
        tools: asked.tools.into(),
        // The estimate when the client set no cap; then none is sent.
        max_tokens: asked.params.max_tokens.unwrap_or(DEFAULT_ESTIMATE),
        params: Arc::new(asked.params),
        stream: asked.stream,
        fallback,
        reach: caller.and_then(|c| c.reach(&gw.runner)),
        deadline_ms,
        key,
    })
}

/// Output tokens reserved for a call whose client set no cap.
const DEFAULT_ESTIMATE: u32 = 4_096;

/// Unix seconds now (the `created` of an answer fusebox writes).
pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Writes the outcome as the `x-fusebox-*` headers say it: level and
/// chain, and quality and attempts where given.
pub(super) fn outcome_headers(
    h: &mut HeaderMap,
    level: crate::outcome::Level,
    chain: &[crate::outcome::Hop],
    more: Option<(f64, u32)>,
) {
    use std::fmt::Write as _;
    h.insert(
        HeaderName::from_static(fusebox::LEVEL),
        HeaderValue::from_static(level.as_str()),
    );
    let mut hops = String::with_capacity(chain.iter().map(|h| h.name.len() + 12).sum());
    for (i, hop) in chain.iter().enumerate() {
        if i > 0 {
            hops.push_str(", ");
        }
        let _ = write!(hops, "{}", hop.ascii());
    }
    // Printable ASCII only, so always a valid value.
    if let Ok(v) = HeaderValue::try_from(hops) {
        h.insert(HeaderName::from_static(fusebox::CHAIN), v);
    }
    if let Some((quality, attempts)) = more {
        if let Ok(v) = HeaderValue::try_from(format!("{quality:.2}")) {
            h.insert(HeaderName::from_static(fusebox::QUALITY), v);
        }
        h.insert(HeaderName::from_static(fusebox::ATTEMPTS), HeaderValue::from(attempts));
    }
}

/// The whole response for a call whose client's stream (if it asked for
/// one) never started.
pub(super) fn respond(client: &Client, id: u64, chat: Chat, stream: bool) -> Response {
    let api = client.api;
    let o = &chat.outcome;
    let mut meta = HeaderMap::new();
    outcome_headers(&mut meta, o.level, &o.chain, Some((o.quality, o.attempts)));
    let mut resp = match chat.end {
        ChatEnd::Answer { response, model } | ChatEnd::Streamed { response, model, .. } => {
            let wire = response.wire.as_deref();
            if let Some(body) = wire
                .filter(|w| Some(w.kind) == api.wire() && !stream)
                .and_then(|w| w.body.clone())
            {
                // The upstream's own answer, as it sent it.
                ([(header::CONTENT_TYPE, "application/json")], Body::from(body)).into_response()
            } else {
                let mut reply = response.reply();
                if reply.id.is_empty() {
                    reply.id = match api {
                        Api::Chat => format!("chatcmpl-{:016x}", crate::clock::mix(id)),
                        Api::Messages | Api::Responses => format!("msg_{:016x}", crate::clock::mix(id)),
                    };
                }
                if reply.model.is_empty() {
                    reply.model = model;
                }
                if stream {
                    sse(written(client, id, &reply))
                } else {
                    let body = match api {
                        Api::Chat => openai::render_reply(&frame(&reply), &reply),
                        Api::Messages => anthropic::render_reply(&reply.id, &reply.model, &reply),
                        Api::Responses => responses::render_reply(
                            &responses::Ids::new(crate::clock::mix(id)),
                            client.echo.as_ref().unwrap_or(&responses::Echo::default()),
                            unix_now(),
                            &reply,
                        ),
                    };
                    axum::Json(body).into_response()
                }
            }
        }
        ChatEnd::Refused { reason, retry_after } | ChatEnd::RateLimited { reason, retry_after } => {
            let mut r = api.error(StatusCode::TOO_MANY_REQUESTS, &reason, None);
            if let Ok(v) = HeaderValue::from_str(&retry_after.as_secs().max(1).to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            r
        }
        ChatEnd::Unavailable { message } => api.error(StatusCode::SERVICE_UNAVAILABLE, &message, None),
        ChatEnd::Unservable { reason, param } => api.error(StatusCode::BAD_REQUEST, &reason, param),
        ChatEnd::Upstream(e) => upstream_error(api, &e),
        ChatEnd::Cut { reason, .. } => api.error(StatusCode::BAD_GATEWAY, &reason, None),
    };
    resp.headers_mut().extend(meta);
    resp
}

/// The upstream's refusal of the client's request: its status and, in the
/// client's API, its own body.
fn upstream_error(api: Api, e: &crate::provider::ProviderError) -> Response {
    let status = e
        .status
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::BAD_REQUEST);
    match &e.body {
        Some((kind, body)) if Some(*kind) == api.wire() => (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from(body.clone()),
        )
            .into_response(),
        _ => api.error(status, &e.message, None),
    }
}

fn frame(reply: &crate::wire::Reply) -> openai::Frame {
    openai::Frame {
        id: reply.id.clone(),
        model: reply.model.clone(),
        created: unix_now(),
        dialect: openai::Dialect::OpenAi,
    }
}

/// A whole answer written as a stream in the client's API.
fn written(client: &Client, id: u64, reply: &crate::wire::Reply) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = super::stream::Writer::new(client, id, &reply.id, &reply.model);
    reply.deltas().iter().for_each(|d| w.write(d, &mut out));
    out
}

fn sse(body: impl Into<Body>) -> Response {
    super::event_stream(body.into())
}
