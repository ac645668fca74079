//! `fusebox demo` (and `fusebox` alone): synthetic agent traffic following
//! a scenario's fault timeline, against the mock providers or a config's
//! providers.

use super::args::{load_config, parse_duration, ConsoleArgs, RecordArgs, Speed, StateArgs};
use super::run::{run_clock, spool_file, write_summary, Run, Ui};
use crate::clock::Seed;
use crate::config::Config;
use crate::mockserver::MockServer;
use crate::runner::{Runner, RunnerParts};
use crate::traffic::load::run_scenario;
use crate::traffic::load::scenario::Scenario;
use crate::tui::app::{Mode, Options};
use anyhow::{bail, Result};
use std::path::PathBuf;

/// How the demo reaches its mock providers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProviderLink {
    /// An in-process mock server on a loopback port: real sockets.
    Http,
    /// In-process calls.
    Mock,
}

/// `fusebox demo`'s options.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// Run without the console and print a summary.
    #[arg(long)]
    pub headless: bool,
    /// Built-in scenario name or scenario TOML file.
    #[arg(long, default_value = "tour")]
    pub scenario: String,
    /// How much (virtual) time to simulate, e.g. 60s, 10m [default: 10m headless, 8h in the console].
    #[arg(long, allow_hyphen_values = true)]
    pub duration: Option<String>,
    /// `max` (virtual time, as fast as possible) or a speed-up factor like 1 or 10
    /// [default: max headless, 1 in the console].
    #[arg(long, allow_hyphen_values = true)]
    pub speed: Option<String>,
    /// Write the summary JSON here.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Config file (default: the built-in config).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Seed for load, jitter and the mock providers.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Spool file for deferred requests (default: a fresh file in the temp directory).
    #[arg(long)]
    pub spool: Option<PathBuf>,
    /// How the mock providers are reached: `http` (an in-process mock server on a
    /// loopback port, real sockets) or `mock` (in-process calls)
    /// [default: http in real time, mock with --speed max].
    #[arg(long, value_enum)]
    pub providers: Option<ProviderLink>,
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

/// Runs the demo.
pub fn demo(args: DemoArgs) -> Result<()> {
    let console = !args.headless;
    let duration = parse_duration(args.duration.as_deref().unwrap_or(if console { "8h" } else { "10m" }))?;
    let speed = Speed::or_default(args.speed.as_deref(), console)?;
    let scenario = Scenario::load(&args.scenario)?;
    let cfg = load_config(args.config.as_ref())?;
    let ui = Ui::setup(args.headless, &args.console, speed, "demo")?;
    let (spool, _spool_dir) = spool_file(args.spool.clone(), &cfg)?;
    let state = args.state.redis(&cfg, speed)?;
    let http = args.providers.map_or(!speed.is_max(), |p| p == ProviderLink::Http);
    refuse(&args, &cfg, &scenario, speed, http)?;
    if speed.is_max() {
        crate::alloc::keep_freed_memory();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    let seed = Seed(args.seed);
    let summary = rt.block_on(async move {
        let clock = run_clock(state.is_some());
        let mut parts = RunnerParts::mock(clock, seed);
        parts.spool = Some(spool);
        // Real providers from the config, and (with --providers http) the
        // mock providers behind a loopback mock server sharing the runner's faults.
        let mock_base = if http {
            let server = MockServer::new(seed, parts.faults.clone());
            let addr = server.spawn("127.0.0.1:0").await?;
            tracing::info!(%addr, "mock server listening");
            Some(format!("http://{addr}"))
        } else {
            None
        };
        parts.providers = crate::provider::http::build(&cfg, clock, mock_base.as_deref())?;
        super::run::live_tools(&cfg, &mut parts)?;
        let runner = Runner::new(cfg, parts)?;
        let run = Run::start(runner.clone(), &args.record, seed.0, Some(speed), state.as_ref()).await?;
        if let Some(ui) = ui {
            let opts = Options {
                mode: Mode::Demo,
                readonly: args.console.readonly_reason(),
                yes: args.console.yes,
                operator: args.console.operator_name(),
                source: crate::tui::app::source(
                    &format!("scenario {}", scenario.name),
                    if http { "http" } else { "in-process" },
                ),
                replay_length_ms: None,
                replay: None,
            };
            let driver = tokio::spawn(async move {
                run_scenario(runner, &scenario, duration, seed).await;
                Ok(())
            });
            run.console(ui, opts, Some(driver)).await?;
            return anyhow::Ok(None);
        }
        let (summary, _) = run
            .headless(run_scenario(runner, &scenario, duration, seed), |r| r.lost)
            .await?;
        anyhow::Ok(Some(summary))
    })?;
    match summary {
        Some(summary) => write_summary(&summary, args.summary_json.as_ref()),
        None => Ok(()),
    }
}

/// Refuses a demo that cannot run as asked: HTTP in virtual time (every
/// call would time out as the clock leaps), or synthetic traffic sent to
/// providers elsewhere without `--yes`.
fn refuse(args: &DemoArgs, cfg: &Config, scenario: &Scenario, speed: Speed, http: bool) -> Result<()> {
    if http && speed.is_max() {
        bail!("--providers http runs over real sockets in real time; use a speed factor (e.g. --speed 1) or --providers mock with --speed max");
    }
    let real = cfg.http_providers();
    if !real.is_empty() && speed.is_max() {
        bail!(
            "the config's {} answer over HTTP in real time, not at --speed max (every call would time out in virtual time); use a speed factor, e.g. --speed 1",
            real.join(", ")
        );
    }
    let remote = cfg.remote_providers();
    if !remote.is_empty() && !args.console.yes {
        bail!(
            "the demo sends synthetic traffic ({} at about {:.0} requests/s) to {}, which are not on this machine: up to about ${:.2} a minute at the configured prices; add --yes to send it",
            scenario.name,
            scenario.peak_rps(),
            remote.join(", "),
            synthetic_cost_per_min(cfg, scenario)
        );
    }
    Ok(())
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
            let r = crate::traffic::load::make_request(Seed(1), id, scenario.users.max(1));
            let prompt = f64::from(crate::request::tokens_in_chars(
                r.messages.iter().map(crate::provider::Message::weight).sum(),
            ));
            let steps = r.max_steps.max(1) as f64;
            steps * (prompt * input + r.max_tokens as f64 * output) / 1e6
        })
        .sum::<f64>()
        / sample as f64;
    let rps = scenario.peak_rps();
    per_request * rps * 60.0
}
