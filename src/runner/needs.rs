//! Which targets a request needed and which let it down, counted on each
//! target as the request ends: the share of a dependency's requests that
//! it degraded (`fusebox_degraded_total` over `fusebox_needed_total`).
//!
//! A model hop counts for the model and its provider (both breakers see
//! its calls); a tool call or skip for the tool. A target that answered
//! was needed but let nothing down; one that failed, or was skipped for its
//! breaker, rate limit, pool or latency, let the request down. A model
//! whose API cannot carry the request was not needed, and a drill's skips
//! are the operator's, not the tool's.

use super::calls::{HopResult, Tally};
use crate::blame::Ending;

impl Tally {
    /// Notes that the request needed tool target `target` (a registry
    /// index), and whether it let the request down.
    pub fn note_tool(&mut self, target: usize, let_down: bool) {
        self.tools.push((target, let_down));
    }
}

/// Whether a hop let the request down; `None` when the request did not
/// need its model. A failure that was not the provider's (the caller's
/// or fusebox's own, [`crate::blame`]) let nothing down.
pub(super) fn let_down(r: &HopResult) -> Option<bool> {
    match r {
        HopResult::Ok | HopResult::Resumed | HopResult::OverBudget | HopResult::Unaligned(_) => Some(false),
        HopResult::Unsupported(_) => None,
        HopResult::Failed(kind, _) => Some(Ending::of(*kind).feeds().health),
        HopResult::Cut(e) => Some(Ending::of(e.kind).feeds().health),
        HopResult::Open
        | HopResult::Rate
        | HopResult::Shed(..)
        | HopResult::Sla
        | HopResult::Semantic(_)
        | HopResult::Outrun => Some(true),
    }
}
