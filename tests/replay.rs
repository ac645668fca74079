//! Replay: a recorded scenario re-driven against its recorded providers
//! gives the recorded outcomes again; under another config it gives the
//! outcomes that config implies (what-if).

use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::provider::Provider;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::traffic::load::run_scenario;
use fusebox::traffic::log::{Header, LogReader};
use fusebox::traffic::record::{Content, Fsync, RecordOptions, Recorder};
use fusebox::traffic::replay::{replay, RecordedFleet, RecordedProvider, RecordedTools, ReplayOptions, Replayed};
use fusebox::traffic::scenario::Scenario;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

async fn record(dir: &Path, scenario: &str, secs: u64, content: Content) -> (std::path::PathBuf, u64) {
    let path = dir.join("traffic.jsonl");
    let mut parts = RunnerParts::mock(Clock::with_wall_anchor(0), Seed(8));
    parts.spool = Some(dir.join("spool-rec.jsonl"));
    let runner = Runner::new(Config::default(), parts).unwrap();
    let header = Header {
        v: 1,
        started_at: "2026-11-29T02:00:00Z".into(),
        seed: 8,
    };
    let opts = RecordOptions {
        fsync: Fsync::Os,
        content,
        rotate_bytes: None,
    };
    let rec = Recorder::start(&path, opts, header, runner.events().subscribe()).unwrap();
    let run = run_scenario(
        runner.clone(),
        &Scenario::load(scenario).unwrap(),
        Duration::from_secs(secs),
        Seed(8),
    )
    .await;
    assert_eq!(run.lost, 0);
    runner.events().close_subscribers();
    rec.finish().unwrap();
    (path, runner.totals().tokens.load(std::sync::atomic::Ordering::Relaxed))
}

async fn replay_with(dir: &Path, log: &Path, cfg: Config, name: &str) -> (Arc<Runner>, Replayed) {
    let clock = Clock::with_wall_anchor(0);
    let fleet = Arc::new(RecordedFleet::default());
    let mut parts = RunnerParts::mock(clock, Seed(8));
    parts.spool = Some(dir.join(format!("spool-{name}.jsonl")));
    for p in cfg.providers.keys() {
        parts.providers.insert(
            p.clone(),
            Arc::new(RecordedProvider::new(p, fleet.clone(), clock)) as Arc<dyn Provider>,
        );
    }
    parts.tools = Some(Arc::new(RecordedTools::new(fleet.clone(), clock)));
    let runner = Runner::new(cfg, parts).unwrap();
    let reader = LogReader::open(log, false).unwrap();
    let out = replay(
        runner.clone(),
        reader,
        Some(fleet),
        ReplayOptions {
            operator: true,
            compare: true,
            outcomes: None,
        },
    )
    .await
    .unwrap();
    (runner, out)
}

/// Exact request by request needs the recorded content: content-keyed caches
/// (answers, tool results keyed by their arguments) hit as recorded only then.
#[tokio::test(start_paused = true)]
async fn replaying_a_recording_reproduces_its_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let (log, tokens) = record(dir.path(), "2am-incident", 240, Content::Full).await;
    let (runner, out) = replay_with(dir.path(), &log, Config::default(), "same").await;
    let replayed = runner.totals().tokens.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        replayed, tokens,
        "the same tokens are consumed, deferred re-drives included"
    );
    assert!(out.requests > 500);
    assert_eq!(out.lost, 0);
    assert!(
        out.operator_actions >= 1,
        "the scenario's fault change is an operator record"
    );
    let total = out.levels.len();
    let same = out
        .levels
        .values()
        .filter(|(rec, rep)| rec.is_some() && rec == rep)
        .count();
    assert_eq!(same, total, "every request ends as recorded ({same} of {total})");
    // The incident happens again: get_order's breaker opens.
    let t = runner.registry().find("tool:get_order").unwrap().stats.view();
    assert!(t.rejected_open > 0, "{t:?}");
}

#[tokio::test(start_paused = true)]
async fn what_if_a_stricter_breaker_would_have_tripped_earlier() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = record(dir.path(), "2am-incident", 240, Content::Full).await;
    let (base, _) = replay_with(dir.path(), &log, Config::default(), "base").await;
    let mut strict = Config::default();
    strict.tools.get_mut("get_order").unwrap().breaker = Some(fusebox::config::BreakerConfig {
        consecutive_failures: 2,
        ..Default::default()
    });
    let (what_if, _) = replay_with(dir.path(), &log, strict, "strict").await;
    let calls = |r: &Runner| r.registry().find("tool:get_order").unwrap().stats.view();
    let (b, w) = (calls(&base), calls(&what_if));
    assert!(
        w.failed < b.failed,
        "tripping after 2 failures wastes fewer calls: {} < {}",
        w.failed,
        b.failed
    );
    assert!(w.rejected_open >= b.rejected_open);
}
