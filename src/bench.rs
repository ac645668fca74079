//! `fusebox bench`: the full decision path (budget + limiter + breakers +
//! router + bookkeeping) with an instant in-process provider, on every core.

use crate::clock::{Clock, Seed};
use crate::config::Config;
use crate::provider::{InstantProvider, Message, Provider, ToolSpec};
use crate::runner::{LlmCall, Tally};
use crate::runner::{Runner, RunnerParts};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;

/// The figures `fusebox bench` prints.
#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    /// Requests made.
    pub requests: u64,
    /// Wall time (s).
    pub wall_s: f64,
    /// Throughput.
    pub req_per_s: f64,
    /// Median latency of one decision (µs).
    pub p50_us: f64,
    /// 99th percentile (µs).
    pub p99_us: f64,
    /// Fleet mode: round trips to Redis for limits and budgets during the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round_trips: Option<u64>,
    /// Fleet mode: round trips per decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round_trip_share: Option<f64>,
    /// With traces: spans sent to the collector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spans_sent: Option<u64>,
    /// With traces: spans dropped (the export queue full: the collector or
    /// the exporter thread could not keep up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spans_dropped: Option<u64>,
}

/// A runner over instant providers whose limits are all in force but too
/// large to bind at a million requests a second, so every bucket, budget
/// and breaker is checked and the measured path is the decision logic.
pub fn bench_runner() -> Arc<Runner> {
    bench_runner_with(1 << 50, false)
}

/// How a run spreads its load, and what it turns on.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Worker threads.
    pub threads: usize,
    /// Distinct users the requests are spread over.
    pub users: u64,
    /// The overload controls on: adaptive concurrency (its limit far above
    /// the load), the priority queue, the spend-rate breakers (per user and
    /// global) and hedging (after 10 s: every call is raced, none hedged).
    pub overload_control: bool,
}

/// Like [`bench_runner`], with provider buckets of `limit` per minute.
fn bench_runner_with(limit: u64, overload_control: bool) -> Arc<Runner> {
    const HUGE: u64 = 1 << 50;
    let mut cfg = Config::default();
    if overload_control {
        let a = &mut cfg.limiter.adaptive;
        a.enabled = true;
        a.ceiling = crate::config::MAX_ADAPTIVE_CEILING;
        a.initial = a.ceiling;
        cfg.budgets.spend_rate.enabled = true;
        cfg.budgets.spend_rate.global = true;
        cfg.limiter.queue.enabled = true;
        for r in cfg.routes.values_mut() {
            r.hedge = crate::config::Hedge::AfterMs(10_000);
        }
    }
    for p in cfg.providers.values_mut() {
        p.tpm = limit;
        p.itpm = limit;
        p.otpm = limit;
        p.rpm = limit;
        p.concurrency = 1 << 20;
    }
    cfg.budgets.user_tokens_per_minute = HUGE;
    cfg.budgets.user_tokens_per_hour = HUGE;
    cfg.budgets.user_tokens_per_day = HUGE;
    cfg.budgets.user_cost_per_day_usd = 1e12;
    cfg.budgets.global_tokens_per_hour = HUGE;
    cfg.budgets.global_tokens_per_day = HUGE;
    cfg.budgets.global_cost_per_hour_usd = 1e12;
    cfg.budgets.global_cost_per_day_usd = 1e12;
    let mut parts = RunnerParts::mock(Clock::system(), Seed(1));
    parts.providers = cfg
        .providers
        .keys()
        .map(|n| (n.clone(), Arc::new(InstantProvider::default()) as Arc<dyn Provider>))
        .collect::<HashMap<_, _>>();
    match Runner::new(cfg, parts) {
        Ok(r) => r,
        Err(e) => unreachable!("no spool configured: {e}"),
    }
}

/// Runs `requests` decisions on `threads` OS threads (one single-threaded
/// runtime each, so every core works), spread over `users` distinct users.
/// With `state` (a Redis URL) the runner joins a fleet there: provider
/// limits are leased from Redis, with buckets finite (10⁹ per minute) so
/// leases run out and are topped up, but far above the load. With `otlp`
/// (an OTLP/HTTP traces URL) each decision is a request traced there, as
/// the gateway traces its calls.
pub fn run(requests: u64, shape: Shape, state: Option<&str>, otlp: Option<&str>) -> anyhow::Result<BenchResult> {
    let Shape { threads, users, .. } = shape;
    // Fleet tasks (lease top-ups, heartbeats) run on their own runtime.
    let setup = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let (runner, fleet) = setup.block_on(async {
        let runner = match state {
            Some(_) => bench_runner_with(1_000_000_000, shape.overload_control),
            None => bench_runner_with(1 << 50, shape.overload_control),
        };
        let fleet = match state {
            Some(url) => Some(crate::fleet::Fleet::start(url, runner.clone()).await?),
            None => None,
        };
        anyhow::Ok((runner, fleet))
    })?;
    if fleet.is_some() {
        // The first leases, before the clock starts.
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let tracing = otlp.map(|url| crate::otel::Tracing::start(&runner, url)).transpose()?;
    let trips_before = fleet.as_ref().map(|f| f.round_trips());
    let per = requests / threads as u64;
    let start_line = Arc::new(std::sync::Barrier::new(threads + 1));
    let workers: Vec<_> = (0..threads)
        .map(|w| {
            let (runner, start_line) = (runner.clone(), start_line.clone());
            std::thread::spawn(move || -> std::io::Result<Histogram<u64>> {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                let _guard = rt.enter();
                start_line.wait();
                Ok(rt.block_on(worker(runner, w as u64, threads as u64, per, users)))
            })
        })
        .collect();
    start_line.wait();
    let start = std::time::Instant::now();
    let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    for h in workers {
        let h = h
            .join()
            .map_err(|_| std::io::Error::other("a benchmark thread panicked"))??;
        let _ = all.add(h);
    }
    let wall = start.elapsed().as_secs_f64();
    let n = per * threads as u64;
    let spans_sent = tracing.map(|t| {
        runner.events().close_subscribers();
        t.finish()
    });
    let round_trips = fleet
        .as_ref()
        .zip(trips_before)
        .map(|(f, before)| f.round_trips() - before);
    Ok(BenchResult {
        requests: n,
        wall_s: wall,
        req_per_s: n as f64 / wall,
        p50_us: all.value_at_quantile(0.5) as f64 / 1000.0,
        p99_us: all.value_at_quantile(0.99) as f64 / 1000.0,
        round_trips,
        round_trip_share: round_trips.map(|t| t as f64 / n.max(1) as f64),
        spans_sent,
        spans_dropped: spans_sent.map(|_| crate::otel::dropped(&runner)),
    })
}

/// One thread's share: `per` decisions, timing each.
async fn worker(runner: Arc<Runner>, w: u64, threads: u64, per: u64, users: u64) -> Histogram<u64> {
    use std::fmt::Write;
    let messages: Arc<[Message]> = vec![
        Message::system("You are terse."),
        Message::user("Where is order #38291?"),
    ]
    .into();
    let tools: Arc<[ToolSpec]> = Vec::new().into();
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    let route = runner
        .catalog()
        .route("default")
        .expect("the built-in config has a default route");
    let mut tally = Tally::default();
    let mut user = String::with_capacity(32);
    let traced = runner.events().has_subscribers();
    for i in 0..per {
        user.clear();
        let id = i * threads + w;
        let _ = write!(user, "user-{}", id % users);
        let call = LlmCall::new(id, &user, route, messages.clone(), tools.clone(), 64);
        // A traced request's arrival and end are announced around the
        // decision, as the gateway does, outside the time measured.
        if traced {
            arrived(&runner, id, &user, &messages);
        }
        let t0 = std::time::Instant::now();
        let r = runner.call_llm(&call, &mut tally).await;
        let took = t0.elapsed();
        if traced {
            ended(&runner, id, &user, &tally, took);
        }
        h.saturating_record((took.as_nanos() as u64).max(1));
        debug_assert!(r.is_ok());
        tally.hops.clear();
    }
    h
}

/// A traced decision's arrival, as the gateway announces a call.
fn arrived(runner: &Runner, id: u64, user: &str, messages: &Arc<[Message]>) {
    use crate::telemetry::events::{Arrival, EventKind};
    runner.events().emit(EventKind::Request(Box::new(Arrival {
        request: crate::request::AgentRequest {
            id,
            user: user.into(),
            route: "default".into(),
            messages: messages.clone(),
            max_tokens: 64,
            ..Default::default()
        },
        via: crate::request::Via::Gateway,
    })));
}

/// A traced decision's outcome.
fn ended(runner: &Runner, id: u64, user: &str, tally: &Tally, took: std::time::Duration) {
    use crate::telemetry::events::EventKind;
    runner
        .events()
        .emit(EventKind::Outcome(Box::new(crate::outcome::Outcome {
            request: id,
            user: user.into(),
            level: crate::outcome::Level::None,
            chain: tally.hops.iter().map(|h| runner.catalog().hop_of(h)).collect(),
            quality: 1.0,
            tokens: 0,
            cost_usd: 0.0,
            missing: Vec::new(),
            user_message: None,
            answer: None,
            stale_ms: None,
            attempts: tally.attempts,
            latency_ms: took.as_millis() as u64,
            key: None,
        })));
}
