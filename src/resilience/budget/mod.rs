//! Per-user token and cost budgets (minute/hour/day windows) and the global
//! cost breaker (hourly and daily tokens and dollars).
//!
//! A request *reserves* its estimate before dispatch and *settles* with what
//! it actually used, so concurrent requests cannot overshoot. A reservation
//! that would exceed a budget is refused with an error naming the budget; at
//! the soft ratio (80 % by default) a warning event is emitted once per
//! window. What settles also feeds each user's (and everyone's) spend rate
//! (`rate.rs`), whose breaker, once open, refuses like a spent budget.
//! Idle users are evicted so memory stays bounded.

mod exceeded;
mod rate;
mod view;

use crate::config::access::UserBudgets;
use crate::config::BudgetConfig;
use crate::resilience::evict;
use crate::resilience::notice::{self, Announce, BudgetWarning, Notice};
pub use exceeded::{Budget, BudgetExceeded, Metric, RateRefusal, Scope, Window};
use parking_lot::Mutex;
pub use rate::{RateView, SpendRate, Trip};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
pub use view::{GlobalView, UserView};

const MINUTE: u64 = 60_000;
const HOUR: u64 = 3_600_000;
const DAY: u64 = 86_400_000;

const TOKENS_MINUTE: Budget = Budget::tokens(Window::Minute);
const TOKENS_HOUR: Budget = Budget::tokens(Window::Hour);
const TOKENS_DAY: Budget = Budget::tokens(Window::Day);
const USD_HOUR: Budget = Budget::usd(Window::Hour);
const USD_DAY: Budget = Budget::usd(Window::Day);

/// What a request reserved; settle it with [`Budgets::settle`].
#[derive(Clone, Copy, Debug)]
#[must_use = "a reservation must be settled"]
pub struct Reservation {
    /// The user's slot: a user with a reservation is busy, so it is kept.
    user: u32,
    tokens: f64,
    cost: f64,
}

/// A fixed window: usage in the current period, `[start_ms, start_ms + len)`
/// for a multiple of the window's length. Kept by its start, so that
/// checking the period on every reservation takes no division.
#[derive(Clone, Copy, Debug, Default)]
struct Win {
    start_ms: u64,
    used: f64,
    warned: bool,
}

impl Win {
    /// Whether `now_ms` falls in this window's period.
    #[inline]
    fn holds(&self, now_ms: u64, len: u64) -> bool {
        now_ms.wrapping_sub(self.start_ms) < len
    }

    #[inline]
    fn roll(&mut self, now_ms: u64, len: u64) {
        if !self.holds(now_ms, len) {
            *self = Win {
                start_ms: now_ms - now_ms % len,
                ..Win::default()
            };
        }
    }
}

/// Adds each delta to its window (rolled to `now_ms` first), never going
/// below zero: how a settled reservation corrects what it reserved.
fn adjust(windows: [(&mut Win, u64, f64); 4], now_ms: u64) {
    for (w, len, d) in windows {
        w.roll(now_ms, len);
        w.used = (w.used + d).max(0.0);
    }
}

#[derive(Default)]
struct UserState {
    /// Its limits: the defaults, or its own.
    limits: UserLimits,
    minute: Win,
    hour: Win,
    day: Win,
    cost_day: Win,
    in_flight: u32,
    last_seen_ms: u64,
    rejections: u64,
    /// Minute period of the last announced refusal.
    announced: u64,
    /// Its spend rate and spend-rate breaker, once watched (boxed: most
    /// runs do not watch it, and a user's state stays small).
    rate: Option<Box<SpendRate>>,
}

/// A user's limits: tokens per minute, hour and day, USD per day (0 =
/// unlimited).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UserLimits {
    /// Tokens per minute.
    pub minute: f64,
    /// Tokens per hour.
    pub hour: f64,
    /// Tokens per day.
    pub day: f64,
    /// USD per day.
    pub cost_day: f64,
}

impl UserLimits {
    /// The defaults of `c`, with `own` in their place where it says.
    pub fn of(c: &BudgetConfig, own: Option<&UserBudgets>) -> Self {
        let pick = |own: Option<u64>, default: u64| own.unwrap_or(default) as f64;
        Self {
            minute: pick(own.and_then(|o| o.tokens_per_minute), c.user_tokens_per_minute),
            hour: pick(own.and_then(|o| o.tokens_per_hour), c.user_tokens_per_hour),
            day: pick(own.and_then(|o| o.tokens_per_day), c.user_tokens_per_day),
            cost_day: own.and_then(|o| o.cost_per_day_usd).unwrap_or(c.user_cost_per_day_usd),
        }
    }
}

#[derive(Default)]
struct GlobalState {
    tokens_hour: Win,
    tokens_day: Win,
    cost_hour: Win,
    cost_day: Win,
    /// Everyone's spend rate and its breaker.
    rate: SpendRate,
    /// The biggest spender of the last minute (its slot, its tokens this
    /// minute, when they were read): left out when everyone's rate is
    /// judged.
    top: Option<(u32, f64, u64)>,
}

/// All budgets.
pub struct Budgets {
    cfg: BudgetConfig,
    events: Arc<dyn Announce>,
    users: Mutex<evict::Slots<UserState>>,
    global: Mutex<GlobalState>,
    /// The last computed global pressure (f64 bits), read without the lock.
    pressure: AtomicU64,
    evictions: AtomicU64,
    /// The users with budgets of their own (a caller key's).
    own: parking_lot::RwLock<std::collections::HashMap<String, UserBudgets>>,
}

struct Check<'a> {
    /// The user whose budgets these are; `None` for the global ones.
    user: Option<&'a str>,
    events: &'a dyn Announce,
    soft: f64,
}

/// The scope of `user`'s budgets (`None`: the global ones).
fn scope_of(user: Option<&str>) -> Scope {
    user.map_or(Scope::Global, |u| Scope::User(u.into()))
}

impl Check<'_> {
    #[inline]
    fn over(&self, w: &Win, add: f64, limit: f64, budget: Budget) -> Result<(), BudgetExceeded> {
        if limit > 0.0 && w.used + add > limit {
            return Err(BudgetExceeded {
                scope: scope_of(self.user),
                fleet: false,
                budget: Some(budget),
                would: w.used + add,
                limit,
                alone: add,
                first_in_window: true,
                rate: None,
            });
        }
        Ok(())
    }

    /// Warns once per window at the soft ratio (checked inline on every
    /// reservation; the warning itself is rare).
    #[inline]
    fn warn(&self, w: &mut Win, limit: f64, budget: Budget) {
        if limit > 0.0 && !w.warned && w.used >= self.soft * limit {
            self.announce(w, limit, budget);
        }
    }

    #[cold]
    fn announce(&self, w: &mut Win, limit: f64, budget: Budget) {
        w.warned = true;
        self.events.announce(Notice::BudgetWarning(BudgetWarning {
            scope: self.user.map_or(Scope::Global, |u| Scope::User(u.into())),
            budget,
            used: w.used,
            limit,
        }));
    }
}

impl Budgets {
    /// Budgets with the given limits.
    pub fn new(cfg: BudgetConfig, events: Arc<dyn Announce>) -> Self {
        Self {
            users: Mutex::new(evict::Slots::with_room(cfg.max_tracked_users)),
            cfg,
            events,
            global: Mutex::new(GlobalState::default()),
            pressure: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            own: Default::default(),
        }
    }

    /// Gives `user` budgets of its own in place of the defaults (a caller
    /// key's), from its next reservation on.
    pub fn set_own(&self, user: &str, budgets: UserBudgets) {
        let limits = UserLimits::of(&self.cfg, Some(&budgets));
        self.own.write().insert(user.to_string(), budgets);
        let mut users = super::lock(&self.users);
        if let Some(slot) = users.find(user) {
            users.get_mut(slot).limits = limits;
        }
    }

    /// `user`'s limits: its own (a caller key's), else the defaults.
    pub fn limits_of(&self, user: &str) -> UserLimits {
        UserLimits::of(&self.cfg, self.own.read().get(user))
    }

    /// Reserves `tokens` and `cost` for `user` at `now_ms`.
    pub fn reserve(&self, user: &str, tokens: u32, cost: f64, now_ms: u64) -> Result<Reservation, BudgetExceeded> {
        let c = &self.cfg;
        let t = tokens as f64;
        // The users' lock first, then the global lock, nested, so the check
        // and the reservation are one step for both.
        let mut users = super::lock(&self.users);
        let slot = match users.find(user) {
            Some(slot) => slot,
            None => {
                let gone = users.make_room(self.cfg.max_tracked_users, now_ms, self.cfg.idle_evict_s * 1000);
                self.evictions.fetch_add(gone as u64, Ordering::Relaxed);
                let limits = UserLimits::of(c, self.own.read().get(user));
                users
                    .find_or_add(user, || UserState {
                        limits,
                        ..UserState::default()
                    })
                    .0
            }
        };
        let u = users.get_mut(slot);
        u.last_seen_ms = now_ms;
        u.minute.roll(now_ms, MINUTE);
        u.hour.roll(now_ms, HOUR);
        u.day.roll(now_ms, DAY);
        u.cost_day.roll(now_ms, DAY);
        let uc = Check {
            user: Some(user),
            events: &*self.events,
            soft: c.soft_ratio,
        };
        if let Some(trip) = u
            .rate
            .as_ref()
            .and_then(|r| r.open(now_ms))
            .filter(|_| c.spend_rate.enabled)
        {
            let e = BudgetExceeded::spend_rate(scope_of(Some(user)), trip, now_ms);
            return Err(Self::refused(u, e, now_ms));
        }
        let checked = uc
            .over(&u.minute, t, u.limits.minute, TOKENS_MINUTE)
            .and_then(|_| uc.over(&u.hour, t, u.limits.hour, TOKENS_HOUR))
            .and_then(|_| uc.over(&u.day, t, u.limits.day, TOKENS_DAY))
            .and_then(|_| uc.over(&u.cost_day, cost, u.limits.cost_day, USD_DAY));
        if let Err(e) = checked {
            return Err(Self::refused(u, e, now_ms));
        }

        let mut g = super::lock(&self.global);
        g.tokens_hour.roll(now_ms, HOUR);
        g.tokens_day.roll(now_ms, DAY);
        g.cost_hour.roll(now_ms, HOUR);
        g.cost_day.roll(now_ms, DAY);
        if let Some(trip) = g
            .rate
            .open(now_ms)
            .filter(|_| c.spend_rate.enabled && c.spend_rate.global)
        {
            return Err(Self::refused(
                u,
                BudgetExceeded::spend_rate(Scope::Global, trip, now_ms),
                now_ms,
            ));
        }
        let gc = Check {
            user: None,
            events: &*self.events,
            soft: c.soft_ratio,
        };
        let checked = gc
            .over(&g.tokens_hour, t, c.global_tokens_per_hour as f64, TOKENS_HOUR)
            .and_then(|_| gc.over(&g.tokens_day, t, c.global_tokens_per_day as f64, TOKENS_DAY))
            .and_then(|_| gc.over(&g.cost_hour, cost, c.global_cost_per_hour_usd, USD_HOUR))
            .and_then(|_| gc.over(&g.cost_day, cost, c.global_cost_per_day_usd, USD_DAY));
        if let Err(e) = checked {
            return Err(Self::refused(u, e, now_ms));
        }
        g.tokens_hour.used += t;
        g.tokens_day.used += t;
        g.cost_hour.used += cost;
        g.cost_day.used += cost;
        gc.warn(&mut g.tokens_hour, c.global_tokens_per_hour as f64, TOKENS_HOUR);
        gc.warn(&mut g.tokens_day, c.global_tokens_per_day as f64, TOKENS_DAY);
        gc.warn(&mut g.cost_hour, c.global_cost_per_hour_usd, USD_HOUR);
        gc.warn(&mut g.cost_day, c.global_cost_per_day_usd, USD_DAY);
        // Written only when it moves by a tenth of a percent: readers on
        // other cores keep their cached copy.
        let p = self.pressure_of(&g);
        if (p - self.pressure()).abs() > 1e-3 {
            self.pressure.store(p.to_bits(), Ordering::Relaxed);
        }
        drop(g);

        u.minute.used += t;
        u.hour.used += t;
        u.day.used += t;
        u.cost_day.used += cost;
        u.in_flight += 1;
        let l = u.limits;
        uc.warn(&mut u.minute, l.minute, TOKENS_MINUTE);
        uc.warn(&mut u.hour, l.hour, TOKENS_HOUR);
        uc.warn(&mut u.day, l.day, TOKENS_DAY);
        uc.warn(&mut u.cost_day, l.cost_day, USD_DAY);
        Ok(Reservation {
            user: slot,
            tokens: t,
            cost,
        })
    }

    fn refused(u: &mut UserState, mut e: BudgetExceeded, now_ms: u64) -> BudgetExceeded {
        u.rejections += 1;
        let minute = now_ms / MINUTE + 1;
        e.first_in_window = u.announced != minute;
        u.announced = minute;
        e
    }

    /// Settles a reservation with actual usage (may be more or less), and
    /// counts it in the spend rates: the user's own, then everyone's (see
    /// `rate.rs`: no one user opens everyone's breaker, and a user still
    /// warming up is judged against everyone's baseline).
    pub fn settle(&self, r: Reservation, tokens: u32, cost: f64, now_ms: u64) {
        let dt = tokens as f64 - r.tokens;
        let dc = cost - r.cost;
        let sr = &self.cfg.spend_rate;
        let mut trips: [Option<(Scope, Trip)>; 2] = [None, None];
        // What the user spent this minute (how the biggest spender is
        // found), and, a newcomer's, its rates.
        let (mut minute, mut newcomer) = (0.0, None);
        let mut users = super::lock(&self.users);
        let u = users.get_mut(r.user);
        u.in_flight = u.in_flight.saturating_sub(1);
        u.last_seen_ms = now_ms;
        adjust(
            [
                (&mut u.minute, MINUTE, dt),
                (&mut u.hour, HOUR, dt),
                (&mut u.day, DAY, dt),
                (&mut u.cost_day, DAY, dc),
            ],
            now_ms,
        );
        if sr.enabled {
            let rate = u.rate.get_or_insert_with(Default::default);
            if let Some(t) = rate.add(sr, tokens as f64, cost, now_ms, rate::Rates::default()) {
                trips[1] = Some((Scope::User(users.key(r.user).into()), t));
            }
            if sr.global {
                let u = users.get_mut(r.user);
                minute = u.minute.used;
                newcomer = u.rate.as_ref().and_then(|rate| rate.newcomer(sr, now_ms));
            }
        }
        drop(users);
        let mut everyone = None;
        {
            let mut guard = super::lock(&self.global);
            let g = &mut *guard;
            adjust(
                [
                    (&mut g.tokens_hour, HOUR, dt),
                    (&mut g.tokens_day, DAY, dt),
                    (&mut g.cost_hour, HOUR, dc),
                    (&mut g.cost_day, DAY, dc),
                ],
                now_ms,
            );
            if sr.enabled && sr.global {
                // The biggest spender this minute (kept a minute, its most).
                let top = match g.top {
                    Some(t) if now_ms < t.2 + MINUTE && t.0 == r.user => (r.user, t.1.max(minute), now_ms),
                    Some(t) if now_ms < t.2 + MINUTE && t.1 > minute => t,
                    _ => (r.user, minute, now_ms),
                };
                g.top = Some(top);
                let without = rate::Rates {
                    tokens: top.1,
                    usd: 0.0,
                };
                trips[0] = g
                    .rate
                    .add(sr, tokens as f64, cost, now_ms, without)
                    .map(|t| (Scope::Global, t));
                everyone = newcomer.map(|theirs| (theirs, g.rate.baseline(sr, now_ms)));
            }
        }
        // A newcomer spending past a multiple of everyone's baseline.
        if let Some((theirs, everyone)) = everyone.filter(|_| trips[1].is_none()) {
            let mut users = super::lock(&self.users);
            let u = users.get_mut(r.user);
            let trip = u
                .rate
                .as_mut()
                .and_then(|rate| rate.judge_newcomer(sr, theirs, everyone, now_ms));
            if let Some(t) = trip {
                trips[1] = Some((Scope::User(users.key(r.user).into()), t));
            }
        }
        // Announced outside the locks (rare).
        for (scope, trip) in trips.into_iter().flatten() {
            self.events
                .announce(Notice::SpendRate(notice::SpendRateTrip { scope, trip }));
        }
    }

    /// Closes `user`'s spend-rate breaker (`None`: everyone's); whether it
    /// was open.
    pub fn reset_spend_rate(&self, user: Option<&str>, now_ms: u64) -> bool {
        match user {
            Some(user) => {
                let mut users = super::lock(&self.users);
                let Some(slot) = users.find(user) else { return false };
                let Some(rate) = users.get_mut(slot).rate.as_mut() else {
                    return false;
                };
                let was = rate.open(now_ms).is_some();
                rate.reset();
                was
            }
            None => {
                let mut g = super::lock(&self.global);
                let was = g.rate.open(now_ms).is_some();
                g.rate.reset();
                was
            }
        }
    }

    /// How many tokens the call holding `r` may use in all before a hard
    /// token budget (the user's minute, hour or day, the global hour or
    /// day) would be exceeded, as the budgets stand now (what others use
    /// meanwhile is settled against them later): the tightest budget's room
    /// plus what `r` reserved. `None` when no token budget is set. A stream
    /// is cut where it would pass this.
    pub fn room(&self, user: &str, r: &Reservation, now_ms: u64) -> Option<(u64, BudgetExceeded)> {
        let c = &self.cfg;
        let mut tightest: Option<(f64, BudgetExceeded)> = None;
        let mut consider = |w: &Win, len: u64, limit: u64, user: Option<&str>, budget: Budget| {
            if limit == 0 {
                return;
            }
            let used = if w.holds(now_ms, len) { w.used } else { 0.0 };
            let room = limit as f64 - used + r.tokens;
            if tightest.as_ref().is_none_or(|(t, _)| room < *t) {
                let e = BudgetExceeded {
                    scope: scope_of(user),
                    fleet: false,
                    budget: Some(budget),
                    would: limit as f64 + 1.0,
                    limit: limit as f64,
                    alone: 0.0,
                    first_in_window: false,
                    rate: None,
                };
                tightest = Some((room, e));
            }
        };
        {
            let mut users = super::lock(&self.users);
            let u = users.get_mut(r.user);
            consider(&u.minute, MINUTE, u.limits.minute as u64, Some(user), TOKENS_MINUTE);
            consider(&u.hour, HOUR, u.limits.hour as u64, Some(user), TOKENS_HOUR);
            consider(&u.day, DAY, u.limits.day as u64, Some(user), TOKENS_DAY);
        }
        let g = super::lock(&self.global);
        consider(&g.tokens_hour, HOUR, c.global_tokens_per_hour, None, TOKENS_HOUR);
        consider(&g.tokens_day, DAY, c.global_tokens_per_day, None, TOKENS_DAY);
        tightest.map(|(room, e)| (room.max(0.0) as u64, e))
    }

    /// Highest share of any global limit in use as of the last reservation
    /// (drives cheaper routing; read without locking).
    pub fn pressure(&self) -> f64 {
        f64::from_bits(self.pressure.load(Ordering::Relaxed))
    }

    fn pressure_of(&self, g: &GlobalState) -> f64 {
        let c = &self.cfg;
        let share = |used: f64, limit: f64| if limit > 0.0 { used / limit } else { 0.0 };
        share(g.tokens_hour.used, c.global_tokens_per_hour as f64)
            .max(share(g.tokens_day.used, c.global_tokens_per_day as f64))
            .max(share(g.cost_hour.used, c.global_cost_per_hour_usd))
            .max(share(g.cost_day.used, c.global_cost_per_day_usd))
    }

    /// Users currently tracked.
    pub fn tracked_users(&self) -> usize {
        super::lock(&self.users).len()
    }

    /// Users evicted so far.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// Forgets users idle for `idle_evict_s` with nothing in flight.
    pub fn evict_idle(&self, now_ms: u64) {
        let gone = super::lock(&self.users).evict_idle(now_ms, self.cfg.idle_evict_s * 1000);
        self.evictions.fetch_add(gone as u64, Ordering::Relaxed);
    }
}

impl evict::Idle for UserState {
    fn busy(&self) -> bool {
        self.in_flight > 0
    }
    fn last_seen_ms(&self) -> u64 {
        self.last_seen_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resilience::notice::Heard;

    fn budgets(cfg: BudgetConfig) -> Budgets {
        Budgets::new(cfg, Arc::new(Heard::default()))
    }

    #[tokio::test]
    async fn reserve_refuses_and_names_the_budget() {
        let b = budgets(BudgetConfig {
            user_tokens_per_minute: 1000,
            ..BudgetConfig::default()
        });
        let r = b.reserve("alice", 600, 0.0, 0).unwrap();
        let err = b.reserve("alice", 600, 0.0, 10).unwrap_err();
        assert_eq!(err.scope, Scope::User("alice".into()));
        assert_eq!(err.budget, Some(TOKENS_MINUTE));
        assert!(err.to_string().contains("user alice budget exceeded: tokens/minute"));
        // Others are unaffected.
        let _ = b.reserve("bob", 600, 0.0, 10).unwrap();
        // Settling with less frees room.
        b.settle(r, 100, 0.0, 20);
        let _ = b.reserve("alice", 600, 0.0, 30).unwrap();
        // The next minute starts fresh.
        let _ = b.reserve("alice", 900, 0.0, MINUTE + 1).unwrap();
    }

    #[tokio::test]
    async fn soft_warning_fires_once_per_window() {
        let heard = Arc::new(Heard::default());
        let cfg = BudgetConfig {
            user_tokens_per_minute: 1000,
            ..BudgetConfig::default()
        };
        let b = Budgets::new(cfg, heard.clone());
        for i in 0..5 {
            let _ = b.reserve("alice", 190, 0.0, i).unwrap();
        }
        let warnings = heard
            .all()
            .into_iter()
            .filter(|n| matches!(n, Notice::BudgetWarning(_)))
            .count();
        assert_eq!(warnings, 1);
    }

    #[tokio::test]
    async fn global_cost_breaker_refuses() {
        let b = budgets(BudgetConfig {
            global_cost_per_hour_usd: 1.0,
            ..BudgetConfig::default()
        });
        let _ = b.reserve("a", 10, 0.9, 0).unwrap();
        let err = b.reserve("b", 10, 0.2, 0).unwrap_err();
        assert_eq!((&err.scope, err.budget), (&Scope::Global, Some(USD_HOUR)));
        assert_eq!(err.retry_after(), std::time::Duration::from_secs(3_600));
    }

    #[tokio::test]
    async fn a_tripped_spend_rate_refuses_its_user_alone_until_the_cooldown_or_a_reset() {
        let heard = Arc::new(Heard::default());
        let mut cfg = BudgetConfig {
            user_tokens_per_minute: 0,
            user_tokens_per_hour: 0,
            user_tokens_per_day: 0,
            ..BudgetConfig::default()
        };
        cfg.spend_rate.enabled = true;
        let b = Budgets::new(cfg, heard.clone());
        // 20k tokens a minute for an hour, then 60k: a call every 6 s.
        let mut opened = None;
        for step in 0..640u64 {
            let now = step * 6_000;
            let per_call = if step < 600 { 2_000 } else { 6_000 };
            match b.reserve("loop", per_call, 0.0, now) {
                Ok(r) => b.settle(r, per_call, 0.0, now),
                Err(e) => {
                    opened.get_or_insert((now, e));
                }
            }
            let r = b.reserve("other", 100, 0.0, now).expect("others are not refused");
            b.settle(r, 100, 0.0, now);
        }
        let (at, e) = opened.expect("the loop is refused");
        assert!(at > 3_600_000 && at <= 3_720_000, "{at}");
        assert_eq!(e.scope, Scope::User("loop".into()));
        assert!(e.to_string().starts_with("user loop spend-rate breaker open: "), "{e}");
        assert!(
            e.retry_after() > std::time::Duration::from_secs(200),
            "{:?}",
            e.retry_after()
        );
        let trips: Vec<_> = heard
            .all()
            .into_iter()
            .filter_map(|n| match n {
                Notice::SpendRate(t) => Some(t),
                _ => None,
            })
            .collect();
        assert_eq!(trips.len(), 1);
        assert_eq!(trips[0].scope, Scope::User("loop".into()));
        let view = b.top_users(1, at);
        assert_eq!(view[0].user, "loop");
        assert!(view[0].spend_rate.open_ms > 0 && view[0].pressure == 1.0);
        assert!(b.reset_spend_rate(Some("loop"), at));
        assert!(b.reserve("loop", 10, 0.0, at).is_ok());
    }

    /// Budgets with no token limit, only spend-rate breakers (everyone's
    /// too, when `global`).
    fn spend_rate_only(global: bool) -> BudgetConfig {
        let mut cfg = BudgetConfig {
            user_tokens_per_minute: 0,
            user_tokens_per_hour: 0,
            user_tokens_per_day: 0,
            global_tokens_per_hour: 0,
            global_tokens_per_day: 0,
            ..BudgetConfig::default()
        };
        cfg.spend_rate.enabled = true;
        cfg.spend_rate.global = global;
        cfg
    }

    #[tokio::test]
    async fn a_tripped_global_spend_rate_refuses_everyone_only_when_watched() {
        for global in [false, true] {
            let b = budgets(spend_rate_only(global));
            // Many users, each steady, together tripling at the hour: no
            // user's own rate moves, everyone's does.
            let mut refused = None;
            for step in 0..640u64 {
                let now = step * 6_000;
                let users = if step < 600 { 10 } else { 30 };
                for u in 0..users {
                    match b.reserve(&format!("u{u}"), 1_000, 0.0, now) {
                        Ok(r) => b.settle(r, 1_000, 0.0, now),
                        Err(e) => {
                            refused.get_or_insert(e);
                        }
                    }
                }
            }
            match (global, refused) {
                (false, None) => {}
                (true, Some(e)) => {
                    assert_eq!(e.scope, Scope::Global);
                    assert!(e.to_string().starts_with("global spend-rate breaker open"), "{e}");
                    assert!(b.global_view(3_800_000).spend_rate.open_ms > 0);
                    assert!(b.reset_spend_rate(None, 3_800_000));
                    assert!(b.reserve("u0", 1, 0.0, 3_800_000).is_ok());
                }
                (g, e) => panic!("global {g}: refused {e:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_newcomer_cannot_open_everyones_breaker_and_is_judged_against_everyone() {
        let b = budgets(spend_rate_only(true));
        // 20 steady users at 10k tokens a minute each for 70 minutes; at
        // minute 65 a user never seen spends 600k a minute.
        let (mut steady_refused, mut newcomer_refused) = (0, None);
        for step in 0..700u64 {
            let now = step * 6_000;
            for u in 0..20 {
                match b.reserve(&format!("u{u}"), 1_000, 0.0, now) {
                    Ok(r) => b.settle(r, 1_000, 0.0, now),
                    Err(_) => steady_refused += 1,
                }
            }
            if step >= 650 {
                match b.reserve("newcomer", 60_000, 0.0, now) {
                    Ok(r) => b.settle(r, 60_000, 0.0, now),
                    Err(e) => {
                        newcomer_refused.get_or_insert((now, e));
                    }
                }
            }
        }
        assert_eq!(steady_refused, 0, "no steady user is refused for the newcomer");
        assert_eq!(b.global_view(4_200_000).spend_rate.open_ms, 0);
        let (at, e) = newcomer_refused.expect("the newcomer is stopped");
        assert_eq!(e.scope, Scope::User("newcomer".into()));
        // It spends a minute, then is judged against everyone's baseline.
        assert!((3_960_000..=3_990_000).contains(&at), "{at}");
    }

    #[tokio::test]
    async fn tracked_users_stay_bounded() {
        let b = budgets(BudgetConfig {
            max_tracked_users: 1000,
            ..BudgetConfig::default()
        });
        for i in 0..20_000u64 {
            let user = format!("u{i}");
            let r = b.reserve(&user, 10, 0.0, i).unwrap();
            b.settle(r, 10, 0.0, i);
        }
        assert!(b.tracked_users() <= 1000, "{}", b.tracked_users());
        assert!(b.evictions() >= 19_000);
    }
}
