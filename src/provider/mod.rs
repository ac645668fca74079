//! The provider interface: requests, responses and the error taxonomy shared
//! by every LLM client (HTTP or in-process mock).

pub mod anthropic;
pub mod fault;
pub mod headers;
pub mod http;
pub mod mock;
pub mod openai;
pub mod sse;

use crate::resilience::breaker::FailureKind;
use crate::resilience::limiter::RateFeedback;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// A chat message. Shared, not copied: a conversation is passed to every
/// step and every model of the chain.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: Arc<str>,
    /// Text content.
    pub content: Arc<str>,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: &str, content: impl Into<Arc<str>>) -> Self {
        Self {
            role: shared_role(role),
            content: content.into(),
        }
    }
}

/// The usual roles are allocated once and shared: a new message's role is a
/// reference count, not an allocation.
fn shared_role(role: &str) -> Arc<str> {
    static ROLES: std::sync::LazyLock<[Arc<str>; 4]> =
        std::sync::LazyLock::new(|| ["system", "user", "assistant", "tool"].map(Arc::from));
    match ROLES.iter().find(|r| &***r == role) {
        Some(r) => r.clone(),
        None => role.into(),
    }
}

/// A tool offered to the model. Shared, not copied: every request offers
/// the same specs, so cloning one is three reference-count increments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Name the model must use.
    pub name: Arc<str>,
    /// What it does.
    pub description: Arc<str>,
    /// JSON schema of its arguments.
    pub schema: Arc<serde_json::Value>,
}

/// A tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Tool name as the model wrote it.
    pub name: String,
    /// Arguments as the model wrote them (should be a JSON object).
    pub arguments: String,
}

/// One LLM call.
#[derive(Clone, Debug)]
pub struct LlmRequest {
    /// The agent request this call belongs to.
    pub request_id: u64,
    /// Step of the agent loop (0-based).
    pub step: u32,
    /// Attempt number of this step (0 = first).
    pub attempt: u32,
    /// Model name as the provider knows it.
    pub model: Arc<str>,
    /// The conversation.
    pub messages: Arc<[Message]>,
    /// Tools the model may call.
    pub tools: Arc<[ToolSpec]>,
    /// Output cap.
    pub max_tokens: u32,
}

impl LlmRequest {
    /// Characters of prompt, for the token estimate.
    pub fn prompt_chars(&self) -> usize {
        self.messages.iter().map(|m| m.content.len()).sum()
    }
}

/// Token usage of a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input: u32,
    /// Completion tokens.
    pub output: u32,
    /// Prompt tokens served from the provider's cache.
    pub cached_input: u32,
}

/// A successful LLM response.
#[derive(Clone, Debug)]
pub struct LlmResponse {
    /// Text answer (may be empty when the model calls tools).
    pub text: Arc<str>,
    /// Tool calls requested.
    pub tool_calls: Vec<ToolCall>,
    /// Usage.
    pub usage: Usage,
    /// Output tokens per second, when measured.
    pub tokens_per_s: Option<f64>,
    /// Rate-limit feedback from headers.
    pub rate: RateFeedback,
}

impl LlmResponse {
    /// A response whose output rate is measured over the whole call
    /// (`elapsed`): keep-alives and stalls count as time, not progress.
    pub fn measured(
        text: Arc<str>,
        tool_calls: Vec<ToolCall>,
        usage: Usage,
        rate: RateFeedback,
        elapsed: Duration,
    ) -> Self {
        let secs = elapsed.as_secs_f64().max(1e-3);
        Self {
            text,
            tool_calls,
            usage,
            tokens_per_s: Some(usage.output as f64 / secs),
            rate,
        }
    }
}

/// What went wrong with a provider call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 429.
    RateLimited,
    /// 503 / 529.
    Overloaded,
    /// 500 / 502 and other 5xx.
    ServerError,
    /// Connect, first-byte, idle or total timeout.
    Timeout,
    /// Connection refused.
    Connect,
    /// Connection reset.
    Reset,
    /// Stream ended without its terminator.
    Truncated,
    /// 400.
    BadRequest,
    /// 401 / 403.
    Auth,
    /// 402 (DeepSeek: insufficient balance).
    InsufficientBalance,
    /// 404.
    NotFound,
    /// 422.
    Unprocessable,
    /// 413 or a "request too large" error.
    TooLarge,
}

impl ErrorKind {
    /// The kind for an HTTP status.
    pub fn from_status(status: u16) -> Self {
        match status {
            429 => Self::RateLimited,
            503 | 529 => Self::Overloaded,
            400 => Self::BadRequest,
            401 | 403 => Self::Auth,
            402 => Self::InsufficientBalance,
            404 => Self::NotFound,
            413 => Self::TooLarge,
            422 => Self::Unprocessable,
            _ => Self::ServerError,
        }
    }

    /// Whether retrying can help.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            Self::RateLimited
                | Self::Overloaded
                | Self::ServerError
                | Self::Timeout
                | Self::Connect
                | Self::Reset
                | Self::Truncated
        )
    }

    /// How the breaker counts it.
    pub fn failure(self) -> FailureKind {
        match self {
            Self::RateLimited => FailureKind::RateLimited,
            Self::Overloaded | Self::ServerError | Self::Connect | Self::Reset => FailureKind::Server,
            Self::Timeout => FailureKind::Timeout,
            Self::Truncated => FailureKind::Truncated,
            _ => FailureKind::Client,
        }
    }

    /// A short label for fallback chains (`✗503`, `✗timeout`).
    pub fn label(self, status: Option<u16>) -> String {
        match (self, status) {
            (_, Some(s)) => s.to_string(),
            (Self::Timeout, _) => "timeout".into(),
            (Self::Connect, _) => "refused".into(),
            (Self::Reset, _) => "reset".into(),
            (Self::Truncated, _) => "truncated".into(),
            (k, None) => format!("{k:?}").to_lowercase(),
        }
    }
}

/// A failed provider call.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kind:?} (status {status:?}): {message}")]
pub struct ProviderError {
    /// The taxonomy.
    pub kind: ErrorKind,
    /// HTTP status, when there was one.
    pub status: Option<u16>,
    /// Provider's message (never contains credentials).
    pub message: String,
    /// Retry-After, when given.
    pub retry_after: Option<Duration>,
    /// Rate-limit feedback from headers.
    pub rate: RateFeedback,
    /// Tokens consumed before the failure (e.g. a truncated stream).
    pub usage: Usage,
}

impl ProviderError {
    /// A call (`what`: `provider call`, `tool call`) that took longer than
    /// its timeout.
    pub fn timed_out(what: &str) -> Self {
        Self::new(ErrorKind::Timeout, None, format!("{what} timed out"))
    }

    /// An error of `kind` with a message.
    pub fn new(kind: ErrorKind, status: Option<u16>, message: impl Into<String>) -> Self {
        Self {
            kind,
            status,
            message: message.into(),
            retry_after: None,
            rate: RateFeedback::default(),
            usage: Usage::default(),
        }
    }
}

/// An LLM provider.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// Makes one call.
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError>;

    /// Makes one call that fails as timed out after `timeout`. A provider
    /// that knows its latency up front (a recorded one) answers this
    /// without a second timer.
    async fn complete_within(&self, req: &LlmRequest, timeout: Duration) -> Result<LlmResponse, ProviderError> {
        within(timeout, "provider call", self.complete(req)).await
    }
}

/// Awaits `call`, failing it as timed out (`what` says which call) after
/// `timeout`. A call that is ready at once (an in-process provider) never
/// touches the timer wheel.
pub async fn within<T>(
    timeout: Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    use std::task::Poll;
    let mut call = std::pin::pin!(call);
    if let Poll::Ready(r) = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await {
        return r;
    }
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => r,
        Err(_) => Err(ProviderError::timed_out(what)),
    }
}

/// A provider that answers at once with a fixed text (benchmarks, tests).
pub struct InstantProvider {
    text: Arc<str>,
}

impl Default for InstantProvider {
    fn default() -> Self {
        Self { text: "ok".into() }
    }
}

#[async_trait::async_trait]
impl Provider for InstantProvider {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        Ok(LlmResponse {
            text: self.text.clone(),
            tool_calls: Vec::new(),
            usage: Usage {
                input: 20,
                output: req.max_tokens.min(20),
                cached_input: 0,
            },
            tokens_per_s: None,
            rate: RateFeedback::default(),
        })
    }
}
