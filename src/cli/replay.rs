//! `fusebox replay`: a recorded traffic log re-driven through the runner,
//! against the recorded behaviour of its providers and tools or live ones.

use super::args::{load_config, ConsoleArgs, RecordArgs, Speed, StateArgs};
use super::run::{run_clock, spool_file, write_summary, Run, Ui};
use crate::clock::{Clock, Seed};
use crate::config::Config;
use crate::runner::{Runner, RunnerParts};
use crate::traffic::log::LogReader;
use crate::traffic::replay::{RecordedCalls, RecordedOutcomes, ReplayEnd, ReplayOptions, Replayed};
use crate::traffic::summary::Summary;
use crate::tui::app::{Mode, Options};
use crate::tui::replay::{Recorded, ReplayView};
use anyhow::{bail, Result};
use std::path::PathBuf;
use std::sync::Arc;

/// Where a replay's providers and tools answer from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Answers {
    /// Every provider and tool behaves as recorded.
    Recorded,
    /// The configured providers (the mock providers by default).
    Live,
}

/// `fusebox replay`'s options.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// The traffic log (JSONL, format v1); a log rotated by --rotate-mb as its segments in order (FILE.1 FILE.2 … FILE).
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,
    /// What the files are: `fusebox` traffic logs, or `otlp` (OTLP/JSON traces, read as `fusebox import` reads them).
    #[arg(long, value_enum, default_value = "fusebox")]
    pub format: super::import::LogFormat,
    /// Config to replay under (default: the built-in config).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// `max` (virtual time, deterministic) or a speed-up factor [default: max headless, 1 in the console].
    #[arg(long, allow_hyphen_values = true)]
    pub speed: Option<String>,
    /// `recorded`: every provider and tool behaves as recorded; `live`: the configured providers (mock providers by default) [default: recorded when the log has attempts, else live].
    #[arg(long, value_enum)]
    pub providers: Option<Answers>,
    /// Do not re-apply recorded operator actions.
    #[arg(long)]
    pub no_operator: bool,
    /// Replay under two configs (virtual time) and print both summaries side by side.
    #[arg(long, num_args = 2, value_names = ["CONFIG_A", "CONFIG_B"],
          conflicts_with_all = ["config", "speed", "spool", "state", "record"])]
    pub compare: Option<Vec<PathBuf>>,
    /// Skip malformed lines (counted in the summary as bad_lines) instead of stopping.
    #[arg(long)]
    pub skip_bad_lines: bool,
    /// Print only the summary, no console.
    #[arg(long)]
    pub headless: bool,
    /// Write the summary JSON here.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Seed for jitter (default: the log's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Spool file for deferred requests (default: a fresh file in the temp directory).
    #[arg(long)]
    pub spool: Option<PathBuf>,
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

impl ReplayArgs {
    /// Whether the providers answer as recorded: as `--providers` says,
    /// else when the log has attempts to answer with.
    pub fn recorded(&self) -> Result<bool> {
        Ok(match self.providers {
            Some(p) => p == Answers::Recorded,
            None => crate::traffic::log::has_attempts(&self.logs, self.skip_bad_lines)?,
        })
    }

    /// The log's reader and the replay's seed (`--seed`, else the log's).
    pub fn open(&self) -> Result<(LogReader, Seed)> {
        let reader = LogReader::open_all(&self.logs, self.skip_bad_lines)?;
        let seed = Seed(self.seed.or(reader.header().map(|h| h.seed)).unwrap_or(42));
        Ok((reader, seed))
    }

    /// Refuses what a replay cannot do safely: live HTTP providers in
    /// virtual time (every call would time out as the clock leaps), or
    /// recording over the log being replayed.
    pub fn check(&self, cfg: &Config, recorded: bool, speed: Speed) -> Result<()> {
        if !recorded && speed.is_max() {
            let http = cfg.http_providers();
            if !http.is_empty() {
                bail!(
                    "live providers over HTTP ({}) answer in real time, not at --speed max; use a speed factor (e.g. --speed 1), or --providers recorded",
                    http.join(", ")
                );
            }
        }
        if let Some(out) = &self.record.record {
            let same = |p: &std::path::Path| std::fs::canonicalize(p).ok();
            if same(out).is_some() && self.logs.iter().any(|log| same(out) == same(log)) {
                bail!(
                    "--record {}: that is the log being replayed, and recording would overwrite it; record to another file",
                    out.display()
                );
            }
        }
        Ok(())
    }

    /// The replayed log for messages: its first segment, and how many follow.
    pub fn shown(&self) -> String {
        let first = self.logs.first().map(|p| p.display().to_string()).unwrap_or_default();
        match self.logs.len() {
            0 | 1 => first,
            n => format!("{first} (+{} segments)", n - 1),
        }
    }

    /// Notes the log lines a replay skipped in its summary, and says so
    /// (`say`: once per log read).
    pub fn skipped(&self, summary: &mut Summary, out: &Replayed, say: bool) {
        summary.bad_lines = Some(out.bad_lines);
        summary.unknown_kinds = Some(out.unknown_kinds);
        summary.torn_lines = Some(out.torn_lines);
        summary.operator_not_applied = Some(out.operator_refused.len() as u64);
        if !say {
            return;
        }
        if let Some(lines) = out.skipped().strip_prefix(", ") {
            eprintln!("warning: {}: {lines}", self.shown());
        }
        for why in &out.operator_refused {
            eprintln!("warning: {}: recorded operator action not applied: {why}", self.shown());
        }
    }
}

/// A runner for a replay: every provider and tool answering from the
/// recorded fleet, or the configured providers (`live`). The tools a
/// recording gateway found on its MCP servers (its `header`) are added as
/// it had them; a `[tools.NAME]` of `cfg` sets one's breaker, pool and
/// the rest, as it did for the gateway, but its schema stays the server's
/// (the built-in tools, the demo's, set none).
pub fn replay_runner(
    mut cfg: Config,
    header: Option<&crate::traffic::log::Header>,
    seed: Seed,
    spool: PathBuf,
    recorded: bool,
    clock: Clock,
) -> Result<(Arc<Runner>, Option<Arc<RecordedCalls>>)> {
    let own = cfg.has_own_tools();
    for (name, found) in header.map(|h| h.tools.clone()).unwrap_or_default() {
        match cfg.tools.get_mut(&name).filter(|_| own) {
            Some(t) => {
                t.schema = found.schema;
                if t.description.is_empty() {
                    t.description = found.description;
                }
            }
            None => {
                cfg.tools.insert(name, found);
            }
        }
    }
    let (mut parts, fleet) = if recorded {
        let (parts, fleet) = crate::traffic::replay::recorded_parts(&cfg, clock, seed);
        (parts, Some(fleet))
    } else {
        let mut parts = RunnerParts::mock(clock, seed);
        parts.providers = crate::provider::http::build(&cfg, clock, None)?;
        super::run::live_tools(&cfg, &mut parts)?;
        (parts, None)
    };
    parts.spool = Some(spool);
    Ok((Runner::new(cfg, parts)?, fleet))
}

/// Runs the replay (or, with `--compare`, the comparison).
pub fn replay(mut args: ReplayArgs) -> Result<()> {
    let _imported = super::import::in_place(&mut args.logs, args.format)?;
    if let Some(configs) = &args.compare {
        return super::compare::compare(&args, &configs[0], &configs[1]);
    }
    let speed = Speed::or_default(args.speed.as_deref(), !args.headless)?;
    let cfg = load_config(args.config.as_ref())?;
    let (reader, seed) = args.open()?;
    let ui = Ui::setup(args.headless, &args.console, speed, "replay LOG")?;
    let (spool, _spool_dir) = spool_file(args.spool.clone(), &cfg)?;
    let state = args.state.redis(&cfg, speed)?;
    let recorded = args.recorded()?;
    args.check(&cfg, recorded, speed)?;
    if speed.is_max() {
        crate::alloc::keep_freed_memory();
    }
    let io = !recorded || state.is_some() || ui.is_some();
    let rt = crate::traffic::replay::runtime(io, speed.is_max() && ui.is_none())?;
    let source = crate::tui::app::source(
        &format!("replay {}", args.shown()),
        if recorded { "recorded" } else { "live" },
    );
    let log_length = crate::traffic::log::length_ms(&args.logs);
    let summary = rt.block_on(async {
        // Made in the runtime, whose paused clock it reads.
        let clock = match state {
            Some(_) => run_clock(true),
            None => crate::traffic::replay::replay_clock(reader.header()),
        };
        let (runner, fleet) = replay_runner(cfg, reader.header(), seed, spool, recorded, clock)?;
        let run = Run::start(runner.clone(), &args.record, seed.0, Some(speed), state.as_ref()).await?;
        let mut opts = ReplayOptions {
            operator: !args.no_operator,
            jump_idle: speed.is_max() && state.is_none(),
            ..ReplayOptions::default()
        };
        if let Some(ui) = ui {
            let shown = Arc::new(ReplayShown::default());
            opts.outcomes = Some(shown.outcomes.clone());
            let o = Options {
                mode: Mode::Replay,
                readonly: args.console.readonly_reason(),
                yes: args.console.yes,
                operator: args.console.operator_name(),
                source,
                replay_length_ms: log_length,
                replay: Some(shown.clone()),
            };
            let watched = runner.clone();
            let end = shown.clone();
            let driver = tokio::spawn(async move {
                let out = crate::traffic::replay::replay(runner, reader, fleet, opts).await;
                shown.end.set(&out);
                out.map(drop).map_err(anyhow::Error::from)
            });
            run.console(ui, o, Some(driver)).await?;
            let last = watched.snapshot(0, 0);
            println!("{}", on_quit(&args.shown(), &last, log_length, end.ended()));
            return anyhow::Ok(None);
        }
        let driver = crate::traffic::replay::replay(runner, reader, fleet, opts);
        let (mut summary, out) = run.headless(driver, |out| out.as_ref().map_or(0, |o| o.lost)).await?;
        // What was recorded up to a bad line is kept whole (the run is over).
        let out = out?;
        args.skipped(&mut summary, &out, true);
        anyhow::Ok(Some(summary))
    })?;
    match summary {
        Some(summary) => write_summary(&summary, args.summary_json.as_ref()),
        None => Ok(()),
    }
}

/// What a replay watched in the console says once the console is closed:
/// how far it got through the log and how its requests ended.
fn on_quit(
    log: &str,
    last: &crate::telemetry::snapshot::Snapshot,
    length_ms: Option<u64>,
    ended: Option<Result<String, String>>,
) -> String {
    let clock = crate::tui::ui::clock;
    let at = match (&ended, length_ms) {
        (Some(Ok(done)), _) => format!("done: {done}"),
        (Some(Err(why)), _) => format!("stopped: {why}"),
        (None, Some(total)) => format!(
            "quit at {} of {} ({:.0}% of the log)",
            clock(last.t_ms.min(total)),
            clock(total),
            100.0 * last.t_ms.min(total) as f64 / total.max(1) as f64
        ),
        (None, None) => format!("quit at {}", clock(last.t_ms)),
    };
    let share = |n: u64| 100.0 * n as f64 / last.requests.max(1) as f64;
    let levels: Vec<String> = crate::outcome::Level::ALL
        .iter()
        .zip(last.by_level)
        .map(|(l, n)| format!("{} {n} ({:.1}%)", l.as_str(), share(n)))
        .collect();
    format!(
        "replay {log}: {at}\n{} requests: {}\n{} tokens, ${:.2}",
        last.requests,
        levels.join(", "),
        last.tokens,
        last.cost_usd
    )
}

/// What the console shows of a replay: how it ended and the recorded
/// outcomes, as the driver notes them.
#[derive(Default)]
pub struct ReplayShown {
    /// How the replay ended.
    pub end: ReplayEnd,
    /// The recorded outcomes read so far.
    pub outcomes: Arc<RecordedOutcomes>,
}

impl ReplayView for ReplayShown {
    fn ended(&self) -> Option<Result<String, String>> {
        self.end.get()
    }

    fn recorded(&self, request: u64) -> Option<Recorded> {
        self.outcomes.get(request).map(|o| Recorded {
            level: o.level,
            quality: o.quality,
            tokens: o.tokens,
            chain: o.chain,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::snapshot::Snapshot;

    #[test]
    fn quitting_says_how_far_the_replay_got_and_how_its_requests_ended() {
        let last = Snapshot {
            t_ms: 90_000,
            requests: 200,
            by_level: [150, 20, 10, 0, 20],
            tokens: 12_345,
            cost_usd: 0.5,
            ..Snapshot::default()
        };
        let said = on_quit("night.jsonl", &last, Some(360_000), None);
        assert_eq!(
            said,
            "replay night.jsonl: quit at 01:30 of 06:00 (25% of the log)\n\
             200 requests: none 150 (75.0%), partial 20 (10.0%), fallback 10 (5.0%), deferred 0 (0.0%), failed 20 (10.0%)\n\
             12345 tokens, $0.50"
        );
        let done = on_quit(
            "night.jsonl",
            &last,
            Some(60_000),
            Some(Ok("200 requests, 0 lost".into())),
        );
        assert!(
            done.starts_with("replay night.jsonl: done: 200 requests, 0 lost\n"),
            "{done}"
        );
    }
}
