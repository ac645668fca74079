//! Recording: a demo scenario recorded to a traffic log reads back as valid
//! log v1 — one request and one outcome per request, attempts for known
//! requests, operator actions with their arguments — and content is only
//! recorded when asked. The recorder's channel is bounded and loses
//! nothing, and a write error is announced when it happens.

use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::request::{AgentRequest, Via};
use fusebox::runner::{Runner, RunnerParts};
use fusebox::telemetry::events::{Arrival, EventKind};
use fusebox::traffic::load::run_scenario;
use fusebox::traffic::load::scenario::Scenario;
use fusebox::traffic::log::writer::{Fsync, RecordOptions, RecordedContent, Recorder};
use fusebox::traffic::log::{Header, LogReader, Record};
use std::collections::HashMap;
use std::time::Duration;

async fn record(
    content: RecordedContent,
    rotate: Option<u64>,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    u64,
    fusebox::traffic::log::writer::RecordStats,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traffic.jsonl");
    let mut parts = RunnerParts::mock(Clock::with_wall_anchor(0), Seed(4));
    parts.spool = Some(dir.path().join("spool.jsonl"));
    let runner = Runner::new(Config::default(), parts).unwrap();
    let header = Header {
        v: 1,
        started_at: "2026-11-29T02:00:00Z".into(),
        seed: 4,
        tools: Default::default(),
    };
    let opts = RecordOptions {
        fsync: Fsync::Every(Duration::from_millis(50)),
        content,
        rotate_bytes: rotate,
    };
    let rec = Recorder::start(&path, opts, header, runner.events()).unwrap();
    let scenario = Scenario::load("2am-incident").unwrap();
    let run = run_scenario(runner.clone(), &scenario, Duration::from_secs(150), Seed(4)).await;
    assert_eq!(run.lost, 0);
    runner.events().close_subscribers();
    let stats = rec.finish().unwrap();
    let requests = runner.totals().requests.load(std::sync::atomic::Ordering::Relaxed);
    (dir, path, requests, stats)
}

#[tokio::test(start_paused = true)]
async fn a_recorded_scenario_reads_back_as_a_valid_log() {
    let (_dir, path, requests, stats) = record(RecordedContent::None, None).await;
    let mut reader = LogReader::open(&path, false).unwrap();
    assert_eq!(reader.header().map(|h| h.seed), Some(4));
    let mut per_request: HashMap<u64, (u32, u32, u32)> = HashMap::new();
    let mut operators = Vec::new();
    let mut lines = 1; // the header
    while let Some(r) = reader.next_record().unwrap() {
        lines += 1;
        match r {
            Record::Request(q) => {
                assert!(
                    q.messages.is_none() && q.content_hash.is_none(),
                    "no content by default"
                );
                per_request.entry(q.id.n()).or_default().0 += 1;
            }
            Record::Attempt(a) => {
                assert!(a.headers.keys().all(|k| !k.contains("auth") && !k.contains("key")));
                per_request.entry(a.request.n()).or_default().1 += 1;
            }
            Record::Outcome(o) => per_request.entry(o.request.n()).or_default().2 += 1,
            Record::Operator(op) => operators.push(op),
            _ => {}
        }
    }
    assert_eq!(lines, stats.records);
    assert_eq!(per_request.len() as u64, requests);
    assert!(
        per_request.values().all(|(q, _, o)| *q == 1 && *o == 1),
        "one request and one outcome line each"
    );
    assert!(
        per_request.values().map(|v| v.1).sum::<u32>() > requests as u32,
        "attempts are recorded"
    );
    let op = operators
        .iter()
        .find(|o| o.action == "set_fault")
        .expect("the scenario's fault change");
    assert_eq!(op.target, "tool:get_order");
    assert_eq!(op.args.as_ref().unwrap()["fault"]["fault"]["code"], 503);
    assert_eq!(reader.bad_lines() + reader.torn_lines(), 0);
}

#[tokio::test(start_paused = true)]
async fn content_is_recorded_only_when_asked() {
    let (_d, path, _, _) = record(RecordedContent::Hash, None).await;
    let first = LogReader::open(&path, false).unwrap().find_map(|r| match r.unwrap() {
        Record::Request(q) => Some(q),
        _ => None,
    });
    let q = first.unwrap();
    assert!(q.messages.is_none() && q.content_hash.as_ref().is_some_and(|h| h.len() == 16));
    let (_d, path, _, _) = record(RecordedContent::Full, None).await;
    let q = LogReader::open(&path, false)
        .unwrap()
        .find_map(|r| match r.unwrap() {
            Record::Request(q) => Some(q),
            _ => None,
        })
        .unwrap();
    assert!(q.messages.unwrap().iter().any(|m| m.content.text().contains("order #")));
}

#[tokio::test(start_paused = true)]
async fn rotation_starts_new_files_each_with_a_header_and_they_read_as_one_log() {
    let (_dir, path, requests, stats) = record(RecordedContent::None, Some(64 << 10)).await;
    assert!(stats.files > 2, "{stats:?}");
    // FILE.1, FILE.2, …, FILE: oldest first.
    let mut segments: Vec<std::path::PathBuf> = (1..stats.files)
        .map(|n| format!("{}.{n}", path.display()).into())
        .collect();
    segments.push(path.clone());
    for s in &segments {
        let text = std::fs::read_to_string(s).unwrap();
        assert!(text.starts_with("{\"kind\":\"header\""), "{}", s.display());
    }
    let mut reader = LogReader::open_all(&segments, false).unwrap();
    let (mut lines, mut ids, mut last_t) = (1u64, 0u64, 0u64);
    while let Some(r) = reader.next_record().unwrap() {
        lines += 1;
        ids += matches!(r, Record::Request(_)) as u64;
        assert!(r.t_ms() >= last_t);
        last_t = r.t_ms();
    }
    // Every line but the later segments' headers, every request once.
    assert_eq!(lines, stats.records - (stats.files as u64 - 1));
    assert_eq!(ids, requests);
    assert_eq!(reader.path(), path.as_path(), "read through to the current file");
    // Out of order (a later segment first), the error names the segment
    // and line where the log stops making sense.
    segments.swap(0, 1);
    let err = LogReader::open_all(&segments, false)
        .unwrap()
        .find_map(Result::err)
        .expect("out of order");
    assert!(err.to_string().starts_with(&format!("{}.2:", path.display())), "{err}");
}

#[test]
fn a_bounded_subscription_makes_emitters_wait_and_loses_nothing() {
    let bus = fusebox::telemetry::events::EventBus::new(Clock::with_wall_anchor(0), 16);
    let rx = bus.subscribe_bounded(4);
    let emitter = {
        let bus = bus.clone();
        std::thread::spawn(move || {
            for id in 0..10_000 {
                bus.emit(EventKind::Request(Box::new(Arrival {
                    request: AgentRequest {
                        id,
                        ..AgentRequest::default()
                    },
                    via: Via::Agent,
                })));
            }
            bus.close_subscribers();
        })
    };
    let ids: Vec<u64> = rx
        .iter()
        .map(|e| match e.kind {
            EventKind::Request(r) => r.request.id,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    emitter.join().unwrap();
    assert_eq!(ids, (0..10_000).collect::<Vec<_>>(), "all, in order, through 4 slots");
}

#[test]
fn a_write_error_stops_the_recording_with_an_event_and_counts_every_record_lost() {
    let bus = fusebox::telemetry::events::EventBus::new(Clock::with_wall_anchor(0), 16);
    let header = Header {
        v: 1,
        started_at: "2026-11-29T02:00:00Z".into(),
        seed: 4,
        tools: Default::default(),
    };
    let opts = RecordOptions {
        fsync: Fsync::Always,
        ..RecordOptions::default()
    };
    // Every write to /dev/full fails with "no space left on device".
    let rec = Recorder::start(std::path::Path::new("/dev/full"), opts, header, &bus).unwrap();
    let dropped = rec.dropped();
    bus.emit(EventKind::Request(Box::default()));
    // Later events go on, each counted as a record dropped.
    for _ in 0..100 {
        bus.emit(EventKind::Request(Box::default()));
    }
    bus.close_subscribers();
    let err = rec.finish().expect_err("the disk is full");
    assert_eq!(err.raw_os_error(), Some(28), "{err}");
    // The header and the first request (neither reached the disk), then
    // the hundred after.
    assert_eq!(dropped.load(std::sync::atomic::Ordering::Relaxed), 102);
    let failed: Vec<_> = bus
        .recent(16)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::RecordingFailed { path, .. } => Some(path),
            _ => None,
        })
        .collect();
    assert_eq!(failed, ["/dev/full"]);
    assert!(!bus.has_subscribers());
}

mod every_line_reads_back {
    //! Whatever the recorder is given, every line it writes is read back
    //! by the reader `replay` uses: one set of bounds for both.

    use fusebox::clock::Clock;
    use fusebox::command::{Command, Issuer};
    use fusebox::outcome::{Level, Outcome};
    use fusebox::request::{AgentRequest, Via};
    use fusebox::resilience::breaker::BreakerState;
    use fusebox::resilience::notice::Transition;
    use fusebox::target::{Kind, Target};
    use fusebox::telemetry::events::{Arrival, Attempt, EventBus, EventKind};
    use fusebox::traffic::log::writer::{Fsync, RecordOptions, RecordedContent, Recorder};
    use fusebox::traffic::log::{Header, LogReader};
    use fusebox::wire::{Message, Role};
    use proptest::prelude::*;

    /// Any text, up to twice the name bound, control characters too.
    fn text() -> impl Strategy<Value = String> {
        prop_oneof![".{0,20}", ".{250,260}", "[\\x00-\\x1f\\u{7f}é]{0,8}", ".{500,520}"]
    }

    fn target() -> impl Strategy<Value = Target> {
        (prop::sample::select(vec![Kind::Provider, Kind::Tool]), text()).prop_map(|(k, n)| Target::new(k, &n))
    }

    /// Request `n`'s arrival, of any fields.
    fn arrival(n: u64) -> impl Strategy<Value = EventKind> {
        (
            (text(), prop::option::of(text()), text(), text()),
            (any::<u32>(), any::<u32>(), prop::collection::vec(text(), 0..3)),
            prop::collection::vec(
                (
                    prop::sample::select(vec![Role::User, Role::Assistant, Role::System]),
                    text(),
                ),
                0..3,
            ),
            prop::sample::select(vec![Via::Agent, Via::Gateway, Via::Embeddings, Via::Tool]),
        )
            .prop_map(
                move |((user, sub_user, session, route), (max_tokens, max_steps, tools), msgs, via)| {
                    let reach = (!tools.is_empty()).then(|| tools.iter().map(|t| t.as_str().into()).collect());
                    EventKind::Request(Box::new(Arrival {
                        request: AgentRequest {
                            id: n,
                            user: user.into(),
                            sub_user: sub_user.map(Into::into),
                            session: session.into(),
                            route: route.into(),
                            messages: msgs.into_iter().map(|(r, t)| Message::new(r, t.as_str())).collect(),
                            tools,
                            critical_tools: Vec::new(),
                            max_tokens,
                            max_steps,
                            priority: None,
                            tenant: None,
                            choices: Some(max_steps),
                            reach,
                            stream: false,
                        },
                        via,
                    }))
                },
            )
    }

    /// One event after request `n`'s arrival: a call, its outcome, or a
    /// transition or command in between.
    fn event(n: u64) -> impl Strategy<Value = EventKind> {
        let attempt = (
            target(),
            prop::option::of(text()),
            any::<Option<u16>>(),
            any::<(u64, u32, u32)>(),
            prop::option::of(text()),
            prop::collection::vec(text(), 0..3),
        )
            .prop_map(move |(target, model, status, (latency_ms, i, o), sem, calls)| {
                let mut a = Attempt::of(n, target);
                (a.model, a.status, a.latency_ms, a.input_tokens, a.output_tokens) = (model, status, latency_ms, i, o);
                (a.semantic_failure, a.tool_calls) = (sem, calls);
                EventKind::Attempt(Box::new(a))
            });
        let outcome = (
            prop::sample::select(Level::ALL.to_vec()),
            prop::collection::vec(text(), 0..3),
            any::<f64>(),
            any::<u64>(),
            any::<f64>(),
            prop::option::of(text()),
        )
            .prop_map(move |(level, chain, quality, tokens, cost_usd, key)| {
                EventKind::Outcome(Box::new(Outcome {
                    request: n,
                    user: "u".into(),
                    level,
                    chain: chain.iter().map(|t| fusebox::outcome::Hop::ok(t)).collect(),
                    quality,
                    tokens,
                    cost_usd,
                    missing: Vec::new(),
                    user_message: None,
                    answer: None,
                    stale_ms: None,
                    attempts: 1,
                    latency_ms: 1,
                    key: key.map(Into::into),
                }))
            });
        let states = prop::sample::select(vec![BreakerState::Closed, BreakerState::Open, BreakerState::HalfOpen]);
        let transition = (target(), states.clone(), states, text()).prop_map(|(breaker, from, to, reason)| {
            EventKind::Transition(Transition {
                breaker,
                from,
                to,
                reason,
            })
        });
        let operator = (target(), text()).prop_map(|(target, by)| EventKind::Operator {
            command: Command::ForceOpen { target },
            by: Issuer::operator(&by),
            applied: true,
            result: String::new(),
        });
        prop_oneof![attempt, outcome, transition, operator]
    }

    /// Requests 0..n, each arriving before the events of its own.
    fn events() -> impl Strategy<Value = Vec<EventKind>> {
        prop::collection::vec(0usize..6, 1..6).prop_flat_map(|counts| {
            let per: Vec<_> = counts
                .iter()
                .enumerate()
                .map(|(n, &k)| (arrival(n as u64), prop::collection::vec(event(n as u64), k)))
                .collect();
            per.prop_map(|groups| {
                groups
                    .into_iter()
                    .flat_map(|(first, rest)| std::iter::once(first).chain(rest))
                    .collect()
            })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn whatever_the_recorder_is_given_replay_reads_every_line(events in events(), full: bool) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("t.jsonl");
            let bus = EventBus::new(Clock::system(), 16);
            let header = Header { v: 1, started_at: "2026-12-02T00:00:00Z".into(), seed: 1, tools: Default::default() };
            let opts = RecordOptions {
                fsync: Fsync::Os,
                content: if full { RecordedContent::Full } else { RecordedContent::None },
                rotate_bytes: None,
            };
            let rec = Recorder::start(&path, opts, header, &bus).unwrap();
            for e in events {
                bus.emit(e);
            }
            bus.close_subscribers();
            let stats = rec.finish().unwrap();
            let mut reader = LogReader::open(&path, false).unwrap();
            let mut read = 1; // the header
            while reader.next_record().map_err(|e| TestCaseError::fail(e.to_string()))?.is_some() {
                read += 1;
            }
            prop_assert_eq!(read, stats.records);
            prop_assert_eq!(reader.bad_lines() + reader.unknown_kinds() + reader.torn_lines(), 0);
        }
    }
}

/// What the recorder wrote while `run` ran on `runner`.
async fn recorded(runner: &std::sync::Arc<Runner>, run: impl std::future::Future<Output = ()>) -> Vec<Record> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traffic.jsonl");
    let header = Header {
        v: 1,
        started_at: "2026-12-05T02:00:00Z".into(),
        seed: 4,
        tools: Default::default(),
    };
    let opts = RecordOptions {
        fsync: Fsync::Every(Duration::from_millis(50)),
        content: RecordedContent::None,
        rotate_bytes: None,
    };
    let rec = Recorder::start(&path, opts, header, runner.events()).unwrap();
    run.await;
    runner.events().close_subscribers();
    rec.finish().unwrap();
    let mut reader = LogReader::open(&path, false).unwrap();
    std::iter::from_fn(|| reader.next_record().unwrap()).collect()
}

/// A runner whose every provider streams 200 pieces 100 ms apart.
fn streaming(cfg: Config) -> std::sync::Arc<Runner> {
    let p = std::sync::Arc::new(crate::blame::Paced::new(100, 200, 100));
    crate::common::runner(
        cfg,
        ["openai", "anthropic", "deepseek"]
            .into_iter()
            .map(|n| (n, p.clone() as std::sync::Arc<dyn fusebox::provider::Provider>))
            .collect(),
        None,
    )
}

/// The one attempt and the one outcome recorded.
fn attempt_and_outcome(records: &[Record]) -> (&fusebox::traffic::log::AttemptRec, &fusebox::traffic::log::OutcomeRec) {
    let attempts: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Attempt(a) => Some(a),
            _ => None,
        })
        .collect();
    let outcomes: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::Outcome(o) => Some(o),
            _ => None,
        })
        .collect();
    assert_eq!((attempts.len(), outcomes.len()), (1, 1), "{records:?}");
    (attempts[0], outcomes[0])
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_at_the_budget_is_recorded_with_its_attempt_and_chain() {
    let mut cfg = Config::default();
    cfg.budgets.user_tokens_per_minute = 200;
    let runner = streaming(cfg);
    let records = recorded(&runner, async {
        let mut sink = crate::blame::Reader::default();
        let req = fusebox::runner::chat::ChatRequest {
            stream: true,
            ..crate::common::chat_request(1)
        };
        let chat = runner.chat(req, Some(&mut sink)).await;
        assert!(
            matches!(chat.end, fusebox::runner::chat::ChatEnd::Cut { .. }),
            "{:?}",
            chat.end
        );
    })
    .await;
    let (a, o) = attempt_and_outcome(&records);
    assert_eq!((a.model.as_deref(), a.status), (Some("gpt-4o"), Some(200)));
    assert_eq!(a.cut, Some(fusebox::telemetry::events::Cut::Budget));
    assert!(a.output_tokens > 0);
    assert_eq!(o.chain, vec!["gpt-4o ✗cut budget".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn a_stream_its_client_left_or_the_drain_cut_is_recorded_with_its_attempt_and_chain() {
    for (closing, how, end) in [
        (false, fusebox::telemetry::events::Cut::Left, "gpt-4o ✗left"),
        (true, fusebox::telemetry::events::Cut::Drained, "gpt-4o ✗drained"),
    ] {
        let runner = streaming(Config::default());
        let records = recorded(&runner, async {
            let r = runner.clone();
            let call = tokio::spawn(async move {
                let mut sink = crate::blame::Reader::default();
                let req = fusebox::runner::chat::ChatRequest {
                    stream: true,
                    ..crate::common::chat_request(1)
                };
                r.chat(req, Some(&mut sink)).await
            });
            // A second in, the answer streaming, the client goes (or the
            // drain ends the call).
            tokio::time::sleep(Duration::from_secs(1)).await;
            runner
                .totals()
                .closing
                .store(closing, std::sync::atomic::Ordering::Relaxed);
            call.abort();
            assert!(call.await.unwrap_err().is_cancelled());
        })
        .await;
        let (a, o) = attempt_and_outcome(&records);
        assert_eq!(
            (a.model.as_deref(), a.status, a.cut),
            (Some("gpt-4o"), Some(200), Some(how))
        );
        assert!(a.output_tokens > 0 && a.latency_ms >= 900, "{a:?}");
        assert_eq!(o.level, fusebox::outcome::Level::Failed);
        assert_eq!(o.chain, vec![end.to_string()]);
    }
}
