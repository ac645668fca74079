//! Hedged calls counted: the call a hedge outran is charged to its user's
//! budgets, and the same tokens and cost are in its request's outcome, the
//! run's totals, `/metrics`, the recording and a replay of it.

use crate::common::{ask, hedging};
use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::telemetry::events::{Attempt, Cut, EventKind};
use fusebox::traffic::load::run_scenario;
use fusebox::traffic::load::scenario::Scenario;
use fusebox::traffic::log::writer::{Fsync, RecordOptions, RecordedContent, Recorder};
use fusebox::traffic::log::{Header, LogReader, Record};
use fusebox::traffic::replay::{recorded_parts, replay, replay_clock, ReplayOptions};
use fusebox::traffic::summary::Summary;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The cost (USD) of `input` and `output` tokens on `model`.
fn cost(r: &Runner, model: &str, input: u32, output: u32) -> f64 {
    let m = &r.config().models[model];
    (f64::from(input) * m.input_per_m + f64::from(output) * m.output_per_m) / 1e6
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// `/metrics` of a gateway over `runner`.
async fn scrape(runner: &Arc<Runner>) -> String {
    let gw = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", Default::default());
    let addr = gw.await.unwrap().addr;
    let body = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text();
    body.await.unwrap()
}

fn metric(scrape: &str, name: &str) -> f64 {
    let line = scrape
        .lines()
        .find(|l| l.split_once(' ').is_some_and(|(n, _)| n == name));
    line.and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {scrape}"))
}

/// The request whose gpt-4o call claude-haiku's hedge outran counts that
/// call at what its user's budgets were charged for it (its reservation:
/// a whole call has told nothing of its usage when it is cut), as wasted,
/// in its outcome, the run's totals and `/metrics`; its record says so.
#[tokio::test(start_paused = true)]
async fn an_outrun_call_counts_in_its_request_s_tokens_and_cost() {
    let (r, _, _) = hedging(500);
    let mut events = r.events().subscribe();
    let o = r.run(&ask(1, "alice")).await;
    assert_eq!(o.path(), vec!["gpt-4o ⏱outrun", "claude-haiku ✓"]);
    let attempts: Vec<Attempt> = std::iter::from_fn(|| events.try_recv().ok())
        .filter_map(|e| match e.kind {
            EventKind::Attempt(a) => Some(*a),
            _ => None,
        })
        .collect();
    let [answered, outrun] = &attempts[..] else {
        panic!("{attempts:?}")
    };
    assert_eq!((answered.cut, outrun.cut), (None, Some(Cut::Outrun)));
    assert_eq!((answered.input_tokens, answered.output_tokens), (20, 50));
    // Charged at its reservation: its prompt and the whole output cap.
    assert_eq!(outrun.output_tokens, 256);
    assert!(outrun.input_tokens > 0);
    let cut = u64::from(outrun.input_tokens + outrun.output_tokens);
    assert!(close(
        outrun.cost_usd,
        cost(&r, "gpt-4o", outrun.input_tokens, outrun.output_tokens)
    ));
    assert!(close(answered.cost_usd, cost(&r, "claude-haiku", 20, 50)));
    // Both calls, in the outcome.
    assert_eq!(o.tokens, 70 + cut);
    assert!(close(o.cost_usd, answered.cost_usd + outrun.cost_usd), "{}", o.cost_usd);
    // As the user's budgets were charged.
    let now = r.clock().elapsed_ms();
    let alice = r.budgets().top_users(1, now).remove(0);
    assert_eq!(alice.tokens[0], o.tokens as f64);
    assert!(
        close(alice.cost_day, o.cost_usd),
        "{} against {}",
        alice.cost_day,
        o.cost_usd
    );
    // The run's totals: the cut call's tokens are wasted.
    let s = Summary::build(&r, &[], 0, now, 0);
    assert_eq!((s.tokens.consumed, s.tokens.wasted), (70 + cut, cut));
    assert_eq!(s.cost_usd, (o.cost_usd * 1e4).round() / 1e4);
    // And `/metrics`.
    tokio::time::resume();
    let m = scrape(&r).await;
    assert_eq!(metric(&m, "fusebox_tokens_total"), (70 + cut) as f64);
    assert_eq!(metric(&m, "fusebox_tokens_wasted_total"), cut as f64);
    assert!((metric(&m, "fusebox_cost_usd_total") - o.cost_usd).abs() < 1e-6, "{m}");
}

/// `examples/hedging.toml`, budgets as they are there (none per user).
fn hedged_config() -> Config {
    Config::parse(include_str!("../../examples/hedging.toml"), "hedging.toml").unwrap()
}

/// What a heavy-tail run with hedging on reports it cost, against what its
/// budgets were charged (USD), and its hedges.
async fn reported_and_charged(seed: u64, minutes: u64) -> (f64, f64, u64) {
    let runner = Runner::new(
        hedged_config(),
        RunnerParts::mock(Clock::with_wall_anchor(0), Seed(seed)),
    )
    .unwrap();
    let scenario = Scenario::load("heavy-tail").unwrap();
    let demo = run_scenario(runner.clone(), &scenario, Duration::from_secs(minutes * 60), Seed(seed)).await;
    assert_eq!(demo.lost, 0);
    let now = runner.clock().elapsed_ms();
    let charged = runner.budgets().global_view(now).cost[1];
    let reported = runner.totals().cost_micro_usd.load(Ordering::Relaxed) as f64 / 1e6;
    let hedges = runner.catalog().registry().iter().map(|t| t.stats.view().hedged).sum();
    (reported, charged, hedges)
}

/// Over hedged heavy-tail runs at seeds 1 to 30 (four minutes each, on
/// threads of their own), the cost reported equals what the budgets were
/// charged, to within the micro-dollar each request's cost is counted in.
#[test]
fn a_hedged_run_reports_what_its_budgets_were_charged() {
    let seeds: Vec<u64> = (1..=30).collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(4);
    let chunks: Vec<Vec<u64>> = (0..threads)
        .map(|i| seeds.iter().copied().skip(i).step_by(threads).collect())
        .collect();
    let runs: Vec<(u64, (f64, f64, u64))> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                s.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .start_paused(true)
                        .build()
                        .unwrap();
                    chunk
                        .into_iter()
                        .map(|seed| (seed, rt.block_on(reported_and_charged(seed, 4))))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    for (seed, (reported, charged, hedges)) in runs {
        assert!(hedges > 0, "seed {seed}: hedged");
        assert!(
            (reported - charged).abs() <= 1e-4,
            "seed {seed}: reported {reported:.6} USD, charged {charged:.6} USD ({hedges} hedges)"
        );
    }
}

/// Records a heavy-tail run with hedging on: the log and the run's totals
/// (tokens, wasted, micro-USD, hedges).
async fn record(dir: &Path, seed: u64, minutes: u64) -> (std::path::PathBuf, [u64; 4]) {
    let path = dir.join("hedged.jsonl");
    let runner = Runner::new(
        hedged_config(),
        RunnerParts::mock(Clock::with_wall_anchor(0), Seed(seed)),
    )
    .unwrap();
    let header = Header {
        v: 1,
        started_at: "2026-12-05T02:00:00Z".into(),
        seed,
        tools: Default::default(),
    };
    let opts = RecordOptions {
        fsync: Fsync::Os,
        content: RecordedContent::Full,
        rotate_bytes: None,
    };
    let rec = Recorder::start(&path, opts, header, runner.events()).unwrap();
    let scenario = Scenario::load("heavy-tail").unwrap();
    let run = run_scenario(runner.clone(), &scenario, Duration::from_secs(minutes * 60), Seed(seed)).await;
    assert_eq!(run.lost, 0);
    runner.events().close_subscribers();
    rec.finish().unwrap();
    (path, totals(&runner))
}

fn totals(r: &Runner) -> [u64; 4] {
    let t = r.totals();
    let [tokens, wasted, cost] = [&t.tokens, &t.wasted, &t.cost_micro_usd].map(|n| n.load(Ordering::Relaxed));
    let hedges = r.catalog().registry().iter().map(|t| t.stats.view().hedged).sum();
    [tokens, wasted, cost, hedges]
}

/// A recording of a hedged run writes each outrun call with what it was
/// charged, and the outcomes' costs add up to the run's; replayed, the
/// hedges are outrun again and the totals are the recorded run's.
#[tokio::test(start_paused = true)]
async fn a_replay_of_a_hedged_run_reproduces_its_totals() {
    let dir = tempfile::tempdir().unwrap();
    let seed = 7;
    let (log, recorded) = record(dir.path(), seed, 3).await;
    let mut reader = LogReader::open(&log, false).unwrap();
    let (mut outrun, mut outcomes) = (Vec::new(), 0.0);
    while let Some(rec) = reader.next_record().unwrap() {
        match rec {
            Record::Attempt(a) if a.cut == Some(Cut::Outrun) => outrun.push(a),
            Record::Outcome(o) => outcomes += o.cost_usd,
            _ => {}
        }
    }
    assert!(!outrun.is_empty(), "some calls were outrun");
    for a in &outrun {
        let m = a.model.as_deref().unwrap();
        let price = &hedged_config().models[m];
        let cost =
            (f64::from(a.input_tokens) * price.input_per_m + f64::from(a.output_tokens) * price.output_per_m) / 1e6;
        assert!(a.input_tokens + a.output_tokens > 0, "{a:?}");
        assert!(a.cost_usd.is_some_and(|c| close(c, cost)), "{a:?}");
    }
    assert!((outcomes - recorded[2] as f64 / 1e6).abs() < 1e-4, "{outcomes}");
    // Replayed under the same config.
    let cfg = hedged_config();
    let reader = LogReader::open(&log, false).unwrap();
    let (parts, fleet) = recorded_parts(&cfg, replay_clock(reader.header()), Seed(seed));
    let runner = Runner::new(cfg, parts).unwrap();
    let opts = ReplayOptions {
        operator: true,
        compare: true,
        outcomes: None,
        jump_idle: false,
    };
    let out = replay(runner.clone(), reader, Some(fleet), opts).await.unwrap();
    assert_eq!(out.lost, 0);
    assert_eq!(totals(&runner), recorded, "tokens, wasted, micro-USD, hedges");
}
