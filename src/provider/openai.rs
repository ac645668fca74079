//! The OpenAI-compatible client (OpenAI, Azure OpenAI, DeepSeek, vLLM,
//! llama.cpp, Ollama): `/chat/completions`, whole or streamed (SSE with
//! `stream_options.include_usage`); bodies are rendered and read by
//! [`crate::wire::openai`], rate-limit headers by [`crate::wire::headers`].
//! Azure OpenAI differs only in where a call goes (its deployment URLs)
//! and how the key is sent (`api-key`).

use super::http::{
    header_getter, open_stream, post, read_body, says_rate, status_error, unusable_key, with_ids, with_request,
    Endpoint, SentKey, SseStream, JSON,
};
use super::upstream::{parse_url, HttpCall};
use super::{
    EmbedRequest, Embedded, ErrorKind, LlmRequest, LlmResponse, Opened, Provider, ProviderError, Usage, WireAnswer,
};
use crate::clock::Clock;
use crate::resilience::limiter::RateFeedback;
use crate::wire::headers::{openai_feedback, retry_after};
use crate::wire::openai::{read_reply, render_request, Dialect};
use crate::wire::Api;
use reqwest::header::HeaderName;
use serde_json::Value;
use std::sync::Arc;

/// An OpenAI-compatible provider.
pub struct OpenAiClient {
    http: super::upstream::Upstream,
    ep: Endpoint,
    /// Its URL, parsed once.
    url: Option<super::upstream::KnownUrl>,
    /// `authorization: Bearer KEY` (or Azure's `api-key: KEY`).
    auth: SentKey,
    /// Azure OpenAI's deployment URLs, where calls go by the model's name.
    deployments: Option<Deployments>,
    dialect: Dialect,
    clock: Clock,
}

/// Azure OpenAI's deployment URLs:
/// `{endpoint}/openai/deployments/{deployment}/{operation}?api-version={v}`
/// (the deployment is the model's name at the provider).
pub struct Deployments {
    /// The resource's endpoint.
    pub endpoint: reqwest::Url,
    /// The `api-version` every call names.
    pub api_version: String,
}

impl Deployments {
    /// The URL of `operation` (e.g. `chat/completions`) on `deployment`.
    fn url(&self, deployment: &str, operation: &str) -> reqwest::Url {
        let mut u = self.endpoint.clone();
        if let Ok(mut path) = u.path_segments_mut() {
            path.pop_if_empty().extend(["openai", "deployments", deployment]);
            path.extend(operation.split('/'));
        }
        u.query_pairs_mut().append_pair("api-version", &self.api_version);
        u
    }
}

/// How the key is sent: Azure OpenAI's `api-key` header, else a bearer token.
pub enum KeyHeader {
    /// `authorization: Bearer KEY`.
    Bearer,
    /// `api-key: KEY` (Azure OpenAI).
    ApiKey,
}

impl OpenAiClient {
    /// A client for `ep`.
    pub fn new(http: super::upstream::Upstream, ep: Endpoint, dialect: Dialect, clock: Clock) -> Self {
        Self {
            auth: SentKey::new(ep.key.as_ref(), reqwest::header::AUTHORIZATION, "Bearer "),
            url: super::upstream::KnownUrl::parse(&ep.url),
            deployments: None,
            http,
            ep,
            dialect,
            clock,
        }
    }

    /// The same client for Azure OpenAI: the key sent as `key`, calls to
    /// `deployments` where given (else to the endpoint's URL, the v1 API).
    pub fn azure(mut self, key: KeyHeader, deployments: Option<Deployments>) -> Self {
        if let KeyHeader::ApiKey = key {
            const API_KEY: HeaderName = HeaderName::from_static("api-key");
            self.auth = SentKey::new(self.ep.key.as_ref(), API_KEY, "");
        }
        self.deployments = deployments;
        self
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
        let url = match &self.deployments {
            Some(d) => Some(d.url(&req.model, "embeddings")),
            None => match self.ep.url.strip_suffix("/chat/completions") {
                Some(base) if self.dialect != Dialect::DeepSeek => {
                    Some(parse_url(name, &format!("{base}/embeddings"))?)
                }
                _ => None,
            },
        };
        let Some(url) = url else {
            return Err(ProviderError::new(
                ErrorKind::Unsupported,
                None,
                format!("{name} has no embeddings endpoint"),
            ));
        };
        let model = crate::wire::raw::to_raw(&&*req.model);
        let body = req.body.render(&[("model", &model)], &[]);
        let call = with_request(HttpCall::post(url), req.request_id)
            .header(reqwest::header::CONTENT_TYPE, JSON)
            .body(body);
        let (resp, _fd) = self
            .http
            .send(name, self.auth.on(call).ok_or_else(|| unusable_key(name))?)
            .await?;
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
        let to = match &self.deployments {
            Some(d) => HttpCall::post(d.url(&req.model, "chat/completions")),
            None => post(&self.ep, self.url.as_ref())?,
        };
        let mut call = with_ids(to, req).header(reqwest::header::CONTENT_TYPE, JSON).body(body);
        for (k, v) in out.client_headers(Api::Chat) {
            call = call.header(k.clone(), v.clone());
        }
        let (resp, fd) = self
            .http
            .send(name, self.auth.on(call).ok_or_else(|| unusable_key(name))?)
            .await?;
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

#[cfg(test)]
mod tests {
    use super::Deployments;

    /// A deployment URL: the endpoint's path kept, the deployment one path
    /// segment whatever it holds, the api-version in the query.
    #[test]
    fn a_deployment_url_names_its_deployment_and_api_version() {
        let url = |endpoint: &str, deployment: &str| {
            let d = Deployments {
                endpoint: reqwest::Url::parse(endpoint).unwrap(),
                api_version: "2024-10-21".into(),
            };
            d.url(deployment, "chat/completions").to_string()
        };
        assert_eq!(
            url("https://r.openai.azure.com", "gpt-4o"),
            "https://r.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(
            url("https://gw.example.com/azure/", "my dep/x?"),
            "https://gw.example.com/azure/openai/deployments/my%20dep%2Fx%3F/chat/completions?api-version=2024-10-21"
        );
    }
}
