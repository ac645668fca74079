//! What the mock answers with besides a completion: errors, quota
//! refusals, cut connections, event streams, and their headers.

use super::conn::ConnHandle;
use super::quota::Exhausted;
use super::Provider;
use crate::mockserver::{anthropic, play, quota};
use crate::provider::mock::MockReply;
use crate::wire::Api;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::time::Duration;

pub(super) fn plan_label(plan: &MockReply) -> &'static str {
    match plan {
        MockReply::Answer { .. } => "answer",
        MockReply::Status { .. } => "status",
        MockReply::Timeout => "timeout",
        MockReply::Refused => "refused",
        MockReply::Reset { .. } => "reset",
        MockReply::Truncated { .. } => "truncated",
    }
}

pub(super) fn request_id_header(provider: Provider) -> &'static str {
    match provider.api() {
        Api::Messages => "request-id",
        _ => "x-request-id",
    }
}

pub(super) fn put(h: &mut HeaderMap, name: &'static str, value: String) {
    if let Ok(v) = HeaderValue::try_from(value) {
        h.insert(name, v);
    }
}

/// `retry-after` (whole seconds, rounded up) and `retry-after-ms`.
pub(super) fn retry_after_headers(h: &mut HeaderMap, d: Duration) {
    put(h, "retry-after", d.as_millis().div_ceil(1_000).to_string());
    put(h, "retry-after-ms", d.as_millis().to_string());
}

/// An error in the provider's shape, with `headers`.
pub(super) fn error_response(
    provider: Provider,
    code: u16,
    message: &str,
    param: Option<&str>,
    headers: HeaderMap,
) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = match provider.api() {
        Api::Messages => anthropic::error(code, message),
        _ => crate::wire::openai::error(code, message, param),
    };
    (status, headers, Json(body)).into_response()
}

/// The server's own 429 when a quota cannot take a request.
pub(super) fn quota_exhausted(provider: Provider, ex: Exhausted) -> Response {
    let mut headers = HeaderMap::new();
    ex.snapshot.write_headers(&mut headers);
    let message = match ex.retry_after {
        Some(d) => {
            retry_after_headers(&mut headers, d);
            format!(
                "Rate limit reached for {} per minute. Please try again in {}.",
                ex.what,
                quota::go_duration(d)
            )
        }
        None => format!("Request too large: it exceeds the limit of {} per minute.", ex.what),
    };
    error_response(provider, 429, &message, None, headers)
}

/// Ends the exchange without a response: closes (FIN) or resets (RST) the
/// connection; without a connection handle, fails the body instead.
pub(super) fn cut(conn: Option<&ConnHandle>, reset: bool) -> Response {
    match conn {
        Some(c) => {
            if reset {
                c.reset();
            } else {
                c.close();
            }
            // Never reaches the client: every write on the connection now fails.
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
        None => (StatusCode::OK, play::failing_body()).into_response(),
    }
}

pub(super) fn sse_response(mut headers: HeaderMap, body: Body) -> Response {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    (StatusCode::OK, headers, body).into_response()
}
