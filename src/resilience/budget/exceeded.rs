//! A budget's refusal, naming the budget, what the request would use and
//! when it could go.

/// A refused reservation, naming the budget.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetExceeded {
    /// `user NAME` or `global`.
    pub scope: String,
    /// e.g. `tokens/minute`, `cost/day (USD)`.
    pub what: &'static str,
    /// Usage after this request.
    pub would: f64,
    /// The limit.
    pub limit: f64,
    /// What this request alone would use.
    pub alone: f64,
    /// The first refusal of this user in this minute (worth announcing).
    pub first_in_window: bool,
}

/// `what` of a budget that cannot be checked (fleet, failing closed).
const UNREACHABLE: &str = "store unreachable";

impl BudgetExceeded {
    /// The request alone is more than the limit: no wait lets it through.
    pub fn never(&self) -> bool {
        self.limit > 0.0 && self.alone > self.limit
    }

    /// When to try again: the refusing window's length (at most that until
    /// it has room again), or a few seconds for a store that is unreachable.
    pub fn retry_after(&self) -> std::time::Duration {
        let secs = if self.what == UNREACHABLE {
            5
        } else if self.what.contains("minute") {
            60
        } else if self.what.contains("hour") {
            3_600
        } else {
            86_400
        };
        std::time::Duration::from_secs(secs)
    }

    /// A fleet budget that cannot be checked because its store is
    /// unreachable, with budgets failing closed.
    pub fn store_unreachable(scope: String) -> Self {
        Self {
            scope,
            what: UNREACHABLE,
            would: 0.0,
            limit: 0.0,
            alone: 0.0,
            first_in_window: false,
        }
    }
}

impl std::fmt::Display for BudgetExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.what == UNREACHABLE {
            return write!(
                f,
                "{} budget cannot be checked: the fleet's store is unreachable and budgets fail closed",
                self.scope
            );
        }
        if self.never() {
            return write!(
                f,
                "{} budget: this request alone needs {:.0} {}, more than the limit of {:.0}, so it can never be served (ask for less: a shorter input, a lower max_tokens or n)",
                self.scope, self.alone, self.what, self.limit
            );
        }
        write!(
            f,
            "{} budget exceeded: {} would reach {:.0} of {:.0}",
            self.scope, self.what, self.would, self.limit
        )
    }
}

impl std::error::Error for BudgetExceeded {}
