//! The provider interface: requests, responses and the error taxonomy shared
//! by every LLM client (HTTP or in-process mock).

pub mod anthropic;
pub mod aws;
pub mod bedrock;
pub mod fault;
pub mod gemini;
pub mod http;
pub mod mock;
pub mod openai;
pub mod stream;
pub mod upstream;

use crate::resilience::breaker::FailureKind;
use crate::resilience::limiter::RateFeedback;
use crate::wire::{Api, Finish, Params};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

pub use crate::wire::{Content, Message, Part, Role, ToolCall, ToolKind, ToolSpec, Usage};
pub use stream::{Opened, Piece, PieceStream};

/// The user turn that asks a model without prefill for the rest of a cut
/// answer, after that answer as the assistant's turn.
pub const CONTINUE: &str = "Your previous answer was cut off. Continue it from exactly where it stopped: \
     write only the rest, without repeating anything already written and without any preamble.";

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
    /// Output cap (for the estimates; sent where the client set one or
    /// the API requires it).
    pub max_tokens: u32,
    /// What the client asked besides the conversation, and its own body
    /// for an upstream of its API.
    pub params: Arc<Params>,
    /// Whether `messages` are the client's own (a body passed through
    /// keeps its messages as sent).
    pub own_messages: bool,
    /// Stream the answer: `None` follows the provider's setting.
    pub stream: Option<bool>,
}

impl Default for LlmRequest {
    fn default() -> Self {
        Self {
            request_id: 0,
            step: 0,
            attempt: 0,
            model: "".into(),
            messages: Arc::from(Vec::new()),
            tools: Arc::from(Vec::new()),
            max_tokens: 1024,
            params: Arc::new(Params::default()),
            own_messages: true,
            stream: None,
        }
    }
}

impl LlmRequest {
    /// Characters of prompt, for the token estimate.
    pub fn prompt_chars(&self) -> usize {
        self.messages.iter().map(Message::weight).sum()
    }

    /// The call as the wire formats render it; `stream` is the provider's
    /// setting unless the request says.
    pub fn outgoing(&self, stream: bool) -> crate::wire::Outgoing<'_> {
        crate::wire::Outgoing {
            model: &self.model,
            messages: &self.messages,
            own_messages: self.own_messages,
            tools: &self.tools,
            params: &self.params,
            max_tokens: self.max_tokens,
            stream: self.stream.unwrap_or(stream),
        }
    }
}

/// One embeddings call: the client's body, passed on with its model
/// replaced.
#[derive(Clone, Debug)]
pub struct EmbedRequest {
    /// The request it belongs to.
    pub request_id: u64,
    /// The model, as the provider names it.
    pub model: Arc<str>,
    /// The client's body.
    pub body: Arc<crate::wire::RawBody>,
    /// Characters to embed, for a usage estimate.
    pub chars: usize,
}

/// An embeddings answer.
#[derive(Clone, Debug)]
pub struct Embedded {
    /// The upstream's body as it sent it.
    pub body: bytes::Bytes,
    /// Tokens it counted.
    pub usage: Usage,
    /// Rate-limit feedback from headers.
    pub rate: RateFeedback,
}

/// A successful LLM response.
#[derive(Clone, Debug, Default)]
pub struct LlmResponse {
    /// Text answer (may be empty when the model calls tools).
    pub text: Arc<str>,
    /// Tool calls requested.
    pub tool_calls: Vec<ToolCall>,
    /// Each call's key in the tool result cache, where the provider knows
    /// it better than the call's text does (a replay of a recording that
    /// kept the keys, not the content); see [`LlmResponse::tool_key`].
    pub tool_keys: Vec<u64>,
    /// Usage.
    pub usage: Usage,
    /// Output tokens per second, when measured.
    pub tokens_per_s: Option<f64>,
    /// Rate-limit feedback from headers, where they said any (boxed: most
    /// answers carry none, and an answer is moved through every layer of
    /// the call; see [`RateFeedback::boxed`]).
    pub rate: Option<Box<RateFeedback>>,
    /// What an answer over the wire said besides text and tool calls, and
    /// the upstream's own body.
    pub wire: Option<Box<WireAnswer>>,
}

/// What an upstream answered, beyond the text and tool calls.
#[derive(Clone, Debug, Default)]
pub struct WireAnswer {
    /// The API it answered in.
    pub kind: Api,
    /// Its id of the answer.
    pub id: String,
    /// The model it names.
    pub model: String,
    /// Why the model stopped.
    pub finish: Option<Finish>,
    /// Reasoning text, where it returns it.
    pub reasoning: String,
    /// A refusal.
    pub refusal: String,
    /// Its body as sent (a whole answer, not a stream).
    pub body: Option<bytes::Bytes>,
    /// Events of its stream that could not be read, skipped.
    pub skipped: u32,
}

impl LlmResponse {
    /// Why the model stopped: as its API said, else as its answer shows.
    pub fn finish(&self) -> Finish {
        let said = self.wire.as_ref().and_then(|w| w.finish);
        said.unwrap_or(if self.tool_calls.is_empty() {
            Finish::Stop
        } else {
            Finish::ToolCalls
        })
    }

    /// The tool result cache key of call `i`.
    pub fn tool_key(&self, i: usize) -> u64 {
        self.tool_keys
            .get(i)
            .copied()
            .unwrap_or_else(|| self.tool_calls[i].cache_key())
    }

    /// The answer in typed form, for rendering in another API.
    pub fn reply(&self) -> crate::wire::Reply {
        let w = self.wire.as_deref();
        crate::wire::Reply {
            id: w.map(|w| w.id.clone()).unwrap_or_default(),
            model: w.map(|w| w.model.clone()).unwrap_or_default(),
            text: self.text.to_string(),
            reasoning: w.map(|w| w.reasoning.clone()).unwrap_or_default(),
            refusal: w.map(|w| w.refusal.clone()).unwrap_or_default(),
            tool_calls: self.tool_calls.clone(),
            finish: w.and_then(|w| w.finish),
            usage: Some(self.usage),
        }
    }
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
            tool_keys: Vec::new(),
            usage,
            tokens_per_s: Some(usage.output as f64 / secs),
            rate: rate.boxed(),
            wire: None,
        }
    }

    /// A whole answer assembled into `r` in `kind`'s API (no body of it
    /// kept), using `usage` under `rate` over `elapsed`; `skipped` events
    /// of its stream could not be read.
    pub fn of_reply(
        r: crate::wire::Reply,
        kind: Api,
        (usage, rate): (Usage, RateFeedback),
        elapsed: Duration,
        skipped: u32,
    ) -> Self {
        let mut resp = Self::measured(Arc::from(r.text), r.tool_calls, usage, rate, elapsed);
        resp.wire = Some(Box::new(WireAnswer {
            kind,
            id: r.id,
            model: r.model,
            finish: r.finish,
            reasoning: r.reasoning,
            refusal: r.refusal,
            body: None,
            skipped,
        }));
        resp
    }
}

impl Embedded {
    /// Embeddings fusebox wrote in OpenAI's list from another API's
    /// answer, `input` tokens counted; such APIs send no rate feedback.
    pub fn translated(body: Vec<u8>, input: u32) -> Self {
        Self {
            body: body.into(),
            usage: Usage {
                input,
                ..Usage::default()
            },
            rate: RateFeedback::default(),
        }
    }
}

/// How an attempt failed below HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// No answer in time.
    Timeout,
    /// Could not connect.
    Connect,
    /// Connection reset.
    Reset,
    /// The body or stream ended early.
    Truncated,
}

impl Transport {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Timeout => "timeout",
            Transport::Connect => "connect",
            Transport::Reset => "reset",
            Transport::Truncated => "truncated",
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
    /// The request cannot be put in this provider's API (something only
    /// the client's API can express): the model is skipped, not blamed.
    Unsupported,
    /// The caller's deadline passed before the answer came (the time
    /// bound that ended the call was the deadline's, not the provider's).
    Deadline,
    /// fusebox had no file descriptor left for the call: refused before
    /// the upstream was reached, or its connect failed for want of one.
    Local,
    /// The caller went away (closed its connection, stopped reading)
    /// while the call ran.
    Left,
    /// The gateway's drain time ran out at shutdown while the call ran.
    Drained,
}

impl ErrorKind {
    /// The transport failure it is, if it is one.
    pub fn transport(self) -> Option<Transport> {
        match self {
            ErrorKind::Timeout => Some(Transport::Timeout),
            ErrorKind::Connect => Some(Transport::Connect),
            ErrorKind::Reset => Some(Transport::Reset),
            ErrorKind::Truncated => Some(Transport::Truncated),
            _ => None,
        }
    }
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

    /// How the breaker counts it: only a provider's fault is counted
    /// ([`crate::blame`]).
    pub fn failure(self) -> FailureKind {
        if !crate::blame::Ending::of(self).feeds().breaker {
            return FailureKind::Blameless;
        }
        match self {
            Self::RateLimited => FailureKind::RateLimited,
            Self::Timeout => FailureKind::Timeout,
            Self::Truncated => FailureKind::Truncated,
            _ => FailureKind::Server,
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
            (Self::Unsupported, _) => "unsupported".into(),
            (Self::Deadline, _) => "deadline".into(),
            (Self::Local, _) => "no descriptors".into(),
            (Self::Left, _) => "left".into(),
            (Self::Drained, _) => "drained".into(),
            // `ServerError` → `server error`.
            (k, None) => format!("{k:?}")
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    (i > 0 && c.is_uppercase())
                        .then_some(' ')
                        .into_iter()
                        .chain(c.to_lowercase())
                })
                .collect(),
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
    /// Rate-limit feedback from headers, where they said any (boxed, as
    /// an answer's is).
    pub rate: Option<Box<RateFeedback>>,
    /// Tokens consumed before the failure (e.g. a truncated stream).
    pub usage: Usage,
    /// The upstream's error body as it sent it, and its API (an HTTP
    /// error answer), for passing a client's own mistake back to it.
    pub body: Option<(Api, bytes::Bytes)>,
    /// A tool's own answer to a call it failed (an MCP `isError` result),
    /// passed back to the caller as it came.
    pub answer: Option<Arc<str>>,
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
            rate: None,
            usage: Usage::default(),
            body: None,
            answer: None,
        }
    }

    /// Whether the request itself was wrong (400 that is not about size,
    /// 404, 422): the client's mistake, not the provider's.
    pub fn client_fault(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::BadRequest | ErrorKind::NotFound | ErrorKind::Unprocessable
        )
    }
}

/// An LLM provider.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// The API it speaks, when it answers over the wire (a client's body
    /// of this API is passed through to it).
    fn wire(&self) -> Option<Api> {
        None
    }

    /// Makes one call and reads the whole answer.
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError>;

    /// Makes one streamed call, returning once the answer's first content
    /// has arrived, with the rest to read; a provider that cannot stream
    /// answers whole.
    async fn open(&self, req: &LlmRequest) -> Result<Opened, ProviderError> {
        self.complete(req).await.map(Opened::Whole)
    }

    /// Embeds `req.input`: the upstream's answer as it sent it, with the
    /// tokens it counted. Only OpenAI-compatible providers embed.
    async fn embed(&self, req: &EmbedRequest) -> Result<Embedded, ProviderError> {
        let _ = req;
        Err(ProviderError::new(
            ErrorKind::Unsupported,
            None,
            "this provider has no embeddings endpoint",
        ))
    }

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
            tool_keys: Vec::new(),
            usage: Usage {
                input: 20,
                output: req.max_tokens.min(20),
                cached_input: 0,
            },
            tokens_per_s: None,
            rate: None,
            wire: None,
        })
    }
}
