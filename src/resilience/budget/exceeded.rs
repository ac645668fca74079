//! A budget's refusal, naming the budget (whose, what it counts, over which
//! window), what the request would use and when it could go.

use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Whose budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Everyone's together.
    Global,
    /// One user's.
    User(CompactString),
}

impl Scope {
    /// The user it is, or `*` for everyone.
    pub fn user(&self) -> &str {
        match self {
            Scope::Global => "*",
            Scope::User(u) => u,
        }
    }

    /// What kind of scope: `global` or `user`.
    pub fn kind(&self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::User(_) => "user",
        }
    }
}

/// A budget's window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Window {
    /// The current minute.
    Minute,
    /// The current hour.
    Hour,
    /// The current day.
    Day,
}

impl Window {
    /// Its length: the longest wait until it has room again.
    pub fn len(self) -> Duration {
        Duration::from_secs(match self {
            Window::Minute => 60,
            Window::Hour => 3_600,
            Window::Day => 86_400,
        })
    }

    /// Its name, as in `tokens/minute`.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::Minute => "minute",
            Window::Hour => "hour",
            Window::Day => "day",
        }
    }
}

/// What a budget counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// Tokens, input and output.
    Tokens,
    /// Cost in US dollars.
    Usd,
}

/// One budget of a scope: what it counts over which window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Budget {
    /// What it counts.
    pub metric: Metric,
    /// Over which window.
    pub window: Window,
}

impl Budget {
    /// Tokens per `window`.
    pub const fn tokens(window: Window) -> Self {
        Self {
            metric: Metric::Tokens,
            window,
        }
    }

    /// Dollars per `window`.
    pub const fn usd(window: Window) -> Self {
        Self {
            metric: Metric::Usd,
            window,
        }
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.metric {
            Metric::Tokens => write!(f, "tokens/{}", self.window.as_str()),
            Metric::Usd => write!(f, "cost/{} (USD)", self.window.as_str()),
        }
    }
}

/// A refused reservation, naming the budget.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetExceeded {
    /// Whose budget.
    pub scope: Scope,
    /// Kept on the fleet's store, shared by every instance.
    pub fleet: bool,
    /// Which budget; `None` for a fleet budget that cannot be checked (its
    /// store unreachable, budgets failing closed).
    pub budget: Option<Budget>,
    /// Usage after this request.
    pub would: f64,
    /// The limit.
    pub limit: f64,
    /// What this request alone would use.
    pub alone: f64,
    /// The first refusal of this user in this minute (worth announcing).
    pub first_in_window: bool,
    /// Refused by the scope's spend-rate breaker rather than a total.
    pub rate: Option<RateRefusal>,
}

/// A refusal by a scope's spend-rate breaker: why it opened, and how long
/// it stays open.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateRefusal {
    /// Why it opened.
    pub trip: super::Trip,
    /// Until it closes.
    pub left: Duration,
}

/// How soon to try a budget whose store is unreachable.
const UNREACHABLE_RETRY: Duration = Duration::from_secs(5);

impl BudgetExceeded {
    /// The request alone is more than the limit: no wait lets it through.
    pub fn never(&self) -> bool {
        self.limit > 0.0 && self.alone > self.limit
    }

    /// When to try again: the refusing window's length (at most that until
    /// it has room again), until a spend-rate breaker closes, or a few
    /// seconds for a store that is unreachable.
    pub fn retry_after(&self) -> Duration {
        if let Some(r) = self.rate {
            return r.left;
        }
        self.budget.map_or(UNREACHABLE_RETRY, |b| b.window.len())
    }

    /// A refusal of `scope` by its open spend-rate breaker.
    pub fn spend_rate(scope: Scope, trip: super::Trip, now_ms: u64) -> Self {
        Self {
            scope,
            fleet: false,
            budget: None,
            would: 0.0,
            limit: 0.0,
            alone: 0.0,
            first_in_window: true,
            rate: Some(RateRefusal {
                trip,
                left: Duration::from_millis(trip.until_ms.saturating_sub(now_ms)),
            }),
        }
    }

    /// A fleet budget of `scope` that cannot be checked because its store
    /// is unreachable, with budgets failing closed.
    pub fn store_unreachable(scope: Scope) -> Self {
        Self {
            scope,
            fleet: true,
            budget: None,
            would: 0.0,
            limit: 0.0,
            alone: 0.0,
            first_in_window: false,
            rate: None,
        }
    }

    /// Whose budget it is, as refusals say it: `user NAME`, `global`, with
    /// ` (fleet)` when the fleet shares it.
    pub fn whose(&self) -> impl fmt::Display + '_ {
        struct Whose<'a>(&'a BudgetExceeded);
        impl fmt::Display for Whose<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match &self.0.scope {
                    Scope::Global => f.write_str("global")?,
                    Scope::User(u) => write!(f, "user {u}")?,
                }
                if self.0.fleet {
                    f.write_str(" (fleet)")?;
                }
                Ok(())
            }
        }
        Whose(self)
    }
}

impl fmt::Display for BudgetExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = self.whose();
        if let Some(r) = self.rate {
            return write!(
                f,
                "{whose} spend-rate breaker open: {}; requests resume in {}s",
                r.trip.describe(),
                r.left.as_millis().div_ceil(1000)
            );
        }
        let Some(budget) = self.budget else {
            return write!(
                f,
                "{whose} budget cannot be checked: the fleet's store is unreachable and budgets fail closed"
            );
        };
        if self.never() {
            return write!(
                f,
                "{whose} budget: this request alone needs {:.0} {budget}, more than the limit of {:.0}, so it can never be served (ask for less: a shorter input, a lower max_tokens or n)",
                self.alone, self.limit
            );
        }
        write!(
            f,
            "{whose} budget exceeded: {budget} would reach {:.0} of {:.0}",
            self.would, self.limit
        )
    }
}

impl std::error::Error for BudgetExceeded {}
