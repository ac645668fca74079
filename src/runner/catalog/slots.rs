//! The slots the catalog holds: a provider, a model, a route and a tool
//! as the runner holds them.

use crate::config::{ModelConfig, RouteConfig, ToolConfig};
use crate::provider::{Provider, ToolSpec};
use crate::resilience::bulkhead::Bulkhead;
use crate::resilience::limiter::Limiter;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

/// A provider as the runner holds it.
pub struct ProviderSlot {
    /// Name (`openai`).
    pub name: String,
    /// Its breaker target.
    pub target: usize,
    /// Its rate limiter.
    pub limiter: Limiter,
    /// The client.
    pub client: Arc<dyn Provider>,
    /// Per-call timeout.
    pub timeout: Duration,
}

/// A model as the runner holds it.
pub struct ModelSlot {
    /// Name (`gpt-4o`).
    pub name: Arc<str>,
    /// The name the provider knows it by (`api_name`, default the name).
    pub api_name: Arc<str>,
    /// Index of its provider.
    pub provider: usize,
    /// Its breaker target.
    pub target: usize,
    /// Prices, tier, quality.
    pub cfg: ModelConfig,
    /// Recent latency (EWMA, ms), for latency SLAs.
    pub latency_ms: AtomicU64,
    /// Output tokens/s under which a call counts as failed (its breaker's floor).
    pub min_tokens_per_s: f64,
    /// It continues an answer given as a last assistant turn (false once
    /// it refused one).
    pub prefill: std::sync::atomic::AtomicBool,
}

impl ModelSlot {
    /// The provider's own time bound on `req` (`chars` of prompt) on this
    /// model, whose provider's timeout is `timeout`: a whole answer's, or
    /// a stream's first token's (`first_token_timeout_ms`, within the
    /// timeout; just the timeout when the caller asked the model to reason
    /// first, as its thinking comes before its first token for as long as
    /// it was asked to). Either way, the time to read the prompt
    /// (`prefill_ms_per_1k`) comes on top: a long prompt is the caller's.
    pub(crate) fn own_bound(
        &self,
        timeout: Duration,
        req: &crate::provider::LlmRequest,
        chars: usize,
        streams: bool,
    ) -> Duration {
        let first = match self.cfg.first_token_timeout_ms {
            ms if streams && ms > 0 && !req.params.asks_reasoning() => timeout.min(Duration::from_millis(ms)),
            _ => timeout,
        };
        first.saturating_add(self.reading(chars))
    }

    /// How long the model may take to read `chars` of prompt: for each
    /// whole thousand tokens of it, `prefill_ms_per_1k`.
    fn reading(&self, chars: usize) -> Duration {
        let thousands = u64::from(crate::request::tokens_in_chars(chars)) / 1000;
        Duration::from_millis(thousands.saturating_mul(self.cfg.prefill_ms_per_1k))
    }

    /// Output tokens a second of a whole answer of `output` tokens that
    /// took `took` for `chars` of prompt, the time to read it left out.
    pub(crate) fn pace(&self, output: u32, took: Duration, chars: usize) -> f64 {
        let writing = took.saturating_sub(self.reading(chars)).as_secs_f64().max(1e-3);
        f64::from(output) / writing
    }

    /// The part of a time to first token that `req`'s prompt does not
    /// account for (what says how fast the provider is).
    pub(crate) fn beyond_prompt(&self, ttft: Duration, req: &crate::provider::LlmRequest) -> Duration {
        ttft.saturating_sub(self.reading(req.prompt_chars()))
    }

    /// Cost of a call in USD.
    #[inline]
    pub fn cost(&self, input: u32, output: u32) -> f64 {
        (input as f64 * self.cfg.input_per_m + output as f64 * self.cfg.output_per_m) / 1e6
    }
}

/// A route as the runner holds it.
#[derive(Debug)]
pub struct RouteSlot {
    /// Name.
    pub name: String,
    /// Model indices, in preference order.
    pub chain: Vec<usize>,
    /// Settings.
    pub cfg: RouteConfig,
}

/// A tool as the runner holds it.
pub struct ToolSlot {
    /// Name.
    pub name: String,
    /// Its breaker target.
    pub target: usize,
    /// Settings.
    pub cfg: ToolConfig,
    /// Its pool.
    pub bulkhead: Bulkhead,
    /// What the model sees.
    pub spec: ToolSpec,
}
