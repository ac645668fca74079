//! Options several commands share, and the flag values they parse into.

use crate::config::Config;
use crate::traffic::log::writer::{RecordOptions, RecordedContent, Recorder};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::time::Duration;

/// How fast virtual time runs: `max` or a factor of real time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Speed {
    /// Virtual time, as fast as possible (deterministic).
    Max,
    /// This many times real time.
    Factor(f64),
}

impl std::str::FromStr for Speed {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        if s == "max" {
            return Ok(Speed::Max);
        }
        match s.parse::<f64>() {
            Ok(f) if f.is_finite() && f > 0.0 => Ok(Speed::Factor(f)),
            _ => bail!("--speed {s}: use `max` or a positive number such as 1 or 10"),
        }
    }
}

impl Speed {
    /// `--speed`, else `max` headless and real time in the console.
    pub fn or_default(given: Option<&str>, console: bool) -> Result<Self> {
        given.unwrap_or(if console { "1" } else { "max" }).parse()
    }

    /// Whether this is virtual time as fast as possible.
    pub fn is_max(self) -> bool {
        self == Speed::Max
    }
}

/// A `--duration`: positive, e.g. `60s` or `10m`.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let t = s.trim();
    if t.starts_with('-') {
        bail!("--duration {s}: a duration cannot be negative; use e.g. 60s or 10m");
    }
    let d = humantime::parse_duration(t)
        .with_context(|| format!("--duration {s}: not a duration; use e.g. 60s, 90s or 10m"))?;
    if d.is_zero() {
        bail!("--duration {s}: must be longer than zero");
    }
    Ok(d)
}

/// The config at `path`, else the built-in one.
pub fn load_config(path: Option<&PathBuf>) -> Result<Config> {
    match path {
        Some(p) => Ok(Config::load(p)?),
        None => Ok(Config::default()),
    }
}

/// `--state`: where a fleet's shared state lives.
#[derive(clap::Args, Default)]
pub struct StateArgs {
    /// Where state shared by a fleet of instances lives: `memory` (this
    /// instance alone), `redis://HOST:PORT/DB`, the primary Redis
    /// Sentinels name, `redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER[/DB]`,
    /// or a Redis Cluster, `redis+cluster://HOST:PORT[,HOST:PORT…]`
    /// [default: the config's `[state] url`, else memory].
    #[arg(long, env = "FUSEBOX_STATE", hide_env_values = true)]
    pub state: Option<String>,
}

impl StateArgs {
    /// The Redis URL to join, if any: the flag, else the config. A fleet
    /// shares limits in real time, so it needs a speed factor.
    pub fn redis(&self, cfg: &Config, speed: Speed) -> Result<Option<String>> {
        let url = self.state.clone().unwrap_or_else(|| cfg.state.url.clone());
        if url == "memory" {
            return Ok(None);
        }
        if speed.is_max() {
            bail!("--state {url}: a fleet shares limits in real time; use a speed factor (e.g. --speed 1) or --state memory");
        }
        Ok(Some(url))
    }
}

/// What a run writes out: its traffic log and its traces.
#[derive(clap::Args, Default)]
pub struct RecordArgs {
    /// Record the traffic to this file (traffic log v1, JSONL; see docs/traffic-log.md).
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Message content in the recording: none (default), hash, or full.
    #[arg(long, value_enum, default_value = "none")]
    pub record_content: RecordedContent,
    /// When the recording is synced to disk: always, os, or every N milliseconds.
    #[arg(long, default_value = "1000")]
    pub fsync: String,
    /// Start a new recording file past this many megabytes (the old one gets a .N suffix).
    #[arg(long)]
    pub rotate_mb: Option<u64>,
    /// The tools found on MCP servers, written in the header (not an option).
    #[arg(skip)]
    pub tools: std::collections::BTreeMap<String, crate::config::ToolConfig>,
    /// Export traces (OTLP over HTTP/protobuf) to this collector, e.g.
    /// http://127.0.0.1:4318 [default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT, else none].
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

impl RecordArgs {
    /// Subscribes a recorder to the runner's events, if recording.
    pub fn start(&self, runner: &crate::runner::Runner, seed: u64) -> Result<Option<Recorder>> {
        let Some(path) = &self.record else { return Ok(None) };
        let opts = RecordOptions {
            fsync: self.fsync.parse().map_err(|e| anyhow::anyhow!("--fsync {e}"))?,
            content: self.record_content,
            rotate_bytes: self.rotate_mb.map(|mb| mb.max(1) << 20),
        };
        let header = crate::traffic::log::Header {
            v: crate::traffic::log::VERSION,
            started_at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            seed,
            tools: self.tools.clone(),
        };
        let rec = Recorder::start(path, opts, header, runner.events())
            .with_context(|| format!("cannot record to {}", path.display()))?;
        Ok(Some(rec))
    }

    /// Starts exporting traces, if an endpoint is set.
    pub fn trace(&self, runner: &crate::runner::Runner) -> Result<Option<crate::otel::Tracing>> {
        if let Some(flag) = self.otlp_endpoint.as_deref() {
            if !(flag.starts_with("http://") || flag.starts_with("https://")) {
                anyhow::bail!("--otlp-endpoint {flag}: not an http:// or https:// URL (e.g. http://127.0.0.1:4318)");
            }
        }
        let Some(url) = crate::otel::endpoint(self.otlp_endpoint.as_deref()) else {
            return Ok(None);
        };
        Ok(Some(crate::otel::Tracing::start(runner, &url)?))
    }
}

/// Console options.
#[derive(clap::Args, Default)]
pub struct ConsoleArgs {
    /// Console theme: default, light, high-contrast, mono, or a theme file (NO_COLOR selects mono).
    #[arg(long)]
    pub theme: Option<String>,
    /// Keymap file remapping actions to keys.
    #[arg(long)]
    pub keymap: Option<PathBuf>,
    /// Disable every command that changes the runner.
    #[arg(long)]
    pub readonly: bool,
    /// Run destructive commands without asking for confirmation.
    #[arg(long)]
    pub yes: bool,
    /// Operator name recorded with commands [default: $USER].
    #[arg(long)]
    pub operator: Option<String>,
    /// Directory for the rolling diagnostic log, or `-` for stderr (headless runs) [default: $FUSEBOX_LOG_DIR, else $XDG_STATE_HOME/fusebox/logs].
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
}

impl ConsoleArgs {
    /// Why commands are disabled, if they are.
    pub fn readonly_reason(&self) -> Option<String> {
        self.readonly.then(|| "started with --readonly".to_string())
    }

    /// Who issues console commands: `--operator`, else `$USER` or
    /// `$LOGNAME`, else the login name of the user the process runs as.
    pub fn operator_name(&self) -> String {
        let env = |v| std::env::var(v).ok().filter(|s: &String| !s.is_empty());
        self.operator
            .clone()
            .or_else(|| env("USER"))
            .or_else(|| env("LOGNAME"))
            .or_else(login_name)
            .unwrap_or_else(|| "operator".into())
    }
}

/// The login name of the user this process runs as (Linux: its uid in
/// `/proc/self/status`, named in `/etc/passwd`; else `uid N`).
fn login_name() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    Some(named(uid, &passwd).unwrap_or_else(|| format!("uid {uid}")))
}

/// The name `passwd` (in `/etc/passwd`'s format) gives `uid`.
fn named(uid: u32, passwd: &str) -> Option<String> {
    passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

#[cfg(test)]
mod login_tests {
    #[test]
    fn a_uid_is_named_by_its_passwd_line() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nana:x:1000:1000:Ana:/home/ana:/bin/sh\n";
        assert_eq!(super::named(1000, passwd).as_deref(), Some("ana"));
        assert_eq!(super::named(0, passwd).as_deref(), Some("root"));
        assert_eq!(super::named(7, passwd), None);
        assert!(super::login_name().is_some(), "this process runs as someone");
    }
}
