//! Replay: a recorded scenario re-driven against its recorded providers
//! gives the recorded outcomes again; under another config it gives the
//! outcomes that config implies (what-if).

use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::target::Target;
use fusebox::telemetry::events::RefillFrozen;
use fusebox::traffic::load::run_scenario;
use fusebox::traffic::load::scenario::Scenario;
use fusebox::traffic::log::writer::{Fsync, RecordOptions, RecordedContent, Recorder};
use fusebox::traffic::log::{Header, LogReader};
use fusebox::traffic::replay::{recorded_parts, replay, replay_clock, runtime, ReplayOptions, Replayed};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The seed of every recording and replay here: one whose tour replays
/// every request as recorded (with some seeds, one request in 2,000 meets a
/// limiter at the edge of its capacity differently).
const SEED: u64 = 1;

async fn record(dir: &Path, scenario: &str, secs: u64, content: RecordedContent) -> (std::path::PathBuf, u64) {
    let path = dir.join("traffic.jsonl");
    let mut parts = RunnerParts::mock(Clock::with_wall_anchor(0), Seed(SEED));
    parts.spool = Some(dir.join("spool-rec.jsonl"));
    let runner = Runner::new(Config::default(), parts).unwrap();
    let header = Header {
        v: 1,
        started_at: "2026-11-29T02:00:00Z".into(),
        seed: SEED,
        tools: Default::default(),
    };
    let opts = RecordOptions {
        fsync: Fsync::Os,
        content,
        rotate_bytes: None,
    };
    let rec = Recorder::start(&path, opts, header, runner.events()).unwrap();
    let run = run_scenario(
        runner.clone(),
        &Scenario::load(scenario).unwrap(),
        Duration::from_secs(secs),
        Seed(SEED),
    )
    .await;
    assert_eq!(run.lost, 0);
    runner.events().close_subscribers();
    rec.finish().unwrap();
    (path, runner.totals().tokens.load(std::sync::atomic::Ordering::Relaxed))
}

async fn replay_with(dir: &Path, log: &Path, cfg: Config, name: &str) -> (Arc<Runner>, Replayed) {
    let reader = LogReader::open(log, false).unwrap();
    let (mut parts, fleet) = recorded_parts(&cfg, replay_clock(reader.header()), Seed(SEED));
    parts.spool = Some(dir.join(format!("spool-{name}.jsonl")));
    let runner = Runner::new(cfg, parts).unwrap();
    let out = replay(
        runner.clone(),
        reader,
        Some(fleet),
        ReplayOptions {
            operator: true,
            compare: true,
            outcomes: None,
            jump_idle: false,
        },
    )
    .await
    .unwrap();
    (runner, out)
}

/// Exact request by request needs the recorded content: content-keyed caches
/// (answers, tool results keyed by their arguments) hit as recorded only then.
/// The tour's first four minutes defer requests while get_order is down and
/// re-drive them once it is back, before the run ends.
#[tokio::test(start_paused = true)]
async fn replaying_a_recording_reproduces_its_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let (log, tokens) = record(dir.path(), "tour", 240, RecordedContent::Full).await;
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
    let t = crate::common::entry(&runner, "tool:get_order").stats.view();
    assert!(t.rejected_open > 0, "{t:?}");
}

/// Without its content a recording keeps the caches' keys (salted): a
/// replay's answer and tool caches hit as the run's did, so the tour's
/// requests end as recorded.
#[tokio::test(start_paused = true)]
async fn a_recording_without_its_content_replays_to_the_recorded_levels() {
    for content in [RecordedContent::None, RecordedContent::Hash] {
        let dir = tempfile::tempdir().unwrap();
        let (log, _) = record(dir.path(), "tour", 600, content).await;
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(!text.contains("\"messages\""), "{content:?}: no content recorded");
        assert!(text.contains("\"answer_key\"") && text.contains("\"tool_keys\""));
        let (_, out) = replay_with(dir.path(), &log, Config::default(), "none").await;
        assert_eq!(out.lost, 0);
        let total = out.levels.len();
        let same = out
            .levels
            .values()
            .filter(|(rec, rep)| rec.is_some() && rec == rep)
            .count();
        assert!(total > 4_000, "{total}");
        assert!(
            same as f64 >= 0.98 * total as f64,
            "{content:?}: {same} of {total} requests end as recorded"
        );
    }
}

/// At `--speed max` the replay reads the clock once per step of virtual
/// time (`fusebox::clock::Steps`); it decides exactly as one reading
/// tokio's clock every time does.
#[test]
fn a_replay_reading_the_clock_once_per_step_decides_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) =
        runtime(false, false)
            .unwrap()
            .block_on(record(dir.path(), "2am-incident", 120, RecordedContent::Full));
    let run = |stepped: bool| {
        runtime(false, stepped).unwrap().block_on(async {
            let (runner, out) = replay_with(dir.path(), &log, Config::default(), &format!("{stepped}")).await;
            let mut levels: Vec<_> = out.levels.into_iter().collect();
            levels.sort_by_key(|(id, _)| *id);
            let tool = crate::common::entry(&runner, "tool:get_order").stats.view();
            let totals = runner.totals();
            (
                levels,
                totals.tokens.load(std::sync::atomic::Ordering::Relaxed),
                totals.wasted.load(std::sync::atomic::Ordering::Relaxed),
                (tool.failed, tool.rejected_open),
            )
        })
    };
    let (stepped, plain) = (run(true), run(false));
    assert!(stepped.0.len() > 200 && stepped.3 .1 > 0, "the incident replays");
    assert_eq!(stepped, plain);
}

#[tokio::test(start_paused = true)]
async fn what_if_a_stricter_breaker_would_have_tripped_earlier() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = record(dir.path(), "2am-incident", 240, RecordedContent::Full).await;
    let (base, _) = replay_with(dir.path(), &log, Config::default(), "base").await;
    let mut strict = Config::default();
    strict.tools.get_mut("get_order").unwrap().breaker = Some(fusebox::config::BreakerConfig {
        consecutive_failures: 2,
        ..Default::default()
    });
    let (what_if, _) = replay_with(dir.path(), &log, strict, "strict").await;
    let calls = |r: &Runner| crate::common::entry(r, "tool:get_order").stats.view();
    let (b, w) = (calls(&base), calls(&what_if));
    assert!(
        w.failed < b.failed,
        "tripping after 2 failures wastes fewer calls: {} < {}",
        w.failed,
        b.failed
    );
    assert!(w.rejected_open >= b.rejected_open);
}

/// A recorded attempt slower than the configured timeout replays as a
/// timeout (the request falls back); one exactly as slow as the timeout
/// still answers, as it would with a timer around the call.
#[tokio::test(start_paused = true)]
async fn recorded_latency_beyond_the_timeout_replays_as_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("slow.jsonl");
    // (t_ms, line), written in time order: attempts are logged when they end.
    let mut lines = Vec::new();
    for (id, latency) in [(1u64, 900u64), (2, 1_000), (3, 1_500)] {
        let t = id * 10;
        lines.push((t, format!(
            "{{\"kind\":\"request\",\"t_ms\":{t},\"id\":{id},\"user\":\"u{id}\",\"session\":\"s{id}\",\"route\":\"default\",\"prompt_tokens\":50,\"max_tokens\":100,\"tools\":[],\"max_steps\":1}}"
        )));
        lines.push((t + latency, format!(
            "{{\"kind\":\"attempt\",\"t_ms\":{},\"request\":{id},\"target\":\"provider:openai\",\"model\":\"gpt-4o\",\"status\":200,\"transport\":null,\"latency_ms\":{latency},\"input_tokens\":50,\"output_tokens\":20}}",
            t + latency
        )));
    }
    lines.sort_by_key(|(t, _)| *t);
    let mut text = String::from("{\"kind\":\"header\",\"v\":1,\"started_at\":\"2026-11-29T02:00:00Z\",\"seed\":8}\n");
    for (_, line) in lines {
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(&log, text).unwrap();
    let mut cfg = Config::default();
    cfg.providers.get_mut("openai").unwrap().timeout_ms = 1_000;
    cfg.retry.max_retries = 0;
    let (runner, out) = replay_with(dir.path(), &log, cfg, "slow").await;
    let level = |id: u64| out.levels[&id].1;
    use fusebox::outcome::Level;
    assert_eq!(level(1), Some(Level::None));
    assert_eq!(level(2), Some(Level::None), "a tie goes to the answer");
    assert_eq!(
        level(3),
        Some(Level::Fallback),
        "timed out on openai, answered by the next model"
    );
    let openai = crate::common::entry(&runner, "provider:openai").stats.view();
    assert_eq!((openai.ok, openai.failed, openai.timeouts), (2, 1, 1));
}

/// Replays the given lines (in time order) after a header, without
/// retries, so each call is one attempt.
async fn replay_lines(lines: &[String]) -> (Arc<Runner>, Replayed) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("lines.jsonl");
    let mut text = String::from("{\"kind\":\"header\",\"v\":1,\"started_at\":\"2026-11-29T02:00:00Z\",\"seed\":1}\n");
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(&log, text).unwrap();
    let mut cfg = Config::default();
    cfg.retry.max_retries = 0;
    replay_with(dir.path(), &log, cfg, "lines").await
}

fn request_line(t: u64, id: u64) -> String {
    format!(
        "{{\"kind\":\"request\",\"t_ms\":{t},\"id\":{id},\"user\":\"u{id}\",\"session\":\"s{id}\",\"route\":\"default\",\"prompt_tokens\":50,\"max_tokens\":100,\"tools\":[],\"max_steps\":1}}"
    )
}

fn attempt_line(t: u64, id: u64, status: u16, extra: &str) -> String {
    format!(
        "{{\"kind\":\"attempt\",\"t_ms\":{t},\"request\":{id},\"target\":\"provider:openai\",\"model\":\"gpt-4o\",\"status\":{status},\"transport\":null,\"latency_ms\":100,\"input_tokens\":50,\"output_tokens\":20{extra}}}"
    )
}

/// Calls with no recorded attempt of their own get the target's latest
/// recorded behaviour at or before their time, the earliest if none is;
/// a target the log never shows is healthy.
#[tokio::test(start_paused = true)]
async fn calls_without_their_own_record_get_the_target_s_recorded_behaviour() {
    // Request 1 has no attempt; request 2's openai call failed with 503
    // after request 1 came; request 3 comes a minute later, with none.
    let (runner, out) = replay_lines(&[
        request_line(0, 1),
        request_line(5_000, 2),
        attempt_line(5_100, 2, 503, ""),
        request_line(60_000, 3),
    ])
    .await;
    use fusebox::outcome::Level;
    for id in 1..=3 {
        assert_eq!(out.levels[&id].1, Some(Level::Fallback), "request {id}");
    }
    let view = |t: &str| {
        runner
            .catalog()
            .registry()
            .find(&t.parse().unwrap())
            .unwrap()
            .stats
            .view()
    };
    let (openai, anthropic) = (view("provider:openai"), view("provider:anthropic"));
    assert_eq!(
        (openai.attempts, openai.failed),
        (3, 3),
        "the earliest, its own, the latest"
    );
    assert_eq!((anthropic.attempts, anthropic.ok), (3, 3), "never in the log: healthy");
}

/// A semantic failure recorded without the tool calls it was about is
/// replayed as one, and recorded rate-limit headers reach the limiter, a
/// date in them read against the recording's wall time (the header's).
#[tokio::test(start_paused = true)]
async fn recorded_semantic_failures_and_rate_headers_are_replayed() {
    let (runner, _out) = replay_lines(&[
        request_line(0, 1),
        attempt_line(100, 1, 200, ",\"semantic_failure\":\"hallucinated tool\""),
        request_line(1_000, 2),
        attempt_line(1_100, 2, 429, ",\"headers\":{\"retry-after-ms\":\"7000\"}"),
        request_line(20_000, 3),
        attempt_line(
            20_100,
            3,
            429,
            ",\"headers\":{\"retry-after\":\"Sun, 29 Nov 2026 02:00:24 GMT\"}",
        ),
    ])
    .await;
    let openai = crate::common::entry(&runner, "provider:openai").stats.view();
    assert_eq!((openai.attempts, openai.semantic, openai.failed), (3, 1, 3));
    let frozen: Vec<_> = runner
        .events()
        .recent(100)
        .into_iter()
        .filter_map(|e| match e.kind {
            fusebox::telemetry::events::EventKind::RefillFrozen(RefillFrozen { provider, for_ms, .. }) => {
                Some((provider, for_ms))
            }
            _ => None,
        })
        .collect();
    // The last 429 came back at 02:00:20.100, to be retried at 02:00:24.
    assert_eq!(
        frozen,
        [("openai".to_string(), Some(7_000)), ("openai".to_string(), Some(3_900))]
    );
}

/// A log recorded by the gateway replays as gateway calls: each one call,
/// never deferred, at the level it was recorded at (`fusebox serve
/// --record`, then `fusebox replay`).
#[tokio::test]
async fn a_recorded_gateway_log_replays_as_gateway_calls() {
    use crate::gateway::{ask, gateway};
    use fusebox::gateway::GatewayOptions;
    use fusebox::outcome::Level;
    use fusebox::provider::fault::{Fault, FaultSpec};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.jsonl");
    let f = gateway(Config::default(), GatewayOptions::default()).await;
    let header = Header {
        v: 1,
        started_at: "2026-11-29T02:00:00Z".into(),
        seed: SEED,
        tools: Default::default(),
    };
    let rec = Recorder::start(&log, RecordOptions::default(), header, f.runner.events()).unwrap();
    let tool = json!([{"type": "function", "function": {"name": "get_order", "description": "Look up an order",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}]);
    let mut sent = Vec::new();
    for phase in ["healthy", "openai down", "all down"] {
        match phase {
            "openai down" => f.faults.set(
                &Target::provider("openai"),
                FaultSpec::always(Fault::Status {
                    code: 503,
                    retry_after_ms: None,
                }),
            ),
            "all down" => {
                for p in ["anthropic", "deepseek"] {
                    f.faults
                        .set(&Target::provider(p), FaultSpec::always(Fault::ConnectionRefused));
                }
            }
            _ => {}
        }
        for i in 0..4 {
            let mut body = ask("default", &format!("user-{i}"));
            if i % 2 == 0 {
                body["tools"] = tool.clone();
            }
            let r = f.post(&body).await;
            sent.push(r.headers()["x-fusebox-level"].to_str().unwrap().to_string());
        }
    }
    let r = f
        .http
        .post(format!("{}/v1/embeddings", f.base))
        .json(&json!({"model": "gpt-4o", "input": "refund policy", "user": "jo"}))
        .send()
        .await
        .unwrap();
    sent.push(r.headers()["x-fusebox-level"].to_str().unwrap().to_string());
    assert!(
        sent.iter().any(|l| l == "none") && sent.iter().any(|l| l == "failed"),
        "{sent:?}"
    );
    f.runner.events().close_subscribers();
    rec.finish().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(r#""via":"gateway""#) && text.contains(r#""via":"embeddings""#));
    let (runner, out) = tokio::task::spawn_blocking(move || {
        let rt = runtime(false, false).unwrap();
        rt.block_on(replay_with(dir.path(), &log, Config::default(), "serve"))
    })
    .await
    .unwrap();
    assert_eq!(out.lost, 0);
    assert_eq!(out.levels.len(), sent.len());
    assert_eq!(
        runner.by_level()[Level::Deferred.index()],
        0,
        "the gateway never defers"
    );
    assert_eq!(runner.by_level()[Level::Partial.index()], 0, "nor runs an agent loop");
    for (id, (rec, rep)) in &out.levels {
        assert!(
            rec.is_some() && rec == rep,
            "request {id}: recorded {rec:?}, replayed {rep:?}"
        );
    }
}

#[tokio::test]
async fn a_recorded_call_replays_with_its_choices_and_its_keys_reach() {
    use crate::gateway::gateway;
    use fusebox::config::access::SecretHash;
    use fusebox::config::KeyConfig;
    use fusebox::gateway::GatewayOptions;
    use fusebox::provider::fault::{Fault, FaultSpec};
    use fusebox::traffic::log::Record;
    use fusebox::traffic::replay::{agent_request, gateway_call};
    use serde_json::json;
    const SECRET: &str = "sk-app-0123456789";
    let mut cfg = Config::default();
    let key = KeyConfig {
        hash: SecretHash::of(SECRET),
        user: "alice".into(),
        routes: vec!["gpt-4o".into()],
        mcp: Vec::new(),
        expires: None,
        budgets: None,
        sub_users: false,
        priority: Default::default(),
    };
    cfg.keys.insert("app".into(), key);
    cfg.validate("test").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.jsonl");
    let f = gateway(cfg.clone(), GatewayOptions::default()).await;
    let header = Header {
        v: 1,
        started_at: "2026-12-05T02:00:00Z".into(),
        seed: SEED,
        tools: Default::default(),
    };
    let rec = Recorder::start(&log, RecordOptions::default(), header, f.runner.events()).unwrap();
    // gpt-4o down: named, it would fall back to a model that takes `n`
    // (deepseek), but the key reaches gpt-4o alone.
    let down = Fault::Status {
        code: 503,
        retry_after_ms: None,
    };
    f.faults.set(&Target::provider("openai"), FaultSpec::always(down));
    let body = json!({"model": "gpt-4o", "n": 2, "max_tokens": 64,
                      "messages": [{"role": "user", "content": "Where is order #38100?"}]});
    let r = f
        .http
        .post(format!("{}/v1/chat/completions", f.base))
        .bearer_auth(SECRET)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-fusebox-level"], "failed");
    f.runner.events().close_subscribers();
    rec.finish().unwrap();
    // The record keeps both.
    let mut reader = LogReader::open(&log, false).unwrap();
    let q = loop {
        match reader.next_record().unwrap() {
            Some(Record::Request(q)) => break q,
            Some(_) => {}
            None => panic!("no request recorded"),
        }
    };
    assert_eq!((q.choices, q.reach.clone()), (Some(2), Some(vec!["gpt-4o".into()])));
    // Replayed, the call asks as many choices of the models the key reached...
    let call = gateway_call(&f.runner, &agent_request(q));
    assert_eq!(call.params.choices, Some(2));
    let gpt = f.runner.catalog().models().iter().position(|m| &*m.name == "gpt-4o");
    assert_eq!(call.reach.as_deref(), gpt.as_ref().map(std::slice::from_ref));
    // ...and ends as it did.
    let (_, out) = replay_with(dir.path(), &log, cfg, "reach").await;
    assert_eq!(out.levels.len(), 1);
    for (id, (rec, rep)) in &out.levels {
        assert!(
            rec.is_some() && rec == rep,
            "request {id}: recorded {rec:?}, replayed {rep:?}"
        );
    }
}

/// A gateway call its client left mid-answer (or the drain ended) replays
/// as one: it ends failed when it did, the model not blamed and no other
/// tried; another request's call takes the recorded call as answered.
#[tokio::test(start_paused = true)]
async fn a_call_its_client_left_replays_as_left() {
    use fusebox::outcome::Level;
    let gateway =
        |t: u64, id: u64| request_line(t, id).replace("\"max_steps\":1", "\"max_steps\":1,\"via\":\"gateway\"");
    let (runner, out) = replay_lines(&[
        gateway(0, 1),
        attempt_line(100, 1, 200, ",\"cut\":\"left\""),
        "{\"kind\":\"outcome\",\"t_ms\":100,\"request\":1,\"level\":\"failed\",\"chain\":[\"gpt-4o ✗left\"],\"quality\":0.0,\"tokens\":70,\"cost_usd\":0.0,\"missing\":[]}".into(),
        gateway(1_000, 2),
        attempt_line(1_100, 2, 200, ",\"cut\":\"drained\""),
        gateway(2_000, 3),
    ])
    .await;
    assert_eq!(out.levels[&1], (Some(Level::Failed), Some(Level::Failed)));
    assert_eq!(out.levels[&2].1, Some(Level::Failed));
    assert_eq!(out.levels[&3].1, Some(Level::None), "not its own: answered as recorded");
    let view = |t: &str| {
        runner
            .catalog()
            .registry()
            .find(&t.parse().unwrap())
            .unwrap()
            .stats
            .view()
    };
    let openai = view("provider:openai");
    assert_eq!((openai.attempts, openai.failed, openai.client_errors), (3, 0, 2));
    assert_eq!(view("provider:anthropic").attempts, 0, "no other model tried");
}

/// A stream cut at its user's budget replays streamed, and is cut again
/// under the same budget; under a larger one (a what-if) it is answered.
#[tokio::test(start_paused = true)]
async fn a_stream_cut_at_the_budget_replays_cut() {
    use fusebox::outcome::Level;
    let lines = [
        request_line(0, 1).replace("\"max_steps\":1", "\"max_steps\":1,\"via\":\"gateway\",\"stream\":true"),
        attempt_line(100, 1, 200, ",\"cut\":\"budget\"").replace("\"output_tokens\":20", "\"output_tokens\":196"),
    ];
    for (per_minute, level) in [(200, Level::Partial), (50_000, Level::None)] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("cut.jsonl");
        let mut text =
            String::from("{\"kind\":\"header\",\"v\":1,\"started_at\":\"2026-11-29T02:00:00Z\",\"seed\":1}\n");
        for line in &lines {
            text.push_str(line);
            text.push('\n');
        }
        std::fs::write(&log, text).unwrap();
        let mut cfg = Config::default();
        cfg.retry.max_retries = 0;
        cfg.budgets.user_tokens_per_minute = per_minute;
        let (_, out) = replay_with(dir.path(), &log, cfg, "cut").await;
        assert_eq!(out.levels[&1].1, Some(level), "{per_minute} tokens a minute");
    }
}
