//! Criterion benchmarks of the breaker, the limiter and the runner's decision path.

use criterion::{criterion_group, criterion_main, Criterion};
use fusebox::clock::Clock;
use fusebox::config::{BreakerConfig, Config, LimiterConfig};
use fusebox::provider::{Message, ToolSpec};
use fusebox::resilience::breaker::{Breaker, CallRecord};
use fusebox::resilience::limiter::Limiter;
use fusebox::runner::{LlmCall, Tally};
use fusebox::target::Target;
use fusebox::telemetry::events::EventBus;
use std::sync::Arc;

fn breaker(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _g = rt.enter();
    let b = Breaker::new(
        Target::provider("x"),
        BreakerConfig::default(),
        EventBus::new(Clock::system(), 16),
        tokio::time::Instant::now(),
    );
    c.bench_function("breaker acquire+record", |bench| {
        bench.iter(|| {
            let now = tokio::time::Instant::now();
            let p = b.try_acquire(now).unwrap();
            b.record(p, &CallRecord::default(), now);
        })
    });
}

fn limiter(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _g = rt.enter();
    let cfg = Config::default();
    let l = Limiter::new(
        "openai",
        &cfg.providers["openai"],
        LimiterConfig::default(),
        EventBus::new(Clock::system(), 16),
        tokio::time::Instant::now(),
    );
    c.bench_function("limiter acquire+settle", |bench| {
        bench.iter(|| {
            let now = tokio::time::Instant::now();
            let p = l.try_acquire(4, 1, now).unwrap();
            l.settle(p, 1, 1, fusebox::resilience::limiter::Signal::Neutral, now);
        })
    });
}

fn runner(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runner = rt.block_on(async { fusebox::bench::bench_runner() });
    let messages: Arc<[Message]> = vec![Message::user("Where is order #38291?")].into();
    let tools: Arc<[ToolSpec]> = Vec::new().into();
    let users: Vec<String> = (0..1000).map(|i| format!("user-{i}")).collect();
    let route = runner.catalog().route("default").unwrap();
    let mut i = 0usize;
    c.bench_function("runner call_llm decision path", |bench| {
        bench.iter(|| {
            i += 1;
            let call = LlmCall::new(
                i as u64,
                &users[i % users.len()],
                route,
                messages.clone(),
                tools.clone(),
                64,
            );
            let mut tally = Tally::default();
            rt.block_on(runner.call_llm(&call, &mut tally)).unwrap();
        })
    });
}

criterion_group!(benches, breaker, limiter, runner);
criterion_main!(benches);
