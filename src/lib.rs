//! fusebox: a resilience runner for LLM agents (circuit breakers, token-aware
//! rate limiting, bulkheads, budgets, retries, graceful degradation and
//! multi-provider fallback) with mock providers, a headless demo and benchmarks.

#![warn(missing_docs)]

pub mod alloc;
pub mod attach;
pub mod bench;
pub mod blame;
pub mod cli;
pub mod clock;
pub mod command;
pub mod config;
pub mod descriptors;
pub mod fleet;
pub mod gateway;
pub mod limits;
pub mod mcp;
pub mod mockserver;
pub mod otel;
pub mod outcome;
pub mod provider;
pub mod request;
pub mod resilience;
pub mod runner;
pub mod target;
pub mod telemetry;
pub mod tools;
pub mod traffic;
pub mod tui;
pub mod wire;

/// Where diagnostic logs go: `$FUSEBOX_LOG_DIR`, else
/// `$XDG_STATE_HOME/fusebox/logs`, else `~/.local/state/fusebox/logs`, else
/// the temp directory.
pub fn log_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(d) = std::env::var_os("FUSEBOX_LOG_DIR") {
        return PathBuf::from(d);
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")));
    match state {
        Some(s) => s.join("fusebox/logs"),
        None => std::env::temp_dir().join("fusebox/logs"),
    }
}
