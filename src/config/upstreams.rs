//! What fusebox talks to: providers, their models, the routes that chain
//! models, and the tools agents call.

use super::defaults::provider;
use super::http_tool::ToolBackend;
use super::BreakerConfig;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    /// Azure OpenAI: a resource's deployments, by the v1 API
    /// (`/openai/v1/…`) or, with `api_version`, the deployment URLs
    /// (`/openai/deployments/NAME/…?api-version=…`).
    AzureOpenai,
    /// Google's Gemini API: `models/{model}:generateContent` under a
    /// versioned base URL, the key in `x-goog-api-key`.
    Gemini,
    /// Google's Vertex AI: Gemini's API under a project and location,
    /// with access tokens made from a service-account key.
    Vertex,
    /// Amazon Bedrock's Converse API in a region, requests signed with
    /// AWS Signature V4.
    Bedrock,
}

impl ProviderKind {
    /// The base URL used when the config gives none.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderKind::Openai => Some("https://api.openai.com"),
            ProviderKind::Anthropic => Some("https://api.anthropic.com"),
            ProviderKind::Deepseek => Some("https://api.deepseek.com"),
            ProviderKind::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
            // Vertex AI's host is its location's (see `vertex_base_url`).
            ProviderKind::Mock
            | ProviderKind::OpenaiCompatible
            | ProviderKind::AzureOpenai
            | ProviderKind::Vertex
            | ProviderKind::Bedrock => None,
        }
    }

    /// Whether its API continues a last assistant turn (a prefill).
    pub fn takes_prefill(self) -> bool {
        matches!(self, ProviderKind::Mock | ProviderKind::Anthropic)
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
    /// Path of a file holding the API key, instead of `api_key_env`: a
    /// mounted secret (surrounding whitespace is not part of the key).
    #[serde(default)]
    pub api_key_file: Option<std::path::PathBuf>,
    /// Azure OpenAI: name of the environment variable holding a Microsoft
    /// Entra ID access token, sent as `Authorization: Bearer` instead of
    /// the `api-key` header.
    #[serde(default)]
    pub entra_token_env: Option<String>,
    /// Azure OpenAI: the `api-version` of the deployment URLs (e.g.
    /// `2024-10-21`); none: the v1 API, which takes none.
    #[serde(default)]
    pub api_version: Option<String>,
    /// Vertex AI: name of the environment variable holding the path of a
    /// service-account key file (e.g. `GOOGLE_APPLICATION_CREDENTIALS`).
    #[serde(default)]
    pub credentials_env: Option<String>,
    /// Vertex AI: the Google Cloud project.
    #[serde(default)]
    pub project: Option<String>,
    /// Vertex AI: the location (`us-central1`, `europe-west4`, `global`).
    #[serde(default)]
    pub location: Option<String>,
    /// Amazon Bedrock: the AWS region (`us-east-1`).
    #[serde(default)]
    pub region: Option<String>,
    /// Amazon Bedrock: the shared credentials file's profile to sign with
    /// (none: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, else `AWS_PROFILE`
    /// or `default`).
    #[serde(default)]
    pub aws_profile: Option<String>,
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
    /// A streamed answer whose first content has not come this long (ms)
    /// after the call began is given up, before any byte reached the
    /// client, for the next model (0: no limit but the provider's
    /// timeout). Raise it for reasoning models that think long first.
    #[serde(default = "first_token_ms")]
    pub first_token_timeout_ms: u64,
    /// How much longer (ms) the first token may take for each thousand
    /// tokens of prompt: a long prompt takes the model longer to read, and
    /// its length is the caller's, not a sign of the provider's health.
    #[serde(default = "prefill_ms")]
    pub prefill_ms_per_1k: u64,
    /// Whether it continues an answer given as a last assistant turn (a
    /// prefill), as a cut stream is resumed. Unset: as its provider's API
    /// does (Anthropic's and the mock's do, OpenAI-style ones do not);
    /// a model that refuses a prefill with a 400 saying so is not given
    /// one again. Without one, the continuation is asked for in a user turn.
    #[serde(default)]
    pub prefill: Option<bool>,
}

/// How long a streamed answer's first content may take by default.
pub const FIRST_TOKEN_TIMEOUT_MS: u64 = 15_000;

fn first_token_ms() -> u64 {
    FIRST_TOKEN_TIMEOUT_MS
}

/// How much longer a first token may take per thousand prompt tokens by
/// default (a generous reading pace: 4,000 tokens a second).
pub const PREFILL_MS_PER_1K: u64 = 250;

fn prefill_ms() -> u64 {
    PREFILL_MS_PER_1K
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
    /// The longest a request may take through the whole chain (ms; 0:
    /// none): each attempt gets its share of the time left, and none
    /// starts once it is gone. A client's `x-fusebox-deadline-ms` may ask
    /// for less.
    #[serde(default)]
    pub deadline_ms: u64,
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
    /// model of the chain, so the client sees one stream (answers with
    /// tool calls are never resumed).
    #[serde(default = "yes")]
    pub stream_resume: bool,
    /// The priority of its calls where the caller names none.
    #[serde(default, skip_serializing_if = "super::Priority::is_default")]
    pub priority: super::Priority,
    /// Hedge a non-streamed, tool-free call that has not answered by then:
    /// a delay in ms, or `"p95"` (the first model's p95 latency so far).
    #[serde(default, skip_serializing_if = "Hedge::is_off")]
    pub hedge: Hedge,
}

/// When a route's call is hedged: a second attempt sent to the next model
/// while the first still runs, the first answer taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Hedge {
    /// Never.
    #[default]
    Off,
    /// After this many ms without an answer.
    AfterMs(u64),
    /// After the first model's p95 latency so far (once it has answered
    /// [`Hedge::MIN_CALLS`] calls).
    P95,
}

impl Hedge {
    /// The longest set delay (ms).
    pub const MAX_MS: u64 = 600_000;
    /// Calls a model answers before its p95 is trusted.
    pub const MIN_CALLS: u64 = 20;

    fn is_off(&self) -> bool {
        *self == Hedge::Off
    }
}

impl Serialize for Hedge {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Hedge::Off => s.serialize_str("off"),
            Hedge::AfterMs(ms) => s.serialize_u64(*ms),
            Hedge::P95 => s.serialize_str("p95"),
        }
    }
}

impl<'de> Deserialize<'de> for Hedge {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Hedge;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "a delay in ms (1 to {}), \"p95\" or \"off\"", Hedge::MAX_MS)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Hedge, E> {
                match u64::try_from(v) {
                    Ok(ms) if (1..=Hedge::MAX_MS).contains(&ms) => Ok(Hedge::AfterMs(ms)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Signed(v), &self)),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Hedge, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(-1))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Hedge, E> {
                match v {
                    "p95" => Ok(Hedge::P95),
                    "off" => Ok(Hedge::Off),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

fn half() -> f64 {
    0.5
}
fn yes() -> bool {
    true
}

/// A tool the agent can call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    /// How it is called: `mock` (the built-in fake, or an MCP server's
    /// tool behind `fusebox serve`) or `http`.
    #[serde(default, skip_serializing_if = "ToolBackend::is_mock")]
    pub kind: ToolBackend,
    /// An `http` tool's method (default GET).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// An `http` tool's URL; `{arg}` takes the argument's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// An `http` tool's request headers; `${VAR}` takes the environment
    /// variable's value (a credential must come from one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

/// The defaults a `[tools.NAME]` table with nothing in it has.
impl Default for ToolConfig {
    fn default() -> Self {
        Self {
            critical: false,
            idempotent: yes(),
            pool: eight(),
            queue: thirty_two(),
            timeout_ms: five_thousand(),
            cache_ttl_s: 0,
            schema: None,
            description: String::new(),
            breaker: None,
            kind: ToolBackend::Mock,
            method: None,
            url: None,
            headers: BTreeMap::new(),
        }
    }
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

/// Whether `url` names this machine (`localhost`, 127.0.0.0/8, `::1`);
/// the `{arg}` slots of a tool's URL template are read as plain text.
pub fn is_loopback(url: &str) -> bool {
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

impl ProviderConfig {
    /// Whether it is given an API key, in a variable or a file.
    pub fn has_api_key(&self) -> bool {
        self.api_key_env.is_some() || self.api_key_file.is_some()
    }

    /// The key of its credential's environment variable and the variable
    /// (`api_key_env`, Azure's `entra_token_env`, Vertex's `credentials_env`), where it names one.
    pub fn credential_env(&self) -> Option<(&'static str, &str)> {
        match (&self.api_key_env, &self.entra_token_env, &self.credentials_env) {
            (Some(v), _, _) => Some(("api_key_env", v)),
            (None, Some(v), _) => Some(("entra_token_env", v)),
            (None, None, Some(v)) => Some(("credentials_env", v)),
            (None, None, None) => None,
        }
    }

    /// Amazon Bedrock's base URL when the config gives none: its region's
    /// runtime endpoint.
    pub fn bedrock_base_url(&self) -> Option<String> {
        Some(format!(
            "https://bedrock-runtime.{}.amazonaws.com",
            self.region.as_deref()?
        ))
    }

    /// Vertex AI's base URL when the config gives none: its location's
    /// host (the `global` location's has no prefix), API version `v1`.
    pub fn vertex_base_url(&self) -> Option<String> {
        match self.location.as_deref()? {
            "global" => Some("https://aiplatform.googleapis.com/v1".into()),
            l => Some(format!("https://{l}-aiplatform.googleapis.com/v1")),
        }
    }

    /// Whether its base URL names this machine.
    pub fn is_loopback(&self) -> bool {
        is_loopback(self.base_url.as_deref().or(self.kind.default_base_url()).unwrap_or(""))
    }

    /// A mock provider with these limits (0 = none) and defaults otherwise.
    pub fn mock(tpm: u64, itpm: u64, otpm: u64, rpm: u64, concurrency: u32, chars_per_token: f64) -> Self {
        provider(tpm, itpm, otpm, rpm, concurrency, chars_per_token)
    }
}
