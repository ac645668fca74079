//! Traces out: `fusebox serve --otlp-endpoint` sends its requests as OTLP
//! spans, continuing the caller's W3C trace, to a receiver that decodes
//! them as a collector would.

use crate::common::otlp::{attr, Receiver};
use crate::common::Serve;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, Span};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// The caller's span for request `n`.
fn caller_span(n: u8) -> String {
    format!("00f067aa0ba902{n:02x}")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

struct Client {
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
    base: String,
}

impl Client {
    fn new(base: &str) -> Self {
        Client {
            rt: tokio::runtime::Runtime::new().unwrap(),
            http: reqwest::Client::new(),
            base: base.to_string(),
        }
    }

    /// A chat call under the caller's span `n`; the level it got.
    fn chat(&self, n: u8) -> String {
        self.rt.block_on(self.chat_async(n))
    }

    async fn chat_async(&self, n: u8) -> String {
        {
            let r = self
                .http
                .post(format!("{}/v1/chat/completions", self.base))
                .header("traceparent", format!("00-{TRACE}-{}-01", caller_span(n)))
                .header("x-fusebox-user", format!("user-{n}"))
                .json(&serde_json::json!({"model": "default", "messages": [{"role": "user", "content": format!("Where is order #3810{n}?")}]}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.headers()["x-fusebox-level"].to_str().unwrap().to_string()
        }
    }

    fn command(&self, body: serde_json::Value) {
        self.rt.block_on(async {
            let r = self
                .http
                .post(format!("{}/_fusebox/commands", self.base))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        })
    }

    fn metrics(&self) -> String {
        self.rt
            .block_on(async {
                self.http
                    .get(format!("{}/metrics", self.base))
                    .send()
                    .await
                    .unwrap()
                    .text()
                    .await
            })
            .unwrap()
    }
}

/// The request span continuing caller span `n`, and its children in order.
fn request_of(spans: &[Span], n: u8) -> (Span, Vec<Span>) {
    let parent = caller_span(n);
    let root = spans
        .iter()
        .find(|s| hex(&s.parent_span_id) == parent)
        .unwrap_or_else(|| panic!("no span under the caller's {parent}: {spans:#?}"))
        .clone();
    let mut children: Vec<Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == root.span_id)
        .cloned()
        .collect();
    children.sort_by_key(|s| s.start_time_unix_nano);
    (root, children)
}

fn events(s: &Span) -> Vec<String> {
    s.events.iter().map(|e| e.name.clone()).collect()
}

#[test]
fn serve_s_spans_continue_the_caller_s_trace_with_an_attempt_each() {
    let rx = Receiver::start();
    let serve = Serve::start_with(&["--otlp-endpoint", &rx.url]);
    let c = Client::new(&serve.base);

    // 1: answered at once.
    assert_eq!(c.chat(1), "none");
    // 2: every call to openai fails: retried, then the next model answers.
    c.command(serde_json::json!({"action": "set_fault", "target": "provider:openai", "fault": {"fault": {"type": "status", "code": 503}, "rate": 1.0}}));
    assert_eq!(c.chat(2), "fallback");
    // 3: openai forced open: short-circuited without a call, then the next model.
    c.command(serde_json::json!({"action": "force_open", "target": "provider:openai"}));
    assert_eq!(c.chat(3), "fallback");

    let spans = rx.wait_for(|s| s.iter().filter(|s| s.kind == SpanKind::Server as i32).count() >= 3);
    for s in &spans {
        assert_eq!(
            hex(&s.trace_id),
            TRACE,
            "every span is in the caller's trace: {}",
            s.name
        );
    }
    let resource = &rx.requests()[0].resource_spans[0].resource.clone().unwrap();
    assert_eq!(attr(&resource.attributes, "service.name").as_deref(), Some("fusebox"));

    let (root, kids) = request_of(&spans, 1);
    assert_eq!(root.name, "chat default");
    assert_eq!(root.kind, SpanKind::Server as i32);
    assert_eq!(attr(&root.attributes, "fusebox.level").as_deref(), Some("none"));
    assert_eq!(attr(&root.attributes, "fusebox.route").as_deref(), Some("default"));
    assert_eq!(attr(&root.attributes, "fusebox.chain").as_deref(), Some("gpt-4o ✓"));
    assert_eq!(kids.len(), 1, "{kids:#?}");
    let a = &kids[0];
    assert_eq!(a.kind, SpanKind::Client as i32);
    assert_eq!(a.name, "chat gpt-4o");
    for (k, v) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "openai"),
        ("gen_ai.system", "openai"),
        ("gen_ai.request.model", "gpt-4o"),
        ("gen_ai.response.model", "gpt-4o"),
        ("gen_ai.response.finish_reasons", "stop"),
        ("http.response.status_code", "200"),
    ] {
        assert_eq!(attr(&a.attributes, k).as_deref(), Some(v), "{k}");
    }
    let input: u64 = attr(&a.attributes, "gen_ai.usage.input_tokens")
        .unwrap()
        .parse()
        .unwrap();
    let output: u64 = attr(&a.attributes, "gen_ai.usage.output_tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert!(input > 0 && output > 0);
    let tokens: u64 = attr(&root.attributes, "fusebox.tokens").unwrap().parse().unwrap();
    assert_eq!(tokens, input + output, "the request's tokens are its attempt's");
    assert_eq!(attr(&a.attributes, "error.type"), None);
    assert!(a.start_time_unix_nano >= root.start_time_unix_nano && a.end_time_unix_nano <= root.end_time_unix_nano);

    // 2: one child per attempt, failures typed, retries and the fallback as events.
    let (root, kids) = request_of(&spans, 2);
    let attempts: usize = attr(&root.attributes, "fusebox.attempts").unwrap().parse().unwrap();
    assert_eq!(kids.len(), attempts, "{kids:#?}");
    let (failed, answered) = kids.split_at(kids.len() - 1);
    assert!(failed.len() >= 2, "retried before falling back: {kids:#?}");
    for f in failed {
        assert_eq!(f.name, "chat gpt-4o");
        assert_eq!(attr(&f.attributes, "error.type").as_deref(), Some("503"));
        assert_eq!(f.status.as_ref().unwrap().code, 2, "an error status");
        assert_eq!(attr(&f.attributes, "gen_ai.response.model"), None);
    }
    let api = attr(&answered[0].attributes, "gen_ai.request.model").unwrap();
    assert_eq!(answered[0].name, format!("chat {api}"));
    assert_eq!(
        attr(&answered[0].attributes, "gen_ai.provider.name").as_deref(),
        Some("anthropic")
    );
    assert_eq!(
        attr(&answered[0].attributes, "fusebox.model").as_deref(),
        Some("claude-haiku")
    );
    let names = events(&root);
    let retries = names.iter().filter(|n| *n == "fusebox.retry").count();
    assert_eq!(
        retries,
        failed.len() - 1,
        "a retry event per retried failure: {names:?}"
    );
    let retry = root.events.iter().find(|e| e.name == "fusebox.retry").unwrap();
    let wait: u64 = attr(&retry.attributes, "fusebox.retry.wait_ms")
        .unwrap()
        .parse()
        .unwrap();
    assert!(wait > 0);
    let fallback = root
        .events
        .iter()
        .find(|e| e.name == "fusebox.fallback")
        .expect("a fallback event");
    assert_eq!(attr(&fallback.attributes, "fusebox.from").as_deref(), Some("gpt-4o"));
    assert_eq!(
        attr(&fallback.attributes, "fusebox.to").as_deref(),
        Some("claude-haiku")
    );
    assert_eq!(attr(&root.attributes, "fusebox.level").as_deref(), Some("fallback"));

    // 3: a short-circuit, no call to the open model.
    let (root, kids) = request_of(&spans, 3);
    assert!(
        kids.iter()
            .all(|k| attr(&k.attributes, "fusebox.model").as_deref() != Some("gpt-4o")),
        "{kids:#?}"
    );
    let sc = root
        .events
        .iter()
        .find(|e| e.name == "fusebox.short_circuit")
        .expect("a short-circuit event");
    assert_eq!(attr(&sc.attributes, "fusebox.target").as_deref(), Some("model:gpt-4o"));
    let names = events(&root);
    let (at_sc, at_fb) = (
        names.iter().position(|n| n == "fusebox.short_circuit"),
        names.iter().position(|n| n == "fusebox.fallback"),
    );
    assert!(
        at_sc < at_fb && at_fb.is_some(),
        "short-circuit, then fallback: {names:?}"
    );

    assert!(c.metrics().contains("fusebox_spans_dropped_total 0\n"));
}

#[test]
fn with_the_receiver_down_traffic_is_unaffected_and_the_drops_are_counted() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let serve = Serve::start_with(&["--otlp-endpoint", &format!("http://127.0.0.1:{port}")]);
    let c = Client::new(&serve.base);
    let levels =
        c.rt.block_on(futures_util::future::join_all((0..20).map(|n| c.chat_async(n))));
    assert_eq!(levels, vec!["none"; 20]);
    // Each request's two spans are dropped once their batch fails.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let dropped = loop {
        let m = c.metrics();
        let n: u64 = m
            .lines()
            .find_map(|l| l.strip_prefix("fusebox_spans_dropped_total "))
            .unwrap()
            .parse()
            .unwrap();
        if n >= 40 || std::time::Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(dropped, 40);
}

/// A demo's spans, saved as the Collector's file exporter saves them,
/// imported and replayed: the same requests, levels and tokens.
#[test]
fn a_demo_s_traces_import_and_replay_to_the_demo_s_summary() {
    use opentelemetry_proto::tonic::trace::v1::TracesData;
    let rx = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let path = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_fusebox"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(o.status.success(), "{args:?}: {err}");
        err
    };
    let read = |p: &str| -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap() };
    let said = run(&[
        "demo",
        "--headless",
        "--duration",
        "20s",
        "--otlp-endpoint",
        &rx.url,
        "--summary-json",
        &path("demo.json"),
    ]);
    let demo = read(&path("demo.json"));
    let requests = demo["requests"].as_u64().unwrap();
    assert!(
        said.contains(&format!(
            "sent {} spans to {}/v1/traces, 0 dropped",
            rx.spans().len(),
            rx.url
        )),
        "{said}"
    );
    // One JSON object per line, as the Collector's file exporter writes.
    let lines: String = rx
        .requests()
        .into_iter()
        .map(|r| {
            serde_json::to_string(&TracesData {
                resource_spans: r.resource_spans,
            })
            .unwrap()
                + "\n"
        })
        .collect();
    std::fs::write(path("traces.json"), lines).unwrap();

    let said = run(&[
        "import",
        "--format",
        "otlp",
        &path("traces.json"),
        "-o",
        &path("imported.jsonl"),
    ]);
    assert!(
        said.contains(&format!("{requests} requests from GenAI spans, 0 other spans skipped")),
        "{said}"
    );
    run(&[
        "replay",
        &path("imported.jsonl"),
        "--headless",
        "--summary-json",
        &path("replayed.json"),
    ]);
    run(&[
        "replay",
        "--format",
        "otlp",
        &path("traces.json"),
        "--headless",
        "--summary-json",
        &path("direct.json"),
    ]);
    for name in ["replayed.json", "direct.json"] {
        let replayed = read(&path(name));
        assert_eq!(replayed["requests"], demo["requests"], "{name}");
        assert_eq!(replayed["by_level"], demo["by_level"], "{name}");
        assert_eq!(replayed["tokens"]["consumed"], demo["tokens"]["consumed"], "{name}");
        assert_eq!(replayed["lost"], 0);
    }
    assert!(
        demo["by_level"]["fallback"].as_u64().unwrap() > 0,
        "the demo's outage is in it: {demo}"
    );
}

#[test]
fn bad_trace_files_and_endpoints_are_named_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let fails = |args: &[&str], says: &str| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_fusebox"))
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    let out = dir.path().join("out.jsonl");
    let out = out.to_str().unwrap();
    let torn = file("torn.json", "{\"resourceSpans\":[]}\n{\"resourceSpans\":[\n");
    fails(
        &["import", "--format", "otlp", &torn, "-o", out],
        &format!("{torn}:2: not OTLP/JSON traces"),
    );
    let none = file("none.json", "{\"resourceSpans\":[]}\n");
    fails(
        &["import", "--format", "otlp", &none, "-o", out],
        "no GenAI spans among its 0 spans",
    );
    fails(&["replay", "--format", "otlp", &none, "--headless"], "no GenAI spans");
    fails(
        &["import", "--format", "otlp", "/nonexistent/t.json", "-o", out],
        "cannot open /nonexistent/t.json",
    );
    fails(
        &[
            "demo",
            "--headless",
            "--duration",
            "1s",
            "--otlp-endpoint",
            "127.0.0.1:4318",
        ],
        "--otlp-endpoint 127.0.0.1:4318: not an http:// or https:// URL (e.g. http://127.0.0.1:4318)",
    );
}

/// MCP tool calls through `serve` are traced too: a span per call, a
/// child per call to the server, a short-circuit when its breaker is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tool_calls_are_traced_with_their_server_calls() {
    use crate::common::mcp::{call, client, stdio_orders};
    let rx = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fb.toml");
    std::fs::write(
        &cfg,
        format!("[mcp.orders]\ncommand = [{:?}]\n", stdio_orders().display().to_string()),
    )
    .unwrap();
    let url = rx.url.clone();
    let serve = tokio::task::spawn_blocking(move || {
        Serve::start_with(&["--config", cfg.to_str().unwrap(), "--otlp-endpoint", &url])
    })
    .await
    .unwrap();
    let through = client(&format!("{}/mcp", serve.base)).await;
    let ask = || call("get_order", serde_json::json!({"order_id": "A-1"}));
    assert_eq!(through.call_tool(ask()).await.unwrap().is_error, Some(false));
    let forced = reqwest::Client::new()
        .post(format!("{}/_fusebox/commands", serve.base))
        .json(&serde_json::json!({"action": "force_open", "target": "tool:get_order"}))
        .send()
        .await
        .unwrap();
    assert!(forced.status().is_success());
    through.call_tool(ask()).await.unwrap();
    let spans = tokio::task::spawn_blocking(move || {
        rx.wait_for(|s| s.iter().filter(|s| s.kind == SpanKind::Server as i32).count() >= 2)
    })
    .await
    .unwrap();
    let mut calls: Vec<&Span> = spans.iter().filter(|s| s.kind == SpanKind::Server as i32).collect();
    calls.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(calls.len(), 2, "{spans:#?}");
    let children = |root: &Span| {
        spans
            .iter()
            .filter(|s| s.parent_span_id == root.span_id)
            .cloned()
            .collect::<Vec<_>>()
    };
    let (ok, refused) = (calls[0], calls[1]);
    assert_eq!(ok.name, "execute_tool get_order");
    assert_eq!(attr(&ok.attributes, "fusebox.level").as_deref(), Some("none"));
    let server = children(ok);
    assert_eq!(server.len(), 1);
    assert_eq!(server[0].name, "execute_tool get_order");
    assert_eq!(
        attr(&server[0].attributes, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(
        attr(&server[0].attributes, "gen_ai.tool.name").as_deref(),
        Some("get_order")
    );
    assert_eq!(
        attr(&server[0].attributes, "fusebox.target").as_deref(),
        Some("tool:get_order")
    );
    assert!(
        children(refused).is_empty(),
        "no call to a server whose breaker is open"
    );
    assert_eq!(events(refused), ["fusebox.short_circuit"]);
}

/// A trace another tool wrote (an agent run with two LLM calls, OpenAI's
/// instrumentation, one call timing out): each GenAI span a request, the
/// rest skipped; replayed, fusebox's fallback answers the one that failed.
#[test]
fn a_foreign_trace_imports_its_llm_calls_and_replays_what_fusebox_would_have_done() {
    let trace = format!("{}/tests/fixtures/traces/openai_agent.json", env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log.jsonl");
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_fusebox"))
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        (
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let (_, said) = run(&["import", "--format", "otlp", &trace, "-o", log.to_str().unwrap()]);
    assert!(
        said.contains("2 requests from GenAI spans, 2 other spans skipped"),
        "{said}"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["header", "request", "attempt", "outcome", "request", "attempt", "outcome"]
    );
    assert_eq!(lines[0]["started_at"], "2025-12-02T00:00:00.100Z");
    let (ok, timed_out) = (&lines[2], &lines[5]);
    assert_eq!(lines[1]["id"], "eee19b7ec3c1b175");
    assert_eq!(
        lines[1]["session"], "5b8efff798038103d269b633813fc60c",
        "one trace, one conversation"
    );
    assert_eq!(lines[1]["prompt_tokens"], 812);
    assert_eq!(
        (
            &ok["target"],
            &ok["model"],
            &ok["status"],
            &ok["latency_ms"],
            &ok["input_tokens"],
            &ok["output_tokens"]
        ),
        (
            &"provider:openai".into(),
            &"gpt-4o".into(),
            &200.into(),
            &1200.into(),
            &812.into(),
            &64.into()
        )
    );
    assert_eq!(
        (&timed_out["transport"], &timed_out["status"]),
        (&"timeout".into(), &serde_json::Value::Null)
    );
    assert_eq!(
        (&lines[3]["level"], &lines[6]["level"]),
        (&"none".into(), &"failed".into())
    );
    assert_eq!(lines[3]["tokens"], 876);

    let (out, _) = run(&["replay", "--format", "otlp", &trace, "--headless"]);
    let summary: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["requests"], 2);
    assert_eq!(summary["by_level"]["none"], 1);
    assert_eq!(
        summary["by_level"]["fallback"], 1,
        "the timed-out call falls back: {summary}"
    );
}

mod every_imported_line_reads_back {
    //! Whatever a trace file holds that import takes, the log it writes is
    //! read back whole by the reader `replay` uses.

    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, TracesData};
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![".{0,12}", ".{250,300}", "[\\x00-\\x1f]{1,4}", Just(String::new())]
    }

    /// An attribute fusebox reads, of any value.
    fn attribute() -> impl Strategy<Value = KeyValue> {
        let keys = prop::sample::select(vec![
            "gen_ai.request.model",
            "gen_ai.provider.name",
            "gen_ai.operation.name",
            "gen_ai.tool.name",
            "gen_ai.request.max_tokens",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "fusebox.user",
            "fusebox.sub_user",
            "fusebox.session",
            "fusebox.route",
            "fusebox.target",
            "fusebox.level",
            "fusebox.prompt_tokens",
            "fusebox.max_steps",
            "error.type",
            "http.response.status_code",
            "user.id",
            "session.id",
        ]);
        let value = prop_oneof![
            text().prop_map(any_value::Value::StringValue),
            any::<i64>().prop_map(any_value::Value::IntValue),
            Just(any_value::Value::StringValue("execute_tool".into())),
            Just(any_value::Value::StringValue("model:gpt-4o".into())),
        ];
        (keys, value).prop_map(|(k, v)| KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
        })
    }

    /// Spans of two traces, each under an earlier one or none (ids may
    /// repeat across traces), at any times.
    fn spans() -> impl Strategy<Value = Vec<Span>> {
        let span = (
            any::<bool>(),
            0u8..6,
            any::<prop::sample::Index>(),
            any::<bool>(),
            prop::collection::vec(attribute(), 0..5),
            prop_oneof![1 => any::<u64>(), 9 => 1_700_000_000_000_000_000u64..1_700_000_100_000_000_000],
            any::<u32>(),
            any::<bool>(),
        );
        prop::collection::vec(span, 1..12).prop_map(|raw| {
            let mut out: Vec<Span> = Vec::new();
            for (i, (second, id, parent, root, attrs, start, took, failed)) in raw.into_iter().enumerate() {
                let trace = if second { [2u8; 16] } else { [1u8; 16] };
                let parent_span_id = if root || out.is_empty() {
                    Vec::new()
                } else {
                    out[parent.index(out.len())].span_id.clone()
                };
                let mut attributes = attrs;
                if i % 2 == 0 {
                    attributes.push(KeyValue {
                        key: "gen_ai.system".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue("openai".into())),
                        }),
                    });
                }
                out.push(Span {
                    trace_id: trace.to_vec(),
                    span_id: vec![0, 0, 0, 0, 0, 0, i as u8, id],
                    parent_span_id,
                    name: format!("span {i}"),
                    start_time_unix_nano: start,
                    end_time_unix_nano: start.saturating_add(u64::from(took)),
                    attributes,
                    status: failed.then(|| Status {
                        code: 2,
                        message: String::new(),
                    }),
                    ..Span::default()
                });
            }
            out
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        #[test]
        fn whatever_import_takes_replay_reads_every_line(spans in spans()) {
            let dir = tempfile::tempdir().unwrap();
            let traces = dir.path().join("t.json");
            let data = TracesData {
                resource_spans: vec![ResourceSpans {
                    scope_spans: vec![ScopeSpans { spans, ..ScopeSpans::default() }],
                    ..ResourceSpans::default()
                }],
            };
            std::fs::write(&traces, serde_json::to_string(&data).unwrap() + "\n").unwrap();
            let log = dir.path().join("log.jsonl");
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_fusebox"))
                .args(["import", "--format", "otlp"])
                .arg(&traces)
                .arg("-o")
                .arg(&log)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            if !o.status.success() {
                // A refusal names the trace file, never a file of fusebox's own.
                prop_assert!(err.contains(&*traces.to_string_lossy()), "{}", err);
                return Ok(());
            }
            let mut reader = fusebox::traffic::log::LogReader::open(&log, false).unwrap();
            while reader.next_record().map_err(|e| TestCaseError::fail(format!("{e}\n{}", std::fs::read_to_string(&log).unwrap())))?.is_some() {}
            prop_assert_eq!(reader.bad_lines() + reader.unknown_kinds() + reader.torn_lines(), 0);
        }
    }
}
