//! One tool call on behalf of an outside client (an MCP client of the
//! gateway): its arguments checked against the tool's schema, then the
//! tool path every call takes (drill mode, breaker, pool, timeout,
//! retries for idempotent tools, cache), a stale cached answer when the
//! tool cannot answer, and exactly one outcome.

use super::ending::Ended;
use super::llm::Tally;
use super::tool::ToolFailure;
use super::Runner;
use crate::outcome::{Level, Outcome};
use crate::provider::ToolCall;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A tool call asked for by an outside client.
#[derive(Clone, Debug)]
pub struct ToolRequest {
    /// Unique id.
    pub id: u64,
    /// Who asked.
    pub user: String,
    /// The call: the tool's name and its arguments (a JSON object).
    pub call: ToolCall,
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
    /// Runs one tool call to its end.
    pub async fn tool(&self, req: &ToolRequest) -> (ToolEnd, Outcome) {
        let start = self.clock.now();
        self.totals.requests.fetch_add(1, Ordering::Relaxed);
        let mut tally = Tally::default();
        let name = &req.call.name;
        let end = match self.tool_index.get(name).copied() {
            None => ToolEnd::Refused(format!("no tool `{name}`")),
            Some(ti) => match self
                .schemas
                .check(&req.call, std::slice::from_ref(&self.tools[ti].spec))
            {
                Err(why) => ToolEnd::Refused(why),
                Ok(()) => self.tool_on(req, ti, &mut tally).await,
            },
        };
        let (level, label) = match &end {
            ToolEnd::Answer(_) => (Level::None, "✓".to_string()),
            ToolEnd::Stale { why, .. } => (Level::Partial, format!("{} → cache", why.label())),
            ToolEnd::Unavailable(why) => (Level::Failed, why.label()),
            ToolEnd::Refused(_) => (Level::Failed, "✗refused".to_string()),
        };
        let ended = Ended {
            chain: vec![format!("{name} {label}")],
            stale_ms: match &end {
                ToolEnd::Stale { age, .. } => Some(age.as_millis() as u64),
                _ => None,
            },
            ..Ended::at(level)
        };
        let took = self.clock.now().saturating_duration_since(start);
        let outcome = self.outcome(req.id, &req.user, ended, &tally, took);
        self.count_outcome(&outcome);
        (end, outcome)
    }

    async fn tool_on(&self, req: &ToolRequest, ti: usize, tally: &mut Tally) -> ToolEnd {
        let key = req.call.cache_key();
        let critical = self.tools[ti].cfg.critical;
        match self.call_tool(req.id, ti, &req.call, key, critical, tally).await {
            Ok(answer) => ToolEnd::Answer(answer),
            Err(why) => match self.cached_tool(ti, key) {
                Some((answer, age)) => ToolEnd::Stale { answer, age, why },
                None => ToolEnd::Unavailable(why),
            },
        }
    }
}
