//! Each overload mechanism on and off, on every built-in scenario, at
//! several seeds: where it helps and where it must cost nothing. Prints
//! the tables of `docs/overload.md` ("Where each one acts").
//!
//! cargo run --release --example do_no_harm -- [SEEDS] [MINUTES]
//!
//! SEEDS (default 5): seeds 1 to SEEDS; MINUTES (default 10) of virtual
//! time each. Every run is in-process on virtual time, as
//! `fusebox demo --headless` runs it.

use fusebox::clock::{Clock, Seed};
use fusebox::config::{Config, Hedge};
use fusebox::outcome::{HopEnd, Level, Outcome};
use fusebox::runner::{Runner, RunnerParts};
use fusebox::traffic::load::run_scenario;
use fusebox::traffic::load::scenario::Scenario;
use std::time::Duration;

/// A mechanism: its example config (on) and how to switch it off.
struct Mechanism {
    name: &'static str,
    config: &'static str,
    off: fn(&mut Config),
}

const MECHANISMS: [Mechanism; 4] = [
    Mechanism {
        name: "spend-rate breaker (examples/spend-rate.toml)",
        config: include_str!("spend-rate.toml"),
        off: |c| c.budgets.spend_rate.enabled = false,
    },
    Mechanism {
        name: "adaptive concurrency (examples/adaptive.toml)",
        config: include_str!("adaptive.toml"),
        off: |c| c.limiter.adaptive.enabled = false,
    },
    Mechanism {
        name: "priority queue and fair shares (examples/fair-shares.toml)",
        config: include_str!("fair-shares.toml"),
        off: |c| c.limiter.queue.enabled = false,
    },
    Mechanism {
        name: "hedging (examples/hedging.toml)",
        config: include_str!("hedging.toml"),
        off: |c| c.routes.values_mut().for_each(|r| r.hedge = Hedge::Off),
    },
];

/// One run's figures, the flooding tenant's requests aside (the party a
/// mechanism may act against): requests, answered (by any model, or
/// partly), answered by the route's first model alone, p99 of answered
/// (ms).
#[derive(Clone, Copy)]
struct Figures {
    requests: usize,
    answered: f64,
    first: f64,
    p99_ms: u64,
}

fn figures(outcomes: &[Outcome], first_model: &str, flood: Option<&str>) -> Figures {
    let outcomes: Vec<&Outcome> = outcomes.iter().filter(|o| Some(o.user.as_str()) != flood).collect();
    let answered: Vec<&Outcome> = outcomes
        .iter()
        .copied()
        .filter(|o| matches!(o.level, Level::None | Level::Partial | Level::Fallback))
        .collect();
    let by_first = answered
        .iter()
        .filter(|o| {
            let models = o.chain.iter().filter(|h| !h.name.starts_with("tool:"));
            models.clone().any(|h| h.name == first_model && h.end == HopEnd::Ok)
                && models.filter(|h| h.end == HopEnd::Ok).all(|h| h.name == first_model)
        })
        .count();
    let mut lat: Vec<u64> = answered.iter().map(|o| o.latency_ms).collect();
    lat.sort_unstable();
    let n = outcomes.len().max(1) as f64;
    Figures {
        requests: outcomes.len(),
        answered: answered.len() as f64 / n,
        first: by_first as f64 / n,
        p99_ms: lat.get(lat.len() * 99 / 100).copied().unwrap_or(0),
    }
}

fn run(cfg: &Config, scenario: &Scenario, seed: u64, minutes: u64) -> Figures {
    let first = cfg.routes["default"].chain[0].clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut parts = RunnerParts::mock(Clock::with_wall_anchor(0), Seed(seed));
        parts.spool = Some(dir.path().join("spool.jsonl"));
        let runner = Runner::new(cfg.clone(), parts).expect("a runner");
        let demo = run_scenario(runner, scenario, Duration::from_secs(minutes * 60), Seed(seed)).await;
        assert_eq!(demo.lost, 0, "{}: a request without an outcome", scenario.name);
        figures(&demo.outcomes, &first, scenario.noisy.as_ref().map(|n| n.user.as_str()))
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let arg = |i: usize, default: u64| std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (seeds, minutes) = (arg(1, 5), arg(2, 10));
    let scenarios: Vec<Scenario> = Scenario::built_in_names()
        .into_iter()
        .map(|n| Scenario::load(n).expect("a built-in scenario"))
        .collect();
    for m in &MECHANISMS {
        let on = Config::parse(m.config, m.name).expect("the example config");
        let mut off = on.clone();
        (m.off)(&mut off);
        println!(
            "\n{}, seeds 1–{seeds}, {minutes} min, the flooding tenant's requests aside: median on / off (worst seed's on − off)\n",
            m.name
        );
        println!("| scenario | answered | by the first model | p99 of answered |");
        println!("|---|---|---|---|");
        for sc in &scenarios {
            let pairs: Vec<(Figures, Figures)> = std::thread::scope(|s| {
                let jobs: Vec<_> = (1..=seeds)
                    .map(|seed| {
                        let (on, off) = (&on, &off);
                        s.spawn(move || (run(on, sc, seed, minutes), run(off, sc, seed, minutes)))
                    })
                    .collect();
                jobs.into_iter().map(|j| j.join().expect("a run")).collect()
            });
            let col = |f: fn(&Figures) -> f64, pct: bool| {
                let (a, b) = (
                    median(pairs.iter().map(|p| f(&p.0)).collect()),
                    median(pairs.iter().map(|p| f(&p.1)).collect()),
                );
                let worst = pairs.iter().map(|p| f(&p.0) - f(&p.1)).fold(f64::INFINITY, f64::min);
                if pct {
                    format!("{:.1} / {:.1} % ({:+.1})", a * 100.0, b * 100.0, worst * 100.0)
                } else {
                    let worst = pairs.iter().map(|p| f(&p.0) / f(&p.1).max(1.0)).fold(0.0, f64::max);
                    format!("{:.1} / {:.1} s (×{worst:.2})", a / 1000.0, b / 1000.0)
                }
            };
            let requests = pairs[0].0.requests;
            println!(
                "| {} ({requests} requests at seed 1) | {} | {} | {} |",
                sc.name,
                col(|f| f.answered, true),
                col(|f| f.first, true),
                col(|f| f.p99_ms as f64, false),
            );
        }
    }
}
