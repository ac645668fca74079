//! fusebox in front of MCP servers. `serve` connects to each server of
//! `[mcp.NAME]` as an MCP client (the official `rmcp` SDK), offers the
//! union of their tools at `/mcp` (`proxy.rs`), and runs every call through
//! the tool path of the runner (breaker, pool, timeout, retries for
//! idempotent tools, cache) to the server that has the tool
//! (`executor.rs`).

mod executor;
pub mod proxy;
pub mod sessions;

use crate::config::mcp::McpServerConfig;
use crate::config::ToolConfig;
use parking_lot::RwLock;
use rmcp::model::Tool;
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::ServiceExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

pub use executor::McpTools;

/// Why the MCP servers could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// A server did not answer as an MCP server.
    #[error("mcp.{server}: cannot connect ({why}); is it running at its `url`, or does its `command` start it?")]
    Connect {
        /// Its name in the config.
        server: String,
        /// Why.
        why: String,
    },
    /// A stdio server's environment names a variable that is not set.
    #[error("{0}")]
    Environment(String),
    /// A server would not list its tools.
    #[error("mcp.{server}: tools/list failed ({why})")]
    List {
        /// Its name in the config.
        server: String,
        /// Why.
        why: String,
    },
}

/// An upstream server, reconnected (a stdio server restarted) with
/// backoff whenever its session ends.
struct Upstream {
    name: String,
    /// Its session, while it has one: calls fail fast without.
    peer: RwLock<Option<Peer<RoleClient>>>,
}

/// The first and the longest wait before reconnecting; a session that
/// lasted this long starts the backoff again.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(10));

/// A session with the server of `cfg`.
async fn session(name: &str, cfg: &McpServerConfig) -> Result<RunningService<RoleClient, ()>, McpError> {
    let connect = |why: String| McpError::Connect {
        server: name.to_string(),
        why,
    };
    match (&cfg.url, cfg.command.split_first()) {
        (Some(url), _) => {
            let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
            ().serve(transport).await.map_err(|e| connect(e.to_string()))
        }
        (None, Some((program, args))) => {
            // A clean environment: the gateway's secrets are not the server's.
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(args)
                .env_clear()
                .envs(cfg.environment(name).map_err(McpError::Environment)?);
            let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| connect(e.to_string()))?;
            if let Some(stderr) = stderr {
                tokio::spawn(log_stderr(name.to_string(), stderr));
            }
            ().serve(transport).await.map_err(|e| connect(e.to_string()))
        }
        (None, None) => Err(connect("neither a url nor a command".into())),
    }
}

/// The longest line of a stdio server's stderr logged; the rest is cut.
const MAX_STDERR_LINE: usize = 4096;

/// Writes what a stdio server says on stderr to the log, a line at a time
/// (never to the console, which it would garble), until it closes.
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut cut = false;
        // Read a line a buffer at a time, keeping at most the bound of it.
        loop {
            let Ok(buf) = reader.fill_buf().await else { return };
            if buf.is_empty() {
                if !line.is_empty() {
                    tracing::info!(server = %server, "stderr: {}", String::from_utf8_lossy(&line));
                }
                return;
            }
            let (take, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            };
            let room = MAX_STDERR_LINE.saturating_sub(line.len());
            cut |= take > room;
            line.extend_from_slice(&buf[..take.min(room)]);
            reader.consume(take);
            if done {
                break;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        tracing::info!(server = %server, "stderr: {text}{}", if cut { " …(cut)" } else { "" });
    }
}

/// Keeps `up` in session: when `running` ends (the server exited or hung
/// up), its calls fail fast while a new session is made, after a wait
/// that doubles while sessions keep ending early.
async fn supervise(up: Arc<Upstream>, cfg: McpServerConfig, mut running: RunningService<RoleClient, ()>) {
    let mut wait = BACKOFF.0;
    loop {
        let began = tokio::time::Instant::now();
        let _ = running.waiting().await;
        *up.peer.write() = None;
        if began.elapsed() >= BACKOFF.1 {
            wait = BACKOFF.0;
        }
        tracing::warn!(server = %up.name, "MCP session ended; reconnecting");
        running = loop {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(BACKOFF.1);
            match session(&up.name, &cfg).await {
                Ok(s) => break s,
                Err(e) => tracing::warn!(error = %e, "MCP server still unreachable"),
            }
        };
        *up.peer.write() = Some(running.peer().clone());
        tracing::info!(server = %up.name, "MCP session back");
    }
}

/// One tool the proxy offers: its name at `/mcp`, the server that has it,
/// and the tool as that server describes it.
#[derive(Clone, Debug)]
pub struct Offered {
    /// The name callers use: the server's own, or `SERVER__NAME` where two
    /// servers have a tool of that name.
    pub name: String,
    /// Which server has it.
    pub server: usize,
    /// The tool as its server lists it (its name is the server's).
    pub tool: Tool,
}

/// The upstream servers and the tools they offer.
pub struct Upstreams {
    servers: Vec<Arc<Upstream>>,
    offered: Vec<Offered>,
    by_name: HashMap<String, usize>,
}

impl Upstreams {
    /// Connects to every server of `cfg` and lists their tools.
    pub async fn connect(cfg: &BTreeMap<String, McpServerConfig>) -> Result<Arc<Self>, McpError> {
        // The MCP client's HTTP client takes the process's TLS provider:
        // ring, as the provider clients use.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut servers = Vec::new();
        let mut listed = Vec::new();
        for (name, c) in cfg {
            let running = session(name, c).await?;
            let tools = running.list_all_tools().await.map_err(|e| McpError::List {
                server: name.clone(),
                why: e.to_string(),
            })?;
            listed.push(tools);
            let up = Arc::new(Upstream {
                name: name.clone(),
                peer: RwLock::new(Some(running.peer().clone())),
            });
            tokio::spawn(supervise(up.clone(), c.clone(), running));
            servers.push(up);
        }
        let offered = offer(&servers, listed);
        let by_name = offered.iter().enumerate().map(|(i, o)| (o.name.clone(), i)).collect();
        Ok(Arc::new(Self {
            servers,
            offered,
            by_name,
        }))
    }

    /// The tools offered, in the order listed.
    pub fn offered(&self) -> &[Offered] {
        &self.offered
    }

    /// The offered tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Offered> {
        self.by_name.get(name).map(|&i| &self.offered[i])
    }

    /// The tool registry for the offered tools: what `configured` says of
    /// each (`[tools.NAME]`), else the defaults, where a tool the server
    /// does not say is idempotent (or read-only) is not retried. Each
    /// schema is the server's.
    pub fn tool_configs(&self, configured: &BTreeMap<String, ToolConfig>) -> BTreeMap<String, ToolConfig> {
        self.offered
            .iter()
            .map(|o| {
                let mut t = configured.get(&o.name).cloned().unwrap_or_else(|| {
                    let hints = o.tool.annotations.as_ref();
                    let safe = hints.is_some_and(|a| a.idempotent_hint == Some(true) || a.read_only_hint == Some(true));
                    ToolConfig {
                        idempotent: safe,
                        ..ToolConfig::default()
                    }
                });
                t.schema = toml::Value::try_from(serde_json::Value::Object((*o.tool.input_schema).clone())).ok();
                if t.description.is_empty() {
                    t.description = o.tool.description.as_deref().unwrap_or_default().to_string();
                }
                (o.name.clone(), t)
            })
            .collect()
    }

    /// The session with server `server`, while it has one; else its name.
    fn peer(&self, server: usize) -> Result<Peer<RoleClient>, &str> {
        let up = &self.servers[server];
        up.peer.read().clone().ok_or(up.name.as_str())
    }
}

/// The tools of every server under the names callers see: a name two
/// servers share is prefixed with each server's name (and said so in the
/// log), the rest are as the servers name them.
fn offer(servers: &[Arc<Upstream>], listed: Vec<Vec<Tool>>) -> Vec<Offered> {
    let mut count: HashMap<String, usize> = HashMap::new();
    for t in listed.iter().flatten() {
        *count.entry(t.name.to_string()).or_default() += 1;
    }
    let mut out = Vec::new();
    for (server, tools) in listed.into_iter().enumerate() {
        for tool in tools {
            let name = if count[tool.name.as_ref()] > 1 {
                let prefixed = format!("{}__{}", servers[server].name, tool.name);
                tracing::warn!(tool = %tool.name, as_ = %prefixed, "two MCP servers offer this tool: offered under prefixed names");
                prefixed
            } else {
                tool.name.to_string()
            };
            out.push(Offered { name, server, tool });
        }
    }
    out
}
