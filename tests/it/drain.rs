//! A gateway that is told to stop loses no request: `fusebox serve` given
//! SIGTERM with whole and streamed answers in flight stops taking new
//! ones at once, lets those in flight finish, records every outcome and
//! exits 0; past its drain time the rest end on an error in the client's
//! API, recorded as such.

use crate::common::strict::{Strict, ANSWER};
use crate::common::Serve;
use fusebox::outcome::Level;
use fusebox::traffic::log::{LogReader, Record};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// `fusebox serve` in front of `upstream`, recording to `dir`'s
/// `rec.jsonl`, with `args` besides.
async fn serve(upstream: &Strict, dir: &tempfile::TempDir, args: &[&str]) -> (Serve, std::path::PathBuf) {
    let cfg = dir.path().join("fb.toml");
    std::fs::write(
        &cfg,
        format!(
            "[providers.openai]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\napi_key_env = \"STRICT_KEY\"\n\
             [models.gpt-4o]\nprovider = \"openai\"\ninput_per_m = 2.5\noutput_per_m = 10.0\n\
             [routes.default]\nchain = [\"gpt-4o\"]\n",
            upstream.base()
        ),
    )
    .unwrap();
    let rec = dir.path().join("rec.jsonl");
    let mut all = vec![
        "--config".to_string(),
        cfg.display().to_string(),
        "--record".into(),
        rec.display().to_string(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    let serve = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        Serve::start_with_env(&args, &[("STRICT_KEY", "sk-test")])
    })
    .await
    .unwrap();
    (serve, rec)
}

/// 8 whole and 8 streamed calls, sent at once; each one's status and body.
fn calls(base: &str) -> Vec<tokio::task::JoinHandle<(bool, u16, String)>> {
    (0..16)
        .map(|i| {
            let url = format!("{base}/v1/chat/completions");
            let stream = i % 2 == 1;
            tokio::spawn(async move {
                let body = json!({"model": "default", "stream": stream, "user": format!("u{i}"),
                                  "messages": [{"role": "user", "content": "Where is order #38100?"}]});
                let r = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
                let status = r.status().as_u16();
                (stream, status, r.text().await.unwrap_or_default())
            })
        })
        .collect()
}

/// The text a chat-completions stream carried, and whether it ended with `[DONE]`.
fn streamed(text: &str) -> (String, bool) {
    let said: String = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::to_string))
        .collect();
    (said, text.trim_end().ends_with("data: [DONE]"))
}

/// The levels of the outcomes a recording holds, by request, and its request count.
fn recorded(rec: &std::path::Path) -> (usize, Vec<Level>) {
    let mut r = LogReader::open(rec, false).unwrap();
    let (mut requests, mut levels) = (0, Vec::new());
    while let Some(rec) = r.next_record().unwrap() {
        match rec {
            Record::Request(_) => requests += 1,
            Record::Outcome(o) => levels.push(o.level),
            _ => {}
        }
    }
    (requests, levels)
}

async fn until_received(upstream: &Strict, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while upstream.received().len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {n} calls reached the upstream",
            upstream.received().len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await; // polling another process's progress
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_what_is_in_flight_finish_refuses_the_new_and_records_every_outcome() {
    let upstream = Strict::start().await;
    let hold = Arc::new(Notify::new());
    upstream.state.stream.lock().hold = Some(hold.clone());
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, rec) = serve(&upstream, &dir, &[]).await;
    let base = serve.base.clone();
    let inflight = calls(&base);
    until_received(&upstream, 16).await;
    serve.signal("TERM");
    // New ones are refused at once: the listener is closed.
    serve.until_closed().await;
    let release = crate::common::strict::release(hold);
    for call in inflight {
        let (stream, status, text) = call.await.unwrap();
        assert_eq!(status, 200, "{text}");
        if stream {
            assert_eq!(streamed(&text), (ANSWER.to_string(), true), "{text}");
        } else {
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["choices"][0]["message"]["content"], ANSWER);
        }
    }
    release.abort();
    let exit = tokio::task::spawn_blocking(move || serve.wait()).await.unwrap();
    assert!(exit.success(), "{exit}");
    let (requests, levels) = recorded(&rec);
    assert_eq!(requests, 16);
    assert_eq!(levels, vec![Level::None; 16], "every outcome recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_drain_time_what_is_left_ends_on_an_error_and_is_recorded_so() {
    let upstream = Strict::start().await;
    let hold = Arc::new(Notify::new());
    upstream.state.stream.lock().hold = Some(hold.clone());
    let dir = tempfile::tempdir().unwrap();
    let (mut serve, rec) = serve(&upstream, &dir, &["--drain-timeout", "1s"]).await;
    let inflight = calls(&serve.base);
    until_received(&upstream, 16).await;
    serve.signal("TERM");
    // The upstream never answers: at the drain time each call ends.
    for call in inflight {
        let (stream, status, text) = call.await.unwrap();
        if stream {
            // Begun: the stream ends on an error event in the client's API.
            assert_eq!(status, 200);
            let (said, done) = streamed(&text);
            assert!(!done && said.starts_with("Order"), "{text}");
            let last: Value = serde_json::from_str(text.trim_end().rsplit("data: ").next().unwrap()).unwrap();
            assert!(
                last["error"]["message"].as_str().unwrap().contains("shutting down"),
                "{text}"
            );
        } else {
            assert_eq!(status, 503, "{text}");
            assert!(text.contains("shutting down"), "{text}");
        }
    }
    let exit = tokio::task::spawn_blocking(move || serve.wait()).await.unwrap();
    assert!(exit.success(), "{exit}");
    let (requests, levels) = recorded(&rec);
    assert_eq!(requests, 16);
    assert_eq!(levels, vec![Level::Failed; 16], "every outcome recorded, as failed");
}

/// The snapshot of the gateway at `base`.
async fn snapshot(base: &str) -> Value {
    reqwest::get(format!("{base}/_fusebox/snapshot"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// `provider:openai`'s row of a snapshot.
fn openai_row(s: &Value) -> Value {
    s["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["target"] == "provider:openai")
        .cloned()
        .unwrap()
}

/// The reload events a snapshot holds: (applied, what).
fn reloads(s: &Value) -> Vec<(bool, String)> {
    s["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "reloaded")
        .map(|e| {
            (
                e["applied"].as_bool().unwrap(),
                e["changes"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Waits until the gateway at `base` has said `n` reloads.
async fn until_reloads(base: &str, n: usize) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = snapshot(base).await;
        if reloads(&s).len() >= n {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no reload said: {:?}",
            reloads(&s)
        );
        tokio::time::sleep(Duration::from_millis(20)).await; // the signal reaching the other process
    }
}

/// An operator's `reload` command to the gateway at `base`.
async fn reload_command(base: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/_fusebox/commands"))
        .json(&json!({"action": "reload"}))
        .send()
        .await
        .unwrap()
}

/// `fusebox serve` (with `args`) over a config file that sets one breaker
/// threshold, to reload: its folder, the file and the gateway.
async fn serving_a_config(args: &[&str]) -> (tempfile::TempDir, std::path::PathBuf, Serve) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fb.toml");
    std::fs::write(&cfg, "[breaker]\nconsecutive_failures = 5\n").unwrap();
    let path = cfg.display().to_string();
    let args: Vec<String> = ["--config", &path].iter().chain(args).map(|a| a.to_string()).collect();
    let serve =
        tokio::task::spawn_blocking(move || Serve::start_with(&args.iter().map(String::as_str).collect::<Vec<_>>()))
            .await
            .unwrap();
    (dir, cfg, serve)
}

/// SIGHUP reads the config again: a changed breaker threshold applies at
/// once and the breaker keeps its state; a file that does not read, or a
/// change that needs a restart, is refused and nothing changes. Each is
/// said in the events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_or_the_reload_command_applies_new_breaker_settings_keeping_states_and_refuses_a_broken_file() {
    let (_dir, cfg, serve) = serving_a_config(&[]).await;
    let base = serve.base.clone();
    let forced = reqwest::Client::new()
        .post(format!("{base}/_fusebox/commands"))
        .json(&json!({"action": "force_open", "target": "provider:openai"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forced.status(), 200);
    std::fs::write(&cfg, "[breaker]\nconsecutive_failures = 7\n").unwrap();
    serve.signal("HUP");
    let s = until_reloads(&base, 1).await;
    let row = openai_row(&s);
    assert_eq!(row["config"]["consecutive_failures"], 7, "{row}");
    assert_eq!(row["breaker"]["state"], "forced_open", "the state is kept: {row}");
    assert!(reloads(&s)[0].0, "applied");
    assert!(
        reloads(&s)[0].1.contains("provider:openai: new breaker settings"),
        "{:?}",
        reloads(&s)
    );
    // A file that does not read: refused, with where.
    std::fs::write(&cfg, "[breaker\nconsecutive_failures = 9\n").unwrap();
    serve.signal("HUP");
    let s = until_reloads(&base, 2).await;
    let (applied, why) = reloads(&s)[1].clone();
    assert!(!applied && why.contains("fb.toml") && why.contains("line 1"), "{why}");
    // A change that needs a restart: refused whole.
    std::fs::write(&cfg, "[breaker]\nconsecutive_failures = 9\n[retry]\nmax_retries = 0\n").unwrap();
    serve.signal("HUP");
    let s = until_reloads(&base, 3).await;
    let (applied, why) = reloads(&s)[2].clone();
    assert!(
        !applied && why.contains("[retry]") && why.contains("needs a restart"),
        "{why}"
    );
    assert_eq!(openai_row(&s)["config"]["consecutive_failures"], 7, "nothing changed");
    // An operator's reload command reads the file the same way.
    std::fs::write(&cfg, "[breaker]\nconsecutive_failures = 9\n").unwrap();
    let reloaded = reload_command(&base).await;
    assert_eq!(reloaded.status(), 200, "{:?}", reloaded.text().await);
    let s = until_reloads(&base, 4).await;
    assert!(reloads(&s)[3].0, "applied: {:?}", reloads(&s));
    let row = openai_row(&s);
    assert_eq!(row["config"]["consecutive_failures"], 9, "{row}");
    assert_eq!(row["breaker"]["state"], "forced_open", "the state is kept: {row}");
}

/// A reload whose file is a FIFO (a read of it waits for a writer for
/// ever) or larger than a config may be is refused at once, naming the
/// file and why, and the gateway goes on answering: its health, its calls
/// and SIGTERM. On one thread (`--threads 1`) a read on the runtime would
/// hold all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_from_a_fifo_or_an_oversized_file_is_refused_and_the_gateway_keeps_serving() {
    let (_dir, cfg, mut serve) = serving_a_config(&["--threads", "1"]).await;
    let base = serve.base.clone();
    // Bounds what a gateway that stopped answering would cost the test.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    std::fs::remove_file(&cfg).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&cfg).status().unwrap();
    assert!(made.success(), "mkfifo");
    serve.signal("HUP");
    let health = http.get(format!("{base}/healthz")).send().await;
    assert_eq!(health.map(|r| r.status().as_u16()).ok(), Some(200), "still answering");
    let s = until_reloads(&base, 1).await;
    let (applied, why) = reloads(&s)[0].clone();
    assert!(
        !applied && why.contains("fb.toml") && why.contains("not a regular file (it is a FIFO)"),
        "{why}"
    );
    // Larger than a config may be: refused naming the bound, unread.
    std::fs::remove_file(&cfg).unwrap();
    std::fs::File::create(&cfg).unwrap().set_len((4 << 20) + 1).unwrap();
    serve.signal("HUP");
    let s = until_reloads(&base, 2).await;
    let (applied, why) = reloads(&s)[1].clone();
    assert!(!applied && why.contains("more than the 4194304 bytes"), "{why}");
    let asked = http
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": "default", "messages": [{"role": "user", "content": "Where is order #38100?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 200, "a call is answered");
    assert_eq!(openai_row(&s)["config"]["consecutive_failures"], 5, "nothing changed");
    serve.signal("TERM");
    let exit = tokio::task::spawn_blocking(move || serve.wait()).await.unwrap();
    assert!(exit.success(), "{exit}");
}

/// A refused reload says where (the file, line, column and key) and what
/// is wrong, never the file's text, which may hold a secret: the events
/// it is said in are read by view-only tokens too. So does the answer to
/// an operator's reload command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reload_says_where_and_what_without_quoting_the_file() {
    let (_dir, cfg, serve) = serving_a_config(&[]).await;
    let base = serve.base.clone();
    let cases: [(&str, &[&str]); 3] = [
        // A string never closed: toml would show the line.
        (
            "[breaker]\nconsecutive_failures = 5\n[providers.openai]\nbase_url = \"https://sk-live-SECRET\n",
            &["fb.toml", "line 4, column 35"],
        ),
        // A value of the wrong type: serde would quote it.
        (
            "[breaker]\nconsecutive_failures = \"sk-live-SECRET\"\n",
            &[
                "fb.toml",
                "line 2, column 24",
                "breaker.consecutive_failures",
                "invalid type: string (not shown), expected",
            ],
        ),
        // A URL that does not check: it may carry a credential.
        (
            "[providers.openai]\nkind = \"openai-compatible\"\nbase_url = \"ftp://me:sk-live-SECRET@example.com/v1\"\n",
            &["fb.toml", "providers.openai.base_url", "not an http:// or https:// URL"],
        ),
    ];
    for (n, (text, said)) in cases.iter().enumerate() {
        std::fs::write(&cfg, text).unwrap();
        serve.signal("HUP");
        let s = until_reloads(&base, n + 1).await;
        let (applied, why) = reloads(&s)[n].clone();
        assert!(!applied, "{why}");
        for part in *said {
            assert!(why.contains(part), "`{part}` in {why}");
        }
        assert!(!why.contains("SECRET"), "{why}");
    }
    let reloaded = reload_command(&base).await;
    assert_eq!(reloaded.status(), 400);
    let answer = reloaded.text().await.unwrap();
    assert!(answer.contains("base_url") && !answer.contains("SECRET"), "{answer}");
    let events = snapshot(&base).await["events"].to_string();
    assert!(!events.contains("SECRET"), "{events}");
}
