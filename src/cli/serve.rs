//! `fusebox serve`: the gateway, with the console or a status line.

use super::args::{load_config, ConsoleArgs, RecordArgs, Speed, StateArgs};
use super::run::{hangups, interrupted, Run, Ui};
use crate::clock::{Clock, Seed};
use crate::gateway::{ConnLimits, GatewayOptions};
use crate::mcp::sessions::McpLimits;
use crate::mockserver::MockServer;
use crate::outcome::Level;
use crate::runner::{Runner, RunnerParts};
use crate::tui::app::{Mode, Options};
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// `fusebox serve`'s options.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Config file (default: the built-in config, routing to the mock providers).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Address to listen on; beyond loopback an auth token is required.
    #[arg(long, env = "FUSEBOX_LISTEN", default_value = "127.0.0.1:8787")]
    pub listen: String,
    /// Where operators reach this gateway, published in the fleet's
    /// heartbeats for `fusebox attach --state` [default: http://LISTEN,
    /// with 127.0.0.1 for an unspecified address].
    #[arg(long)]
    pub advertise: Option<String>,
    /// Print a status line every few seconds instead of the console.
    #[arg(long)]
    pub headless: bool,
    /// Environment variable holding the bearer token clients must send.
    #[arg(long)]
    pub auth_token_env: Option<String>,
    /// Off loopback, serve calls that carry no caller key, each as the
    /// user it names (without it, a gateway with no caller keys refuses
    /// to start there).
    #[arg(long)]
    pub allow_anonymous: bool,
    /// Largest request body accepted, in bytes (larger ones get 413).
    #[arg(long, default_value_t = crate::gateway::DEFAULT_MAX_BODY)]
    pub max_body_bytes: usize,
    /// Client connections open at once at most: past it a new one takes
    /// the slot of the one waiting longest on its client (idle, or its
    /// request still arriving), or is closed as it arrives when all are
    /// busy.
    /// [default: 4096, or fewer where the limit on open files leaves room
    /// for fewer; a number above that room is refused]
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Seconds a client may take to send a request's headers (and a
    /// keep-alive connection may stay idle) before it is closed.
    #[arg(long, default_value_t = ConnLimits::default().header_timeout.as_secs())]
    pub header_timeout_s: u64,
    /// Seconds a client may take to send a request's body, from its
    /// headers on (408 past it, and the connection closed).
    #[arg(long, default_value_t = ConnLimits::default().body_timeout.as_secs())]
    pub body_timeout_s: u64,
    /// MCP sessions open at once at `/mcp`, in all; past it an
    /// `initialize` is refused (503).
    #[arg(long, default_value_t = McpLimits::default().sessions)]
    pub mcp_sessions: usize,
    /// MCP sessions one caller key may hold open at once (past it, 429).
    #[arg(long, default_value_t = McpLimits::default().per_key)]
    pub mcp_sessions_per_key: usize,
    /// Seconds an MCP session may stay unused before it is closed.
    #[arg(long, default_value_t = McpLimits::default().idle.as_secs())]
    pub mcp_idle_s: u64,
    /// On SIGTERM, Ctrl-C or `q`, how long requests in flight may take to
    /// finish (none are taken meanwhile) before the rest end on an error.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// Seed for the mock providers.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Threads serving requests [default: half the cores, at least one].
    /// Fewer threads wake less often: at moderate rates a request costs
    /// less CPU on one thread than spread over several.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Shared state.
    #[command(flatten)]
    pub state: StateArgs,
    /// Recording.
    #[command(flatten)]
    pub record: RecordArgs,
    /// The console.
    #[command(flatten)]
    pub console: ConsoleArgs,
}

impl ServeArgs {
    /// The token clients must send, from `--auth-token-env`.
    fn auth_token(&self) -> Result<Option<String>> {
        let Some(var) = &self.auth_token_env else {
            return Ok(None);
        };
        match std::env::var(var) {
            Ok(t) if !t.trim().is_empty() => Ok(Some(t.trim().to_string())),
            _ => bail!("--auth-token-env {var}: the variable {var} is not set or empty; export it with the token clients must send"),
        }
    }

    /// Client connections at most: `--max-connections`, refused when the
    /// limit on open files leaves no room for that many (each with its
    /// upstream call); by default 4,096, or as many as that room holds.
    fn connections(&self) -> Result<usize> {
        let room = crate::descriptors::connection_room();
        let default = ConnLimits::default().max_connections;
        match (self.max_connections, room) {
            (Some(n), Some(room)) if n as u64 > room => bail!(
                "--max-connections {n}: the limit on open files leaves descriptors for {room} client connections beside their upstream calls; give at most {room}, or raise the hard limit (`ulimit -Hn`, systemd's LimitNOFILE, a container's nofile ulimit)"
            ),
            (Some(n), _) => Ok(n.max(1)),
            (None, Some(room)) if room < default as u64 => {
                eprintln!(
                    "note: the limit on open files leaves room for {room} client connections, not the default {default}: serving at most {room} (raise `ulimit -Hn` for more)"
                );
                Ok(room as usize)
            }
            (None, _) => Ok(default),
        }
    }

    /// The runtime: one thread and no console is a current-thread runtime,
    /// which wakes and schedules with less work than a one-worker
    /// multi-thread one. (The console draws on the main thread, so it
    /// keeps the requests apart on a worker.)
    fn runtime(&self, console: bool) -> Result<tokio::runtime::Runtime> {
        let threads = self
            .threads
            .filter(|&t| t > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() / 2).max(1));
        let mut rt = match threads {
            1 if !console => tokio::runtime::Builder::new_current_thread(),
            n => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(n);
                b
            }
        };
        Ok(rt.enable_all().build()?)
    }
}

/// Serves until the console quits or Ctrl-C.
pub fn serve(mut args: ServeArgs) -> Result<()> {
    let mut cfg = load_config(args.config.as_ref())?;
    // A gateway calls no tools of its own (its agents run theirs), only
    // those of the MCP servers it stands in front of: the console and
    // `/metrics` show only what it can call. The built-in tools are the
    // demo's: they leave the servers' tools at the defaults.
    let own = cfg.has_own_tools();
    // What a reload compares its file with.
    let read_at_start = cfg.clone();
    let configured = std::mem::take(&mut cfg.tools);
    let configured = if own { configured } else { Default::default() };
    let auth_token = args.auth_token()?;
    let max_connections = args.connections()?;
    let state = args.state.redis(&cfg, Speed::Factor(1.0))?;
    let ui = Ui::setup(args.headless, &args.console, Speed::Factor(1.0), "serve")?;
    let rt = args.runtime(ui.is_some())?;
    let seed = Seed(args.seed);
    rt.block_on(async move {
        let clock = Clock::system();
        let mut parts = RunnerParts::mock(clock, seed);
        // The mock providers (mock-kind) answer over loopback HTTP,
        // sharing the runner's fault table, as in the demo.
        let mock = if cfg.providers.values().any(|p| p.kind == crate::config::ProviderKind::Mock) {
            let addr = MockServer::new(seed, parts.faults.clone()).spawn("127.0.0.1:0").await?;
            Some(format!("http://{addr}"))
        } else {
            None
        };
        parts.providers = crate::provider::http::build(&cfg, clock, mock.as_deref())?;
        let mcp = if cfg.mcp.is_empty() {
            None
        } else {
            let upstreams = crate::mcp::Upstreams::connect(&cfg.mcp).await?;
            cfg.tools = upstreams.tool_configs(&configured);
            // A recording says what they were, for its replay.
            args.record.tools = cfg.tools.clone();
            parts.tools = Some(Arc::new(crate::mcp::McpTools(upstreams.clone())));
            Some(upstreams)
        };
        let runner = Runner::new(cfg, parts)?;
        if let Some(path) = &args.config {
            runner.operations().reload_from(path.clone(), read_at_start);
        }
        // Real time: nothing to pace.
        let mut run = Run::start(runner.clone(), &args.record, seed.0, None, state.as_ref()).await?;
        let opts = GatewayOptions {
            auth_token,
            max_body: args.max_body_bytes,
            readonly: args.console.readonly,
            conns: ConnLimits {
                max_connections,
                header_timeout: Duration::from_secs(args.header_timeout_s.max(1)),
                body_timeout: Duration::from_secs(args.body_timeout_s.max(1)),
            },
            fleet: run.fleet().cloned(),
            mcp,
            mcp_limits: McpLimits {
                sessions: args.mcp_sessions.max(1),
                per_key: args.mcp_sessions_per_key.max(1),
                idle: Duration::from_secs(args.mcp_idle_s.max(1)),
            },
            records_dropped: run.records_dropped().unwrap_or_default(),
            traces: run.tracing().map(crate::otel::Tracing::parents),
            allow_anonymous: args.allow_anonymous,
        };
        let offered = opts.mcp.as_ref().map(|u| u.offered().len());
        let serving = crate::gateway::spawn(runner.clone(), &args.listen, opts).await?;
        let (addr, closer) = (serving.addr, serving.closer);
        let drain = args.drain_timeout;
        let base = format!("http://{addr}/v1");
        if let Some(fleet) = run.fleet() {
            fleet.advertise(&args.advertise.clone().unwrap_or_else(|| advertised(addr)));
        }
        if let Some(ui) = ui {
            let o = Options {
                mode: Mode::Serve,
                readonly: args.console.readonly_reason(),
                yes: args.console.yes,
                operator: args.console.operator_name(),
                source: format!("gateway {base}"),
                replay_length_ms: None,
                replay: None,
            };
            let shown = run.show(ui, o).await;
            close(closer, drain).await;
            run.finish()?;
            return Ok(shown?);
        }
        // Heard from before the address is said: whoever reads it may
        // signal at once (SIGHUP's default would end the process).
        // Created once, so a Ctrl-C during a tick is not missed.
        let stop = interrupted();
        tokio::pin!(stop);
        let mut hup = hangups();
        // Said on stderr, which may have been closed (`2>&1 | head -1`):
        // the gateway goes on serving all the same.
        let say = |line: String| {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "{line}");
        };
        say(format!("fusebox serve: gateway on {base} (POST /chat/completions, /messages, /responses, /embeddings; GET /models; /metrics, /healthz, /readyz at the root) · Ctrl-C to stop"));
        for n in &serving.notes {
            say(format!("fusebox serve: {n}"));
        }
        if let Some(n) = offered {
            say(format!("fusebox serve: MCP at http://{addr}/mcp, {n} tools of the [mcp] servers behind their breakers"));
        }
        if let Some(t) = run.tracing() {
            say(format!("fusebox serve: traces to {} (OTLP/HTTP)", t.endpoint()));
        }
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut n = 0u64;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    runner.maintain();
                    n += 1;
                    if n.is_multiple_of(5) {
                        status(&runner);
                    }
                }
                // Its own task: the loop keeps its ticks and hears Ctrl-C meanwhile.
                Some(()) = hup.recv() => drop(tokio::spawn(reload(runner.clone()))),
                _ = &mut stop => break,
            }
        }
        close(closer, drain).await;
        run.finish()?;
        status(&runner);
        anyhow::Ok(())
    })
}

/// Reads the config again and applies what can change in place (breaker
/// settings, states kept); a file that does not read (in time), or a
/// change that needs a restart, is refused and nothing changes. Said on
/// stderr.
async fn reload(runner: Arc<Runner>) {
    use std::io::Write;
    let line = match runner.operations().reload_file().await {
        Ok(done) => format!("fusebox serve: reloaded {done}"),
        Err(why) => format!("fusebox serve: reload refused: {why}"),
    };
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Closes the gateway losing no request: none taken any more, those in
/// flight given `drain` to finish, the rest ended on an error; said on
/// stderr as it goes.
async fn close(closer: crate::gateway::closing::Closer, drain: Duration) {
    use std::io::Write;
    let say = |line: String| {
        let _ = writeln!(std::io::stderr(), "{line}");
    };
    let mut first = true;
    let closed = closer
        .close(drain, |n| {
            if std::mem::take(&mut first) && n > 0 {
                say(format!(
                    "fusebox serve: closing: {n} request(s) in flight, waiting up to {} s for them",
                    drain.as_secs()
                ));
            }
        })
        .await;
    match closed.cut {
        0 => say(format!(
            "fusebox serve: closed: {} request(s) in flight finished",
            closed.in_flight
        )),
        cut => say(format!(
            "fusebox serve: closed: {} request(s) in flight, {cut} ended on an error at the {} s drain time",
            closed.in_flight,
            drain.as_secs()
        )),
    }
}

/// The admin URL of a gateway listening on `addr`: an unspecified address
/// is reached on loopback.
fn advertised(mut addr: std::net::SocketAddr) -> String {
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("http://{addr}")
}

/// Prints the status line; a closed stderr (the terminal went away) is not
/// a reason to stop serving.
fn status(runner: &Runner) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{}", status_line(runner));
}

/// One line of gateway health: requests by level, open breakers, tokens.
fn status_line(runner: &Runner) -> String {
    let lv = runner.by_level();
    let now = runner.clock().now();
    let reg = runner.catalog().registry();
    let open: Vec<String> = reg
        .iter()
        .filter(|t| !t.breaker.would_admit(now))
        .map(|t| t.target.to_string())
        .collect();
    format!(
        "requests {} (none {}, partial {}, fallback {}, failed {}) · open breakers: {} · tokens {} · store {}",
        lv.iter().sum::<u64>(),
        lv[Level::None.index()],
        lv[Level::Partial.index()],
        lv[Level::Fallback.index()],
        lv[Level::Failed.index()],
        if open.is_empty() {
            "none".to_string()
        } else {
            open.join(", ")
        },
        runner.totals().tokens.load(std::sync::atomic::Ordering::Relaxed),
        runner.store().view().label()
    )
}
