//! A fleet whose Redis fails over, with real `redis-server`s on loopback:
//! a primary, a replica and three Sentinels (`redis+sentinel://…`), and a
//! cluster of three primaries with a replica each (`redis+cluster://…`).
//! Four `fusebox serve` instances under load; a primary is killed and a
//! replica promoted. Skipped, with a notice, without redis-server (unless
//! FUSEBOX_REQUIRE_REDIS is set, as in CI).

use crate::common::redis::{free_port, wait_until, Cluster, Redis, Sentinel};
use crate::fleet::Instance;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Runs a command on the Redis server (or Sentinel) at `port`.
fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> redis::RedisResult<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0"))?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
    cmd.query(&mut conn)
}

/// Whether the replica at `port` holds a key matching `pattern` (a
/// cluster's replica answers reads once told READONLY).
fn replica_holds(port: u16, pattern: &str) -> bool {
    let held = || -> redis::RedisResult<bool> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/0"))?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
        let _: redis::RedisResult<()> = redis::cmd("READONLY").query(&mut conn);
        let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut conn)?;
        Ok(!keys.is_empty())
    };
    held().unwrap_or(false)
}

const FORCED: &str = "fusebox_breaker_state{target=\"model:deepseek-chat\",state=\"forced_open\"}";

/// A primary of the store dying and its replica taking over.
struct Failing<'a> {
    /// Kills the primary.
    kill: &'a mut dyn FnMut(),
    /// The replica is the primary now.
    promoted: &'a dyn Fn() -> bool,
}

/// How a store fails over, for [`through_a_failover`].
struct Failover<'a, 'b> {
    failing: Failing<'a>,
    /// The action given before is on the replica that will be promoted.
    replicated: &'b dyn Fn() -> bool,
    /// Instances whose heartbeats the store holds now.
    live: &'b dyn Fn() -> usize,
}

/// Budgets out of the way, for tests that count failures or retries.
const NO_BUDGETS: &str = "[budgets]\nuser_tokens_per_minute = 0\nuser_tokens_per_hour = 0\nuser_tokens_per_day = 0\nuser_cost_per_day_usd = 0\n";

/// Four instances on `url` with the config at `cfg`, once each sees all four.
fn four(url: &str, cfg: &str) -> Vec<Instance> {
    let instances: Vec<Instance> = (0..4).map(|_| Instance::start_with(url, &["--config", cfg])).collect();
    wait_until("four live instances", || {
        instances
            .iter()
            .all(|i| i.metric("fusebox_fleet_instances") == Some(4.0))
    });
    instances
}

/// Every instance is on the store again (not deciding alone).
fn rejoined(instances: &[Instance]) -> bool {
    instances
        .iter()
        .all(|i| i.metric("fusebox_store_degraded") == Some(0.0))
}

/// The sum over `instances` of every metric sample starting with `prefix`.
fn sum(instances: &[Instance], prefix: &str) -> f64 {
    let samples: Vec<String> = instances.iter().map(|i| i.metrics()).collect();
    samples
        .iter()
        .flat_map(|m| m.lines())
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// How a call through the load ended: its status and body, or the
/// transport's error.
type Answer = Result<(u16, String), String>;

/// Three callers on each instance calling in a loop until stopped, caller
/// `n` as user `u<n>` or all as one `user`; `seen` is told each call's
/// answer and may ask its caller to pause.
struct Load {
    stop: Arc<AtomicBool>,
    callers: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start<F>(instances: &[Instance], user: Option<&str>, seen: F) -> Load
    where
        F: Fn(Answer) -> Option<Duration> + Send + Sync + 'static,
    {
        let (stop, seen) = (Arc::new(AtomicBool::new(false)), Arc::new(seen));
        let callers = instances
            .iter()
            .flat_map(|i| [i.base.clone(), i.base.clone(), i.base.clone()])
            .enumerate()
            .map(|(n, base)| {
                let (stop, seen) = (stop.clone(), seen.clone());
                let user = user.map_or(format!("u{n}"), str::to_string);
                std::thread::spawn(move || {
                    crate::fleet::block(async move {
                        let http = reqwest::Client::new();
                        while !stop.load(Ordering::Relaxed) {
                            let body = serde_json::json!({"model": "default", "user": user, "max_tokens": 8,
                                "messages": [{"role": "user", "content": "Where is order #38100?"}]});
                            let r = http
                                .post(format!("{base}/v1/chat/completions"))
                                .json(&body)
                                .send()
                                .await;
                            let answer = match r {
                                Ok(r) => Ok((r.status().as_u16(), r.text().await.unwrap_or_default())),
                                Err(e) => Err(e.to_string()),
                            };
                            if let Some(pause) = seen(answer) {
                                tokio::time::sleep(pause).await;
                            }
                        }
                    })
                })
            })
            .collect();
        Load { stop, callers }
    }

    /// Stops the callers once their calls in flight end.
    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for c in self.callers {
            c.join().unwrap();
        }
    }
}

/// Four instances on `url` under load through `failover`: no call fails,
/// every instance rejoins the promoted replica, and an operator action
/// given before holds, also on an instance started after.
fn through_a_failover(url: &str, f: Failover) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fleet.toml");
    std::fs::write(&cfg, NO_BUDGETS).unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    let instances = four(url, &cfg);
    let forced = r#"{"action":"force_open","target":"model:deepseek-chat"}"#;
    assert_eq!(instances[0].command(forced), 200);
    wait_until("the action applied everywhere", || {
        instances.iter().all(|i| i.metric(FORCED) == Some(1.0))
    });
    wait_until("the action replicated", f.replicated);

    // Load on every instance, every call's answer kept.
    let served = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let load = Load::start(&instances, None, {
        let (served, failed) = (served.clone(), failed.clone());
        move |answer| {
            match answer {
                Ok((200, _)) => {
                    served.fetch_add(1, Ordering::Relaxed);
                }
                Ok((status, body)) => failed.lock().unwrap().push(format!("{status} {body}")),
                Err(e) => failed.lock().unwrap().push(e),
            }
            None
        }
    });
    let at_least = |n: u64| {
        let from = served.load(Ordering::Relaxed);
        wait_until("calls answered", || served.load(Ordering::Relaxed) >= from + n);
    };
    at_least(40);

    (f.failing.kill)();
    let took = wait_until("a replica promoted", f.failing.promoted);
    eprintln!("the replica was promoted {took:?} after the primary died");
    wait_until("every instance on the new primary", || {
        rejoined(&instances) && (f.live)() == 4
    });
    at_least(40);
    load.stop();
    let failed = failed.lock().unwrap();
    eprintln!(
        "{} calls answered, {} failed",
        served.load(Ordering::Relaxed),
        failed.len()
    );
    assert!(failed.is_empty(), "calls failed through the failover: {failed:?}");

    assert!(instances.iter().all(|i| i.metric(FORCED) == Some(1.0)));
    let fifth = Instance::start_with(url, &["--config", &cfg]);
    wait_until("the stored action applied by a new instance", || {
        fifth.metric(FORCED) == Some(1.0)
    });
    wait_until("five live instances on the new primary", || {
        fifth.metric("fusebox_fleet_instances") == Some(5.0)
    });
}

/// A primary, its replica and three Sentinels watching it as `fleet`, and
/// the URL naming them; None without redis-server.
fn sentinel_managed() -> Option<(Redis, Redis, Vec<Sentinel>, String)> {
    let primary = Redis::start()?;
    let replica = Redis::start_with(free_port(), &["--replicaof", "127.0.0.1", &primary.port.to_string()])?;
    wait_until("the replica in sync", || {
        query::<String>(replica.port, redis::cmd("INFO").arg("replication"))
            .is_ok_and(|i| i.contains("master_link_status:up"))
    });
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start("fleet", primary.port, 2)).collect();
    let sentinel = |s: &Sentinel, what: &str| -> usize {
        query::<Vec<redis::Value>>(s.port, redis::cmd("SENTINEL").arg(what).arg("fleet")).map_or(0, |v| v.len())
    };
    wait_until("the Sentinels know the replica and each other", || {
        sentinels
            .iter()
            .all(|s| sentinel(s, "replicas") == 1 && sentinel(s, "sentinels") == 2)
    });
    let url = format!(
        "redis+sentinel://{}/fleet/0",
        sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect::<Vec<_>>()
            .join(",")
    );
    Some((primary, replica, sentinels, url))
}

/// The port of the primary the Sentinel at `port` names for `fleet`.
fn primary_named(port: u16) -> Option<u16> {
    let addr: Vec<String> = query(port, redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg("fleet")).ok()?;
    addr.get(1)?.parse().ok()
}

/// Four instances on `url` spending carol's minute budget of 2,500
/// tokens, through `f` part-way: at most the budget of each minute window
/// the run touched is admitted (and a tenth for what calls used beyond
/// what they reserved).
fn a_users_budget_through(url: &str, f: Failing) {
    const BUDGET: f64 = 2_500.0;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fleet.toml");
    std::fs::write(&cfg, format!("[budgets]\nuser_tokens_per_minute = {BUDGET}\n")).unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    let instances = four(url, &cfg);
    let minute = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 60
    };
    let first = minute();
    let (answered, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let load = Load::start(&instances, Some("carol"), {
        let (answered, refused) = (answered.clone(), refused.clone());
        move |answer| match answer.map(|a| a.0) {
            Ok(200) => {
                answered.fetch_add(1, Ordering::Relaxed);
                None
            }
            // Paced once refused: refusals are not what is measured.
            Ok(429) => {
                refused.fetch_add(1, Ordering::Relaxed);
                Some(Duration::from_millis(50))
            }
            other => panic!("unexpected {other:?}"),
        }
    });
    wait_until("a share of the budget spent", || answered.load(Ordering::Relaxed) >= 20);
    (f.kill)();
    wait_until("a replica promoted", f.promoted);
    wait_until("every instance on the new primary", || rejoined(&instances));
    wait_until("the budget spent", || refused.load(Ordering::Relaxed) >= 40);
    load.stop();
    let windows = minute() - first + 1;
    let spent = sum(&instances, "fusebox_tokens_total");
    let allowed = BUDGET * windows as f64;
    eprintln!(
        "carol: {} answered, {} refused; {spent} tokens over {windows} minute window(s) of {BUDGET}: {:.2}× the budget",
        answered.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        spent / allowed
    );
    assert!(spent <= allowed * 1.1, "spent {spent} of {allowed}");
}

/// Four instances on `url` whose openai answers 503 to seven calls in ten
/// (under its breaker's threshold, `examples/fleet-retries.toml`), under
/// load through `f`: the fleet's retries from the kill to a window after
/// every instance is back on the new primary, against the shared budget
/// over that span (floor and ratio of the requests), and the bound
/// `docs/overload.md` states: three more instances' floors over the time
/// they decided alone and a window. The same span before the kill, with
/// the store up, for comparison.
fn retries_through(url: &str, f: Failing) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fleet.toml");
    let retries = include_str!("../../examples/fleet-retries.toml");
    std::fs::write(&cfg, format!("{retries}\n{NO_BUDGETS}")).unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    let instances = four(url, &cfg);
    let fault = r#"{"action":"set_fault","target":"provider:openai","fault":{"fault":{"type":"status","code":503},"rate":0.7}}"#;
    for i in &instances {
        assert_eq!(i.command(fault), 200);
    }
    let failed = Arc::new(AtomicU64::new(0));
    let load = Load::start(&instances, None, {
        let failed = failed.clone();
        move |answer| {
            if !matches!(answer, Ok((200, _))) {
                failed.fetch_add(1, Ordering::Relaxed);
            }
            None
        }
    });
    // Retries of provider calls, and requests ended, of all four.
    let tally = || {
        (
            sum(&instances, "fusebox_retries_total{target=\"provider:"),
            sum(&instances, "fusebox_requests_total{"),
        )
    };
    const WINDOW: Duration = Duration::from_secs(10);
    let (floor_s, ratio) = (2.0, 0.1);
    // What the shared budget hands out over `span` with `requests` in it
    // at a steady state, and at most (its sliding window starting full).
    let steady = |span: Duration, requests: f64| floor_s * span.as_secs_f64() + ratio * requests;
    let at_most = |span: Duration, requests: f64| steady(span + WINDOW, requests);
    // The store up: a window for the budget to fill, a window measured.
    let a = tally();
    std::thread::sleep(WINDOW);
    let b = tally();
    std::thread::sleep(WINDOW);
    let c = tally();
    let calm = c.0 - b.0;
    let (calm_steady, calm_most) = (steady(WINDOW, c.1 - b.1), at_most(WINDOW, c.1 - a.1));

    let killed = std::time::Instant::now();
    (f.kill)();
    wait_until("a replica promoted", f.promoted);
    wait_until("every instance on the new primary", || rejoined(&instances));
    let alone = killed.elapsed();
    std::thread::sleep(WINDOW);
    let end = tally();
    let span = killed.elapsed();
    load.stop();
    let through = end.0 - c.0;
    let (shared, most) = (steady(span, end.1 - c.1), at_most(span, end.1 - b.1));
    let bound = most + 3.0 * floor_s * (alone + WINDOW).as_secs_f64();
    eprintln!(
        "store up: {calm} retries in {WINDOW:?}, {:.2}× the budget's {calm_steady:.0}; through the failover (instances alone for at most {alone:.1?}): {through} retries in {span:.1?}, {:.2}× the budget's {shared:.0} (at most {most:.0}; bound {bound:.0}); {} calls not answered 200",
        calm / calm_steady,
        through / shared,
        failed.load(Ordering::Relaxed)
    );
    assert!(
        calm <= calm_most,
        "{calm} retries with the store up against {calm_most}"
    );
    assert!(
        through <= bound,
        "{through} retries through the failover against {bound}"
    );
}

/// Runs `test` on a Sentinel-managed store (primary, replica, three
/// Sentinels) with its URL, its primary's failing and the replica's port.
fn with_sentinels(test: impl FnOnce(&str, Failing, u16)) {
    let Some((mut primary, replica, sentinels, url)) = sentinel_managed() else {
        return;
    };
    let promoted = || sentinels.iter().all(|s| primary_named(s.port) == Some(replica.port));
    let failing = Failing {
        kill: &mut || primary.stop(),
        promoted: &promoted,
    };
    test(&url, failing, replica.port);
}

/// Runs `test` on a cluster of three primaries with a replica each, with
/// its URL, the failing of the primary serving `key`, that primary's
/// replica and the cluster.
fn with_a_cluster(key: &str, test: impl FnOnce(&str, Failing, u16, &RefCell<Cluster>)) {
    let Some(cluster) = Cluster::start(3) else { return };
    let url = cluster.url();
    let (primary, replica) = cluster.serving(key).expect("a primary with a replica");
    let cluster = RefCell::new(cluster);
    let failing = Failing {
        kill: &mut || cluster.borrow_mut().kill(primary),
        promoted: &|| cluster.borrow().serving(key).map(|s| s.0) == Some(replica),
    };
    test(&url, failing, replica, &cluster);
}

#[test]
fn four_instances_keep_serving_while_their_sentinel_managed_redis_fails_over() {
    with_sentinels(|url, failing, replica| {
        let live =
            || query::<Vec<String>>(replica, redis::cmd("KEYS").arg("fusebox:instance:*")).map_or(0, |k| k.len());
        through_a_failover(
            url,
            Failover {
                failing,
                replicated: &|| replica_holds(replica, "fusebox:op:*"),
                live: &live,
            },
        );
    });
}

/// The primary holding the index of stored actions dies.
#[test]
fn four_instances_keep_serving_while_a_redis_cluster_fails_a_primary_over() {
    let key = "fusebox:index:actions";
    with_a_cluster(key, |url, failing, replica, cluster| {
        // Heartbeats the index names that are still there.
        let live = || {
            let nodes: Vec<String> = (cluster.borrow().nodes.iter())
                .map(|n| format!("redis://127.0.0.1:{}", n.port))
                .collect();
            let client = redis::cluster::ClusterClient::new(nodes).unwrap();
            let Ok(mut conn) = client.get_connection() else {
                return 0;
            };
            let ids: Vec<String> = redis::cmd("SMEMBERS")
                .arg("fusebox:index:instances")
                .query(&mut conn)
                .unwrap_or_default();
            ids.iter()
                .filter(|k| redis::cmd("EXISTS").arg(*k).query::<bool>(&mut conn).unwrap_or(false))
                .count()
        };
        through_a_failover(
            url,
            Failover {
                failing,
                replicated: &|| replica_holds(replica, key),
                live: &live,
            },
        );
    });
}

/// One user's minute budget, spent from four instances while the primary
/// fails over part-way through it: each instance then keeps to its share
/// less what the store had granted it and counts what it granted itself
/// into the store on its return, so the fleet admits the budget, not the
/// budget again.
#[test]
fn a_users_budget_holds_through_a_sentinel_failover() {
    with_sentinels(|url, failing, _| a_users_budget_through(url, failing));
}

/// The same on a cluster, the primary holding the user's budget dying.
#[test]
fn a_users_budget_holds_through_a_cluster_failover() {
    with_a_cluster("fusebox:{user:carol}:tokens", |url, failing, _, _| {
        a_users_budget_through(url, failing)
    });
}

/// The fleet's retry budget through a Sentinel failover.
#[test]
fn the_retry_budget_holds_through_a_sentinel_failover() {
    with_sentinels(|url, failing, _| retries_through(url, failing));
}

/// The same on a cluster, the primary holding the retry budget dying.
#[test]
fn the_retry_budget_holds_through_a_cluster_failover() {
    with_a_cluster("fusebox:retry-budget", |url, failing, _, _| {
        retries_through(url, failing)
    });
}
