//! The fusebox command line.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::traffic::load::run_scenario;
use fusebox::traffic::scenario::Scenario;
use fusebox::traffic::summary::Summary;
use std::path::PathBuf;
use std::time::Duration;

/// fusebox: an operator console and resilience runner for LLM agents.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Drive synthetic agent traffic through the runner against the mock fleet (default).
    Demo(DemoArgs),
    /// Validate a config file.
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
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
    },
}

#[derive(clap::Args, Default)]
struct DemoArgs {
    /// Run without the console and print a summary.
    #[arg(long)]
    headless: bool,
    /// Built-in scenario name or scenario TOML file.
    #[arg(long, default_value = "tour")]
    scenario: String,
    /// How much (virtual) time to simulate, e.g. 60s, 10m.
    #[arg(long, default_value = "10m", allow_hyphen_values = true)]
    duration: String,
    /// `max` (virtual time, as fast as possible) or a speed-up factor like 1 or 10.
    #[arg(long, default_value = "max", allow_hyphen_values = true)]
    speed: String,
    /// Write the summary JSON here.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Config file (default: the built-in config).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Seed for load, jitter and the mock fleet.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Spool file for deferred requests (default: a fresh file in the temp directory).
    #[arg(long)]
    spool: Option<PathBuf>,
}

fn parse_duration(s: &str) -> Result<Duration> {
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

enum Speed {
    Max,
    Factor(f64),
}

fn parse_speed(s: &str) -> Result<Speed> {
    if s == "max" {
        return Ok(Speed::Max);
    }
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(Speed::Factor(f)),
        _ => bail!("--speed {s}: use `max` or a positive number such as 1 or 10"),
    }
}

fn load_config(path: Option<&PathBuf>) -> Result<Config> {
    match path {
        Some(p) => Ok(Config::load(p)?),
        None => Ok(Config::default()),
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command.unwrap_or(Cmd::Demo(DemoArgs {
        scenario: "tour".into(),
        duration: "10m".into(),
        speed: "max".into(),
        seed: 42,
        ..DemoArgs::default()
    })) {
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
            Ok(())
        }
        Cmd::Bench {
            requests,
            threads,
            users,
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
            let r = fusebox::bench::run(requests, threads, users)?;
            println!("{}", serde_json::to_string(&r)?);
            Ok(())
        }
        Cmd::Demo(args) => demo(args),
    }
}

fn demo(args: DemoArgs) -> Result<()> {
    let duration = parse_duration(&args.duration)?;
    let speed = parse_speed(&args.speed)?;
    let scenario = Scenario::load(&args.scenario)?;
    let cfg = load_config(args.config.as_ref())?;
    let spool_dir;
    let configured = (!cfg.degradation.spool.is_empty()).then(|| PathBuf::from(&cfg.degradation.spool));
    let spool = match args.spool.or(configured) {
        Some(p) => p,
        None => {
            spool_dir = tempfile_dir()?;
            spool_dir.join("spool.jsonl")
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    let wall = std::time::Instant::now();
    let seed = Seed(args.seed);
    let summary = rt.block_on(async move {
        let clock = Clock::with_wall_anchor(0);
        let mut parts = RunnerParts::mock(clock, seed);
        parts.spool = Some(spool);
        let runner = Runner::new(cfg, parts)?;
        let mut events = runner.events().subscribe();
        if let Speed::Factor(f) = speed {
            tokio::spawn(pace(clock, f));
        }
        if !args.headless {
            eprintln!(
                "fusebox demo: scenario `{}` for {} — {}",
                scenario.name, args.duration, scenario.description
            );
            tokio::spawn(progress(runner.clone()));
        }
        let run = run_scenario(runner.clone(), &scenario, duration, seed).await;
        let mut seen = Vec::new();
        while let Ok(e) = events.try_recv() {
            seen.push(e);
        }
        let virtual_ms = clock.elapsed_ms();
        anyhow::Ok(Summary::build(
            &runner,
            &seen,
            run.lost,
            virtual_ms,
            wall.elapsed().as_millis() as u64,
        ))
    })?;
    let json = serde_json::to_string_pretty(&summary)?;
    match &args.summary_json {
        Some(p) => std::fs::write(p, format!("{json}\n")).with_context(|| format!("cannot write {}", p.display()))?,
        None => println!("{json}"),
    }
    if !args.headless {
        let b = &summary.by_level;
        eprintln!(
            "done: {} requests, none {} / fallback {} / partial {} / deferred {} / failed {}, lost {}, {} transitions, ${:.2}",
            summary.requests, b.none, b.fallback, b.partial, b.deferred, b.failed, summary.lost, summary.transitions.len(), summary.cost_usd
        );
    }
    if summary.lost > 0 {
        bail!("{} requests ended without an outcome", summary.lost);
    }
    Ok(())
}

/// A private temporary directory for the demo's spool.
fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("fusebox-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir)
}

/// Keeps virtual time from running ahead of wall time × `factor`.
async fn pace(clock: Clock, factor: f64) {
    let wall = std::time::Instant::now();
    loop {
        let ahead = clock.elapsed().as_secs_f64() / factor - wall.elapsed().as_secs_f64();
        if ahead > 0.0 {
            // Blocking on purpose: the paused clock only advances when the
            // runtime is idle, so holding the thread holds virtual time.
            std::thread::sleep(Duration::from_secs_f64(ahead));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Prints a status line every 30 s of virtual time.
async fn progress(runner: std::sync::Arc<Runner>) {
    loop {
        tokio::time::sleep(Duration::from_secs(30)).await;
        let s = runner.snapshot(0, 0);
        let open: Vec<&str> = s
            .breakers
            .iter()
            .filter(|b| {
                b.breaker
                    .state
                    .is_some_and(|st| st != fusebox::resilience::breaker::BreakerState::Closed)
            })
            .map(|b| b.name.as_str())
            .collect();
        eprintln!(
            "t={:>4}s requests={} none={} fallback={} partial={} deferred={} failed={} not-closed=[{}]",
            s.t_ms / 1000,
            s.requests,
            s.by_level[0],
            s.by_level[2],
            s.by_level[1],
            s.by_level[3],
            s.by_level[4],
            open.join(", ")
        );
    }
}
