//! The binary as a user meets it: clear errors and non-zero exits for bad
//! input (never a panic), and the headless demo's summary shape.

use std::process::{Command, Output};

fn fusebox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(args)
        .output()
        .expect("run fusebox")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_clean_failure(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks `{n}`: {err}");
    }
}

#[test]
fn invalid_configs_are_rejected_with_the_key_path() {
    let cases: &[(&str, &[&str])] = &[
        ("rate_out_of_range.toml", &["breaker.failure_rate", "1.5"]),
        (
            "unknown_model.toml",
            &[
                "routes.default.chain[1]",
                "unknown model `gpt-5-nope`",
                "defined models",
            ],
        ),
        ("wrong_type.toml", &["line 2", "max_retries"]),
        ("unknown_key.toml", &["line 2", "user_tokens_per_minut"]),
        ("not_toml.toml", &["line 1"]),
        ("empty_ramp.toml", &["breaker.half_open_ramp"]),
        ("compatible_without_url.toml", &["providers.local.base_url"]),
        ("hosted_without_key.toml", &["providers.openai.api_key_env"]),
        (
            "adaptive_initial_below_floor.toml",
            &["limiter.adaptive.initial", "between floor (20) and ceiling (256)"],
        ),
        ("hedge_not_a_delay.toml", &["line 3", "hedge", "\"p95\""]),
        (
            "tenant_header_not_a_header.toml",
            &["limiter.queue.tenant_header", "`X Org` is not a lower-case header name"],
        ),
        (
            "tenant_user_twice.toml",
            &[
                "limiter.queue.tenants.globex.users",
                "user `bob` is already in tenant `acme`",
            ],
        ),
    ];
    for (file, needles) in cases {
        let path = format!("{}/tests/invalid_configs/{file}", env!("CARGO_MANIFEST_DIR"));
        let o = fusebox(&["check-config", &path]);
        assert_clean_failure(&o, needles);
        assert!(stderr(&o).contains(file), "names the file");
    }
}

#[test]
fn valid_config_passes_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ok.toml");
    std::fs::write(&path, "[retry]\nmax_retries = 1\n").unwrap();
    let o = fusebox(&["check-config", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("ok (3 providers, 3 models, 1 routes, 4 tools)"));
}

/// A valid config whose credential is not in this environment passes,
/// and the variable is named (as `serve` would refuse to start).
#[test]
fn check_config_names_a_credential_not_set_here() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("azure.toml");
    let cfg = "[providers.azure]\nkind = \"azure-openai\"\nbase_url = \"https://r.openai.azure.com\"\n\
               entra_token_env = \"FUSEBOX_TEST_SURELY_UNSET_TOKEN\"\n\
               [models.gpt-4o]\nprovider = \"azure\"\ninput_per_m = 2.5\noutput_per_m = 10.0\n\
               [routes.default]\nchain = [\"gpt-4o\"]\n";
    std::fs::write(&path, cfg).unwrap();
    let o = fusebox(&["check-config", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("providers.azure.entra_token_env: $FUSEBOX_TEST_SURELY_UNSET_TOKEN is not set"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn missing_config_file_is_named() {
    let o = fusebox(&["check-config", "/nonexistent/fusebox.toml"]);
    assert_clean_failure(&o, &["cannot read config file /nonexistent/fusebox.toml"]);
}

/// A file larger than a config may be is refused by its size, unread,
/// naming the file and the bound; so is one that is not a file.
#[test]
fn a_config_larger_than_the_bound_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.toml");
    std::fs::File::create(&big).unwrap().set_len(5 << 20).unwrap();
    let o = fusebox(&["check-config", big.to_str().unwrap()]);
    assert_clean_failure(
        &o,
        &["big.toml is 5242880 bytes, more than the 4194304 bytes a config may be"],
    );
    for cmd in ["serve", "demo"] {
        let o = fusebox(&[cmd, "--headless", "--config", big.to_str().unwrap()]);
        assert_clean_failure(&o, &["big.toml", "more than the 4194304 bytes"]);
    }
    let o = fusebox(&["check-config", dir.path().to_str().unwrap()]);
    assert_clean_failure(&o, &["is not a regular file (it is a directory)"]);
}

#[test]
fn bad_demo_arguments_are_explained() {
    assert_clean_failure(
        &fusebox(&["demo", "--headless", "--scenario", "nope"]),
        &["unknown scenario `nope`", "2am-incident"],
    );
    assert_clean_failure(
        &fusebox(&["demo", "--headless", "--duration", "-5s"]),
        &["cannot be negative"],
    );
    assert_clean_failure(
        &fusebox(&["demo", "--headless", "--duration", "soon"]),
        &["--duration soon", "e.g. 60s"],
    );
    assert_clean_failure(
        &fusebox(&["demo", "--headless", "--duration", "0s"]),
        &["longer than zero"],
    );
    assert_clean_failure(&fusebox(&["demo", "--headless", "--speed", "-2"]), &["--speed -2"]);
    assert_clean_failure(&fusebox(&["bench", "--requests", "0"]), &["--requests"]);
}

#[test]
fn headless_demo_writes_the_summary_contract() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("summary.json");
    let spool = dir.path().join("spool.jsonl");
    let o = fusebox(&[
        "demo",
        "--headless",
        "--scenario",
        "provider-outage",
        "--duration",
        "90s",
        "--speed",
        "max",
        "--seed",
        "3",
        "--spool",
        spool.to_str().unwrap(),
        "--summary-json",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut expected = vec![
        "v",
        "requests",
        "completed",
        "lost",
        "by_level",
        "redriven",
        "targets",
        "transitions",
        "tokens",
        "cost_usd",
        "budget_rejections",
        "virtual_ms",
        "wall_ms",
    ];
    let mut got = keys.clone();
    got.sort_unstable();
    expected.sort_unstable();
    assert_eq!(got, expected);
    assert_eq!(v["v"], 1);
    assert_eq!(v["lost"], 0);
    assert_eq!(v["requests"], v["completed"]);
    let levels: Vec<&str> = v["by_level"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(levels, ["deferred", "failed", "fallback", "none", "partial"]);
    let t = &v["targets"]["provider:openai"];
    for k in [
        "attempts",
        "ok",
        "failed",
        "rejected_open",
        "rejected_rate",
        "retries",
        "client_errors",
    ] {
        assert!(t[k].is_u64(), "targets.provider:openai.{k}");
    }
    assert!(v["virtual_ms"].as_u64().unwrap() >= 90_000);
    assert_eq!(v["transitions"][0]["breaker"], "provider:openai");
}

#[test]
fn bench_prints_one_json_line() {
    for extra in [&[][..], &["--overload-control"]] {
        let o = fusebox(&[&["bench", "--requests", "20000", "--threads", "2"], extra].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(out.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["requests"], 20000);
        for k in ["wall_s", "req_per_s", "p50_us", "p99_us"] {
            assert!(v[k].as_f64().unwrap() > 0.0, "{k}");
        }
    }
}

#[test]
fn replay_reports_bad_logs_by_file_line_and_field() {
    let fixture = |f: &str| format!("{}/tests/fixtures/logs/{f}", env!("CARGO_MANIFEST_DIR"));
    let o = fusebox(&["replay", &fixture("t_ms_backwards.jsonl"), "--headless"]);
    assert_clean_failure(&o, &["t_ms_backwards.jsonl:", "`t_ms`"]);
    let o = fusebox(&["replay", &fixture("empty.jsonl"), "--headless"]);
    assert_clean_failure(&o, &["empty.jsonl"]);
    let o = fusebox(&["replay", "/nonexistent/traffic.jsonl", "--headless"]);
    assert_clean_failure(&o, &["/nonexistent/traffic.jsonl"]);
    assert_eq!(
        stderr(&o).matches("No such file").count(),
        1,
        "said once: {}",
        stderr(&o)
    );
}

#[test]
fn lines_a_replay_skips_are_counted_in_its_summary_and_said() {
    let fixture = |f: &str| format!("{}/tests/fixtures/logs/{f}", env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    let cases: &[(&str, &[&str], [u64; 4], &str)] = &[
        // (log, flags, [requests, bad, unknown kinds, torn], said)
        (
            "not_json.jsonl",
            &["--skip-bad-lines"],
            [2, 1, 0, 0],
            "1 bad line skipped",
        ),
        ("torn_last_line.jsonl", &[], [1, 0, 0, 1], "1 torn last line skipped"),
        ("all_kinds.jsonl", &[], [2, 0, 1, 0], "1 line of unknown kind skipped"),
    ];
    for (log, flags, [requests, bad, unknown, torn], said) in cases {
        let path = fixture(log);
        let mut args = vec!["replay", &path, "--headless", "--summary-json", out.to_str().unwrap()];
        args.extend_from_slice(flags);
        let o = fusebox(&args);
        assert!(o.status.success(), "{log}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("warning: {path}: {said}")),
            "{log}: {}",
            stderr(&o)
        );
        let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        let got = ["requests", "bad_lines", "unknown_kinds", "torn_lines"].map(|k| s[k].as_u64());
        assert_eq!(got, [requests, bad, unknown, torn].map(|n| Some(*n)), "{log}");
    }
    // --compare reads the log twice and says so once.
    let cfg = dir.path().join("default.toml");
    std::fs::write(&cfg, "").unwrap();
    let (path, cfg) = (fixture("not_json.jsonl"), cfg.to_str().unwrap());
    let o = fusebox(&["replay", &path, "--skip-bad-lines", "--compare", cfg, cfg]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o).matches("1 bad line skipped").count(), 1, "{}", stderr(&o));
}

#[test]
fn replay_refuses_what_it_cannot_do_safely() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("night.jsonl");
    let fixture = format!("{}/tests/fixtures/logs/no_header.jsonl", env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(&fixture, &log).unwrap();
    let log = log.to_str().unwrap();
    // Recording over the log being replayed would destroy it.
    let o = fusebox(&["replay", log, "--headless", "--record", log]);
    assert_clean_failure(&o, &["that is the log being replayed"]);
    assert_eq!(std::fs::read(log).unwrap(), std::fs::read(&fixture).unwrap());
    // Real providers cannot answer in virtual time.
    let cfg = dir.path().join("http.toml");
    std::fs::write(
        &cfg,
        "[providers.openai]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         [providers.anthropic]\n[providers.deepseek]\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let o = fusebox(&["replay", log, "--headless", "--providers", "live", "--config", cfg]);
    assert_clean_failure(&o, &["live providers over HTTP (openai)", "--speed 1"]);
    let o = fusebox(&["replay", log, "--providers", "live", "--compare", cfg, cfg]);
    assert_clean_failure(&o, &["live providers over HTTP (openai)"]);
    // --compare runs its two configs in virtual time, and nothing else.
    let o = fusebox(&["replay", log, "--compare", cfg, cfg, "--speed", "2"]);
    assert_clean_failure(&o, &["--speed"]);
}

#[test]
fn a_recorded_demo_replays_to_the_same_levels() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("traffic.jsonl");
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    let spool = dir.path().join("spool.jsonl");
    let o = fusebox(&[
        "demo",
        "--headless",
        "--scenario",
        "provider-outage",
        "--duration",
        "2m",
        "--seed",
        "5",
        "--record",
        log.to_str().unwrap(),
        "--record-content",
        "full",
        "--spool",
        spool.to_str().unwrap(),
        "--summary-json",
        a.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("recorded "), "{}", stderr(&o));
    let spool2 = dir.path().join("spool2.jsonl");
    let o = fusebox(&[
        "replay",
        log.to_str().unwrap(),
        "--headless",
        "--spool",
        spool2.to_str().unwrap(),
        "--summary-json",
        b.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let (a, b) = (read(&a), read(&b));
    assert_eq!(a["requests"], b["requests"]);
    assert_eq!(a["by_level"], b["by_level"]);
    assert_eq!(b["lost"], 0);
    assert_eq!(b["bad_lines"], 0);
}

/// The same demo recording twice: as fusebox wrote it (numeric ids) and
/// with its ids renamed to strings as other systems write them (UUIDs,
/// `chatcmpl-…`, `r2`).
#[test]
fn logs_with_string_ids_replay_as_the_same_log_with_numbers_does() {
    let fixture = |f: &str| format!("{}/tests/fixtures/logs/{f}", env!("CARGO_MANIFEST_DIR"));
    let (numeric, strings) = (fixture("demo_numeric_ids.jsonl"), fixture("demo_string_ids.jsonl"));
    // The fixtures differ in their ids alone, renamed one to one.
    let lines = |p: &str| -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(p).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let mut renamed = std::collections::HashMap::new();
    let (a, b) = (lines(&numeric), lines(&strings));
    assert_eq!(a.len(), b.len());
    for (mut x, mut y) in a.into_iter().zip(b) {
        let field = match x["kind"].as_str() {
            Some("request") => "id",
            Some("attempt" | "outcome") => "request",
            _ => {
                assert_eq!(x, y);
                continue;
            }
        };
        let (n, s) = (x[field].take(), y[field].take());
        assert!(n.is_u64() && s.is_string(), "{n} {s}");
        assert_eq!(*renamed.entry(n.clone()).or_insert(s.clone()), s, "{n} renamed once");
        assert_eq!(x, y);
    }
    let names: std::collections::HashSet<_> = renamed.values().collect();
    assert_eq!(names.len(), renamed.len(), "no two ids renamed alike");
    for kind in ["-", "chatcmpl-", "r"] {
        assert!(names.iter().any(|s| s.as_str().unwrap().contains(kind)), "{kind}");
    }

    let dir = tempfile::tempdir().unwrap();
    let summary = |log: &str, name: &str| -> serde_json::Value {
        let out = dir.path().join(name);
        let o = fusebox(&["replay", log, "--headless", "--summary-json", out.to_str().unwrap()]);
        assert!(o.status.success(), "{log}: {}", stderr(&o));
        let mut s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
        s.as_object_mut().unwrap().remove("wall_ms");
        s
    };
    let (a, b) = (summary(&numeric, "a.json"), summary(&strings, "b.json"));
    assert_eq!(a, b);
    assert_eq!(a["requests"], 136);
    assert_eq!(a["by_level"]["fallback"], 40, "the fixture holds an outage");
}

#[test]
fn compare_shows_what_a_stricter_breaker_changes() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("traffic.jsonl");
    let spool = dir.path().join("spool.jsonl");
    let o = fusebox(&[
        "demo",
        "--headless",
        "--scenario",
        "2am-incident",
        "--duration",
        "3m",
        "--seed",
        "8",
        "--record",
        log.to_str().unwrap(),
        "--record-content",
        "full",
        "--spool",
        spool.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (a, b) = (dir.path().join("a.toml"), dir.path().join("b.toml"));
    std::fs::write(&a, "").unwrap();
    let strict = fusebox::config::Config {
        tools: {
            let mut t = fusebox::config::Config::default().tools;
            t.get_mut("get_order").unwrap().breaker = Some(fusebox::config::BreakerConfig {
                consecutive_failures: 2,
                ..Default::default()
            });
            t
        },
        ..Default::default()
    };
    std::fs::write(&b, toml::to_string(&strict).unwrap()).unwrap();
    let o = fusebox(&[
        "replay",
        log.to_str().unwrap(),
        "--compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let row = out
        .lines()
        .find(|l| l.starts_with("calls failed"))
        .unwrap_or_else(|| panic!("{out}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    let (fa, fb): (f64, f64) = (cols[2].parse().unwrap(), cols[3].parse().unwrap());
    assert!(fb < fa, "the stricter breaker fails fewer calls: {row}");
    assert!(row.ends_with('*'), "differences are marked: {row}");
    // The columns are named, the files in full, and what differs is said.
    assert!(
        out.contains(&format!("A = {}\nB = {}", a.display(), b.display())),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l.contains("A: a.toml") && l.contains("B: b.toml")),
        "{out}"
    );
    assert!(
        out.contains("settings that differ (A → B):\n  tools.get_order.breaker: null → {"),
        "{out}"
    );
    assert!(out.contains("\"consecutive_failures\":2"), "{out}");
    assert!(out
        .lines()
        .any(|l| l.starts_with("lost") && l.split_whitespace().nth(1) == Some("0")));
}

#[test]
fn serve_refuses_what_it_cannot_serve_safely() {
    let o = fusebox(&["serve", "--headless", "--listen", "0.0.0.0:0"]);
    assert_clean_failure(&o, &["not a loopback address", "--auth-token-env"]);
    let o = fusebox(&["serve", "--headless", "--auth-token-env", "FUSEBOX_TEST_UNSET_TOKEN"]);
    assert_clean_failure(&o, &["FUSEBOX_TEST_UNSET_TOKEN", "not set"]);
    let o = fusebox(&["serve", "--headless", "--listen", "not-an-address"]);
    assert_clean_failure(&o, &["cannot listen on not-an-address"]);
}

/// `fusebox serve` as a user starts it: the first line names the base URL,
/// an OpenAI-style call through it is answered by the mock providers.
#[test]
fn serve_answers_openai_calls_on_the_address_it_prints() {
    let serve = crate::common::Serve::start();
    let base = format!("{}/v1", serve.base);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (status, level, body) = rt.block_on(async {
        let r = reqwest::Client::new()
            .post(format!("{base}/chat/completions"))
            .json(&serde_json::json!({"model": "default", "messages": [{"role": "user", "content": "Where is order #38100?"}]}))
            .send()
            .await
            .unwrap();
        let level = r.headers()["x-fusebox-level"].to_str().unwrap().to_string();
        (r.status().as_u16(), level, r.text().await.unwrap())
    });
    drop(serve);
    assert_eq!(status, 200, "{body}");
    assert_eq!(level, "none");
    assert!(body.contains("chat.completion"), "{body}");
}

/// Ctrl-C during a headless replay that records: the recording is flushed
/// whole (every line complete, as many as reported), and the exit says why.
#[test]
fn an_interrupted_replay_flushes_its_recording() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("in.jsonl");
    let out = dir.path().join("out.jsonl");
    // A minute of requests, replayed in real time: still running when interrupted.
    let mut text = String::from("{\"kind\":\"header\",\"v\":1,\"started_at\":\"2026-11-29T00:00:00Z\",\"seed\":1}\n");
    for id in 1..=600u64 {
        text.push_str(&format!(
            "{{\"kind\":\"request\",\"t_ms\":{},\"id\":{id},\"user\":\"u{}\",\"session\":\"s{id}\",\"route\":\"default\",\"prompt_tokens\":50,\"max_tokens\":100,\"tools\":[]}}\n",
            id * 100,
            id % 7
        ));
    }
    std::fs::write(&log, text).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args([
            "replay",
            log.to_str().unwrap(),
            "--headless",
            "--speed",
            "1",
            "--record",
        ])
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run fusebox replay");
    // Wait until some requests were recorded (the writer flushes every few ms).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::fs::read_to_string(&out).map_or(0, |t| t.lines().count()) < 5 {
        assert!(std::time::Instant::now() < deadline, "nothing recorded");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    let recorded: usize = err
        .split("recorded ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no record count in: {err}"));
    let written = std::fs::read_to_string(&out).unwrap();
    assert_eq!(written.lines().count(), recorded, "{err}");
    assert!(written.ends_with('\n'));
    for line in written.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    // Interrupted well before the minute was over.
    assert!(!written.contains("\"id\":600,"), "not interrupted");
}

/// A run without `--spool` keeps deferred requests in a private temporary
/// directory, and removes it when it ends: nothing is left in the temp dir.
#[test]
fn the_default_spool_directory_is_removed_at_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(["demo", "--headless", "--duration", "30s"])
        .env("TMPDIR", tmp.path())
        .env("FUSEBOX_LOG_DIR", tmp.path().join("logs"))
        .output()
        .expect("run fusebox demo");
    assert!(o.status.success(), "{}", stderr(&o));
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "logs")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Logs a careless writer makes: a prompt no model takes, an epoch
/// timestamp where milliseconds since the start belong. Refused at once,
/// with file:line and the bound; a sparse log's idle year is jumped over.
#[test]
fn replay_refuses_implausible_logs_and_jumps_over_idle_time() {
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{"kind":"header","v":1,"started_at":"2025-11-29T14:00:00Z","seed":42,"writer":"test"}"#;
    let request = |t_ms: u64, id: u64, prompt_tokens: u64| {
        format!(
            r#"{{"kind":"request","t_ms":{t_ms},"id":{id},"user":"u","session":"s","route":"default","prompt_tokens":{prompt_tokens},"max_tokens":64,"tools":[]}}"#
        )
    };
    let write = |name: &str, lines: &[String]| {
        let p = dir.path().join(name);
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p.to_str().unwrap().to_string()
    };
    let huge = write("huge.jsonl", &[header.into(), request(0, 1, 4_294_967_295)]);
    let o = fusebox(&["replay", &huge, "--headless"]);
    assert_clean_failure(&o, &["huge.jsonl:2", "prompt_tokens", "2000000"]);
    let epoch = write(
        "epoch.jsonl",
        &[header.into(), request(0, 1, 10), request(1_000_000_000_000, 2, 10)],
    );
    let o = fusebox(&["replay", &epoch, "--headless"]);
    assert_clean_failure(&o, &["epoch.jsonl:3", "t_ms", "3650 days"]);
    // A year between two requests: both replay, and the run ends (the
    // year is jumped, not stepped through).
    let year = 365 * 86_400_000u64;
    let sparse = write(
        "sparse.jsonl",
        &[header.into(), request(0, 1, 10), request(year, 2, 10)],
    );
    let out = dir.path().join("s.json");
    let o = fusebox(&["replay", &sparse, "--headless", "--summary-json", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(s["requests"], 2, "{s}");
    // The session idle for a year is a new one, not one past its deadline.
    assert_eq!(s["by_level"]["none"], 2, "{s}");
}

/// A recorded operator action this config cannot apply (a target it does
/// not have) is said with its line and counted, not silently dropped; the
/// ones it can apply still are.
#[test]
fn a_replayed_operator_action_on_an_unknown_target_is_said_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        r#"{"kind":"header","v":1,"started_at":"2025-11-29T14:00:00Z","seed":42,"writer":"test"}"#,
        r#"{"kind":"request","t_ms":0,"id":1,"user":"u","session":"s","route":"default","prompt_tokens":10,"max_tokens":64,"tools":[]}"#,
        r#"{"kind":"operator","t_ms":5,"action":"force_open","target":"provider:gone","by":"console"}"#,
        r#"{"kind":"operator","t_ms":6,"action":"reset","target":"tool:get_order","by":"console"}"#,
    ];
    let log = dir.path().join("ops.jsonl");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let out = dir.path().join("s.json");
    let o = fusebox(&[
        "replay",
        log.to_str().unwrap(),
        "--headless",
        "--summary-json",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains(
            "recorded operator action not applied: line 3: force_open provider:gone: unknown target `provider:gone`"
        ),
        "{err}"
    );
    assert!(!err.contains("line 4"), "{err}");
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(s["operator_not_applied"], 1, "{s}");
}

/// A parse error on a huge line (a deeply nested value) names the line and
/// column and shows only the part of the line around it.
#[test]
fn a_parse_error_on_a_huge_line_is_said_briefly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep.toml");
    std::fs::write(&path, format!("x = {}{}\n", "[".repeat(100_000), "]".repeat(100_000))).unwrap();
    let o = fusebox(&["check-config", path.to_str().unwrap()]);
    assert_clean_failure(&o, &["deep.toml", "line 1, column", "recursion", "200004 bytes long"]);
    assert!(stderr(&o).len() < 1_000, "{} bytes said", stderr(&o).len());
}

/// `kill -TERM` of a console run (in a terminal: `script` gives it a pty)
/// leaves the terminal as it was (alternate screen left, cursor shown),
/// flushes the recording whole and says so.
#[test]
fn a_console_stopped_by_sigterm_restores_the_terminal_and_flushes_its_recording() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.jsonl");
    let typescript = dir.path().join("typescript");
    let cmd = format!(
        "stty rows 45 cols 140; exec {} demo --record {} --log-dir {}",
        env!("CARGO_BIN_EXE_fusebox"),
        rec.display(),
        dir.path().display()
    );
    let mut script = crate::common::in_a_terminal(&cmd, &typescript);
    // The console is up once it has drawn its first frame and recorded a request.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let drawn = || {
        std::fs::read(&typescript).is_ok_and(|t| String::from_utf8_lossy(&t).contains("Breakers"))
            && std::fs::read_to_string(&rec).is_ok_and(|r| r.contains("\"kind\":\"request\""))
    };
    while !drawn() {
        assert!(std::time::Instant::now() < deadline, "the console did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", script.id())).unwrap();
    let pid = children.split_whitespace().next().expect("fusebox under script");
    assert!(Command::new("kill").args(["-TERM", pid]).status().unwrap().success());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = script.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = Command::new("kill").args(["-KILL", pid]).status();
            panic!("the console did not exit after SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let shown = String::from_utf8_lossy(&std::fs::read(&typescript).unwrap()).into_owned();
    let entered = shown.rfind("\x1b[?1049h").expect("entered the alternate screen");
    let after = &shown[entered..];
    assert!(after.contains("\x1b[?1049l"), "the alternate screen is left");
    assert!(after.contains("\x1b[?25h"), "the cursor is shown again");
    assert!(after.contains("recorded ") && after.contains("rec.jsonl"), "{after}");
    assert!(after.contains("stopped by signal 15"), "{after}");
    assert_eq!(status.code(), Some(2));
    let text = std::fs::read_to_string(&rec).unwrap();
    assert!(text.ends_with('\n'));
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("torn line `{line}`: {e}"));
    }
}

/// The synopsis' `fusebox [demo] [--headless] …`: without a command the
/// options are the demo's.
#[test]
fn fusebox_without_a_command_takes_the_demo_s_options() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    let o = fusebox(&[
        "--headless",
        "--duration",
        "5s",
        "--summary-json",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(s["requests"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["lost"], 0);
}

/// A demo over HTTP providers from a config: refused at --speed max (every
/// call would time out in virtual time); sent to a provider off this
/// machine only with --yes, after saying what it may cost.
#[test]
fn a_demo_over_real_providers_is_refused_at_max_speed_and_needs_yes_off_this_machine() {
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local.toml");
    std::fs::write(
        &local,
        "[providers.local]\nkind = \"openai-compatible\"\nbase_url = \"http://127.0.0.1:9/v1\"\n[models.m]\nprovider = \"local\"\ninput_per_m = 0.0\noutput_per_m = 0.0\n[routes.default]\nchain = [\"m\"]\n",
    )
    .unwrap();
    let o = fusebox(&["demo", "--headless", "--config", local.to_str().unwrap()]);
    assert_clean_failure(&o, &["local", "--speed max", "--speed 1"]);
    let hosted = dir.path().join("hosted.toml");
    std::fs::write(
        &hosted,
        "[providers.openai]\nkind = \"openai\"\napi_key_env = \"FUSEBOX_TEST_NO_SUCH_KEY\"\n[models.gpt-4o]\nprovider = \"openai\"\ninput_per_m = 2.5\noutput_per_m = 10.0\n[routes.default]\nchain = [\"gpt-4o\"]\n",
    )
    .unwrap();
    let o = fusebox(&[
        "demo",
        "--headless",
        "--speed",
        "1",
        "--config",
        hosted.to_str().unwrap(),
    ]);
    assert_clean_failure(
        &o,
        &["synthetic traffic", "tour", "requests/s", "openai", "a minute", "--yes"],
    );
}

/// A config that gives only `[providers.openai]` is told why the built-in
/// models no longer resolve, and what to add.
#[test]
fn a_providers_table_without_its_models_says_what_replaced_what() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("only.toml");
    std::fs::write(
        &path,
        "[providers.openai]\nkind = \"openai\"\napi_key_env = \"OPENAI_API_KEY\"\n",
    )
    .unwrap();
    let o = fusebox(&["check-config", path.to_str().unwrap()]);
    assert_clean_failure(
        &o,
        &[
            "models.claude-haiku.provider",
            "replaces the built-in one whole",
            "add [providers.anthropic]",
        ],
    );
}

/// The 2am-incident defers requests while get_order is down; the summary
/// says how each was re-driven once it recovered (all of them, here).
#[test]
fn the_summary_counts_re_driven_deferred_requests_by_how_they_ended() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.json");
    let o = fusebox(&[
        "demo",
        "--headless",
        "--scenario",
        "2am-incident",
        "--summary-json",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let deferred = s["by_level"]["deferred"].as_u64().unwrap();
    assert!(deferred > 0, "{s}");
    let r = &s["redriven"];
    let redriven: u64 = ["none", "partial", "fallback", "deferred", "failed"]
        .iter()
        .map(|l| r[*l].as_u64().unwrap())
        .sum();
    assert_eq!(redriven, deferred, "every deferred request was re-driven: {r}");
    assert!(r["none"].as_u64().unwrap() > 0, "{r}");
}

/// `fusebox keys new` prints a key once (stderr) and a config entry that
/// holds only its hash (stdout), which a config takes as it is; a
/// gateway with that config lets the key in as its user.
#[tokio::test]
async fn a_new_key_goes_in_the_config_and_opens_the_gateway() {
    let o = fusebox(&["keys", "new", "app", "--user", "alice", "--route", "default"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let secret = String::from_utf8_lossy(&o.stderr).lines().last().unwrap().to_string();
    assert!(secret.starts_with("fbx_") && secret.len() == 68, "{secret}");
    let entry = String::from_utf8(o.stdout).unwrap();
    assert!(
        !entry.contains(&secret),
        "the config entry holds the hash only: {entry}"
    );
    let cfg = fusebox::config::Config::parse(&entry, "keys.toml").unwrap();
    let key = cfg.keys["app"].clone();
    assert_eq!(key.hash, fusebox::config::access::SecretHash::of(&secret));
    assert_eq!(
        (key.user.as_str(), key.routes.as_slice()),
        ("alice", &["default".to_string()][..])
    );
    let f = crate::gateway::gateway(cfg, fusebox::gateway::GatewayOptions::default()).await;
    let r = f
        .http
        .post(format!("{}/v1/chat/completions", f.base))
        .bearer_auth(&secret)
        .json(&crate::gateway::ask("default", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The hash of what `keys hash` reads is the one in the entry.
    let mut child = Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args(["keys", "hash"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(secret.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), key.hash.to_string());
}

/// `serve` refuses a `--max-connections` that its open-file limit cannot
/// honour (each connection beside its upstream call), saying the most it
/// can, rather than closing the rest at accept once running.
#[test]
fn serve_refuses_more_connections_than_its_open_files_allow() {
    let o = Command::new("sh")
        .args(["-c", "ulimit -n 256 && exec \"$@\"", "sh"])
        .arg(env!("CARGO_BIN_EXE_fusebox"))
        .args([
            "serve",
            "--headless",
            "--listen",
            "127.0.0.1:0",
            "--max-connections",
            "57",
        ])
        .output()
        .unwrap();
    // 256 files less the reserve (128 and a sixteenth) leave 56 a use.
    assert_clean_failure(&o, &["--max-connections 57", "for 56 client connections", "ulimit -Hn"]);
}
