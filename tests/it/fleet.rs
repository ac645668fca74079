//! Fleet mode with a real `redis-server` on a free loopback port and two
//! `fusebox serve` processes sharing it. Without redis-server on PATH the
//! tests print a notice and pass, unless FUSEBOX_REQUIRE_REDIS is set (as
//! `.ci/run` does), where a missing server fails them.

use crate::common;

use common::redis::{wait_until, Redis};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `fusebox serve --headless` process, killed on drop.
pub(crate) struct Instance {
    child: Child,
    pub(crate) base: String,
}

impl Instance {
    fn start(state: &str) -> Instance {
        Self::start_with(state, &[])
    }

    pub(crate) fn start_with(state: &str, extra: &[&str]) -> Instance {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fusebox"))
            .args(["serve", "--headless", "--listen", "127.0.0.1:0", "--state", state])
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("run fusebox serve");
        let mut first = String::new();
        let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        stderr.read_line(&mut first).unwrap();
        // Keep reading its status lines, as a terminal would.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        let base = first
            .split_whitespace()
            .find_map(|w| w.strip_prefix("http://"))
            .and_then(|w| w.strip_suffix("/v1"))
            .unwrap_or_else(|| panic!("no base URL in `{first}`"));
        Instance {
            child,
            base: format!("http://{base}"),
        }
    }

    pub(crate) fn metrics(&self) -> String {
        block(async {
            reqwest::get(format!("{}/metrics", self.base))
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        })
    }

    pub(crate) fn metric(&self, sample: &str) -> Option<f64> {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
    }

    pub(crate) fn command(&self, json: &str) -> u16 {
        block(async {
            reqwest::Client::new()
                .post(format!("{}/_fusebox/commands", self.base))
                .header("x-fusebox-operator", "ana")
                .body(json.to_string())
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    }

    fn ask(&self) -> u16 {
        block(async {
            reqwest::Client::new()
                .post(format!("{}/v1/chat/completions", self.base))
                .json(&serde_json::json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Two instances on `redis` with the config `toml`, once both see each other.
fn two_instances(redis: &Redis, toml: &str) -> (Instance, Instance, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fleet.toml");
    std::fs::write(&cfg, toml).unwrap();
    let cfg = cfg.to_str().unwrap();
    let (a, b) = (
        Instance::start_with(&redis.url(), &["--config", cfg]),
        Instance::start_with(&redis.url(), &["--config", cfg]),
    );
    wait_until("two live instances", || {
        a.metric("fusebox_fleet_instances") == Some(2.0) && b.metric("fusebox_fleet_instances") == Some(2.0)
    });
    (a, b, dir)
}

const OPENAI_FORCED_OPEN: &str = "fusebox_breaker_state{target=\"provider:openai\",state=\"forced_open\"}";

#[test]
fn an_operator_action_on_one_instance_takes_effect_on_the_other() {
    let Some(redis) = Redis::start() else { return };
    let (a, b) = (Instance::start(&redis.url()), Instance::start(&redis.url()));
    wait_until("both instances see two live instances", || {
        a.metric("fusebox_fleet_instances") == Some(2.0) && b.metric("fusebox_fleet_instances") == Some(2.0)
    });
    assert_eq!(b.metric(OPENAI_FORCED_OPEN), Some(0.0));
    assert_eq!(a.command(r#"{"action":"force_open","target":"provider:openai"}"#), 200);
    let took = wait_until("b sees a's force-open", || b.metric(OPENAI_FORCED_OPEN) == Some(1.0));
    assert!(
        took < Duration::from_secs(1),
        "applied on the other instance after {took:?}"
    );
    // An instance that starts later applies the stored action too.
    let c = Instance::start(&redis.url());
    wait_until("a late instance applies the stored action", || {
        c.metric(OPENAI_FORCED_OPEN) == Some(1.0)
    });
    // And a reset on b releases it everywhere.
    assert_eq!(b.command(r#"{"action":"reset","target":"provider:openai"}"#), 200);
    wait_until("a sees b's reset", || a.metric(OPENAI_FORCED_OPEN) == Some(0.0));
    wait_until("c sees b's reset", || c.metric(OPENAI_FORCED_OPEN) == Some(0.0));
}

#[test]
fn without_redis_instances_serve_alone_report_degraded_and_recover() {
    let Some(mut redis) = Redis::start() else { return };
    let (a, b) = (Instance::start(&redis.url()), Instance::start(&redis.url()));
    wait_until("two live instances", || {
        a.metric("fusebox_fleet_instances") == Some(2.0)
    });
    assert_eq!(a.metric("fusebox_store_degraded"), Some(0.0));
    redis.stop();
    wait_until("a reports degraded", || a.metric("fusebox_store_degraded") == Some(1.0));
    wait_until("b reports degraded", || b.metric("fusebox_store_degraded") == Some(1.0));
    assert_eq!(a.ask(), 200, "still serving with local state");
    assert_eq!(b.ask(), 200);
    // An action taken during the outage applies locally, and is shared once
    // Redis is back.
    assert_eq!(
        a.command(r#"{"action":"force_open","target":"provider:anthropic"}"#),
        200
    );
    let port = redis.port;
    let _redis = Redis::start_on(port).expect("redis-server restarts");
    wait_until("a recovers", || a.metric("fusebox_store_degraded") == Some(0.0));
    wait_until("b recovers", || b.metric("fusebox_store_degraded") == Some(0.0));
    wait_until("the outage's action reaches b", || {
        b.metric("fusebox_breaker_state{target=\"provider:anthropic\",state=\"forced_open\"}") == Some(1.0)
    });
}

/// Two instances under a load far above openai's TPM: together they spend
/// what the shared bucket allows (its capacity plus its refill), not twice.
#[test]
fn two_instances_share_one_token_budget_per_minute() {
    let Some(redis) = Redis::start() else { return };
    let (a, b, _dir) = two_instances(
        &redis,
        "[providers.openai]\ntpm = 6000\nrpm = 100000\n[providers.anthropic]\n[providers.deepseek]\n\
         [routes.default]\nchain = [\"gpt-4o\"]\n\
         [budgets]\nuser_tokens_per_minute = 100000000\nuser_tokens_per_hour = 100000000\n\
         user_tokens_per_day = 1000000000\nuser_cost_per_day_usd = 100000.0\n",
    );
    let started = Instant::now();
    let load = Duration::from_secs(8);
    block(async {
        let http = reqwest::Client::new();
        let mut set = tokio::task::JoinSet::new();
        for i in 0..48 {
            let (http, base) = (http.clone(), if i % 2 == 0 { a.base.clone() } else { b.base.clone() });
            set.spawn(async move {
                while started.elapsed() < load {
                    let body = serde_json::json!({"model": "default", "max_tokens": 64, "user": format!("u{i}"),
                        "messages": [{"role": "user", "content": "Where is order #38100?"}]});
                    let _ = http
                        .post(format!("{base}/v1/chat/completions"))
                        .json(&body)
                        .send()
                        .await;
                }
            });
        }
        while set.join_next().await.is_some() {}
    });
    let elapsed = started.elapsed().as_secs_f64();
    let spent = a.metric("fusebox_tokens_total").unwrap() + b.metric("fusebox_tokens_total").unwrap();
    // The shared bucket starts full (6,000) and refills 100 tokens/s.
    let allowed = 6_000.0 + 100.0 * elapsed;
    eprintln!("two instances spent {spent} tokens in {elapsed:.1} s; the shared limit allows {allowed:.0}");
    assert!(spent <= allowed * 1.05, "spent {spent}, allowed {allowed:.0}");
    assert!(
        spent >= allowed * 0.75,
        "the limit is used, not starved: spent {spent}, allowed {allowed:.0}"
    );
}

/// One user hammering both instances gets the minute budget once, not
/// once per instance.
#[test]
fn a_users_budget_holds_across_instances() {
    let Some(redis) = Redis::start() else { return };
    // 60 calls of about 70 tokens: refusals come even if the run straddles
    // a minute boundary (two windows of 1,500).
    let (a, b, _dir) = two_instances(&redis, "[budgets]\nuser_tokens_per_minute = 1500\n");
    let minute = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() / 60;
    let first = std::time::SystemTime::now();
    let (ok, refused) = block(async {
        let http = reqwest::Client::new();
        let mut set = tokio::task::JoinSet::new();
        for i in 0..12 {
            let (http, base) = (http.clone(), if i % 2 == 0 { a.base.clone() } else { b.base.clone() });
            set.spawn(async move {
                let mut statuses = Vec::new();
                for _ in 0..5 {
                    let body = serde_json::json!({"model": "default", "max_tokens": 64, "user": "carol",
                        "messages": [{"role": "user", "content": "Where is order #38100?"}]});
                    let r = http
                        .post(format!("{base}/v1/chat/completions"))
                        .json(&body)
                        .send()
                        .await
                        .unwrap();
                    statuses.push(r.status().as_u16());
                }
                statuses
            });
        }
        let (mut ok, mut refused) = (0, 0);
        while let Some(s) = set.join_next().await {
            for s in s.unwrap() {
                match s {
                    200 => ok += 1,
                    429 => refused += 1,
                    s => panic!("unexpected {s}"),
                }
            }
        }
        (ok, refused)
    });
    let windows = minute(std::time::SystemTime::now()) - minute(first) + 1;
    let spent = a.metric("fusebox_tokens_total").unwrap() + b.metric("fusebox_tokens_total").unwrap();
    let allowed = 1_500.0 * windows as f64;
    eprintln!("carol: {ok} answered, {refused} refused, {spent} tokens over two instances; budget {allowed}");
    assert!(refused > 0, "the budget ran out");
    assert!(spent <= allowed * 1.05, "spent {spent} of {allowed}");
}

#[test]
fn a_bad_state_url_is_explained() {
    let o = Command::new(env!("CARGO_BIN_EXE_fusebox"))
        .args([
            "serve",
            "--headless",
            "--listen",
            "127.0.0.1:0",
            "--state",
            "postgres://nope",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--state postgres://nope") && err.contains("redis://"),
        "{err}"
    );
}

/// Every provider of this scenario refuses connections from the start:
/// each request is deferred. (Refused connections stay local; 503s would
/// be shared as trips, and the other instance would wait for recovery.)
const ALL_DOWN: &str = r#"name = "all-down"
rps = 20.0
users = 50
[[timeline]]
at_s = 0
target = "provider:openai"
fault = { type = "connection_refused" }
[[timeline]]
at_s = 0
target = "provider:anthropic"
fault = { type = "connection_refused" }
[[timeline]]
at_s = 0
target = "provider:deepseek"
fault = { type = "connection_refused" }
"#;

/// The order service answers 503: requests that need it are deferred,
/// while the models stay healthy.
const ORDERS_DOWN: &str = r#"name = "orders-down"
rps = 20.0
users = 50
[[timeline]]
at_s = 0
target = "tool:get_order"
fault = { type = "status", code = 503 }
"#;

/// Files for the deferred-stream tests, and `fusebox demo` commands on
/// `redis` in real time.
struct Demos {
    dir: tempfile::TempDir,
    url: String,
}

impl Demos {
    fn new(redis: &Redis) -> Demos {
        let d = Demos {
            dir: tempfile::tempdir().unwrap(),
            url: redis.url(),
        };
        d.write("down.toml", ALL_DOWN);
        d.write("orders.toml", ORDERS_DOWN);
        d.write("calm.toml", "name = \"calm\"\nrps = 1.0\nusers = 10\n");
        d.write("cfg.toml", "[degradation]\ndefer_retry_ms = 1000\n");
        d
    }

    fn write(&self, name: &str, text: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }

    /// A headless demo of `scenario` for `duration`, writing its summary
    /// to `NAME.json` under the scenario's name.
    fn demo(&self, scenario: &str, duration: &str, summary: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fusebox"));
        c.args(["demo", "--headless", "--speed", "1", "--duration", duration])
            .args(["--scenario", &self.path(scenario), "--config", &self.path("cfg.toml")])
            .args(["--state", &self.url, "--summary-json", &self.path(summary)])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c
    }

    fn fleet(&self, summary: &str) -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(self.path(summary)).unwrap()).unwrap();
        v["fleet"].clone()
    }

    fn xlen(&self) -> u64 {
        redis_u64(&self.url, redis::cmd("XLEN").arg("fusebox:deferred"))
    }

    /// Entries claimed and not acknowledged.
    fn pending(&self) -> u64 {
        let mut con = redis::Client::open(self.url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let v: redis::Value = redis::cmd("XPENDING")
            .arg("fusebox:deferred")
            .arg("fusebox")
            .query(&mut con)
            .unwrap();
        match v {
            redis::Value::Array(items) => match items.first() {
                Some(redis::Value::Int(n)) => *n as u64,
                other => panic!("XPENDING count: {other:?}"),
            },
            other => panic!("XPENDING: {other:?}"),
        }
    }
}

fn redis_u64(url: &str, cmd: &mut redis::Cmd) -> u64 {
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    cmd.query::<u64>(&mut con).unwrap()
}

/// Instance A defers requests to the fleet's stream and is killed while it
/// holds them; instance B takes them over and re-drives every one.
#[test]
fn killing_an_instance_loses_no_deferred_request() {
    let Some(redis) = Redis::start() else { return };
    let d = Demos::new(&redis);
    let mut a = d
        .demo("orders.toml", "120s", "a.json")
        .spawn()
        .expect("run fusebox demo");
    wait_until("a defers to the stream", || d.xlen() >= 30);
    a.kill().unwrap();
    a.wait().unwrap();
    let deferred = d.xlen();
    assert!(d.pending() > 0, "a held some of them when it died");
    let b = d.demo("calm.toml", "14s", "b.json").output().expect("run fusebox demo");
    assert!(b.status.success());
    let fleet = d.fleet("b.json");
    eprintln!("a deferred {deferred}; b: {fleet}");
    assert_eq!(fleet["deferred_redriven"], deferred, "b re-drove every one");
    assert_eq!(d.xlen(), 0, "the stream is empty");
    assert_eq!(d.pending(), 0, "nothing is left claimed");
}

/// An instance where no model admits calls hands its deferred requests to
/// the fleet instead of holding them; a healthy one re-drives them at once.
#[test]
fn an_instance_that_cannot_re_drive_leaves_deferred_requests_to_others() {
    let Some(redis) = Redis::start() else { return };
    let d = Demos::new(&redis);
    let a = d.demo("down.toml", "6s", "a.json").output().expect("run fusebox demo");
    assert!(a.status.success());
    let shared = d.fleet("a.json")["deferred_shared"].as_u64().unwrap();
    assert!(shared >= 30, "a deferred {shared}");
    assert_eq!(d.xlen(), shared, "all of them wait on the stream");
    assert_eq!(d.pending(), 0, "a holds none of them");
    let b = d.demo("calm.toml", "15s", "b.json").output().expect("run fusebox demo");
    assert!(b.status.success());
    assert_eq!(d.fleet("b.json")["deferred_redriven"], shared, "b re-drove every one");
    assert_eq!(d.xlen(), 0);
}

impl Instance {
    /// A handle on a running instance's address (not owning the process).
    fn at(base: String) -> Base {
        Base { base }
    }

    fn breaker_is(&self, target: &str, state: &str) -> bool {
        self.metric(&format!(
            "fusebox_breaker_state{{target=\"{target}\",state=\"{state}\"}}"
        )) == Some(1.0)
    }
}

/// An instance's address, for threads that call it.
#[derive(Clone)]
struct Base {
    base: String,
}

impl Base {
    fn ask_model(&self, model: &str) -> u16 {
        block(async {
            reqwest::Client::new()
                .post(format!("{}/v1/chat/completions", self.base))
                .json(&serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    }
}

/// Twelve calls of `model` at once, from threads.
fn asks(base: &str, model: &'static str) -> std::thread::JoinHandle<Vec<u16>> {
    let a = Instance::at(base.to_string());
    std::thread::spawn(move || {
        let calls: Vec<_> = (0..12)
            .map(|_| {
                let a = a.clone();
                std::thread::spawn(move || a.ask_model(model))
            })
            .collect();
        calls.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

/// A breaker tripped by what the provider said (503s) opens on every
/// instance within a second; one tripped by this host's connection errors
/// stays local.
#[test]
fn provider_signalled_trips_are_shared_and_transport_trips_stay_local() {
    let Some(redis) = Redis::start() else { return };
    let (a, b, _dir) = two_instances(
        &redis,
        "[routes.default]\nchain = [\"gpt-4o\", \"deepseek-chat\"]\n\
         [routes.haiku]\nchain = [\"claude-haiku\", \"deepseek-chat\"]\n\
         [retry]\nmax_retries = 0\n",
    );
    let fault = |target: &str, fault: &str| {
        let cmd = format!(r#"{{"action":"set_fault","target":"{target}","fault":{{"fault":{fault}}}}}"#);
        assert_eq!(a.command(&cmd), 200, "{cmd}");
    };
    // a's connections to anthropic are refused: a trips, b does not.
    fault("provider:anthropic", r#"{"type":"connection_refused"}"#);
    // Answered by deepseek, or refused while its bulkhead is full.
    let answered = |s: Vec<u16>| s.iter().all(|s| [200, 429, 503].contains(s));
    for _ in 0..5 {
        assert!(answered(asks(&a.base, "haiku").join().unwrap()));
        if a.breaker_is("provider:anthropic", "open") {
            break;
        }
    }
    assert!(
        a.breaker_is("provider:anthropic", "open"),
        "a trips on refused connections"
    );
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(
        b.breaker_is("provider:anthropic", "closed"),
        "a transport trip stays on its instance"
    );
    // openai answers a with 503s: the trip reaches b within a second.
    fault("provider:openai", r#"{"type":"status","code":503}"#);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (stop, base) = (stop.clone(), a.base.clone());
        std::thread::spawn(move || {
            let mut ok = true;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ok &= answered(asks(&base, "default").join().unwrap());
            }
            ok
        })
    };
    wait_until("a's openai breaker trips", || a.breaker_is("provider:openai", "open"));
    let took = wait_until("b sees a's trip", || b.breaker_is("provider:openai", "open"));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(took < Duration::from_secs(1), "shared after {took:?}");
    assert!(load.join().unwrap(), "every call answered or refused");
}

/// With `budgets_fail = "closed"`, a call the allowances do not cover is
/// refused while Redis is away, naming why.
#[test]
fn budgets_can_fail_closed_while_redis_is_away() {
    let Some(mut redis) = Redis::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("closed.toml");
    std::fs::write(&cfg, "[state]\nbudgets_fail = \"closed\"\n").unwrap();
    let a = Instance::start_with(&redis.url(), &["--config", cfg.to_str().unwrap()]);
    wait_until("a joined", || a.metric("fusebox_fleet_instances") == Some(1.0));
    redis.stop();
    wait_until("a reports degraded", || a.metric("fusebox_store_degraded") == Some(1.0));
    let (status, body) = block(async {
        let r = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", a.base))
            .json(&serde_json::json!({"model": "default", "user": "dora",
                "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    });
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("user dora (fleet) budget cannot be checked"), "{body}");
}

impl Instance {
    /// `GET /v1/models` (answered at once, with a caller key where keys
    /// are in use) with `key`; its status.
    fn models_with(&self, key: &str) -> u16 {
        block(async {
            reqwest::Client::new()
                .get(format!("{}/v1/models", self.base))
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    }

    /// A chat call with `key` as the bearer credential; its status.
    fn ask_with(&self, key: &str) -> u16 {
        block(async {
            reqwest::Client::new()
                .post(format!("{}/v1/chat/completions", self.base))
                .bearer_auth(key)
                .json(&serde_json::json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    }
}

/// A key shared on the fleet's Redis opens every instance, and revoked on
/// one command is refused by all of them within a second.
#[test]
fn a_revoked_key_is_refused_across_the_fleet_within_a_second() {
    let Some(redis) = Redis::start() else { return };
    let logs = tempfile::tempdir().unwrap();
    let log_dir = logs.path().to_str().unwrap();
    let (a, b) = (
        Instance::start_with(&redis.url(), &["--log-dir", log_dir]),
        Instance::start_with(&redis.url(), &["--log-dir", log_dir]),
    );
    let keys = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_fusebox"))
            .arg("keys")
            .args(args)
            .args(["--state", &redis.url()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    // A gateway shows only what it can call: its providers and models.
    let metrics = a.metrics();
    assert!(
        metrics.contains("target=\"provider:openai\"") && !metrics.contains("target=\"tool:"),
        "{metrics}"
    );
    let secret = keys(&["new", "app", "--user", "alice"]).trim().to_string();
    assert!(secret.starts_with("fbx_"), "{secret}");
    wait_until("both instances take the shared key", || {
        a.ask_with(&secret) == 200 && b.ask_with(&secret) == 200
    });
    assert_eq!(b.ask_with("fbx_guess"), 401, "a key is needed now");
    // With keys and no operator token the admin endpoints are closed.
    let closed = block(async { reqwest::get(format!("{}/metrics", a.base)).await.unwrap().status() });
    assert_eq!(closed, 401);
    assert!(keys(&["list"]).contains("app\tuser alice\troutes all\texpires never"));
    let stored = Command::new("redis-cli")
        .args(["-u", &redis.url(), "hgetall", "fusebox:keys"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    keys(&["revoke", "app"]);
    let took = wait_until("b refuses the revoked key", || b.models_with(&secret) == 401);
    assert!(took < Duration::from_secs(1), "refused after {took:?}");
    // The other instance reads the keys on its own schedule: within a second too.
    let took = wait_until("a refuses the revoked key", || a.models_with(&secret) == 401);
    assert!(took < Duration::from_secs(1), "refused after {took:?}");
    assert_eq!(a.ask_with(&secret), 401);
    let listed = keys(&["list"]);
    assert!(listed.contains("app\trevoked"));
    // The secret is in no listing, log or Redis value.
    let mut seen = listed;
    for f in std::fs::read_dir(logs.path()).unwrap().flatten() {
        seen.push_str(&std::fs::read_to_string(f.path()).unwrap_or_default());
    }
    assert!(seen.contains("gateway listening"), "the logs were read");
    seen.push_str(&stored);
    assert!(!seen.contains(&secret), "the secret leaked");
}

/// A brownout from the start: openai fails seven calls in ten.
const BROWNOUT: &str = r#"name = "brownout"
rps = 2.0
users = 50
[[timeline]]
at_s = 0
target = "provider:openai"
fault = { type = "status", code = 503 }
rate = 0.7
"#;

/// Retries in a recording, as its outcome lines' chains count them
/// (`gpt-4o ✗503×3`: two).
fn recorded_retries(path: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    let outcomes = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "outcome");
    let hops: Vec<String> = outcomes
        .flat_map(|v| v["chain"].as_array().unwrap().clone())
        .map(|h| h.as_str().unwrap().to_string())
        .collect();
    hops.iter()
        .filter_map(|h| h.rsplit_once('×').and_then(|(_, n)| n.parse::<u64>().ok()))
        .map(|tries| tries - 1)
        .sum()
}

/// Four instances through a five-minute brownout on one Redis: their
/// retries together, counted in their recordings, stay within the one
/// budget they share; four alone (each its own budget) retry far more.
#[test]
fn four_instances_share_one_retry_budget() {
    let Some(redis) = Redis::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = |name: String| dir.path().join(name);
    std::fs::write(path("brownout.toml".into()), BROWNOUT).unwrap();
    let cfg = format!("{}/examples/fleet-retries.toml", env!("CARGO_MANIFEST_DIR"));
    // Four on Redis and four alone, all at once.
    let runs: Vec<(String, u32)> = ["redis", "alone"]
        .iter()
        .flat_map(|fleet| (0..4).map(move |i| (fleet.to_string(), i)))
        .collect();
    let demos: Vec<_> = runs
        .iter()
        .map(|(fleet, i)| {
            let state = if fleet == "redis" { redis.url() } else { "memory".into() };
            let mut c = Command::new(env!("CARGO_BIN_EXE_fusebox"));
            c.args(["demo", "--headless", "--speed", "1", "--duration", "5m", "--seed"])
                .arg(i.to_string())
                .arg("--scenario")
                .arg(path("brownout.toml".into()))
                .args(["--config", &cfg, "--state", &state, "--record"])
                .arg(path(format!("{fleet}{i}.jsonl")))
                .arg("--summary-json")
                .arg(path(format!("{fleet}{i}.json")))
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            c.spawn().expect("run fusebox demo")
        })
        .collect();
    for mut d in demos {
        assert!(d.wait().unwrap().success());
    }
    let total = |fleet: &str| {
        let (mut retries, mut requests, mut granted, mut refused) = (0, 0, 0, 0);
        for i in 0..4 {
            retries += recorded_retries(&path(format!("{fleet}{i}.jsonl")));
            let summary = std::fs::read_to_string(path(format!("{fleet}{i}.json"))).unwrap();
            let s: serde_json::Value = serde_json::from_str(&summary).unwrap();
            requests += s["requests"].as_u64().unwrap();
            granted += s["fleet"]["retries_granted"].as_u64().unwrap_or(0);
            refused += s["fleet"]["retries_refused"].as_u64().unwrap_or(0);
        }
        (retries, requests, granted, refused)
    };
    let (retries, requests, granted, refused) = total("redis");
    let (alone, alone_requests, ..) = total("alone");
    // Over the 300 s and the requests' ends after (well within 40 s): the
    // floor, 2 a second; a tenth of requests.
    let budget = 2.0 * 340.0 + 0.1 * requests as f64;
    eprintln!(
        "4 instances on Redis, {requests} requests: {retries} retries recorded (budget {budget:.0}; granted {granted}, refused {refused}); 4 alone, {alone_requests} requests: {alone} retries ({:.2}x)",
        alone as f64 / retries as f64
    );
    assert!(retries as f64 <= budget, "{retries} retries against {budget}");
    assert!(
        refused > 0 && retries <= granted,
        "every retry drew from the fleet's budget"
    );
    assert!(alone as f64 >= 2.0 * retries as f64, "{alone} alone against {retries}");
}
