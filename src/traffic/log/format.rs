//! The records of the format, as written and read: one JSON object per
//! line, its `kind` naming the record.

pub use super::id::LogId;
use crate::command::{Command, CommandError, Issuer};
use crate::outcome::Level;
use crate::provider::Message;
pub use crate::provider::Transport;
use crate::request::Via;
use crate::resilience::breaker::BreakerState;
use crate::target::Target;
use crate::telemetry::events::Transition;
use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The format version this module writes and reads.
pub const VERSION: u32 = 1;

/// The longest line the reader accepts; a longer one is a bad line (and is
/// skipped without being buffered whole), so one runaway line cannot exhaust
/// memory.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// One record (one line of the log).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// The first line: format version, start time and seed.
    Header(Header),
    /// A request entered the runner.
    Request(RequestRec),
    /// One call to a provider or tool on behalf of a request.
    Attempt(AttemptRec),
    /// How a request ended.
    Outcome(OutcomeRec),
    /// A breaker changed state (informational; replay recomputes these).
    Transition(TransitionRec),
    /// An operator command from the console or the control API.
    Operator(OperatorRec),
}

impl Record {
    /// Milliseconds since the start of the log (0 for the header).
    pub fn t_ms(&self) -> u64 {
        match self {
            Record::Header(_) => 0,
            Record::Request(r) => r.t_ms,
            Record::Attempt(r) => r.t_ms,
            Record::Outcome(r) => r.t_ms,
            Record::Transition(r) => r.t_ms,
            Record::Operator(r) => r.t_ms,
        }
    }

    /// Moves the record `by` milliseconds earlier (the header stays).
    pub(super) fn shift_back(&mut self, by: u64) {
        let t = match self {
            Record::Header(_) => return,
            Record::Request(r) => &mut r.t_ms,
            Record::Attempt(r) => &mut r.t_ms,
            Record::Outcome(r) => &mut r.t_ms,
            Record::Transition(r) => &mut r.t_ms,
            Record::Operator(r) => &mut r.t_ms,
        };
        *t -= by;
    }

    /// The `kind` written on the line.
    pub fn kind(&self) -> &'static str {
        match self {
            Record::Header(_) => "header",
            Record::Request(_) => "request",
            Record::Attempt(_) => "attempt",
            Record::Outcome(_) => "outcome",
            Record::Transition(_) => "transition",
            Record::Operator(_) => "operator",
        }
    }

    /// The record as one JSON line, without the trailing newline.
    pub fn to_line(&self) -> String {
        // Serializing these types cannot fail (string keys, derived impls);
        // should it ever, an empty line is written, which readers skip.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The header line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Format version ([`VERSION`]).
    pub v: u32,
    /// Wall-clock start of the log (RFC 3339).
    pub started_at: String,
    /// The run's seed.
    pub seed: u64,
    /// The tools a gateway found on its MCP servers, with the settings it
    /// gave them (a replay has no servers to ask).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, crate::config::ToolConfig>,
}

impl Header {
    /// `started_at` in ms since the Unix epoch (None if it does not parse).
    pub fn started_ms(&self) -> Option<u64> {
        let t = humantime::parse_rfc3339_weak(&self.started_at).ok()?;
        Some(t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis() as u64)
    }
}

/// A request line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestRec {
    /// Milliseconds since the start.
    pub t_ms: u64,
    /// Request id, unique within the log: a string or a number, as written.
    pub id: LogId,
    /// User.
    pub user: CompactString,
    /// The sub-user a gateway caller named (reported, not billed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_user: Option<CompactString>,
    /// Session.
    pub session: CompactString,
    /// Route.
    pub route: CompactString,
    /// Prompt size (tokens).
    pub prompt_tokens: u32,
    /// Output cap (tokens).
    pub max_tokens: u32,
    /// Names of the tools available to the agent.
    pub tools: Vec<String>,
    /// Tools without which the answer fails rather than degrades.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub critical_tools: Vec<String>,
    /// Agent step cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// The conversation (only with content recording `full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<Message>>,
    /// Hash of the conversation (only with content recording `hash`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// Its key in the answer cache, salted (when content is not recorded):
    /// requests share one exactly when they asked the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_key: Option<Key>,
    /// How it came in: the agent loop, the gateway, embeddings.
    #[serde(default, skip_serializing_if = "Via::is_agent")]
    pub via: Via,
    /// Its priority, where it differs from its route's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<crate::config::Priority>,
    /// Whose fair share its calls use, where the operator's
    /// `[limiter.queue] tenant_header` named one (`None`: its user's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<CompactString>,
    /// Choices asked for (`n`), when more than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub choices: Option<u32>,
    /// The only models its caller's key could reach, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reach: Option<Vec<CompactString>>,
    /// The caller asked for its answer streamed (a gateway call): a
    /// replay streams it too, so what cut the stream (a budget) cuts it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
}

/// A cache key as a recording keeps it: 16 hex digits of a salted hash,
/// so recorded calls share a key exactly when they shared one, and what
/// they said cannot be recovered from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key(pub u64);

impl Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{:016x}", self.0))
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        match u64::from_str_radix(&s, 16) {
            Ok(k) if s.len() == 16 => Ok(Key(k)),
            _ => Err(serde::de::Error::custom(format!("expected 16 hex digits, found `{s}`"))),
        }
    }
}

/// An attempt line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptRec {
    /// Milliseconds since the start.
    pub t_ms: u64,
    /// The request's id.
    pub request: LogId,
    /// The provider or tool called.
    pub target: crate::target::Target,
    /// Model, for provider attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<CompactString>,
    /// HTTP status, or `None` when there was no response.
    pub status: Option<u16>,
    /// Transport failure, if any.
    pub transport: Option<Transport>,
    /// Time taken.
    pub latency_ms: u64,
    /// Input tokens charged.
    pub input_tokens: u32,
    /// Output tokens charged.
    pub output_tokens: u32,
    /// Rate-limit and retry-after response headers (lower-case names; never auth).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Why a 200 was still a failure (e.g. malformed tool call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semantic_failure: Option<String>,
    /// Tool names the model asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
    /// Each of those calls' key in the tool result cache, salted (when
    /// content is not recorded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_keys: Vec<Key>,
    /// A tool's answer (only with content recording `full`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The upstream's id of its answer (`chatcmpl-…`, `msg_…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// What cut it short, when something did before it ended (its
    /// tokens are those charged: used up to then where known, else what
    /// was reserved for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<crate::telemetry::events::Cut>,
    /// What a call cut short was charged (USD), as its user's budgets
    /// were; written only with `cut` (another call's cost is its tokens at
    /// its model's prices, which the outcome sums).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// An outcome line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutcomeRec {
    /// Milliseconds since the start.
    pub t_ms: u64,
    /// The request's id.
    pub request: LogId,
    /// Degradation level.
    pub level: Level,
    /// The path walked.
    pub chain: Vec<String>,
    /// Estimated quality (0..=1).
    pub quality: f64,
    /// Tokens consumed by all attempts.
    pub tokens: u64,
    /// Cost of all attempts (USD).
    pub cost_usd: f64,
    /// Components that were unavailable.
    pub missing: Vec<String>,
    /// The request's name outside (`x-fusebox-request-id`), for a
    /// gateway's request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<CompactString>,
}

/// A breaker transition line (and a summary's transition).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionRec {
    /// Milliseconds since the start.
    pub t_ms: u64,
    /// The breaker's target.
    pub breaker: Target,
    /// State before.
    pub from: BreakerState,
    /// State after.
    pub to: BreakerState,
    /// Why.
    pub reason: String,
}

impl TransitionRec {
    /// The record of `t`, which happened at `t_ms`.
    pub fn of(t_ms: u64, t: &Transition) -> Self {
        Self {
            t_ms,
            breaker: t.breaker.clone(),
            from: t.from,
            to: t.to,
            reason: t.reason.clone(),
        }
    }
}

/// An operator command line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperatorRec {
    /// Milliseconds since the start.
    pub t_ms: u64,
    /// One of [`Command::ACTIONS`].
    pub action: String,
    /// What it applies to (a breaker, provider, tool, ...).
    pub target: String,
    /// Action arguments (e.g. the fault for `set_fault`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Map<String, Value>>,
    /// Who issued it.
    pub by: String,
}

impl OperatorRec {
    /// The record of `command`, issued by `by` at `t_ms`.
    pub fn of(t_ms: u64, command: &Command, by: &Issuer) -> Self {
        let args = match command {
            Command::SetFault { fault, .. } => serde_json::to_value(fault)
                .ok()
                .map(|f| Map::from_iter([("fault".to_string(), f)])),
            Command::ResetSpendRate { user: Some(u) } => Some(Map::from_iter([("user".to_string(), u.clone().into())])),
            _ => None,
        };
        OperatorRec {
            t_ms,
            action: command.action().into(),
            target: command.target().map_or_else(|| "*".into(), ToString::to_string),
            args,
            by: by.to_string(),
        }
    }

    /// The command it records.
    pub fn command(&self) -> Result<Command, CommandError> {
        if !Command::ACTIONS.contains(&self.action.as_str()) {
            return Err(CommandError::UnknownAction(self.action.clone()));
        }
        let mut v = Map::new();
        v.insert("action".into(), self.action.clone().into());
        v.insert("target".into(), self.target.clone().into());
        for arg in ["fault", "user"] {
            if let Some(a) = self.args.as_ref().and_then(|a| a.get(arg)) {
                v.insert(arg.into(), a.clone());
            }
        }
        serde_json::from_value(Value::Object(v)).map_err(|e| CommandError::Invalid(e.to_string()))
    }
}
