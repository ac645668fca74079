//! TOML configuration: providers, models, routes, tools and every resilience
//! setting, with a complete built-in default and validation errors that name
//! the key path and what is allowed.

use crate::target::{Kind, Target};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

pub mod access;
mod defaults;
pub mod file;
pub mod http_tool;
pub mod mcp;
mod resilience;
mod upstreams;
mod validate;

pub use access::{KeyConfig, OperatorConfig};
pub use http_tool::ToolBackend;
pub use resilience::*;
pub use upstreams::*;

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
    /// Not a regular file (a FIFO, a device): refused without reading it.
    #[error("config file {path} is not a regular file (it is {kind}): give the path of the config file itself")]
    NotAFile {
        /// The file.
        path: String,
        /// What it is instead.
        kind: &'static str,
    },
    /// Larger than a config may be (`limits::MAX_CONFIG_BYTES`).
    #[error("config file {path} is {size} bytes, more than the {max} bytes a config may be: is it the right file?")]
    TooLarge {
        /// The file.
        path: String,
        /// Its size.
        size: u64,
        /// The bound.
        max: u64,
    },
    /// A reload's read did not end in time (a stalled mount or device).
    #[error("config file {path} did not read in {} s (is its storage stalled?): nothing was applied; reload again once it reads", within.as_secs())]
    Stalled {
        /// The file.
        path: String,
        /// How long the reload waited.
        within: std::time::Duration,
    },
    /// The TOML did not parse or did not match the schema.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// toml's message, which carries line, column and key.
        message: String,
        /// Where and what without the file's text ([`toml_where`]).
        unquoted: String,
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

impl ConfigError {
    /// The error said without any of the file's text, which may hold a
    /// secret: where (file, line, column, key) and what is wrong. For the
    /// events, which view-only tokens read too.
    pub fn without_text(&self) -> String {
        match self {
            ConfigError::Parse { path, unquoted, .. } => {
                format!("{path}: {unquoted} (`fusebox check-config {path}` shows the line)")
            }
            other => other.to_string(),
        }
    }
}

/// Where toml's error `e` in `text` is (line, column, key path) and what
/// it is, quoting nothing of `text`: toml's words with what they quote of
/// the file (a value found, a name) said as "(not shown)".
pub fn toml_where(text: &str, e: &toml::de::Error) -> String {
    let mut said = String::new();
    if let Some(mut at) = e.span().map(|s| s.start.min(text.len())) {
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let _ = write!(
            said,
            "line {}, column {}",
            text[..at].matches('\n').count() + 1,
            text[line_start..at].chars().count() + 1
        );
    }
    if let Some(keys) = toml_keys(e) {
        let _ = write!(said, "{}at `{keys}`", if said.is_empty() { "" } else { ", " });
    }
    if !said.is_empty() {
        said.push_str(": ");
    }
    said.push_str(&unquoted(e.message().trim_end()));
    said
}

/// The key path toml holds for `e` (which it says only when it has no text
/// to show the line of).
fn toml_keys(e: &toml::de::Error) -> Option<String> {
    let mut bare = e.clone();
    bare.set_input(None);
    let shown = bare.to_string();
    let keys = shown
        .strip_prefix(e.message())?
        .trim()
        .strip_prefix("in `")?
        .strip_suffix('`')?;
    (!keys.is_empty()).then(|| keys.to_string())
}

/// `message` with each span it quotes ("…" or `…`) before its `, expected`
/// (what it found: the file's) said as "(not shown)"; what follows (what
/// the schema expects) is kept.
fn unquoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut chars = message.char_indices();
    while let Some((i, c)) = chars.next() {
        if message[i..].starts_with(", expected") {
            out.push_str(&message[i..]);
            break;
        }
        if c != '"' && c != '`' {
            out.push(c);
            continue;
        }
        // Up to the closing quote, past escaped ones.
        let mut escaped = false;
        for (_, q) in chars.by_ref() {
            match q {
                '\\' if c == '"' && !escaped => escaped = true,
                q if q == c && !escaped => break,
                _ => escaped = false,
            }
        }
        out.push_str("(not shown)");
    }
    out
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
    /// Caller keys by name: with any, a gateway call needs one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub keys: BTreeMap<String, KeyConfig>,
    /// Operator tokens by operator name: with any, the admin endpoints
    /// need one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub operators: BTreeMap<String, OperatorConfig>,
    /// MCP servers by name, whose tools `serve` offers at `/mcp` behind
    /// their breakers.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp: BTreeMap<String, mcp::McpServerConfig>,
}

/// The URL scheme of a fleet store behind Redis Sentinels.
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";
/// The URL scheme of a fleet store on a Redis Cluster.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// Where state shared by a fleet of instances lives (`--state` overrides
/// the URL).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// `memory` (this instance alone), `redis://HOST:PORT/DB`,
    /// `redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER[/DB]` or
    /// `redis+cluster://HOST:PORT[,HOST:PORT…]`.
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
        url == "memory"
            || url.starts_with("redis://")
            || url.starts_with("rediss://")
            || url.starts_with(SENTINEL_SCHEME)
            || url.starts_with(CLUSTER_SCHEME)
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

impl Config {
    /// The providers and tools reached over HTTP (every kind of provider
    /// but the in-process mock, `http` tools), tools as `tool NAME`.
    pub fn http_providers(&self) -> Vec<String> {
        self.over_http(|_| true)
    }

    /// Those of them not on this machine (a hosted API, or a URL whose host
    /// is not loopback): traffic sent there may cost money.
    pub fn remote_providers(&self) -> Vec<String> {
        self.over_http(|url| !is_loopback(url))
    }

    /// Whether the tools are the config's own, not the built-in ones (the
    /// demo's mock tools), which a gateway's MCP tools do not take.
    pub fn has_own_tools(&self) -> bool {
        self.tools != defaults::tools()
    }

    fn over_http(&self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let providers = self
            .providers
            .iter()
            .filter(|(_, p)| p.kind != ProviderKind::Mock)
            .filter(|(_, p)| keep(p.base_url.as_deref().or(p.kind.default_base_url()).unwrap_or("")))
            .map(|(name, _)| name.clone());
        let tools = self
            .tools
            .iter()
            .filter(|(_, t)| t.kind == ToolBackend::Http && keep(t.url.as_deref().unwrap_or("")))
            .map(|(name, _)| format!("tool {name}"));
        providers.chain(tools).collect()
    }
}

impl Config {
    /// Reads (a regular file within its bound: [`file::read`]), parses and
    /// validates a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = file::read(path)?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and validates config text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: file.to_string(),
            message: toml_message(text, &e),
            unquoted: toml_where(text, &e),
        })?;
        cfg.validate(file)?;
        Ok(cfg)
    }

    /// The breaker settings for a target (a model's are its provider's).
    pub fn breaker_for(&self, target: &Target) -> &BreakerConfig {
        let name = target.name();
        let over = match target.kind() {
            Kind::Provider => self.providers.get(name).and_then(|p| p.breaker.as_ref()),
            Kind::Model => self
                .models
                .get(name)
                .and_then(|m| self.providers.get(&m.provider))
                .and_then(|p| p.breaker.as_ref()),
            Kind::Tool => self.tools.get(name).and_then(|t| t.breaker.as_ref()),
        };
        over.unwrap_or(&self.breaker)
    }
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
    fn an_mcp_server_is_reached_by_url_or_command() {
        let ok = Config::parse("[mcp.orders]\nurl = \"http://127.0.0.1:9000/mcp\"\n", "x.toml").unwrap();
        assert_eq!(ok.mcp["orders"].url.as_deref(), Some("http://127.0.0.1:9000/mcp"));
        let ok = Config::parse("[mcp.files]\ncommand = [\"node\", \"server.js\"]\n", "x.toml").unwrap();
        assert_eq!(ok.mcp["files"].command, ["node", "server.js"]);
        for (text, key) in [
            ("[mcp.both]\nurl = \"http://h/mcp\"\ncommand = [\"x\"]\n", "mcp.both"),
            ("[mcp.none]\n", "mcp.none"),
            ("[mcp.ftp]\nurl = \"ftp://h/mcp\"\n", "mcp.ftp.url"),
        ] {
            let err = Config::parse(text, "x.toml").unwrap_err().to_string();
            assert!(err.contains(key), "{err}");
        }
    }

    /// Said without text, an error keeps where and what and quotes nothing
    /// of the file, a value that looks like toml's own words included.
    #[test]
    fn an_error_said_without_text_quotes_nothing_of_the_file() {
        for (text, said) in [
            (
                "[breaker]\nconsecutive_failures = \"sk-1, expected \\\"`sk-2`\\\" sk-3\"\n",
                "x.toml: line 2, column 24, at `breaker.consecutive_failures`: invalid type: string (not shown), expected",
            ),
            ("[breaker]\nsk-4 = 1\n", "x.toml: line 2, column 1, at `breaker`: unknown field (not shown), expected one of `"),
            ("[breaker]\nx = \"sk-5\n", "x.toml: line 2, column 10: "),
        ] {
            let e = Config::parse(text, "x.toml").unwrap_err();
            assert!(e.to_string().contains("sk-"), "the full message shows the line: {e}");
            let quiet = e.without_text();
            assert!(quiet.starts_with(said) && !quiet.contains("sk-"), "{quiet}");
        }
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
