//! An HTTP tool (`kind = "http"`) in the demo's agent loop: `fusebox demo`
//! as a user runs it, its get_order a real HTTP API on loopback. Down
//! (503), its breaker opens and the demo's requests degrade as they do
//! when the mock get_order answers 503; its URL is filled from the
//! arguments and its credential comes from the environment.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use parking_lot::Mutex;
use serde_json::Value;
use std::process::Command;
use std::sync::Arc;

/// What the orders API saw: each request's path and Authorization.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// The orders API on loopback answering every request with `status`.
async fn orders_api(status: StatusCode) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route(
            "/orders/{id}",
            axum::routing::get(
                move |State(seen): State<Seen>, Path(id): Path<String>, h: HeaderMap| async move {
                    let auth = h.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or("");
                    seen.lock().push((format!("/orders/{id}"), auth.to_string()));
                    (status, format!("{{\"order_id\":\"{id}\",\"status\":\"shipped\"}}"))
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

/// The demo's tools with get_order as `get_order` says.
fn config(get_order: &str) -> String {
    format!(
        "[tools.get_order]\ncritical = true\ncache_ttl_s = 600\n{get_order}\n\
         schema = {{ type = \"object\", required = [\"order_id\"], properties = {{ order_id = {{ type = \"string\" }} }} }}\n\
         [tools.get_order.breaker]\nconsecutive_failures = 3\ncooldown_ms = 600000\nmax_cooldown_ms = 600000\n\
         [tools.lookup_shipping]\n[tools.search_docs]\n[tools.send_notification]\nidempotent = false\n"
    )
}

/// `fusebox demo` headless for 3 s of traffic (at `speed`) over `cfg` and
/// `scenario`; its summary.
fn demo(dir: &std::path::Path, cfg: &str, scenario: &str, speed: &str) -> Value {
    let (cfg_path, scenario_path, out) = (dir.join("fb.toml"), dir.join("s.toml"), dir.join("summary.json"));
    std::fs::write(&cfg_path, cfg).unwrap();
    std::fs::write(&scenario_path, scenario).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args([
            "demo",
            "--headless",
            "--duration",
            "3s",
            "--speed",
            speed,
            "--seed",
            "7",
        ])
        .arg("--config")
        .arg(&cfg_path)
        .arg("--scenario")
        .arg(&scenario_path)
        .arg("--summary-json")
        .arg(&out)
        .env("FUSEBOX_TEST_ORDERS_TOKEN", "t0ken")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

/// Whether the summary shows get_order's breaker opening.
fn get_order_opened(s: &Value) -> bool {
    s["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["breaker"] == "tool:get_order" && t["to"] == "open")
}

const TRAFFIC: &str = "name = \"orders\"\nrps = 10.0\nusers = 50\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_tool_that_answers_503_opens_its_breaker_and_the_demo_degrades_as_with_the_mock() {
    let dir = tempfile::tempdir().unwrap();
    let (base, seen) = orders_api(StatusCode::SERVICE_UNAVAILABLE).await;
    let http = format!(
        "kind = \"http\"\nurl = \"{base}/orders/{{order_id}}\"\n\
         headers = {{ Authorization = \"Bearer ${{FUSEBOX_TEST_ORDERS_TOKEN}}\" }}"
    );
    let cfg = config(&http);
    let s = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || demo(&dir, &cfg, TRAFFIC, "10")
    })
    .await
    .unwrap();
    let calls = &s["targets"]["tool:get_order"];
    assert!(get_order_opened(&s), "{s:#}");
    assert!(calls["rejected_open"].as_u64() > Some(0), "{calls}");
    // Every attempt reached the API, and only those: none once it opened.
    let seen = seen.lock().clone();
    assert_eq!(Some(seen.len() as u64), calls["attempts"].as_u64(), "{calls}");
    assert_eq!(calls["failed"], calls["attempts"]);
    // The URL took the order's id; the credential came from the environment.
    assert!(
        seen.iter()
            .all(|(path, auth)| path.starts_with("/orders/38") && auth == "Bearer t0ken"),
        "{seen:?}"
    );

    // The mock get_order answering 503 from the start degrades the same requests the same way.
    let faulty = format!(
        "{TRAFFIC}[[timeline]]\nat_s = 0\ntarget = \"tool:get_order\"\nfault = {{ type = \"status\", code = 503 }}\n"
    );
    let cfg = config("");
    let mock = tokio::task::spawn_blocking({
        let dir = dir.path().to_path_buf();
        move || demo(&dir, &cfg, &faulty, "10")
    })
    .await
    .unwrap();
    assert!(get_order_opened(&mock), "{mock:#}");
    // The same levels (this machine: 8 full answers, 32 deferred, both),
    // give or take a request whose timing a real socket moved.
    for level in ["none", "partial", "fallback", "deferred", "failed"] {
        let (a, b) = (
            s["by_level"][level].as_i64().unwrap(),
            mock["by_level"][level].as_i64().unwrap(),
        );
        assert!((a - b).abs() <= 2, "{level}: {} vs {}", s["by_level"], mock["by_level"]);
    }
    assert!(s["by_level"]["deferred"].as_u64() > Some(10), "{}", s["by_level"]);
}

#[test]
fn an_http_tool_is_checked_when_the_config_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let check = |get_order: &str| {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, format!("[tools.get_order]\n{get_order}\n")).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_fusebox"))
            .args(["check-config"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(!o.status.success(), "{get_order}");
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    for (given, said) in [
        ("kind = \"http\"", "`tools.get_order.url`: an HTTP tool needs a url"),
        (
            "url = \"http://h/x\"",
            "`tools.get_order.url`: only an HTTP tool has a url; add kind = \"http\"",
        ),
        ("kind = \"http\"\nurl = \"http://h/{id\"", "never closed"),
        ("kind = \"http\"\nurl = \"ftp://h/x\"", "`ftp` is not http or https"),
        (
            "kind = \"http\"\nurl = \"http://h/x\"\nmethod = \"FETCH\"",
            "`FETCH` is not one of GET",
        ),
        (
            "kind = \"http\"\nurl = \"http://h/x\"\nheaders = { Authorization = \"Bearer abc\" }",
            "`tools.get_order.headers.Authorization`: a credential must come from an environment variable",
        ),
    ] {
        let e = check(given);
        assert!(e.contains(said), "{given}: {e}");
    }
    // A variable that is not set is said when the demo starts.
    let path = dir.path().join("unset.toml");
    std::fs::write(
        &path,
        "[tools.get_order]\nkind = \"http\"\nurl = \"http://127.0.0.1:9/x\"\nheaders = { X-Api-Key = \"${FUSEBOX_TEST_UNSET_VAR}\" }\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(["demo", "--headless", "--speed", "1", "--duration", "1s", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        e.contains("tools.get_order.headers.X-Api-Key: environment variable FUSEBOX_TEST_UNSET_VAR is not set"),
        "{e}"
    );
}
