//! `POST /v1/embeddings`: the client's body, passed on with its model
//! replaced, through the named model's breakers, its provider's limiter and
//! the user's budgets (one attempt; no fallback, as another model's vectors
//! would not compare). The upstream's answer comes back as it sent it.

use super::auth::Caller;
use super::error::{read_body, GatewayError};
use super::extract::{name_in, usable_model};
use super::reply::outcome_headers;
use super::{Gateway, Shared};
use crate::provider::ErrorKind;
use crate::request::CHARS_PER_TOKEN;
use crate::runner::embed::{EmbedCall, EmbedEnd};
use crate::wire::{fusebox, Api, RawBody};
use axum::body::Body;
use axum::extract::{FromRequest, State};
use axum::http::{header, StatusCode};
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

/// An embeddings call a client asked for: its body read, with a `model`
/// the gateway knows and the caller may use, and an `input` to embed.
pub(super) struct Embed {
    parts: axum::http::request::Parts,
    raw: RawBody,
    model: String,
    chars: usize,
}

impl FromRequest<Arc<Gateway>> for Embed {
    type Rejection = GatewayError;

    async fn from_request(req: axum::extract::Request, gw: &Arc<Gateway>) -> Result<Self, GatewayError> {
        let api = Api::Chat;
        let (parts, body) = req.into_parts();
        let bytes = read_body(body, gw.opts.max_body, api).await?;
        let raw = RawBody::parse(&bytes)
            .map_err(|_| GatewayError::new(api, StatusCode::BAD_REQUEST, "request body must be a JSON object"))?;
        let model = match raw.read::<Value>("model") {
            Some(Ok(Value::String(m))) if !m.is_empty() => m,
            _ => return Err(GatewayError::bad_request(api, "model: field required", "model")),
        };
        let input = raw.read::<Value>("input").and_then(Result::ok);
        let chars =
            chars(input.as_ref()).map_err(|why| GatewayError::bad_request(api, format!("input: {why}"), "input"))?;
        usable_model(gw, api, &parts, &model)?;
        Ok(Self {
            parts,
            raw,
            model,
            chars,
        })
    }
}

pub(super) async fn embeddings(State(gw): Shared, asked: Embed) -> Result<Response, GatewayError> {
    let (
        api,
        Embed {
            parts,
            raw,
            model,
            chars,
        },
    ) = (Api::Chat, asked);
    let given = match raw.read::<Value>("user") {
        Some(Ok(Value::String(u))) => name_in("user", Some(u.as_bytes())),
        _ => name_in(
            fusebox::USER,
            parts.headers.get(fusebox::name::USER).map(|v| v.as_bytes()),
        ),
    };
    let caller = Caller::of(&parts.extensions);
    let given = given.map_err(|(field, why)| GatewayError::bad_request(api, why, field))?;
    let billed = Caller::user_of(caller.as_deref(), given);
    let call = EmbedCall {
        id: gw.ids.next(&parts.headers),
        user: billed.user,
        sub_user: billed.sub_user,
        model,
        body: Arc::new(raw),
        chars,
    };
    let Some(done) = super::until_cut(&gw, gw.runner.embed(call)).await else {
        return Err(GatewayError::new(
            api,
            StatusCode::SERVICE_UNAVAILABLE,
            super::closing::CUT,
        ));
    };
    let mut resp = answer(api, done.end).unwrap_or_else(IntoResponse::into_response);
    let o = &done.outcome;
    outcome_headers(resp.headers_mut(), o.level, &o.chain, None);
    Ok(resp)
}

/// How an embeddings call's end is answered.
fn answer(api: Api, end: EmbedEnd) -> Result<Response, GatewayError> {
    match end {
        EmbedEnd::Answer(e) => Ok(([(header::CONTENT_TYPE, "application/json")], Body::from(e.body)).into_response()),
        // No wait would let it through: the client's to change, not to retry.
        EmbedEnd::Refused(e) if e.never() => Err(GatewayError::bad_request(api, e.to_string(), "input")),
        EmbedEnd::Refused(e) => {
            Err(GatewayError::new(api, StatusCode::TOO_MANY_REQUESTS, e.to_string()).retry_after(e.retry_after()))
        }
        EmbedEnd::Unavailable(why) => Err(GatewayError::new(api, StatusCode::SERVICE_UNAVAILABLE, why)),
        EmbedEnd::Failed(e) if e.client_fault() && e.status.is_some() => Err(GatewayError::upstream(api, &e)),
        // Something the model cannot do (token ids to Gemini, `dimensions`
        // to Cohere): the caller's to change, as for a chat call.
        EmbedEnd::Failed(e) if e.kind == ErrorKind::Unsupported => {
            Err(GatewayError::new(api, StatusCode::BAD_REQUEST, e.message))
        }
        EmbedEnd::Failed(e) => Err(GatewayError::new(api, StatusCode::BAD_GATEWAY, e.message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ProviderError;

    fn status(end: EmbedEnd) -> u16 {
        answer(Api::Chat, end)
            .unwrap_or_else(IntoResponse::into_response)
            .status()
            .as_u16()
    }

    #[test]
    fn an_embeddings_failure_ends_as_a_chat_call_s_would() {
        // The upstream refused the request as malformed, without a body of
        // its own: its status, as for a chat call (not a 502).
        let refused = ProviderError::new(ErrorKind::BadRequest, Some(400), "input too long");
        assert_eq!(status(EmbedEnd::Failed(Box::new(refused))), 400);
        let down = ProviderError::new(ErrorKind::ServerError, Some(500), "boom");
        assert_eq!(status(EmbedEnd::Failed(Box::new(down))), 502);
        assert_eq!(status(EmbedEnd::Unavailable("open".into())), 503);
        let cannot = ProviderError::new(ErrorKind::Unsupported, None, "cannot honour dimensions");
        assert_eq!(status(EmbedEnd::Failed(Box::new(cannot))), 400);
    }
}
