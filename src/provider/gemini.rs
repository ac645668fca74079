//! The client of Google's `generateContent`: the Gemini API
//! (`models/{model}:generateContent`, the key in `x-goog-api-key`) and
//! Vertex AI (`projects/{p}/locations/{l}/publishers/google/models/{model}:…`,
//! an access token made from a service-account key, refreshed before it
//! expires); whole, or `:streamGenerateContent?alt=sse`. Bodies are
//! rendered and read by [`crate::wire::gemini`]. Google sends no rate-limit
//! headers: a quota error's `RetryInfo` delay is its signal.

use super::http::{open_stream, read_body, stream_error_kind, with_ids, with_request, Endpoint, SseStream, JSON};
use super::upstream::{parse_url, HttpCall, Unsendable};
use super::{EmbedRequest, Embedded, ErrorKind, LlmRequest, LlmResponse, Opened, Provider, ProviderError};
use crate::clock::Clock;
use crate::resilience::limiter::RateFeedback;
use crate::wire::gemini::{embeddings_reply, parse_reply, render_embed, render_predict, render_request, Status};
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;

/// A Gemini API or Vertex AI provider.
pub struct GeminiClient {
    http: super::upstream::Upstream,
    ep: Endpoint,
    /// Where a model's calls go: `{root}/{models}{model}:…` (a model named
    /// with a `/` is a path under `root` of its own).
    root: String,
    models: &'static str,
    auth: Auth,
    clock: Clock,
}

/// How a call proves who sends it.
enum Auth {
    /// `x-goog-api-key: KEY` (the Gemini API), made once.
    Key(Option<HeaderValue>),
    /// A bearer token from a service-account key (Vertex AI), kept until
    /// it is near its end (boxed: the account holds its key and cache).
    Account(Box<gcp_auth::CustomServiceAccount>),
}

const API_KEY: HeaderName = HeaderName::from_static("x-goog-api-key");

/// The scope Vertex AI's tokens are asked for.
const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";

impl GeminiClient {
    /// A Gemini API client for `ep`, whose URL is the API's base with its
    /// version (`https://generativelanguage.googleapis.com/v1beta`).
    pub fn new(http: super::upstream::Upstream, ep: Endpoint, clock: Clock) -> Self {
        Self {
            root: ep.url.trim_end_matches('/').to_string(),
            models: "models/",
            auth: Auth::Key(ep.key.as_ref().and_then(|k| k.header(""))),
            http,
            ep,
            clock,
        }
    }

    /// A Vertex AI client for `ep` (its URL the location's base with the
    /// version, `https://us-central1-aiplatform.googleapis.com/v1`), calling
    /// `project`'s models in `location` as `account`.
    pub fn vertex(
        http: super::upstream::Upstream,
        ep: Endpoint,
        (project, location): (&str, &str),
        account: gcp_auth::CustomServiceAccount,
        clock: Clock,
    ) -> Self {
        let base = ep.url.trim_end_matches('/');
        Self {
            root: format!("{base}/projects/{project}/locations/{location}"),
            models: "publishers/google/models/",
            auth: Auth::Account(Box::new(account)),
            http,
            ep,
            clock,
        }
    }

    /// The URL of `method` (`generateContent`, …) on `model`.
    fn url(&self, model: &str, method: &str) -> String {
        let models = if model.contains('/') { "" } else { self.models };
        format!("{}/{models}{model}:{method}", self.root)
    }

    /// A POST of `method` on `model`.
    fn post(&self, model: &str, method: &str) -> Result<HttpCall<'static>, Unsendable> {
        parse_url(&self.ep.name, &self.url(model, method)).map(HttpCall::post)
    }

    /// Sends `call` with the call's credential: the answer, or the error it is.
    async fn send(
        &self,
        call: HttpCall<'_>,
    ) -> Result<(super::upstream::Answer, crate::descriptors::Held), ProviderError> {
        let name = &self.ep.name;
        let (resp, fd) = self.http.send(name, self.authed(call).await?).await?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let body = read_body(name, resp).await.unwrap_or_default();
            return Err(status_error(name, status, &body));
        }
        Ok((resp, fd))
    }

    /// `call` with the call's credential.
    async fn authed<'a>(&self, call: HttpCall<'a>) -> Result<HttpCall<'a>, ProviderError> {
        match &self.auth {
            Auth::Key(Some(k)) => Ok(call.header(API_KEY, k.clone())),
            Auth::Key(None) => Ok(call),
            Auth::Account(account) => {
                use gcp_auth::TokenProvider;
                let token = account.token(&[CLOUD_PLATFORM]).await.map_err(|e| {
                    let why = format!("{}: no access token from the service-account key: {e}", self.ep.name);
                    ProviderError::new(ErrorKind::Auth, None, why)
                })?;
                let mut v = HeaderValue::try_from(format!("Bearer {}", token.as_str()))
                    .map_err(|_| ProviderError::new(ErrorKind::Auth, None, "the access token is no header value"))?;
                v.set_sensitive(true);
                Ok(call.header(reqwest::header::AUTHORIZATION, v))
            }
        }
    }
}

#[async_trait::async_trait]
impl Provider for GeminiClient {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        self.open(req).await?.whole().await
    }

    /// `batchEmbedContents` on the Gemini API and for Vertex AI's Gemini
    /// embedding models; Vertex AI's others (`text-embedding-005`, …)
    /// embed by `predict`.
    async fn embed(&self, req: &EmbedRequest) -> Result<Embedded, ProviderError> {
        let name = &self.ep.name;
        let vertex = matches!(self.auth, Auth::Account(_));
        let predict = vertex && !req.model.rsplit('/').next().unwrap_or("").contains("gemini");
        let (method, body) = match (vertex, predict) {
            (_, true) => ("predict", render_predict(&req.body)),
            (true, false) => ("batchEmbedContents", render_embed(&req.body, None)),
            (false, _) => ("batchEmbedContents", render_embed(&req.body, Some(&req.model))),
        };
        let body = body.map_err(|why| ProviderError::new(ErrorKind::Unsupported, None, why))?;
        let call = with_request(self.post(&req.model, method)?, req.request_id)
            .header(reqwest::header::CONTENT_TYPE, JSON)
            .body(body);
        let (resp, _fd) = self.send(call).await?;
        let v = super::http::read_json(name, resp).await?;
        let estimate = crate::request::tokens_in_chars(req.chars);
        let (body, tokens) = embeddings_reply(&v, &req.body, &req.model, estimate)
            .map_err(|why| ProviderError::new(ErrorKind::Truncated, None, format!("{name}: {why}")))?;
        Ok(Embedded::translated(body, tokens))
    }

    async fn open(&self, req: &LlmRequest) -> Result<Opened, ProviderError> {
        let name = &self.ep.name;
        let start = self.clock.now();
        let out = req.outgoing(self.ep.stream);
        let body = render_request(&out).map_err(|why| ProviderError::new(ErrorKind::Unsupported, None, why))?;
        let method = match out.stream {
            true => "streamGenerateContent?alt=sse",
            false => "generateContent",
        };
        let call = with_ids(self.post(&req.model, method)?, req)
            .header(reqwest::header::CONTENT_TYPE, JSON)
            .body(body);
        let (resp, fd) = self.send(call).await?;
        if out.stream {
            let stream = SseStream::gemini(name, (resp, fd), self.ep.idle);
            return open_stream(stream, RateFeedback::default(), req, &self.clock, start).await;
        }
        let v = super::http::read_json(name, resp).await?;
        Ok(Opened::Whole(super::http::translated(
            parse_reply(&v),
            &self.clock,
            start,
        )))
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
