//! One way to run the runner, whatever drives it (a scenario, a replay, the
//! gateway's clients): a recorder on its events, pacing of its virtual
//! clock, a fleet to share state with, then either the console over it or
//! a headless run to a summary. The recording ends whole however the run
//! ends.

use super::args::{ConsoleArgs, RecordArgs, Speed};
use crate::clock::Clock;
use crate::config::Config;
use crate::fleet::Fleet;
use crate::runner::{Runner, RunnerParts};
use crate::traffic::log::writer::Recorder;
use crate::traffic::pace::Pace;
use crate::traffic::summary::{collect_transitions, Summary};
use crate::tui::app::Options;
use crate::tui::keymap::KeyMap;
use crate::tui::theme::Theme;
use anyhow::{bail, Context, Result};
use std::future::Future;
use std::io::IsTerminal;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

/// The console's look and keys, set up before anything runs.
pub struct Ui {
    theme: Theme,
    keymap: KeyMap,
}

impl Ui {
    /// The console for `cmd` (named in hints), when not headless: a
    /// terminal and a real-time speed are needed.
    pub fn setup(headless: bool, c: &ConsoleArgs, speed: Speed, cmd: &str) -> Result<Option<Self>> {
        if headless {
            return Ok(None);
        }
        if speed.is_max() {
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
        Ok(Some(Self { theme, keymap }))
    }

    /// The console over `feed`, until the operator quits.
    pub async fn console(self, feed: crate::tui::control::Feed, opts: Options) -> Result<()> {
        Ok(self.console_with(feed, opts, None).await?)
    }

    async fn console_with(
        self,
        feed: crate::tui::control::Feed,
        opts: Options,
        pace: Option<Arc<Pace>>,
    ) -> Result<(), crate::tui::ConsoleError> {
        crate::tui::run(feed, opts, self.theme, self.keymap, pace).await
    }
}

/// The spool file: given, configured, or fresh in a private temporary
/// directory, which is removed when the returned guard is dropped (at exit:
/// nobody else knows its name).
pub fn spool_file(given: Option<PathBuf>, cfg: &Config) -> Result<(PathBuf, Option<tempfile::TempDir>)> {
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

/// The tools of a run that calls them itself (the demo, a live replay):
/// the config's HTTP tools over HTTP, the rest mock tools on `parts`'
/// fault table.
pub fn live_tools(cfg: &Config, parts: &mut RunnerParts) -> Result<()> {
    let mock = Arc::new(crate::tools::MockTools::new(parts.seed, parts.faults.clone()));
    parts.tools = Some(crate::tools::http::HttpTools::wrap(cfg, parts.clock, mock).map_err(anyhow::Error::msg)?);
    Ok(())
}

/// The run's clock: virtual time from 0 (deterministic), or anchored at the
/// system's wall time when sharing state with a fleet (Redis time is real).
pub fn run_clock(fleet: bool) -> Clock {
    if fleet {
        Clock::system()
    } else {
        Clock::with_wall_anchor(0)
    }
}

/// A runner, set up to run.
pub struct Run {
    /// The runner.
    pub runner: Arc<Runner>,
    clock: Clock,
    recorder: Option<Recorder>,
    record_path: Option<PathBuf>,
    tracing: Option<crate::otel::Tracing>,
    pace: Option<Arc<Pace>>,
    fleet: Option<Arc<Fleet>>,
    wall: std::time::Instant,
}

impl Run {
    /// The fleet it shares state with, if any.
    pub fn fleet(&self) -> Option<&Arc<Fleet>> {
        self.fleet.as_ref()
    }

    /// The count of records its recording could not write, when it records.
    pub fn records_dropped(&self) -> Option<Arc<std::sync::atomic::AtomicU64>> {
        self.recorder.as_ref().map(Recorder::dropped)
    }

    /// Starts recording the runner's events (`record`), pacing its clock
    /// (`pace`: a virtual clock kept at this speed of real time) and
    /// sharing its state with the fleet at `state`. Pacing starts before
    /// Redis is reached, so that its timeouts are real.
    pub async fn start(
        runner: Arc<Runner>,
        record: &RecordArgs,
        seed: u64,
        pace: Option<Speed>,
        state: Option<&String>,
    ) -> Result<Self> {
        let clock = *runner.clock();
        let recorder = record.start(&runner, seed)?;
        let tracing = record.trace(&runner)?;
        let pace = match pace {
            Some(Speed::Factor(f)) => {
                let p = Pace::new(f);
                tokio::spawn(p.clone().run(clock));
                Some(p)
            }
            Some(Speed::Max) | None => None,
        };
        let fleet = match state {
            Some(url) => Some(Fleet::start(url, runner.clone()).await?),
            None => None,
        };
        Ok(Self {
            runner,
            clock,
            recorder,
            record_path: record.record.clone(),
            tracing,
            pace,
            fleet,
            wall: std::time::Instant::now(),
        })
    }

    /// The console over the runner while `driver` (if any) drives it in the
    /// background, until the operator quits. An error the driver ended
    /// with (a bad log line) is said once the terminal is back.
    pub async fn console(
        mut self,
        ui: Ui,
        opts: Options,
        driver: Option<tokio::task::JoinHandle<Result<()>>>,
    ) -> Result<()> {
        let r = self.show(ui, opts).await;
        if let Some(d) = &driver {
            d.abort();
        }
        self.finish()?;
        r?;
        if let Some(d) = driver {
            if let Ok(Err(e)) = d.await {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The console over the run, until it is left (`q`, or a signal); the
    /// run goes on (see [`Run::finish`]).
    pub async fn show(&mut self, ui: Ui, opts: Options) -> Result<(), crate::tui::ConsoleError> {
        ui.console_with(crate::tui::control::Feed::local(&self.runner), opts, self.pace.take())
            .await
    }

    /// Drives the run with `driver` to its end without a console; a
    /// Ctrl-C or SIGTERM stops it as `interrupted`. What it ended with and
    /// the summary (`lost` of what it returned: requests without an outcome).
    pub async fn headless<T>(
        mut self,
        driver: impl Future<Output = T>,
        lost: impl Fn(&T) -> u64,
    ) -> Result<(Summary, T)> {
        let transitions = collect_transitions(&self.runner);
        let out = tokio::select! {
            out = driver => out,
            _ = interrupted() => {
                self.finish()?;
                bail!("interrupted");
            }
        };
        self.runner.events().close_subscribers();
        self.finish()?;
        let seen = transitions.await?;
        let mut summary = Summary::build(
            &self.runner,
            &seen,
            lost(&out),
            self.clock.elapsed_ms(),
            self.wall.elapsed().as_millis() as u64,
        );
        summary.fleet = self.fleet.as_ref().map(|f| f.summary());
        Ok((summary, out))
    }

    /// The traces being exported, if any.
    pub fn tracing(&self) -> Option<&crate::otel::Tracing> {
        self.tracing.as_ref()
    }

    /// Closes the event bus to the recorder and the trace exporter, and
    /// waits for their last flush.
    pub fn finish(&mut self) -> Result<()> {
        if let Some(t) = self.tracing.take() {
            self.runner.events().close_subscribers();
            let url = t.endpoint().to_string();
            let sent = t.finish();
            let dropped = crate::otel::dropped(&self.runner);
            // Said where a closed stderr cannot make it panic.
            let _ = writeln!(std::io::stderr(), "sent {sent} spans to {url}, {dropped} dropped");
        }
        let Some(rec) = self.recorder.take() else { return Ok(()) };
        let path = self
            .record_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        self.runner.events().close_subscribers();
        let stats = rec.finish().with_context(|| format!("recording to {path} failed"))?;
        // Said where a closed stderr cannot make it panic.
        let _ = writeln!(
            std::io::stderr(),
            "recorded {} records to {path}{}",
            stats.records,
            if stats.files > 1 {
                format!(" ({} files after rotation)", stats.files)
            } else {
                String::new()
            }
        );
        Ok(())
    }
}

/// Prints or writes the summary; a request without an outcome is an error.
pub fn write_summary(summary: &Summary, path: Option<&PathBuf>) -> Result<()> {
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

/// Each SIGHUP, as it comes (none if it cannot be caught).
pub fn hangups() -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    match signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP]) {
        Ok(mut signals) => {
            let spawned = std::thread::Builder::new().name("sighup".into()).spawn(move || {
                for _ in signals.forever() {
                    if tx.send(()).is_err() {
                        return;
                    }
                }
            });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "SIGHUP will not reload the config");
            }
        }
        Err(e) => tracing::warn!(error = %e, "SIGHUP will not reload the config"),
    }
    rx
}

/// Resolves at the first Ctrl-C (SIGINT) or SIGTERM (how a service manager
/// stops `serve`), so a recording ends whole. A thread waits for the signal, so
/// it works on a runtime without tokio's I/O driver (a recorded replay runs
/// on timers alone). Pends forever if the handler cannot be installed.
pub fn interrupted() -> impl Future<Output = ()> {
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
