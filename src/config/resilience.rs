//! The resilience settings: breakers, limiters, budgets, sessions,
//! retries and degradation.

use serde::{Deserialize, Serialize};

/// Sliding window kind for the failure rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WindowKind {
    /// The last `window_size` calls.
    Count,
    /// The calls in the last `window_size` seconds.
    Time,
}

/// Circuit-breaker settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Trip after this many failures in a row (0 = off).
    pub consecutive_failures: u32,
    /// Window kind for rates.
    pub window: WindowKind,
    /// Calls (count window) or seconds (time window).
    pub window_size: u32,
    /// Rates are only judged with at least this many calls in the window.
    pub minimum_calls: u32,
    /// Trip when the failure rate reaches this (0..=1).
    pub failure_rate: f64,
    /// A call slower than this is slow (ms; 0 = off).
    pub slow_call_ms: u64,
    /// Trip when the slow-call rate reaches this (0..=1).
    pub slow_call_rate: f64,
    /// A failed call that cost more tokens than this trips at once (0 = off).
    pub token_cost_threshold: u32,
    /// Output tokens/s below this is a failure (token-rate collapse; 0 = off).
    pub min_tokens_per_s: f64,
    /// Count 429s as failures.
    pub count_rate_limited: bool,
    /// First open period (ms).
    pub cooldown_ms: u64,
    /// Each repeated trip multiplies the cooldown by this.
    pub cooldown_multiplier: f64,
    /// Cooldown cap (ms).
    pub max_cooldown_ms: u64,
    /// Probes allowed in each half-open stage (a progressive ramp).
    pub half_open_ramp: Vec<u32>,
    /// A stage passes when its success rate reaches this (0..=1).
    pub half_open_success_rate: f64,
    /// Longest time in half-open before reopening (ms).
    pub max_half_open_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
            window: WindowKind::Count,
            window_size: 20,
            minimum_calls: 10,
            failure_rate: 0.5,
            slow_call_ms: 30_000,
            slow_call_rate: 0.8,
            token_cost_threshold: 5_000,
            min_tokens_per_s: 2.0,
            count_rate_limited: true,
            cooldown_ms: 30_000,
            cooldown_multiplier: 2.0,
            max_cooldown_ms: 120_000,
            half_open_ramp: vec![2, 4, 8],
            half_open_success_rate: 0.8,
            max_half_open_ms: 60_000,
        }
    }
}

/// Limiter behaviour.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimiterConfig {
    /// Longest wait for capacity before the request degrades (ms).
    pub wait_timeout_ms: u64,
    /// Correct the estimator when it is off by more than this (0..=1)…
    pub drift_threshold: f64,
    /// …on average over this many calls.
    pub drift_window: u32,
    /// Adaptive concurrency (off unless enabled).
    pub adaptive: AdaptiveConfig,
    /// The waiting queue: priorities and fair shares (off unless enabled).
    pub queue: QueueConfig,
}

/// How urgent a request is. When a provider is short of capacity its
/// waiting calls are served `critical` first and `batch` last, and shed
/// the other way round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Served first, shed last.
    Critical,
    /// Everything not marked otherwise.
    #[default]
    Default,
    /// Served when nothing else waits, shed first.
    Batch,
}

impl Priority {
    /// Every priority, most urgent first (the order of [`Priority::index`]).
    pub const ALL: [Priority; 3] = [Priority::Critical, Priority::Default, Priority::Batch];

    /// Its position in [`Priority::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Its name, as `x-fusebox-priority` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Default => "default",
            Priority::Batch => "batch",
        }
    }

    /// The priority `s` names.
    pub fn parse(s: &str) -> Option<Priority> {
        Priority::ALL.into_iter().find(|p| p.name().eq_ignore_ascii_case(s))
    }

    /// Whether this is the default (left out where written).
    pub fn is_default(&self) -> bool {
        *self == Priority::Default
    }
}

/// The waiting queue of each provider. Without it, calls that find no
/// capacity wait up to `wait_timeout_ms` in no particular order. With it,
/// they queue by priority and, within a priority, in weighted fair shares
/// across tenants (a tenant's share of tokens follows its weight, whatever
/// it sends); a call not served by its priority's deadline, or pushed out
/// of a full queue by a more urgent one, is shed with 429 and Retry-After.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Whether calls queue by priority and fair shares.
    pub enabled: bool,
    /// Calls that may wait for one provider at once.
    pub max_waiting: u32,
    /// How long a call of each priority may wait (ms).
    pub deadline_ms: PriorityDeadlines,
    /// Tenants grouping several users under one share; every other user
    /// is a tenant of its own with weight 1.
    pub tenants: std::collections::BTreeMap<String, TenantConfig>,
    /// Whether a call without a key may ask (`x-fusebox-priority`) for
    /// more urgency than its tenant's `priority` or its route's. Off, a
    /// caller's word can only make its calls less urgent: a flood that
    /// says `critical` is served and shed as `default`.
    pub trust_priority: bool,
    /// A header naming a gateway call's tenant (lower-case), set by the
    /// operator's own edge in front of fusebox: a call without a key that
    /// carries it uses that tenant's fair share, whatever user it names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_header: Option<String>,
}

/// How long a waiting call of each priority may wait (ms).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PriorityDeadlines {
    /// `critical` calls.
    pub critical: u64,
    /// `default` calls.
    pub default: u64,
    /// `batch` calls.
    pub batch: u64,
}

impl PriorityDeadlines {
    /// The deadline of `p`.
    pub fn of(&self, p: Priority) -> u64 {
        match p {
            Priority::Critical => self.critical,
            Priority::Default => self.default,
            Priority::Batch => self.batch,
        }
    }
}

/// A `default` call waits no longer than any call does without the queue
/// (`wait_timeout_ms`' default), so switching the queue on where nothing
/// floods keeps latency as it was; `critical` waits longer, `batch` less.
impl Default for PriorityDeadlines {
    fn default() -> Self {
        Self {
            critical: 10_000,
            default: 2_000,
            batch: 1_000,
        }
    }
}

/// A tenant: users sharing one fair share.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    /// Its users.
    pub users: Vec<String>,
    /// Its share against a weight-1 tenant's.
    #[serde(default = "one_weight")]
    pub weight: u32,
    /// The most urgent priority its users' calls may ask for, where no
    /// key says (unset: their route's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
}

fn one_weight() -> u32 {
    1
}

/// The largest tenant weight.
pub const MAX_TENANT_WEIGHT: u32 = 1_000;

/// The most users the `[limiter.queue.tenants]` may name in all.
pub const MAX_TENANT_USERS: usize = 100_000;

/// The most calls one provider's queue may hold.
pub const MAX_QUEUE: u32 = 100_000;

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_waiting: 1_000,
            deadline_ms: PriorityDeadlines::default(),
            tenants: Default::default(),
            trust_priority: false,
            tenant_header: None,
        }
    }
}

/// Adaptive concurrency: each provider's concurrency limit found from how
/// its calls go. It grows by about one a round trip while calls answer at
/// steady latency and the limit is in use, and is multiplied by `backoff`
/// on a 429, 503 or 529 and when the recent time to first token passes
/// `tolerance` times its long-run baseline. A provider's `concurrency`,
/// when set, is its ceiling; RPM and TPM stay hard caps.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptiveConfig {
    /// Whether limits adapt.
    pub enabled: bool,
    /// The limit never goes below this.
    pub floor: u32,
    /// The limit a provider starts at.
    pub initial: u32,
    /// The limit never goes above this (nor above a provider's `concurrency`).
    pub ceiling: u32,
    /// An overload multiplies the limit by this (0..1).
    pub backoff: f64,
    /// Recent latency above this multiple of its baseline cuts the limit.
    pub tolerance: f64,
}

/// The highest adaptive concurrency ceiling.
pub const MAX_ADAPTIVE_CEILING: u32 = 100_000;

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            floor: 1,
            initial: 16,
            ceiling: 256,
            backoff: 0.9,
            tolerance: 2.0,
        }
    }
}

impl Default for LimiterConfig {
    fn default() -> Self {
        Self {
            wait_timeout_ms: 2_000,
            drift_threshold: 0.3,
            drift_window: 10,
            adaptive: AdaptiveConfig::default(),
            queue: QueueConfig::default(),
        }
    }
}

/// Budgets per user and for the whole runner.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    /// Tokens per user per minute (0 = unlimited).
    pub user_tokens_per_minute: u64,
    /// Tokens per user per hour (0 = unlimited).
    pub user_tokens_per_hour: u64,
    /// Tokens per user per day (0 = unlimited).
    pub user_tokens_per_day: u64,
    /// USD per user per day (0 = unlimited).
    pub user_cost_per_day_usd: f64,
    /// Warn when a budget reaches this share (0..=1).
    pub soft_ratio: f64,
    /// Global tokens per hour (0 = unlimited).
    pub global_tokens_per_hour: u64,
    /// Global tokens per day (0 = unlimited).
    pub global_tokens_per_day: u64,
    /// Global USD per hour (0 = unlimited).
    pub global_cost_per_hour_usd: f64,
    /// Global USD per day (0 = unlimited).
    pub global_cost_per_day_usd: f64,
    /// Forget a user idle this long (s).
    pub idle_evict_s: u64,
    /// Track at most this many users; the idlest are evicted first.
    pub max_tracked_users: usize,
    /// The spend-rate breaker (off unless enabled).
    pub spend_rate: SpendRateConfig,
}

/// The spend-rate breaker: a user's (and, with `global`, everyone's)
/// spend velocity well above its own recent baseline refuses its requests
/// for a cooldown, so a runaway agent loop stops in minutes rather than at
/// a daily cap.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SpendRateConfig {
    /// Whether users' spend rates are watched.
    pub enabled: bool,
    /// Watch everyone's spend rate together too.
    pub global: bool,
    /// Trips when the last minute's rate passes this multiple of the baseline.
    pub multiple: f64,
    /// The baseline is the rate over about this many minutes.
    pub baseline_minutes: u64,
    /// A scope is judged only after this many minutes of history.
    pub warmup_minutes: u64,
    /// Rates below this many tokens a minute never trip.
    pub min_tokens_per_minute: f64,
    /// Rates below this many USD a minute never trip (0 = only tokens are judged).
    pub min_usd_per_minute: f64,
    /// How long a tripped scope is refused (s).
    pub cooldown_s: u64,
}

impl Default for SpendRateConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            global: false,
            multiple: 2.0,
            baseline_minutes: 60,
            warmup_minutes: 10,
            min_tokens_per_minute: 5_000.0,
            min_usd_per_minute: 0.0,
            cooldown_s: 300,
        }
    }
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            user_tokens_per_minute: 50_000,
            user_tokens_per_hour: 500_000,
            user_tokens_per_day: 2_000_000,
            user_cost_per_day_usd: 5.0,
            soft_ratio: 0.8,
            global_tokens_per_hour: 20_000_000,
            global_tokens_per_day: 200_000_000,
            global_cost_per_hour_usd: 200.0,
            global_cost_per_day_usd: 2_000.0,
            idle_evict_s: 900,
            max_tracked_users: 100_000,
            spend_rate: SpendRateConfig::default(),
        }
    }
}

/// Per-session quotas (the runtime sandbox of the seeds).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionConfig {
    /// Concurrent requests per session.
    pub max_concurrent: u32,
    /// LLM steps per session.
    pub max_steps: u32,
    /// Tokens per session.
    pub max_tokens: u64,
    /// Session lifetime (s); 0 = none.
    pub deadline_s: u64,
    /// Forget a session idle this long (s).
    pub idle_evict_s: u64,
    /// Track at most this many sessions; the idlest are evicted first.
    pub max_tracked: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            max_concurrent: 4,
            max_steps: 200,
            max_tokens: 400_000,
            deadline_s: 3_600,
            idle_evict_s: 600,
            max_tracked: 100_000,
        }
    }
}

/// Retry policy.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Retries per call after the first attempt.
    pub max_retries: u32,
    /// Retry a model call that timed out on the same model. By default a
    /// timeout, evidence the model is not answering now, falls over to
    /// the next model at once (and is retried only where no other model
    /// could take the call); errors that say to try again (429, 5xx)
    /// are retried.
    pub timeouts: bool,
    /// Backoff base (ms); attempt n waits up to base·2ⁿ (full jitter).
    pub base_ms: u64,
    /// Backoff cap (ms), also the longest Retry-After honoured.
    pub cap_ms: u64,
    /// Retries may be at most this share of requests (Envoy-style budget).
    pub budget_ratio: f64,
    /// Retries always allowed per second regardless of the ratio.
    pub budget_min_per_s: u32,
    /// Hedged calls may be at most this share of requests.
    pub hedge_ratio: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retries: 2,
            timeouts: false,
            base_ms: 500,
            cap_ms: 20_000,
            budget_ratio: 0.2,
            budget_min_per_s: 2,
            hedge_ratio: 0.1,
        }
    }
}

/// Degradation settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DegradationConfig {
    /// The message a user sees when every path failed.
    pub user_message: String,
    /// Entries in the result cache.
    pub cache_capacity: usize,
    /// How long a whole answer is kept for cache fallback (s).
    pub answer_cache_ttl_s: u64,
    /// Quality of a cached answer.
    pub cache_quality: f64,
    /// Quality factor per skipped non-critical tool.
    pub skip_quality: f64,
    /// Spool file for deferred requests (empty = a file in the temp directory).
    pub spool: String,
    /// How often deferred requests are retried (ms).
    pub defer_retry_ms: u64,
    /// Deferred requests give up (failed) after this long (ms).
    pub defer_max_age_ms: u64,
}

impl Default for DegradationConfig {
    fn default() -> Self {
        Self {
            user_message: "The assistant is temporarily unable to complete this request. \
                           Please try again in a few minutes, or contact support."
                .into(),
            cache_capacity: 10_000,
            answer_cache_ttl_s: 600,
            cache_quality: 0.7,
            skip_quality: 0.8,
            spool: String::new(),
            defer_retry_ms: 15_000,
            defer_max_age_ms: 900_000,
        }
    }
}
