//! The spend-rate breaker of one scope (a user, or everyone): besides the
//! budgets' totals, its spend velocity is watched against its own recent
//! baseline. The last minute's rate passing `multiple` times the baseline
//! (and a floor) opens it: the scope's requests are refused for a cooldown,
//! so a runaway agent loop stops within minutes instead of at a daily cap.
//!
//! Both rates are exponentially decaying sums (constant memory per scope):
//! the fast one over about a minute, the baseline over `baseline_minutes`
//! less what the fast one holds, so a surge is judged against the spend
//! before it rather than a baseline it has already raised (otherwise a
//! surge learnt into its own baseline while the fast rate climbed, and
//! how soon it tripped was luck: 26 s to 263 s across seeds). While a
//! scope's history is shorter than a window, its rate is what it spent
//! over the history it has, so a new scope's first requests do not look
//! like a surge; nothing is judged against its own baseline before
//! `warmup_minutes`.
//!
//! The global breaker is everyone's, so no one user may open it: it opens
//! only when everyone's rate passes its bound without what the biggest
//! spender spent this minute (a surge many share, not one user's), and a
//! user still warming up is judged, once it has spent for a minute,
//! against everyone's baseline instead of its own.

use super::Metric;
use crate::config::SpendRateConfig;
use serde::{Deserialize, Serialize};

const MINUTE_MS: f64 = 60_000.0;

/// An exponentially decaying sum: each amount weighs `e^(-age/τ)`.
#[derive(Clone, Copy, Debug, Default)]
struct Decaying {
    sum: f64,
    at_ms: u64,
}

impl Decaying {
    fn at(&self, now_ms: u64, tau_ms: f64) -> f64 {
        let age = now_ms.saturating_sub(self.at_ms) as f64;
        self.sum * decay(age / tau_ms)
    }

    fn add(&mut self, amount: f64, now_ms: u64, tau_ms: f64) {
        // Calls often settle in the same millisecond: nothing to decay.
        if now_ms <= self.at_ms {
            self.sum += amount;
            return;
        }
        self.sum = self.at(now_ms, tau_ms) + amount;
        self.at_ms = now_ms;
    }

    /// The rate a minute over a window of `tau_ms`, given `history_ms` of
    /// history (the decayed sum over the weight that history has had).
    fn per_minute(&self, now_ms: u64, tau_ms: f64, history_ms: u64) -> f64 {
        self.at(now_ms, tau_ms) / weight(tau_ms, history_ms) * MINUTE_MS
    }
}

/// The weight `history_ms` of history has in a sum decaying over `tau_ms`.
fn weight(tau_ms: f64, history_ms: u64) -> f64 {
    // Past twenty windows the history's weight is the window's (to 2e-9).
    let x = history_ms.max(1) as f64 / tau_ms;
    if x > 20.0 {
        tau_ms
    } else {
        tau_ms * (1.0 - (-x).exp())
    }
}

/// `e^(-x)` for `x ≥ 0`. Calls a few milliseconds apart decay by
/// `x` ≪ 1, where the cubic of the series is within 1e-9 (relative) and
/// cheaper than `exp`.
fn decay(x: f64) -> f64 {
    if x < 0.01 {
        1.0 - x * (1.0 - x * (0.5 - x / 6.0))
    } else {
        (-x).exp()
    }
}

/// One metric's fast rate and baseline.
#[derive(Clone, Copy, Debug, Default)]
struct Pair {
    fast: Decaying,
    base: Decaying,
}

impl Pair {
    /// The baseline a minute over `base_ms`, less the last minutes the
    /// fast rate holds: the long sum minus the fast one, over the weight
    /// that difference gives `history_ms` (exact for a steady rate). Where
    /// the history is too short to leave anything, the whole baseline.
    fn baseline(&self, now_ms: u64, base_ms: f64, history_ms: u64) -> f64 {
        let w = weight(base_ms, history_ms) - weight(MINUTE_MS, history_ms);
        if w < MINUTE_MS {
            return self.base.per_minute(now_ms, base_ms, history_ms);
        }
        let before = self.base.at(now_ms, base_ms) - self.fast.at(now_ms, MINUTE_MS);
        before.max(0.0) / w * MINUTE_MS
    }
}

/// Why a scope's breaker opened.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trip {
    /// The metric whose rate passed.
    pub metric: Metric,
    /// The last minute's rate (a minute).
    pub rate: f64,
    /// The baseline it passed a multiple of (a minute).
    pub baseline: f64,
    /// When it closes again (ms on the runner's clock).
    pub until_ms: u64,
}

impl Trip {
    /// The rate as refusals and events say it: `14200 tokens/min is 3.1× its baseline of 4600`.
    pub fn describe(&self) -> String {
        let ratio = self.rate / self.baseline.max(f64::MIN_POSITIVE);
        match self.metric {
            Metric::Tokens => format!(
                "{:.0} tokens/min is {ratio:.1}× its baseline of {:.0}",
                self.rate, self.baseline
            ),
            Metric::Usd => format!(
                "${:.4}/min is {ratio:.1}× its baseline of ${:.4}",
                self.rate, self.baseline
            ),
        }
    }
}

/// A scope's spend rates and its breaker.
#[derive(Clone, Copy, Debug, Default)]
pub struct SpendRate {
    /// When it first spent (ms), if it has.
    first_ms: Option<u64>,
    tokens: Pair,
    usd: Pair,
    /// The breaker's last trip; open until its `until_ms`.
    trip: Option<Trip>,
    /// Times it tripped.
    pub trips: u32,
}

/// Rates a minute, in tokens and dollars.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rates {
    /// Tokens a minute.
    pub tokens: f64,
    /// Dollars a minute.
    pub usd: f64,
}

/// What views read of a scope's spend rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RateView {
    /// Tokens in the last minute (decaying).
    pub tokens_per_minute: f64,
    /// The tokens baseline (a minute).
    pub baseline_per_minute: f64,
    /// Milliseconds until the breaker closes (0 = closed).
    pub open_ms: u64,
    /// While open: the rate that opened it over its baseline then.
    pub trip_ratio: f64,
    /// Times it tripped.
    pub trips: u32,
}

impl SpendRate {
    /// The trip that refuses the scope at `now_ms`, while open.
    pub fn open(&self, now_ms: u64) -> Option<Trip> {
        self.trip.filter(|t| now_ms < t.until_ms)
    }

    /// Adds what a call spent at `now_ms`; the trip, when this spend opens
    /// the breaker. `without` is a part of the rates that is not to judge
    /// it by (everyone's breaker: the spending user's own rates).
    pub fn add(&mut self, c: &SpendRateConfig, tokens: f64, usd: f64, now_ms: u64, without: Rates) -> Option<Trip> {
        let base_ms = c.baseline_minutes as f64 * MINUTE_MS;
        let first = *self.first_ms.get_or_insert(now_ms);
        // Dollars are watched only when they are judged.
        let watched = if c.min_usd_per_minute > 0.0 { 2 } else { 1 };
        for (pair, amount) in [(&mut self.tokens, tokens), (&mut self.usd, usd)]
            .into_iter()
            .take(watched)
        {
            pair.fast.add(amount, now_ms, MINUTE_MS);
            pair.base.add(amount, now_ms, base_ms);
        }
        let history = now_ms.saturating_sub(first);
        if self.open(now_ms).is_some() || history < c.warmup_minutes * 60_000 {
            return None;
        }
        let judge = |pair: &Pair, floor: f64, metric: Metric, without: f64| {
            let rate = pair.fast.per_minute(now_ms, MINUTE_MS, history);
            let baseline = pair.baseline(now_ms, base_ms, history);
            let rest = rate - without;
            (floor > 0.0 && rest >= floor && rest > c.multiple * baseline).then_some(Trip {
                metric,
                rate,
                baseline,
                until_ms: now_ms + c.cooldown_s * 1000,
            })
        };
        let trip = judge(&self.tokens, c.min_tokens_per_minute, Metric::Tokens, without.tokens)
            .or_else(|| judge(&self.usd, c.min_usd_per_minute, Metric::Usd, without.usd))?;
        Some(self.open_for(trip))
    }

    /// Opens the breaker for `trip`.
    fn open_for(&mut self, trip: Trip) -> Trip {
        self.trip = Some(trip);
        self.trips += 1;
        trip
    }

    /// A newcomer's last minute's rates at `now_ms`: one that has spent
    /// for a minute at least and is still too young to be judged against
    /// its own baseline (none for any other).
    pub fn newcomer(&self, c: &SpendRateConfig, now_ms: u64) -> Option<Rates> {
        let history = self.first_ms.map_or(0, |f| now_ms.saturating_sub(f));
        if history < MINUTE_MS as u64 || history >= c.warmup_minutes * 60_000 {
            return None;
        }
        Some(Rates {
            tokens: self.tokens.fast.per_minute(now_ms, MINUTE_MS, history),
            usd: self.usd.fast.per_minute(now_ms, MINUTE_MS, history),
        })
    }

    /// Its baselines at `now_ms`.
    pub fn baseline(&self, c: &SpendRateConfig, now_ms: u64) -> Rates {
        let history = self.first_ms.map_or(0, |f| now_ms.saturating_sub(f));
        let base_ms = c.baseline_minutes as f64 * MINUTE_MS;
        Rates {
            tokens: self.tokens.baseline(now_ms, base_ms, history),
            usd: self.usd.baseline(now_ms, base_ms, history),
        }
    }

    /// Judges a scope still warming up, whose last minute's rates are
    /// `rates`, against `everyone`'s baselines (everyone's is what a
    /// newcomer may not pass a multiple of); the trip, when it opens.
    pub fn judge_newcomer(&mut self, c: &SpendRateConfig, rates: Rates, everyone: Rates, now_ms: u64) -> Option<Trip> {
        if self.open(now_ms).is_some() {
            return None;
        }
        let past = |rate: f64, floor: f64, baseline: f64, metric: Metric| {
            (floor > 0.0 && rate >= floor && rate > c.multiple * baseline).then_some(Trip {
                metric,
                rate,
                baseline,
                until_ms: now_ms + c.cooldown_s * 1000,
            })
        };
        let trip = past(rates.tokens, c.min_tokens_per_minute, everyone.tokens, Metric::Tokens)
            .or_else(|| past(rates.usd, c.min_usd_per_minute, everyone.usd, Metric::Usd))?;
        Some(self.open_for(trip))
    }

    /// Closes the breaker (an operator's reset); the rates are kept.
    pub fn reset(&mut self) {
        self.trip = None;
    }

    /// What views show at `now_ms`.
    pub fn view(&self, c: &SpendRateConfig, now_ms: u64) -> RateView {
        let history = self.first_ms.map_or(0, |f| now_ms.saturating_sub(f));
        RateView {
            tokens_per_minute: self.tokens.fast.per_minute(now_ms, MINUTE_MS, history),
            baseline_per_minute: self
                .tokens
                .baseline(now_ms, c.baseline_minutes as f64 * MINUTE_MS, history),
            open_ms: self.open(now_ms).map_or(0, |t| t.until_ms - now_ms),
            trip_ratio: self
                .open(now_ms)
                .map_or(0.0, |t| t.rate / t.baseline.max(f64::MIN_POSITIVE)),
            trips: self.trips,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decay_follows_exp() {
        for x in [0.0, 1e-6, 0.001, 0.0099, 0.01, 0.5, 3.0, 50.0] {
            let (got, exact) = (decay(x), (-x).exp());
            assert!((got - exact).abs() <= 1e-9 * exact, "{x}: {got} against {exact}");
        }
    }

    fn cfg() -> SpendRateConfig {
        SpendRateConfig {
            enabled: true,
            ..SpendRateConfig::default()
        }
    }

    /// Spends `per_minute` tokens a minute, a call every 6 s, from
    /// `from_min` to `to_min` or until the breaker opens (then when).
    fn spend(r: &mut SpendRate, c: &SpendRateConfig, per_minute: f64, from_min: u64, to_min: u64) -> Option<u64> {
        for step in from_min * 10..to_min * 10 {
            let now = step * 6_000;
            if let Some(t) = r.add(c, per_minute / 10.0, 0.0, now, Rates::default()) {
                assert!(t.rate > c.multiple * t.baseline, "{t:?}");
                return Some(now);
            }
        }
        None
    }

    #[test]
    fn a_steady_rate_never_trips_and_a_tripled_one_trips_within_two_minutes() {
        let c = cfg();
        let mut r = SpendRate::default();
        assert_eq!(spend(&mut r, &c, 20_000.0, 0, 60), None);
        let at = spend(&mut r, &c, 60_000.0, 60, 70).expect("trips");
        assert!(
            at - 3_600_000 <= 120_000,
            "tripped {} ms after the surge",
            at - 3_600_000
        );
        // Refused for the cooldown, then judged again.
        let t = r.open(at).unwrap();
        assert_eq!(t.until_ms, at + 300_000);
        assert!(r.open(at + 299_999).is_some() && r.open(at + 300_000).is_none());
        assert_eq!(r.trips, 1);
        // After the cooldown the runaway, still running, opens it again.
        let again = spend(&mut r, &c, 60_000.0, (at + 300_000) / 60_000 + 1, 90).expect("trips again");
        assert!(again - (at + 300_000) <= 180_000 && r.trips == 2);
    }

    #[test]
    fn a_doubled_rate_a_new_scope_and_a_small_one_do_not_trip() {
        let c = cfg();
        let mut r = SpendRate::default();
        spend(&mut r, &c, 20_000.0, 0, 60);
        assert_eq!(
            spend(&mut r, &c, 36_000.0, 60, 120),
            None,
            "{:?}",
            r.view(&c, 7_200_000)
        );
        // A new scope starting hot: its history is its baseline.
        let mut r = SpendRate::default();
        assert_eq!(spend(&mut r, &c, 90_000.0, 0, 30), None);
        // Below the floor nothing trips, whatever the multiple.
        let mut r = SpendRate::default();
        spend(&mut r, &c, 500.0, 0, 60);
        assert_eq!(spend(&mut r, &c, 4_000.0, 60, 70), None);
    }

    #[test]
    fn reset_closes_and_the_view_says_the_rates() {
        let c = cfg();
        let mut r = SpendRate::default();
        spend(&mut r, &c, 20_000.0, 0, 60);
        let at = spend(&mut r, &c, 60_000.0, 60, 70).unwrap();
        let v = r.view(&c, at);
        assert!(v.open_ms == 300_000 && v.trips == 1, "{v:?}");
        assert!(v.tokens_per_minute > 2.0 * v.baseline_per_minute, "{v:?}");
        r.reset();
        assert!(r.open(at).is_none());
    }
}
