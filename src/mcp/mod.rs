//! fusebox in front of MCP servers. `serve` connects to each server of
//! `[mcp.NAME]` as an MCP client (the official `rmcp` SDK) to learn what
//! it offers (this catalog), and offers the union at `/mcp` (`proxy.rs`).
//! Each client session there gets sessions of its own with the servers it
//! uses (`link.rs`), so that what a server asks or tells in return reaches
//! that client alone (`relay.rs`); every request runs through the tool
//! path of the runner (breaker, pool, timeout, retries where idempotent,
//! cache) to the server it names (`executor.rs`, `names.rs`). The model is
//! written down in `docs/mcp.md`.

mod executor;
mod http;
mod link;
pub mod names;
mod ordered;
pub mod proxy;
mod relay;
pub mod sessions;

use crate::config::mcp::McpServerConfig;
use crate::config::ToolConfig;
use parking_lot::RwLock;
use rmcp::model::{ServerCapabilities, Tool};
use rmcp::service::{Peer, RoleClient, RunningService, Service};
use rmcp::ServiceExt;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

pub use executor::McpTools;
pub use link::{Link, LinkLimits};
pub use names::Family;

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

/// An upstream server, its catalog session reconnected (a stdio server
/// restarted) with backoff whenever it ends.
struct Upstream {
    name: String,
    cfg: McpServerConfig,
    /// Its catalog session, while it has one: calls made outside a client
    /// session fail fast without.
    peer: RwLock<Option<Peer<RoleClient>>>,
    /// What it said it offers when first reached.
    caps: ServerCapabilities,
    /// Its instructions to clients, as it gave them.
    instructions: Option<String>,
    /// The HTTP client its sessions share (a `url` server).
    http: reqwest_mcp::Client,
}

/// The first and the longest wait before reconnecting; a session that
/// lasted this long starts the backoff again.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(10));

/// A session with the server of `cfg`, its requests to the client handled
/// by `client` and its notifications queued in order (at most `notes`;
/// `ordered.rs`); a `url` server's over `http` (`http.rs`).
async fn session<C: Service<RoleClient>>(
    name: &str,
    cfg: &McpServerConfig,
    http: &reqwest_mcp::Client,
    client: C,
    notes: usize,
) -> Result<(RunningService<RoleClient, C>, Told), McpError> {
    let connect = |why: String| McpError::Connect {
        server: name.to_string(),
        why,
    };
    match (&cfg.url, cfg.command.split_first()) {
        (Some(url), _) => {
            let (http, up) = http::Watched::new(http.clone());
            let config =
                rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let transport = rmcp::transport::StreamableHttpClientTransport::with_client(http, config);
            let (tap, order, queue) = ordered::Tap::new(transport, notes);
            let running = client.serve(tap).await.map_err(|e| connect(e.to_string()))?;
            Ok((
                running,
                Told {
                    order,
                    queue,
                    up: Some(up),
                },
            ))
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
            let (tap, order, queue) = ordered::Tap::new(transport, notes);
            let running = client.serve(tap).await.map_err(|e| connect(e.to_string()))?;
            Ok((running, Told { order, queue, up: None }))
        }
        (None, None) => Err(connect("neither a url nor a command".into())),
    }
}

/// What a session's server tells, to pass on in order.
pub(crate) struct Told {
    /// How far it has been passed on.
    pub order: Arc<ordered::NoticeOrder>,
    /// The notifications, in the order sent.
    pub queue: tokio::sync::mpsc::Receiver<rmcp::model::ServerNotification>,
    /// A `url` server's: true once the session's general stream is up.
    pub up: Option<tokio::sync::watch::Receiver<bool>>,
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
async fn supervise(up: Arc<Upstream>, mut running: RunningService<RoleClient, ()>) {
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
            match session(&up.name, &up.cfg, &up.http, (), 1).await {
                Ok((s, _)) => break s,
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

/// The upstream servers and what they offer.
pub struct Upstreams {
    servers: Vec<Arc<Upstream>>,
    offered: Vec<Offered>,
    by_name: crate::runner::NameMap<usize>,
    /// Where the prompts and resources of several servers are found.
    names: names::Names,
}

impl Upstreams {
    /// Connects to every server of `cfg` and lists what it offers.
    pub async fn connect(cfg: &BTreeMap<String, McpServerConfig>) -> Result<Arc<Self>, McpError> {
        // The MCP client's HTTP client takes the process's TLS provider:
        // ring, as the provider clients use.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut servers = Vec::new();
        let mut listed = Vec::new();
        let mut catalogs = Vec::new();
        for (name, c) in cfg {
            // The catalog's own session: what its server tells is not passed on.
            let http = http::client().map_err(|e| McpError::Connect {
                server: name.clone(),
                why: e.to_string(),
            })?;
            let (running, _) = session(name, c, &http, (), 1).await?;
            let list = |why: rmcp::service::ServiceError| McpError::List {
                server: name.clone(),
                why: why.to_string(),
            };
            let tools = running.list_all_tools().await.map_err(list)?;
            let info = running.peer().peer_info();
            let caps = info.as_ref().map(|i| i.capabilities.clone()).unwrap_or_default();
            // Where several servers share `/mcp`, their prompts and
            // resources are placed by what each lists now.
            if cfg.len() > 1 {
                catalogs.push(names::ServerListing::list(name, running.peer(), &caps).await);
            }
            listed.push(tools);
            let up = Arc::new(Upstream {
                name: name.clone(),
                cfg: c.clone(),
                peer: RwLock::new(Some(running.peer().clone())),
                caps,
                instructions: info.and_then(|i| i.instructions.clone()),
                http,
            });
            tokio::spawn(supervise(up.clone(), running));
            servers.push(up);
        }
        let offered = offer(&servers, listed);
        let by_name = offered.iter().enumerate().map(|(i, o)| (o.name.clone(), i)).collect();
        let server_names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        let names = names::Names::new(&server_names, catalogs);
        Ok(Arc::new(Self {
            servers,
            offered,
            by_name,
            names,
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

    /// Where prompts and resources are found.
    pub fn names(&self) -> &names::Names {
        &self.names
    }

    /// How many servers there are.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Server `server`'s name.
    pub fn name(&self, server: usize) -> &str {
        &self.servers[server].name
    }

    /// What server `server` offers.
    pub fn capabilities(&self, server: usize) -> &ServerCapabilities {
        &self.servers[server].caps
    }

    /// The servers offering `family`.
    pub fn offering(&self, family: Family) -> impl Iterator<Item = usize> + '_ {
        (0..self.servers.len()).filter(move |&i| family.offered_by(&self.servers[i].caps))
    }

    /// The instructions to pass on to clients: one server's, as it gave them.
    pub fn instructions(&self) -> Option<&str> {
        match self.servers.as_slice() {
            [one] => one.instructions.as_deref(),
            _ => None,
        }
    }

    /// How long server `server` may wait for a client's answer.
    pub fn input_timeout(&self, server: usize) -> Duration {
        Duration::from_secs(self.servers[server].cfg.input_timeout_s)
    }

    /// A session of server `server` of its own for a client, what it asks
    /// and tells handled by `client`.
    pub(crate) async fn open<C: Service<RoleClient>>(
        &self,
        server: usize,
        client: C,
        notes: usize,
    ) -> Result<(RunningService<RoleClient, C>, Told), McpError> {
        let up = &self.servers[server];
        session(&up.name, &up.cfg, &up.http, client, notes).await
    }

    /// The tool registry for the offered tools: what `configured` says of
    /// each (`[tools.NAME]`), else the defaults, where a tool the server
    /// does not say is idempotent (or read-only) is not retried and its
    /// timeout is the MCP SDKs' own (60 s: an MCP tool may well take long,
    /// and a server may close its stream and have the client come back).
    /// Each schema is the server's. Each server's other requests (its
    /// resources, prompts, completion, logging) run as tools of their own
    /// (`SERVER/resources`, …), retried as reads are.
    pub fn tool_configs(&self, configured: &BTreeMap<String, ToolConfig>) -> BTreeMap<String, ToolConfig> {
        let mut out: BTreeMap<String, ToolConfig> = self
            .offered
            .iter()
            .map(|o| {
                let mut t = configured.get(&o.name).cloned().unwrap_or_else(|| {
                    let hints = o.tool.annotations.as_ref();
                    let safe = hints.is_some_and(|a| a.idempotent_hint == Some(true) || a.read_only_hint == Some(true));
                    ToolConfig {
                        idempotent: safe,
                        timeout_ms: MCP_TIMEOUT_MS,
                        ..ToolConfig::default()
                    }
                });
                t.schema = toml::Value::try_from(serde_json::Value::Object((*o.tool.input_schema).clone())).ok();
                if t.description.is_empty() {
                    t.description = o.tool.description.as_deref().unwrap_or_default().to_string();
                }
                (o.name.clone(), t)
            })
            .collect();
        for family in Family::ALL {
            for server in self.offering(family) {
                let name = family.tool(self.name(server));
                let t = configured.get(&name).cloned().unwrap_or_else(|| ToolConfig {
                    idempotent: true,
                    timeout_ms: MCP_TIMEOUT_MS,
                    description: format!("{} of the MCP server {}", family.as_str(), self.name(server)),
                    ..ToolConfig::default()
                });
                out.insert(name, t);
            }
        }
        out
    }

    /// The catalog session with server `server`, while it has one; else its name.
    fn peer(&self, server: usize) -> Result<Peer<RoleClient>, &str> {
        let up = &self.servers[server];
        up.peer.read().clone().ok_or(up.name.as_str())
    }
}

/// The timeout of an MCP server's tools and requests that `[tools.NAME]`
/// does not set: the MCP SDKs' own default request timeout.
const MCP_TIMEOUT_MS: u64 = 60_000;

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
