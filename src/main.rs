//! The fusebox command line.

/// mimalloc: the agent loop and the replay allocate many small, short-lived
/// objects across threads, where it is markedly faster than the system one.
#[global_allocator]
static GLOBAL: fusebox::alloc::Mimalloc = fusebox::alloc::Mimalloc;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::mockserver::MockServer;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::traffic::load::run_scenario;
use fusebox::traffic::log::LogReader;
use fusebox::traffic::pace::Pace;
use fusebox::traffic::record::{Content, RecordOptions, Recorder};
use fusebox::traffic::replay::{RecordedFleet, ReplayOptions};
use fusebox::traffic::scenario::Scenario;
use fusebox::traffic::summary::{collect_transitions, Summary};
use fusebox::tui::app::{Mode, Options};
use fusebox::tui::keymap::KeyMap;
use fusebox::tui::theme::Theme;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// fusebox: an operator console and resilience runner for LLM agents.
#[derive(Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Without a command, `fusebox [OPTIONS]` is `fusebox demo [OPTIONS]`.
    #[command(flatten)]
    demo: DemoArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Drive synthetic agent traffic through the runner against the mock fleet (default).
    Demo(Box<DemoArgs>),
    /// Re-drive a recorded traffic log through the runner (incident reproduction, what-if).
    Replay(Box<ReplayArgs>),
    /// Serve an OpenAI-compatible gateway: agents point their base URL here.
    Serve(Box<ServeArgs>),
    /// Validate a config file.
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
    /// Serve the mock fleet over HTTP in the providers' real wire formats.
    Mock {
        /// Address to listen on (loopback by default).
        #[arg(long, default_value = "127.0.0.1:8790")]
        listen: String,
        /// Seed for the mock's answers.
        #[arg(long, default_value_t = 42)]
        seed: u64,
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
        /// Join a fleet on Redis (`redis://HOST:PORT/DB`): limits are leased.
        #[arg(long)]
        state: Option<String>,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Config file (default: the built-in config, routing to the mock fleet).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on; beyond loopback an auth token is required.
    #[arg(long, default_value = "127.0.0.1:8787")]
    listen: String,
    /// Print a status line every few seconds instead of the console.
    #[arg(long)]
    headless: bool,
    /// Environment variable holding the bearer token clients must send.
    #[arg(long)]
    auth_token_env: Option<String>,
    /// Largest request body accepted, in bytes (larger ones get 413).
    #[arg(long, default_value_t = fusebox::gateway::DEFAULT_MAX_BODY)]
    max_body_bytes: usize,
    /// Client connections open at once at most; more are closed as they
    /// arrive (keep it under the process's file-descriptor limit).
    #[arg(long, default_value_t = fusebox::gateway::ConnLimits::default().max_connections)]
    max_connections: usize,
    /// Seconds a client may take to send a request's headers (and a
    /// keep-alive connection may stay idle) before it is closed.
    #[arg(long, default_value_t = fusebox::gateway::ConnLimits::default().header_timeout.as_secs())]
    header_timeout_s: u64,
    /// Seed for the mock fleet.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Threads serving requests [default: half the cores, at least one].
    /// Fewer threads wake less often: at moderate rates a request costs
    /// less CPU on one thread than spread over several.
    #[arg(long)]
    threads: Option<usize>,
    #[command(flatten)]
    state: StateArgs,
    #[command(flatten)]
    record: RecordArgs,
    #[command(flatten)]
    console: ConsoleArgs,
}

#[derive(clap::Args)]
struct DemoArgs {
    /// Run without the console and print a summary.
    #[arg(long)]
    headless: bool,
    /// Built-in scenario name or scenario TOML file.
    #[arg(long, default_value = "tour")]
    scenario: String,
    /// How much (virtual) time to simulate, e.g. 60s, 10m [default: 10m headless, 8h in the console].
    #[arg(long, allow_hyphen_values = true)]
    duration: Option<String>,
    /// `max` (virtual time, as fast as possible) or a speed-up factor like 1 or 10
    /// [default: max headless, 1 in the console].
    #[arg(long, allow_hyphen_values = true)]
    speed: Option<String>,
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
    /// How the mock fleet is reached: `http` (an in-process mock server on a
    /// loopback port, real sockets) or `mock` (in-process calls)
    /// [default: http in real time, mock with --speed max].
    #[arg(long, value_parser = ["http", "mock"])]
    providers: Option<String>,
    #[command(flatten)]
    state: StateArgs,
    #[command(flatten)]
    record: RecordArgs,
    #[command(flatten)]
    console: ConsoleArgs,
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// The traffic log (JSONL, format v1); a log rotated by --rotate-mb as its segments in order (FILE.1 FILE.2 … FILE).
    #[arg(required = true, value_name = "LOG")]
    logs: Vec<PathBuf>,
    /// Config to replay under (default: the built-in config).
    #[arg(long)]
    config: Option<PathBuf>,
    /// `max` (virtual time, deterministic) or a speed-up factor [default: max headless, 1 in the console].
    #[arg(long, allow_hyphen_values = true)]
    speed: Option<String>,
    /// `recorded`: every provider and tool behaves as recorded; `live`: the configured providers (mock fleet by default) [default: recorded when the log has attempts, else live].
    #[arg(long, value_parser = ["recorded", "live"])]
    providers: Option<String>,
    /// Do not re-apply recorded operator actions.
    #[arg(long)]
    no_operator: bool,
    /// Replay under two configs (virtual time) and print both summaries side by side.
    #[arg(long, num_args = 2, value_names = ["CONFIG_A", "CONFIG_B"],
          conflicts_with_all = ["config", "speed", "spool", "state", "record"])]
    compare: Option<Vec<PathBuf>>,
    /// Skip malformed lines (counted in the summary as bad_lines) instead of stopping.
    #[arg(long)]
    skip_bad_lines: bool,
    /// Print only the summary, no console.
    #[arg(long)]
    headless: bool,
    /// Write the summary JSON here.
    #[arg(long)]
    summary_json: Option<PathBuf>,
    /// Seed for jitter (default: the log's).
    #[arg(long)]
    seed: Option<u64>,
    /// Spool file for deferred requests (default: a fresh file in the temp directory).
    #[arg(long)]
    spool: Option<PathBuf>,
    #[command(flatten)]
    state: StateArgs,
    #[command(flatten)]
    record: RecordArgs,
    #[command(flatten)]
    console: ConsoleArgs,
}

#[derive(clap::Args, Default)]
struct StateArgs {
    /// Where state shared by a fleet of instances lives: `memory` (this
    /// instance alone) or `redis://HOST:PORT/DB` [default: the config's
    /// `[state] url`, else memory].
    #[arg(long)]
    state: Option<String>,
}

impl StateArgs {
    /// The Redis URL to join, if any: the flag, else the config. A fleet
    /// shares limits in real time, so it needs a speed factor.
    fn redis(&self, cfg: &Config, speed: &Speed) -> Result<Option<String>> {
        let url = self.state.clone().unwrap_or_else(|| cfg.state.url.clone());
        if url == "memory" {
            return Ok(None);
        }
        if matches!(speed, Speed::Max) {
            bail!("--state {url}: a fleet shares limits in real time; use a speed factor (e.g. --speed 1) or --state memory");
        }
        Ok(Some(url))
    }

    /// Joins the fleet at `url`, if any.
    async fn join(url: Option<&String>, runner: &Arc<Runner>) -> Result<Option<Arc<fusebox::fleet::Fleet>>> {
        match url {
            Some(url) => Ok(Some(fusebox::fleet::Fleet::start(url, runner.clone()).await?)),
            None => Ok(None),
        }
    }
}

/// The run's clock: virtual time from 0 (deterministic), or anchored at the
/// system's wall time when sharing state with a fleet (Redis time is real).
fn run_clock(fleet: bool) -> Clock {
    if fleet {
        Clock::system()
    } else {
        Clock::with_wall_anchor(0)
    }
}

#[derive(clap::Args, Default)]
struct RecordArgs {
    /// Record the traffic to this file (traffic log v1, JSONL; see docs/traffic-log.md).
    #[arg(long)]
    record: Option<PathBuf>,
    /// Message content in the recording: none (default), hash, or full.
    #[arg(long, value_enum, default_value = "none")]
    record_content: Content,
    /// When the recording is synced to disk: always, os, or every N milliseconds.
    #[arg(long, default_value = "1000")]
    fsync: String,
    /// Start a new recording file past this many megabytes (the old one gets a .N suffix).
    #[arg(long)]
    rotate_mb: Option<u64>,
}

impl RecordArgs {
    /// Subscribes a recorder to the runner's events, if recording.
    fn start(&self, runner: &Runner, seed: u64) -> Result<Option<Recorder>> {
        let Some(path) = &self.record else { return Ok(None) };
        let opts = RecordOptions {
            fsync: self.fsync.parse().map_err(|e| anyhow::anyhow!("--fsync {e}"))?,
            content: self.record_content,
            rotate_bytes: self.rotate_mb.map(|mb| mb.max(1) << 20),
        };
        let header = fusebox::traffic::log::Header {
            v: fusebox::traffic::log::VERSION,
            started_at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            seed,
        };
        let rec = Recorder::start(path, opts, header, runner.events())
            .with_context(|| format!("cannot record to {}", path.display()))?;
        Ok(Some(rec))
    }
}

/// Closes the event bus to the recorder and waits for its last flush.
fn finish_recording(runner: &Runner, rec: Option<Recorder>, path: Option<&PathBuf>) -> Result<()> {
    let Some(rec) = rec else { return Ok(()) };
    runner.events().close_subscribers();
    let stats = rec.finish().with_context(|| {
        format!(
            "recording to {} failed",
            path.map(|p| p.display().to_string()).unwrap_or_default()
        )
    })?;
    eprintln!(
        "recorded {} records to {}{}",
        stats.records,
        path.map(|p| p.display().to_string()).unwrap_or_default(),
        if stats.files > 1 {
            format!(" ({} files after rotation)", stats.files)
        } else {
            String::new()
        }
    );
    Ok(())
}

#[derive(clap::Args, Default)]
struct ConsoleArgs {
    /// Console theme: default, light, high-contrast, mono, or a theme file (NO_COLOR selects mono).
    #[arg(long)]
    theme: Option<String>,
    /// Keymap file remapping actions to keys.
    #[arg(long)]
    keymap: Option<PathBuf>,
    /// Disable every command that changes the runner.
    #[arg(long)]
    readonly: bool,
    /// Run destructive commands without asking for confirmation.
    #[arg(long)]
    yes: bool,
    /// Operator name recorded with commands [default: $USER].
    #[arg(long)]
    operator: Option<String>,
    /// Directory for the rolling diagnostic log [default: $XDG_STATE_HOME/fusebox/logs].
    #[arg(long)]
    log_dir: Option<PathBuf>,
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
    let log_dir = match &cli.command {
        Some(Cmd::Demo(a)) => a.console.log_dir.clone(),
        Some(Cmd::Serve(a)) => a.console.log_dir.clone(),
        None => cli.demo.console.log_dir.clone(),
        _ => None,
    };
    let _log = logging(log_dir);
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}

/// Diagnostic logs go to a daily-rolling file (the terminal belongs to the
/// UI); the returned guard flushes it on exit. Level from `FUSEBOX_LOG`.
fn logging(dir: Option<PathBuf>) -> Option<tracing_appender::non_blocking::WorkerGuard> {
    let dir = dir.unwrap_or_else(fusebox::log_dir);
    if std::fs::create_dir_all(&dir).is_err() {
        return None;
    }
    let appender = tracing_appender::rolling::daily(&dir, "fusebox.log");
    // Lines waiting for the writer thread: the default, 128,000, is a 4 MB
    // queue set up (and its pages touched) before any work starts.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .buffered_lines_limit(8_192)
        .finish(appender);
    let filter = tracing_subscriber::EnvFilter::try_from_env("FUSEBOX_LOG").unwrap_or_else(|_| "info".into());
    let ok = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .with_env_filter(filter)
        .try_init();
    ok.is_ok().then_some(guard)
}

fn run(cli: Cli) -> Result<()> {
    match cli.command.unwrap_or(Cmd::Demo(Box::new(cli.demo))) {
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
            state,
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
            let r = fusebox::bench::run(requests, threads, users, state.as_deref())?;
            println!("{}", serde_json::to_string(&r)?);
            Ok(())
        }
        Cmd::Demo(args) => demo(*args),
        Cmd::Serve(args) => serve(*args),
        Cmd::Replay(args) => replay(*args),
        Cmd::Mock { listen, seed } => mock_server(&listen, seed),
    }
}

/// Theme and keymap for a console run, after checking there is a terminal
/// and a real-time speed; `cmd` names the command in the hints.
fn console_setup(c: &ConsoleArgs, speed: &Speed, cmd: &str) -> Result<(Theme, KeyMap)> {
    if matches!(speed, Speed::Max) {
        bail!("--speed max runs in virtual time as fast as possible; use it with --headless, or give the console a factor such as 1 or 10");
    }
    if !std::io::stdout().is_terminal() {
        bail!("the console needs a terminal, but stdout is not a TTY; run `fusebox {cmd} --headless` for a printed summary");
    }
    let theme = Theme::select(c.theme.as_deref(), Theme::no_color_env())?;
    let keymap = match &c.keymap {
        Some(p) => KeyMap::load(p)?,
        None => KeyMap::defaults(),
    };
    Ok((theme, keymap))
}

/// The spool file: given, configured, or fresh in a private temporary
/// directory, which is removed when the returned guard is dropped (at exit:
/// nobody else knows its name).
fn spool_file(given: Option<PathBuf>, cfg: &Config) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
    let configured = (!cfg.degradation.spool.is_empty()).then(|| PathBuf::from(&cfg.degradation.spool));
    match given.or(configured) {
        Some(p) => Ok((p, None)),
        None => {
            let dir = tempfile::Builder::new()
                .prefix("fusebox-")
                .tempdir()
                .context("cannot create a temporary directory for the spool (set --spool FILE)")?;
            Ok((dir.path().join("spool.jsonl"), Some(dir)))
        }
    }
}

/// Who issues console commands: `--operator`, else `$USER`.
fn operator_name(c: &ConsoleArgs) -> String {
    c.operator
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .unwrap_or_else(|| "operator".into())
}

/// Paces virtual time at a speed factor (None for `--speed max`).
fn start_pace(speed: &Speed, clock: Clock) -> Option<Arc<Pace>> {
    match speed {
        Speed::Factor(f) => {
            let p = Pace::new(*f);
            tokio::spawn(p.clone().run(clock));
            Some(p)
        }
        Speed::Max => None,
    }
}

/// Prints or writes the summary; a request without an outcome is an error.
fn write_summary(summary: &Summary, path: Option<&PathBuf>) -> Result<()> {
    let json = serde_json::to_string_pretty(summary)?;
    match path {
        Some(p) => std::fs::write(p, format!("{json}\n")).with_context(|| format!("cannot write {}", p.display()))?,
        None => println!("{json}"),
    }
    if summary.lost > 0 {
        bail!("{} requests ended without an outcome", summary.lost);
    }
    Ok(())
}

fn demo(args: DemoArgs) -> Result<()> {
    let console = !args.headless;
    let default_duration = if console { "8h" } else { "10m" };
    let duration = parse_duration(args.duration.as_deref().unwrap_or(default_duration))?;
    let speed = parse_speed(args.speed.as_deref().unwrap_or(if console { "1" } else { "max" }))?;
    let scenario = Scenario::load(&args.scenario)?;
    let cfg = load_config(args.config.as_ref())?;
    let ui = console
        .then(|| console_setup(&args.console, &speed, "demo"))
        .transpose()?;
    let (spool, _spool_dir) = spool_file(args.spool.clone(), &cfg)?;
    let state = args.state.redis(&cfg, &speed)?;
    let http = match args.providers.as_deref() {
        Some("http") => true,
        Some(_) => false,
        None => !matches!(speed, Speed::Max),
    };
    if http && matches!(speed, Speed::Max) {
        bail!("--providers http runs over real sockets in real time; use a speed factor (e.g. --speed 1) or --providers mock with --speed max");
    }
    let real = cfg.http_providers();
    if !real.is_empty() && matches!(speed, Speed::Max) {
        bail!(
            "the config's providers {} answer over HTTP in real time, not at --speed max (every call would time out in virtual time); use a speed factor, e.g. --speed 1",
            real.join(", ")
        );
    }
    let remote = cfg.remote_providers();
    if !remote.is_empty() && !args.console.yes {
        bail!(
            "the demo sends synthetic traffic ({} at about {:.0} requests/s) to {}, which are not on this machine: up to about ${:.2} a minute at the configured prices; add --yes to send it",
            scenario.name,
            scenario.rps + scenario.noisy.as_ref().map_or(0.0, |n| n.rps),
            remote.join(", "),
            synthetic_cost_per_min(&cfg, &scenario)
        );
    }
    if matches!(speed, Speed::Max) {
        fusebox::alloc::keep_freed_memory();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    let wall = std::time::Instant::now();
    let seed = Seed(args.seed);
    let record = args.record;
    let record_path = record.record.clone();
    let operator = operator_name(&args.console);
    let summary = rt.block_on(async move {
        let clock = run_clock(state.is_some());
        let mut parts = RunnerParts::mock(clock, seed);
        parts.spool = Some(spool);
        // Real providers from the config, and (with --providers http) the
        // mock fleet behind a loopback mock server sharing the runner's faults.
        let mock_base = if http {
            let server = MockServer::new(seed, parts.faults.clone());
            let addr = server.spawn("127.0.0.1:0").await?;
            tracing::info!(%addr, "mock server listening");
            Some(format!("http://{addr}"))
        } else {
            None
        };
        parts.providers = fusebox::provider::http::build(&cfg, clock, mock_base.as_deref())?;
        let runner = Runner::new(cfg, parts)?;
        let recorder = record.start(&runner, seed.0)?;
        // Pacing keeps the paused clock in step with real time; start it
        // before talking to Redis so its timeouts are real.
        let pace = start_pace(&speed, clock);
        let fleet = StateArgs::join(state.as_ref(), &runner).await?;
        if let Some((theme, keymap)) = ui {
            let opts = Options {
                mode: Mode::Demo,
                readonly: args.console.readonly,
                yes: args.console.yes,
                operator,
                source: fusebox::tui::app::source(
                    &format!("scenario {}", scenario.name),
                    if http { "http" } else { "in-process" },
                ),
                replay_length_ms: None,
                recorded: None,
                replay_end: None,
            };
            let driver = {
                let runner = runner.clone();
                tokio::spawn(async move { run_scenario(runner, &scenario, duration, seed).await })
            };
            let r = fusebox::tui::run(runner.clone(), opts, theme, keymap, pace).await;
            driver.abort();
            finish_recording(&runner, recorder, record_path.as_ref())?;
            r?;
            return anyhow::Ok(None);
        }
        let transitions = collect_transitions(&runner);
        let run = tokio::select! {
            run = run_scenario(runner.clone(), &scenario, duration, seed) => run,
            _ = interrupted() => {
                finish_recording(&runner, recorder, record_path.as_ref())?;
                bail!("interrupted");
            }
        };
        runner.events().close_subscribers();
        finish_recording(&runner, recorder, record_path.as_ref())?;
        let seen = transitions.await?;
        let virtual_ms = clock.elapsed_ms();
        let mut summary = Summary::build(&runner, &seen, run.lost, virtual_ms, wall.elapsed().as_millis() as u64);
        summary.fleet = fleet.map(|f| f.summary());
        anyhow::Ok(Some(summary))
    })?;
    match summary {
        Some(summary) => write_summary(&summary, args.summary_json.as_ref()),
        None => Ok(()),
    }
}

/// `fusebox replay`: re-drives a traffic log.
fn replay(args: ReplayArgs) -> Result<()> {
    if let Some(configs) = &args.compare {
        return compare(&args, &configs[0], &configs[1]);
    }
    let console = !args.headless;
    let speed = parse_speed(args.speed.as_deref().unwrap_or(if console { "1" } else { "max" }))?;
    let cfg = load_config(args.config.as_ref())?;
    let reader = LogReader::open_all(&args.logs, args.skip_bad_lines)?;
    let seed = Seed(args.seed.or(reader.header().map(|h| h.seed)).unwrap_or(42));
    let ui = console
        .then(|| console_setup(&args.console, &speed, "replay LOG"))
        .transpose()?;
    let (spool, _spool_dir) = spool_file(args.spool.clone(), &cfg)?;
    let state = args.state.redis(&cfg, &speed)?;
    let recorded = recorded_providers(&args)?;
    check_replay(&args, &cfg, recorded, &speed)?;
    if matches!(speed, Speed::Max) {
        fusebox::alloc::keep_freed_memory();
    }
    let io = !recorded || state.is_some() || ui.is_some();
    let rt = fusebox::traffic::replay::runtime(io, matches!(speed, Speed::Max) && ui.is_none())?;
    let wall = std::time::Instant::now();
    let record = args.record;
    let record_path = record.record.clone();
    let operator = operator_name(&args.console);
    let source = fusebox::tui::app::source(
        &format!("replay {}", shown(&args.logs)),
        if recorded { "recorded" } else { "live" },
    );
    let log_length = fusebox::traffic::replay::log_length_ms(&args.logs);
    let summary = rt.block_on(async move {
        // Made in the runtime, whose paused clock it reads.
        let clock = if state.is_some() {
            run_clock(true)
        } else {
            fusebox::traffic::replay::replay_clock(reader.header())
        };
        let (runner, fleet) = replay_runner(cfg, seed, spool, recorded, clock)?;
        let recorder = record.start(&runner, seed.0)?;
        let pace = start_pace(&speed, clock);
        let shared = StateArgs::join(state.as_ref(), &runner).await?;
        let mut opts = ReplayOptions {
            operator: !args.no_operator,
            jump_idle: matches!(speed, Speed::Max) && shared.is_none(),
            ..ReplayOptions::default()
        };
        if let Some((theme, keymap)) = ui {
            let recorded = Arc::new(fusebox::traffic::replay::RecordedOutcomes::default());
            let end = Arc::new(fusebox::traffic::replay::ReplayEnd::default());
            opts.outcomes = Some(recorded.clone());
            let o = Options {
                mode: Mode::Replay,
                readonly: args.console.readonly,
                yes: args.console.yes,
                operator,
                source,
                replay_length_ms: log_length,
                recorded: Some(recorded),
                replay_end: Some(end.clone()),
            };
            let driver = {
                let runner = runner.clone();
                tokio::spawn(async move {
                    let out = fusebox::traffic::replay::replay(runner, reader, fleet, opts).await;
                    end.set(&out);
                    out
                })
            };
            let r = fusebox::tui::run(runner.clone(), o, theme, keymap, pace).await;
            driver.abort();
            finish_recording(&runner, recorder, record_path.as_ref())?;
            r?;
            // A replay that stopped on a bad line says where, once the
            // terminal is back.
            if let Ok(Err(e)) = driver.await {
                return Err(e.into());
            }
            return anyhow::Ok(None);
        }
        let transitions = collect_transitions(&runner);
        let out = tokio::select! {
            out = fusebox::traffic::replay::replay(runner.clone(), reader, fleet, opts) => out,
            _ = interrupted() => {
                finish_recording(&runner, recorder, record_path.as_ref())?;
                bail!("interrupted");
            }
        };
        // What was recorded up to a bad line is kept whole.
        runner.events().close_subscribers();
        finish_recording(&runner, recorder, record_path.as_ref())?;
        let out = out?;
        let seen = transitions.await?;
        let mut summary = Summary::build(
            &runner,
            &seen,
            out.lost,
            clock.elapsed_ms(),
            wall.elapsed().as_millis() as u64,
        );
        skipped(&mut summary, &out, &args.logs, true);
        summary.fleet = shared.map(|f| f.summary());
        anyhow::Ok(Some(summary))
    })?;
    match summary {
        Some(summary) => write_summary(&summary, args.summary_json.as_ref()),
        None => Ok(()),
    }
}

/// The replayed log for messages: its first segment, and how many follow.
fn shown(logs: &[PathBuf]) -> String {
    let first = logs.first().map(|p| p.display().to_string()).unwrap_or_default();
    match logs.len() {
        0 | 1 => first,
        n => format!("{first} (+{} segments)", n - 1),
    }
}

/// Notes the log lines a replay skipped in its summary, and says so
/// (`say`: once per log read).
fn skipped(summary: &mut Summary, out: &fusebox::traffic::replay::Replayed, logs: &[PathBuf], say: bool) {
    summary.bad_lines = Some(out.bad_lines);
    summary.unknown_kinds = Some(out.unknown_kinds);
    summary.torn_lines = Some(out.torn_lines);
    summary.operator_not_applied = Some(out.operator_refused.len() as u64);
    if !say {
        return;
    }
    if let Some(lines) = out.skipped().strip_prefix(", ") {
        eprintln!("warning: {}: {lines}", shown(logs));
    }
    for why in &out.operator_refused {
        eprintln!("warning: {}: recorded operator action not applied: {why}", shown(logs));
    }
}

/// The most a minute of `scenario`'s synthetic traffic could cost: every
/// request taking all its steps, each with its prompt and all of its
/// `max_tokens`, at the dearest configured model's prices.
fn synthetic_cost_per_min(cfg: &Config, scenario: &Scenario) -> f64 {
    let (input, output) = cfg.models.values().fold((0.0f64, 0.0f64), |(i, o), m| {
        (i.max(m.input_per_m), o.max(m.output_per_m))
    });
    let sample = 100u64;
    let per_request: f64 = (0..sample)
        .map(|id| {
            let r = fusebox::traffic::load::make_request(Seed(1), id, scenario.users.max(1));
            let prompt = r.messages.iter().map(fusebox::provider::Message::weight).sum::<usize>() as f64 / 4.0;
            let steps = r.max_steps.max(1) as f64;
            steps * (prompt * input + r.max_tokens as f64 * output) / 1e6
        })
        .sum::<f64>()
        / sample as f64;
    let rps = scenario.rps + scenario.noisy.as_ref().map_or(0.0, |n| n.rps);
    per_request * rps * 60.0
}

/// Refuses what a replay cannot do safely: live HTTP providers in virtual
/// time (every call would time out as the clock leaps), or recording over
/// the log being replayed.
fn check_replay(args: &ReplayArgs, cfg: &Config, recorded: bool, speed: &Speed) -> Result<()> {
    if !recorded && matches!(speed, Speed::Max) {
        let http = cfg.http_providers();
        if !http.is_empty() {
            bail!(
                "live providers over HTTP ({}) answer in real time, not at --speed max; use a speed factor (e.g. --speed 1), or --providers recorded",
                http.join(", ")
            );
        }
    }
    if let Some(out) = &args.record.record {
        let same = |p: &std::path::Path| std::fs::canonicalize(p).ok();
        if same(out).is_some() && args.logs.iter().any(|log| same(out) == same(log)) {
            bail!(
                "--record {}: that is the log being replayed, and recording would overwrite it; record to another file",
                out.display()
            );
        }
    }
    Ok(())
}

/// Whether a replay's providers answer as recorded: as `--providers` says,
/// else when the log has attempts to answer with.
fn recorded_providers(args: &ReplayArgs) -> Result<bool> {
    Ok(match args.providers.as_deref() {
        Some(p) => p == "recorded",
        None => fusebox::traffic::replay::has_attempts(&args.logs, args.skip_bad_lines)?,
    })
}

/// A runner for a replay: every provider and tool answering from the
/// recorded fleet, or the configured providers (`live`).
fn replay_runner(
    cfg: Config,
    seed: Seed,
    spool: PathBuf,
    recorded: bool,
    clock: Clock,
) -> Result<(Arc<Runner>, Option<Arc<RecordedFleet>>)> {
    let (mut parts, fleet) = if recorded {
        let (parts, fleet) = fusebox::traffic::replay::recorded_parts(&cfg, clock, seed);
        (parts, Some(fleet))
    } else {
        let mut parts = RunnerParts::mock(clock, seed);
        parts.providers = fusebox::provider::http::build(&cfg, clock, None)?;
        (parts, None)
    };
    parts.spool = Some(spool);
    Ok((Runner::new(cfg, parts)?, fleet))
}

/// `fusebox replay LOG --compare A B`: the same log under two configs, in
/// virtual time, side by side.
fn compare(args: &ReplayArgs, a: &PathBuf, b: &PathBuf) -> Result<()> {
    fusebox::alloc::keep_freed_memory();
    let recorded = recorded_providers(args)?;
    let mut summaries = Vec::new();
    for (i, path) in [a, b].into_iter().enumerate() {
        let cfg = Config::load(path)?;
        check_replay(args, &cfg, recorded, &Speed::Max)?;
        let reader = LogReader::open_all(&args.logs, args.skip_bad_lines)?;
        let seed = Seed(args.seed.or(reader.header().map(|h| h.seed)).unwrap_or(42));
        let (spool, _spool_dir) = spool_file(None, &cfg)?;
        let rt = fusebox::traffic::replay::runtime(!recorded, true)?;
        let wall = std::time::Instant::now();
        let opts = ReplayOptions {
            operator: !args.no_operator,
            jump_idle: true,
            ..ReplayOptions::default()
        };
        let summary = rt.block_on(async move {
            let clock = fusebox::traffic::replay::replay_clock(reader.header());
            let (runner, fleet) = replay_runner(cfg, seed, spool, recorded, clock)?;
            let transitions = collect_transitions(&runner);
            let out = fusebox::traffic::replay::replay(runner.clone(), reader, fleet, opts).await?;
            runner.events().close_subscribers();
            let seen = transitions.await?;
            let mut s = Summary::build(
                &runner,
                &seen,
                out.lost,
                clock.elapsed_ms(),
                wall.elapsed().as_millis() as u64,
            );
            // Both configs read the same log: its skipped lines are said once.
            skipped(&mut s, &out, &args.logs, i == 0);
            anyhow::Ok(s)
        })?;
        summaries.push(summary);
    }
    let (x, y) = (&summaries[0], &summaries[1]);
    let rows: Vec<(&str, f64, f64)> = vec![
        ("requests", x.requests as f64, y.requests as f64),
        ("level none", x.by_level.none as f64, y.by_level.none as f64),
        ("level partial", x.by_level.partial as f64, y.by_level.partial as f64),
        ("level fallback", x.by_level.fallback as f64, y.by_level.fallback as f64),
        ("level deferred", x.by_level.deferred as f64, y.by_level.deferred as f64),
        ("level failed", x.by_level.failed as f64, y.by_level.failed as f64),
        ("tokens consumed", x.tokens.consumed as f64, y.tokens.consumed as f64),
        ("tokens wasted", x.tokens.wasted as f64, y.tokens.wasted as f64),
        ("cost usd", x.cost_usd, y.cost_usd),
        ("calls made", calls(x, |t| t.attempts), calls(y, |t| t.attempts)),
        ("calls failed", calls(x, |t| t.failed), calls(y, |t| t.failed)),
        (
            "calls short-circuited",
            calls(x, |t| t.rejected_open),
            calls(y, |t| t.rejected_open),
        ),
        ("retries", calls(x, |t| t.retries), calls(y, |t| t.retries)),
        ("transitions", x.transitions.len() as f64, y.transitions.len() as f64),
        (
            "budget rejections",
            x.budget_rejections.values().sum::<u64>() as f64,
            y.budget_rejections.values().sum::<u64>() as f64,
        ),
        ("lost", x.lost as f64, y.lost as f64),
    ];
    println!("{:<22} {:>14} {:>14} {:>12}", "", short(a), short(b), "difference");
    for (name, va, vb) in rows {
        let mark = if (va - vb).abs() > 1e-9 { "  *" } else { "" };
        let fmt = |v: f64| {
            if v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.4}")
            }
        };
        println!("{name:<22} {:>14} {:>14} {:>12}{mark}", fmt(va), fmt(vb), fmt(vb - va));
    }
    if let Some(p) = &args.summary_json {
        let both = serde_json::json!({ "a": { "config": a, "summary": x }, "b": { "config": b, "summary": y } });
        std::fs::write(p, format!("{}\n", serde_json::to_string_pretty(&both)?))
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

fn calls(s: &Summary, f: impl Fn(&fusebox::runner::registry::StatsView) -> u64) -> f64 {
    // Providers and tools only: model breakers see the same calls as their provider.
    s.targets
        .iter()
        .filter(|(k, _)| !k.starts_with("model:"))
        .map(|(_, v)| f(v))
        .sum::<u64>() as f64
}

fn short(p: &std::path::Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// `fusebox mock`: serves the mock fleet until Ctrl-C.
fn mock_server(listen: &str, seed: u64) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        let faults = std::sync::Arc::new(fusebox::provider::fault::FaultTable::default());
        let server = MockServer::keyless(Seed(seed), faults);
        let addr = server.spawn(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
        eprintln!("fusebox mock: serving OpenAI (/v1/chat/completions), DeepSeek (/chat/completions) and Anthropic (/v1/messages) on http://{addr}");
        eprintln!("faults: GET/PUT http://{addr}/_fusebox/faults · Ctrl-C to stop");
        interrupted().await;
        anyhow::Ok(())
    })
}

/// `fusebox serve`: the gateway, with the console or a status line.
fn serve(args: ServeArgs) -> Result<()> {
    let cfg = load_config(args.config.as_ref())?;
    let auth_token = match &args.auth_token_env {
        Some(var) => match std::env::var(var) {
            Ok(t) if !t.trim().is_empty() => Some(t.trim().to_string()),
            _ => bail!("--auth-token-env {var}: the variable {var} is not set or empty; export it with the token clients must send"),
        },
        None => None,
    };
    let state = args.state.redis(&cfg, &Speed::Factor(1.0))?;
    let ui = (!args.headless)
        .then(|| console_setup(&args.console, &Speed::Factor(1.0), "serve"))
        .transpose()?;
    let threads = args
        .threads
        .filter(|&t| t > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() / 2).max(1));
    // One thread and no console: a current-thread runtime, which wakes and
    // schedules with less work than a one-worker multi-thread one. (The
    // console draws on the main thread, so it keeps the requests apart on
    // a worker.)
    let mut rt = match threads {
        1 if ui.is_none() => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
    };
    let rt = rt.enable_all().build()?;
    let seed = Seed(args.seed);
    rt.block_on(async move {
        let clock = Clock::system();
        let mut parts = RunnerParts::mock(clock, seed);
        // The mock fleet (mock-kind providers) answers over loopback HTTP,
        // sharing the runner's fault table, as in the demo.
        let mock = if cfg.providers.values().any(|p| p.kind == fusebox::config::ProviderKind::Mock) {
            let addr = MockServer::new(seed, parts.faults.clone()).spawn("127.0.0.1:0").await?;
            Some(format!("http://{addr}"))
        } else {
            None
        };
        parts.providers = fusebox::provider::http::build(&cfg, clock, mock.as_deref())?;
        let runner = Runner::new(cfg, parts)?;
        StateArgs::join(state.as_ref(), &runner).await?;
        let recorder = args.record.start(&runner, seed.0)?;
        let opts = fusebox::gateway::GatewayOptions {
            auth_token,
            max_body: args.max_body_bytes,
            readonly: args.console.readonly,
            conns: fusebox::gateway::ConnLimits {
                max_connections: args.max_connections.max(1),
                header_timeout: Duration::from_secs(args.header_timeout_s.max(1)),
            },
        };
        let addr = fusebox::gateway::spawn(runner.clone(), &args.listen, opts).await?;
        let base = format!("http://{addr}/v1");
        if let Some((theme, keymap)) = ui {
            let o = Options {
                mode: Mode::Serve,
                readonly: args.console.readonly,
                yes: args.console.yes,
                operator: operator_name(&args.console),
                source: format!("gateway {base}"),
                replay_length_ms: None,
                recorded: None,
                replay_end: None,
            };
            let r = fusebox::tui::run(runner.clone(), o, theme, keymap, None).await;
            finish_recording(&runner, recorder, args.record.record.as_ref())?;
            return Ok(r?);
        }
        eprintln!("fusebox serve: gateway on {base} (POST /chat/completions, /messages, /responses, /embeddings; GET /models; /metrics, /healthz, /readyz at the root) · Ctrl-C to stop");
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut n = 0u64;
        // Created once, so a Ctrl-C during a tick is not missed.
        let stop = interrupted();
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    runner.maintain();
                    n += 1;
                    if n.is_multiple_of(5) {
                        status(&runner);
                    }
                }
                _ = &mut stop => break,
            }
        }
        finish_recording(&runner, recorder, args.record.record.as_ref())?;
        status(&runner);
        anyhow::Ok(())
    })
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
    let reg = runner.registry();
    let open: Vec<&str> = (0..reg.len())
        .map(|i| reg.get(i))
        .filter(|t| !t.breaker.would_admit(now))
        .map(|t| t.name.as_str())
        .collect();
    format!(
        "requests {} (none {}, partial {}, fallback {}, failed {}) · open breakers: {} · tokens {} · store {}",
        lv.iter().sum::<u64>(),
        lv[0],
        lv[1],
        lv[2],
        lv[4],
        if open.is_empty() {
            "none".to_string()
        } else {
            open.join(", ")
        },
        runner.totals().tokens.load(std::sync::atomic::Ordering::Relaxed),
        runner.store().view().label()
    )
}

/// Resolves at the first Ctrl-C (SIGINT) or SIGTERM (how a service manager
/// stops `serve`), so a recording ends whole. A thread waits for the signal, so
/// it works on a runtime without tokio's I/O driver (a recorded replay runs
/// on timers alone). Pends forever if the handler cannot be installed.
fn interrupted() -> impl std::future::Future<Output = ()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    match signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM]) {
        Ok(mut signals) => {
            let spawned = std::thread::Builder::new().name("sigint".into()).spawn(move || {
                if signals.forever().next().is_some() {
                    let _ = tx.send(());
                }
            });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "Ctrl-C and SIGTERM will not be handled");
            }
        }
        Err(e) => tracing::warn!(error = %e, "Ctrl-C and SIGTERM will not be handled"),
    }
    async move {
        if rx.await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
