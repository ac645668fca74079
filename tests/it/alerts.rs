//! The shipped Prometheus alerts and Grafana board (docs/prometheus,
//! docs/grafana): promtool checks the rules and runs their unit tests, and
//! every metric and label they use is in a real gateway's `/metrics`, with
//! the new metrics' values those of the traffic sent. Without `promtool` the
//! promtool test prints a notice and passes, unless FUSEBOX_REQUIRE_PROMTOOL
//! is set (as `.ci/run` does).

use crate::gateway::{ask, Fleet};
use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::gateway::GatewayOptions;
use fusebox::mockserver::MockServer;
use fusebox::provider::fault::{Fault, FaultSpec};
use fusebox::runner::{Runner, RunnerParts};
use fusebox::target::Target;
use fusebox::telemetry::events::EventKind;
use fusebox::traffic::log::writer::{record_of, Fsync, RecordOptions, RecordedContent, Recorder, Salt};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs")
}

/// Runs promtool with `args`; None (with a notice) when it is missing.
fn promtool(args: &[&str]) -> Option<std::process::Output> {
    match Command::new("promtool").args(args).current_dir(docs()).output() {
        Ok(out) => Some(out),
        Err(e) if std::env::var_os("FUSEBOX_REQUIRE_PROMTOOL").is_some() => {
            panic!("FUSEBOX_REQUIRE_PROMTOOL is set but promtool cannot run: {e}")
        }
        Err(e) => {
            eprintln!("skipping: promtool cannot run ({e}); `apt-get install prometheus` provides it");
            None
        }
    }
}

fn assert_ok(what: &str, out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every expression of the board's panels.
fn board_exprs() -> Vec<String> {
    let board: Value =
        serde_json::from_str(&std::fs::read_to_string(docs().join("grafana/fusebox.json")).unwrap()).unwrap();
    assert_eq!(board["schemaVersion"], 39);
    let vars: Vec<_> = board["templating"]["list"].as_array().unwrap().iter().collect();
    assert!(vars
        .iter()
        .any(|v| v["name"] == "datasource" && v["query"] == "prometheus"));
    let mut exprs = Vec::new();
    for p in board["panels"].as_array().unwrap() {
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        for t in p["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    exprs
}

/// The rules' expressions (and the metrics their descriptions name): the
/// file's text, read as one.
fn rules_text() -> String {
    std::fs::read_to_string(docs().join("prometheus/alerts.yml")).unwrap()
}

#[test]
fn promtool_checks_the_rules_runs_their_unit_tests_and_parses_the_board() {
    let Some(out) = promtool(&["check", "rules", "prometheus/alerts.yml"]) else {
        return;
    };
    assert_ok("promtool check rules", &out);
    let out = promtool(&["test", "rules", "prometheus/alerts.test.yml"]).unwrap();
    assert_ok("promtool test rules", &out);
    // The board's queries parse as PromQL once Grafana's variables are set.
    let dir = tempfile::tempdir().unwrap();
    let mut rules = String::from("groups:\n  - name: board\n    rules:\n");
    for (i, e) in board_exprs().iter().enumerate() {
        let e = e.replace("$__rate_interval", "5m").replace("$instance", ".*");
        rules.push_str(&format!(
            "      - record: board:panel{i}\n        expr: {}\n",
            serde_json::to_string(&e).unwrap()
        ));
    }
    let path = dir.path().join("board.yml");
    std::fs::write(&path, rules).unwrap();
    let out = promtool(&["check", "rules", path.to_str().unwrap()]).unwrap();
    assert_ok("promtool check rules (the board's queries)", &out);
}

/// What an expression uses: metric names, with the labels (and literal
/// values) its selectors match; and the labels of its by/without clauses.
#[derive(Default, Debug)]
struct Uses {
    metrics: BTreeMap<String, Vec<(String, Vec<String>)>>,
    grouped: BTreeSet<String>,
}

fn parse(text: &str, uses: &mut Uses) {
    let b = text.as_bytes();
    let word = |i: usize| {
        let mut j = i;
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b':') {
            j += 1;
        }
        j
    };
    let mut i = 0;
    while i < b.len() {
        let starts = (b[i].is_ascii_alphabetic() || b[i] == b'_')
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b'$'));
        if !starts {
            i += 1;
            continue;
        }
        let end = word(i);
        let w = &text[i..end];
        let mut k = end;
        while k < b.len() && b[k] == b' ' {
            k += 1;
        }
        let close = |open: usize, c: u8| open + text[open..].find(c as char).unwrap();
        if w.starts_with("fusebox_") {
            let matchers = uses.metrics.entry(w.to_string()).or_default();
            if k < b.len() && b[k] == b'{' {
                let stop = close(k, b'}');
                for m in text[k + 1..stop].split(',').filter(|m| !m.trim().is_empty()) {
                    let op = m.find(['=', '!']).unwrap();
                    let label = m[..op].trim().to_string();
                    let value = m[op..].trim_start_matches(['=', '!', '~']).trim().trim_matches('"');
                    // Literal values, or a regex's alternatives, are checked.
                    let literal = !value.contains(['$', '.', '*', '\\']);
                    let values = if literal {
                        value.split('|').map(str::to_string).collect()
                    } else {
                        Vec::new()
                    };
                    matchers.push((label, values));
                }
                i = stop;
                continue;
            }
        } else if (w == "by" || w == "without") && k < b.len() && b[k] == b'(' {
            let stop = close(k, b')');
            uses.grouped.extend(
                text[k + 1..stop]
                    .split(',')
                    .map(|l| l.trim().to_string())
                    .filter(|l| !l.is_empty()),
            );
            i = stop;
            continue;
        }
        i = end;
    }
}

/// A scrape's samples: name → label sets.
fn samples(text: &str) -> HashMap<String, Vec<BTreeMap<String, String>>> {
    let mut out: HashMap<String, Vec<BTreeMap<String, String>>> = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let name_end = line.find(['{', ' ']).unwrap();
        let mut labels = BTreeMap::new();
        if line.as_bytes()[name_end] == b'{' {
            let body = &line[name_end + 1..line.rfind('}').unwrap()];
            for pair in body.split("\",") {
                let (k, v) = pair.split_once("=\"").unwrap();
                labels.insert(k.to_string(), v.trim_end_matches('"').to_string());
            }
        }
        out.entry(line[..name_end].to_string()).or_default().push(labels);
    }
    out
}

/// `/metrics` of a gateway over `runner`.
async fn scrape(runner: &std::sync::Arc<Runner>) -> String {
    let addr = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", GatewayOptions::default())
        .await
        .unwrap()
        .addr;
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn value(scrape: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape.lines().find_map(|l| {
        let (series, v) = l.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{').unwrap_or((series, ""));
        let all = labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
        (n == name && all && rest.matches('=').count() == labels.len()).then(|| v.parse().unwrap())
    })
}

/// A gateway whose recorder writes to a full disk, after some budget use,
/// healthy requests and requests degraded by a broken provider: every
/// metric the alerts and the board use is scraped, with their labels, and
/// the new ones count what was sent.
#[tokio::test]
async fn every_metric_the_alerts_and_board_use_is_scraped_with_the_values_sent() {
    let mut cfg = Config::default();
    cfg.budgets.user_tokens_per_day = 10_000;
    cfg.budgets.user_cost_per_day_usd = 0.0;
    cfg.budgets.global_tokens_per_day = 1_000_000;
    // As `serve --record` sets it up: the runner, its recorder (on a disk
    // that is full), then the gateway, shown what the recorder drops.
    let clock = Clock::system();
    let mut parts = RunnerParts::mock(clock, Seed(5));
    let mock = MockServer::instant(Seed(5), parts.faults.clone());
    let mock_addr = mock.spawn("127.0.0.1:0").await.unwrap();
    parts.providers = fusebox::provider::http::build(&cfg, clock, Some(&format!("http://{mock_addr}"))).unwrap();
    let faults = parts.faults.clone();
    let runner = Runner::new(cfg, parts).unwrap();
    let header = fusebox::traffic::log::Header {
        v: 1,
        started_at: "2026-11-29T02:00:00Z".into(),
        seed: 5,
        tools: Default::default(),
    };
    let record = RecordOptions {
        fsync: Fsync::Always,
        ..RecordOptions::default()
    };
    let rec = Recorder::start(Path::new("/dev/full"), record, header, runner.events()).unwrap();
    let opts = GatewayOptions {
        records_dropped: rec.dropped(),
        ..GatewayOptions::default()
    };
    let addr = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", opts)
        .await
        .unwrap()
        .addr;
    let f = Fleet {
        runner,
        faults,
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
    };
    let mut seen = f.runner.events().subscribe();

    // 25 users, alice the busiest: the per-user gauge shows the top 20.
    let mut tokens: BTreeMap<String, f64> = BTreeMap::new();
    let send = |user: String| {
        let f = &f;
        async move {
            let r = f.post(&ask("default", &user)).await;
            assert_eq!(r.status(), 200);
            let body: Value = r.json().await.unwrap();
            (user, body["usage"]["total_tokens"].as_f64().unwrap())
        }
    };
    let mut healthy = 0;
    for user in (0..25)
        .map(|i| format!("u{i:02}"))
        .chain(["alice".into(), "alice".into()])
    {
        let (u, t) = send(user).await;
        *tokens.entry(u).or_default() += t;
        healthy += 1;
    }
    // openai fails every call from now: each request falls back to
    // anthropic, degraded because of provider:openai and model:gpt-4o.
    f.faults.set(
        &Target::provider("openai"),
        FaultSpec::always(Fault::Status {
            code: 500,
            retry_after_ms: None,
        }),
    );
    let broken = 12;
    for _ in 0..broken {
        let (u, t) = send("hal".into()).await;
        *tokens.entry(u).or_default() += t;
    }

    // Every record the recorder was given is one it could not write.
    f.runner.events().close_subscribers();
    rec.finish().expect_err("the disk is full");
    let salt = Salt::new();
    let mut records = 1; // the header
    while let Ok(ev) = seen.try_recv() {
        if !matches!(ev.kind, EventKind::RecordingFailed { .. })
            && record_of(&ev, 0, RecordedContent::None, &salt).is_some()
        {
            records += 1;
        }
    }

    let scrape = f.get("/metrics").await;
    let have = samples(&scrape);

    // Every metric and label the alerts and the board use.
    let mut uses = Uses::default();
    parse(&rules_text(), &mut uses);
    for e in board_exprs() {
        parse(&e, &mut uses);
    }
    let added_by_prometheus = ["instance", "job"];
    for (name, matchers) in &uses.metrics {
        let series = have
            .get(name)
            .unwrap_or_else(|| panic!("{name} is used but not scraped:\n{scrape}"));
        for (label, values) in matchers
            .iter()
            .filter(|(l, _)| !added_by_prometheus.contains(&l.as_str()))
        {
            assert!(
                series.iter().any(|s| s.contains_key(label)),
                "{name} has no label {label}"
            );
            for v in values {
                assert!(
                    series.iter().any(|s| s.get(label) == Some(v)),
                    "{name} has no series with {label}=\"{v}\":\n{scrape}"
                );
            }
        }
    }
    for label in uses
        .grouped
        .iter()
        .filter(|l| !added_by_prometheus.contains(&l.as_str()))
    {
        assert!(
            uses.metrics
                .keys()
                .any(|n| have[n].iter().any(|s| s.contains_key(label))),
            "`by ({label})`: no metric used has it"
        );
    }
    for new in [
        "fusebox_needed_total",
        "fusebox_degraded_total",
        "fusebox_budget_global_used_ratio",
        "fusebox_budget_user_used_ratio",
        "fusebox_records_dropped_total",
        "fusebox_spans_dropped_total",
    ] {
        assert!(uses.metrics.contains_key(new), "{new} is used by no alert or panel");
    }

    // The degraded counters count what was broken.
    let all = f64::from(healthy + broken);
    for (target, needed, degraded) in [
        ("provider:openai", all, f64::from(broken)),
        ("model:gpt-4o", all, f64::from(broken)),
        ("provider:anthropic", f64::from(broken), 0.0),
        ("model:claude-haiku", f64::from(broken), 0.0),
    ] {
        let t = [("target", target)];
        assert_eq!(value(&scrape, "fusebox_needed_total", &t), Some(needed), "{target}");
        assert_eq!(value(&scrape, "fusebox_degraded_total", &t), Some(degraded), "{target}");
    }
    assert_eq!(
        value(&scrape, "fusebox_requests_total", &[("level", "fallback")]),
        Some(f64::from(broken))
    );

    // The 20 users nearest their daily budget, each at their share of it.
    let mut ranked: Vec<_> = tokens.iter().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let shown: BTreeSet<&str> = have["fusebox_budget_user_used_ratio"]
        .iter()
        .map(|s| s["user"].as_str())
        .collect();
    let top: BTreeSet<&str> = ranked.iter().take(20).map(|(u, _)| u.as_str()).collect();
    assert_eq!(shown, top);
    assert!(shown.contains("alice"));
    for (user, t) in ranked.iter().take(20) {
        let l = [("user", user.as_str()), ("window", "day"), ("kind", "tokens")];
        let got = value(&scrape, "fusebox_budget_user_used_ratio", &l).unwrap();
        assert!((got - *t / 10_000.0).abs() < 1e-9, "{user}: {got} for {t} tokens");
    }
    // Global: all tokens of the day over the day's limit (failed calls
    // count what they used too).
    let used = value(&scrape, "fusebox_budget_global_tokens", &[("window", "day")]).unwrap();
    let ratio = value(
        &scrape,
        "fusebox_budget_global_used_ratio",
        &[("window", "day"), ("kind", "tokens")],
    )
    .unwrap();
    assert!(
        used > 0.0 && (ratio - used / 1_000_000.0).abs() < 1e-12,
        "{ratio} for {used}"
    );

    assert_eq!(
        value(&scrape, "fusebox_records_dropped_total", &[]),
        Some(records as f64)
    );
    assert!(
        records > 2 * (healthy + broken),
        "a request, attempts and an outcome each"
    );
    assert_eq!(value(&scrape, "fusebox_spans_dropped_total", &[]), Some(0.0));
}

/// An open spend-rate breaker is scraped with the seconds until it closes;
/// closed ones (everyone's here) are not.
#[tokio::test]
async fn an_open_spend_rate_breaker_is_scraped_until_it_closes() {
    let mut cfg = Config::default();
    cfg.budgets.spend_rate.enabled = true;
    cfg.budgets.spend_rate.global = true;
    cfg.budgets.user_tokens_per_minute = 0;
    cfg.budgets.user_tokens_per_hour = 0;
    cfg.budgets.user_tokens_per_day = 0;
    let runner = Runner::new(cfg, RunnerParts::mock(Clock::system(), Seed(5))).unwrap();
    // The budgets driven directly, on times ahead of the runner's clock: an
    // hour at 20k tokens a minute, then a loop at 60k, beside a steady user
    // that keeps everyone's rate from tripling.
    let b = runner.budgets();
    let mut until = None;
    for step in 0..640u64 {
        let now = step * 6_000;
        for (user, tokens) in [("loop", if step < 600 { 2_000 } else { 6_000 }), ("steady", 20_000)] {
            match b.reserve(user, tokens, 0.0, now) {
                Ok(r) => b.settle(r, tokens, 0.0, now),
                Err(e) => {
                    until.get_or_insert(e.rate.expect("refused by the spend-rate breaker").trip.until_ms);
                }
            }
        }
    }
    let until = until.expect("the loop's breaker opened");
    let scrape = scrape(&runner).await;
    let left = value(&scrape, "fusebox_spend_rate_open_seconds", &[("user", "loop")]).expect("scraped");
    let now = runner.clock().elapsed_ms() as f64 / 1000.0;
    assert!((left - (until as f64 / 1000.0 - now)).abs() < 5.0, "{left} s left");
    assert_eq!(
        value(&scrape, "fusebox_spend_rate_open_seconds", &[("user", "steady")]),
        None
    );
    assert_eq!(
        value(&scrape, "fusebox_spend_rate_open_seconds", &[("user", "*")]),
        None
    );
}

#[tokio::test]
async fn an_adaptive_limit_and_its_moves_are_scraped() {
    use fusebox::resilience::limiter::Signal;
    let mut cfg = Config::default();
    cfg.limiter.adaptive.enabled = true;
    let runner = Runner::new(cfg, RunnerParts::mock(Clock::system(), Seed(5))).unwrap();
    // openai's limiter driven directly: 16 calls held, then a 429.
    let openai = crate::common::provider_slot(&runner, "openai");
    let now = tokio::time::Instant::now();
    let held: Vec<_> = (0..16)
        .map(|_| openai.limiter.try_acquire(400, 100, now).unwrap())
        .collect();
    assert_eq!(openai.limiter.view(now).concurrency, (16, 16), "the limit starts at 16");
    for (i, p) in held.into_iter().enumerate() {
        let signal = if i == 0 {
            Signal::Overloaded { admitted: now }
        } else {
            Signal::Neutral
        };
        openai.limiter.settle(p, 100, 0, signal, now);
    }
    let scrape = scrape(&runner).await;
    let limit = |p: &str| value(&scrape, "fusebox_limiter_concurrency_limit", &[("provider", p)]);
    // 16 × 0.9, and the others untouched; deepseek's own cap of 10 is its ceiling.
    assert_eq!(
        (limit("openai"), limit("anthropic"), limit("deepseek")),
        (Some(14.0), Some(16.0), Some(10.0))
    );
    let moves = |why: &str| {
        value(
            &scrape,
            "fusebox_limiter_adaptive_moves_total",
            &[("provider", "openai"), ("why", why)],
        )
    };
    assert_eq!(
        (moves("overload"), moves("grew"), moves("latency")),
        (Some(1.0), Some(0.0), Some(0.0))
    );
}

#[tokio::test]
async fn a_queue_scrapes_its_waiting_and_shed_calls_by_priority() {
    use fusebox::config::Priority;
    use fusebox::resilience::limiter::Place;
    let mut cfg = Config::default();
    cfg.limiter.queue.enabled = true;
    let runner = Runner::new(cfg, RunnerParts::mock(Clock::system(), Seed(5))).unwrap();
    // deepseek's 10 slots taken; a batch call waits past its deadline.
    let deepseek = crate::common::provider_slot(&runner, "deepseek");
    let now = tokio::time::Instant::now();
    let held: Vec<_> = (0..10)
        .map(|_| deepseek.limiter.try_acquire(400, 100, now).unwrap())
        .collect();
    let place = Place::new(Priority::Batch, "nightly".into(), 1);
    assert!(deepseek.limiter.acquire_queued(400, 100, &place, now).await.is_err());
    let scrape = scrape(&runner).await;
    let of = |name: &str, p: &str, pr: &str| value(&scrape, name, &[("provider", p), ("priority", pr)]);
    assert_eq!(of("fusebox_queue_shed_total", "deepseek", "batch"), Some(1.0));
    assert_eq!(of("fusebox_queue_shed_total", "deepseek", "critical"), Some(0.0));
    assert_eq!(of("fusebox_queue_waiting", "openai", "default"), Some(0.0));
    for p in held {
        deepseek.limiter.release(p, now);
    }
}
