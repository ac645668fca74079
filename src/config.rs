//! TOML configuration: providers, models, routes, tools and every resilience
//! setting, with a complete built-in default and validation errors that name
//! the key path and what is allowed.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// A configuration problem, naming where it is and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML did not parse or did not match the schema.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// toml's message, which carries line, column and key.
        message: String,
    },
    /// A value is out of range or refers to something that does not exist.
    #[error("{file}: invalid value at `{key}`: {message}")]
    Invalid {
        /// The file (or "built-in default").
        file: String,
        /// Dotted key path, e.g. `routes.default.chain[1]`.
        key: String,
        /// What is wrong and what is allowed.
        message: String,
    },
}

/// toml's message for `e`, a parse error in `text`, as it says it (with
/// the line shown and the column marked) unless the line is long: then
/// only the part of the line around the error, so a 200 KB line is not
/// echoed back whole.
pub fn toml_message(text: &str, e: &toml::de::Error) -> String {
    const SHOWN: usize = 160;
    let full = e.to_string().trim_end().to_string();
    let Some(at) = e.span().map(|s| s.start.min(text.len())) else {
        return full;
    };
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    if line_end - line_start <= SHOWN {
        return full;
    }
    let (line, column) = (
        text[..at].matches('\n').count() + 1,
        text[line_start..at].chars().count() + 1,
    );
    let mut from = at.saturating_sub(SHOWN / 2).max(line_start);
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    let mut to = (from + SHOWN).min(line_end);
    while !text.is_char_boundary(to) {
        to -= 1;
    }
    format!(
        "TOML parse error at line {line}, column {column}: {} (the line is {} bytes long; near: `{}`)",
        e.message().trim_end(),
        line_end - line_start,
        &text[from..to]
    )
}

/// The whole configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// LLM providers by name.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Models by name.
    pub models: BTreeMap<String, ModelConfig>,
    /// Routes (what an agent asks for) by name.
    pub routes: BTreeMap<String, RouteConfig>,
    /// Tools by name.
    pub tools: BTreeMap<String, ToolConfig>,
    /// Breaker settings for providers and models (tools may override).
    pub breaker: BreakerConfig,
    /// Limiter behaviour shared by all providers.
    pub limiter: LimiterConfig,
    /// Per-user and global budgets.
    pub budgets: BudgetConfig,
    /// Per-session quotas.
    pub sessions: SessionConfig,
    /// Retry policy and retry budget.
    pub retry: RetryConfig,
    /// Degradation settings.
    pub degradation: DegradationConfig,
    /// Where state shared by a fleet of instances lives.
    pub state: StateConfig,
}

/// Where state shared by a fleet of instances lives (`--state` overrides
/// the URL).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// `memory` (this instance alone) or `redis://HOST:PORT/DB`.
    pub url: String,
    /// What the fleet's budgets do while Redis is unreachable.
    pub budgets_fail: FailMode,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            url: "memory".into(),
            budgets_fail: FailMode::Open,
        }
    }
}

impl StateConfig {
    /// Whether `url` names a store `--state` accepts.
    pub fn accepts(url: &str) -> bool {
        url == "memory" || url.starts_with("redis://") || url.starts_with("rediss://")
    }
}

/// What shared budgets do while their store is unreachable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// Each instance keeps to its share of every budget (the limit divided
    /// by the live instances last seen).
    #[default]
    Open,
    /// Refuse what the allowances already granted do not cover.
    Closed,
}

/// How a provider is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    /// The built-in in-process mock.
    Mock,
    /// OpenAI's `/v1/chat/completions`.
    Openai,
    /// Anthropic's `/v1/messages`.
    Anthropic,
    /// DeepSeek's OpenAI-compatible `/chat/completions`.
    Deepseek,
    /// Any `/v1/chat/completions` server (vLLM, llama.cpp, Ollama, …).
    OpenaiCompatible,
}

impl ProviderKind {
    /// The base URL used when the config gives none.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderKind::Openai => Some("https://api.openai.com"),
            ProviderKind::Anthropic => Some("https://api.anthropic.com"),
            ProviderKind::Deepseek => Some("https://api.deepseek.com"),
            ProviderKind::Mock | ProviderKind::OpenaiCompatible => None,
        }
    }
}

/// One provider: its kind and its published limits.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// How it is reached.
    #[serde(default = "default_kind")]
    pub kind: ProviderKind,
    /// Tokens per minute (input + output), 0 = unlimited.
    #[serde(default)]
    pub tpm: u64,
    /// Input tokens per minute (Anthropic-style), 0 = none.
    #[serde(default)]
    pub itpm: u64,
    /// Output tokens per minute (Anthropic-style), 0 = none.
    #[serde(default)]
    pub otpm: u64,
    /// Requests per minute, 0 = unlimited.
    #[serde(default)]
    pub rpm: u64,
    /// Concurrent requests, 0 = unlimited (DeepSeek's binding limit).
    #[serde(default)]
    pub concurrency: u32,
    /// Prompt characters per token for the estimate (≈4 English, ≈1.5 Chinese).
    #[serde(default = "default_cpt")]
    pub chars_per_token: f64,
    /// Longest a call may take before it counts as a timeout (ms).
    #[serde(default = "thirty_seconds")]
    pub timeout_ms: u64,
    /// Server base URL, e.g. `https://api.openai.com` or `http://127.0.0.1:11434` (HTTP kinds).
    #[serde(default)]
    pub base_url: Option<String>,
    /// Name of the environment variable holding the API key (HTTP kinds; never the key itself).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Use streaming responses (SSE).
    #[serde(default = "yes")]
    pub stream: bool,
    /// Longest silence between stream chunks before the call is a timeout (ms).
    #[serde(default = "thirty_seconds")]
    pub idle_timeout_ms: u64,
    /// Breaker override for this provider.
    #[serde(default)]
    pub breaker: Option<BreakerConfig>,
}

fn thirty_seconds() -> u64 {
    30_000
}
fn default_kind() -> ProviderKind {
    ProviderKind::Mock
}
fn default_cpt() -> f64 {
    4.0
}

/// Price tier, used to prefer cheaper models under budget pressure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Tier {
    /// Cheapest.
    Budget,
    /// Middle.
    Standard,
    /// Most expensive.
    Premium,
}

/// One model on a provider.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// The provider serving it.
    pub provider: String,
    /// The model's name at the provider (default: the table key), e.g. `claude-3-5-haiku-latest`.
    #[serde(default)]
    pub api_name: Option<String>,
    /// USD per million input tokens.
    pub input_per_m: f64,
    /// USD per million output tokens.
    pub output_per_m: f64,
    /// Price tier.
    #[serde(default = "default_tier")]
    pub tier: Tier,
    /// Estimated answer quality relative to the best model (0..=1).
    #[serde(default = "one")]
    pub quality: f64,
}

fn default_tier() -> Tier {
    Tier::Standard
}
fn one() -> f64 {
    1.0
}

/// A route: the preferred chain of models and what to do when all fail.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Models to try, in order.
    pub chain: Vec<String>,
    /// `max_tokens` is multiplied by this on each fallback hop (0 < f ≤ 1).
    #[serde(default = "half")]
    pub max_tokens_factor: f64,
    /// Drop earlier conversation turns on fallback hops (keep system + last).
    #[serde(default)]
    pub trim_prompt_on_fallback: bool,
    /// Skip models whose recent latency exceeds this (ms); 0 = no SLA.
    #[serde(default)]
    pub latency_sla_ms: u64,
    /// Defer the request to the spool when every model fails.
    #[serde(default = "yes")]
    pub defer: bool,
    /// A gateway client naming one of this route's models may fall back to
    /// the models after it in the chain (`false`: that model only).
    #[serde(default = "yes")]
    pub named_fallback: bool,
    /// A streamed text answer cut mid-stream is continued by the next
    /// model of the chain, so the client sees one stream.
    #[serde(default)]
    pub stream_resume: bool,
}

fn half() -> f64 {
    0.5
}
fn yes() -> bool {
    true
}

/// A tool the agent can call.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    /// A critical tool cannot be skipped.
    #[serde(default)]
    pub critical: bool,
    /// Safe to retry.
    #[serde(default = "yes")]
    pub idempotent: bool,
    /// Concurrent calls (bulkhead pool size).
    #[serde(default = "eight")]
    pub pool: u32,
    /// Calls allowed to wait for a pool slot; more are rejected at once.
    #[serde(default = "thirty_two")]
    pub queue: u32,
    /// Per-call timeout (ms).
    #[serde(default = "five_thousand")]
    pub timeout_ms: u64,
    /// Keep successful results this long for cache fallback (s); 0 = no cache.
    #[serde(default)]
    pub cache_ttl_s: u64,
    /// JSON schema of the arguments (subset: object, required, property types).
    #[serde(default)]
    pub schema: Option<toml::Value>,
    /// Short description shown to the model.
    #[serde(default)]
    pub description: String,
    /// Breaker override for this tool.
    #[serde(default)]
    pub breaker: Option<BreakerConfig>,
}

fn eight() -> u32 {
    8
}
fn thirty_two() -> u32 {
    32
}
fn five_thousand() -> u64 {
    5000
}

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
}

impl Default for LimiterConfig {
    fn default() -> Self {
        Self {
            wait_timeout_ms: 2_000,
            drift_threshold: 0.3,
            drift_window: 10,
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
    /// Backoff base (ms); attempt n waits up to base·2ⁿ (full jitter).
    pub base_ms: u64,
    /// Backoff cap (ms), also the longest Retry-After honoured.
    pub cap_ms: u64,
    /// Retries may be at most this share of requests (Envoy-style budget).
    pub budget_ratio: f64,
    /// Retries always allowed per second regardless of the ratio.
    pub budget_min_per_s: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retries: 2,
            base_ms: 500,
            cap_ms: 20_000,
            budget_ratio: 0.2,
            budget_min_per_s: 2,
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

impl Config {
    /// The providers reached over HTTP (every kind but the in-process mock).
    pub fn http_providers(&self) -> Vec<&str> {
        self.providers
            .iter()
            .filter(|(_, p)| p.kind != ProviderKind::Mock)
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// The HTTP providers not on this machine (a hosted API, or a base URL
    /// whose host is not loopback): traffic sent there may cost money.
    pub fn remote_providers(&self) -> Vec<&str> {
        self.providers
            .iter()
            .filter(|(_, p)| p.kind != ProviderKind::Mock && !p.is_loopback())
            .map(|(name, _)| name.as_str())
            .collect()
    }
}

impl ProviderConfig {
    /// Whether its base URL names this machine (`localhost`, 127.0.0.0/8, `::1`).
    pub fn is_loopback(&self) -> bool {
        let url = self.base_url.as_deref().or(self.kind.default_base_url()).unwrap_or("");
        let host = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string));
        match host.as_deref() {
            Some("localhost") => true,
            Some(h) => h
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback()),
            None => false,
        }
    }

    /// A mock provider with these limits (0 = none) and defaults otherwise.
    pub fn mock(tpm: u64, itpm: u64, otpm: u64, rpm: u64, concurrency: u32, chars_per_token: f64) -> Self {
        provider(tpm, itpm, otpm, rpm, concurrency, chars_per_token)
    }
}

fn provider(tpm: u64, itpm: u64, otpm: u64, rpm: u64, concurrency: u32, cpt: f64) -> ProviderConfig {
    ProviderConfig {
        kind: ProviderKind::Mock,
        tpm,
        itpm,
        otpm,
        rpm,
        concurrency,
        chars_per_token: cpt,
        timeout_ms: 30_000,
        base_url: None,
        api_key_env: None,
        stream: true,
        idle_timeout_ms: 30_000,
        breaker: None,
    }
}

fn model(provider: &str, input: f64, output: f64, tier: Tier, quality: f64) -> ModelConfig {
    ModelConfig {
        provider: provider.into(),
        api_name: None,
        input_per_m: input,
        output_per_m: output,
        tier,
        quality,
    }
}

fn tool(critical: bool, idempotent: bool, cache_ttl_s: u64, schema: &str, description: &str) -> ToolConfig {
    ToolConfig {
        critical,
        idempotent,
        pool: 8,
        queue: 32,
        timeout_ms: 5_000,
        cache_ttl_s,
        schema: toml::from_str(schema).ok(),
        description: description.into(),
        breaker: None,
    }
}

impl Default for Config {
    fn default() -> Self {
        let providers = BTreeMap::from([
            ("openai".to_string(), provider(1_000_000, 0, 0, 1_000, 0, 4.0)),
            ("anthropic".to_string(), provider(0, 400_000, 200_000, 1_000, 0, 4.0)),
            ("deepseek".to_string(), provider(0, 0, 0, 0, 10, 1.8)),
        ]);
        let models = BTreeMap::from([
            ("gpt-4o".to_string(), model("openai", 2.50, 10.00, Tier::Premium, 1.0)),
            (
                "claude-haiku".to_string(),
                model("anthropic", 0.80, 4.00, Tier::Standard, 0.85),
            ),
            (
                "deepseek-chat".to_string(),
                model("deepseek", 0.27, 1.10, Tier::Budget, 0.8),
            ),
        ]);
        let routes = BTreeMap::from([(
            "default".to_string(),
            RouteConfig {
                chain: vec!["gpt-4o".into(), "claude-haiku".into(), "deepseek-chat".into()],
                max_tokens_factor: 0.5,
                trim_prompt_on_fallback: true,
                latency_sla_ms: 0,
                defer: true,
                named_fallback: true,
                stream_resume: false,
            },
        )]);
        let order = "type = \"object\"\nrequired = [\"order_id\"]\n[properties.order_id]\ntype = \"string\"";
        let tools = BTreeMap::from([
            ("get_order".to_string(), tool(true, true, 600, order, "Fetch an order by id")),
            ("lookup_shipping".to_string(), tool(false, true, 300, order, "Shipping status of an order")),
            (
                "search_docs".to_string(),
                tool(false, true, 3_600, "type = \"object\"\nrequired = [\"query\"]\n[properties.query]\ntype = \"string\"", "Search the help centre"),
            ),
            (
                "send_notification".to_string(),
                tool(false, false, 0, "type = \"object\"\nrequired = [\"user_id\", \"message\"]\n[properties.user_id]\ntype = \"string\"\n[properties.message]\ntype = \"string\"", "Notify the user"),
            ),
        ]);
        Self {
            providers,
            models,
            routes,
            tools,
            breaker: BreakerConfig::default(),
            limiter: LimiterConfig::default(),
            budgets: BudgetConfig::default(),
            sessions: SessionConfig::default(),
            retry: RetryConfig::default(),
            degradation: DegradationConfig::default(),
            state: StateConfig::default(),
        }
    }
}

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and validates config text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: file.to_string(),
            message: toml_message(text, &e),
        })?;
        cfg.validate(file)?;
        Ok(cfg)
    }

    /// Checks ranges and references; the first problem is returned.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let bad = |key: String, message: String| ConfigError::Invalid {
            file: file.to_string(),
            key,
            message,
        };
        let ratio = |key: &str, v: f64, allow_zero: bool| {
            let ok = v.is_finite() && v <= 1.0 && (v > 0.0 || (allow_zero && v == 0.0));
            if ok {
                Ok(())
            } else {
                let range = if allow_zero {
                    "0..=1"
                } else {
                    "greater than 0 and at most 1"
                };
                Err(bad(
                    key.to_string(),
                    format!("{v} is out of range; use a number {range}"),
                ))
            }
        };
        if self.providers.is_empty() {
            return Err(bad("providers".into(), "at least one provider is required".into()));
        }
        if !StateConfig::accepts(&self.state.url) {
            return Err(bad(
                "state.url".into(),
                format!(
                    "`{}` is not a store; use \"memory\" or \"redis://HOST:PORT/DB\"",
                    self.state.url
                ),
            ));
        }
        for (name, p) in &self.providers {
            if !(p.chars_per_token.is_finite() && p.chars_per_token > 0.0) {
                return Err(bad(
                    format!("providers.{name}.chars_per_token"),
                    format!(
                        "{} must be a positive number (≈4 for English, ≈1.5 for Chinese)",
                        p.chars_per_token
                    ),
                ));
            }
            if p.timeout_ms == 0 {
                return Err(bad(
                    format!("providers.{name}.timeout_ms"),
                    "must be at least 1 ms".into(),
                ));
            }
            if let Some(b) = &p.breaker {
                validate_breaker(b, &format!("providers.{name}.breaker"), &bad)?;
            }
            if p.kind != ProviderKind::Mock {
                match &p.base_url {
                    Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                        return Err(bad(
                            format!("providers.{name}.base_url"),
                            format!("`{u}` is not an http:// or https:// URL"),
                        ));
                    }
                    None if p.kind.default_base_url().is_none() => {
                        return Err(bad(
                            format!("providers.{name}.base_url"),
                            "an openai-compatible provider needs its server's base URL, e.g. \"http://localhost:8000\""
                                .into(),
                        ));
                    }
                    // The hosted API itself takes no call without a key.
                    None if p.api_key_env.is_none() => {
                        return Err(bad(
                            format!("providers.{name}.api_key_env"),
                            "the hosted API needs a key: name the environment variable that holds it, e.g. \"OPENAI_API_KEY\"".into(),
                        ));
                    }
                    _ => {}
                }
            }
        }
        for (name, m) in &self.models {
            if !self.providers.contains_key(&m.provider) {
                // A built-in provider: most likely a [providers] table given
                // without the [models] that go with it.
                let hint = if Config::default().providers.contains_key(&m.provider) {
                    format!(
                        ". A [providers] table in a config replaces the built-in one whole, while the built-in [models] and [routes] stay unless given: add [providers.{}], or give your own [models] and [routes] for the providers you define",
                        m.provider
                    )
                } else {
                    String::new()
                };
                return Err(bad(
                    format!("models.{name}.provider"),
                    format!(
                        "unknown provider `{}`; defined providers: {}{hint}",
                        m.provider,
                        keys(&self.providers)
                    ),
                ));
            }
            for (k, v) in [("input_per_m", m.input_per_m), ("output_per_m", m.output_per_m)] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(bad(
                        format!("models.{name}.{k}"),
                        format!("{v} must be a price ≥ 0 (USD per million tokens)"),
                    ));
                }
            }
            ratio(&format!("models.{name}.quality"), m.quality, false)?;
        }
        if self.routes.is_empty() {
            return Err(bad("routes".into(), "at least one route is required".into()));
        }
        for (name, r) in &self.routes {
            if r.chain.is_empty() {
                return Err(bad(
                    format!("routes.{name}.chain"),
                    "the chain needs at least one model".into(),
                ));
            }
            for (i, m) in r.chain.iter().enumerate() {
                if !self.models.contains_key(m) {
                    return Err(bad(
                        format!("routes.{name}.chain[{i}]"),
                        format!("unknown model `{m}`; defined models: {}", keys(&self.models)),
                    ));
                }
            }
            ratio(&format!("routes.{name}.max_tokens_factor"), r.max_tokens_factor, false)?;
        }
        for (name, t) in &self.tools {
            if t.pool == 0 {
                return Err(bad(format!("tools.{name}.pool"), "must be at least 1".into()));
            }
            if t.timeout_ms == 0 {
                return Err(bad(format!("tools.{name}.timeout_ms"), "must be at least 1 ms".into()));
            }
            if let Some(s) = &t.schema {
                if s.as_table().is_none() {
                    return Err(bad(
                        format!("tools.{name}.schema"),
                        "must be a table (a JSON schema object)".into(),
                    ));
                }
            }
            if let Some(b) = &t.breaker {
                validate_breaker(b, &format!("tools.{name}.breaker"), &bad)?;
            }
        }
        validate_breaker(&self.breaker, "breaker", &bad)?;
        ratio("limiter.drift_threshold", self.limiter.drift_threshold, false)?;
        if self.limiter.drift_window == 0 {
            return Err(bad("limiter.drift_window".into(), "must be at least 1 call".into()));
        }
        ratio("budgets.soft_ratio", self.budgets.soft_ratio, false)?;
        for (k, v) in [
            ("budgets.user_cost_per_day_usd", self.budgets.user_cost_per_day_usd),
            (
                "budgets.global_cost_per_hour_usd",
                self.budgets.global_cost_per_hour_usd,
            ),
            ("budgets.global_cost_per_day_usd", self.budgets.global_cost_per_day_usd),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(bad(k.into(), format!("{v} must be ≥ 0 (0 = unlimited)")));
            }
        }
        if self.budgets.max_tracked_users == 0 {
            return Err(bad("budgets.max_tracked_users".into(), "must be at least 1".into()));
        }
        if self.sessions.max_concurrent == 0 || self.sessions.max_steps == 0 {
            return Err(bad(
                "sessions".into(),
                "max_concurrent and max_steps must be at least 1".into(),
            ));
        }
        ratio("retry.budget_ratio", self.retry.budget_ratio, true)?;
        if self.retry.base_ms == 0 || self.retry.cap_ms < self.retry.base_ms {
            return Err(bad(
                "retry.cap_ms".into(),
                "need base_ms ≥ 1 and cap_ms ≥ base_ms".into(),
            ));
        }
        ratio("degradation.cache_quality", self.degradation.cache_quality, false)?;
        ratio("degradation.skip_quality", self.degradation.skip_quality, false)?;
        if self.degradation.defer_retry_ms == 0 {
            return Err(bad("degradation.defer_retry_ms".into(), "must be at least 1 ms".into()));
        }
        Ok(())
    }

    /// The breaker settings for a target (`provider:x`, `model:x`, `tool:x`).
    pub fn breaker_for(&self, target: &str) -> &BreakerConfig {
        let (kind, name) = target.split_once(':').unwrap_or(("", target));
        let over = match kind {
            "provider" => self.providers.get(name).and_then(|p| p.breaker.as_ref()),
            "model" => self
                .models
                .get(name)
                .and_then(|m| self.providers.get(&m.provider))
                .and_then(|p| p.breaker.as_ref()),
            "tool" => self.tools.get(name).and_then(|t| t.breaker.as_ref()),
            _ => None,
        };
        over.unwrap_or(&self.breaker)
    }
}

fn validate_breaker(
    b: &BreakerConfig,
    at: &str,
    bad: &dyn Fn(String, String) -> ConfigError,
) -> Result<(), ConfigError> {
    for (k, v) in [
        ("failure_rate", b.failure_rate),
        ("slow_call_rate", b.slow_call_rate),
        ("half_open_success_rate", b.half_open_success_rate),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= 1.0) {
            return Err(bad(
                format!("{at}.{k}"),
                format!("{v} is out of range; use a number greater than 0 and at most 1"),
            ));
        }
    }
    if b.window_size == 0 {
        return Err(bad(format!("{at}.window_size"), "must be at least 1".into()));
    }
    if b.minimum_calls == 0 {
        return Err(bad(
            format!("{at}.minimum_calls"),
            "must be at least 1 (one failure out of one call must not trip)".into(),
        ));
    }
    if b.window == WindowKind::Count && b.minimum_calls > b.window_size {
        return Err(bad(
            format!("{at}.minimum_calls"),
            format!(
                "{} exceeds window_size {}; a count window can never hold that many calls",
                b.minimum_calls, b.window_size
            ),
        ));
    }
    if b.cooldown_ms == 0 || b.max_cooldown_ms < b.cooldown_ms {
        return Err(bad(
            format!("{at}.max_cooldown_ms"),
            "need cooldown_ms ≥ 1 and max_cooldown_ms ≥ cooldown_ms".into(),
        ));
    }
    if !(b.cooldown_multiplier.is_finite() && b.cooldown_multiplier >= 1.0) {
        return Err(bad(format!("{at}.cooldown_multiplier"), "must be a number ≥ 1".into()));
    }
    if b.half_open_ramp.is_empty() || b.half_open_ramp.contains(&0) {
        return Err(bad(
            format!("{at}.half_open_ramp"),
            "must list at least one stage, each allowing ≥ 1 probe, e.g. [2, 4, 8]".into(),
        ));
    }
    if b.max_half_open_ms == 0 {
        return Err(bad(format!("{at}.max_half_open_ms"), "must be at least 1 ms".into()));
    }
    if !(b.min_tokens_per_s.is_finite() && b.min_tokens_per_s >= 0.0) {
        return Err(bad(format!("{at}.min_tokens_per_s"), "must be ≥ 0 (0 = off)".into()));
    }
    Ok(())
}

fn keys<V>(m: &BTreeMap<String, V>) -> String {
    m.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        Config::default().validate("built-in").unwrap();
        assert!(Config::default().tools["get_order"].schema.is_some());
    }

    #[test]
    fn unknown_model_in_chain_names_the_key() {
        let err = Config::parse("[routes.r]\nchain = [\"gpt-4o\", \"nope\"]\n", "x.toml").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("routes.r.chain[1]"), "{msg}");
        assert!(msg.contains("unknown model `nope`"), "{msg}");
    }

    #[test]
    fn unknown_key_is_rejected_with_position() {
        let err = Config::parse("[breaker]\nfailure_rat = 0.5\n", "x.toml").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("x.toml") && msg.contains("line 2") && msg.contains("failure_rat"),
            "{msg}"
        );
    }

    #[test]
    fn out_of_range_ratio_is_rejected() {
        let err = Config::parse("[breaker]\nfailure_rate = 1.5\n", "x.toml").unwrap_err();
        assert!(err.to_string().contains("breaker.failure_rate"), "{err}");
    }

    #[test]
    fn default_round_trips_through_toml() {
        let text = toml::to_string_pretty(&Config::default()).unwrap();
        let back = Config::parse(&text, "printed").unwrap();
        assert_eq!(toml::to_string_pretty(&back).unwrap(), text);
    }

    #[test]
    fn partial_file_keeps_defaults() {
        let cfg = Config::parse("[retry]\nmax_retries = 1\n", "x.toml").unwrap();
        assert_eq!(cfg.retry.max_retries, 1);
        assert_eq!(cfg.routes["default"].chain.len(), 3);
    }
}
