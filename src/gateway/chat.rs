//! `POST /v1/chat/completions`, `POST /v1/messages` and `POST
//! /v1/responses`: read the client's request in its API, find what its
//! `model` names, run the call through the runner, and answer in the
//! client's API: the upstream's own body when a model of the client's API
//! answered, a translation otherwise.

use super::auth::Caller;
use super::client_api::Client;
use super::error::GatewayError;
use super::extract::{name_in, Asked, ClientApi, Completions, Messages, Responses};
use super::reply::respond;
use super::{Gateway, Shared};
use crate::config::Priority;
use crate::runner::chat::ChatRequest;
use crate::wire::{fusebox, responses, Api, Request};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use std::sync::Arc;

/// The longest deadline a client may ask for: an hour.
const MAX_DEADLINE_MS: u64 = 3_600_000;

/// A request's answer, or the error it ends in.
type Answer = Result<Response, GatewayError>;

pub(super) async fn completions(State(gw): Shared, asked: Asked<Completions>) -> Answer {
    handle(gw, asked).await
}

pub(super) async fn messages(State(gw): Shared, asked: Asked<Messages>) -> Answer {
    handle(gw, asked).await
}

pub(super) async fn responses(State(gw): Shared, asked: Asked<Responses>) -> Answer {
    handle(gw, asked).await
}

async fn handle<A: ClientApi>(gw: Arc<Gateway>, asked: Asked<A>) -> Answer {
    let (
        api,
        Asked {
            arrived,
            parts,
            body,
            request,
            ..
        },
    ) = (A::API, asked);
    let caller = Caller::of(&parts.extensions);
    let stream = request.stream;
    let client = Client {
        api,
        include_usage: request.include_usage,
        echo: (api == Api::Responses).then(|| responses::Echo::of(&body)),
    };
    let key = parts
        .extensions
        .get::<super::request_key::RequestKey>()
        .map(|k| compact_str::CompactString::from(&*k.0));
    let req = chat_request(&gw, &parts.headers, request, caller.as_deref(), key)
        .map_err(|(field, why)| GatewayError::bad_request(api, why, field))?;
    // The call's future is boxed, so this handler's own stays small: axum
    // boxes the handler's, and a future is moved whole, every byte of its
    // largest state.
    if stream {
        return Ok(Box::pin(super::stream::streamed(gw, client, req)).await);
    }
    let id = req.id;
    // Dropped with this handler when the client disconnects (or the
    // gateway's drain time is over): the upstream call is cancelled and its
    // reservations released (see `Runner::chat`).
    let Some(chat) = super::until_cut(&gw, Box::pin(gw.runner.chat(req, None))).await else {
        return Err(GatewayError::new(
            api,
            StatusCode::SERVICE_UNAVAILABLE,
            super::closing::CUT,
        ));
    };
    gw.latency.observe(arrived.elapsed());
    Ok(respond(&client, id, chat, false))
}

/// What a caller's `x-fusebox-*` headers say (the first value of each),
/// found in one pass over its headers rather than by one lookup each.
#[derive(Default)]
struct Said<'a> {
    user: Option<&'a [u8]>,
    session: Option<&'a [u8]>,
    fallback: Option<&'a [u8]>,
    deadline_ms: Option<&'a [u8]>,
    priority: Option<&'a [u8]>,
}

impl<'a> Said<'a> {
    fn of(headers: &'a HeaderMap) -> Self {
        let mut said = Self::default();
        for (name, value) in headers {
            let slot = match name.as_str() {
                n if !n.starts_with(fusebox::PREFIX) => continue,
                fusebox::USER => &mut said.user,
                fusebox::SESSION => &mut said.session,
                fusebox::FALLBACK => &mut said.fallback,
                fusebox::DEADLINE_MS => &mut said.deadline_ms,
                fusebox::PRIORITY => &mut said.priority,
                _ => continue,
            };
            slot.get_or_insert(value.as_bytes());
        }
        said
    }
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
    let said = Said::of(headers);
    let given = match name_in("user", asked.params.user.as_deref().map(str::as_bytes))? {
        Some(u) => Some(u),
        None => name_in(fusebox::USER, said.user)?,
    };
    let billed = Caller::user_of(caller, given);
    // Session quotas (steps, concurrency, tokens per conversation) apply to
    // the conversations an agent names; an unnamed call is a conversation of
    // its own, or every call of a user would add up to one endless one.
    let session = name_in(fusebox::SESSION, said.session)?;
    let fallback = !said
        .fallback
        .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"none"));
    let deadline_ms = match said.deadline_ms {
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
    let priority = priority_of(gw, said.priority, caller, &billed.user, &asked.model)?;
    // A key's calls are its user's share; without one, the operator's edge
    // may name the tenant in the header the config says.
    let tenant = match (&gw.runner.config().limiter.queue.tenant_header, caller) {
        (Some(h), None) => name_in(TENANT_HEADER, headers.get(h.as_str()).map(HeaderValue::as_bytes))?,
        _ => None,
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
        priority,
        tenant,
    })
}

/// How a bad tenant header is named (the header is the config's).
const TENANT_HEADER: &str = "the tenant header ([limiter.queue] tenant_header)";

/// A call's priority: what `x-fusebox-priority` asks for, else its
/// route's, no more urgent than its key allows (without keys, than the
/// operator gives its tenant or route); `None` where that is its route's.
fn priority_of(
    gw: &Gateway,
    asked: Option<&[u8]>,
    caller: Option<&Caller>,
    user: &str,
    route: &str,
) -> Result<Option<Priority>, (&'static str, String)> {
    let asked = match asked {
        None => None,
        Some(v) => Some(
            std::str::from_utf8(v)
                .ok()
                .and_then(|s| Priority::parse(s.trim()))
                .ok_or((
                    fusebox::PRIORITY,
                    format!("{} is one of critical, default or batch", fusebox::PRIORITY),
                ))?,
        ),
    };
    let Some(caller) = caller else {
        return Ok(gw.runner.priority_for(user, asked, route));
    };
    let of_route = gw
        .runner
        .catalog()
        .route_for(route)
        .map(|r| r.cfg.priority)
        .unwrap_or_default();
    let p = asked.unwrap_or(of_route).max(caller.priority);
    Ok((p != of_route).then_some(p))
}

/// Output tokens reserved for a call whose client set no cap.
const DEFAULT_ESTIMATE: u32 = 4_096;
