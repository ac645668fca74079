//! `POST /v1/embeddings`: the client's body, passed on with its model
//! replaced, through the named model's breakers, its provider's limiter and
//! the user's budgets (one attempt; no fallback, as another model's vectors
//! would not compare). The upstream's answer comes back as it sent it.

use super::auth::Caller;
use super::chat::{name_in, outcome_headers, Api};
use super::Shared;
use crate::request::CHARS_PER_TOKEN;
use crate::runner::embed::{EmbedCall, EmbedEnd};
use crate::wire::{fusebox, RawBody};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::sync::Arc;

/// Characters to embed in an `input`, or why it is not one.
fn chars(input: Option<&Value>) -> Result<usize, &'static str> {
    let count = |v: &Value| match v {
        Value::String(s) => Some(s.len()),
        // Token ids, counted back into characters.
        Value::Number(n) if n.is_u64() => Some(CHARS_PER_TOKEN),
        Value::Array(tokens) if tokens.iter().all(Value::is_u64) => Some(tokens.len() * CHARS_PER_TOKEN),
        _ => None,
    };
    match input {
        None | Some(Value::Null) => Err("field required"),
        Some(Value::Array(items)) if items.is_empty() => Err("must not be empty"),
        Some(Value::Array(items)) if items.iter().all(Value::is_u64) => Ok(items.len() * CHARS_PER_TOKEN),
        Some(Value::Array(items)) => items
            .iter()
            .map(count)
            .sum::<Option<usize>>()
            .ok_or("expected a string, an array of strings or of token arrays"),
        Some(v) => count(v).ok_or("expected a string, an array of strings or of token arrays"),
    }
}

pub(super) async fn embeddings(State(gw): Shared, req: axum::extract::Request) -> Response {
    let api = Api::Chat;
    let (parts, body) = req.into_parts();
    let bytes = match super::read_body(body, gw.opts.max_body).await {
        Ok(b) => b,
        Err((status, why)) => return super::closing(api.error(status, &why, None)),
    };
    let Ok(raw) = RawBody::parse(&bytes) else {
        return api.error(StatusCode::BAD_REQUEST, "request body must be a JSON object", None);
    };
    let model = match raw.read::<Value>("model") {
        Some(Ok(Value::String(m))) if !m.is_empty() => m,
        _ => return api.error(StatusCode::BAD_REQUEST, "model: field required", Some("model")),
    };
    let input = raw.read::<Value>("input").and_then(Result::ok);
    let chars = match chars(input.as_ref()) {
        Ok(c) => c,
        Err(why) => return api.error(StatusCode::BAD_REQUEST, &format!("input: {why}"), Some("input")),
    };
    if gw.runner.route_for(&model).is_none() {
        let msg = format!("model `{model}` is neither a route nor a configured model (GET /v1/models lists all)");
        return api.error(StatusCode::NOT_FOUND, &msg, Some("model"));
    }
    let given = match raw.read::<Value>("user") {
        Some(Ok(Value::String(u))) => name_in("user", Some(u.as_bytes())),
        _ => name_in(fusebox::USER, parts.headers.get(fusebox::USER).map(|v| v.as_bytes())),
    };
    let caller = Caller::of(&parts.extensions);
    if let Some(why) = caller.as_ref().and_then(|c| c.refusal(&model)) {
        return api.error(StatusCode::FORBIDDEN, &why, Some("model"));
    }
    let billed = match given {
        Ok(u) => Caller::user_of(caller.as_deref(), u),
        Err((field, why)) => return api.error(StatusCode::BAD_REQUEST, &why, Some(field)),
    };
    let call = EmbedCall {
        id: gw.ids.next(&parts.headers),
        user: billed.user,
        sub_user: billed.sub_user,
        model,
        body: Arc::new(raw),
        chars,
    };
    let Some(done) = super::until_cut(&gw, gw.runner.embed(call)).await else {
        return api.error(StatusCode::SERVICE_UNAVAILABLE, super::closing::CUT, None);
    };
    let mut resp = match done.end {
        EmbedEnd::Answer(e) => ([(header::CONTENT_TYPE, "application/json")], Body::from(e.body)).into_response(),
        // No wait would let it through: the client's to change, not to retry.
        EmbedEnd::Refused(e) if e.never() => api.error(StatusCode::BAD_REQUEST, &e.to_string(), Some("input")),
        EmbedEnd::Refused(e) => {
            let mut r = api.error(StatusCode::TOO_MANY_REQUESTS, &e.to_string(), None);
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(e.retry_after().as_secs()));
            r
        }
        EmbedEnd::Unavailable(why) => api.error(StatusCode::SERVICE_UNAVAILABLE, &why, None),
        EmbedEnd::Failed(e) => match (&e.body, e.status) {
            (Some((_, body)), Some(s)) if e.client_fault() => (
                StatusCode::from_u16(s).unwrap_or(StatusCode::BAD_REQUEST),
                [(header::CONTENT_TYPE, "application/json")],
                Body::from(body.clone()),
            )
                .into_response(),
            _ => api.error(StatusCode::BAD_GATEWAY, &e.message, None),
        },
    };
    let o = &done.outcome;
    outcome_headers(resp.headers_mut(), o.level, &o.chain, None);
    resp
}
