//! Deferral: a request no model or critical tool can serve now is queued
//! (on the fleet's stream in fleet mode, else in the local spool) and
//! re-driven once what it needs recovers, or given up when it expires.
//! [`Deferral`] borrows what that needs from the runner; re-driving a
//! request runs the agent loop again (`agent.rs`).

use super::{Catalog, Shared, Totals};
use crate::clock::Clock;
use crate::config::DegradationConfig;
use crate::outcome::{Level, Outcome};
use crate::request::AgentRequest;
use crate::resilience::defer::{Deferred, Spool};
use crate::telemetry::events::{EventBus, EventKind};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// What deferring a request borrows from the runner.
#[derive(Clone, Copy)]
pub struct Deferral<'r> {
    pub(super) cfg: &'r DegradationConfig,
    pub(super) clock: &'r Clock,
    pub(super) catalog: &'r Catalog,
    pub(super) events: &'r EventBus,
    pub(super) spool: Option<&'r Spool>,
    pub(super) shared: &'r OnceLock<Arc<dyn Shared>>,
    pub(super) totals: &'r Totals,
}

impl Deferral<'_> {
    /// Whether deferred requests have somewhere to go.
    pub fn can_defer(&self) -> bool {
        self.spool.is_some() || self.shared.get().is_some()
    }

    /// Queues `req` for later: on the fleet's stream in fleet mode, else
    /// (or while the fleet's store is unreachable) in the local spool.
    /// What the user is told: that it is queued, or (`Err`) that it failed.
    pub async fn defer(&self, req: &AgentRequest, reason: String) -> Result<String, String> {
        let d = Deferred {
            request: req.clone(),
            deferred_at_ms: self.clock.wall_ms(),
            reason: reason.clone(),
        };
        let shared = match self.shared.get() {
            Some(fleet) => fleet.defer(&d).await,
            None => false,
        };
        if !shared {
            let Some(spool) = self.spool else {
                return Err(self.cfg.user_message.clone());
            };
            if let Err(e) = spool.add(d) {
                tracing::error!(error = %e, "cannot write to the spool; failing the request instead");
                return Err(self.cfg.user_message.clone());
            }
        }
        self.events.emit(EventKind::Deferred {
            request: req.id,
            reason,
        });
        let mins = self.cfg.defer_retry_ms.div_ceil(60_000).max(1);
        Ok(format!(
            "Your request is queued and will be completed as soon as the service recovers (we retry every {mins} min)."
        ))
    }

    /// Whether a deferred request's dependencies look available again.
    fn ready(&self, req: &AgentRequest) -> bool {
        let now = self.clock.now();
        let c = self.catalog;
        let Some(route) = c.route_for(req.route.as_str()) else {
            return true;
        };
        let model_ok = route.chain.iter().any(|&m| c.admits(&c.models[m], now));
        let tools_ok = req.tools.iter().filter_map(|n| c.tool_index.get(n)).all(|&ti| {
            !c.is_critical(ti, &req.critical_tools) || c.registry.get(c.tools[ti].target).breaker.would_admit(now)
        });
        model_ok && tools_ok
    }

    /// Whether a deferred request is due for a re-drive: Some(give_up)
    /// when its dependencies recovered, it expired (give up if still not
    /// ready) or `force` (the last pass before exit).
    pub fn due(&self, d: &Deferred, force: bool) -> Option<bool> {
        let expired = self.expired(d);
        let ready = self.ready(&d.request);
        (force || expired || ready).then_some(expired && !ready && !force)
    }

    /// Whether `d` has waited its longest.
    fn expired(&self, d: &Deferred) -> bool {
        self.clock.wall_ms().saturating_sub(d.deferred_at_ms) >= self.cfg.defer_max_age_ms
    }

    /// Ends deferred request `d` re-driven to `o` (None: given up): the
    /// level it ended with, counted and announced, or None if it failed
    /// again and stays queued (neither expired nor `force`d).
    pub(super) fn finish(&self, d: &Deferred, o: Option<&Outcome>, force: bool) -> Option<Level> {
        let level = o.map_or(Level::Failed, |o| o.level);
        if level == Level::Failed && !force && !self.expired(d) {
            return None;
        }
        if let Some(o) = o {
            self.totals.tokens.fetch_add(o.tokens, Ordering::Relaxed);
            self.totals
                .cost_micro_usd
                .fetch_add((o.cost_usd * 1e6).round() as u64, Ordering::Relaxed);
        }
        self.totals.deferred_done[level.index()].fetch_add(1, Ordering::Relaxed);
        self.events.emit(EventKind::DeferredDone {
            request: d.request.id,
            level,
        });
        Some(level)
    }
}
