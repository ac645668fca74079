//! The client APIs' extractors: a request's body read within the
//! gateway's bound and parsed in its API, its `model` one the gateway
//! knows and the caller may use. A refusal is a [`GatewayError`] in the
//! client's API.

use super::auth::Caller;
use super::error::{read_body, GatewayError};
use super::Gateway;
use crate::limits::MAX_NAME_LEN;
use crate::wire::{Api, Request};
use axum::extract::FromRequest;
use axum::http::request::Parts;
use axum::http::StatusCode;
use bytes::Bytes;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

/// A client API, as a type: which [`Api`] an extractor reads.
pub(super) trait ClientApi: Send {
    /// The API.
    const API: Api;
}

/// OpenAI chat completions.
pub(super) struct Completions;
/// Anthropic messages.
pub(super) struct Messages;
/// OpenAI Responses.
pub(super) struct Responses;

impl ClientApi for Completions {
    const API: Api = Api::Chat;
}
impl ClientApi for Messages {
    const API: Api = Api::Messages;
}
impl ClientApi for Responses {
    const API: Api = Api::Responses;
}

/// A model call a client asked for in API `A`.
pub(super) struct Asked<A> {
    /// When the request arrived, before its body was read.
    pub arrived: Instant,
    /// Its head: headers, and what the doors before found (the caller).
    pub parts: Parts,
    /// Its body as sent.
    pub body: Bytes,
    /// Its body read.
    pub request: Request,
    api: PhantomData<A>,
}

impl<A: ClientApi> FromRequest<Arc<Gateway>> for Asked<A> {
    type Rejection = GatewayError;

    async fn from_request(req: axum::extract::Request, gw: &Arc<Gateway>) -> Result<Self, GatewayError> {
        let (arrived, api) = (Instant::now(), A::API);
        let (parts, body) = req.into_parts();
        let body = read_body(body, gw.opts.max_body, api).await?;
        let mut request = api
            .parse(&body)
            .map_err(|e| GatewayError::new(api, StatusCode::BAD_REQUEST, e.message).param(e.field.as_deref()))?;
        request.params.headers = api.own_headers(&parts.headers);
        usable_model(gw, api, &parts, &request.model)?;
        Ok(Self {
            arrived,
            parts,
            body,
            request,
            api: PhantomData,
        })
    }
}

/// `Ok` if `model` is a name the gateway knows and the caller of `parts`
/// may use; else the refusal, in `api`'s words.
pub(super) fn usable_model(gw: &Gateway, api: Api, parts: &Parts, model: &str) -> Result<(), GatewayError> {
    if model.len() > MAX_NAME_LEN {
        let why = format!("model is longer than {MAX_NAME_LEN} bytes");
        return Err(GatewayError::bad_request(api, why, "model"));
    }
    if gw.runner.catalog().route_for(model).is_none() {
        let mut known: Vec<&str> = gw.runner.catalog().routes().keys().map(String::as_str).collect();
        known.sort_unstable();
        let why = format!(
            "model `{model}` is neither a route nor a configured model; routes: {} (GET /v1/models lists all)",
            known.join(", ")
        );
        return Err(GatewayError::new(api, StatusCode::NOT_FOUND, why).param(Some("model")));
    }
    match Caller::of(&parts.extensions).and_then(|c| c.refusal(model)) {
        Some(why) => Err(GatewayError::new(api, StatusCode::FORBIDDEN, why).param(Some("model"))),
        None => Ok(()),
    }
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
