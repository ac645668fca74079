//! One tool call on behalf of an outside client (an MCP client of the
//! gateway): its arguments checked against the tool's schema, then the
//! tool path every call takes (its session's quotas, drill mode, breaker,
//! pool, timeout, retries for idempotent tools, cache), a stale cached
//! answer when the tool cannot answer, and exactly one outcome.

use super::calls::{Calls, Tally, ToolFailure, ToolUse};
use super::ending::Ended;
use super::scope::{Scope, Tallied};
use super::Runner;
use crate::outcome::HopEnd;
use crate::outcome::Outcome;
use crate::provider::{Message, ToolCall};
use crate::request::{AgentRequest, Via};
use crate::telemetry::events::Arrival;
use std::sync::Arc;
use std::time::Duration;

/// A tool call asked for by an outside client.
#[derive(Clone, Debug)]
pub struct ToolRequest {
    /// Unique id.
    pub id: u64,
    /// Who asked.
    pub user: String,
    /// The session whose quotas it counts against (the MCP session).
    pub session: Option<String>,
    /// The call: the tool's name and its arguments (a JSON object).
    pub call: ToolCall,
    /// Its key in the result cache ([`ToolRequest::new`]: of the name and
    /// arguments; a replay without recorded arguments, the recorded one).
    pub key: u64,
    /// Whether the arguments are the caller's, to be checked against the
    /// schema (a replay without recorded content has none to check).
    pub check: bool,
    /// The arguments as JSON, where the caller has them so (an MCP
    /// client's): checked as they are, their text not read again.
    pub read: Option<Arc<serde_json::Value>>,
}

impl ToolRequest {
    /// A call of `name` with `arguments` (a JSON object's text).
    pub fn new(id: u64, user: String, session: Option<String>, name: &str, arguments: String) -> Self {
        // The key a recording of it keeps (that of `as_request`), made
        // without building that request on every call.
        let key = super::agent::answer_key_of(name, &arguments);
        Self {
            id,
            user,
            session,
            key,
            call: ToolCall::new("", name, arguments),
            check: true,
            read: None,
        }
    }

    /// The call as the agent request a recording and its replay see: its
    /// route is the tool, its one message the arguments.
    fn as_request(id: u64, user: &str, session: Option<&str>, call: &ToolCall) -> AgentRequest {
        AgentRequest {
            id,
            user: user.into(),
            session: session.unwrap_or_default().into(),
            route: call.name.as_str().into(),
            messages: Arc::from([Message::user(call.arguments.clone())]),
            tools: vec![call.name.clone()],
            max_steps: 1,
            ..AgentRequest::default()
        }
    }
}

/// How a tool call ended.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolEnd {
    /// The tool's answer.
    Answer(Arc<str>),
    /// The tool could not answer; this is its last good answer to the same
    /// arguments, this old.
    Stale {
        /// The cached answer.
        answer: Arc<str>,
        /// Its age.
        age: Duration,
        /// Why the tool did not answer now.
        why: ToolFailure,
    },
    /// No answer, and why (a failure may carry the tool's own answer).
    Unavailable(ToolFailure),
    /// No such tool, or arguments its schema refuses: never called.
    Refused(String),
}

impl Runner {
    /// Whether a call of tool `name` begun now needs its answer as text:
    /// the tool's answers are cached, or someone listens to the record.
    /// (A client that takes the answer whole needs no text otherwise.)
    pub fn keeps_answers_of(&self, name: &str) -> bool {
        self.events.has_subscribers()
            || self
                .catalog
                .tool_index
                .get(name)
                .is_some_and(|&ti| self.catalog.tools[ti].cfg.cache_ttl_s > 0)
    }

    /// Runs one tool call to its end.
    pub async fn tool(&self, req: &ToolRequest) -> (ToolEnd, Outcome) {
        let mut run = Tallied::new(Scope::begin(self, req.id, &req.user, || Arrival {
            request: ToolRequest::as_request(req.id, &req.user, req.session.as_deref(), &req.call),
            via: Via::Tool,
        }));
        let name = &req.call.name;
        let checked = match self.catalog.tool_index.get(name).copied() {
            None => Err(format!("no tool `{name}`")),
            Some(ti) if req.check => self
                .schemas
                .check_read(
                    &req.call,
                    req.read.as_deref(),
                    std::slice::from_ref(&self.catalog.tools[ti].spec),
                )
                .map(|()| ti),
            Some(ti) => Ok(ti),
        };
        let end = match checked {
            Err(why) => ToolEnd::Refused(why),
            Ok(ti) => match req.session.as_deref() {
                None => self.calls().answer_tool(req, ti, &mut run.tally).await,
                Some(s) => match self.sessions.enter(&req.user, s, self.clock.elapsed_ms()) {
                    Err(q) => ToolEnd::Refused(q.to_string()),
                    // A cancelled call leaves the session too, when `session` drops.
                    Ok(session) => {
                        let end = self.calls().answer_tool(req, ti, &mut run.tally).await;
                        session.leave(self.clock.elapsed_ms());
                        end
                    }
                },
            },
        };
        let how = match &end {
            ToolEnd::Answer(_) => HopEnd::Ok,
            ToolEnd::Stale { why, .. } => HopEnd::Stale(Box::new(HopEnd::from(why))),
            ToolEnd::Unavailable(why) => HopEnd::from(why),
            ToolEnd::Refused(_) => HopEnd::Refused,
        };
        let ended = Ended {
            chain: vec![crate::outcome::Hop::new(name, how)],
            ..Ended::from(&end)
        };
        let outcome = run.outcome(ended);
        run.end(&outcome);
        (end, outcome)
    }
}

impl Calls<'_> {
    /// Answers an outside client's call `req` of tool `ti`: the tool's
    /// answer, else its last good answer to the same arguments, else why not.
    pub(in crate::runner) async fn answer_tool(&self, req: &ToolRequest, ti: usize, tally: &mut Tally) -> ToolEnd {
        let key = req.key;
        let critical = self.catalog.tools[ti].cfg.critical;
        let tool_use = ToolUse {
            request: req.id,
            tool: ti,
            call: &req.call,
            key,
            critical,
        };
        match self.call_tool(tool_use, tally).await {
            Ok(answer) => ToolEnd::Answer(answer),
            Err(why) => match self.cached_tool(ti, key) {
                Some((answer, age)) => ToolEnd::Stale { answer, age, why },
                None => ToolEnd::Unavailable(why),
            },
        }
    }
}
