//! Bearer-token auth: required when the gateway listens beyond loopback,
//! compared in constant time so response timing does not leak the token.

use super::{error, Gateway};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use std::net::SocketAddr;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Whether serving `addr` requires an auth token (it is not loopback).
pub fn needs_token(addr: &SocketAddr) -> bool {
    !addr.ip().is_loopback()
}

/// Refuses requests without the configured bearer token (401, OpenAI-shaped).
/// Health probes pass without one.
pub(super) async fn check(State(gw): State<Arc<Gateway>>, req: Request, next: Next) -> Response {
    let Some(token) = &gw.opts.auth_token else {
        return next.run(req).await;
    };
    if matches!(req.uri().path(), "/healthz" | "/readyz") {
        return next.run(req).await;
    }
    // The scheme is case-insensitive (RFC 7235).
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes())
        .filter(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer "))
        .map_or(&[][..], |v| &v[7..]);
    if bool::from(given.ct_eq(token.as_bytes())) {
        next.run(req).await
    } else {
        error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token: send `Authorization: Bearer <token>` with the gateway's token",
            None,
        )
    }
}
