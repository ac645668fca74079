//! Validation: ranges and references, the first problem named by its key
//! path with what is allowed.

use super::{BreakerConfig, Config, ConfigError, ProviderConfig, ProviderKind, StateConfig, WindowKind};
use std::collections::BTreeMap;

/// What a URL that is not http(s) is told; the URL itself is not repeated
/// (it may carry a credential, and a reload's refusal is in the events).
const NOT_HTTP: &str = "is not an http:// or https:// URL";

/// Where a problem is reported: the file, and the words for a value out of range.
struct Check<'a> {
    file: &'a str,
}

impl Check<'_> {
    fn bad(&self, key: String, message: String) -> ConfigError {
        ConfigError::Invalid {
            file: self.file.to_string(),
            key,
            message,
        }
    }

    /// `v` must be a ratio: at most 1, and above 0 (or 0 too, `allow_zero`).
    fn ratio(&self, key: &str, v: f64, allow_zero: bool) -> Result<(), ConfigError> {
        let ok = v.is_finite() && v <= 1.0 && (v > 0.0 || (allow_zero && v == 0.0));
        if ok {
            return Ok(());
        }
        let range = if allow_zero {
            "0..=1"
        } else {
            "greater than 0 and at most 1"
        };
        Err(self.bad(key.to_string(), format!("{v} is out of range; use a number {range}")))
    }
}

impl Config {
    /// Checks ranges and references; the first problem is returned.
    pub fn validate(&self, file: &str) -> Result<(), ConfigError> {
        let c = &Check { file };
        if self.providers.is_empty() {
            return Err(c.bad("providers".into(), "at least one provider is required".into()));
        }
        if !StateConfig::accepts(&self.state.url) {
            return Err(c.bad(
                "state.url".into(),
                "is not a store; use \"memory\", \"redis://HOST:PORT/DB\" or \
                 \"redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER[/DB]\" or \
                 \"redis+cluster://HOST:PORT[,HOST:PORT…]\""
                    .into(),
            ));
        }
        self.check_providers(c)?;
        self.check_models(c)?;
        self.check_routes(c)?;
        self.check_tools(c)?;
        self.check_access(c)?;
        self.check_mcp(c)?;
        validate_breaker(&self.breaker, "breaker", c)?;
        self.check_settings(c)
    }

    fn check_providers(&self, c: &Check) -> Result<(), ConfigError> {
        for (name, p) in &self.providers {
            if !(p.chars_per_token.is_finite() && p.chars_per_token > 0.0) {
                return Err(c.bad(
                    format!("providers.{name}.chars_per_token"),
                    format!(
                        "{} must be a positive number (≈4 for English, ≈1.5 for Chinese)",
                        p.chars_per_token
                    ),
                ));
            }
            if p.timeout_ms == 0 {
                return Err(c.bad(format!("providers.{name}.timeout_ms"), "must be at least 1 ms".into()));
            }
            if let Some(b) = &p.breaker {
                validate_breaker(b, &format!("providers.{name}.breaker"), c)?;
            }
            if p.api_key_env.is_some() && p.api_key_file.is_some() {
                return Err(c.bad(
                    format!("providers.{name}.api_key_file"),
                    "give the key in api_key_env or in api_key_file, not both".into(),
                ));
            }
            Self::check_azure(name, p, c)?;
            Self::check_vertex(name, p, c)?;
            Self::check_bedrock(name, p, c)?;
            if p.kind != ProviderKind::Mock {
                match &p.base_url {
                    Some(u)
                        if !(u.starts_with("http://") || u.starts_with("https://"))
                            || reqwest::Url::parse(u).is_err() =>
                    {
                        return Err(c.bad(format!("providers.{name}.base_url"), NOT_HTTP.into()));
                    }
                    None if p.kind == ProviderKind::AzureOpenai => {
                        return Err(c.bad(
                            format!("providers.{name}.base_url"),
                            "an azure-openai provider needs its resource's endpoint, e.g. \"https://my-resource.openai.azure.com\""
                                .into(),
                        ));
                    }
                    // Its location (region) names its host; its key file
                    // (AWS credentials) signs it in.
                    None if matches!(p.kind, ProviderKind::Vertex | ProviderKind::Bedrock) => {}
                    None if p.kind.default_base_url().is_none() => {
                        return Err(c.bad(
                            format!("providers.{name}.base_url"),
                            "an openai-compatible provider needs its server's base URL, e.g. \"http://localhost:8000\""
                                .into(),
                        ));
                    }
                    // The hosted API itself takes no call without a key.
                    None if !p.has_api_key() => {
                        let example = match p.kind {
                            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
                            ProviderKind::Deepseek => "DEEPSEEK_API_KEY",
                            ProviderKind::Gemini => "GEMINI_API_KEY",
                            _ => "OPENAI_API_KEY",
                        };
                        return Err(c.bad(
                            format!("providers.{name}.api_key_env"),
                            format!("the hosted API needs a key: name the environment variable that holds it, e.g. \"{example}\" (or give api_key_file, a file that holds it)"),
                        ));
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Azure OpenAI's own settings: a credential (a key or an Entra ID
    /// token, not both) and an `api-version` only where they mean something.
    fn check_azure(name: &str, p: &ProviderConfig, c: &Check) -> Result<(), ConfigError> {
        let azure = p.kind == ProviderKind::AzureOpenai;
        for (field, set) in [
            ("entra_token_env", p.entra_token_env.is_some()),
            ("api_version", p.api_version.is_some()),
        ] {
            if set && !azure {
                return Err(c.bad(
                    format!("providers.{name}.{field}"),
                    "only an azure-openai provider takes it: remove it, or set kind = \"azure-openai\"".into(),
                ));
            }
        }
        if !azure {
            return Ok(());
        }
        match (p.has_api_key(), &p.entra_token_env) {
            (false, None) => {
                return Err(c.bad(
                    format!("providers.{name}.api_key_env"),
                    "Azure OpenAI takes no call without a credential: name the environment variable that holds the resource's key (e.g. \"AZURE_OPENAI_API_KEY\"), or one with an Entra ID token in entra_token_env".into(),
                ))
            }
            (true, Some(_)) => {
                return Err(c.bad(
                    format!("providers.{name}.entra_token_env"),
                    "give either an API key (api_key_env or api_key_file: the `api-key` header) or entra_token_env (a bearer token), not both".into(),
                ))
            }
            _ => {}
        }
        if let Some(v) = &p.api_version {
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err(c.bad(
                    format!("providers.{name}.api_version"),
                    format!("`{v}` is no api-version: give one such as \"2024-10-21\", or leave it out for the v1 API"),
                ));
            }
        }
        Ok(())
    }

    /// Vertex AI's own settings: a project, a location and a key file,
    /// taken by no other kind.
    fn check_vertex(name: &str, p: &ProviderConfig, c: &Check) -> Result<(), ConfigError> {
        let vertex = p.kind == ProviderKind::Vertex;
        let fields = [
            (
                "credentials_env",
                &p.credentials_env,
                "\"GOOGLE_APPLICATION_CREDENTIALS\" (the variable holding a service-account key file's path)",
            ),
            (
                "project",
                &p.project,
                "your Google Cloud project's id, e.g. \"my-project\"",
            ),
            (
                "location",
                &p.location,
                "a Vertex AI location, e.g. \"us-central1\" or \"global\"",
            ),
        ];
        for (field, value, example) in fields {
            match (value, vertex) {
                (Some(_), false) => {
                    return Err(c.bad(
                        format!("providers.{name}.{field}"),
                        "only a vertex provider takes it: remove it, or set kind = \"vertex\"".into(),
                    ))
                }
                (None, true) => {
                    return Err(c.bad(
                        format!("providers.{name}.{field}"),
                        format!("a vertex provider needs it: give {example}"),
                    ))
                }
                (Some(v), true) if field != "credentials_env" && !is_path_segment(v) => {
                    return Err(c.bad(
                        format!("providers.{name}.{field}"),
                        format!("`{v}` is no {field}: give {example}"),
                    ))
                }
                _ => {}
            }
        }
        if vertex && (p.has_api_key() || p.entra_token_env.is_some()) {
            let field = key_field(p);
            return Err(c.bad(
                format!("providers.{name}.{field}"),
                format!(
                    "a vertex provider signs in with the service-account key credentials_env names: remove {field}"
                ),
            ));
        }
        Ok(())
    }

    /// Amazon Bedrock's own settings: a region, and no key of another kind
    /// (it signs with AWS credentials).
    fn check_bedrock(name: &str, p: &ProviderConfig, c: &Check) -> Result<(), ConfigError> {
        let bedrock = p.kind == ProviderKind::Bedrock;
        for (field, set) in [("region", p.region.is_some()), ("aws_profile", p.aws_profile.is_some())] {
            if set && !bedrock {
                return Err(c.bad(
                    format!("providers.{name}.{field}"),
                    "only a bedrock provider takes it: remove it, or set kind = \"bedrock\"".into(),
                ));
            }
        }
        if !bedrock {
            return Ok(());
        }
        match &p.region {
            None => Err(c.bad(
                format!("providers.{name}.region"),
                "a bedrock provider needs its AWS region, e.g. \"us-east-1\"".into(),
            )),
            Some(r) if !is_path_segment(r) => Err(c.bad(
                format!("providers.{name}.region"),
                format!("`{r}` is no AWS region: give one such as \"us-east-1\""),
            )),
            _ if p.credential_env().is_some() || p.api_key_file.is_some() => {
                let field = key_field(p);
                Err(c.bad(
                    format!("providers.{name}.{field}"),
                    format!("a bedrock provider signs with AWS credentials (the environment's, or aws_profile's): remove {field}"),
                ))
            }
            _ => Ok(()),
        }
    }

    fn check_models(&self, c: &Check) -> Result<(), ConfigError> {
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
                return Err(c.bad(
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
                    return Err(c.bad(
                        format!("models.{name}.{k}"),
                        format!("{v} must be a price ≥ 0 (USD per million tokens)"),
                    ));
                }
            }
            c.ratio(&format!("models.{name}.quality"), m.quality, false)?;
        }
        Ok(())
    }

    fn check_routes(&self, c: &Check) -> Result<(), ConfigError> {
        if self.routes.is_empty() {
            return Err(c.bad("routes".into(), "at least one route is required".into()));
        }
        for (name, r) in &self.routes {
            if r.chain.is_empty() {
                return Err(c.bad(
                    format!("routes.{name}.chain"),
                    "the chain needs at least one model".into(),
                ));
            }
            for (i, m) in r.chain.iter().enumerate() {
                if !self.models.contains_key(m) {
                    return Err(c.bad(
                        format!("routes.{name}.chain[{i}]"),
                        format!("unknown model `{m}`; defined models: {}", keys(&self.models)),
                    ));
                }
            }
            c.ratio(&format!("routes.{name}.max_tokens_factor"), r.max_tokens_factor, false)?;
        }
        Ok(())
    }

    /// Keys name a user and what they may call; no two secrets share a hash.
    /// Each MCP server is reached one way: a URL, or a command.
    fn check_mcp(&self, c: &Check) -> Result<(), ConfigError> {
        for (name, m) in &self.mcp {
            match (&m.url, m.command.is_empty()) {
                (Some(_), false) | (None, true) => {
                    return Err(c.bad(
                        format!("mcp.{name}"),
                        "give its `url` (Streamable HTTP) or its `command` (stdio), one of them".into(),
                    ))
                }
                (Some(u), true) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                    return Err(c.bad(format!("mcp.{name}.url"), NOT_HTTP.into()))
                }
                _ => {}
            }
            for (k, v) in &m.env {
                let at = format!("mcp.{name}.env.{k}");
                if m.command.is_empty() {
                    return Err(c.bad(
                        at,
                        "only a stdio server (`command`) is started with an environment".into(),
                    ));
                }
                if k.is_empty() || k.contains(['=', '\0']) {
                    return Err(c.bad(at, "is not an environment variable's name".into()));
                }
                super::http_tool::Template::parse(v, "${").map_err(|e| c.bad(at, e))?;
            }
        }
        Ok(())
    }

    fn check_access(&self, c: &Check) -> Result<(), ConfigError> {
        let max = crate::limits::MAX_NAME_LEN;
        let mut seen = std::collections::HashMap::new();
        let hashes = self.keys.iter().map(|(n, k)| (format!("keys.{n}"), k.hash));
        let hashes = hashes.chain(self.operators.iter().map(|(n, o)| (format!("operators.{n}"), o.hash)));
        for (at, hash) in hashes {
            if let Some(first) = seen.insert(hash, at.clone()) {
                return Err(c.bad(
                    format!("{at}.hash"),
                    format!("the same secret as {first}: give each key and token its own"),
                ));
            }
        }
        for (name, k) in &self.keys {
            if k.user.trim().is_empty() || k.user.len() > max {
                return Err(c.bad(
                    format!("keys.{name}.user"),
                    format!("name the user its calls are billed to (1 to {max} bytes)"),
                ));
            }
            for (i, r) in k.routes.iter().enumerate() {
                let known = self.routes.contains_key(r)
                    || self
                        .models
                        .iter()
                        .any(|(m, cfg)| m == r || cfg.api_name.as_deref() == Some(r));
                if !known {
                    return Err(c.bad(
                        format!("keys.{name}.routes[{i}]"),
                        format!("unknown route or model `{r}`; routes: {}", keys(&self.routes)),
                    ));
                }
            }
            for (i, m) in k.mcp.iter().enumerate() {
                if !self.mcp.contains_key(m) {
                    return Err(c.bad(
                        format!("keys.{name}.mcp[{i}]"),
                        format!("unknown MCP server `{m}`; servers: {}", keys(&self.mcp)),
                    ));
                }
            }
            if let Some(usd) = k.budgets.and_then(|b| b.cost_per_day_usd) {
                if !(usd.is_finite() && usd >= 0.0) {
                    return Err(c.bad(
                        format!("keys.{name}.budgets.cost_per_day_usd"),
                        format!("{usd} must be 0 (unlimited) or more"),
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_tools(&self, c: &Check) -> Result<(), ConfigError> {
        for (name, t) in &self.tools {
            if t.pool == 0 {
                return Err(c.bad(format!("tools.{name}.pool"), "must be at least 1".into()));
            }
            if t.timeout_ms == 0 {
                return Err(c.bad(format!("tools.{name}.timeout_ms"), "must be at least 1 ms".into()));
            }
            if let Some(s) = &t.schema {
                if s.as_table().is_none() {
                    return Err(c.bad(
                        format!("tools.{name}.schema"),
                        "must be a table (a JSON schema object)".into(),
                    ));
                }
            }
            if let Some(b) = &t.breaker {
                validate_breaker(b, &format!("tools.{name}.breaker"), c)?;
            }
            check_http_tool(name, t, c)?;
        }
        Ok(())
    }

    /// The limiter, budgets, sessions, retries and degradation.
    fn check_settings(&self, c: &Check) -> Result<(), ConfigError> {
        c.ratio("limiter.drift_threshold", self.limiter.drift_threshold, false)?;
        if self.limiter.drift_window == 0 {
            return Err(c.bad("limiter.drift_window".into(), "must be at least 1 call".into()));
        }
        check_adaptive(&self.limiter.adaptive, c)?;
        check_queue(&self.limiter.queue, c)?;
        c.ratio("budgets.soft_ratio", self.budgets.soft_ratio, false)?;
        for (k, v) in [
            ("budgets.user_cost_per_day_usd", self.budgets.user_cost_per_day_usd),
            (
                "budgets.global_cost_per_hour_usd",
                self.budgets.global_cost_per_hour_usd,
            ),
            ("budgets.global_cost_per_day_usd", self.budgets.global_cost_per_day_usd),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(c.bad(k.into(), format!("{v} must be ≥ 0 (0 = unlimited)")));
            }
        }
        if self.budgets.max_tracked_users == 0 {
            return Err(c.bad("budgets.max_tracked_users".into(), "must be at least 1".into()));
        }
        let sr = &self.budgets.spend_rate;
        if !(sr.multiple.is_finite() && sr.multiple > 1.0) {
            return Err(c.bad(
                "budgets.spend_rate.multiple".into(),
                format!(
                    "{} must be a number greater than 1 (a rate this many times its baseline trips)",
                    sr.multiple
                ),
            ));
        }
        for (k, v) in [
            ("budgets.spend_rate.min_tokens_per_minute", sr.min_tokens_per_minute),
            ("budgets.spend_rate.min_usd_per_minute", sr.min_usd_per_minute),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(c.bad(k.into(), format!("{v} must be ≥ 0")));
            }
        }
        if sr.baseline_minutes < 2 || sr.cooldown_s == 0 {
            return Err(c.bad(
                "budgets.spend_rate".into(),
                "baseline_minutes must be at least 2 and cooldown_s at least 1".into(),
            ));
        }
        if self.sessions.max_concurrent == 0 || self.sessions.max_steps == 0 {
            return Err(c.bad(
                "sessions".into(),
                "max_concurrent and max_steps must be at least 1".into(),
            ));
        }
        c.ratio("retry.budget_ratio", self.retry.budget_ratio, true)?;
        c.ratio("retry.hedge_ratio", self.retry.hedge_ratio, true)?;
        if self.retry.base_ms == 0 || self.retry.cap_ms < self.retry.base_ms {
            return Err(c.bad("retry.cap_ms".into(), "need base_ms ≥ 1 and cap_ms ≥ base_ms".into()));
        }
        c.ratio("degradation.cache_quality", self.degradation.cache_quality, false)?;
        c.ratio("degradation.skip_quality", self.degradation.skip_quality, false)?;
        if self.degradation.defer_retry_ms == 0 {
            return Err(c.bad("degradation.defer_retry_ms".into(), "must be at least 1 ms".into()));
        }
        Ok(())
    }
}

fn validate_breaker(b: &BreakerConfig, at: &str, c: &Check) -> Result<(), ConfigError> {
    for (k, v) in [
        ("failure_rate", b.failure_rate),
        ("slow_call_rate", b.slow_call_rate),
        ("half_open_success_rate", b.half_open_success_rate),
    ] {
        if !(v.is_finite() && v > 0.0 && v <= 1.0) {
            return Err(c.bad(
                format!("{at}.{k}"),
                format!("{v} is out of range; use a number greater than 0 and at most 1"),
            ));
        }
    }
    if b.window_size == 0 {
        return Err(c.bad(format!("{at}.window_size"), "must be at least 1".into()));
    }
    if b.minimum_calls == 0 {
        return Err(c.bad(
            format!("{at}.minimum_calls"),
            "must be at least 1 (one failure out of one call must not trip)".into(),
        ));
    }
    if b.window == WindowKind::Count && b.minimum_calls > b.window_size {
        return Err(c.bad(
            format!("{at}.minimum_calls"),
            format!(
                "{} exceeds window_size {}; a count window can never hold that many calls",
                b.minimum_calls, b.window_size
            ),
        ));
    }
    if b.cooldown_ms == 0 || b.max_cooldown_ms < b.cooldown_ms {
        return Err(c.bad(
            format!("{at}.max_cooldown_ms"),
            "need cooldown_ms ≥ 1 and max_cooldown_ms ≥ cooldown_ms".into(),
        ));
    }
    if !(b.cooldown_multiplier.is_finite() && b.cooldown_multiplier >= 1.0) {
        return Err(c.bad(format!("{at}.cooldown_multiplier"), "must be a number ≥ 1".into()));
    }
    if b.half_open_ramp.is_empty() || b.half_open_ramp.contains(&0) {
        return Err(c.bad(
            format!("{at}.half_open_ramp"),
            "must list at least one stage, each allowing ≥ 1 probe, e.g. [2, 4, 8]".into(),
        ));
    }
    if b.max_half_open_ms == 0 {
        return Err(c.bad(format!("{at}.max_half_open_ms"), "must be at least 1 ms".into()));
    }
    if !(b.min_tokens_per_s.is_finite() && b.min_tokens_per_s >= 0.0) {
        return Err(c.bad(format!("{at}.min_tokens_per_s"), "must be ≥ 0 (0 = off)".into()));
    }
    Ok(())
}

fn keys<V>(m: &BTreeMap<String, V>) -> String {
    m.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
}

/// An `http` tool's method, URL template and headers; a mock tool has none.
fn check_http_tool(name: &str, t: &super::ToolConfig, c: &Check) -> Result<(), ConfigError> {
    use super::http_tool::{is_credential, Template, METHODS};
    let key = |field: &str| format!("tools.{name}.{field}");
    if t.kind == super::ToolBackend::Mock {
        let given = [
            ("url", t.url.is_some()),
            ("method", t.method.is_some()),
            ("headers", !t.headers.is_empty()),
        ];
        return match given.iter().find(|(_, set)| *set) {
            Some((field, _)) => Err(c.bad(
                key(field),
                format!("only an HTTP tool has a {field}; add kind = \"http\" to call it over HTTP"),
            )),
            None => Ok(()),
        };
    }
    if let Some(m) = &t.method {
        if !METHODS.contains(&m.as_str()) {
            return Err(c.bad(key("method"), format!("`{m}` is not one of {}", METHODS.join(", "))));
        }
    }
    let Some(url) = &t.url else {
        return Err(c.bad(
            key("url"),
            "an HTTP tool needs a url, e.g. \"http://127.0.0.1:9000/orders/{order_id}\"".into(),
        ));
    };
    let template = Template::parse(url, "{").map_err(|e| c.bad(key("url"), e))?;
    let sample = template.fill(|_| Some("x".into())).unwrap_or_default();
    match reqwest::Url::parse(&sample) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        Ok(u) => return Err(c.bad(key("url"), format!("`{}` is not http or https", u.scheme()))),
        Err(e) => return Err(c.bad(key("url"), format!("is not a URL: {e}"))),
    }
    for (h, v) in &t.headers {
        let at = key(&format!("headers.{h}"));
        if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
            return Err(c.bad(at, "is not a header name".into()));
        }
        let value = Template::parse(v, "${").map_err(|e| c.bad(at.clone(), e))?;
        if is_credential(h) && value.slots().next().is_none() {
            return Err(c.bad(
                at,
                format!("a credential must come from an environment variable, not the config file: write e.g. \"Bearer ${{{}_TOKEN}}\" and export it", name.to_ascii_uppercase()),
            ));
        }
    }
    Ok(())
}

/// `[limiter.adaptive]`: floor ≤ initial ≤ ceiling, a backoff that cuts,
/// a tolerance above 1.
fn check_queue(q: &super::QueueConfig, c: &Check) -> Result<(), ConfigError> {
    use super::{Priority, MAX_QUEUE, MAX_TENANT_USERS, MAX_TENANT_WEIGHT};
    let bad = |k: String, m: String| Err(c.bad(format!("limiter.queue.{k}"), m));
    if !(1..=MAX_QUEUE).contains(&q.max_waiting) {
        return bad(
            "max_waiting".into(),
            format!("{} must be from 1 to {MAX_QUEUE} calls", q.max_waiting),
        );
    }
    for p in Priority::ALL {
        let ms = q.deadline_ms.of(p);
        if !(1..=3_600_000).contains(&ms) {
            return bad(
                format!("deadline_ms.{}", p.name()),
                format!("{ms} must be from 1 to 3600000 ms"),
            );
        }
    }
    if let Some(h) = &q.tenant_header {
        let valid = h.len() <= 64 && http::HeaderName::from_lowercase(h.as_bytes()).is_ok();
        if !valid {
            return bad(
                "tenant_header".into(),
                format!(
                    "`{}` is not a lower-case header name of at most 64 bytes",
                    h.escape_debug()
                ),
            );
        }
    }
    let mut seen = std::collections::HashMap::new();
    for (name, t) in &q.tenants {
        if !(1..=MAX_TENANT_WEIGHT).contains(&t.weight) {
            return bad(
                format!("tenants.{name}.weight"),
                format!("{} must be from 1 to {MAX_TENANT_WEIGHT}", t.weight),
            );
        }
        if t.users.is_empty() {
            return bad(format!("tenants.{name}.users"), "must name at least one user".into());
        }
        for u in &t.users {
            if let Some(other) = seen.insert(u.as_str(), name.as_str()) {
                return bad(
                    format!("tenants.{name}.users"),
                    format!("user `{u}` is already in tenant `{other}`; a user belongs to one tenant"),
                );
            }
        }
        if seen.len() > MAX_TENANT_USERS {
            return bad("tenants".into(), format!("more than {MAX_TENANT_USERS} users in all"));
        }
    }
    Ok(())
}

fn check_adaptive(a: &super::AdaptiveConfig, c: &Check) -> Result<(), ConfigError> {
    use super::MAX_ADAPTIVE_CEILING;
    let bad = |k: &str, m: String| Err(c.bad(format!("limiter.adaptive.{k}"), m));
    if a.floor == 0 {
        return bad("floor", "must be at least 1 call".into());
    }
    if a.ceiling > MAX_ADAPTIVE_CEILING {
        return bad(
            "ceiling",
            format!("{} must be at most {MAX_ADAPTIVE_CEILING}", a.ceiling),
        );
    }
    if !(a.floor..=a.ceiling).contains(&a.initial) {
        return bad(
            "initial",
            format!(
                "{} must be between floor ({}) and ceiling ({})",
                a.initial, a.floor, a.ceiling
            ),
        );
    }
    if !(a.backoff.is_finite() && a.backoff > 0.0 && a.backoff < 1.0) {
        return bad(
            "backoff",
            format!("{} must be greater than 0 and less than 1", a.backoff),
        );
    }
    if !(a.tolerance.is_finite() && a.tolerance > 1.0) {
        return bad(
            "tolerance",
            format!(
                "{} must be a number greater than 1 (a multiple of the baseline latency)",
                a.tolerance
            ),
        );
    }
    Ok(())
}

/// Lower-case letters, digits and hyphens: what a project id or a location
/// is, and so safe in a URL's path.
fn is_path_segment(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The key a provider's API key is given under, for an error naming it.
fn key_field(p: &ProviderConfig) -> &'static str {
    match (&p.api_key_file, &p.entra_token_env) {
        (Some(_), _) => "api_key_file",
        (None, Some(_)) if p.api_key_env.is_none() => "entra_token_env",
        _ => "api_key_env",
    }
}
