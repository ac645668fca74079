//! Budgets held by the fleet, not per instance: each user's tokens (minute,
//! hour, day) and cost (day), and the global tokens and cost (hour, day),
//! are counted in the shared store (see [`super::store::Store::grant`]).
//! An instance takes a budget in chunks (an allowance) and spends it
//! locally; it asks the store again only when the allowance runs out (one
//! round trip at a time: calls that find it short together share the next
//! chunk), and near the limit the store grants only what is left. What an
//! instance spends was granted first, so the fleet together stays within
//! each budget. Unused reservations go back to the allowance.
//!
//! While the store is unreachable an instance keeps to its share of each
//! budget (the limit divided by the most live instances seen this minute or
//! the last: a count that dips while heartbeats are lost in a failover
//! never enlarges a share), counted in process, less what the store granted
//! it in the same period (an outage mid-period does not start the share
//! afresh): fail open. What it granted itself is counted into the store as
//! soon as the store answers again ([`Allowances::count_in`], on the fleet's
//! heartbeat), and for a moment after (the instance's heartbeat finding the
//! store, [`Allowances::rejoined`], or a budget's own count-in, for a key
//! on a cluster node that came back later) it still keeps to its share, so
//! that an instance back first does not take from the store what the others
//! granted themselves and have not counted in yet. A period thus holds at
//! most the budget plus what instances had been granted beyond their shares
//! before the outage (and the shares of instances still cut off when the
//! others are back). With `budgets_fail = "closed"` it refuses what its
//! allowances do not cover instead.

use super::store::{MemoryStore, Store, StoreError, WINDOWS_MS};
use crate::clock::Clock;
use crate::config::{BudgetConfig, FailMode};
use crate::resilience::budget::{self, Budget, BudgetExceeded, Metric, UserLimits, Window};
use crate::runner::shared::Reserved;
use crate::telemetry::store::StoreStatus;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ops::ControlFlow::{Break, Continue};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How long an instance keeps to its shares after the store answers again
/// (ms): long enough for every other instance's heartbeat (each 500 ms) to
/// count in what it granted itself.
const SETTLE_MS: u64 = 2_000;

/// One budget the fleet shares, and this instance's allowances of it.
#[derive(Debug)]
struct Scope {
    per_user: bool,
    unit: Metric,
    /// Minute, hour, day (0 = none): the global budget's.
    limits: [f64; 3],
    /// The share of its shortest limit taken from the store at a time.
    share: f64,
    /// Allowances by user (one, under "", for a global budget).
    held: Mutex<HashMap<String, Allowance>>,
}

/// A budget's limits for one caller, and what follows from them.
#[derive(Clone, Copy, Debug)]
struct Terms {
    /// Minute, hour, day (0 = none).
    limits: [f64; 3],
    /// Taken from the store at a time.
    chunk: f64,
    /// The shortest window with a limit: an allowance belongs to one of its
    /// periods (a new period starts from nothing).
    period_ms: u64,
}

impl Scope {
    fn new(per_user: bool, unit: Metric, limits: [f64; 3], share: f64) -> Self {
        Self {
            per_user,
            unit,
            limits,
            share,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// The terms a call of a user with limits `user` is under: for a user
    /// budget the user's own limits (a caller key's, or the defaults);
    /// None where the budget has no limit.
    fn terms(&self, user: &UserLimits) -> Option<Terms> {
        let limits = match (self.per_user, self.unit) {
            (false, _) => self.limits,
            (true, Metric::Tokens) => [user.minute, user.hour, user.day],
            (true, Metric::Usd) => [0.0, 0.0, user.cost_day],
        };
        let first = limits.iter().position(|l| *l > 0.0)?;
        Some(Terms {
            limits,
            chunk: limits[first] * self.share,
            period_ms: WINDOWS_MS[first],
        })
    }

    /// Whose allowance a call of `user` spends.
    fn who<'a>(&self, user: &'a str) -> &'a str {
        if self.per_user {
            user
        } else {
            ""
        }
    }

    /// `user`'s allowance in `period` (a new period starts from nothing).
    fn allowance<'a>(
        &self,
        held: &'a mut HashMap<String, Allowance>,
        user: &str,
        period: u64,
        period_ms: u64,
    ) -> &'a mut Allowance {
        let who = self.who(user);
        if !held.contains_key(who) {
            held.insert(who.to_string(), Allowance::default());
        }
        let a = held.get_mut(who).expect("inserted above");
        if a.period != period || a.ends_ms == 0 {
            *a = Allowance {
                period,
                ends_ms: (period + 1) * period_ms,
                ..Allowance::default()
            };
        }
        a
    }

    /// `user`'s allowance in `period`, if it is still held.
    fn in_period<'a>(
        &self,
        held: &'a mut HashMap<String, Allowance>,
        user: &str,
        period: u64,
    ) -> Option<&'a mut Allowance> {
        held.get_mut(self.who(user)).filter(|a| a.period == period)
    }

    /// What a call of `tokens` and `cost` takes of this budget.
    fn want(&self, tokens: u32, cost: f64) -> f64 {
        match self.unit {
            Metric::Tokens => f64::from(tokens),
            Metric::Usd => cost,
        }
    }

    /// The store key; the hash tag keeps one user's keys in one Redis
    /// Cluster slot.
    fn key(&self, user: &str) -> String {
        let unit = match self.unit {
            Metric::Tokens => "tokens",
            Metric::Usd => "cost",
        };
        if self.per_user {
            format!("fusebox:{{user:{user}}}:{unit}")
        } else {
            format!("fusebox:{{global}}:{unit}")
        }
    }

    /// Whose budget this is, for `user`'s call.
    fn whose(&self, user: &str) -> budget::Scope {
        if self.per_user {
            budget::Scope::User(user.into())
        } else {
            budget::Scope::Global
        }
    }

    fn refusal(&self, user: &str, limits: &[f64; 3], window: usize, want: f64, left: f64) -> BudgetExceeded {
        let limit = limits[window];
        BudgetExceeded {
            scope: self.whose(user),
            fleet: true,
            budget: Some(Budget {
                metric: self.unit,
                window: [Window::Minute, Window::Hour, Window::Day][window],
            }),
            would: limit - left + want,
            limit,
            alone: want,
            first_in_window: false,
            rate: None,
        }
    }
}

/// A budget's chunk granted to this instance and not spent yet.
#[derive(Clone, Debug, Default)]
struct Allowance {
    /// The period the grant belongs to, and when it ends (ms).
    period: u64,
    ends_ms: u64,
    left: f64,
    /// What the store granted this period (counted against this
    /// instance's share while the store is unreachable).
    granted: f64,
    /// What this instance granted itself this period while the store was
    /// unreachable, not yet counted into the store.
    alone: f64,
    /// The store refused more this period (the budget ran out): further
    /// calls beyond the allowance are refused here, without a round trip.
    spent: Option<BudgetExceeded>,
    /// Held while a call asks for another chunk.
    gate: Arc<tokio::sync::Mutex<()>>,
    /// Until when (wall ms) it keeps to its share, having just counted in
    /// what it granted itself.
    settling_until_ms: u64,
}

/// The fleet's budgets on this instance.
pub struct Allowances {
    store: Arc<dyn Store>,
    /// Counts this instance's share while the store is unreachable.
    fallback: MemoryStore,
    status: Arc<StoreStatus>,
    scopes: Vec<Scope>,
    fail: FailMode,
    clock: Clock,
    /// Until when (wall ms) this instance keeps to its shares after the
    /// store came back, while the others count theirs in.
    settling_until_ms: AtomicU64,
    /// The most live instances seen this minute and the one before:
    /// (minute, this minute's, the last one's).
    fleet: Mutex<(u64, u32, u32)>,
    /// Round trips made for allowances.
    pub round_trips: AtomicU64,
}

impl Allowances {
    /// The budgets of `cfg` on `store`.
    pub fn new(
        store: Arc<dyn Store>,
        status: Arc<StoreStatus>,
        cfg: &BudgetConfig,
        fail: FailMode,
        clock: Clock,
    ) -> Self {
        let t = |v: u64| v as f64;
        // A user's limits come with each call (a caller key may have its own).
        let scopes = [
            Scope::new(true, Metric::Tokens, [0.0; 3], 0.1),
            Scope::new(true, Metric::Usd, [0.0; 3], 0.01),
            Scope::new(
                false,
                Metric::Tokens,
                [0.0, t(cfg.global_tokens_per_hour), t(cfg.global_tokens_per_day)],
                0.01,
            ),
            Scope::new(
                false,
                Metric::Usd,
                [0.0, cfg.global_cost_per_hour_usd, cfg.global_cost_per_day_usd],
                0.01,
            ),
        ];
        let none = UserLimits::default();
        Self {
            store,
            fallback: MemoryStore::new(clock),
            status,
            scopes: scopes
                .into_iter()
                .filter(|s| s.per_user || s.terms(&none).is_some())
                .collect(),
            fail,
            clock,
            settling_until_ms: AtomicU64::new(0),
            fleet: Mutex::new((0, 0, 0)),
            round_trips: AtomicU64::new(0),
        }
    }

    /// Notes `n` live instances seen by heartbeat.
    pub fn saw_instances(&self, n: u32) {
        let mut f = self.fleet_now();
        f.1 = f.1.max(n);
    }

    /// The instances a share divides by: the most seen in this minute and
    /// the last (or the status's count, where no heartbeat told more).
    fn fleet_size(&self) -> u32 {
        let f = self.fleet_now();
        f.1.max(f.2).max(self.status.view().instances).max(1)
    }

    /// The fleet counts, rolled over to the current minute.
    fn fleet_now(&self) -> parking_lot::MutexGuard<'_, (u64, u32, u32)> {
        let minute = self.clock.wall_ms() / 60_000;
        let mut f = self.fleet.lock();
        if f.0 != minute {
            *f = (minute, 0, if f.0 + 1 == minute { f.1 } else { 0 });
        }
        f
    }

    /// The store answers again: for a moment this instance keeps to its
    /// shares while the others count in what they granted themselves.
    pub fn rejoined(&self) {
        let until = self.clock.wall_ms() + SETTLE_MS;
        self.settling_until_ms.store(until, Ordering::Relaxed);
    }

    /// Counts into the store what every allowance of the current periods
    /// granted itself while the store was away; what a key's store does not
    /// take stays owed (counted in by the next heartbeat or round trip).
    /// Returns how many allowances still owe.
    pub async fn count_in(&self) -> usize {
        let now_ms = self.clock.wall_ms();
        let mut owing = 0;
        for s in &self.scopes {
            let owed: Vec<(String, u64)> = (s.held.lock().iter())
                .filter(|(_, a)| a.alone > 0.0 && a.ends_ms > now_ms)
                .map(|(who, a)| (who.clone(), a.period))
                .collect();
            for (who, period) in owed {
                if let Err(e) = self.repay(s, &who, period).await {
                    tracing::debug!(error = %e, "cannot count in a budget granted alone yet");
                    owing += 1;
                }
            }
        }
        owing
    }

    /// Takes `tokens` and `cost` of every budget `user` (whose limits are
    /// `limits`) is under, from the allowances when they have them, else
    /// after a round trip for another chunk. All or nothing: a refusal
    /// gives back what was taken.
    pub async fn reserve(
        &self,
        user: &str,
        limits: UserLimits,
        tokens: u32,
        cost: f64,
    ) -> Result<Reserved, BudgetExceeded> {
        let now_ms = self.clock.wall_ms();
        for (i, s) in self.scopes.iter().enumerate() {
            let Some(terms) = s.terms(&limits) else { continue };
            let want = s.want(tokens, cost);
            if let Err(e) = self.take(s, user, terms, want, now_ms).await {
                for s in &self.scopes[..i] {
                    let Some(t) = s.terms(&limits) else { continue };
                    if let Some(a) = s.held.lock().get_mut(s.who(user)) {
                        if a.period == now_ms / t.period_ms {
                            a.left += s.want(tokens, cost);
                        }
                    }
                }
                return Err(e);
            }
        }
        Ok(Reserved {
            tokens: f64::from(tokens),
            cost,
        })
    }

    async fn take(&self, s: &Scope, user: &str, terms: Terms, want: f64, now_ms: u64) -> Result<(), BudgetExceeded> {
        let period = now_ms / terms.period_ms;
        // Decided from the allowance (it covers `want`, or the store has
        // refused more), else the gate to the store and what is short.
        let covered = |s: &Scope| {
            let mut held = s.held.lock();
            let a = s.allowance(&mut held, user, period, terms.period_ms);
            if a.left >= want {
                a.left -= want;
                return Break(Ok(()));
            }
            match &a.spent {
                Some(e) => Break(Err(e.clone())),
                None => Continue((a.gate.clone(), want - a.left, a.granted, a.settling_until_ms)),
            }
        };
        let gate = match covered(s) {
            Continue((gate, ..)) => gate,
            Break(decided) => return decided,
        };
        // One round trip at a time per allowance: calls that find it short
        // together share the chunk the first one fetches, rather than each
        // taking one (an instance would hold several chunks beyond its need
        // and, were the store to go away then, beyond its share).
        let _fetching = gate.lock().await;
        let (short, granted_here, settling_until_ms) = match covered(s) {
            Continue((_, short, granted, settling)) => (short, granted, settling),
            Break(decided) => return decided,
        };
        let chunk = short.max(terms.chunk);
        let key = s.key(user);
        // Only a budget that fails open grants itself anything to settle.
        let settling = self.fail == FailMode::Open
            && now_ms < settling_until_ms.max(self.settling_until_ms.load(Ordering::Relaxed));
        let granted = if self.status.view().degraded || settling {
            None
        } else {
            self.round_trips.fetch_add(1, Ordering::Relaxed);
            // Having just counted in what it granted itself, it keeps to
            // its share a moment (others may not have yet).
            let asked = match self.repay(s, user, period).await {
                Ok(false) => self.store.grant(&key, chunk, terms.limits, None).await.map(Some),
                Ok(true) => Ok(None),
                Err(e) => Err(e),
            };
            match asked {
                Ok(g) => g,
                Err(e) => {
                    tracing::debug!(error = %e, "budget round trip failed");
                    self.status.set_degraded(true);
                    None
                }
            }
        };
        let from_store = granted.is_some();
        let g = match granted {
            Some(g) => g,
            None if self.fail == FailMode::Closed => return Err(BudgetExceeded::store_unreachable(s.whose(user))),
            None => {
                // This instance's share of the budget, counted here, less
                // what the store granted it this period (a share of 0
                // would mean no limit: the least positive one grants none).
                let n = f64::from(self.fleet_size());
                let mut share = terms.limits.map(|l| l / n);
                if let Some(w) = WINDOWS_MS.iter().position(|ms| *ms == terms.period_ms) {
                    share[w] = (share[w] - granted_here).max(f64::MIN_POSITIVE);
                }
                self.fallback
                    .grant(&key, chunk, share, Some(now_ms))
                    .await
                    .unwrap_or_default()
            }
        };
        let mut held = s.held.lock();
        let a = s.allowance(&mut held, user, period, terms.period_ms);
        a.left += g.grant;
        if from_store {
            a.granted += g.grant;
        } else {
            a.alone += g.grant;
        }
        if a.left >= want {
            a.left -= want;
            return Ok(());
        }
        let e = s.refusal(user, &terms.limits, g.bound.unwrap_or(0), want, a.left);
        // Only the store's refusal holds for the period; a share spent
        // while alone asks the store again once it is back.
        if from_store {
            a.spent = Some(e.clone());
        }
        Err(e)
    }

    /// Counts into the store what `user`'s allowance of `s` in `period`
    /// granted itself while the store was away, and if it owed anything
    /// keeps it to its share a moment (true). Taken out of the allowance
    /// first (two calls never count it twice) and put back if the store
    /// does not answer.
    async fn repay(&self, s: &Scope, user: &str, period: u64) -> Result<bool, StoreError> {
        let alone = s
            .in_period(&mut s.held.lock(), user, period)
            .map_or(0.0, |a| std::mem::take(&mut a.alone));
        if alone <= 0.0 {
            return Ok(false);
        }
        let counted = self.store.grant(&s.key(user), alone, [0.0; 3], None).await;
        if let Some(a) = s.in_period(&mut s.held.lock(), user, period) {
            match counted {
                // Once an outage: what it grants itself while settling,
                // counted in after, does not prolong the moment.
                Ok(_) => {
                    let now_ms = self.clock.wall_ms();
                    if now_ms > a.settling_until_ms + SETTLE_MS {
                        a.settling_until_ms = now_ms + SETTLE_MS;
                    }
                }
                Err(_) => a.alone += alone,
            }
        }
        counted.map(|_| true)
    }

    /// Settles a call that reserved `r` and used `tokens` and `cost`: the
    /// difference goes back to (or comes out of) the allowances.
    pub fn settle(&self, user: &str, r: Reserved, tokens: u32, cost: f64) {
        for s in &self.scopes {
            let diff = match s.unit {
                Metric::Tokens => r.tokens - f64::from(tokens),
                Metric::Usd => r.cost - cost,
            };
            if let Some(a) = s.held.lock().get_mut(s.who(user)) {
                a.left += diff;
            }
        }
    }

    /// Drops the allowances of past periods (what is kept is bounded by
    /// the users seen in the current ones).
    pub fn forget_idle(&self) {
        let now_ms = self.clock.wall_ms();
        for s in &self.scopes {
            s.held.lock().retain(|_, a| a.ends_ms > now_ms);
        }
        self.fallback.forget_idle(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::{Granted, RetryAsk, RetryShare, Take, Taken};
    use super::*;
    use std::time::Duration;

    fn allowances(cfg: BudgetConfig, fail: FailMode) -> (Allowances, Arc<StoreStatus>) {
        let clock = Clock::with_wall_anchor(1_800_000_000_000);
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(clock));
        let status = Arc::new(StoreStatus::default());
        status.set_redis();
        (Allowances::new(store, status.clone(), &cfg, fail, clock), status)
    }

    fn limits() -> UserLimits {
        UserLimits::of(&budgets(), None)
    }

    fn budgets() -> BudgetConfig {
        BudgetConfig {
            user_tokens_per_minute: 1_000,
            user_tokens_per_hour: 0,
            user_tokens_per_day: 0,
            user_cost_per_day_usd: 0.0,
            global_tokens_per_hour: 0,
            global_tokens_per_day: 2_500,
            global_cost_per_hour_usd: 0.0,
            global_cost_per_day_usd: 0.0,
            ..BudgetConfig::default()
        }
    }

    #[tokio::test]
    async fn a_users_minute_and_the_global_day_hold_with_refunds() {
        let (a, _) = allowances(budgets(), FailMode::Open);
        let r = a.reserve("ann", limits(), 300, 0.0).await.unwrap();
        for _ in 0..2 {
            let _ = a.reserve("ann", limits(), 300, 0.0).await.unwrap();
        }
        let e = a.reserve("ann", limits(), 300, 0.0).await.unwrap_err();
        assert_eq!(e.whose().to_string(), "user ann (fleet)");
        assert_eq!(e.budget, Some(Budget::tokens(Window::Minute)));
        // What a call did not use goes back: 3 × 300 reserved, 3 × 100 used.
        for _ in 0..3 {
            a.settle("ann", r, 100, 0.0);
        }
        let _ = a.reserve("ann", limits(), 300, 0.0).await.unwrap();
        // The global day (2,500) binds other users too; a refused global
        // reservation gives the user's share back.
        for u in ["bob", "cy", "dee", "fay"] {
            let _ = a.reserve(u, limits(), 400, 0.0).await.unwrap();
        }
        let e = a.reserve("eve", limits(), 400, 0.0).await.unwrap_err();
        assert_eq!(e.whose().to_string(), "global (fleet)");
        assert_eq!(e.budget, Some(Budget::tokens(Window::Day)));
        let eve = a.scopes[0].held.lock().get("eve").map(|x| x.left);
        assert_eq!(eve, Some(400.0), "eve's user allowance got its 400 back");
    }

    #[tokio::test]
    async fn a_user_with_budgets_of_its_own_is_held_to_them() {
        let (a, _) = allowances(budgets(), FailMode::Open);
        let own = crate::config::access::UserBudgets {
            tokens_per_minute: Some(500),
            cost_per_day_usd: Some(0.01),
            ..Default::default()
        };
        let kay = UserLimits::of(&budgets(), Some(&own));
        let _ = a.reserve("kay", kay, 400, 0.0).await.unwrap();
        let e = a.reserve("kay", kay, 200, 0.0).await.unwrap_err();
        assert_eq!(
            (e.budget, e.limit),
            (Some(Budget::tokens(Window::Minute)), 500.0),
            "its own minute, not the default 1,000"
        );
        let e = a.reserve("kay", kay, 10, 0.02).await.unwrap_err();
        assert_eq!(
            (e.budget, e.limit),
            (Some(Budget::usd(Window::Day)), 0.01),
            "a limit the defaults do not have"
        );
        // Others keep the defaults.
        let _ = a.reserve("ann", limits(), 900, 0.5).await.unwrap();
    }

    #[tokio::test]
    async fn without_the_store_budgets_fail_open_at_a_share_or_closed() {
        let (a, status) = allowances(budgets(), FailMode::Open);
        status.set_degraded(true);
        status.set_instances(2);
        // Half of ann's 1,000 a minute, counted here.
        let _ = a.reserve("ann", limits(), 500, 0.0).await.unwrap();
        assert!(a.reserve("ann", limits(), 100, 0.0).await.is_err());
        let (a, status) = allowances(budgets(), FailMode::Closed);
        status.set_degraded(true);
        let e = a.reserve("ann", limits(), 10, 0.0).await.unwrap_err();
        assert!(e.to_string().contains("fail closed"), "{e}");
        assert_eq!(a.round_trips.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_share_counts_what_the_store_granted_before_it_went_away() {
        let (a, status) = allowances(budgets(), FailMode::Open);
        status.set_instances(2);
        // 300 of ann's 1,000 granted by the store, then it goes away: her
        // share here is 500, of which 300 are had.
        let _ = a.reserve("ann", limits(), 300, 0.0).await.unwrap();
        status.set_degraded(true);
        let _ = a.reserve("ann", limits(), 150, 0.0).await.unwrap();
        let e = a.reserve("ann", limits(), 100, 0.0).await.unwrap_err();
        assert_eq!(e.budget, Some(Budget::tokens(Window::Minute)));
        // Another user's share is whole.
        let _ = a.reserve("bob", limits(), 500, 0.0).await.unwrap();
    }

    /// Spends `ann`'s budget on `a` 50 at a time from `spent` until refused.
    async fn spend(a: &Allowances, mut spent: u32) -> u32 {
        while a.reserve("ann", limits(), 50, 0.0).await.is_ok() {
            spent += 50;
        }
        spent
    }

    /// One of two instances that granted ann 400 of her share of 500 while
    /// the store was away, and finds the store again.
    async fn back_with_400_granted_alone() -> Allowances {
        let (a, status) = allowances(budgets(), FailMode::Open);
        status.set_instances(2);
        status.set_degraded(true);
        let _ = a.reserve("ann", limits(), 400, 0.0).await.unwrap();
        status.set_degraded(false);
        a
    }

    #[tokio::test(start_paused = true)]
    async fn what_an_instance_granted_alone_is_counted_into_the_store_on_its_return() {
        let a = back_with_400_granted_alone().await;
        // Back, the first round trip counts the 400 in; for a moment ann
        // keeps to her share here, then the store grants what is left of
        // the 1,000 (what she took meanwhile counted in by the heartbeat).
        assert_eq!(spend(&a, 400).await, 500);
        tokio::time::advance(Duration::from_millis(SETTLE_MS)).await;
        assert_eq!(a.count_in().await, 0);
        assert_eq!(
            spend(&a, 500).await,
            1_000,
            "the fleet's minute holds the budget, not 1,400"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn what_was_granted_alone_is_counted_in_once() {
        let a = back_with_400_granted_alone().await;
        // The heartbeat counts it in; neither it again nor the next round
        // trip counts it a second time.
        assert_eq!(a.count_in().await, 0);
        assert_eq!(a.count_in().await, 0);
        tokio::time::advance(Duration::from_millis(SETTLE_MS)).await;
        assert_eq!(spend(&a, 400).await, 1_000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_budget_failing_closed_asks_the_store_as_soon_as_it_is_back() {
        let (a, status) = allowances(budgets(), FailMode::Closed);
        status.set_degraded(true);
        assert!(a.reserve("ann", limits(), 50, 0.0).await.is_err());
        status.set_degraded(false);
        a.rejoined();
        assert_eq!(spend(&a, 0).await, 1_000);
    }

    #[tokio::test(start_paused = true)]
    async fn an_instance_back_first_keeps_to_its_share_while_the_others_count_in() {
        let clock = Clock::with_wall_anchor(1_800_000_000_000);
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(clock));
        let instance = || {
            let status = Arc::new(StoreStatus::default());
            status.set_redis();
            status.set_instances(2);
            let a = Allowances::new(store.clone(), status.clone(), &budgets(), FailMode::Open, clock);
            (a, status)
        };
        let ((a, a_status), (b, b_status)) = (instance(), instance());
        // The store away: each grants itself 400 of its 500.
        for (x, status) in [(&a, &a_status), (&b, &b_status)] {
            status.set_degraded(true);
            let _ = x.reserve("ann", limits(), 400, 0.0).await.unwrap();
        }
        // `a` is back first: it keeps to its share (100 more), though the
        // store has not heard of `b`'s 400 yet.
        assert_eq!(a.count_in().await, 0);
        a.rejoined();
        a_status.set_degraded(false);
        let _ = a.reserve("ann", limits(), 100, 0.0).await.unwrap();
        assert!(a.reserve("ann", limits(), 50, 0.0).await.is_err());
        // `b` counts in within the moment, `a` what it took meanwhile at its
        // next heartbeat; then the store has the rest for both.
        assert_eq!(b.count_in().await, 0);
        b_status.set_degraded(false);
        tokio::time::advance(Duration::from_millis(SETTLE_MS)).await;
        assert_eq!(a.count_in().await, 0);
        let mut spent = 900;
        while a.reserve("ann", limits(), 10, 0.0).await.is_ok() {
            spent += 10;
        }
        while b.reserve("ann", limits(), 10, 0.0).await.is_ok() {
            spent += 10;
        }
        assert_eq!(spent, 1_000, "the fleet's minute holds the budget");
    }

    #[tokio::test]
    async fn a_share_divides_by_the_most_instances_seen_lately() {
        let (a, status) = allowances(budgets(), FailMode::Open);
        a.saw_instances(4);
        // Heartbeats lost in a failover say 2 for a moment: the share stays
        // a quarter.
        status.set_instances(2);
        status.set_degraded(true);
        let _ = a.reserve("ann", limits(), 250, 0.0).await.unwrap();
        assert!(a.reserve("ann", limits(), 10, 0.0).await.is_err());
    }

    /// A store a round trip away: the memory store after a millisecond.
    struct Remote(MemoryStore, AtomicU64);

    #[async_trait::async_trait]
    impl Store for Remote {
        async fn take(&self, b: &[Take], now: Option<u64>) -> Result<Vec<Taken>, StoreError> {
            self.0.take(b, now).await
        }
        async fn grant(&self, key: &str, want: f64, limits: [f64; 3], now: Option<u64>) -> Result<Granted, StoreError> {
            self.1.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(1)).await;
            self.0.grant(key, want, limits, now).await
        }
        async fn retry(
            &self,
            key: &str,
            ask: RetryAsk,
            share: RetryShare,
            now: Option<u64>,
        ) -> Result<u32, StoreError> {
            self.0.retry(key, ask, share, now).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn calls_that_find_the_allowance_short_together_share_one_round_trip() {
        let clock = Clock::with_wall_anchor(1_800_000_000_000);
        let store = Arc::new(Remote(MemoryStore::new(clock), AtomicU64::new(0)));
        let status = Arc::new(StoreStatus::default());
        status.set_redis();
        let user_only = BudgetConfig {
            global_tokens_per_day: 0,
            ..budgets()
        };
        let a = Allowances::new(store.clone(), status, &user_only, FailMode::Open, clock);
        // Three calls of 30 at once: one chunk of 100 covers them all.
        let calls = (0..3).map(|_| a.reserve("ann", limits(), 30, 0.0));
        for r in futures_util::future::join_all(calls).await {
            let _ = r.unwrap();
        }
        assert_eq!(store.1.load(Ordering::Relaxed), 1, "one round trip");
        let ann = a.scopes[0].held.lock().get("ann").map(|x| (x.granted, x.left));
        assert_eq!(ann, Some((100.0, 10.0)));
    }
}
