//! One LLM call: what it asks, the hops it made through the chain, what it
//! cost, and how it failed.

use crate::provider::{ErrorKind, Message, ProviderError, ToolSpec};
use crate::resilience::budget::BudgetExceeded;
use crate::wire::Params;
use smallvec::SmallVec;
use std::sync::Arc;

/// One LLM call's inputs.
#[derive(Clone, Debug)]
pub struct LlmCall<'a> {
    /// The agent request.
    pub request_id: u64,
    /// Who pays.
    pub user: &'a str,
    /// Whose fair share it uses: its user, or the tenant the operator's
    /// `tenant_header` named.
    pub tenant: &'a str,
    /// The route, found once per request.
    pub route: &'a crate::runner::RouteSlot,
    /// Step of the agent loop.
    pub step: u32,
    /// The conversation.
    pub messages: Arc<[Message]>,
    /// Tools the model may call (tool calls are validated against these).
    pub tools: Arc<[ToolSpec]>,
    /// Output cap on the preferred model.
    pub max_tokens: u32,
    /// What the client asked besides the conversation (a gateway call), or
    /// the runner's own defaults.
    pub params: Arc<Params>,
    /// Stream the answer (`None`: as the provider is configured).
    pub stream: Option<bool>,
    /// Try only the route's first model (the client forbade fallback).
    pub only_first: bool,
    /// The only models the caller may reach (its key's routes and models,
    /// [`crate::runner::Catalog::reach_of`]), on every hop; `None`: any.
    pub reach: Option<&'a [usize]>,
    /// When the whole chain must have answered by (`None`: no deadline).
    pub deadline: Option<tokio::time::Instant>,
    /// How urgent it is where capacity is short.
    pub priority: crate::config::Priority,
}

impl<'a> LlmCall<'a> {
    /// The first step of request `request_id` for `user` on `route`, with
    /// the runner's own parameters.
    pub fn new(
        request_id: u64,
        user: &'a str,
        route: &'a crate::runner::RouteSlot,
        messages: Arc<[Message]>,
        tools: Arc<[ToolSpec]>,
        max_tokens: u32,
    ) -> Self {
        Self {
            request_id,
            user,
            tenant: user,
            route,
            step: 0,
            messages,
            tools,
            max_tokens,
            params: own_params(),
            stream: None,
            only_first: false,
            reach: None,
            deadline: None,
            priority: route.cfg.priority,
        }
    }
}

/// The parameters of the calls the runner makes itself, shared.
pub fn own_params() -> Arc<Params> {
    static OWN: std::sync::LazyLock<Arc<Params>> = std::sync::LazyLock::new(Arc::default);
    OWN.clone()
}

/// What happened at one model of the chain.
#[derive(Clone, Debug, PartialEq)]
pub enum HopResult {
    /// Answered.
    Ok,
    /// Skipped: breaker open (provider or model).
    Open,
    /// Skipped: no rate-limit capacity in time.
    Rate,
    /// Shed from its provider's queue (at this priority, for this reason).
    Shed(crate::config::Priority, crate::resilience::limiter::ShedWhy),
    /// Skipped: recent latency breaks the route's SLA.
    Sla,
    /// Failed (after retries).
    Failed(ErrorKind, Option<u16>),
    /// Answered with an invalid tool call.
    Semantic(String),
    /// Its stream broke after the client's had started.
    Cut(Box<ProviderError>),
    /// Its stream was cut at its user's hard budget (the caller's, not a
    /// failure of the model's).
    OverBudget,
    /// Answered, continuing the answer a model before it cut off.
    Resumed,
    /// Its continuation of a cut answer did not line up with what the
    /// client was sent (how), so the stream ended.
    Unaligned(crate::runner::align::Misaligned),
    /// Skipped: the model's API cannot carry the request (the reason).
    Unsupported(String),
    /// Cancelled in flight: a hedged attempt answered first.
    Outrun,
}

/// One model of the chain and how it went.
#[derive(Clone, Debug, PartialEq)]
pub struct Tried {
    /// Model index.
    pub model: usize,
    /// Result.
    pub result: HopResult,
    /// Attempts made (1 + retries).
    pub tries: u32,
}

/// Accounting for one agent request across all its calls.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Chain steps walked, in order (most requests walk one or two).
    pub hops: SmallVec<[Tried; 2]>,
    /// Tokens consumed.
    pub tokens: u64,
    /// Tokens consumed by failed calls.
    pub wasted: u64,
    /// Cost (USD).
    pub cost: f64,
    /// Provider and tool attempts.
    pub attempts: u32,
    /// Tool targets called or skipped (registry indices), with whether
    /// each let the request down.
    pub tools: SmallVec<[(usize, bool); 2]>,
    /// The model being tried now (a hedge names the call it races).
    pub trying: Option<usize>,
    /// The first refusal of the request as too long for a model, told to
    /// the client when no model of the chain could take it.
    pub too_large: Option<Box<crate::provider::ProviderError>>,
}

/// Why no model answered.
#[derive(Clone, Debug, PartialEq)]
pub enum LlmFailure {
    /// A budget refused the call.
    Budget(BudgetExceeded),
    /// Every model was skipped or failed.
    Exhausted,
    /// The request's deadline passed before any model answered.
    Deadline,
    /// The upstream refused the client's own request as malformed (400,
    /// 404, 422 to a body passed through): the client's mistake, passed
    /// back to it rather than tried elsewhere.
    Upstream(Box<crate::provider::ProviderError>),
    /// The client's stream broke after its first byte and was not resumed.
    Cut(Box<ProviderError>),
    /// The user's hard budget ran out mid-stream: the stream was cut there.
    OverBudget(BudgetExceeded),
}
