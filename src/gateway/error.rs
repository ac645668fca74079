//! A request the gateway answers with an error, in the client's API:
//! handlers return `Result<Response, GatewayError>` and use `?`, and every
//! error response is written here.

use crate::wire::Api;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::time::Duration;

/// An error answer: its status and message in the client's API, the
/// request field it names, when to retry, and whether the connection
/// closes after it.
#[derive(Debug)]
pub(super) struct GatewayError {
    api: Api,
    status: StatusCode,
    message: String,
    param: Option<String>,
    retry_after: Option<Duration>,
    close: bool,
    /// The upstream's own error body, in the client's API: sent as it was.
    own: Option<Bytes>,
}

impl GatewayError {
    /// `status` with `message`, in `api`'s error shape.
    pub(super) fn new(api: Api, status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            api,
            status,
            message: message.into(),
            param: None,
            retry_after: None,
            close: false,
            own: None,
        }
    }

    /// A 400 naming the field at fault.
    pub(super) fn bad_request(api: Api, message: impl Into<String>, param: &str) -> Self {
        Self::new(api, StatusCode::BAD_REQUEST, message).param(Some(param))
    }

    /// An OpenAI-shaped error (the gateway's own endpoints speak it).
    pub(super) fn openai(status: StatusCode, message: impl Into<String>) -> Self {
        Self::new(Api::Chat, status, message)
    }

    /// The upstream's refusal of the client's own request: its status and,
    /// when it is in the client's API, its own body.
    pub(super) fn upstream(api: Api, e: &crate::provider::ProviderError) -> Self {
        let status = e
            .status
            .and_then(|s| StatusCode::from_u16(s).ok())
            .unwrap_or(StatusCode::BAD_REQUEST);
        let mut err = Self::new(api, status, e.message.clone());
        err.own = e
            .body
            .as_ref()
            .filter(|(kind, _)| api.takes_as_sent(*kind))
            .map(|(_, body)| body.clone());
        err
    }

    /// Names the request field at fault.
    pub(super) fn param(mut self, param: Option<&str>) -> Self {
        self.param = param.map(str::to_string);
        self
    }

    /// Says when to retry (`Retry-After`, whole seconds, at least 1).
    pub(super) fn retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Closes the connection after the answer: given before the request
    /// body was read whole (too large, unreadable), so that no client
    /// sends its next request on a connection the gateway is leaving.
    pub(super) fn closing(mut self) -> Self {
        self.close = true;
        self
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let mut resp = match self.own {
            Some(body) => (
                self.status,
                [(header::CONTENT_TYPE, "application/json")],
                Body::from(body),
            )
                .into_response(),
            None => {
                let body = self
                    .api
                    .error_body(self.status.as_u16(), &self.message, self.param.as_deref());
                (self.status, axum::Json(body)).into_response()
            }
        };
        if let Some(after) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(after.as_secs().max(1)));
        }
        if self.close {
            resp = closing(resp);
        }
        resp
    }
}

/// Reads a request body of at most `max` bytes: 413 when it is longer, 408
/// when it did not arrive in time, 400 when it cannot be read (a malformed
/// chunked encoding, a cut body); the connection closes after any.
pub(super) async fn read_body(body: Body, max: usize, api: Api) -> Result<Bytes, GatewayError> {
    read_bytes(body, max)
        .await
        .map_err(|(status, why)| GatewayError::new(api, status, why).closing())
}

/// [`read_body`], the refusal's status and words left to the caller's
/// protocol to write.
pub(super) async fn read_bytes(body: Body, max: usize) -> Result<Bytes, (StatusCode, String)> {
    axum::body::to_bytes(body, max).await.map_err(|e| {
        let causes = || std::iter::successors(std::error::Error::source(&e), |s| s.source());
        let too_long = causes().any(|s| s.is::<http_body_util::LengthLimitError>());
        if let Some(late) = causes().find_map(|s| s.downcast_ref::<super::conns::BodyTimeout>()) {
            return (
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s (the gateway's --body-timeout-s); send it whole at once",
                    late.0.as_secs()
                ),
            );
        }
        if too_long {
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body is larger than {max} bytes"),
            )
        } else {
            (
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {e}"),
            )
        }
    })
}

/// `r`, closing the connection after it (see [`GatewayError::closing`]).
pub(super) fn closing(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{ErrorKind, ProviderError};

    async fn read(r: Response) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
        let (parts, body) = r.into_parts();
        let bytes = axum::body::to_bytes(body, 1 << 16).await.unwrap();
        (parts.status, parts.headers, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn an_error_is_written_in_the_client_s_api_with_its_retry_and_close() {
        let e = GatewayError::new(Api::Messages, StatusCode::TOO_MANY_REQUESTS, "slow down")
            .retry_after(Duration::from_millis(300))
            .closing();
        let (status, h, body) = read(e.into_response()).await;
        assert_eq!(status, 429);
        assert_eq!(h["retry-after"], "1", "whole seconds, at least 1");
        assert_eq!(h["connection"], "close");
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "rate_limit_error");
        assert_eq!(body["error"]["message"], "slow down");
        let (status, h, body) = read(GatewayError::bad_request(Api::Responses, "no", "input").into_response()).await;
        assert_eq!(status, 400);
        assert!(h.get("retry-after").is_none() && h.get("connection").is_none());
        assert_eq!(body["error"]["param"], "input");
        assert_eq!(body["error"]["message"], "no");
    }

    #[tokio::test]
    async fn an_upstream_refusal_keeps_its_status_and_its_body_only_in_the_client_s_api() {
        let mut e = ProviderError::new(ErrorKind::BadRequest, Some(422), "bad tools");
        e.body = Some((Api::Chat, Bytes::from_static(br#"{"error":{"message":"theirs"}}"#)));
        let (status, _, body) = read(GatewayError::upstream(Api::Chat, &e).into_response()).await;
        assert_eq!((status.as_u16(), &body["error"]["message"]), (422, &"theirs".into()));
        let (status, _, body) = read(GatewayError::upstream(Api::Messages, &e).into_response()).await;
        assert_eq!(status, 422);
        assert_eq!(
            body["error"]["message"], "bad tools",
            "an OpenAI body is not an Anthropic client's"
        );
        assert_eq!(body["type"], "error");
        let (_, _, body) = read(GatewayError::upstream(Api::Responses, &e).into_response()).await;
        assert_eq!(body["error"]["message"], "bad tools", "no upstream speaks Responses");
    }
}
