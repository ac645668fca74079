//! The Anthropic client: `/v1/messages`, whole or streamed; bodies are
//! rendered and read by [`crate::wire::anthropic`], rate-limit headers by
//! [`crate::wire::headers`].

use super::http::{
    header_getter, open_stream, post, read_body, says_rate, status_error, unusable_key, with_ids, Endpoint, SentKey,
    SseStream, JSON,
};
use super::upstream::KnownUrl;
use super::{ErrorKind, LlmRequest, LlmResponse, Opened, Provider, ProviderError, WireAnswer};
use crate::clock::Clock;
use crate::resilience::limiter::RateFeedback;
use crate::wire::anthropic::{parse_reply, render_request};
use crate::wire::headers::anthropic_feedback;
use crate::wire::Api;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;
use std::sync::Arc;

pub use crate::wire::anthropic::VERSION;

/// An Anthropic provider.
pub struct AnthropicClient {
    http: super::upstream::Upstream,
    ep: Endpoint,
    /// Its URL, parsed once.
    url: Option<KnownUrl>,
    /// `x-api-key: KEY`.
    key: SentKey,
    clock: Clock,
}

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");

impl AnthropicClient {
    /// A client for `ep`.
    pub fn new(http: super::upstream::Upstream, ep: Endpoint, clock: Clock) -> Self {
        Self {
            url: KnownUrl::parse(&ep.url),
            key: SentKey::new(ep.key.as_ref(), API_KEY, ""),
            http,
            ep,
            clock,
        }
    }
}

#[async_trait::async_trait]
impl Provider for AnthropicClient {
    fn wire(&self) -> Option<Api> {
        Some(Api::Messages)
    }

    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        self.open(req).await?.whole().await
    }

    async fn open(&self, req: &LlmRequest) -> Result<Opened, ProviderError> {
        let name = &self.ep.name;
        let start = self.clock.now();
        let out = req.outgoing(self.ep.stream);
        let body = render_request(&out).map_err(|why| ProviderError::new(ErrorKind::Unsupported, None, why))?;
        let mut call = with_ids(post(&self.ep, self.url.as_ref())?, req)
            .header(reqwest::header::CONTENT_TYPE, JSON)
            .body(body);
        // The client's `anthropic-version` stands in for fusebox's own.
        let theirs = out.client_headers(Api::Messages);
        if !theirs.iter().any(|(k, _)| *k == ANTHROPIC_VERSION) {
            call = call.header(ANTHROPIC_VERSION, HeaderValue::from_static(VERSION));
        }
        for (k, v) in theirs {
            call = call.header(k.clone(), v.clone());
        }
        let call = self.key.on(call).ok_or_else(|| unusable_key(name))?;
        let (resp, fd) = self.http.send(name, call).await?;
        let status = resp.status().as_u16();
        let rate = match says_rate(resp.headers(), "anthropic-ratelimit-") {
            true => anthropic_feedback(&header_getter(resp.headers()), self.clock.wall_ms()),
            false => RateFeedback::default(),
        };
        if !(200..300).contains(&status) {
            let body = read_body(name, resp).await.unwrap_or_default();
            let named = serde_json::from_slice::<Value>(&body).ok().and_then(|v| {
                v.pointer("/error/type")
                    .and_then(Value::as_str)
                    .map(super::http::stream_error_kind)
            });
            let mut e = status_error(name, status, body, Api::Messages, rate);
            // A client error keeps its status's kind unless the body names
            // a more specific one (`request_too_large`).
            if (status == 400 || status == 413) && named == Some(ErrorKind::TooLarge) {
                e.kind = ErrorKind::TooLarge;
            }
            return Err(e);
        }
        if out.stream {
            let stream = SseStream::new(name, (resp, fd), self.ep.idle, Api::Messages);
            return open_stream(stream, rate, req, &self.clock, start).await;
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
        let mut resp = LlmResponse::measured(Arc::from(r.text), r.tool_calls, usage, rate, elapsed);
        resp.wire = Some(Box::new(WireAnswer {
            kind: Api::Messages,
            id: r.id,
            model: r.model,
            finish: r.finish,
            reasoning: r.reasoning,
            refusal: r.refusal,
            body: Some(body),
            skipped: 0,
        }));
        Ok(Opened::Whole(resp))
    }
}
