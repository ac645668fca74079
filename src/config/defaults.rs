//! The built-in config: the mock providers, their models, routes and tools.

use super::{
    BreakerConfig, BudgetConfig, Config, DegradationConfig, LimiterConfig, ModelConfig, ProviderConfig, ProviderKind,
    RetryConfig, RouteConfig, SessionConfig, StateConfig, Tier, ToolConfig,
};
use std::collections::BTreeMap;

pub(super) fn provider(tpm: u64, itpm: u64, otpm: u64, rpm: u64, concurrency: u32, cpt: f64) -> ProviderConfig {
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
        api_key_file: None,
        entra_token_env: None,
        api_version: None,
        credentials_env: None,
        project: None,
        location: None,
        region: None,
        aws_profile: None,
        stream: true,
        idle_timeout_ms: 30_000,
        breaker: None,
    }
}

fn model(provider: &str, input: f64, output: f64, tier: Tier, quality: f64) -> ModelConfig {
    ModelConfig {
        first_token_timeout_ms: super::upstreams::FIRST_TOKEN_TIMEOUT_MS,
        prefill_ms_per_1k: super::upstreams::PREFILL_MS_PER_1K,
        prefill: None,
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
        ..ToolConfig::default()
    }
}

/// The built-in tools: the demo's mock tools.
pub(super) fn tools() -> BTreeMap<String, ToolConfig> {
    let order = "type = \"object\"\nrequired = [\"order_id\"]\n[properties.order_id]\ntype = \"string\"";
    BTreeMap::from([
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
    ])
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
                deadline_ms: 0,
                chain: vec!["gpt-4o".into(), "claude-haiku".into(), "deepseek-chat".into()],
                max_tokens_factor: 0.5,
                trim_prompt_on_fallback: true,
                latency_sla_ms: 0,
                defer: true,
                named_fallback: true,
                stream_resume: true,
                priority: Default::default(),
                hedge: Default::default(),
            },
        )]);
        let tools = tools();
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
            keys: BTreeMap::new(),
            operators: BTreeMap::new(),
            mcp: BTreeMap::new(),
        }
    }
}
