//! Providers and tools that behave as recorded.

use super::calls::RecordedCalls;
use crate::clock::Clock;
use crate::provider::mock::{args_for, call_id, order_id};
use crate::provider::stream::Live;
use crate::provider::{
    EmbedRequest, Embedded, ErrorKind, LlmRequest, LlmResponse, Opened, Piece, Provider, ProviderError, ToolCall,
    ToolKind, Usage,
};
use crate::resilience::limiter::RateFeedback;
use crate::target::Target;
use crate::tools::ToolExecutor;
use crate::traffic::log::recorded_rate;
use crate::traffic::log::{AttemptRec, Transport};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Takes `latency` from `start` (now), or fails as timed out at `timeout`
/// if that comes first, as the timer of a live call would (`what` says
/// which call). Ties go to the answer, as with a timer around the call.
async fn take_time(start: Instant, latency: Duration, timeout: Duration, what: &str) -> Result<(), ProviderError> {
    if latency > timeout {
        tokio::time::sleep_until(start + timeout).await;
        return Err(ProviderError::timed_out(what));
    }
    tokio::time::sleep_until(start + latency).await;
    Ok(())
}

/// Plays one recorded attempt from `start` (now): its latency (bounded by
/// `timeout`), then its status or answer.
async fn play(
    a: &AttemptRec,
    own: bool,
    req: Option<&LlmRequest>,
    clock: &Clock,
    start: Instant,
    timeout: Duration,
) -> Result<(Usage, Vec<ToolCall>), ProviderError> {
    let what = if req.is_some() { "provider call" } else { "tool call" };
    // A request's own call that a hedge outran had not answered when it
    // was cut: it runs until the replayed race cuts it again (or, should
    // the replay go otherwise, its timeout).
    if own && a.cut == Some(crate::telemetry::events::Cut::Outrun) {
        tokio::time::sleep_until(start + timeout.min(OUTRUN_MAX)).await;
        return Err(ProviderError::timed_out(what));
    }
    take_time(start, Duration::from_millis(a.latency_ms), timeout, what).await?;
    let usage = Usage {
        input: a.input_tokens,
        output: a.output_tokens,
        cached_input: 0,
    };
    // Most attempts carry no rate-limit headers: nothing to read then.
    let rate = if a.headers.is_empty() {
        RateFeedback::default()
    } else {
        recorded_rate(&a.headers, clock.wall_ms())
    };
    let fail = |kind: ErrorKind, status: Option<u16>| {
        let mut e = ProviderError::new(kind, status, format!("replayed {} ({})", a.target, kind.label(status)));
        e.retry_after = rate.retry_after;
        e.rate = rate.boxed();
        e.usage = usage;
        e
    };
    // A call of this request's that its client left, or the drain ended,
    // ends so again, at the time it did.
    let gone = match a.cut.filter(|_| own) {
        Some(crate::telemetry::events::Cut::Left) => Some(ErrorKind::Left),
        Some(crate::telemetry::events::Cut::Drained) => Some(ErrorKind::Drained),
        _ => None,
    };
    if let Some(kind) = gone {
        return Err(fail(kind, None));
    }
    if let Some(t) = a.transport {
        let kind = match t {
            Transport::Timeout => ErrorKind::Timeout,
            Transport::Connect => ErrorKind::Connect,
            Transport::Reset => ErrorKind::Reset,
            Transport::Truncated => ErrorKind::Truncated,
        };
        return Err(fail(kind, None));
    }
    match a.status {
        Some(s) if s >= 400 => Err(fail(ErrorKind::from_status(s), Some(s))),
        // A tool's failure without a status (an MCP error, an `isError`
        // answer), with the answer where the recording kept it.
        _ if req.is_none() && a.semantic_failure.is_some() => {
            let mut e = fail(ErrorKind::ServerError, None);
            e.answer = a.answer.as_deref().map(Into::into);
            Err(e)
        }
        _ => {
            let calls = match (own, req) {
                (true, Some(req)) if !a.tool_calls.is_empty() => {
                    let order = order_id(req);
                    let key = crate::clock::mix(req.request_id) ^ u64::from(req.step);
                    a.tool_calls
                        .iter()
                        .enumerate()
                        .map(|(i, name)| ToolCall {
                            kind: ToolKind::Function,
                            id: call_id(key, i),
                            // A recorded semantic failure is replayed as one.
                            name: if a.semantic_failure.is_some() {
                                format!("{name}__unknown")
                            } else {
                                name.clone()
                            },
                            arguments: args_for(name, &order),
                        })
                        .collect()
                }
                // A semantic failure recorded without the calls it was
                // about: a call of a tool that does not exist, so it is
                // judged a semantic failure again.
                (true, Some(req)) if a.semantic_failure.is_some() => vec![ToolCall::new(
                    call_id(crate::clock::mix(req.request_id) ^ u64::from(req.step), 0),
                    "recorded_semantic_failure__unknown",
                    "{}",
                )],
                _ => Vec::new(),
            };
            Ok((usage, calls))
        }
    }
}

/// A provider that behaves as recorded.
pub struct RecordedProvider {
    /// Its target, `provider:NAME`, and its index in the calls.
    name: Target,
    target: usize,
    calls: Arc<RecordedCalls>,
    clock: Clock,
    /// The text of every answer, shared.
    text: Arc<str>,
}

impl RecordedProvider {
    /// The recorded provider `name`.
    pub fn new(name: &str, calls: Arc<RecordedCalls>, clock: Clock) -> Self {
        let name = Target::provider(name);
        Self {
            target: calls.target(&name),
            name,
            calls,
            clock,
            text: "replayed answer".into(),
        }
    }
}

#[async_trait::async_trait]
impl Provider for RecordedProvider {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        self.complete_within(req, Duration::MAX).await
    }

    /// An embeddings call as recorded (its answer has no vectors: nobody reads them).
    async fn embed(&self, req: &EmbedRequest) -> Result<Embedded, ProviderError> {
        let start = self.clock.now();
        let usage = match self
            .calls
            .take_at(req.request_id, self.target, &self.name, self.clock.ms_at(start))
        {
            Some((a, own)) => play(&a, own, None, &self.clock, start, Duration::MAX).await?.0,
            None => {
                take_time(start, UNRECORDED_CALL, Duration::MAX, "embeddings call").await?;
                Usage {
                    input: crate::request::tokens_in_chars(req.chars).max(1),
                    ..Usage::default()
                }
            }
        };
        Ok(Embedded {
            body: bytes::Bytes::from_static(br#"{"object":"list","data":[]}"#),
            usage,
            rate: RateFeedback::default(),
        })
    }

    /// A streamed call as recorded: its answer's output as a stream of
    /// text, so what the recorded stream met as it streamed (its user's
    /// hard budget) it meets again; a tool call's answer comes whole.
    async fn open(&self, req: &LlmRequest) -> Result<Opened, ProviderError> {
        let resp = self.complete(req).await?;
        if !resp.tool_calls.is_empty() || resp.usage.output == 0 {
            return Ok(Opened::Whole(resp));
        }
        let mut pieces = streamed(resp.usage);
        let head = pieces.remove(0);
        Ok(Opened::Live(Live {
            kind: crate::wire::Api::Chat,
            rate: RateFeedback::default(),
            head: vec![head],
            rest: Box::new(pieces.into_iter()),
            started: self.clock.now(),
            clock: self.clock,
            prompt_chars: req.prompt_chars(),
            skipped: Arc::default(),
        }))
    }

    async fn complete_within(&self, req: &LlmRequest, timeout: Duration) -> Result<LlmResponse, ProviderError> {
        // Replays run in virtual time, where a call takes exactly the
        // latency it plays: that is its time taken, with no clock to read.
        let start = self.clock.now();
        let now_ms = self.clock.ms_at(start);
        let (usage, tool_calls, took, keys) = match self.calls.take_at(req.request_id, self.target, &self.name, now_ms)
        {
            Some((a, own)) => {
                let (usage, calls) = play(&a, own, Some(req), &self.clock, start, timeout).await?;
                let keys = own.then(|| a.tool_keys.clone());
                (usage, calls, Duration::from_millis(a.latency_ms), keys)
            }
            None => {
                take_time(start, UNRECORDED_CALL, timeout, "provider call").await?;
                let input = crate::request::tokens_in_chars(req.prompt_chars()).max(1);
                let usage = Usage {
                    input,
                    output: req.max_tokens.min(50),
                    cached_input: 0,
                };
                (usage, Vec::new(), UNRECORDED_CALL, None)
            }
        };
        let mut resp = LlmResponse::measured(self.text.clone(), tool_calls, usage, Default::default(), took);
        // The recorded calls' cache keys, where the recording kept them
        // (not the content): the tool cache hits as it did when recorded.
        if let Some(keys) = keys.filter(|k| k.len() == resp.tool_calls.len()) {
            resp.tool_keys = keys.iter().map(|k| k.0).collect();
        }
        Ok(resp)
    }
}

/// A recorded answer of `usage` as stream pieces: its output tokens as
/// text (four characters a token, sixteen tokens a piece), then its
/// finish, usage and end.
fn streamed(usage: Usage) -> Vec<Piece> {
    use crate::wire::{Delta, Finish};
    let mut pieces: Vec<Piece> = (0..usage.output.div_ceil(16))
        .map(|i| {
            let tokens = (usage.output - i * 16).min(16) as usize;
            Piece::said(Delta::Text("tok ".repeat(tokens)))
        })
        .collect();
    let end = [Delta::Finish(Finish::Stop), Delta::Usage(usage), Delta::Done];
    pieces.push(Piece {
        raw: bytes::Bytes::new(),
        deltas: end.into_iter().collect(),
    });
    pieces
}

/// The pieces of a replayed stream, given one by one.
impl crate::provider::PieceStream for std::vec::IntoIter<Piece> {
    fn poll_piece(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Option<Result<Piece, ProviderError>>> {
        std::task::Poll::Ready(self.next().map(Ok))
    }
}

/// The longest a replayed call that a hedge outran waits to be cut again.
const OUTRUN_MAX: Duration = Duration::from_secs(3600);

/// How long a call to a provider the log never shows takes (it is healthy).
const UNRECORDED_CALL: Duration = Duration::from_millis(300);

/// Tools that behave as recorded.
pub struct RecordedTools {
    calls: Arc<RecordedCalls>,
    clock: Clock,
}

impl RecordedTools {
    /// Tools answering from `calls`.
    pub fn new(calls: Arc<RecordedCalls>, clock: Clock) -> Self {
        Self { calls, clock }
    }
}

#[async_trait::async_trait]
impl ToolExecutor for RecordedTools {
    async fn call(&self, name: &str, args: &str, request_id: u64, attempt: u32) -> Result<Arc<str>, ProviderError> {
        self.call_within(name, args, request_id, attempt, Duration::MAX).await
    }

    async fn call_within(
        &self,
        name: &str,
        args: &str,
        request_id: u64,
        _attempt: u32,
        timeout: Duration,
    ) -> Result<Arc<str>, ProviderError> {
        let target = Target::tool(name);
        let start = self.clock.now();
        let mut answer = None;
        if let Some((a, own)) = self.calls.take(request_id, &target, self.clock.ms_at(start)) {
            play(&a, own, None, &self.clock, start, timeout).await?;
            answer = a.answer.as_deref().map(Arc::from);
        } else {
            take_time(start, Duration::from_millis(100), timeout, "tool call").await?;
        }
        // The recorded answer where the recording kept it.
        Ok(answer.unwrap_or_else(|| {
            format!("{{\"tool\":\"{name}\",\"args\":{args},\"status\":\"ok\",\"replayed\":true}}").into()
        }))
    }
}
