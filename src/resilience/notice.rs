//! What the mechanisms announce for operators (a breaker's transitions, a
//! budget's warnings, a limiter's frozen refills), through an interface the
//! event bus implements: the mechanisms know nothing of who listens.

use super::breaker::BreakerState;
use crate::target::Target;
use serde::{Deserialize, Serialize};

/// A breaker changed state.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Transition {
    /// The breaker's target.
    pub breaker: Target,
    /// Previous state.
    pub from: BreakerState,
    /// New state.
    pub to: BreakerState,
    /// Why, in words.
    pub reason: String,
}

/// A user or global budget crossed its soft limit.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BudgetWarning {
    /// Whose budget.
    pub scope: crate::resilience::budget::Scope,
    /// Which of its budgets.
    pub budget: crate::resilience::budget::Budget,
    /// Used so far.
    pub used: f64,
    /// The limit.
    pub limit: f64,
}

/// Limiter refills were frozen (Retry-After or operator).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RefillFrozen {
    /// Provider.
    pub provider: String,
    /// For how long (None = until unfrozen).
    pub for_ms: Option<u64>,
    /// Who or what froze it.
    pub reason: String,
}

/// A spend-rate breaker opened: a scope's spend velocity passed a
/// multiple of its baseline.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpendRateTrip {
    /// Whose spending.
    pub scope: crate::resilience::budget::Scope,
    /// Why, and until when.
    #[serde(flatten)]
    pub trip: crate::resilience::budget::Trip,
}

/// One announcement.
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    /// A breaker changed state.
    Transition(Transition),
    /// A budget crossed its soft limit.
    BudgetWarning(BudgetWarning),
    /// Limiter refills were frozen.
    RefillFrozen(RefillFrozen),
    /// A spend-rate breaker opened.
    SpendRate(SpendRateTrip),
}

/// Where mechanisms announce what they did.
pub trait Announce: Send + Sync {
    /// Takes one announcement (it must not block).
    fn announce(&self, notice: Notice);
}

/// Keeps every announcement, for tests of a mechanism alone.
#[derive(Default)]
pub struct Heard(parking_lot::Mutex<Vec<Notice>>);

impl Heard {
    /// What was announced so far.
    pub fn all(&self) -> Vec<Notice> {
        self.0.lock().clone()
    }
}

impl Announce for Heard {
    fn announce(&self, notice: Notice) {
        self.0.lock().push(notice);
    }
}
