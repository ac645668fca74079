//! One tool call: drill mode → breaker → bulkhead → call with retries (only
//! for idempotent tools) → record. Successful results feed the cache.

use super::attempt::Verdict;
use super::retry::{Failure, RetryPolicy, Tries, Try};
use super::{Calls, Tally};
use crate::clock::hash_str;
use crate::provider::ToolCall;
use crate::resilience::breaker::CallRecord;
use crate::runner::registry::Entry;
use crate::telemetry::events::{Attempt, StepKind};
use crate::tools::aside::Aside;
use std::sync::Arc;
use std::time::Duration;

/// Why a tool gave no result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolFailure {
    /// Drill mode forces non-critical tools through their degradation branch.
    Drill,
    /// Its breaker is open.
    Open,
    /// Its pool and queue are full.
    PoolFull,
    /// It failed (after retries); the label says how (`503`, `timeout`),
    /// with the tool's own answer where it gave one.
    Failed(String, Option<Arc<str>>),
}

impl From<&ToolFailure> for crate::outcome::HopEnd {
    /// How the hop that gave no result ended.
    fn from(why: &ToolFailure) -> Self {
        use crate::outcome::HopEnd;
        match why {
            ToolFailure::Drill => HopEnd::Drill,
            ToolFailure::Open => HopEnd::Open,
            ToolFailure::PoolFull => HopEnd::Pool,
            ToolFailure::Failed(l, _) => HopEnd::Failed(l.as_str().into()),
        }
    }
}

/// The record of one call of a tool.
fn attempt_of(
    request_id: u64,
    target: &crate::target::Target,
    r: &Result<Arc<str>, crate::provider::ProviderError>,
    latency: Duration,
) -> Attempt {
    let failed = r.as_ref().err();
    Attempt {
        status: Some(r.as_ref().map_or_else(|e| e.status.unwrap_or(0), |_| 200)).filter(|s| *s != 0),
        transport: failed.and_then(|e| e.kind.transport()),
        // A failure with neither (an `isError` answer, an MCP error) in words.
        semantic_failure: failed
            .filter(|e| e.status.is_none() && e.kind.transport().is_none())
            .map(|e| match e.answer {
                Some(_) => "isError answer".into(),
                None => e.kind.label(None),
            }),
        latency_ms: latency.as_millis() as u64,
        answer: r.as_ref().map_or_else(|e| e.answer.clone(), |a| Some(a.clone())),
        ..Attempt::of(request_id, target.clone())
    }
}

/// One use of a tool for a request.
pub struct ToolUse<'a> {
    /// The request it is for.
    pub request: u64,
    /// The tool (its index in the catalog).
    pub tool: usize,
    /// What the model asked of it.
    pub call: &'a ToolCall,
    /// Where its result is cached (the call's [`ToolCall::cache_key`], as
    /// a rule).
    pub key: u64,
    /// The request cannot do without it (drill mode skips only others).
    pub critical: bool,
}

impl Calls<'_> {
    /// Makes `tool_use`. The tally notes that the request needed the tool
    /// (a drill's skip aside).
    pub async fn call_tool(&self, tool_use: ToolUse<'_>, tally: &mut Tally) -> Result<Arc<str>, ToolFailure> {
        let ti = tool_use.tool;
        let r = self.try_tool(tool_use, tally).await;
        if !matches!(r, Err(ToolFailure::Drill)) {
            tally.note_tool(self.catalog.tools[ti].target, r.is_err());
        }
        r
    }

    async fn try_tool(&self, tool_use: ToolUse<'_>, tally: &mut Tally) -> Result<Arc<str>, ToolFailure> {
        let ToolUse {
            request: request_id,
            tool: ti,
            call,
            key,
            critical,
        } = tool_use;
        let slot = &self.catalog.tools[ti];
        let t = self.catalog.registry.get(slot.target);
        if self.drill() && !critical {
            return Err(ToolFailure::Drill);
        }
        let timeout = Duration::from_millis(slot.cfg.timeout_ms);
        // Only an idempotent tool is called twice.
        let policy = RetryPolicy {
            retries: slot.cfg.idempotent,
            key: request_id ^ hash_str(&slot.name),
            deadline: None,
            request: request_id,
            targets: std::slice::from_ref(&t),
        };
        let mut tool_try = ToolTry {
            calls: self,
            target: t,
            slot,
            call,
            request: request_id,
            key,
            timeout,
            tally,
        };
        self.retrying(policy, &mut tool_try).await
    }

    /// A cached result of tool `ti` under `key`, with its age.
    pub fn cached_tool(&self, ti: usize, key: u64) -> Option<(Arc<str>, Duration)> {
        let ttl = Duration::from_secs(self.catalog.tools[ti].cfg.cache_ttl_s);
        if ttl.is_zero() {
            return None;
        }
        self.cache.get(key, ttl, self.clock.now())
    }
}

/// One tool call, tried as the retry loop asks.
struct ToolTry<'a> {
    calls: &'a Calls<'a>,
    target: &'a Entry,
    slot: &'a crate::runner::ToolSlot,
    call: &'a ToolCall,
    request: u64,
    key: u64,
    timeout: Duration,
    tally: &'a mut Tally,
}

impl Tries for ToolTry<'_> {
    type Output = Result<Arc<str>, ToolFailure>;

    /// Its breaker, its pool, then the call within its timeout, ended as
    /// an attempt; a good answer cached.
    async fn once(&mut self, n: u32) -> Try<Self::Output> {
        let mut permit = match self.target.breaker.try_acquire(self.calls.clock.now()) {
            Ok(p) => p,
            Err(_) => {
                self.target.stats.rejected_open.inc();
                self.calls
                    .announce_step(self.request, self.target.target.clone(), StepKind::ShortCircuit);
                return Try::Over(Err(ToolFailure::Open));
            }
        };
        let slot_guard = match self.slot.bulkhead.enter(self.timeout).await {
            Ok(g) => g,
            Err(_) => {
                self.target.breaker.cancel(permit);
                self.target.stats.rejected_rate.inc();
                self.calls
                    .announce_step(self.request, self.target.target.clone(), StepKind::PoolFull);
                return Try::Over(Err(ToolFailure::PoolFull));
            }
        };
        let attempt = self
            .calls
            .attempt(std::array::from_ref(&self.target), self.calls.clock.now(), self.tally);
        // Time the call waits on a person is not the tool's (aside.rs).
        let aside = Arc::new(Aside::default());
        let call =
            self.calls
                .executor
                .call_within(&self.slot.name, &self.call.arguments, self.request, n, self.timeout);
        let probes = &mut [(&self.target.breaker, &mut permit)];
        let r = attempt
            .make(probes, self.timeout, || aside.any(), aside.clone().scope(call))
            .await;
        drop(slot_guard);
        let end = self.calls.clock.now();
        let mut timing = attempt.timing(end, None);
        if aside.any() {
            timing.judged = Some(timing.took.saturating_sub(aside.total(end)));
        }
        let failure = r.as_ref().err().map(|e| e.kind.failure());
        let rec = CallRecord {
            failure,
            ..CallRecord::default()
        };
        attempt.end([permit], Verdict::from(&r), rec, timing, |latency| {
            attempt_of(self.request, &self.target.target, &r, latency)
        });
        match r {
            Ok(text) => {
                if self.slot.cfg.cache_ttl_s > 0 {
                    self.calls.cache.put(self.key, text.clone(), end);
                }
                Try::Over(Ok(text))
            }
            Err(error) => {
                let over = Err(ToolFailure::Failed(
                    error.kind.label(error.status),
                    error.answer.clone(),
                ));
                let failure = Failure {
                    error,
                    end,
                    admits: self.target.breaker.would_admit(end),
                    elsewhere: false,
                };
                Try::Failed(Box::new(failure), over)
            }
        }
    }
}
