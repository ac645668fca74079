//! The token-aware rate limiter of one provider: token buckets for TPM (and
//! separate input/output buckets where the provider has them), RPM, and a
//! concurrency cap.
//!
//! A call acquires with its *estimate*, and settles with actual usage after,
//! refunding or charging the difference; the estimator corrects itself when
//! it drifts. Provider feedback (remaining tokens/requests, reset times,
//! Retry-After) calibrates the buckets; refills can be frozen for a
//! Retry-After or by an operator. With `[limiter.adaptive]` the
//! concurrency cap follows how the provider's calls go ([`adaptive`]);
//! with `[limiter.queue]` calls wait by priority and fair shares ([`queue`]).

pub mod adaptive;
mod bucket;
mod estimate;
pub mod queue;
mod shares;

use crate::config::{LimiterConfig, ProviderConfig};
use crate::resilience::notice::{Announce, Notice, RefillFrozen};
use adaptive::Adaptive;
pub use adaptive::{AdaptiveView, Signal};
use bucket::Bucket;
pub use estimate::Estimate;
use estimate::Estimator;
use parking_lot::Mutex;
use queue::FairQueue;
pub use queue::{Place, QueueView, ShedWhy};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Why a call found no capacity now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Short {
    /// The limits bind: this long until there should be enough.
    Wait(Duration),
    /// Its tenant holds its fair share of the slots (see `shares.rs`):
    /// waiting would hold the queue for a slot it may not take.
    Share,
}

/// Capacity held by one call; settle it with [`Limiter::settle`].
#[derive(Clone, Copy, Debug)]
#[must_use = "a limiter permit must be settled"]
pub struct LimitPermit {
    est: Estimate,
    /// What was taken from the tpm, itpm and otpm buckets (a call bigger
    /// than a bucket takes at most its capacity).
    taken: [f64; 3],
    /// Whose call it is (a tenant's key), for an adaptive limit and the
    /// fair shares of the slots.
    tenant: u64,
}

impl LimitPermit {
    /// The estimate the capacity was taken for.
    pub fn estimate(&self) -> Estimate {
        self.est
    }

    /// The permit of a call of `tenant`'s (a key: see
    /// [`Place::key_of`]).
    pub fn of(self, tenant: u64) -> Self {
        Self { tenant, ..self }
    }
}

pub use crate::wire::headers::RateFeedback;

/// Why capacity was not granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitDenied {
    /// Not enough tokens/requests/slots; enough should be back after this long.
    Wait(Duration),
    /// Waited `wait_timeout_ms` without capacity.
    TimedOut,
    /// Shed from the waiting queue.
    Shed(ShedWhy),
}

/// Why a limiter's refills are frozen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Frozen {
    /// By an operator, until unfrozen.
    ByOperator,
    /// By a Retry-After, for this many more milliseconds.
    For {
        /// Milliseconds left.
        ms: u64,
    },
}

/// Live figures for views.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LimiterView {
    /// Tokens-per-minute bucket (level, capacity).
    pub tpm: Option<(f64, f64)>,
    /// Input-tokens bucket.
    pub itpm: Option<(f64, f64)>,
    /// Output-tokens bucket.
    pub otpm: Option<(f64, f64)>,
    /// Requests-per-minute bucket.
    pub rpm: Option<(f64, f64)>,
    /// Calls in flight and the cap (0 = none).
    pub concurrency: (u32, u32),
    /// Refills frozen, and until when.
    pub frozen: Option<Frozen>,
    /// Current chars-per-token factor of the estimator.
    pub chars_per_token: f64,
    /// Requests that found no capacity in time.
    pub rejected: u64,
    /// 429s seen from the provider.
    pub rate_limited: u64,
    /// Milliseconds since the last header calibration.
    pub calibrated_ms_ago: Option<u64>,
    /// The adaptive concurrency limit, where limits adapt (its cap is
    /// `concurrency`'s second figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveView>,
    /// The waiting queue, where calls queue by priority and fair shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueView>,
}

/// How often a leased limiter's waiters look again for a top-up.
const LEASE_POLL: Duration = Duration::from_millis(10);

/// The buckets a lease covers, in order: tpm, itpm, otpm, rpm.
pub const BUCKETS: [&str; 4] = ["tpm", "itpm", "otpm", "rpm"];

/// One provider's limiter.
pub struct Limiter {
    name: Arc<str>,
    cfg: LimiterConfig,
    events: Arc<dyn Announce>,
    inner: Mutex<State>,
    released: Notify,
    /// Tasks waiting in `acquire`; releases only notify when there are any.
    waiters: AtomicUsize,
    /// Whether the concurrency cap adapts (read without the lock).
    adapts: bool,
    /// Calls waiting by priority and fair shares (`[limiter.queue]`).
    queue: Option<FairQueue>,
}

struct State {
    tpm: Option<Bucket>,
    itpm: Option<Bucket>,
    otpm: Option<Bucket>,
    rpm: Option<Bucket>,
    in_flight: u32,
    max_in_flight: u32,
    /// The adaptive cap, which replaces `max_in_flight` (its ceiling).
    adaptive: Option<Adaptive>,
    last: Instant,
    frozen_until: Option<Instant>,
    frozen_by_operator: bool,
    estimator: Estimator,
    rejected: u64,
    rate_limited: u64,
    calibrated_at: Option<Instant>,
    /// Largest shortfall per bucket since last read (leased mode: how much
    /// a waiting call needs beyond the lease).
    short: [f64; 4],
    /// Each tenant's slots, where calls queue by fair shares.
    shares: Option<shares::Shares>,
}

impl Limiter {
    /// A limiter with the provider's published limits, full buckets.
    pub fn new(name: &str, p: &ProviderConfig, cfg: LimiterConfig, events: Arc<dyn Announce>, now: Instant) -> Self {
        Self {
            name: name.into(),
            events,
            inner: Mutex::new(State {
                tpm: Bucket::per_minute(p.tpm),
                itpm: Bucket::per_minute(p.itpm),
                otpm: Bucket::per_minute(p.otpm),
                rpm: Bucket::per_minute(p.rpm),
                in_flight: 0,
                max_in_flight: p.concurrency,
                adaptive: cfg
                    .adaptive
                    .enabled
                    .then(|| Adaptive::new(&cfg.adaptive, p.concurrency)),
                last: now,
                frozen_until: None,
                frozen_by_operator: false,
                estimator: Estimator {
                    chars_per_token: p.chars_per_token,
                    threshold: cfg.drift_threshold,
                    window: cfg.drift_window,
                    seen: 0,
                    ratio_sum: 0.0,
                },
                rejected: 0,
                rate_limited: 0,
                calibrated_at: None,
                short: [0.0; 4],
                shares: cfg.queue.enabled.then(shares::Shares::default),
            }),
            adapts: cfg.adaptive.enabled,
            queue: cfg.queue.enabled.then(|| FairQueue::new(cfg.queue.max_waiting)),
            cfg,
            released: Notify::new(),
            waiters: AtomicUsize::new(0),
        }
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Estimates a call from its prompt size and `max_tokens`.
    pub fn estimate(&self, prompt_chars: usize, max_tokens: u32) -> Estimate {
        super::lock(&self.inner).estimator.estimate(prompt_chars, max_tokens)
    }

    /// Takes capacity for a call of this size now, or says how long until
    /// there should be enough.
    pub fn try_acquire(&self, prompt_chars: usize, max_tokens: u32, now: Instant) -> Result<LimitPermit, Duration> {
        self.try_acquire_for(prompt_chars, max_tokens, now, None)
            .map_err(|short| match short {
                Short::Wait(d) => d,
                Short::Share => Duration::from_millis(50),
            })
    }

    /// [`Limiter::try_acquire`] for a call of a tenant (`who`: its key
    /// and weight, see [`Place::key_of`]): held to its fair share of the
    /// slots where calls queue by fair shares; where the cap adapts, a
    /// limit cut by another tenant's overloads alone is given back first
    /// (see `adaptive.rs`).
    pub fn try_acquire_for(
        &self,
        prompt_chars: usize,
        max_tokens: u32,
        now: Instant,
        who: Option<(u64, u32)>,
    ) -> Result<LimitPermit, Short> {
        let mut guard = super::lock(&self.inner);
        if let (Some((tenant, _)), Some(a)) = (who, guard.adaptive.as_mut()) {
            a.arrives(tenant);
        }
        let s = &mut *guard;
        let est = s.estimator.estimate(prompt_chars, max_tokens);
        s.refill(now);
        let total = est.total() as f64;
        let mut wait = Duration::ZERO;
        for (b, n) in [
            (&s.tpm, total),
            (&s.itpm, est.input as f64),
            (&s.otpm, est.output as f64),
            (&s.rpm, 1.0),
        ] {
            if let Some(b) = b {
                wait = wait.max(b.wait_for(n));
            }
        }
        let frozen_for = s.frozen_for(now);
        if let Some(a) = s.adaptive.as_mut() {
            a.finds(s.in_flight, now);
        }
        let cap = s.cap();
        let slots_full = cap > 0 && s.in_flight >= cap;
        let fits = wait.is_zero() && !slots_full;
        let sharing = who.zip(s.shares.as_mut()).filter(|_| cap > 0);
        if let Some(((tenant, weight), shares)) = sharing {
            // Held to its share (and, when it fits, its slot taken).
            if shares.full_or_take(tenant, weight, cap, fits, now) {
                return Err(Short::Share);
            }
        }
        if fits {
            let mut taken = [0.0; 4];
            for (i, (b, n)) in [
                (&mut s.tpm, total),
                (&mut s.itpm, est.input as f64),
                (&mut s.otpm, est.output as f64),
                (&mut s.rpm, 1.0),
            ]
            .into_iter()
            .enumerate()
            {
                if let Some(b) = b {
                    taken[i] = b.need(n);
                    b.level -= taken[i];
                }
            }
            s.in_flight += 1;
            let tenant = who.map_or(0, |w| w.0);
            return Ok(LimitPermit {
                est,
                taken: [taken[0], taken[1], taken[2]],
                tenant,
            });
        }
        for (i, (b, n)) in [
            (s.tpm, total),
            (s.itpm, est.input as f64),
            (s.otpm, est.output as f64),
            (s.rpm, 1.0),
        ]
        .into_iter()
        .enumerate()
        {
            if let Some(b) = b {
                s.short[i] = s.short[i].max(b.need(n) - b.level);
            }
        }
        if !wait.is_zero() {
            // While frozen nothing refills: the refill starts after the freeze.
            wait = wait.saturating_add(frozen_for.unwrap_or(Duration::ZERO));
            if s.frozen_by_operator {
                wait = Duration::from_millis(self.cfg.wait_timeout_ms);
            }
        } else {
            // Only the slot cap binds: a release will wake us; poll as a fallback.
            wait = Duration::from_millis(50);
        }
        Err(Short::Wait(wait))
    }

    /// Waits up to `limiter.wait_timeout_ms` for capacity.
    pub async fn acquire(&self, prompt_chars: usize, max_tokens: u32) -> Result<LimitPermit, LimitDenied> {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(self.cfg.wait_timeout_ms);
        loop {
            let now = Instant::now();
            match self.try_acquire(prompt_chars, max_tokens, now) {
                Ok(p) => return Ok(p),
                Err(wait) => {
                    if now >= deadline {
                        super::lock(&self.inner).rejected += 1;
                        return Err(LimitDenied::TimedOut);
                    }
                    let until = (now + wait.max(Duration::from_millis(1))).min(deadline);
                    self.waiters.fetch_add(1, Ordering::AcqRel);
                    tokio::select! {
                        biased;
                        _ = tokio::time::sleep_until(until) => {}
                        _ = self.released.notified() => {}
                    }
                    self.waiters.fetch_sub(1, Ordering::AcqRel);
                }
            }
        }
    }

    /// Whether calls wait in its queue, so a new call must queue behind
    /// them rather than take capacity freed for them.
    #[inline]
    pub fn queued(&self) -> bool {
        self.queue.as_ref().is_some_and(|q| !q.is_empty())
    }

    /// Waits for capacity in the queue at `place` until `deadline`: only
    /// the call at the head of the queue takes capacity. Without a queue,
    /// as [`Limiter::acquire`].
    pub async fn acquire_queued(
        &self,
        prompt_chars: usize,
        max_tokens: u32,
        place: &Place,
        deadline: Instant,
    ) -> Result<LimitPermit, LimitDenied> {
        let Some(q) = &self.queue else {
            return self.acquire(prompt_chars, max_tokens).await;
        };
        let cost = u64::from(self.estimate(prompt_chars, max_tokens).total());
        // Dropped (the caller gone), it leaves the queue.
        let ticket = q.join(place, cost).map_err(|s| LimitDenied::Shed(s.why))?;
        loop {
            let now = Instant::now();
            let mut until = deadline;
            if ticket.is_head() {
                match self.try_acquire_for(prompt_chars, max_tokens, now, Some((place.key, place.weight))) {
                    Ok(p) => {
                        ticket.served();
                        return Ok(p);
                    }
                    // Its tenant holds its share: the head goes to the next.
                    Err(Short::Share) => {
                        ticket.shed(ShedWhy::Share);
                        return Err(LimitDenied::Shed(ShedWhy::Share));
                    }
                    Err(Short::Wait(wait)) => until = until.min(now + wait.max(Duration::from_millis(1))),
                }
            }
            if ticket.displaced() {
                return Err(LimitDenied::Shed(ShedWhy::Displaced));
            }
            if now >= deadline {
                ticket.shed(ShedWhy::Deadline);
                return Err(LimitDenied::Shed(ShedWhy::Deadline));
            }
            tokio::select! {
                biased;
                _ = ticket.called() => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Fleet mode: the buckets stop refilling locally and start empty; they
    /// are filled by [`Limiter::add_lease`] with capacity leased from the
    /// fleet's shared buckets. Returns each bucket's (capacity, refill per
    /// second), the shared bucket's shape, or None where there is no bucket.
    pub fn lease_mode(&self) -> [Option<(f64, f64)>; 4] {
        let mut guard = super::lock(&self.inner);
        let s = &mut *guard;
        let mut shape = [None; 4];
        for (i, b) in [&mut s.tpm, &mut s.itpm, &mut s.otpm, &mut s.rpm]
            .into_iter()
            .enumerate()
        {
            if let Some(b) = b {
                shape[i] = Some((b.capacity, b.per_s));
                b.per_s = 0.0;
                b.level = 0.0;
                b.reset_at = None;
            }
        }
        shape
    }

    /// Each bucket's level now (None where there is none), the largest
    /// shortfall a call met since the last look, and whether refills are
    /// frozen (a frozen limiter takes no new lease).
    pub fn levels(&self, now: Instant) -> ([Option<f64>; 4], [f64; 4], bool) {
        let mut s = super::lock(&self.inner);
        let levels = [s.tpm, s.itpm, s.otpm, s.rpm].map(|b| b.map(|b| b.level));
        let short = std::mem::take(&mut s.short);
        (levels, short, s.frozen_for(now).is_some())
    }

    /// Adds leased capacity to the buckets and wakes waiting calls.
    pub fn add_lease(&self, grants: [f64; 4]) {
        let mut guard = super::lock(&self.inner);
        let s = &mut *guard;
        for (b, g) in [&mut s.tpm, &mut s.itpm, &mut s.otpm, &mut s.rpm]
            .into_iter()
            .zip(grants)
        {
            if let Some(b) = b {
                b.level = (b.level + g).min(b.capacity);
            }
        }
        drop(guard);
        self.wake_all();
    }

    /// Counts a request that was turned away without waiting.
    pub fn count_rejected(&self) {
        super::lock(&self.inner).rejected += 1;
    }

    /// Settles a call with what it actually used; refunds or charges the
    /// difference, corrects the estimator and, where the cap adapts,
    /// learns from how the call went.
    pub fn settle(&self, permit: LimitPermit, input: u32, output: u32, signal: Signal, now: Instant) {
        let mut s = super::lock(&self.inner);
        s.refill(now);
        let in_flight = s.in_flight;
        if let Some(a) = s.adaptive.as_mut() {
            a.learn(signal, permit.tenant, in_flight, now);
        }
        let est = permit.est;
        let [t, i, o] = permit.taken;
        if let Some(b) = s.tpm.as_mut() {
            b.level = (b.level + t - (input as f64 + output as f64)).min(b.capacity);
        }
        if let Some(b) = s.itpm.as_mut() {
            b.level = (b.level + i - input as f64).min(b.capacity);
        }
        if let Some(b) = s.otpm.as_mut() {
            b.level = (b.level + o - output as f64).min(b.capacity);
        }
        s.in_flight = s.in_flight.saturating_sub(1);
        if let Some(shares) = s.shares.as_mut() {
            shares.give(permit.tenant, now);
        }
        let corrected = s.estimator.observe(est.input, input);
        drop(s);
        self.wake();
        if let Some((old, new)) = corrected {
            tracing::debug!(provider = %self.name, old, new, "estimator corrected chars/token");
        }
    }

    /// Whether its concurrency cap adapts (`[limiter.adaptive]`).
    pub fn adapts(&self) -> bool {
        self.adapts
    }

    /// A stream's time to first token, one sample of the provider's
    /// response time where the cap adapts.
    pub fn first_token(&self, ttft: Duration, admitted: Instant, now: Instant) {
        if self.adapts {
            if let Some(a) = super::lock(&self.inner).adaptive.as_mut() {
                a.sample(ttft, admitted, now);
            }
        }
    }

    /// Releases a permit whose call never reached the provider (refund all).
    pub fn release(&self, permit: LimitPermit, now: Instant) {
        let mut guard = super::lock(&self.inner);
        let s = &mut *guard;
        s.refill(now);
        let [t, i, o] = permit.taken;
        for (b, n) in [(&mut s.tpm, t), (&mut s.itpm, i), (&mut s.otpm, o), (&mut s.rpm, 1.0)] {
            if let Some(b) = b {
                b.level = (b.level + n).min(b.capacity);
            }
        }
        s.in_flight = s.in_flight.saturating_sub(1);
        if let Some(shares) = s.shares.as_mut() {
            shares.give(permit.tenant, now);
        }
        drop(guard);
        self.wake();
    }

    /// Capacity was given back: one waiter looks again (the queue's head,
    /// where calls queue).
    fn wake(&self) {
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.released.notify_one();
        }
        if let Some(q) = &self.queue {
            q.wake_head();
        }
    }

    /// Capacity may be back for many: every waiter looks again.
    fn wake_all(&self) {
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.released.notify_waiters();
        }
        if let Some(q) = &self.queue {
            q.wake_head();
        }
    }

    /// Calibrates from provider feedback; a Retry-After freezes refills.
    pub fn calibrate(&self, fb: &RateFeedback, now: Instant) {
        if *fb == RateFeedback::default() {
            return;
        }
        let mut guard = super::lock(&self.inner);
        let s = &mut *guard;
        s.refill(now);
        let mut touched = false;
        if let (Some(r), Some(b)) = (
            fb.remaining_tokens,
            (if s.tpm.is_some() { &mut s.tpm } else { &mut s.itpm }).as_mut(),
        ) {
            // The provider's count wins when it is lower: others share the quota.
            b.level = b.level.min(r as f64);
            touched = true;
        }
        if let (Some(r), Some(b)) = (fb.remaining_input_tokens, s.itpm.as_mut()) {
            b.level = b.level.min(r as f64);
            touched = true;
        }
        if let (Some(r), Some(b)) = (fb.remaining_output_tokens, s.otpm.as_mut()) {
            b.level = b.level.min(r as f64);
            touched = true;
        }
        if let (Some(r), Some(b)) = (fb.remaining_requests, s.rpm.as_mut()) {
            b.level = b.level.min(r as f64);
            touched = true;
        }
        if let (Some(d), Some(b)) = (
            fb.reset_tokens,
            (if s.tpm.is_some() { &mut s.tpm } else { &mut s.itpm }).as_mut(),
        ) {
            b.reset_at = Some(now + d);
            touched = true;
        }
        if let (Some(d), Some(b)) = (fb.reset_requests, s.rpm.as_mut()) {
            b.reset_at = Some(now + d);
            touched = true;
        }
        if touched {
            s.calibrated_at = Some(now);
        }
        drop(guard);
        if let Some(d) = fb.retry_after {
            self.freeze_for(d, "retry-after from provider", now);
        }
    }

    /// Counts a 429 from the provider.
    pub fn count_rate_limited(&self) {
        super::lock(&self.inner).rate_limited += 1;
    }

    /// Freezes refills for `d` (extends, never shortens, an existing freeze).
    pub fn freeze_for(&self, d: Duration, reason: &str, now: Instant) {
        let mut s = super::lock(&self.inner);
        s.refill(now);
        let until = now + d;
        if s.frozen_until.is_some_and(|u| u >= until) {
            return;
        }
        s.frozen_until = Some(until);
        drop(s);
        self.events.announce(Notice::RefillFrozen(RefillFrozen {
            provider: self.name.to_string(),
            for_ms: Some(d.as_millis() as u64),
            reason: reason.into(),
        }));
    }

    /// Operator: freeze refills until unfrozen.
    pub fn freeze(&self, now: Instant) -> bool {
        let mut s = super::lock(&self.inner);
        s.refill(now);
        !std::mem::replace(&mut s.frozen_by_operator, true)
    }

    /// Operator: resume refills (also ends a Retry-After freeze).
    pub fn unfreeze(&self, now: Instant) -> bool {
        let mut s = super::lock(&self.inner);
        s.refill(now);
        let changed = s.frozen_by_operator || s.frozen_until.is_some();
        s.frozen_by_operator = false;
        s.frozen_until = None;
        drop(s);
        self.wake_all();
        changed
    }

    /// Whether refills are frozen now.
    pub fn is_frozen(&self, now: Instant) -> bool {
        super::lock(&self.inner).frozen_for(now).is_some()
    }

    /// Live figures for views.
    pub fn view(&self, now: Instant) -> LimiterView {
        let mut s = super::lock(&self.inner);
        s.refill(now);
        LimiterView {
            tpm: s.tpm.map(|b| b.view()),
            itpm: s.itpm.map(|b| b.view()),
            otpm: s.otpm.map(|b| b.view()),
            rpm: s.rpm.map(|b| b.view()),
            concurrency: (s.in_flight, s.cap()),
            frozen: if s.frozen_by_operator {
                Some(Frozen::ByOperator)
            } else {
                s.frozen_for(now).map(|d| Frozen::For {
                    ms: d.as_millis() as u64,
                })
            },
            chars_per_token: s.estimator.chars_per_token,
            rejected: s.rejected,
            rate_limited: s.rate_limited,
            calibrated_ms_ago: s
                .calibrated_at
                .map(|t| now.saturating_duration_since(t).as_millis() as u64),
            adaptive: s.adaptive.as_ref().map(|a| a.view(now)),
            queue: self.queue.as_ref().map(FairQueue::view),
        }
    }
}

impl State {
    /// Calls allowed in flight (0 = no cap).
    #[inline]
    fn cap(&self) -> u32 {
        self.adaptive.as_ref().map_or(self.max_in_flight, Adaptive::cap)
    }

    fn frozen_for(&self, now: Instant) -> Option<Duration> {
        if self.frozen_by_operator {
            return Some(Duration::MAX);
        }
        self.frozen_until.filter(|u| *u > now).map(|u| u - now)
    }

    fn refill(&mut self, now: Instant) {
        let from = match self.frozen_until {
            _ if self.frozen_by_operator => now,
            Some(u) if u > now => now,
            Some(u) => {
                self.frozen_until = None;
                u.max(self.last)
            }
            None => self.last,
        };
        // Most refills come at the time of the last one (every request
        // started or ended at one step of virtual time).
        let dt = if now == from {
            0.0
        } else {
            now.saturating_duration_since(from).as_secs_f64()
        };
        self.last = now;
        for b in [&mut self.tpm, &mut self.itpm, &mut self.otpm, &mut self.rpm]
            .into_iter()
            .flatten()
        {
            b.refill(dt, now);
        }
    }
}
