//! What a fleet of instances shares with this runner: the users' budget
//! allowances, the retry budget, the deferred stream and
//! provider-signalled breaker trips.
//! The runner owns this interface and the fleet implements it, so the
//! fleet depends on the runner and not the other way round.

use crate::resilience::budget::{BudgetExceeded, UserLimits};
use crate::resilience::defer::Deferred;
use crate::target::Target;

/// What a call took from the fleet's budget allowances; give it back with
/// [`Shared::settle`].
#[derive(Clone, Copy, Debug, Default)]
#[must_use = "an allowance reservation must be settled"]
pub struct Reserved {
    /// Tokens taken.
    pub tokens: f64,
    /// Cost taken (USD).
    pub cost: f64,
}

/// The fleet, as the runner uses it.
#[async_trait::async_trait]
pub trait Shared: Send + Sync {
    /// Takes `tokens` and `cost` from every budget `user` (whose own
    /// budgets are `limits`) is under, as the whole fleet has spent them;
    /// all or nothing.
    async fn reserve(&self, user: &str, limits: UserLimits, tokens: u32, cost: f64)
        -> Result<Reserved, BudgetExceeded>;

    /// Settles a reservation with what the call used.
    fn settle(&self, user: &str, reserved: Reserved, tokens: u32, cost: f64);

    /// Takes one retry (or hedge) from the fleet's retry budget; None when
    /// the fleet cannot say now (the runner's own budget decides).
    async fn retry(&self) -> Option<bool>;

    /// Tells the fleet that the runner's own budget allowed a retry after
    /// [`Shared::retry`] could not say, to count it once the fleet can.
    fn retried_alone(&self);

    /// Puts a deferred request on the fleet's stream; false if it cannot
    /// take it now (the runner spools it locally).
    async fn defer(&self, deferred: &Deferred) -> bool;

    /// Tells the other instances that the provider's answers opened this
    /// breaker.
    fn trip(&self, breaker: Target, reason: String);
}
