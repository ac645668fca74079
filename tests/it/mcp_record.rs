//! MCP tool calls recorded, replayed and weighed under another setting, and
//! an MCP session's quotas: a real `rmcp` server and client on loopback,
//! the recorder in process, `fusebox replay` as a user runs it.

use crate::common::mcp::{call, client, serve_mcp, stdio_orders, text, upstream, with_orders, Orders};
use fusebox::config::{BreakerConfig, Config, ToolConfig};
use fusebox::runner::Runner;
use fusebox::traffic::log::writer::{Fsync, RecordOptions, RecordedContent, Recorder};
use fusebox::traffic::log::Header;
use fusebox::traffic::summary::Summary;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// get_order as the recording gateway had it: a pool of 2, a 60 s cache
/// and a breaker that opens after 3 failures in a row and stays open for
/// the whole test (no probe timing to depend on).
const GET_ORDER: &str = "[tools.get_order]\npool = 2\nqueue = 0\ncache_ttl_s = 60\n\
                         [tools.get_order.breaker]\nconsecutive_failures = THRESHOLD\ncooldown_ms = 600000\nmax_cooldown_ms = 600000\n";

fn get_order() -> ToolConfig {
    ToolConfig {
        pool: 2,
        queue: 0,
        cache_ttl_s: 60,
        breaker: Some(BreakerConfig {
            consecutive_failures: 3,
            cooldown_ms: 600_000,
            max_cooldown_ms: 600_000,
            ..BreakerConfig::default()
        }),
        ..ToolConfig::default()
    }
}

fn recorder(runner: &Runner, path: &Path, content: RecordedContent) -> Recorder {
    let header = Header {
        v: 1,
        started_at: "2026-12-02T02:00:00Z".into(),
        seed: 1,
        tools: runner.config().tools.clone(),
    };
    let opts = RecordOptions {
        fsync: Fsync::Os,
        content,
        rotate_bytes: None,
    };
    Recorder::start(path, opts, header, runner.events()).unwrap()
}

/// What a summary says of the tool calls: outcomes by level and each
/// tool's counts.
fn tool_figures(s: &Value) -> Value {
    json!({
        "requests": s["requests"],
        "by_level": s["by_level"],
        "get_order": s["targets"]["tool:get_order"],
        "send_email": s["targets"]["tool:send_email"],
    })
}

/// `fusebox replay LOG --config CFG` headless; its summary.
fn replay(log: &Path, cfg: &str, dir: &Path) -> Value {
    let cfg_path = dir.join("replay.toml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let out = dir.join("summary.json");
    let o = Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(["replay", log.to_str().unwrap(), "--headless", "--config"])
        .arg(&cfg_path)
        .arg("--summary-json")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_mcp_session_replays_with_the_same_tool_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let state = Arc::new(Orders::default());
    let url = upstream(state.clone()).await;
    let cfg = with_orders(Some(&url), Config::default());
    let (base, runner) = serve_mcp(cfg, [("get_order".to_string(), get_order())].into()).await;
    let (plain, full) = (dir.path().join("plain.jsonl"), dir.path().join("full.jsonl"));
    let recorders = [
        recorder(&runner, &plain, RecordedContent::None),
        recorder(&runner, &full, RecordedContent::Full),
    ];
    let through = client(&base).await;
    let get = |id: &str| through.call_tool(call("get_order", json!({"order_id": id})));
    let mail = |to: &str| through.call_tool(call("send_email", json!({"to": to})));
    assert!(!get("A-1").await.unwrap().is_error.unwrap_or(false));
    get("B-2").await.unwrap();
    mail("ops@example.com").await.unwrap();
    state.down.store(true, Ordering::SeqCst);
    // Retried (read-only) until the breaker opens, then the cached answer.
    let a = get("A-1").await.unwrap();
    assert!(a.meta.is_some_and(|m| m.0.contains_key("fusebox/stale_ms")));
    let c = get("C-3").await.unwrap();
    assert!(
        text(&c).contains("get_order is unavailable (breaker open"),
        "{}",
        text(&c)
    );
    // Not idempotent: called once, and its error answer goes back as given.
    assert_eq!(text(&mail("cto@example.com").await.unwrap()), "orders: HTTP 503");
    get("B-2").await.unwrap();
    through.cancel().await.unwrap();
    runner.events().close_subscribers();
    for r in recorders {
        r.finish().unwrap();
    }
    let live = tool_figures(&serde_json::to_value(Summary::build(&runner, &[], 0, 0, 0)).unwrap());
    assert_eq!(live["requests"], 7);
    assert_eq!(
        live["by_level"],
        json!({"none": 3, "partial": 2, "fallback": 0, "deferred": 0, "failed": 2}),
        "{live}"
    );

    // Arguments and answers are in the log only with content `full`.
    let plain_text = std::fs::read_to_string(&plain).unwrap();
    let full_text = std::fs::read_to_string(&full).unwrap();
    for said in ["A-1", "ops@example.com", "done"] {
        assert!(
            !plain_text.contains(said),
            "{said} recorded without --record-content full"
        );
        assert!(full_text.contains(said), "{said} not recorded with full content");
    }
    assert!(plain_text.contains(r#""via":"tool""#), "{plain_text}");

    // Replayed under the same settings: the same outcomes, with or without content.
    let same = GET_ORDER.replace("THRESHOLD", "3");
    for log in [&plain, &full] {
        let replayed = tool_figures(&replay(log, &same, dir.path()));
        assert_eq!(replayed, live, "{}", log.display());
    }

    // What if the breaker had opened at the first failure: get_order is
    // called once while down rather than three times, and never retried.
    let strict = tool_figures(&replay(&plain, &GET_ORDER.replace("THRESHOLD", "1"), dir.path()));
    let calls = |f: &Value| ["attempts", "failed", "retries", "rejected_open"].map(|k| f["get_order"][k].clone());
    assert_eq!(calls(&live), [5, 3, 2, 2].map(Value::from));
    assert_eq!(calls(&strict), [3, 1, 0, 2].map(Value::from), "{strict}");
    assert_eq!(strict["by_level"], live["by_level"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_s_calls_count_against_its_quotas() {
    let state = Arc::new(Orders::default());
    let url = upstream(state.clone()).await;
    let mut cfg = with_orders(Some(&url), Config::default());
    cfg.sessions.max_concurrent = 1;
    let (base, _runner) = serve_mcp(cfg, Default::default()).await;
    let (one, other) = (client(&base).await, client(&base).await);
    state.slow_ms.store(300, Ordering::SeqCst);
    let get = |id: &str| call("get_order", json!({"order_id": id}));
    // Two at once in one session: the second is refused by its quota; a
    // call in another session runs.
    let (a, b, c) = tokio::join!(
        one.call_tool(get("a")),
        one.call_tool(get("b")),
        other.call_tool(get("c"))
    );
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    let refused: Vec<String> = [&a, &b]
        .iter()
        .filter(|r| r.is_error == Some(true))
        .map(|r| text(r))
        .collect();
    assert_eq!(refused.len(), 1, "{a:?} {b:?}");
    assert!(
        refused[0].contains("concurrent requests already running"),
        "{refused:?}"
    );
    assert_eq!(c.is_error, Some(false), "{c:?}");
    assert_eq!(
        state.calls[0].load(Ordering::SeqCst),
        2,
        "the refused call never reached the server"
    );
}

/// `fusebox serve` in front of the stdio orders server with a config that
/// names no tools: its tools take the `[tools.NAME]` defaults, not the
/// demo's built-in ones (whose get_order keeps answers 600 s), and the
/// gateway has no breaker of the demo's tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_s_mcp_tools_do_not_take_the_demo_s_settings() {
    let orders = stdio_orders();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fb.toml");
    std::fs::write(
        &cfg,
        format!("[mcp.orders]\ncommand = [{:?}]\n", orders.display().to_string()),
    )
    .unwrap();
    let serve =
        tokio::task::spawn_blocking(move || crate::common::Serve::start_with(&["--config", cfg.to_str().unwrap()]))
            .await
            .unwrap();
    let through = client(&format!("{}/mcp", serve.base)).await;
    let ask = || call("get_order", json!({"order_id": "A-1"}));
    assert_eq!(through.call_tool(ask()).await.unwrap().is_error, Some(false));
    let http = reqwest::Client::new();
    let forced = http
        .post(format!("{}/_fusebox/commands", serve.base))
        .json(&json!({"action": "force_open", "target": "tool:get_order"}))
        .send()
        .await
        .unwrap();
    assert!(forced.status().is_success());
    // No cache by default: unavailable, not the last answer.
    let r = through.call_tool(ask()).await.unwrap();
    assert!(text(&r).contains("get_order is unavailable (breaker open"), "{r:?}");
    let snapshot: Value = http
        .get(format!("{}/_fusebox/snapshot", serve.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tools: Vec<&str> = snapshot["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["target"].as_str().filter(|t| t.starts_with("tool:")))
        .collect();
    assert_eq!(tools.len(), 3, "{tools:?}");
    assert!(
        tools.contains(&"tool:get_order") && tools.contains(&"tool:crash") && tools.contains(&"tool:environment"),
        "{tools:?}"
    );
}
