//! Traffic log throughput: reading (parse + validate) and recording
//! (events → lines on disk), 100,000 records per iteration.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fusebox::clock::Clock;
use fusebox::runner::request::AgentRequest;
use fusebox::telemetry::events::{Attempt, Event, EventKind};
use fusebox::traffic::log::{Header, LogReader};
use fusebox::traffic::record::{Content, Fsync, RecordOptions, Recorder};
use std::io::Write;

const N: u64 = 100_000;

fn events() -> Vec<Event> {
    (0..N / 2)
        .flat_map(|i| {
            let req = AgentRequest {
                id: i,
                user: format!("user-{}", i % 1000),
                session: format!("s{}", i % 3000),
                route: "default".into(),
                tools: vec!["get_order".into()],
                max_tokens: 512,
                max_steps: 4,
                ..AgentRequest::default()
            };
            let att = Attempt {
                request: i,
                target: "provider:openai".into(),
                model: Some("gpt-4o".into()),
                status: Some(200),
                latency_ms: 800,
                input_tokens: 120,
                output_tokens: 80,
                ..Attempt::default()
            };
            [
                Event {
                    t_ms: i,
                    kind: EventKind::Request(Box::new(req)),
                },
                Event {
                    t_ms: i,
                    kind: EventKind::Attempt(Box::new(att)),
                },
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
    let _clock = Clock::system();
    let dir = tempfile::tempdir().unwrap();
    let evs = events();
    let mut g = c.benchmark_group("traffic log");
    g.throughput(Throughput::Elements(N));
    g.sample_size(10);
    g.bench_function("record 100k records (fsync every 1000 ms)", |b| {
        b.iter(|| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let header = Header {
                v: 1,
                started_at: "2026-11-29T00:00:00Z".into(),
                seed: 1,
            };
            let opts = RecordOptions {
                fsync: Fsync::Every(std::time::Duration::from_millis(1000)),
                content: Content::None,
                rotate_bytes: None,
            };
            let rec = Recorder::start(&dir.path().join("rec.jsonl"), opts, header, rx).unwrap();
            for e in &evs {
                tx.send(e.clone()).unwrap();
            }
            drop(tx);
            rec.finish().unwrap()
        })
    });
    // A log to read: the one just recorded.
    let path = dir.path().join("read.jsonl");
    {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let header = Header {
            v: 1,
            started_at: "2026-11-29T00:00:00Z".into(),
            seed: 1,
        };
        let rec = Recorder::start(&path, RecordOptions::default(), header, rx).unwrap();
        for e in &evs {
            tx.send(e.clone()).unwrap();
        }
        drop(tx);
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

criterion_group!(benches, traffic);
criterion_main!(benches);
