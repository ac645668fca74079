//! Traffic log throughput: reading (parse + validate) and recording
//! (events → lines on disk), 100,000 records per iteration; replaying a
//! 1,000,000-request gateway-shaped log at `--speed max` against its
//! recorded providers (the replay goal's case: about a minute in all).

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::request::{AgentRequest, Via};
use fusebox::runner::Runner;
use fusebox::target::Target;
use fusebox::telemetry::events::{Arrival, Attempt, EventBus, EventKind};
use fusebox::traffic::log::writer::{Fsync, RecordOptions, RecordedContent, Recorder};
use fusebox::traffic::log::{Header, LogReader};
use fusebox::traffic::replay::{recorded_parts, replay, ReplayOptions};
use std::io::Write;

/// The binary's allocator, so the figures are the binary's.
#[global_allocator]
static GLOBAL: fusebox::alloc::Mimalloc = fusebox::alloc::Mimalloc;

const N: u64 = 100_000;

fn events() -> Vec<EventKind> {
    (0..N / 2)
        .flat_map(|i| {
            let req = AgentRequest {
                id: i,
                user: format!("user-{}", i % 1000).into(),
                session: format!("s{}", i % 3000).into(),
                route: "default".into(),
                tools: vec!["get_order".into()],
                max_tokens: 512,
                max_steps: 4,
                ..AgentRequest::default()
            };
            let att = Attempt {
                model: Some("gpt-4o".into()),
                status: Some(200),
                latency_ms: 800,
                input_tokens: 120,
                output_tokens: 80,
                ..Attempt::of(i, Target::provider("openai"))
            };
            [
                EventKind::Request(Box::new(Arrival {
                    request: req,
                    via: Via::Agent,
                })),
                EventKind::Attempt(Box::new(att)),
            ]
        })
        .collect()
}

fn traffic(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _g = rt.enter();
    let clock = Clock::system();
    let dir = tempfile::tempdir().unwrap();
    let evs = events();
    let mut g = c.benchmark_group("traffic log");
    g.throughput(Throughput::Elements(N));
    g.sample_size(10);
    g.bench_function("record 100k records (fsync every 1000 ms)", |b| {
        b.iter(|| {
            // Through the bus and its bounded channel, as a run records.
            let bus = EventBus::new(clock, 16);
            let header = Header {
                v: 1,
                started_at: "2026-11-29T00:00:00Z".into(),
                seed: 1,
                tools: Default::default(),
            };
            let opts = RecordOptions {
                fsync: Fsync::Every(std::time::Duration::from_millis(1000)),
                content: RecordedContent::None,
                rotate_bytes: None,
            };
            let rec = Recorder::start(&dir.path().join("rec.jsonl"), opts, header, &bus).unwrap();
            for e in &evs {
                bus.emit(e.clone());
            }
            bus.close_subscribers();
            let stats = rec.finish().unwrap();
            assert_eq!(stats.records, N + 1, "every record and the header");
            stats
        })
    });
    // A log to read: the one just recorded.
    let path = dir.path().join("read.jsonl");
    {
        let bus = EventBus::new(clock, 16);
        let header = Header {
            v: 1,
            started_at: "2026-11-29T00:00:00Z".into(),
            seed: 1,
            tools: Default::default(),
        };
        let rec = Recorder::start(&path, RecordOptions::default(), header, &bus).unwrap();
        for e in &evs {
            bus.emit(e.clone());
        }
        bus.close_subscribers();
        rec.finish().unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .flush()
            .unwrap();
    }
    g.bench_function("read and validate 100k records", |b| {
        b.iter(|| {
            let n = LogReader::open(&path, false).unwrap().filter(Result::is_ok).count();
            assert_eq!(n as u64, N);
        })
    });
    g.finish();
}

/// Requests per replay iteration (about 3 lines each, 500 MB in all): a
/// million, as the goal is set, so the fixed cost of a replay (a runtime,
/// the reserved tables, draining the last requests) weighs as it does there.
const REPLAYED: u64 = 1_000_000;

fn replaying(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("gateway.jsonl");
    let file = std::fs::File::create(&log).unwrap();
    fusebox::traffic::load::synth::gateway_log(REPLAYED, 2_000, &mut std::io::BufWriter::new(file)).unwrap();
    let cfg =
        Config::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/replay-bench.toml")).unwrap();
    // As the binary does for runs at --speed max.
    fusebox::alloc::keep_freed_memory();
    let mut g = c.benchmark_group("replay");
    g.throughput(Throughput::Elements(REPLAYED));
    // One replay per sample: it takes seconds.
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.warm_up_time(std::time::Duration::from_secs(1));
    g.measurement_time(std::time::Duration::from_secs(60));
    g.bench_function("1M gateway requests at --speed max, recorded providers", |b| {
        b.iter(|| {
            // As `fusebox replay --headless --speed max` runs it.
            let rt = fusebox::traffic::replay::runtime(false, true).unwrap();
            rt.block_on(async {
                let (mut parts, fleet) = recorded_parts(&cfg, Clock::with_wall_anchor(0), Seed(42));
                parts.spool = Some(dir.path().join("spool.jsonl"));
                let runner = Runner::new(cfg.clone(), parts).unwrap();
                let reader = LogReader::open(&log, false).unwrap();
                let opts = ReplayOptions {
                    operator: true,
                    ..ReplayOptions::default()
                };
                let out = replay(runner, reader, Some(fleet), opts).await.unwrap();
                assert_eq!((out.requests, out.lost), (REPLAYED, 0));
            })
        })
    });
    g.finish();
}

criterion_group!(benches, traffic, replaying);
criterion_main!(benches);
