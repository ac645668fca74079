//! Calls: one LLM call walked along its route's chain (`walk.rs`), each
//! model tried (`model.rs`) as guarded attempts (`admission.rs` admits and
//! settles one, `attempt.rs` counts and ends it, `retry.rs` makes another
//! while its policy allows), a whole call hedged (`hedge.rs`); an
//! embeddings call (`embed.rs`) and a tool call (`tool.rs`) made as the
//! same attempts.
//!
//! [`Calls`] borrows what calls need from the runner, which owns it: the
//! catalog, the clock, budgets, the retry budget, tenants, the fleet, tool
//! schemas, executor and cache. It is made per request
//! ([`super::Runner::calls`]) and costs a few pointers.

mod admission;
mod attempt;
mod call;
mod embed;
mod hedge;
mod model;
mod retry;
pub(super) mod tenants;
mod tool;
mod walk;

pub use call::{own_params, HopResult, LlmCall, LlmFailure, Tally, Tried};
pub use embed::{EmbedCall, EmbedEnd};
pub(super) use hedge::Leg;
pub use tool::{ToolFailure, ToolUse};

use super::{Catalog, Shared, Totals};
use crate::clock::{Clock, Seed};
use crate::config::Config;
use crate::resilience::budget::{BudgetExceeded, Budgets};
use crate::resilience::cache::ResultCache;
use crate::resilience::retry::RetryBudget;
use crate::telemetry::events::{EventBus, EventKind, Step, StepKind};
use crate::tools::{Schemas, ToolExecutor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// What a call borrows from the runner (see the module doc).
#[derive(Clone, Copy)]
pub struct Calls<'r> {
    pub(super) cfg: &'r Config,
    pub(super) clock: &'r Clock,
    pub(super) seed: Seed,
    pub(super) events: &'r EventBus,
    pub(super) catalog: &'r Catalog,
    pub(super) budgets: &'r Budgets,
    pub(super) tenants: &'r tenants::Tenants,
    pub(super) retry_budget: &'r RetryBudget,
    /// Fleet mode: the fleet's allowances, retry budget and trips.
    pub(super) shared: &'r OnceLock<Arc<dyn Shared>>,
    pub(super) schemas: &'r Schemas,
    pub(super) executor: &'r dyn ToolExecutor,
    pub(super) cache: &'r ResultCache,
    pub(super) totals: &'r Totals,
    pub(super) drill: &'r AtomicBool,
}

impl Calls<'_> {
    /// Whether fault-drill mode is on.
    pub(super) fn drill(&self) -> bool {
        self.drill.load(Ordering::Relaxed)
    }

    /// Emits a step record when someone (traces) listens.
    pub(super) fn announce_step(&self, request: u64, target: crate::target::Target, kind: StepKind) {
        if self.events.has_subscribers() {
            self.events
                .emit(EventKind::Step(Box::new(Step { request, target, kind })));
        }
    }

    /// Counts a budget's refusal of `user`, announcing the first of a window.
    pub(super) fn note_budget_rejection(&self, user: &str, e: &BudgetExceeded) {
        *self.totals.budget_rejections.entry(user.to_string()).or_insert(0) += 1;
        if e.first_in_window {
            self.events.emit(EventKind::BudgetRejected {
                user: user.to_string(),
                reason: format!("{e} (further rejections this minute are counted, not listed)"),
            });
        }
    }
}
