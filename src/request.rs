//! What comes into the runner: an agent request, and how a request came in.

use crate::wire::Message;
use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One agent request: a user's question run through the agent loop.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AgentRequest {
    /// Unique id.
    pub id: u64,
    /// Who asked (budgets are per user).
    pub user: CompactString,
    /// Whom a gateway caller said it is for, where its key allows a
    /// sub-user: reported, never billed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_user: Option<CompactString>,
    /// Conversation/session (quotas are per session).
    pub session: CompactString,
    /// Route name (which chain of models).
    pub route: CompactString,
    /// The conversation so far (shared: the first LLM call of a request
    /// sends it as it is).
    pub messages: Arc<[Message]>,
    /// Names of the tools the agent may use.
    pub tools: Vec<String>,
    /// Tools this request cannot do without (in addition to configured ones).
    pub critical_tools: Vec<String>,
    /// Output cap per LLM call.
    pub max_tokens: u32,
    /// LLM steps allowed (0 = the session default).
    pub max_steps: u32,
    /// How urgent it is where capacity is short (`None`: as its route says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<crate::config::Priority>,
    /// Whose fair share its calls use, where the operator's
    /// `[limiter.queue] tenant_header` named one (`None`: its user's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<CompactString>,
    /// Choices asked for (OpenAI's `n`), when more than one: each may use
    /// the whole output cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choices: Option<u32>,
    /// The only models the caller's key may reach, by name (`None`: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reach: Option<Vec<CompactString>>,
    /// The caller asked for its answer streamed (a gateway call).
    pub stream: bool,
}

/// How a request came in, so a replay drives it as it was driven.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// The agent loop (the demo, a scenario, a replay).
    #[default]
    Agent,
    /// One chat call through the gateway: no agent loop, never deferred.
    Gateway,
    /// One embeddings call through the gateway.
    Embeddings,
    /// One tool call through the MCP proxy: the route names the tool, the
    /// one message holds the arguments.
    Tool,
}

impl Via {
    /// Whether this is the agent loop.
    pub fn is_agent(&self) -> bool {
        *self == Via::Agent
    }
}

/// The session of a call that named none: one of its own, `{user}/call-{id}`.
pub fn own_session(user: &str, id: u64) -> CompactString {
    compact_str::format_compact!("{user}/call-{id}")
}

/// The rule of thumb where no tokenizer or usage is at hand: four
/// characters a token.
pub const CHARS_PER_TOKEN: usize = 4;

/// Tokens in `chars` characters of text by [`CHARS_PER_TOKEN`], rounded up.
pub fn tokens_in_chars(chars: usize) -> u32 {
    u32::try_from(chars.div_ceil(CHARS_PER_TOKEN)).unwrap_or(u32::MAX)
}
