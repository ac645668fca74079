//! The command line: one file per command, the options they share
//! (`args`), and one way to run the runner that every command ends in
//! (`run`).

pub mod args;
pub mod attach;
mod compare;
pub mod demo;
pub mod import;
pub mod keys;
pub mod replay;
pub mod run;
pub mod serve;

use crate::clock::Seed;
use crate::config::Config;
use crate::mockserver::MockServer;
use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// fusebox: an operator console and resilience runner for LLM agents.
#[derive(Parser)]
#[command(name = "fusebox", version, about, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Without a command, `fusebox [OPTIONS]` is `fusebox demo [OPTIONS]`.
    #[command(flatten)]
    demo: demo::DemoArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Drive synthetic agent traffic through the runner against the mock providers (default).
    Demo(Box<demo::DemoArgs>),
    /// Re-drive a recorded traffic log through the runner (incident reproduction, what-if).
    Replay(Box<replay::ReplayArgs>),
    /// Serve an OpenAI-compatible gateway: agents point their base URL here.
    Serve(Box<serve::ServeArgs>),
    /// Write traffic recorded elsewhere (OTLP/JSON traces) as a traffic log.
    Import(import::ImportArgs),
    /// Open the console over running gateways (`fusebox serve` instances).
    Attach(Box<attach::AttachArgs>),
    /// Validate a config file.
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
    /// Serve the mock providers over HTTP in the providers' real wire formats.
    Mock {
        /// Address to listen on (loopback by default).
        #[arg(long, default_value = "127.0.0.1:8790")]
        listen: String,
        /// Seed for the mock's answers.
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Make caller keys and operator tokens (printed once; the config keeps their hashes).
    #[command(subcommand)]
    Keys(keys::KeysCmd),
    /// Measure the decision path with an instant provider on all cores.
    Bench {
        /// Decisions to make.
        #[arg(long, default_value_t = 4_000_000)]
        requests: u64,
        /// Worker threads (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Distinct users the requests are spread over.
        #[arg(long, default_value_t = 10_000)]
        users: u64,
        /// Join a fleet on Redis (`redis://HOST:PORT/DB`): limits are leased.
        #[arg(long)]
        state: Option<String>,
        /// Trace every decision as a request to this OTLP/HTTP collector (e.g. http://127.0.0.1:4318).
        #[arg(long, value_name = "URL")]
        otlp_endpoint: Option<String>,
        /// Turn on the overload controls (adaptive concurrency, the
        /// priority queue, the spend-rate breakers), watching every call
        /// though the load never trips them.
        #[arg(long)]
        overload_control: bool,
    },
}

/// Parses the command line and runs it; the process's exit status (2 on
/// an error, said on stderr).
pub fn main() -> i32 {
    let cli = Cli::parse();
    // Where the diagnostic log goes, and whether the terminal is free for it.
    let (log_dir, headless) = match &cli.command {
        Some(Cmd::Demo(a)) => (a.console.log_dir.clone(), a.headless),
        Some(Cmd::Serve(a)) => (a.console.log_dir.clone(), a.headless),
        Some(Cmd::Replay(a)) => (a.console.log_dir.clone(), a.headless),
        Some(Cmd::Attach(a)) => (a.console.log_dir.clone(), false),
        None => (cli.demo.console.log_dir.clone(), cli.demo.headless),
        _ => (None, true),
    };
    let log_dir = log_dir.unwrap_or_else(crate::log_dir);
    if log_dir.as_os_str() == "-" && !headless {
        eprintln!("error: --log-dir -: the console owns the terminal; log to stderr only with --headless");
        return 2;
    }
    let _log = logging(&log_dir);
    match crate::descriptors::raise() {
        Ok(limit) => tracing::info!(limit, "open files"),
        Err(e) => tracing::warn!(error = %e, "cannot read or raise the limit on open files"),
    }
    match dispatch(cli) {
        Ok(()) => 0,
        Err(e) => {
            let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("error: {e:#}\n"));
            2
        }
    }
}

/// Diagnostic logs go to a daily-rolling file in `dir` (the terminal
/// belongs to the UI), or to stderr where `dir` is `-` (a headless run in
/// a container, whose platform collects it; stdout stays the command's
/// own output: status lines, summaries, keys); the returned guard
/// flushes them on exit. Level from `FUSEBOX_LOG`.
fn logging(dir: &std::path::Path) -> Option<tracing_appender::non_blocking::WorkerGuard> {
    // Lines waiting for the writer thread: the default, 128,000, is a 4 MB
    // queue set up (and its pages touched) before any work starts.
    let queue = tracing_appender::non_blocking::NonBlockingBuilder::default().buffered_lines_limit(8_192);
    let (writer, guard) = if dir.as_os_str() == "-" {
        queue.finish(std::io::stderr())
    } else {
        if std::fs::create_dir_all(dir).is_err() {
            return None;
        }
        queue.finish(tracing_appender::rolling::daily(dir, "fusebox.log"))
    };
    // rmcp's sessions are `info` spans entered on every poll of every MCP
    // message; its warnings and errors still reach the log.
    let filter = tracing_subscriber::EnvFilter::try_from_env("FUSEBOX_LOG").unwrap_or_else(|_| "info,rmcp=warn".into());
    let ok = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .with_env_filter(filter)
        .try_init();
    ok.is_ok().then_some(guard)
}

fn dispatch(cli: Cli) -> Result<()> {
    match cli.command.unwrap_or(Cmd::Demo(Box::new(cli.demo))) {
        Cmd::Demo(args) => demo::demo(*args),
        Cmd::Serve(args) => serve::serve(*args),
        Cmd::Replay(args) => replay::replay(*args),
        Cmd::Attach(args) => attach::attach(*args),
        Cmd::Import(args) => import::import(args),
        Cmd::CheckConfig { file } => {
            let cfg = Config::load(&file)?;
            println!(
                "{}: ok ({} providers, {} models, {} routes, {} tools)",
                file.display(),
                cfg.providers.len(),
                cfg.models.len(),
                cfg.routes.len(),
                cfg.tools.len()
            );
            // The file is valid either way; where it will run is another matter.
            for (name, p) in &cfg.providers {
                if p.kind == crate::config::ProviderKind::Bedrock {
                    if let Err(why) = crate::provider::aws::credentials(p.aws_profile.as_deref()) {
                        eprintln!(
                            "note: providers.{name}: {why}; `fusebox serve` does not start without AWS credentials"
                        );
                    }
                }
                if let Some(path) = &p.api_key_file {
                    if let Err(e) = crate::provider::http::api_key_from(name, path) {
                        eprintln!("note: {e}; `fusebox serve` does not start without it");
                    }
                    continue;
                }
                let Some((key, var)) = p.credential_env() else { continue };
                if std::env::var(var).map_or(true, |v| v.is_empty()) {
                    eprintln!(
                        "note: providers.{name}.{key}: ${var} is not set here; `fusebox serve` does not start without it"
                    );
                }
            }
            Ok(())
        }
        Cmd::Bench {
            requests,
            threads,
            users,
            state,
            otlp_endpoint,
            overload_control,
        } => {
            let threads = threads
                .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
                .max(1);
            if requests == 0 {
                bail!("--requests must be at least 1");
            }
            if users == 0 {
                bail!("--users must be at least 1");
            }
            let otlp = otlp_endpoint.as_deref().and_then(|u| crate::otel::endpoint(Some(u)));
            let shape = crate::bench::Shape {
                threads,
                users,
                overload_control,
            };
            let r = crate::bench::run(requests, shape, state.as_deref(), otlp.as_deref())?;
            println!("{}", serde_json::to_string(&r)?);
            Ok(())
        }
        Cmd::Mock { listen, seed } => mock(&listen, seed),
        Cmd::Keys(cmd) => keys::keys(cmd),
    }
}

/// `fusebox mock`: serves the mock providers until Ctrl-C.
fn mock(listen: &str, seed: u64) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let faults = std::sync::Arc::new(crate::provider::fault::FaultTable::default());
        let server = MockServer::keyless(Seed(seed), faults);
        let addr = server.spawn(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
        eprintln!("fusebox mock: serving OpenAI (/v1/chat/completions), DeepSeek (/chat/completions) and Anthropic (/v1/messages) on http://{addr}");
        eprintln!("faults: GET/PUT http://{addr}/_fusebox/faults · Ctrl-C to stop");
        run::interrupted().await;
        anyhow::Ok(())
    })
}
