//! The OpenAI-compatible client (OpenAI, DeepSeek, vLLM, llama.cpp, Ollama):
//! `/chat/completions`, whole or streamed (SSE with
//! `stream_options.include_usage`); bodies are rendered and read by
//! [`crate::wire::openai`], rate-limit headers by [`crate::wire::headers`].

use super::http::{
    header_getter, open_stream, post, read_body, says_rate, status_error, with_ids, Endpoint, SseStream,
};
use super::{
    EmbedRequest, Embedded, ErrorKind, LlmRequest, LlmResponse, Opened, Provider, ProviderError, Usage, WireAnswer,
};
use crate::clock::Clock;
use crate::resilience::limiter::RateFeedback;
use crate::wire::headers::{openai_feedback, retry_after};
use crate::wire::openai::{read_reply, render_request, Dialect};
use crate::wire::Api;
use reqwest::header::HeaderValue;
use serde_json::Value;
use std::sync::Arc;

/// An OpenAI-compatible provider.
pub struct OpenAiClient {
    http: reqwest::Client,
    ep: Endpoint,
    url: Option<reqwest::Url>,
    /// `Bearer KEY`, made once (a key that is no header value is sent as
    /// given, for the request to fail on it).
    auth: Option<HeaderValue>,
    dialect: Dialect,
    clock: Clock,
}

/// A JSON body's content type.
const JSON: HeaderValue = HeaderValue::from_static("application/json");

impl OpenAiClient {
    /// A client for `ep`.
    pub fn new(http: reqwest::Client, ep: Endpoint, dialect: Dialect, clock: Clock) -> Self {
        Self {
            auth: ep.key.as_ref().and_then(|k| k.header("Bearer ")),
            url: reqwest::Url::parse(&ep.url).ok(),
            http,
            ep,
            dialect,
            clock,
        }
    }

    fn feedback(&self, h: &reqwest::header::HeaderMap) -> RateFeedback {
        if !says_rate(h, "x-ratelimit-") {
            return RateFeedback::default();
        }
        let get = header_getter(h);
        match self.dialect {
            Dialect::OpenAi | Dialect::Compatible => openai_feedback(&get, self.clock.wall_ms()),
            Dialect::DeepSeek => RateFeedback {
                retry_after: retry_after(&get, self.clock.wall_ms()),
                ..RateFeedback::default()
            },
        }
    }
}

#[async_trait::async_trait]
impl Provider for OpenAiClient {
    fn wire(&self) -> Option<Api> {
        Some(Api::Chat)
    }

    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        self.call(req).await?.whole().await
    }

    async fn embed(&self, req: &EmbedRequest) -> Result<Embedded, ProviderError> {
        let name = &self.ep.name;
        let Some(url) = self
            .ep
            .url
            .strip_suffix("/chat/completions")
            .filter(|_| self.dialect != Dialect::DeepSeek)
        else {
            return Err(ProviderError::new(
                ErrorKind::Unsupported,
                None,
                format!("{name} has no embeddings endpoint"),
            ));
        };
        let model = crate::wire::raw::to_raw(&&*req.model);
        let body = req.body.render(&[("model", &model)], &[]);
        let mut b = self
            .http
            .post(format!("{url}/embeddings"))
            .header(crate::wire::fusebox::REQUEST, req.request_id.to_string())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(k) = &self.ep.key {
            b = b.bearer_auth(k.expose());
        }
        let (resp, _fd) = super::http::send(name, b).await?;
        let status = resp.status().as_u16();
        let rate = self.feedback(resp.headers());
        let body = read_body(name, resp).await?;
        if !(200..300).contains(&status) {
            return Err(status_error(name, status, body, Api::Chat, rate));
        }
        let v: Value = serde_json::from_slice(&body).map_err(|e| {
            ProviderError::new(
                ErrorKind::Truncated,
                None,
                format!("{name}: unreadable response body: {e}"),
            )
        })?;
        let input = v
            .pointer("/usage/prompt_tokens")
            .and_then(Value::as_u64)
            .map_or(crate::request::tokens_in_chars(req.chars), |t| {
                t.min(u64::from(u32::MAX)) as u32
            });
        Ok(Embedded {
            body,
            usage: Usage {
                input,
                ..Usage::default()
            },
            rate,
        })
    }

    async fn open(&self, req: &LlmRequest) -> Result<Opened, ProviderError> {
        self.call(req).await
    }
}

impl OpenAiClient {
    /// One call, answered whole or opened as a stream (a plain future, so
    /// a whole call's boxed future holds it in place rather than a second box).
    async fn call(&self, req: &LlmRequest) -> Result<Opened, ProviderError> {
        let name = &self.ep.name;
        let start = self.clock.now();
        let out = req.outgoing(self.ep.stream);
        let body =
            render_request(&out, self.dialect).map_err(|why| ProviderError::new(ErrorKind::Unsupported, None, why))?;
        let mut b = with_ids(post(&self.http, &self.ep, self.url.as_ref()), req)
            .header(reqwest::header::CONTENT_TYPE, JSON)
            .body(body);
        for (k, v) in out.client_headers(Api::Chat) {
            b = b.header(*k, v.clone());
        }
        b = match (&self.auth, &self.ep.key) {
            (Some(auth), _) => b.header(reqwest::header::AUTHORIZATION, auth.clone()),
            (None, Some(k)) => b.bearer_auth(k.expose()),
            (None, None) => b,
        };
        let (resp, fd) = super::http::send(name, b).await?;
        let status = resp.status().as_u16();
        let rate = self.feedback(resp.headers());
        if !(200..300).contains(&status) {
            let body = read_body(name, resp).await.unwrap_or_default();
            return Err(status_error(name, status, body, Api::Chat, rate));
        }
        if out.stream {
            let stream = SseStream::new(name, (resp, fd), self.ep.idle, Api::Chat);
            return open_stream(stream, rate, req, &self.clock, start).await;
        }
        let body = read_body(name, resp).await?;
        // DeepSeek sends empty lines while the request is queued.
        let r = read_reply(body.trim_ascii()).map_err(|e| {
            let kind = if body.is_empty() {
                ErrorKind::Reset
            } else {
                ErrorKind::Truncated
            };
            ProviderError::new(kind, None, format!("{name}: unreadable response body: {e}"))
        })?;
        let usage = r.usage.unwrap_or_else(|| Usage {
            input: crate::request::tokens_in_chars(req.prompt_chars()),
            output: crate::request::tokens_in_chars(
                r.text.len()
                    + r.tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>(),
            ),
            cached_input: 0,
        });
        let elapsed = self.clock.now().saturating_duration_since(start);
        let mut resp = LlmResponse::measured(Arc::from(r.text), r.tool_calls, usage, rate, elapsed);
        // DeepSeek's keep-alive lines are not part of the answer.
        let start = body.len() - body.trim_ascii_start().len();
        let body = body.slice(start..start + body.trim_ascii().len());
        resp.wire = Some(Box::new(WireAnswer {
            kind: Api::Chat,
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
