//! What views read of the budgets: global usage and its share of each
//! limit, and the users nearest their limits.

use super::{Budgets, Win, DAY, HOUR, MINUTE};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;

/// One user's usage, for views.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct UserView {
    /// The user.
    pub user: String,
    /// Tokens this minute / hour / day.
    pub tokens: [f64; 3],
    /// USD today.
    pub cost_day: f64,
    /// Share of each limit in use: minute, hour, day tokens, cost/day (0 when unlimited).
    pub shares: [f64; 4],
    /// Highest share of any limit (0..).
    pub pressure: f64,
    /// Requests refused by a budget.
    pub rejections: u64,
    /// Its spend rate and spend-rate breaker.
    #[serde(default)]
    pub spend_rate: super::RateView,
}

/// Global usage, for views.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct GlobalView {
    /// Tokens this hour / day.
    pub tokens: [f64; 2],
    /// USD this hour / day.
    pub cost: [f64; 2],
    /// Highest share of any global limit.
    pub pressure: f64,
    /// Everyone's spend rate and its breaker.
    #[serde(default)]
    pub spend_rate: super::RateView,
}

/// Share of each global limit used in the current window, hour and day
/// (`None` where there is no limit).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GlobalShares {
    /// Tokens this hour / day over their limits.
    pub tokens: [Option<f64>; 2],
    /// USD this hour / day over their limits.
    pub cost: [Option<f64>; 2],
}

/// `used / limit`, where there is a limit.
fn share_of(used: f64, limit: f64) -> Option<f64> {
    (limit > 0.0).then(|| used / limit)
}

impl Budgets {
    /// Global usage.
    pub fn global_view(&self, now_ms: u64) -> GlobalView {
        let mut g = crate::resilience::lock(&self.global);
        g.tokens_hour.roll(now_ms, HOUR);
        g.tokens_day.roll(now_ms, DAY);
        g.cost_hour.roll(now_ms, HOUR);
        g.cost_day.roll(now_ms, DAY);
        let pressure = self.pressure_of(&g);
        self.pressure.store(pressure.to_bits(), Ordering::Relaxed);
        GlobalView {
            tokens: [g.tokens_hour.used, g.tokens_day.used],
            cost: [g.cost_hour.used, g.cost_day.used],
            pressure,
            spend_rate: g.rate.view(&self.cfg.spend_rate, now_ms),
        }
    }

    /// The `n` users with the highest budget pressure.
    pub fn top_users(&self, n: usize, now_ms: u64) -> Vec<UserView> {
        self.top_users_by(n, now_ms, |u| u.pressure)
    }

    /// The `n` users highest by `key` (ties by name), highest first.
    pub fn top_users_by(&self, n: usize, now_ms: u64, key: impl Fn(&UserView) -> f64) -> Vec<UserView> {
        let share = |used: f64, limit: f64| if limit > 0.0 { used / limit } else { 0.0 };
        let cur = |w: &Win, len: u64| if w.holds(now_ms, len) { w.used } else { 0.0 };
        let mut all: Vec<UserView> = crate::resilience::lock(&self.users)
            .iter()
            .map(|(user, u)| {
                let tokens = [cur(&u.minute, MINUTE), cur(&u.hour, HOUR), cur(&u.day, DAY)];
                let cost_day = cur(&u.cost_day, DAY);
                let shares = [
                    share(tokens[0], u.limits.minute),
                    share(tokens[1], u.limits.hour),
                    share(tokens[2], u.limits.day),
                    share(cost_day, u.limits.cost_day),
                ];
                let spend_rate = u
                    .rate
                    .as_ref()
                    .map(|r| r.view(&self.cfg.spend_rate, now_ms))
                    .unwrap_or_default();
                // An open spend-rate breaker is as pressing as a spent budget.
                let open = if spend_rate.open_ms > 0 { 1.0 } else { 0.0 };
                UserView {
                    user: user.to_string(),
                    tokens,
                    cost_day,
                    shares,
                    pressure: shares.iter().copied().fold(open, f64::max),
                    rejections: u.rejections,
                    spend_rate,
                }
            })
            .collect();
        let order = |a: &UserView, b: &UserView| key(b).total_cmp(&key(a)).then_with(|| a.user.cmp(&b.user));
        // Only the top n are ordered: O(users) rather than a full sort.
        if n < all.len() {
            all.select_nth_unstable_by(n, order);
            all.truncate(n);
        }
        all.sort_by(order);
        all
    }

    /// The share of each global limit `g` (a [`Budgets::global_view`]) uses.
    pub fn global_shares(&self, g: &GlobalView) -> GlobalShares {
        let c = &self.cfg;
        GlobalShares {
            tokens: [
                share_of(g.tokens[0], c.global_tokens_per_hour as f64),
                share_of(g.tokens[1], c.global_tokens_per_day as f64),
            ],
            cost: [
                share_of(g.cost[0], c.global_cost_per_hour_usd),
                share_of(g.cost[1], c.global_cost_per_day_usd),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BudgetConfig;
    use crate::resilience::notice::Heard;
    use std::sync::Arc;

    #[tokio::test]
    async fn global_shares_are_used_over_limit_only_where_there_is_a_limit() {
        let b = Budgets::new(
            BudgetConfig {
                global_tokens_per_day: 1000,
                global_tokens_per_hour: 0,
                global_cost_per_hour_usd: 2.0,
                global_cost_per_day_usd: 0.0,
                ..BudgetConfig::default()
            },
            Arc::new(Heard::default()),
        );
        let r = b.reserve("a", 250, 0.5, 0).unwrap();
        b.settle(r, 200, 0.5, 0);
        let s = b.global_shares(&b.global_view(0));
        assert_eq!(s.tokens, [None, Some(0.2)]);
        assert_eq!(s.cost, [Some(0.25), None]);
    }

    #[tokio::test]
    async fn top_users_by_keeps_the_n_highest_by_the_key() {
        let b = Budgets::new(
            BudgetConfig {
                user_tokens_per_minute: 0,
                user_tokens_per_day: 1000,
                ..BudgetConfig::default()
            },
            Arc::new(Heard::default()),
        );
        for i in 0..30u32 {
            let r = b.reserve(&format!("u{i:02}"), 10 * i, 0.0, 0).unwrap();
            b.settle(r, 10 * i, 0.0, 0);
        }
        let day = |u: &UserView| u.shares[2];
        let top = b.top_users_by(20, 0, day);
        let names: Vec<_> = top.iter().map(|u| u.user.as_str()).collect();
        let want: Vec<String> = (10..30).rev().map(|i| format!("u{i:02}")).collect();
        assert_eq!(names, want);
        assert_eq!(top[0].shares[2], 0.29);
    }
}
