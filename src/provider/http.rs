//! What the HTTP clients share: one connection pool, transport-error
//! classification, bounded body reads, and building the configured clients.

use super::anthropic::AnthropicClient;
use super::bedrock::BedrockClient;
use super::gemini::GeminiClient;
use super::openai::{Deployments, KeyHeader, OpenAiClient};
use super::upstream::{parse_url, Answer, AnswerBody, HttpCall, KnownUrl, Unsendable, Upstream};
use super::{ErrorKind, Provider, ProviderError};
use crate::clock::Clock;
use crate::config::{Config, ProviderKind};
use crate::wire::fusebox;
use crate::wire::openai::Dialect;
use crate::wire::sse::ItemRef;
use std::collections::HashMap;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

/// Largest response body read (error bodies and non-streamed answers).
pub const MAX_BODY: usize = 16 << 20;

/// A provider could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The credential's environment variable is not set.
    #[error("provider `{provider}`: environment variable {var} is not set; export it with the {what} (providers.{provider}.{field} names it)")]
    MissingKey {
        /// Provider.
        provider: String,
        /// Variable name.
        var: String,
        /// The config key naming it (`api_key_env`, …).
        field: &'static str,
        /// What it holds.
        what: &'static str,
    },
    /// No AWS credentials were found.
    #[error(
        "provider `{provider}`: {why}; give AWS credentials as the AWS SDKs take them: {}",
        super::aws::WHERE
    )]
    AwsCredentials {
        /// Provider.
        provider: String,
        /// Where they were looked for.
        why: String,
    },
    /// The file `api_key_file` names could not be read, or holds no key.
    #[error("provider `{provider}`: cannot read an API key from {path} (providers.{provider}.api_key_file): {why}")]
    ApiKeyFile {
        /// Provider.
        provider: String,
        /// The file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// A service-account key file could not be read.
    #[error("provider `{provider}`: cannot use the service-account key file {path} (providers.{provider}.credentials_env names its variable, {var}): {why}")]
    KeyFile {
        /// Provider.
        provider: String,
        /// The variable naming the file.
        var: String,
        /// The file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// The API key in file `path` (a mounted secret), without the whitespace
/// around it; the file's largest accepted size is 64 KiB.
pub fn api_key_from(provider: &str, path: &std::path::Path) -> Result<Secret, SetupError> {
    const MAX_KEY_FILE: u64 = 64 << 10;
    let bad = |why: String| SetupError::ApiKeyFile {
        provider: provider.to_string(),
        path: path.display().to_string(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(bad("not a regular file (a secret is mounted as one)".into()));
    }
    let len = meta.len();
    if len > MAX_KEY_FILE {
        return Err(bad(format!("{len} bytes, more than a key's {MAX_KEY_FILE}")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    match text.trim() {
        "" => Err(bad("it is empty: put the key in it".into())),
        key => Ok(Secret::new(key.to_string())),
    }
}

/// The connection details of one HTTP provider.
#[derive(Clone)]
pub struct Endpoint {
    /// Provider name (for logs and errors).
    pub name: String,
    /// Full URL of the completion endpoint.
    pub url: String,
    /// The API key (never logged, never in errors).
    pub key: Option<Secret>,
    /// Stream responses.
    pub stream: bool,
    /// Longest silence between chunks.
    pub idle: Duration,
}

/// An API key that never prints.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps a key.
    pub fn new(s: String) -> Self {
        Self(s)
    }

    /// The key after `scheme` as a header value, marked sensitive (kept
    /// out of debug output); `None` when it is no header value.
    pub fn header(&self, scheme: &str) -> Option<reqwest::header::HeaderValue> {
        let mut v = reqwest::header::HeaderValue::try_from(format!("{scheme}{}", self.0)).ok()?;
        v.set_sensitive(true);
        Some(v)
    }

    /// The key, for the request header only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A call to `provider` fusebox had no file descriptor for.
pub(super) fn no_descriptor(provider: &str) -> ProviderError {
    let v = crate::descriptors::view();
    ProviderError::new(
        ErrorKind::Local,
        None,
        format!(
            "{provider}: fusebox has no file descriptor left for the call ({} of {} in use under a limit of {} open files)",
            v.in_use, v.usable, v.limit
        ),
    )
}

/// Classifies a transport error (no status), reqwest's or hyper's: a
/// connect the kernel refused a descriptor for is fusebox's own
/// ([`ErrorKind::Local`]).
pub fn transport_error(provider: &str, e: &(dyn std::error::Error + 'static)) -> ProviderError {
    if crate::descriptors::exhausted(e) {
        crate::descriptors::refused();
        return no_descriptor(provider);
    }
    let causes = || std::iter::successors(Some(e), |e| e.source());
    let timed_out = |e: &(dyn std::error::Error + 'static)| {
        e.downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_timeout)
            || e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut)
    };
    let connect = |e: &(dyn std::error::Error + 'static)| {
        e.downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_connect)
            || e.downcast_ref::<hyper_util::client::legacy::Error>()
                .is_some_and(hyper_util::client::legacy::Error::is_connect)
    };
    let kind = if causes().any(timed_out) {
        ErrorKind::Timeout
    } else if causes().any(connect) {
        ErrorKind::Connect
    } else {
        ErrorKind::Reset
    };
    // The message and its causes: reqwest's names the URL, neither names
    // headers, so no key can leak.
    let mut msg = String::new();
    for c in causes() {
        let c = c.to_string();
        if !msg.ends_with(&c) {
            if !msg.is_empty() {
                msg.push_str(": ");
            }
            msg.push_str(&c);
        }
    }
    ProviderError::new(kind, None, format!("{provider}: {}", without_query(&msg)))
}

pub(super) fn without_query(s: &str) -> String {
    // Query strings may carry keys on some servers; drop them from messages.
    match s.find('?') {
        Some(i) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Reads a whole body, at most [`MAX_BODY`] bytes; a body of one chunk
/// as it came, without copying.
pub async fn read_body(provider: &str, resp: Answer) -> Result<bytes::Bytes, ProviderError> {
    let mut body = resp.into_body();
    let (mut first, mut rest) = (bytes::Bytes::new(), Vec::new());
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| transport_error(provider, &*e))?;
        if first.len() + rest.len() + chunk.len() > MAX_BODY {
            return Err(ProviderError::new(
                ErrorKind::ServerError,
                None,
                format!("{provider}: response larger than 16 MiB"),
            ));
        }
        if first.is_empty() {
            first = chunk;
        } else {
            if rest.is_empty() {
                rest.extend_from_slice(&first);
            }
            rest.extend_from_slice(&chunk);
        }
    }
    Ok(if rest.is_empty() { first } else { rest.into() })
}

/// Reads a whole JSON answer; one that does not parse was cut short.
pub async fn read_json(provider: &str, resp: Answer) -> Result<serde_json::Value, ProviderError> {
    let body = read_body(provider, resp).await?;
    serde_json::from_slice(&body).map_err(|e| {
        ProviderError::new(
            ErrorKind::Truncated,
            None,
            format!("{provider}: unreadable response body: {e}"),
        )
    })
}

/// A whole answer of an API no client speaks (Gemini's, Bedrock's), read
/// into `r` and measured from `start`: always rendered anew in the
/// client's API, none of its body passed on.
pub fn translated(r: crate::wire::Reply, clock: &Clock, start: tokio::time::Instant) -> super::LlmResponse {
    let measured = (
        r.usage.unwrap_or_default(),
        crate::resilience::limiter::RateFeedback::default(),
    );
    let elapsed = clock.now().saturating_duration_since(start);
    super::LlmResponse::of_reply(r, crate::wire::Api::Chat, measured, elapsed, 0)
}

/// Whether an answer says anything of its rate limits: a header named
/// `prefix…` or `retry-after…` (one pass over its names, where looking up
/// each header a provider may send would hash every name).
pub fn says_rate(h: &reqwest::header::HeaderMap, prefix: &str) -> bool {
    h.keys()
        .any(|k| k.as_str().starts_with(prefix) || k.as_str().starts_with("retry-after"))
}

/// A header lookup over reqwest's map, for the header parsers.
pub fn header_getter(h: &reqwest::header::HeaderMap) -> impl Fn(&str) -> Option<String> + '_ {
    move |name| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// An error for a non-2xx answer: kind from the status, the provider's own
/// message when the body has one, Retry-After and rate feedback.
pub fn status_error(
    provider: &str,
    status: u16,
    body: bytes::Bytes,
    wire: crate::wire::Api,
    rate: crate::resilience::limiter::RateFeedback,
) -> ProviderError {
    let v: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    let msg = v
        .as_ref()
        .and_then(|v| v.pointer("/error/message").and_then(|m| m.as_str()).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(300)]).trim().to_string());
    let code = v
        .as_ref()
        .and_then(|v| v.pointer("/error/code").or_else(|| v.pointer("/error/type")))
        .and_then(|c| c.as_str())
        .unwrap_or("");
    let mut kind = ErrorKind::from_status(status);
    if status == 400 && (code.contains("context_length") || msg.to_lowercase().contains("too large")) {
        kind = ErrorKind::TooLarge;
    }
    let mut e = ProviderError::new(kind, Some(status), format!("{provider}: HTTP {status}: {msg}"));
    e.retry_after = rate.retry_after;
    e.rate = rate.boxed();
    e.body = Some((wire, body));
    e
}

/// Builds HTTP clients for every provider of an HTTP kind; `mock_base`
/// points mock-kind providers at a mock server instead (the demo's
/// `--providers http`).
pub fn build(
    cfg: &Config,
    clock: Clock,
    mock_base: Option<&str>,
) -> Result<HashMap<String, Arc<dyn Provider>>, SetupError> {
    let http = Upstream::new()?;
    let mut out: HashMap<String, Arc<dyn Provider>> = HashMap::new();
    for (name, p) in &cfg.providers {
        let (kind, base, key) = match (p.kind, mock_base) {
            (ProviderKind::Mock, None) => continue,
            (ProviderKind::Mock, Some(base)) => {
                let kind = match name.as_str() {
                    "anthropic" => ProviderKind::Anthropic,
                    "deepseek" => ProviderKind::Deepseek,
                    _ => ProviderKind::Openai,
                };
                (kind, base.to_string(), Some(Secret::new("mock-key".into())))
            }
            (kind, _) => {
                let base = p
                    .base_url
                    .clone()
                    .or_else(|| kind.default_base_url().map(str::to_string))
                    .or_else(|| p.vertex_base_url())
                    .or_else(|| p.bedrock_base_url().filter(|_| kind == ProviderKind::Bedrock))
                    .unwrap_or_default();
                let key = match (&p.api_key_file, p.credential_env()) {
                    (Some(path), _) => Some(api_key_from(name, path)?),
                    (None, Some((field, var))) => match std::env::var(var) {
                        Ok(k) if !k.is_empty() => Some(Secret::new(k)),
                        _ => {
                            return Err(SetupError::MissingKey {
                                provider: name.clone(),
                                var: var.to_string(),
                                field,
                                what: match field {
                                    "entra_token_env" => "Entra ID access token",
                                    "credentials_env" => "service-account key file's path",
                                    _ => "API key",
                                },
                            })
                        }
                    },
                    (None, None) => None,
                };
                (kind, base, key)
            }
        };
        let base = base.trim_end_matches('/').to_string();
        let path = match kind {
            ProviderKind::Anthropic => "/v1/messages",
            ProviderKind::Deepseek => "/chat/completions",
            ProviderKind::AzureOpenai => "/openai/v1/chat/completions",
            // The base names the API's version; each call its model.
            ProviderKind::Gemini | ProviderKind::Vertex | ProviderKind::Bedrock => "",
            _ if base.ends_with("/v1") => "/chat/completions",
            _ => "/v1/chat/completions",
        };
        let ep = Endpoint {
            name: name.clone(),
            url: format!("{base}{path}"),
            key,
            stream: p.stream,
            idle: Duration::from_millis(p.idle_timeout_ms),
        };
        let provider: Arc<dyn Provider> = match kind {
            ProviderKind::Anthropic => Arc::new(AnthropicClient::new(http.clone(), ep, clock)),
            ProviderKind::Gemini => Arc::new(GeminiClient::new(http.clone(), ep, clock)),
            ProviderKind::Bedrock => {
                let profile = p.aws_profile.as_deref();
                let credentials = super::aws::credentials(profile).map_err(|why| SetupError::AwsCredentials {
                    provider: name.clone(),
                    why,
                })?;
                let region = p.region.clone().unwrap_or_default();
                Arc::new(BedrockClient::new(http.clone(), ep, region, credentials, clock))
            }
            ProviderKind::Vertex => {
                let path = ep.key.as_ref().map(|k| k.expose().to_string()).unwrap_or_default();
                let account = gcp_auth::CustomServiceAccount::from_file(&path).map_err(|e| SetupError::KeyFile {
                    provider: name.clone(),
                    var: p.credentials_env.clone().unwrap_or_default(),
                    path: path.clone(),
                    why: e.to_string(),
                })?;
                let at = (
                    p.project.as_deref().unwrap_or_default(),
                    p.location.as_deref().unwrap_or_default(),
                );
                Arc::new(GeminiClient::vertex(http.clone(), ep, at, account, clock))
            }
            ProviderKind::Deepseek => Arc::new(OpenAiClient::new(http.clone(), ep, Dialect::DeepSeek, clock)),
            ProviderKind::Openai => Arc::new(OpenAiClient::new(http.clone(), ep, Dialect::OpenAi, clock)),
            ProviderKind::AzureOpenai => {
                let deployments = match (&p.api_version, reqwest::Url::parse(&base)) {
                    (Some(v), Ok(endpoint)) => Some(Deployments {
                        endpoint,
                        api_version: v.clone(),
                    }),
                    _ => None,
                };
                let key = match p.entra_token_env {
                    Some(_) => KeyHeader::Bearer,
                    None => KeyHeader::ApiKey,
                };
                Arc::new(OpenAiClient::new(http.clone(), ep, Dialect::OpenAi, clock).azure(key, deployments))
            }
            _ => Arc::new(OpenAiClient::new(http.clone(), ep, Dialect::Compatible, clock)),
        };
        out.insert(name.clone(), provider);
    }
    Ok(out)
}

/// `call` with the ids the mock server uses for determinism (real
/// providers ignore unknown headers).
pub fn with_ids<'a>(call: HttpCall<'a>, req: &super::LlmRequest) -> HttpCall<'a> {
    use reqwest::header::HeaderName;
    const STEP: HeaderName = HeaderName::from_static(fusebox::STEP);
    const ATTEMPT: HeaderName = HeaderName::from_static(fusebox::ATTEMPT);
    with_request(call, req.request_id)
        .header(STEP, fusebox::count(req.step))
        .header(ATTEMPT, fusebox::count(req.attempt))
}

/// `call` with the request's id (as [`with_ids`], for calls of no step).
pub fn with_request(call: HttpCall<'_>, request_id: u64) -> HttpCall<'_> {
    use reqwest::header::{HeaderName, HeaderValue};
    const REQUEST: HeaderName = HeaderName::from_static(fusebox::REQUEST);
    call.header(REQUEST, HeaderValue::from(request_id))
}

/// A provider's API key as the header its calls carry, made once.
pub enum SentKey {
    /// No key: calls carry none.
    Absent,
    /// `name: value`.
    Header(reqwest::header::HeaderName, reqwest::header::HeaderValue),
    /// A key no header can carry: its calls fail ([`unusable_key`]).
    Unusable,
}

impl SentKey {
    /// `key` sent as `name: {scheme}{key}`.
    pub fn new(key: Option<&Secret>, name: reqwest::header::HeaderName, scheme: &str) -> Self {
        match key.map(|k| k.header(scheme)) {
            None => SentKey::Absent,
            Some(Some(value)) => SentKey::Header(name, value),
            Some(None) => SentKey::Unusable,
        }
    }

    /// `call` with the key; none when the key cannot be sent.
    pub fn on<'a>(&self, call: HttpCall<'a>) -> Option<HttpCall<'a>> {
        match self {
            SentKey::Absent => Some(call),
            SentKey::Header(name, value) => Some(call.header(name.clone(), value.clone())),
            SentKey::Unusable => None,
        }
    }
}

/// A call whose API key is no header value (a stray line break or
/// control character in it): fusebox's configuration, not the provider.
pub fn unusable_key(provider: &str) -> ProviderError {
    ProviderError::new(
        ErrorKind::Auth,
        None,
        format!("{provider}: the API key holds characters no HTTP header can carry (a line break or control character): set it again"),
    )
}

/// A POST to `ep`: its URL parsed once, when the client was made.
pub fn post<'a>(ep: &Endpoint, parsed: Option<&'a KnownUrl>) -> Result<HttpCall<'a>, Unsendable> {
    match parsed {
        Some(t) => Ok(HttpCall::post_known(t)),
        None => parse_url(&ep.name, &ep.url).map(HttpCall::post),
    }
}

/// A JSON body's content type.
pub const JSON: reqwest::header::HeaderValue = reqwest::header::HeaderValue::from_static("application/json");

/// The error kind of an in-band stream error's type.
pub fn stream_error_kind(t: &str) -> ErrorKind {
    match t {
        "overloaded_error" => ErrorKind::Overloaded,
        "rate_limit_error" | "rate_limit_exceeded" => ErrorKind::RateLimited,
        "invalid_request_error" => ErrorKind::BadRequest,
        "authentication_error" | "permission_error" => ErrorKind::Auth,
        "not_found_error" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::TooLarge,
        _ => ErrorKind::ServerError,
    }
}

/// How the events of a stream are read.
enum Reader {
    OpenAi,
    Anthropic(crate::wire::anthropic::EventReader),
    /// Google's chunks, which no client takes as sent: their pieces carry
    /// no bytes, so they are always written anew in the client's API.
    Gemini(crate::wire::gemini::ChunkReader),
    /// Bedrock's ConverseStream events, likewise.
    Bedrock(crate::wire::bedrock::ConverseEventReader),
}

/// How a body is cut into events.
enum Framing {
    /// Server-Sent Events.
    Sse(crate::wire::sse::SseParser),
    /// AWS event-stream frames (Bedrock).
    Aws(crate::wire::bedrock::EventFrames),
}

impl Framing {
    /// Reads `chunk`: each event it completes handed to `emit`.
    fn feed(&mut self, chunk: &bytes::Bytes, mut emit: impl FnMut(ItemRef<'_>)) -> Result<(), String> {
        match self {
            Framing::Sse(p) => p.feed_each(chunk, emit).map_err(|e| e.to_string()),
            Framing::Aws(f) => {
                f.feed(chunk)?.iter().for_each(|item| emit(item.into()));
                Ok(())
            }
        }
    }

    /// What the body's end completes (a frame cut short completes nothing).
    fn finish(&mut self) -> Vec<crate::wire::sse::SseItem> {
        match self {
            Framing::Sse(p) => p.finish(),
            Framing::Aws(_) => Vec::new(),
        }
    }
}

/// An SSE response body read as pieces: each event re-framed as it came
/// (`event:` and `data:` lines), what it says decoded; a keep-alive comment
/// is a piece without deltas. No bytes for the idle time is a timeout; a
/// broken connection after the first event a truncation.
pub struct SseStream {
    body: AnswerBody,
    framing: Framing,
    /// Pieces read and not yet taken.
    pending: std::collections::VecDeque<Result<super::Piece, Box<ProviderError>>>,
    /// What each event says.
    decode: Decode,
    idle: Duration,
    /// The idle timer, made when the stream first waits.
    idle_timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// It is waiting for bytes (its idle timer is running).
    waiting: bool,
    kind: crate::wire::Api,
    ended: bool,
    /// The descriptor its socket holds.
    _fd: crate::descriptors::Held,
}

/// Reads a stream's events into pieces.
struct Decode {
    provider: String,
    reader: Reader,
    seen_events: bool,
    /// Events that could not be read, skipped.
    skipped: Arc<std::sync::atomic::AtomicU32>,
}

impl SseStream {
    /// Reads `resp` (whose socket holds `fd`) as a stream of `kind`.
    pub fn new(
        provider: &str,
        (resp, fd): (Answer, crate::descriptors::Held),
        idle: Duration,
        kind: crate::wire::Api,
    ) -> Self {
        let reader = match kind {
            crate::wire::Api::Chat | crate::wire::Api::Responses => Reader::OpenAi,
            crate::wire::Api::Messages => Reader::Anthropic(Default::default()),
        };
        Self::reading(provider, (resp, fd), idle, kind, reader)
    }

    /// Reads `resp` as Google's `streamGenerateContent?alt=sse`.
    pub fn gemini(provider: &str, resp: (Answer, crate::descriptors::Held), idle: Duration) -> Self {
        let reader = Reader::Gemini(Default::default());
        Self::reading(provider, resp, idle, crate::wire::Api::Chat, reader)
    }

    /// Reads `resp` as Bedrock's ConverseStream (AWS event-stream frames).
    pub fn bedrock(provider: &str, resp: (Answer, crate::descriptors::Held), idle: Duration) -> Self {
        let reader = Reader::Bedrock(Default::default());
        Self::reading(provider, resp, idle, crate::wire::Api::Chat, reader)
    }

    fn reading(
        provider: &str,
        (resp, fd): (Answer, crate::descriptors::Held),
        idle: Duration,
        kind: crate::wire::Api,
        reader: Reader,
    ) -> Self {
        Self {
            _fd: fd,
            body: resp.into_body(),
            framing: match reader {
                Reader::Bedrock(_) => Framing::Aws(Default::default()),
                _ => Framing::Sse(crate::wire::sse::SseParser::new()),
            },
            // Room for the events one read usually brings.
            pending: std::collections::VecDeque::with_capacity(8),
            decode: Decode {
                provider: provider.to_string(),
                reader,
                seen_events: false,
                skipped: Arc::default(),
            },
            idle,
            idle_timer: None,
            waiting: false,
            kind,
            ended: false,
        }
    }
}

impl Decode {
    /// `item`'s piece queued, unless a stream error is queued before it
    /// (the stream ends there: what follows is not read).
    fn queue(
        &mut self,
        queue: &mut std::collections::VecDeque<Result<super::Piece, Box<ProviderError>>>,
        item: ItemRef<'_>,
    ) {
        if queue.back().is_none_or(Result::is_ok) {
            queue.push_back(self.piece(item));
        }
    }

    fn piece(&mut self, item: ItemRef<'_>) -> Result<super::Piece, Box<ProviderError>> {
        let ev = match item {
            ItemRef::Comment(c) => {
                return Ok(super::Piece {
                    raw: format!(": {c}\n\n").into(),
                    deltas: Default::default(),
                })
            }
            ItemRef::Event(ev) => ev,
        };
        self.seen_events = true;
        // As it came, unless it came otherwise than `write_event` writes it.
        let raw = match (&self.reader, ev.raw) {
            (Reader::OpenAi | Reader::Anthropic(_), Some(raw)) => raw,
            (Reader::OpenAi | Reader::Anthropic(_), None) => {
                let mut raw = Vec::with_capacity(ev.data.len() + 32);
                crate::wire::sse::write_event(ev.event, ev.data, &mut raw);
                raw.into()
            }
            _ => bytes::Bytes::new(),
        };
        let deltas = match &mut self.reader {
            Reader::OpenAi => crate::wire::openai::decode_chunk(ev.data),
            Reader::Anthropic(r) => r.read(ev.event.unwrap_or(""), ev.data),
            Reader::Gemini(r) => r.read(ev.data),
            Reader::Bedrock(r) => r.read(ev.event.unwrap_or(""), ev.data),
        };
        match deltas {
            Ok(deltas) => Ok(super::Piece { raw, deltas }),
            // Never passed on (a client's SDK would choke on it): skipped,
            // and counted; a stream that then does not finish is cut.
            Err(e) if e.is_malformed() => {
                tracing::debug!(provider = %self.provider, "{}", e.message);
                self.skipped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(super::Piece::default())
            }
            Err(e) => Err(Box::new(ProviderError::new(
                stream_error_kind(&e.kind),
                None,
                format!("{}: {}: {}", self.provider, e.kind, e.message),
            ))),
        }
    }
}

impl super::PieceStream for SseStream {
    fn poll_piece(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<Result<super::Piece, ProviderError>>> {
        use std::future::Future;
        loop {
            if let Some(piece) = self.pending.pop_front() {
                return Poll::Ready(Some(piece.map_err(|e| *e)));
            }
            if self.ended {
                return Poll::Ready(None);
            }
            let next = match self.body.poll_data(cx) {
                Poll::Ready(next) => {
                    self.waiting = false;
                    next
                }
                Poll::Pending => {
                    // The idle time runs from when the stream first had
                    // nothing to give, one timer for the stream's life.
                    let deadline = (!self.waiting).then(|| tokio::time::Instant::now() + self.idle);
                    self.waiting = true;
                    let idle = match (&mut self.idle_timer, deadline) {
                        (Some(idle), Some(at)) => {
                            idle.as_mut().reset(at);
                            idle
                        }
                        (Some(idle), None) => idle,
                        (timer, at) => timer.insert(Box::pin(tokio::time::sleep_until(
                            at.unwrap_or_else(|| tokio::time::Instant::now() + self.idle),
                        ))),
                    };
                    if idle.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    self.ended = true;
                    let msg = format!("{}: no stream data for {:?}", self.decode.provider, self.idle);
                    return Poll::Ready(Some(Err(ProviderError::new(ErrorKind::Timeout, None, msg))));
                }
            };
            let bytes = match next {
                None => {
                    self.ended = true;
                    for item in self.framing.finish() {
                        self.decode.queue(&mut self.pending, (&item).into());
                    }
                    continue;
                }
                Some(Ok(b)) => b,
                Some(Err(e)) => {
                    self.ended = true;
                    let kind = if self.decode.seen_events {
                        ErrorKind::Truncated
                    } else {
                        transport_error(&self.decode.provider, &*e).kind
                    };
                    let msg = format!("{}: stream broke: {e}", self.decode.provider);
                    return Poll::Ready(Some(Err(ProviderError::new(kind, None, msg))));
                }
            };
            let (decode, pending) = (&mut self.decode, &mut self.pending);
            match self.framing.feed(&bytes, |item| decode.queue(pending, item)) {
                Ok(()) => {}
                Err(e) => {
                    // What this chunk gave before the error is dropped.
                    self.pending.clear();
                    self.ended = true;
                    let msg = format!("{}: {e}", self.decode.provider);
                    return Poll::Ready(Some(Err(ProviderError::new(ErrorKind::ServerError, None, msg))));
                }
            }
        }
    }
}

/// Reads a streamed response up to its first content: the stream, live;
/// or, when it ends first (an empty answer, an error), drained whole.
pub async fn open_stream(
    mut stream: SseStream,
    rate: crate::resilience::limiter::RateFeedback,
    req: &super::LlmRequest,
    clock: &Clock,
    started: tokio::time::Instant,
) -> Result<super::Opened, ProviderError> {
    let kind = stream.kind;
    let skipped = stream.decode.skipped.clone();
    let mut head = Vec::new();
    loop {
        match (&mut stream as &mut dyn super::PieceStream).piece().await {
            Some(Ok(p)) => {
                let content = p.has_content();
                head.push(p);
                if content {
                    break;
                }
            }
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    let live = super::stream::Live {
        kind,
        rate,
        head,
        rest: Box::new(stream),
        started,
        clock: *clock,
        prompt_chars: req.prompt_chars(),
        skipped,
    };
    if live.head.last().is_some_and(super::Piece::has_content) {
        Ok(super::Opened::Live(live))
    } else {
        live.drain().await.map(super::Opened::Whole)
    }
}
