//! What the MCP proxy adds to a tool call: the same `tools/call` made
//! straight to an MCP server and through fusebox's `/mcp` in front of it,
//! in alternating rounds from one client session each, and the p50 and
//! p99 of each. The server (an `rmcp` server answering at once) is a
//! process of its own, as an MCP server is (this example run with
//! `--upstream`; `--same-process` keeps it in the clients' process and
//! thread instead, which spares the direct calls every wake-up of another
//! process); the clients run in this process; the gateway is `fusebox
//! serve --headless` (the release binary, `--threads 1` by default) as
//! its own process, all on loopback.
//!
//! With `--bare`, the same calls also go through a bare `rmcp` proxy
//! (`examples/mcp_bare_proxy.rs`, its own process too): the floor any
//! proxy built on `rmcp` has on this machine.
//!
//! Run: `cargo build --profile dist --examples --bins && cargo run --profile dist
//! --example mcp_overhead -- --bare target/dist/examples/mcp_bare_proxy`
//! (`--calls 2000 --rounds 5 --threads 1 --fusebox target/dist/fusebox`).
//!
//! Each proxy's CPU per call is read from `/proc`; the difference is
//! fusebox's own work. To count it in instructions instead, give
//! `--fusebox` and `--bare` scripts that `exec valgrind --tool=callgrind
//! --log-file=… PROGRAM "$@"` and run twice with different `--calls`
//! (`--rounds 1 --open-calls 0`): the difference of the totals over the
//! difference of the calls is the instructions per call.

use clap::Parser;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// Calls per round and side.
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Rounds (direct, then proxied, each).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// The gateway's threads (`serve --threads`).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// The fusebox binary.
    #[arg(long, default_value = "target/dist/fusebox")]
    fusebox: std::path::PathBuf,
    /// Also through this bare `rmcp` proxy (`examples/mcp_bare_proxy.rs`),
    /// the floor any `rmcp` proxy has on this machine.
    #[arg(long)]
    bare: Option<std::path::PathBuf>,
    /// Calls with the breaker forced open (by default `--calls`; 0 skips
    /// them, to count the proxied calls' instructions alone).
    #[arg(long)]
    open_calls: Option<usize>,
    /// Keep the MCP server in this process, on the clients' thread.
    #[arg(long)]
    same_process: bool,
    /// Be the MCP server only (what the harness starts).
    #[arg(long)]
    upstream: bool,
}

/// A child process (`fusebox serve`, a proxy, the MCP server), killed on drop.
struct Gateway(std::process::Child);

impl Gateway {
    /// CPU time its threads have run so far (ns), from `/proc`'s
    /// per-thread scheduler counts (precise where `utime` counts ticks).
    fn cpu_ns(&self) -> u64 {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.0.id())) else {
            return 0;
        };
        tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }
}

impl Drop for Gateway {
    /// SIGTERM first, so that a process run under a profiler (callgrind,
    /// through a wrapper script) writes its counts; killed if it lingers.
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        for _ in 0..200 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50)); // its exit
        }
        let _ = self.0.kill();
    }
}

/// The bare proxy in front of the MCP server at `url`, and its `/mcp` URL.
fn bare(program: &std::path::Path, url: &str) -> anyhow::Result<(Gateway, String)> {
    let child = std::process::Command::new(program)
        .arg(url)
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    first_url(child)
}

/// `fusebox serve` in front of the MCP server at `url`, and its `/mcp` URL.
/// (It blocks: run it off the runtime, which serves the MCP server it
/// connects to at start.)
fn gateway(
    fusebox: &std::path::Path,
    threads: usize,
    url: &str,
    dir: &std::path::Path,
) -> anyhow::Result<(Gateway, String)> {
    let config = dir.join("mcp.toml");
    std::fs::write(&config, format!("[mcp.orders]\nurl = \"{url}\"\n"))?;
    let child = std::process::Command::new(fusebox)
        .args(["serve", "--headless", "--listen", "127.0.0.1:0", "--threads"])
        .arg(threads.to_string())
        .arg("--config")
        .arg(&config)
        .arg("--log-dir")
        .arg(dir)
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let (gw, base) = first_url(child)?;
    Ok((gw, format!("{}/mcp", base.trim_end_matches("/v1"))))
}

/// The child, and the first `http://…` its stderr says.
fn first_url(mut child: std::process::Child) -> anyhow::Result<(Gateway, String)> {
    use std::io::BufRead;
    let stderr = child.stderr.take().ok_or_else(|| anyhow::anyhow!("no stderr"))?;
    let gw = Gateway(child);
    let mut first = String::new();
    let mut lines = std::io::BufReader::new(stderr);
    lines.read_line(&mut first)?;
    // Keep reading what it says, as a terminal would.
    std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .ok_or_else(|| anyhow::anyhow!("no address in `{first}`"))?
        .to_string();
    Ok((gw, url))
}

#[derive(Clone)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = serde_json::json!({"type": "object", "properties": {"order_id": {"type": "string"}}});
        let tool = Tool::new(
            "get_order",
            "Look an order up",
            Arc::new(schema.as_object().cloned().unwrap_or_default()),
        );
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        r: CallToolRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = serde_json::Value::Object(r.arguments.unwrap_or_default());
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("order {args}: shipped"))]).into())
    }
}

/// One round's p50 and p99 (µs): direct, through fusebox, through the
/// bare proxy; and each proxy's CPU per call (µs): fusebox, the bare proxy.
struct Round {
    latency: [(f64, f64); 3],
    cpu: [f64; 2],
}

/// `calls` calls through `client`: their p50 and p99 (µs), and the CPU per
/// call (µs) of the proxy `via` in front of the server, if any.
async fn timed(
    client: &rmcp::service::RunningService<rmcp::service::RoleClient, ()>,
    calls: usize,
    via: Option<&Gateway>,
) -> ((f64, f64), f64) {
    let before = via.map_or(0, Gateway::cpu_ns);
    let latency = round(client, calls).await;
    let cpu = via.map_or(f64::NAN, |g| (g.cpu_ns() - before) as f64 / 1e3 / calls as f64);
    (latency, cpu)
}

/// The MCP server on loopback: its `/mcp` URL and the future serving it.
async fn upstream() -> anyhow::Result<(String, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let svc = rmcp::transport::streamable_http_server::StreamableHttpService::new(
        || Ok(Echo),
        Arc::new(rmcp::transport::streamable_http_server::session::local::LocalSessionManager::default()),
        Default::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    let app = axum::Router::new().nest_service("/mcp", svc);
    Ok((url, tokio::spawn(async move { axum::serve(listener, app).await })))
}

/// The p50 and p99 (µs) of `calls` calls through `client`.
async fn round(client: &rmcp::service::RunningService<rmcp::service::RoleClient, ()>, calls: usize) -> (f64, f64) {
    answers(client, calls, false).await
}

/// The p50 and p99 (µs) of `calls` calls through `client`, each answered
/// with `isError` or not, as `failing` says.
async fn answers(
    client: &rmcp::service::RunningService<rmcp::service::RoleClient, ()>,
    calls: usize,
    failing: bool,
) -> (f64, f64) {
    let mut took = Vec::with_capacity(calls);
    for i in 0..calls {
        let mut p = CallToolRequestParams::new("get_order");
        p.arguments = serde_json::json!({"order_id": i.to_string()}).as_object().cloned();
        let t = Instant::now();
        let r = client.call_tool(p).await.expect("a tool answer");
        took.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(r.is_error == Some(true), failing, "unexpected answer: {r:?}");
    }
    took.sort_by(f64::total_cmp);
    (took[calls / 2], took[calls * 99 / 100])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The MCP clients' HTTP client takes the process's TLS provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The MCP server, and its process when it has one of its own.
    let (url, _upstream_process) = if args.upstream {
        let (url, server) = upstream().await?;
        eprintln!("mcp_overhead upstream: {url}");
        return Ok(server.await??);
    } else if args.same_process {
        (upstream().await?.0, None)
    } else {
        let child = std::process::Command::new(std::env::current_exe()?)
            .arg("--upstream")
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let (gw, url) = first_url(child)?;
        (url, Some(gw))
    };

    let dir = tempfile::tempdir()?;
    let (fusebox, threads, at, path) = (
        args.fusebox.clone(),
        args.threads,
        url.clone(),
        dir.path().to_path_buf(),
    );
    let (gateway, proxied_url) = tokio::task::spawn_blocking(move || gateway(&fusebox, threads, &at, &path)).await??;
    let bare_proxy = match &args.bare {
        Some(program) => {
            let (program, at) = (program.clone(), url.clone());
            Some(tokio::task::spawn_blocking(move || bare(&program, &at)).await??)
        }
        None => None,
    };

    let connect =
        |u: String| async move { ().serve(rmcp::transport::StreamableHttpClientTransport::from_uri(u)).await };
    let direct = connect(url).await?;
    let proxied = connect(proxied_url.clone()).await?;
    let bare_client = match &bare_proxy {
        Some((_, u)) => Some(connect(u.clone()).await?),
        None => None,
    };
    // Warm every path.
    round(&direct, 200).await;
    round(&proxied, 200).await;
    if let Some(b) = &bare_client {
        round(b, 200).await;
    }
    let mut rounds: Vec<Round> = Vec::new();
    for r in 0..args.rounds {
        let d = round(&direct, args.calls).await;
        let (p, p_cpu) = timed(&proxied, args.calls, Some(&gateway)).await;
        let (b, b_cpu) = match (&bare_client, &bare_proxy) {
            (Some(b), Some((gw, _))) => timed(b, args.calls, Some(gw)).await,
            _ => ((f64::NAN, f64::NAN), f64::NAN),
        };
        println!(
            "round {r}: direct p50 {:.0} µs p99 {:.0} µs · fusebox p50 {:.0} µs p99 {:.0} µs, CPU {p_cpu:.1} µs a call · bare rmcp proxy p50 {:.0} µs p99 {:.0} µs, CPU {b_cpu:.1} µs a call",
            d.0, d.1, p.0, p.1, b.0, b.1
        );
        rounds.push(Round {
            latency: [d, p, b],
            cpu: [p_cpu, b_cpu],
        });
    }
    let med = |f: &dyn Fn(&Round) -> f64| median(rounds.iter().map(f).collect());
    println!(
        "median over {} rounds of {} calls: direct p50 {:.0} µs (p99 {:.0}), fusebox p50 {:.0} µs (p99 {:.0}), CPU {:.1} µs a call; fusebox adds {:.0} µs at p50",
        args.rounds,
        args.calls,
        med(&|r| r.latency[0].0),
        med(&|r| r.latency[0].1),
        med(&|r| r.latency[1].0),
        med(&|r| r.latency[1].1),
        med(&|r| r.cpu[0]),
        med(&|r| r.latency[1].0 - r.latency[0].0),
    );
    if bare_client.is_some() {
        println!(
            "a bare rmcp proxy: p50 {:.0} µs (p99 {:.0}), CPU {:.1} µs a call, adding {:.0} µs at p50; over it fusebox adds {:.0} µs at p50 and {:.1} µs of CPU a call (its own work)",
            med(&|r| r.latency[2].0),
            med(&|r| r.latency[2].1),
            med(&|r| r.cpu[1]),
            med(&|r| r.latency[2].0 - r.latency[0].0),
            med(&|r| r.latency[1].0 - r.latency[2].0),
            med(&|r| r.cpu[0] - r.cpu[1]),
        );
    }
    // The breaker forced open: every call is answered by fusebox at once,
    // `isError` with when to retry, and never reaches the server.
    let open_calls = args.open_calls.unwrap_or(args.calls);
    if open_calls == 0 {
        return Ok(());
    }
    let commands = proxied_url.replace("/mcp", "/_fusebox/commands");
    let body = serde_json::json!({"action": "force_open", "target": "tool:get_order"});
    let applied = reqwest::Client::new().post(commands).json(&body).send().await?;
    anyhow::ensure!(applied.status().is_success(), "force_open: {}", applied.status());
    let open = answers(&proxied, open_calls, true).await;
    println!(
        "breaker open: the unavailable answer in p50 {:.0} µs (p99 {:.0}) through fusebox, no server call",
        open.0, open.1
    );
    Ok(())
}
