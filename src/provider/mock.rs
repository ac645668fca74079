//! The in-process mock LLM provider: deterministic answers and tool calls
//! derived from the seed and the request, realistic latency and usage, and
//! the shared fault model applied per call.

use super::fault::{Fault, FaultTable};
use super::{ErrorKind, LlmRequest, LlmResponse, Provider, ProviderError, Role, ToolCall, Usage};
use crate::clock::{mix, purpose, Seed};
use crate::resilience::limiter::RateFeedback;
use crate::target::Target;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How fast a mock provider is when healthy.
#[derive(Clone, Copy, Debug)]
pub struct Profile {
    /// Time to first token (ms).
    pub ttft_ms: u64,
    /// Output tokens per second.
    pub tokens_per_s: f64,
    /// Characters per token of its "tokenizer".
    pub chars_per_token: f64,
}

impl Profile {
    /// Answers at once: no time to first token, no generation time.
    pub const INSTANT: Profile = Profile {
        ttft_ms: 0,
        tokens_per_s: 1e12,
        chars_per_token: 4.0,
    };

    /// A plausible profile for a provider named like a real one.
    pub fn for_name(name: &str) -> Self {
        match name {
            "anthropic" => Profile {
                ttft_ms: 350,
                tokens_per_s: 90.0,
                chars_per_token: 3.6,
            },
            "deepseek" => Profile {
                ttft_ms: 700,
                tokens_per_s: 40.0,
                chars_per_token: 2.0,
            },
            _ => Profile {
                ttft_ms: 400,
                tokens_per_s: 80.0,
                chars_per_token: 3.8,
            },
        }
    }
}

/// A mock LLM provider.
pub struct MockProvider {
    target: Target,
    profile: Profile,
    seed: Seed,
    faults: Arc<FaultTable>,
    /// Calls being served now (a `capacity` fault answers 429 above it).
    busy: Arc<AtomicU32>,
}

/// One call counted as being served by a mock provider, until dropped.
pub struct ServedCall(Arc<AtomicU32>);

impl Drop for ServedCall {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl MockProvider {
    /// A mock of the provider `name` (its faults are that provider's).
    pub fn new(name: &str, seed: Seed, faults: Arc<FaultTable>) -> Self {
        Self::with_profile(name, seed, faults, Profile::for_name(name))
    }

    /// A mock with a given speed profile (e.g. [`Profile::INSTANT`] for benchmarks).
    pub fn with_profile(name: &str, seed: Seed, faults: Arc<FaultTable>, profile: Profile) -> Self {
        Self {
            target: Target::provider(name),
            profile,
            seed,
            faults,
            busy: Arc::default(),
        }
    }

    /// Counts a call as served until the guard is dropped: take it before
    /// [`MockProvider::plan`] and hold it while the call is played.
    pub fn serve(&self) -> ServedCall {
        self.busy.fetch_add(1, Ordering::Relaxed);
        ServedCall(self.busy.clone())
    }
}

/// The order number a conversation is about (`#38291`), if any.
pub fn order_id(req: &LlmRequest) -> String {
    req.messages
        .iter()
        .find(|m| m.role == super::Role::User)
        .and_then(|m| {
            let text = m.content.text();
            let after = text.split('#').nth(1)?;
            Some(after.chars().take_while(char::is_ascii_digit).collect::<String>())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "38291".into())
}

/// Valid arguments for a default tool.
pub fn args_for(tool: &str, order: &str) -> String {
    match tool {
        "search_docs" => r#"{"query":"delivery times"}"#.to_string(),
        "send_notification" => format!(r#"{{"user_id":"u-{order}","message":"Your order {order} is on its way"}}"#),
        _ => format!(r#"{{"order_id":"{order}"}}"#),
    }
}

/// What a mock provider does with one call: the fault model applied to a
/// deterministic answer. The in-process mock plays it with sleeps; the HTTP
/// mock server plays it on the wire.
#[derive(Clone, Debug, PartialEq)]
pub enum MockReply {
    /// An answer: `stall` of keep-alives, then the first token after `ttft`,
    /// then `usage.output` tokens at `tokens_per_s`.
    Answer {
        /// Text (empty when calling tools).
        text: String,
        /// Tool calls.
        tool_calls: Vec<ToolCall>,
        /// Usage.
        usage: Usage,
        /// Time to first token.
        ttft: Duration,
        /// Keep-alive stall before anything useful.
        stall: Duration,
        /// Output rate.
        tokens_per_s: f64,
    },
    /// An HTTP error after `delay`.
    Status {
        /// Status code.
        code: u16,
        /// A 429 for a spent quota (its rate headers say so), not for load.
        quota: bool,
        /// Retry-After to send.
        retry_after: Option<Duration>,
        /// Provider-style message.
        message: String,
        /// When it comes.
        delay: Duration,
    },
    /// No answer at all.
    Timeout,
    /// Connection refused.
    Refused,
    /// Connection reset after `delay`.
    Reset {
        /// When.
        delay: Duration,
    },
    /// The stream stops after `delay`, having sent `text` and used `usage`.
    Truncated {
        /// What was sent before the cut.
        text: String,
        /// Tokens used so far.
        usage: Usage,
        /// When the cut happens.
        delay: Duration,
    },
}

/// The answer a conversation gives back to be continued: its last turn
/// the assistant's text, or that followed by [`super::CONTINUE`].
fn continued(req: &LlmRequest) -> Option<String> {
    let m = &req.messages;
    let asked = m
        .last()
        .is_some_and(|l| l.role == Role::User && l.content.text() == super::CONTINUE);
    let answer = if asked {
        m.len().checked_sub(2).map(|i| &m[i])
    } else {
        m.last()
    };
    answer
        .filter(|a| a.role == Role::Assistant && a.tool_calls.is_empty())
        .map(|a| a.content.text().into_owned())
        .filter(|t| !t.is_empty())
}

impl MockProvider {
    /// Decides what this call gets (deterministic in seed, request, step and attempt).
    pub fn plan(&self, req: &LlmRequest) -> MockReply {
        let key = mix(req.request_id) ^ ((req.step as u64) << 48) ^ ((req.attempt as u64) << 56);
        let mut rng = self.seed.stream(purpose::MOCK, key);
        let fault = self.faults.pick(
            &self.target,
            self.seed
                .stream(purpose::FAULT, key ^ mix(req.model.len() as u64))
                .f64(),
        );
        let p = self.profile;
        let input = ((req.prompt_chars() as f64 / p.chars_per_token).ceil() as u32).max(1);

        // Decide the answer: tool calls early in the loop, then a final text.
        let may_call = req.params.tool_choice != Some(crate::wire::ToolChoice::None);
        let offered: Vec<&str> = req.tools.iter().filter(|_| may_call).map(|t| &*t.name).collect();
        let order = order_id(req);
        let mut tool_calls = tools_wanted(req, &offered, &order, key, &mut rng);
        let mut output = if tool_calls.is_empty() {
            60 + rng.u32(0..240)
        } else {
            20 + 15 * tool_calls.len() as u32
        };
        output = output.min(req.max_tokens.max(1));
        let mut tps = p.tokens_per_s;
        let mut ttft = Duration::from_millis(p.ttft_ms);
        let mut stall = Duration::ZERO;
        let text = |model: &str| format!("Order #{order} is in transit and should arrive within 2 days ({model}).");

        match fault {
            Fault::Healthy => {}
            Fault::Status { code, retry_after_ms } => {
                return MockReply::Status {
                    code,
                    quota: true,
                    retry_after: retry_after_ms.map(Duration::from_millis),
                    message: status_message(code),
                    delay: Duration::from_millis(40 + rng.u64(0..60)),
                }
            }
            Fault::Latency { ms } => ttft += Duration::from_millis(ms),
            Fault::Timeout => return MockReply::Timeout,
            Fault::ConnectionRefused => return MockReply::Refused,
            Fault::Reset => {
                return MockReply::Reset {
                    delay: Duration::from_millis(p.ttft_ms / 2),
                }
            }
            Fault::Truncated => {
                let got = output / 3;
                let full = text(&req.model);
                let cut: String = full.chars().take(full.chars().count() / 3).collect();
                return MockReply::Truncated {
                    text: if tool_calls.is_empty() { cut } else { String::new() },
                    usage: Usage {
                        input,
                        output: got,
                        cached_input: 0,
                    },
                    delay: ttft + Duration::from_secs_f64(got as f64 / tps),
                };
            }
            Fault::SlowTokens { tokens_per_s } => {
                // A trickle: what arrives in 20 s is all the caller gets.
                tps = tokens_per_s.max(0.01);
                output = output.min((tps * 20.0).ceil() as u32).max(1);
            }
            Fault::Hallucinate => {
                let name = offered
                    .first()
                    .map(|n| misspell(n))
                    .unwrap_or_else(|| "get_odrer".into());
                tool_calls = vec![ToolCall::new(call_id(key, 0), name, args_for("get_order", &order))];
            }
            Fault::BadArguments => {
                let name = offered
                    .first()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "get_order".into());
                let arguments = if rng.bool() {
                    format!(r#"{{"order_id": {order}"#)
                } else {
                    format!(r#"{{"order_id": {order}}}"#)
                };
                tool_calls = vec![ToolCall::new(call_id(key, 0), name, arguments)];
            }
            Fault::TokenBlowup { factor } => output = output.saturating_mul(factor.max(1)),
            Fault::KeepAliveStall { ms } => stall = Duration::from_millis(ms),
            Fault::Capacity { concurrent } if self.busy.load(Ordering::Relaxed) > concurrent => {
                return MockReply::Status {
                    code: 429,
                    quota: false,
                    retry_after: None,
                    message: "Too many concurrent requests".into(),
                    delay: Duration::from_millis(40 + rng.u64(0..60)),
                };
            }
            Fault::Capacity { .. } => {}
        }
        // A cut answer given back to continue (as a prefill, or followed by
        // the ask for the rest): only what follows it, as a model would.
        let mut answer = text(&req.model);
        if let Some(rest) = continued(req).and_then(|sent| answer.strip_prefix(sent.trim_end())) {
            let share = rest.chars().count() as f64 / answer.chars().count().max(1) as f64;
            output = ((output as f64 * share).ceil() as u32).max(1);
            answer = rest.to_string();
        }
        MockReply::Answer {
            text: if tool_calls.is_empty() { answer } else { String::new() },
            tool_calls,
            usage: Usage {
                input,
                output,
                cached_input: 0,
            },
            ttft,
            stall,
            tokens_per_s: tps,
        }
    }
}

#[async_trait::async_trait]
impl Provider for MockProvider {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        let _serving = self.serve();
        match self.plan(req) {
            MockReply::Answer {
                text,
                tool_calls,
                usage,
                ttft,
                stall,
                tokens_per_s,
            } => {
                let gen = Duration::from_secs_f64(usage.output as f64 / tokens_per_s);
                tokio::time::sleep(stall + ttft + gen).await;
                // Keep-alives do not count as progress: the rate is over the whole call.
                let measured = usage.output as f64 / (stall + ttft + gen).as_secs_f64().max(1e-3);
                Ok(LlmResponse {
                    text: text.into(),
                    tool_calls,
                    tool_keys: Vec::new(),
                    usage,
                    tokens_per_s: Some(measured),
                    rate: None,
                    wire: None,
                })
            }
            MockReply::Status {
                code,
                quota,
                retry_after,
                message,
                delay,
            } => {
                tokio::time::sleep(delay).await;
                let mut e = ProviderError::new(ErrorKind::from_status(code), Some(code), message);
                e.retry_after = retry_after;
                e.rate = RateFeedback {
                    retry_after,
                    remaining_tokens: (code == 429 && quota).then_some(0),
                    ..RateFeedback::default()
                }
                .boxed();
                Err(e)
            }
            MockReply::Timeout => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Err(ProviderError::new(ErrorKind::Timeout, None, "no response"))
            }
            MockReply::Refused => Err(ProviderError::new(ErrorKind::Connect, None, "connection refused")),
            MockReply::Reset { delay } => {
                tokio::time::sleep(delay).await;
                Err(ProviderError::new(ErrorKind::Reset, None, "connection reset by peer"))
            }
            MockReply::Truncated { usage, delay, .. } => {
                tokio::time::sleep(delay).await;
                let mut e = ProviderError::new(ErrorKind::Truncated, None, "stream ended without [DONE]");
                e.usage = usage;
                Err(e)
            }
        }
    }
}

/// The tools a model calls (none once it has their results): its step is
/// the tool rounds the conversation already holds (an outside agent's calls
/// all come as step 0).
fn tools_wanted(req: &LlmRequest, offered: &[&str], order: &str, key: u64, rng: &mut fastrand::Rng) -> Vec<ToolCall> {
    let mut calls = Vec::new();
    let rounds = req.messages.iter().filter(|m| !m.tool_calls.is_empty()).count() as u32;
    let step = req.step.max(rounds);
    let wants_tools = !offered.is_empty() && (step == 0 && rng.f64() < 0.85 || step == 1 && rng.f64() < 0.2);
    if wants_tools {
        let first = if offered.contains(&"get_order") {
            "get_order"
        } else {
            offered[rng.usize(..offered.len())]
        };
        calls.push(ToolCall::new(call_id(key, 0), first, args_for(first, order)));
        for extra in ["lookup_shipping", "search_docs", "send_notification"] {
            if extra != first && offered.contains(&extra) && rng.f64() < 0.3 {
                let id = call_id(key, calls.len());
                calls.push(ToolCall::new(id, extra, args_for(extra, order)));
            }
        }
    }
    calls
}

/// The id of a call's tool call `i`: `call_` and 16 hex digits, as
/// deterministic as the plan.
pub fn call_id(key: u64, i: usize) -> String {
    format!(
        "call_{:016x}",
        mix(key ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    )
}

fn misspell(name: &str) -> String {
    let mut c: Vec<char> = name.chars().collect();
    let n = c.len();
    if n >= 3 {
        c.swap(n - 2, n - 3);
    }
    c.into_iter().collect::<String>() + if n < 3 { "_x" } else { "" }
}

/// The provider-style message for an HTTP status.
pub fn status_message(code: u16) -> String {
    match code {
        429 => "Rate limit reached for requests".into(),
        503 => "The server is overloaded or not ready yet.".into(),
        529 => "Overloaded".into(),
        500 => "The server had an error while processing your request.".into(),
        c => format!("HTTP {c}"),
    }
}
