//! Adaptive concurrency: a provider's concurrency limit found from how its
//! calls go, within a floor and a ceiling.
//!
//! Growth: while the limit is in use (half of it or more in flight, as
//! Netflix's concurrency-limits judges it; below that the demand, not the
//! provider, holds the calls back) every answer adds 1/limit, about one a
//! round trip (additive increase). Below the level it last found good,
//! once a round trip's worth of answers has come since the last cut, every
//! answer adds one, doubling it each round trip (slow start), and a call
//! that finds it full raises it at once ([`Adaptive::finds`]): neither the
//! starting limit nor one an outage or a storm cut turns calls away from a
//! provider that answers them.
//!
//! Multiplicative decrease: an overload answer (429, 503, 529) says the
//! provider's capacity is below the calls in flight: the limit becomes
//! `backoff` times the lower of the two. A recent response time above
//! `tolerance` times its long-run baseline multiplies it by `backoff` (a
//! latency gradient, as Netflix's concurrency-limits and Envoy's adaptive
//! concurrency use). A decrease counts once a round trip: only a call
//! admitted after the last cut may cut again; the others were admitted
//! under the larger limit and say nothing about the smaller one.
//!
//! The level found good is the limit after the first cut that follows a
//! round trip without one (as TCP's slow-start threshold). Overloads with
//! no call admitted since the last cut answered are the provider failing
//! whatever it is sent (an outage, a storm): they do not lower that level,
//! the limit before them is the one to grow back to, and a 503 or 529 then
//! holds the limit (its breaker stops the calls) where a 429, which says
//! there are more calls than the provider takes now, cuts. Four round
//! trips without a cut forget the level (`FORGET`): a capacity that
//! came back, or a storm's cuts that said nothing of one, no longer hold
//! the growth to one a round trip.
//!
//! An overload cuts only when it is not one tenant's alone: a provider
//! that refuses one tenant's calls (its prompts too large for a token
//! limit, its own quota) while it answers the others has capacity, and
//! that tenant must not shrink the limit everyone shares. So each limit
//! remembers the tenants of its last calls ([`Recent`]); an overload is
//! one tenant's own when that tenant has had three or more of them there
//! and the other tenants' calls were overloaded less than a quarter as
//! often. With no other tenant among them, a tenant alone cannot be told
//! from the provider: it cuts, but the limit it cut from is given back as
//! soon as another tenant's call comes ([`Adaptive::arrives`]).

use crate::config::AdaptiveConfig;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::time::Instant;

/// Why the limit last moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Move {
    /// Calls answered at steady latency with the limit in use: it grew.
    Grew,
    /// A 429, 503 or 529: it was cut.
    Overloaded,
    /// Response times rose past the tolerance: it was cut.
    Slower,
}

impl Move {
    /// Every move, in the order of [`AdaptiveView::moves`].
    pub const ALL: [Move; 3] = [Move::Grew, Move::Overloaded, Move::Slower];

    /// Its name on `/metrics`.
    pub fn name(self) -> &'static str {
        match self {
            Move::Grew => "grew",
            Move::Overloaded => "overload",
            Move::Slower => "latency",
        }
    }

    /// In a word or two, for the limiters pane.
    pub fn short(self) -> &'static str {
        match self {
            Move::Grew => "grew",
            Move::Overloaded => "cut: overload",
            Move::Slower => "cut: latency",
        }
    }

    /// In words, for views.
    pub fn label(self) -> &'static str {
        match self {
            Move::Grew => "grew: answers steady",
            Move::Overloaded => "cut: overloaded (429/503/529)",
            Move::Slower => "cut: latency rose",
        }
    }
}

/// An adaptive limit's live figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveView {
    /// The limit now (calls at once).
    pub limit: u32,
    /// Its floor.
    pub floor: u32,
    /// Its ceiling.
    pub ceiling: u32,
    /// Why it last moved, if it has.
    pub moved: Option<Move>,
    /// How long ago (ms).
    pub moved_ms_ago: Option<u64>,
    /// Recent response time (ms), and its long-run baseline.
    pub latency_ms: Option<(f64, f64)>,
    /// Moves since start, in the order of [`Move::ALL`].
    pub moves: [u64; 3],
}

/// How one call went, as the limit learns from it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Signal {
    /// It answered; `rtt` is its response time where it is one sample of
    /// it (a whole answer; a stream gives its time to first token apart).
    Answered {
        /// Response time.
        rtt: Option<Duration>,
        /// When it was admitted.
        admitted: Instant,
    },
    /// The provider said it is overloaded (503, 529).
    Overloaded {
        /// When it was admitted.
        admitted: Instant,
    },
    /// The provider said too many (429): more calls than it takes now.
    RateLimited {
        /// When it was admitted.
        admitted: Instant,
    },
    /// Nothing to learn (another failure, a call cut or given up).
    Neutral,
}

/// Samples before the latency baseline is trusted.
const WARMUP: u32 = 20;
/// Weight of a new sample in the recent response time (about 10 calls).
const SHORT: f64 = 0.1;
/// Weight of a new sample in the long-run baseline (about 100 calls).
const LONG: f64 = 0.01;

/// Round trips without a cut (answers, `FORGET` times the limit) after
/// which the level found good is forgotten: the limit grows as it did
/// before any cut.
const FORGET: f64 = 4.0;

/// Calls remembered, whose tenants say whether an overload is one
/// tenant's alone.
const RECENT: usize = 32;

/// Whether a limit is in use: half of it or more in flight (`in_flight`
/// counts the call that just ended). Below that the demand, not the
/// provider, holds the calls back, and the limit has headroom enough.
/// Not nearly all of it: no more calls than its whole part are in flight,
/// and nine tenths of a limit of 8.9 is more than 8.
#[inline]
fn in_use(in_flight: u32, limit: f64) -> bool {
    2.0 * f64::from(in_flight) >= limit
}

/// The tenants of a limit's last calls, and which were overloads.
#[derive(Clone, Debug, Default)]
struct Recent {
    calls: [(u64, bool); RECENT],
    next: usize,
    seen: usize,
}

impl Recent {
    fn note(&mut self, tenant: u64, overloaded: bool) {
        self.calls[self.next] = (tenant, overloaded);
        self.next = (self.next + 1) % RECENT;
        self.seen = (self.seen + 1).min(RECENT);
    }

    /// The other tenants' recent calls, and whether an overload of
    /// `tenant`'s (counted in already) is its own: it has had three or
    /// more, and the others were overloaded less than a quarter as often.
    fn others(&self, tenant: u64) -> (usize, bool) {
        let count = |mine: bool| {
            let calls = self.calls[..self.seen].iter().filter(|(t, _)| (*t == tenant) == mine);
            calls.fold((0, 0), |(n, o), (_, over)| (n + 1, o + usize::from(*over)))
        };
        let ((calls, over), (theirs, their_over)) = (count(true), count(false));
        let own = over >= 3 && theirs > 0 && 4 * their_over * calls < over * theirs;
        (theirs, own)
    }
}

/// One provider's adaptive limit.
#[derive(Clone, Debug)]
pub struct Adaptive {
    limit: f64,
    floor: f64,
    ceiling: f64,
    backoff: f64,
    tolerance: f64,
    /// Recent and long-run response time (ms), and samples seen.
    short: f64,
    long: f64,
    samples: u32,
    cut_at: Option<Instant>,
    /// The level it grows quickly back to (see the module's doc): the
    /// ceiling until a cut follows a round trip without one.
    good: f64,
    /// Answers since the last cut, of calls admitted after it.
    clean: u32,
    /// Whether a round trip's worth of them (the limit) has come, or
    /// nothing was cut yet: the provider answers.
    settled: bool,
    /// The limit before the cuts now running began.
    streak_from: f64,
    moved: Option<(Move, Instant)>,
    moves: [u64; 3],
    recent: Recent,
    /// The tenant whose overloads alone, with no other tenant about, cut
    /// the limit, and the limit before they did.
    solo: Option<(u64, f64)>,
}

impl Adaptive {
    /// A limit under `cfg`, its ceiling lowered to `hard_cap` when that is
    /// set (a provider's own `concurrency`).
    pub fn new(cfg: &AdaptiveConfig, hard_cap: u32) -> Self {
        let ceiling = match hard_cap {
            0 => cfg.ceiling,
            c => c.min(cfg.ceiling),
        }
        .max(cfg.floor) as f64;
        let floor = f64::from(cfg.floor);
        Self {
            limit: f64::from(cfg.initial).clamp(floor, ceiling),
            floor,
            ceiling,
            backoff: cfg.backoff,
            tolerance: cfg.tolerance,
            short: 0.0,
            long: 0.0,
            samples: 0,
            cut_at: None,
            good: ceiling,
            clean: 0,
            settled: true,
            streak_from: 0.0,
            moved: None,
            moves: [0; 3],
            recent: Recent::default(),
            solo: None,
        }
    }

    /// Calls allowed at once now.
    #[inline]
    pub fn cap(&self) -> u32 {
        self.limit as u32
    }

    /// A call finds `in_flight` calls held. Below the level found good
    /// while the provider answers (a round trip of answers since the last
    /// cut, or no cut yet), nothing says its capacity is below what it is
    /// asked for: a call that finds the limit full raises it by one, so
    /// neither the starting limit nor one an outage cut turns calls away
    /// from a provider that answers them.
    #[inline]
    pub fn finds(&mut self, in_flight: u32, now: Instant) {
        if self.settled && self.limit < self.good && f64::from(in_flight) >= self.limit.floor() {
            let was = self.cap();
            self.limit = (self.limit.floor() + 1.0).min(self.good);
            if self.cap() > was {
                self.moved_at(Move::Grew, now);
            }
        }
    }

    /// A call of `tenant`'s is coming: a limit cut by another tenant's
    /// overloads alone is given back.
    pub fn arrives(&mut self, tenant: u64) {
        if let Some((solo, before)) = self.solo {
            if solo != tenant {
                self.limit = self.limit.max(before);
                self.solo = None;
            }
        }
    }

    /// Learns from a call of `tenant`'s that ended at `now` with
    /// `in_flight` calls (its own among them) still held.
    pub fn learn(&mut self, signal: Signal, tenant: u64, in_flight: u32, now: Instant) {
        match signal {
            Signal::Answered { rtt, admitted } => {
                self.recent.note(tenant, false);
                if self.cut_at.is_none_or(|c| admitted >= c) {
                    self.clean = self.clean.saturating_add(1);
                    self.settled |= f64::from(self.clean) >= self.limit;
                    if f64::from(self.clean) >= FORGET * self.limit {
                        // Long without a cut: the capacity a cut found
                        // (or a storm's cuts left) may have come back.
                        self.good = self.ceiling;
                    }
                }
                if let Some(rtt) = rtt {
                    self.sample(rtt, admitted, now);
                }
                if in_use(in_flight, self.limit) && self.limit < self.ceiling {
                    let was = self.cap();
                    self.grow();
                    if self.cap() > was {
                        self.moved_at(Move::Grew, now);
                    }
                }
            }
            Signal::Overloaded { admitted } | Signal::RateLimited { admitted } => {
                self.recent.note(tenant, true);
                let (others, own) = self.recent.others(tenant);
                if own {
                    return;
                }
                self.solo = match (others, self.solo) {
                    (0, Some((t, before))) if t == tenant => Some((t, before.max(self.limit))),
                    (0, _) => Some((tenant, self.limit)),
                    _ => None,
                };
                let holds = matches!(signal, Signal::Overloaded { .. });
                self.cut(Move::Overloaded, in_flight, admitted, now, holds);
            }
            Signal::Neutral => {}
        }
    }

    /// Whether it grows by one an answer (slow start): below the level
    /// found good, a round trip's worth of answers after the last cut.
    fn starting(&self) -> bool {
        self.settled && self.limit < self.good
    }

    /// One answer's growth: one below the level found good (no further
    /// than it, or than 1/limit past it), else 1/limit.
    fn grow(&mut self) {
        let additive = self.limit + 1.0 / self.limit;
        let next = if self.starting() {
            (self.limit + 1.0).min(self.good).max(additive)
        } else {
            additive
        };
        self.limit = next.min(self.ceiling);
    }

    /// One response-time sample (a whole answer's, or a stream's time to
    /// first token) of a call admitted at `admitted`.
    pub fn sample(&mut self, rtt: Duration, admitted: Instant, now: Instant) {
        let ms = rtt.as_secs_f64() * 1000.0;
        self.samples = self.samples.saturating_add(1);
        // The plain mean until there are enough samples for each weight,
        // so neither leans on the first few calls.
        let n = f64::from(self.samples);
        self.short += SHORT.max(1.0 / n) * (ms - self.short);
        self.long += LONG.max(1.0 / n) * (ms - self.long);
        if self.samples >= WARMUP && self.short > self.tolerance * self.long {
            self.cut(Move::Slower, u32::MAX, admitted, now, false);
        }
    }

    /// Multiplies the limit, or the calls in flight when fewer, by the
    /// backoff, once a round trip.
    fn cut(&mut self, why: Move, in_flight: u32, admitted: Instant, now: Instant, holds: bool) {
        if self.cut_at.is_some_and(|c| admitted < c) {
            return;
        }
        let used = self.limit.min(f64::from(in_flight));
        if self.clean > 0 || self.cut_at.is_none() {
            self.streak_from = self.limit;
        } else {
            // No call admitted since the last cut was answered: the
            // provider fails whatever it is sent (an outage, a storm),
            // and the limit before the cuts is the level to grow back to.
            // A 503 or 529 then says nothing of its capacity: the limit
            // holds (its breaker stops the calls). A 429 says there are
            // more calls than it takes now: it cuts.
            self.good = self.good.max(self.streak_from);
            if holds {
                return;
            }
        }
        self.limit = (used * self.backoff).max(self.floor);
        if self.settled {
            // The first cut after a round trip without one: the level.
            self.good = self.limit;
        }
        (self.clean, self.settled) = (0, false);
        self.cut_at = Some(now);
        self.moved_at(why, now);
    }

    fn moved_at(&mut self, why: Move, now: Instant) {
        self.moved = Some((why, now));
        self.moves[why as usize] += 1;
    }

    /// Live figures.
    pub fn view(&self, now: Instant) -> AdaptiveView {
        AdaptiveView {
            limit: self.cap(),
            floor: self.floor as u32,
            ceiling: self.ceiling as u32,
            moved: self.moved.map(|(m, _)| m),
            moved_ms_ago: self
                .moved
                .map(|(_, t)| now.saturating_duration_since(t).as_millis() as u64),
            latency_ms: (self.samples > 0).then_some((self.short, self.long)),
            moves: self.moves,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(floor: u32, initial: u32, ceiling: u32) -> AdaptiveConfig {
        AdaptiveConfig {
            enabled: true,
            floor,
            initial,
            ceiling,
            ..AdaptiveConfig::default()
        }
    }

    fn answered(a: &mut Adaptive, ms: u64, admitted: Instant, now: Instant) {
        let in_flight = a.cap();
        a.learn(
            Signal::Answered {
                rtt: Some(Duration::from_millis(ms)),
                admitted,
            },
            0,
            in_flight,
            now,
        );
    }

    /// An overload of a call admitted at `at`, with the limit in flight.
    fn overloaded(a: &mut Adaptive, at: Instant) {
        let in_flight = a.cap();
        a.learn(Signal::Overloaded { admitted: at }, 0, in_flight, at);
    }

    #[test]
    fn grows_about_one_a_round_trip_after_a_cut_and_stops_at_the_ceiling() {
        let t0 = Instant::now();
        let mut a = Adaptive::new(&cfg(1, 12, 14), 0);
        // Answers, then one cut: 12 × 0.9 = 10.8, the level found.
        for _ in 0..20 {
            answered(&mut a, 500, t0, t0);
        }
        assert_eq!(a.cap(), 14, "nothing cut yet: one an answer");
        let mut a = Adaptive::new(&cfg(1, 12, 14), 0);
        for _ in 0..12 {
            a.learn(
                Signal::Answered {
                    rtt: None,
                    admitted: t0,
                },
                0,
                1,
                t0,
            );
        }
        overloaded(&mut a, t0);
        assert_eq!(a.cap(), 10);
        answered(&mut a, 500, t0, t0);
        assert_eq!(a.cap(), 10, "1/10.8 an answer");
        for _ in 0..2 {
            answered(&mut a, 500, t0, t0);
        }
        assert_eq!(a.cap(), 11);
        for _ in 0..100 {
            answered(&mut a, 500, t0, t0);
        }
        assert_eq!(a.cap(), 14);
        assert_eq!(a.view(t0).moved, Some(Move::Grew));
    }

    /// Answers with the limit in flight until it reaches `to`; how many.
    fn answers_until(a: &mut Adaptive, to: u32, t: Instant) -> usize {
        (1..=100_000)
            .find(|_| {
                answered(a, 500, t, t);
                a.cap() >= to
            })
            .unwrap_or(usize::MAX)
    }

    /// A limit that answered a round trip at the ceiling, then was cut
    /// to `to` by overloads, an answer to a call admitted after each cut
    /// between them (a capacity that fell); the time of the last cut.
    fn cut_to(to: u32, ceiling: u32) -> (Adaptive, Instant) {
        let t0 = Instant::now();
        let mut a = Adaptive::new(&cfg(1, ceiling, ceiling), 0);
        for _ in 0..ceiling {
            a.learn(
                Signal::Answered {
                    rtt: None,
                    admitted: t0,
                },
                0,
                1,
                t0,
            );
        }
        let mut t = t0;
        while a.cap() > to {
            t += Duration::from_secs(1);
            overloaded(&mut a, t);
            a.learn(Signal::Answered { rtt: None, admitted: t }, 0, 0, t);
        }
        (a, t)
    }

    #[test]
    fn from_any_limit_healthy_answers_grow_it_back_within_a_bound() {
        const CEILING: u32 = 64;
        let t0 = Instant::now();
        for start in 1..=CEILING {
            // A limit that starts there reaches the ceiling within one
            // answer for each call more.
            let mut a = Adaptive::new(&cfg(1, start, CEILING), 0);
            let n = answers_until(&mut a, CEILING, t0);
            assert!(n <= (CEILING - start).max(1) as usize, "from {start}: {n} answers");
            // Cut there by a capacity that fell: back where the first cut
            // left it (57) within a round trip at the limit and one answer
            // for each call more, then by 1/limit an answer: at the
            // ceiling within (1 - backoff) x ceiling² answers more.
            let (mut a, t) = cut_to(start, CEILING);
            let t = t + Duration::from_secs(1);
            let n = answers_until(&mut a, 57, t);
            assert!(n <= 59, "from {start}: {n} answers to 57");
            let m = answers_until(&mut a, CEILING, t);
            assert!(m <= 410, "from {start}: {m} answers more to the ceiling");
            // A round trip answered, calls that find it full raise it at
            // once to the level the first cut found.
            let (mut a, t) = cut_to(start, CEILING);
            let t = t + Duration::from_secs(1);
            for _ in 0..=start {
                a.learn(Signal::Answered { rtt: None, admitted: t }, 0, 0, t);
            }
            for _ in 0..CEILING {
                let full = a.cap();
                a.finds(full, t);
            }
            let back = if start == CEILING { CEILING } else { 57 };
            assert_eq!(a.cap(), back, "from {start}: calls finding it full");
        }
    }

    #[test]
    fn an_outage_holds_the_limit_and_it_is_back_once_answered() {
        let t0 = Instant::now();
        let mut a = Adaptive::new(&cfg(1, 40, 256), 0);
        for _ in 0..40 {
            a.learn(
                Signal::Answered {
                    rtt: None,
                    admitted: t0,
                },
                0,
                1,
                t0,
            );
        }
        // 503s one after another, no call admitted between them answered:
        // one cut, then the limit holds.
        for i in 1..=50u64 {
            overloaded(&mut a, t0 + Duration::from_secs(i));
        }
        assert_eq!(a.cap(), 36);
        assert_eq!(a.view(t0).moves, [0, 1, 0]);
        // 429s the same way keep cutting: there are more calls than the
        // provider takes now.
        let mut b = a.clone();
        for i in 51..=60u64 {
            let t = t0 + Duration::from_secs(i);
            b.learn(Signal::RateLimited { admitted: t }, 0, 36, t);
        }
        assert!(b.cap() < 36, "{}", b.cap());
        // A round trip answered: the limit before the outage is back for
        // the calls that find it full.
        let t = t0 + Duration::from_secs(60);
        for _ in 0..36 {
            a.learn(Signal::Answered { rtt: None, admitted: t }, 0, 0, t);
        }
        for in_flight in 36..50 {
            a.finds(in_flight, t);
        }
        assert_eq!(a.cap(), 40);
    }

    #[test]
    fn a_cut_in_the_slow_start_sets_the_level_it_grows_back_to() {
        // Cut to 2, then answered: one an answer, until a 429 at 20 says
        // the capacity is there.
        let (mut a, t) = cut_to(2, 256);
        let t = t + Duration::from_secs(1);
        answers_until(&mut a, 20, t);
        overloaded(&mut a, t);
        assert_eq!(a.cap(), 18);
        // A round trip later it grows by 1/limit an answer, not one.
        answers_until(&mut a, 19, t);
        let before = a.cap();
        for _ in 0..10 {
            answered(&mut a, 500, t, t);
        }
        assert!(a.cap() <= before + 1, "{} after ten answers at {before}", a.cap());
    }

    #[test]
    fn does_not_grow_while_mostly_idle() {
        let t0 = Instant::now();
        let mut a = Adaptive::new(&cfg(1, 10, 100), 0);
        for _ in 0..100 {
            a.learn(
                Signal::Answered {
                    rtt: None,
                    admitted: t0,
                },
                0,
                4,
                t0,
            );
        }
        assert_eq!(a.cap(), 10);
        assert_eq!(a.view(t0).moved, None);
    }

    #[test]
    fn an_overload_cuts_once_a_round_trip() {
        let t0 = Instant::now();
        let mut a = Adaptive::new(&cfg(1, 20, 100), 0);
        let t1 = t0 + Duration::from_secs(1);
        // Three 429s of calls admitted before the first cut: one cut.
        for _ in 0..3 {
            a.learn(Signal::Overloaded { admitted: t0 }, 0, 20, t1);
        }
        assert_eq!(a.cap(), 18);
        // A call admitted after that cut may cut again (the provider
        // answers some: its capacity, not an outage).
        let answer = |a: &mut Adaptive, at: Instant| {
            a.learn(
                Signal::Answered {
                    rtt: None,
                    admitted: at,
                },
                0,
                0,
                at,
            );
        };
        answer(&mut a, t1 + Duration::from_millis(1));
        a.learn(
            Signal::Overloaded {
                admitted: t1 + Duration::from_millis(1),
            },
            0,
            18,
            t1 + Duration::from_secs(1),
        );
        assert_eq!(a.cap(), 16);
        assert_eq!(a.view(t1).moved, Some(Move::Overloaded));
        assert_eq!(a.view(t1).moves, [0, 2, 0]);
        // Fewer calls in flight than the limit: the capacity is below them.
        answer(&mut a, t1 + Duration::from_secs(2));
        a.learn(
            Signal::Overloaded {
                admitted: t1 + Duration::from_secs(2),
            },
            0,
            10,
            t1 + Duration::from_secs(3),
        );
        assert_eq!(a.cap(), 9);
        // No call admitted since was answered: it fails whatever it is
        // sent, and the limit holds.
        let t = t1 + Duration::from_secs(4);
        a.learn(Signal::Overloaded { admitted: t }, 0, 9, t);
        assert_eq!(a.cap(), 9);
    }

    #[test]
    fn never_leaves_floor_and_ceiling_and_a_providers_cap_is_the_ceiling() {
        let t0 = Instant::now();
        let mut a = Adaptive::new(&cfg(3, 4, 256), 0);
        for i in 0..50u64 {
            let t = t0 + Duration::from_secs(i);
            a.learn(Signal::Overloaded { admitted: t }, 0, 1, t);
        }
        assert_eq!(a.cap(), 3);
        let b = Adaptive::new(&cfg(1, 16, 256), 8);
        assert_eq!((b.cap(), b.view(t0).ceiling), (8, 8));
    }

    #[test]
    fn a_fast_first_call_is_no_baseline() {
        let t0 = Instant::now();
        let mut a = Adaptive::new(&cfg(1, 20, 20), 0);
        answered(&mut a, 100, t0, t0);
        for i in 0..200u64 {
            answered(&mut a, 500 + (i * 37) % 3_500, t0, t0);
        }
        assert_eq!((a.cap(), a.view(t0).moved), (20, None));
    }

    #[test]
    fn latency_past_the_tolerance_cuts_and_steady_latency_does_not() {
        let t0 = Instant::now();
        let mut a = Adaptive::new(&cfg(1, 20, 20), 0);
        for i in 0..200u64 {
            // Jitter of ±40 % around 1 s never cuts.
            answered(&mut a, 600 + (i * 37) % 800, t0, t0);
        }
        assert_eq!(a.cap(), 20);
        let t1 = t0 + Duration::from_secs(10);
        let mut cut_after = None;
        for i in 0..20u32 {
            answered(&mut a, 4_000, t1, t1);
            if a.cap() < 20 {
                cut_after = Some(i + 1);
                break;
            }
        }
        assert!(cut_after.is_some_and(|n| n <= 10), "{cut_after:?}");
        assert_eq!(a.view(t1).moved, Some(Move::Slower));
    }

    #[test]
    fn one_tenants_overloads_cut_nothing_while_the_others_are_answered() {
        let t0 = Instant::now();
        let mut a = Adaptive::new(&cfg(1, 16, 64), 0);
        let answer = |a: &mut Adaptive, tenant: u64, at: Instant| {
            let signal = Signal::Answered {
                rtt: None,
                admitted: at,
            };
            a.learn(signal, tenant, 4, at);
        };
        let overload = |a: &mut Adaptive, tenant: u64, at: Instant| {
            a.learn(Signal::Overloaded { admitted: at }, tenant, 16, at);
        };
        for i in 0..100u64 {
            let t = t0 + Duration::from_secs(i);
            answer(&mut a, 2, t);
            overload(&mut a, 1, t);
        }
        assert_eq!(a.cap(), 12, "two cuts, then tenant 1's 429s are its own");
        // The other tenant overloaded too: the provider is short.
        let t = t0 + Duration::from_secs(200);
        for i in 0..12 {
            overload(&mut a, 2, t + Duration::from_secs(i));
        }
        overload(&mut a, 1, t + Duration::from_secs(20));
        assert!(a.cap() < 12);
        // A tenant alone is not told from the provider: it cuts, until
        // another tenant's call comes.
        let mut alone = Adaptive::new(&cfg(1, 16, 64), 0);
        for i in 0..40u64 {
            let t = t0 + Duration::from_secs(i);
            alone.learn(Signal::Answered { rtt: None, admitted: t }, 1, 0, t);
            overload(&mut alone, 1, t);
        }
        assert_eq!(alone.cap(), 1);
        alone.arrives(1);
        assert_eq!(alone.cap(), 1, "its own next call changes nothing");
        alone.arrives(2);
        assert_eq!(alone.cap(), 16, "another's is served at the limit it had");
    }
}
