//! `fusebox bench`: the full decision path (budget + limiter + breakers +
//! router + bookkeeping) with an instant in-process provider, on every core.

use crate::clock::{Clock, Seed};
use crate::config::Config;
use crate::provider::{InstantProvider, Message, Provider, ToolSpec};
use crate::runner::llm::{LlmCall, Tally};
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
}

/// A runner over instant providers with limits that never bind, so the
/// measured path is the decision logic itself.
pub fn bench_runner() -> Arc<Runner> {
    let mut cfg = Config::default();
    for p in cfg.providers.values_mut() {
        p.tpm = 0;
        p.itpm = 0;
        p.otpm = 0;
        p.rpm = 0;
        p.concurrency = 0;
    }
    cfg.budgets.global_tokens_per_hour = 0;
    cfg.budgets.global_tokens_per_day = 0;
    cfg.budgets.global_cost_per_hour_usd = 0.0;
    cfg.budgets.global_cost_per_day_usd = 0.0;
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

/// Runs `requests` decisions on `threads` worker threads, spread over
/// `users` distinct users.
pub fn run(requests: u64, threads: usize, users: u64) -> std::io::Result<BenchResult> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let runner = bench_runner();
        let messages: Arc<[Message]> = vec![
            Message::new("system", "You are terse."),
            Message::new("user", "Where is order #38291?"),
        ]
        .into();
        let tools: Arc<[ToolSpec]> = Vec::new().into();
        let per = requests / threads as u64;
        let start = std::time::Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for w in 0..threads {
            let (runner, messages, tools) = (runner.clone(), messages.clone(), tools.clone());
            set.spawn(async move {
                use std::fmt::Write;
                let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
                let mut tally = Tally::default();
                let mut user = String::with_capacity(32);
                for i in 0..per {
                    user.clear();
                    let _ = write!(user, "user-{}", (i * threads as u64 + w as u64) % users);
                    let call = LlmCall {
                        request_id: i,
                        user: &user,
                        route: "default",
                        step: 0,
                        messages: messages.clone(),
                        tools: tools.clone(),
                        max_tokens: 64,
                    };
                    let t0 = std::time::Instant::now();
                    let r = runner.call_llm(&call, &mut tally).await;
                    let ns = t0.elapsed().as_nanos() as u64;
                    debug_assert!(r.is_ok());
                    h.saturating_record(ns.max(1));
                    tally.hops.clear();
                }
                h
            });
        }
        let mut all = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
        while let Some(h) = set.join_next().await {
            if let Ok(h) = h {
                let _ = all.add(h);
            }
        }
        let wall = start.elapsed().as_secs_f64();
        let n = per * threads as u64;
        Ok(BenchResult {
            requests: n,
            wall_s: wall,
            req_per_s: n as f64 / wall,
            p50_us: all.value_at_quantile(0.5) as f64 / 1000.0,
            p99_us: all.value_at_quantile(0.99) as f64 / 1000.0,
        })
    })
}
