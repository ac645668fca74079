//! The Gemini API client: `models/{model}:generateContent`, whole, or
//! `:streamGenerateContent?alt=sse`; the key in `x-goog-api-key`. Bodies
//! are rendered and read by [`crate::wire::gemini`]. Google sends no
//! rate-limit headers: a quota error's `RetryInfo` delay is its signal.

use super::http::{open_stream, read_body, stream_error_kind, with_ids, Endpoint, SseStream};
use super::{ErrorKind, LlmRequest, LlmResponse, Opened, Provider, ProviderError, WireAnswer};
use crate::clock::Clock;
use crate::resilience::limiter::RateFeedback;
use crate::wire::gemini::{parse_reply, render_request, Status};
use crate::wire::Api;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;
use std::sync::Arc;

/// A Gemini API provider.
pub struct GeminiClient {
    http: reqwest::Client,
    ep: Endpoint,
    /// `x-goog-api-key: KEY`, made once.
    key: Option<HeaderValue>,
    clock: Clock,
}

const API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");

impl GeminiClient {
    /// A client for `ep`, whose URL is the API's base with its version
    /// (`https://generativelanguage.googleapis.com/v1beta`).
    pub fn new(http: reqwest::Client, ep: Endpoint, clock: Clock) -> Self {
        Self {
            key: ep.key.as_ref().and_then(|k| k.header("")),
            http,
            ep,
            clock,
        }
    }

    /// The URL of a call to `model` (a bare name is one of `models/`).
    fn url(&self, model: &str, stream: bool) -> String {
        let base = self.ep.url.trim_end_matches('/');
        let path = if model.contains('/') { "" } else { "models/" };
        match stream {
            true => format!("{base}/{path}{model}:streamGenerateContent?alt=sse"),
            false => format!("{base}/{path}{model}:generateContent"),
        }
    }
}

#[async_trait::async_trait]
impl Provider for GeminiClient {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        self.open(req).await?.whole().await
    }

    async fn open(&self, req: &LlmRequest) -> Result<Opened, ProviderError> {
        let name = &self.ep.name;
        let start = self.clock.now();
        let out = req.outgoing(self.ep.stream);
        let body = render_request(&out).map_err(|why| ProviderError::new(ErrorKind::Unsupported, None, why))?;
        let mut b = with_ids(self.http.post(self.url(&req.model, out.stream)), req)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(k) = &self.key {
            b = b.header(API_KEY, k.clone());
        }
        let (resp, fd) = super::http::send(name, b).await?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let body = read_body(name, resp).await.unwrap_or_default();
            return Err(status_error(name, status, &body));
        }
        if out.stream {
            let stream = SseStream::gemini(name, (resp, fd), self.ep.idle);
            return open_stream(stream, RateFeedback::default(), req, &self.clock, start).await;
        }
        let body = read_body(name, resp).await?;
        let v: Value = serde_json::from_slice(&body).map_err(|e| {
            ProviderError::new(
                ErrorKind::Truncated,
                None,
                format!("{name}: unreadable response body: {e}"),
            )
        })?;
        let r = parse_reply(&v);
        let usage = r.usage.unwrap_or_default();
        let elapsed = self.clock.now().saturating_duration_since(start);
        let mut resp = LlmResponse::measured(Arc::from(r.text), r.tool_calls, usage, RateFeedback::default(), elapsed);
        resp.wire = Some(Box::new(WireAnswer {
            kind: Api::Chat,
            id: r.id,
            model: r.model,
            finish: r.finish,
            reasoning: r.reasoning,
            refusal: r.refusal,
            // No client takes Google's body as sent.
            body: None,
            skipped: 0,
        }));
        Ok(Opened::Whole(resp))
    }
}

/// An error answer: its kind from what the body names, its `RetryInfo`
/// delay as the limiter's retry-after. The body is not passed on (no
/// client reads Google's errors); its message is.
fn status_error(name: &str, status: u16, body: &[u8]) -> ProviderError {
    let read = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| Status::read(&v));
    let (kind, message, delay) = match read {
        Some(s) => {
            let kind = match s.error_type() {
                "api_error" => ErrorKind::from_status(status),
                t => stream_error_kind(t),
            };
            (kind, s.said(), s.retry_delay)
        }
        None => (
            ErrorKind::from_status(status),
            String::from_utf8_lossy(&body[..body.len().min(300)]).trim().to_string(),
            None,
        ),
    };
    let mut e = ProviderError::new(kind, Some(status), format!("{name}: HTTP {status}: {message}"));
    e.retry_after = delay;
    e.rate = RateFeedback {
        retry_after: delay,
        ..RateFeedback::default()
    }
    .boxed();
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quota error is rate limiting with its delay; an invalid key the
    /// operator's (auth, not retried); a body that is no Status is read
    /// by its HTTP status.
    #[test]
    fn error_answers_are_classified_by_what_google_says() {
        let quota = br#"{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"2s"}]}}"#;
        let e = status_error("g", 429, quota);
        assert_eq!(
            (e.kind, e.retry_after),
            (ErrorKind::RateLimited, Some(std::time::Duration::from_secs(2)))
        );
        assert!(e.body.is_none(), "no Google body is passed on");
        let key = br#"{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}"#;
        assert_eq!(status_error("g", 400, key).kind, ErrorKind::Auth);
        assert!(!ErrorKind::Auth.retryable());
        assert_eq!(status_error("g", 503, b"<html>").kind, ErrorKind::Overloaded);
        let internal = br#"{"error":{"code":500,"message":"x","status":"INTERNAL"}}"#;
        assert_eq!(status_error("g", 500, internal).kind, ErrorKind::ServerError);
    }
}
