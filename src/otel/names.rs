//! What a trace calls the runner's models and providers: the model's name
//! at its API, and the GenAI provider name (`openai`, `anthropic`, …).

use crate::config::ProviderKind;
use crate::runner::Runner;
use std::collections::HashMap;

/// Models' API names and providers' GenAI names, by fusebox name.
#[derive(Clone, Debug, Default)]
pub struct GenAiNames {
    /// Model name → (API name, provider's GenAI name).
    models: HashMap<String, (String, String)>,
    /// Provider name → its GenAI name.
    providers: HashMap<String, String>,
}

impl GenAiNames {
    /// The names of `runner`'s models and providers.
    pub fn of(runner: &Runner) -> Self {
        let cfg = runner.config();
        let system = |provider: &str| match cfg.providers.get(provider).map(|p| p.kind) {
            Some(ProviderKind::Openai) => "openai".to_string(),
            Some(ProviderKind::Anthropic) => "anthropic".to_string(),
            Some(ProviderKind::Deepseek) => "deepseek".to_string(),
            // The OpenTelemetry GenAI conventions' name for Azure OpenAI.
            Some(ProviderKind::AzureOpenai) => "az.ai.openai".to_string(),
            Some(ProviderKind::Gemini) => "gcp.gemini".to_string(),
            Some(ProviderKind::Vertex) => "gcp.vertex_ai".to_string(),
            Some(ProviderKind::Bedrock) => "aws.bedrock".to_string(),
            // A mock or any OpenAI-compatible server: its own name.
            _ => provider.to_string(),
        };
        let providers: HashMap<_, _> = runner
            .catalog()
            .providers()
            .iter()
            .map(|p| (p.name.clone(), system(&p.name)))
            .collect();
        let models = runner
            .catalog()
            .models()
            .iter()
            .map(|m| {
                let p = &runner.catalog().providers()[m.provider].name;
                (m.name.to_string(), (m.api_name.to_string(), system(p)))
            })
            .collect();
        GenAiNames { models, providers }
    }

    /// Model `model`'s API name and its provider's GenAI name; an unknown
    /// model is named as it is, under `provider`.
    pub fn model<'a>(&'a self, model: &'a str, provider: &'a str) -> (&'a str, &'a str) {
        match self.models.get(model) {
            Some((api, system)) => (api, system),
            None => (model, self.providers.get(provider).map_or(provider, String::as_str)),
        }
    }
}
