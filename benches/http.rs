//! One streamed completion against the loopback mock server: a bare reqwest
//! call (send, read the whole SSE body) versus fusebox's client + runner
//! (breakers, limiter, budgets, SSE parsing, tool-call assembly, settling).
//! Target: the fusebox path adds ≤ 200 µs at the median.

use criterion::{criterion_group, criterion_main, Criterion};
use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::mockserver::MockServer;
use fusebox::provider::fault::FaultTable;
use fusebox::provider::{LlmRequest, Message, ToolSpec};
use fusebox::runner::{LlmCall, Tally};
use fusebox::runner::{Runner, RunnerParts};
use std::sync::Arc;

fn http(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let base = rt.block_on(async {
        let s = MockServer::instant(Seed(1), Arc::new(FaultTable::default()));
        format!("http://{}", s.spawn("127.0.0.1:0").await.unwrap())
    });
    let messages: Arc<[Message]> = vec![Message::system("be brief"), Message::user("Where is order #38291?")].into();
    let tools: Arc<[ToolSpec]> = Vec::new().into();
    let req = LlmRequest {
        request_id: 1,
        step: 1,
        attempt: 0,
        model: "gpt-4o".into(),
        messages: messages.clone(),
        tools: tools.clone(),
        max_tokens: 16,
        ..LlmRequest::default()
    };
    let body = fusebox::wire::openai::render_request(&req.outgoing(true), fusebox::wire::openai::Dialect::OpenAi)
        .expect("a plain request renders");
    let client = reqwest::Client::new();
    let url = format!("{base}/v1/chat/completions");
    c.bench_function("http: bare reqwest, streamed completion", |b| {
        b.iter(|| {
            rt.block_on(async {
                let r = client
                    .post(&url)
                    .bearer_auth("k")
                    .header("x-fusebox-request", "1")
                    .header("x-fusebox-step", "1")
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success());
                r.bytes().await.unwrap()
            })
        })
    });

    let runner = rt.block_on(async {
        let mut cfg = Config::default();
        cfg.routes.get_mut("default").unwrap().chain = vec!["gpt-4o".into()];
        cfg.budgets.user_tokens_per_minute = 0;
        cfg.budgets.user_tokens_per_hour = 0;
        cfg.budgets.user_tokens_per_day = 0;
        cfg.budgets.user_cost_per_day_usd = 0.0;
        for p in cfg.providers.values_mut() {
            p.tpm = 0;
            p.rpm = 0;
        }
        let clock = Clock::system();
        let mut parts = RunnerParts::mock(clock, Seed(1));
        parts.providers = fusebox::provider::http::build(&cfg, clock, Some(&base)).unwrap();
        Runner::new(cfg, parts).unwrap()
    });
    let route = runner.catalog().route("default").unwrap();
    c.bench_function("http: fusebox client + runner, streamed completion", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut call = LlmCall::new(1, "bench", route, messages.clone(), tools.clone(), 16);
                call.step = 1;
                let mut tally = Tally::default();
                runner.call_llm(&call, &mut tally).await.unwrap()
            })
        })
    });
}

criterion_group!(benches, http);
criterion_main!(benches);
