//! `POST /v1/chat/completions`: parse, resolve the route, run the call
//! through the runner, answer in the OpenAI wire format (JSON or SSE).
//!
//! The answer is complete before the first byte goes out: a provider that
//! fails mid-stream is retried or replaced by the next model of the chain
//! without the client noticing, and the status code and `x-fusebox-*`
//! headers always describe what really happened.

use super::{error, Gateway, Shared};
use crate::mockserver::openai;
use crate::mockserver::wire::{self, WireCall};
use crate::mockserver::{Answer, Ctx, Flavor, Timing};
use crate::runner::chat::{Chat, ChatEnd, ChatRequest};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::atomic::Ordering;
use std::time::Instant;

pub(super) const H_LEVEL: &str = "x-fusebox-level";
pub(super) const H_CHAIN: &str = "x-fusebox-chain";
pub(super) const H_QUALITY: &str = "x-fusebox-quality";
pub(super) const H_ATTEMPTS: &str = "x-fusebox-attempts";
const H_USER: &str = "x-fusebox-user";
const H_SESSION: &str = "x-fusebox-session";

pub(super) async fn completions(axum::extract::State(gw): Shared, req: Request) -> Response {
    let arrived = Instant::now();
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, gw.opts.max_body).await {
        Ok(b) => b,
        Err(_) => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body is larger than {} bytes", gw.opts.max_body),
                None,
            )
        }
    };
    let call = match wire::parse(Flavor::OpenAi, &parts.headers, &body) {
        Ok(c) => c,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e.message, e.field.as_deref()),
    };
    let Some(route) = resolve(&gw, &call.req.model) else {
        let mut known: Vec<&str> = gw.runner.routes().keys().map(String::as_str).collect();
        known.sort_unstable();
        return error(
            StatusCode::NOT_FOUND,
            &format!(
                "model `{}` is neither a route nor a model of one; routes: {} (GET /v1/models lists all)",
                call.req.model,
                known.join(", ")
            ),
            Some("model"),
        );
    };
    let req = chat_request(&gw, &parts.headers, &call, route);
    let (id, stream, include_usage) = (req.id, call.stream, call.include_usage);
    // Dropped with this handler when the client disconnects: the upstream
    // call is cancelled and its reservations released (see `Runner::chat`).
    let chat = gw.runner.chat(req).await;
    gw.latency.observe(arrived.elapsed());
    respond(id, chat, stream, include_usage)
}

/// The route a requested model names: a route by name, else the first route
/// (by name) whose chain starts with that model, else one that contains it.
fn resolve(gw: &Gateway, model: &str) -> Option<String> {
    let r = &gw.runner;
    if r.routes().contains_key(model) {
        return Some(model.to_string());
    }
    let mi = r.models().iter().position(|m| m.name.as_ref() == model)?;
    let mut routes: Vec<(&String, usize)> = r
        .routes()
        .iter()
        .filter_map(|(name, route)| route.chain.iter().position(|&m| m == mi).map(|pos| (name, pos)))
        .collect();
    routes.sort_by_key(|&(name, pos)| (pos, name.clone()));
    routes.first().map(|(name, _)| name.to_string())
}

fn chat_request(gw: &Gateway, headers: &HeaderMap, call: &WireCall, route: String) -> ChatRequest {
    let header = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    let user = call
        .user
        .clone()
        .or_else(|| header(H_USER).map(str::to_string))
        .unwrap_or_else(|| "anonymous".to_string());
    let id = gw.next_id.fetch_add(1, Ordering::Relaxed);
    // Session quotas (steps, concurrency, tokens per conversation) apply to
    // the conversations an agent names; an unnamed call is a session of its
    // own, or every call of a user would add up to one endless conversation.
    let session = header(H_SESSION).map_or_else(|| format!("{user}/call-{id}"), str::to_string);
    ChatRequest {
        id,
        user,
        session,
        route,
        messages: call.req.messages.clone(),
        tools: call.req.tools.clone(),
        max_tokens: call.req.max_tokens,
    }
}

/// Header-safe text: hop labels use symbols (✓ ✗ ⊘ …) that HTTP header
/// values cannot carry as such.
fn ascii_hop(label: &str) -> String {
    label
        .replace(" ✓", " ok")
        .replace(" ✗", " failed ")
        .replace(" ⊘", " skipped ")
        .replace(" ⏳", " skipped ")
        .replace(" ⌛", " skipped ")
        .replace('×', " x")
        .chars()
        .filter(|c| c.is_ascii() && !c.is_ascii_control())
        .collect()
}

fn respond(id: u64, chat: Chat, stream: bool, include_usage: bool) -> Response {
    let o = &chat.outcome;
    let mut meta = HeaderMap::new();
    let chain: Vec<String> = o.chain.iter().map(|l| ascii_hop(l)).collect();
    for (name, value) in [
        (H_LEVEL, o.level.as_str().to_string()),
        (H_CHAIN, chain.join(", ")),
        (H_QUALITY, format!("{:.2}", o.quality)),
        (H_ATTEMPTS, o.attempts.to_string()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            meta.insert(HeaderName::from_static(name), v);
        }
    }
    let mut resp = match chat.end {
        ChatEnd::Answer { response, model } => {
            let ctx = Ctx::openai(id, &model, include_usage);
            let answer = Answer::new(&response.text, &response.tool_calls, response.usage);
            if stream {
                let sse: Vec<u8> = openai::stream(&ctx, &answer, &Timing::IMMEDIATE)
                    .into_iter()
                    .flat_map(|b| b.data)
                    .collect();
                (
                    [
                        (header::CONTENT_TYPE, "text/event-stream"),
                        (header::CACHE_CONTROL, "no-cache"),
                    ],
                    Body::from(sse),
                )
                    .into_response()
            } else {
                Json(openai::completion(&ctx, &answer)).into_response()
            }
        }
        ChatEnd::Refused { reason, retry_after } | ChatEnd::RateLimited { reason, retry_after } => {
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, &reason, None);
            if let Ok(v) = HeaderValue::from_str(&retry_after.as_secs().max(1).to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
            r
        }
        ChatEnd::Unavailable { message } => error(StatusCode::SERVICE_UNAVAILABLE, &message, None),
    };
    resp.headers_mut().extend(meta);
    resp
}
