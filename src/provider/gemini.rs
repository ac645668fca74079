//! The Gemini API client: `models/{model}:generateContent`, whole, or
//! `:streamGenerateContent?alt=sse`; the key in `x-goog-api-key`. Bodies
//! are rendered and read by [`crate::wire::gemini`]. Google sends no
//! rate-limit headers: a quota error's `RetryInfo` delay is its signal.

use super::http::{open_stream, read_body, with_ids, Endpoint, SseStream};
use super::{ErrorKind, LlmRequest, LlmResponse, Opened, Provider, ProviderError, WireAnswer};
use crate::clock::Clock;
use crate::resilience::limiter::RateFeedback;
use crate::wire::gemini::{error_of, parse_reply, render_request};
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
    let (kind, message, delay) = error_of(status, body);
    let mut e = ProviderError::new(kind, Some(status), format!("{name}: HTTP {status}: {message}"));
    e.retry_after = delay;
    e.rate = RateFeedback {
        retry_after: delay,
        ..RateFeedback::default()
    }
    .boxed();
    e
}
