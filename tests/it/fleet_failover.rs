//! A fleet whose Redis fails over, with real `redis-server`s on loopback:
//! a primary, a replica and three Sentinels (`redis+sentinel://…`), and a
//! cluster of three primaries with a replica each (`redis+cluster://…`).
//! Four `fusebox serve` instances under load; a primary is killed and a
//! replica promoted. Skipped, with a notice, without redis-server (unless
//! FUSEBOX_REQUIRE_REDIS is set, as in CI).

use crate::common::redis::{free_port, wait_until, Cluster, Redis, Sentinel};
use crate::fleet::Instance;
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

/// How a store fails over, for [`through_a_failover`].
struct Failover<'a> {
    /// The action given before is on the replica that will be promoted.
    replicated: &'a dyn Fn() -> bool,
    /// Kills the primary.
    kill: &'a mut dyn FnMut(),
    /// The replica is the primary now.
    promoted: &'a dyn Fn() -> bool,
    /// Instances whose heartbeats the store holds now.
    live: &'a dyn Fn() -> usize,
}

/// Four instances on `url` under load through `failover`: no call fails,
/// every instance rejoins the promoted replica, and an operator action
/// given before holds, also on an instance started after.
fn through_a_failover(url: &str, f: Failover) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fleet.toml");
    // Budgets out of the way: this counts failures, not refusals.
    std::fs::write(
        &cfg,
        "[budgets]\nuser_tokens_per_minute = 0\nuser_tokens_per_hour = 0\nuser_tokens_per_day = 0\nuser_cost_per_day_usd = 0\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    let instances: Vec<Instance> = (0..4).map(|_| Instance::start_with(url, &["--config", &cfg])).collect();
    wait_until("four live instances", || {
        instances
            .iter()
            .all(|i| i.metric("fusebox_fleet_instances") == Some(4.0))
    });
    let forced = r#"{"action":"force_open","target":"model:deepseek-chat"}"#;
    assert_eq!(instances[0].command(forced), 200);
    wait_until("the action applied everywhere", || {
        instances.iter().all(|i| i.metric(FORCED) == Some(1.0))
    });
    wait_until("the action replicated", f.replicated);

    // Load on every instance, three callers each, every call's status kept.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let loads: Vec<_> = instances
        .iter()
        .flat_map(|i| [i.base.clone(), i.base.clone(), i.base.clone()])
        .enumerate()
        .map(|(n, base)| {
            let (stop, served) = (stop.clone(), served.clone());
            std::thread::spawn(move || {
                crate::fleet::block(async move {
                    let http = reqwest::Client::new();
                    let mut failed = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let body = serde_json::json!({"model": "default", "user": format!("u{n}"), "max_tokens": 8,
                            "messages": [{"role": "user", "content": "Where is order #38100?"}]});
                        match http
                            .post(format!("{base}/v1/chat/completions"))
                            .json(&body)
                            .send()
                            .await
                        {
                            Ok(r) if r.status() == 200 => {
                                served.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(r) => failed.push(format!("{} {}", r.status(), r.text().await.unwrap_or_default())),
                            Err(e) => failed.push(e.to_string()),
                        }
                    }
                    failed
                })
            })
        })
        .collect();
    let at_least = |n: u64| {
        let from = served.load(Ordering::Relaxed);
        wait_until("calls answered", || served.load(Ordering::Relaxed) >= from + n);
    };
    at_least(40);

    (f.kill)();
    let took = wait_until("a replica promoted", f.promoted);
    eprintln!("the replica was promoted {took:?} after the primary died");
    wait_until("every instance on the new primary", || {
        instances
            .iter()
            .all(|i| i.metric("fusebox_store_degraded") == Some(0.0))
            && (f.live)() == 4
    });
    at_least(40);
    stop.store(true, Ordering::Relaxed);
    let failed: Vec<String> = loads.into_iter().flat_map(|l| l.join().unwrap()).collect();
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

#[test]
fn four_instances_keep_serving_while_their_sentinel_managed_redis_fails_over() {
    let Some((mut primary, replica, sentinels, url)) = sentinel_managed() else {
        return;
    };
    through_a_failover(
        &url,
        Failover {
            replicated: &|| replica_holds(replica.port, "fusebox:op:*"),
            kill: &mut || primary.stop(),
            promoted: &|| sentinels.iter().all(|s| primary_named(s.port) == Some(replica.port)),
            live: &|| {
                query::<Vec<String>>(replica.port, redis::cmd("KEYS").arg("fusebox:instance:*")).map_or(0, |k| k.len())
            },
        },
    );
}

/// One user's minute budget, spent from four instances while the primary
/// fails over part-way through it: each instance then keeps to its share
/// less what the store had granted it, so the fleet admits about the
/// budget, not the budget again.
#[test]
fn a_users_budget_holds_through_a_failover() {
    let Some((mut primary, replica, sentinels, url)) = sentinel_managed() else {
        return;
    };
    const BUDGET: f64 = 2_500.0;
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fleet.toml");
    std::fs::write(&cfg, format!("[budgets]\nuser_tokens_per_minute = {BUDGET}\n")).unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    let instances: Vec<Instance> = (0..4)
        .map(|_| Instance::start_with(&url, &["--config", &cfg]))
        .collect();
    wait_until("four live instances", || {
        instances
            .iter()
            .all(|i| i.metric("fusebox_fleet_instances") == Some(4.0))
    });
    let minute = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 60
    };
    let first = minute();
    let stop = Arc::new(AtomicBool::new(false));
    let (answered, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let loads: Vec<_> = instances
        .iter()
        .flat_map(|i| [i.base.clone(), i.base.clone(), i.base.clone()])
        .map(|base| {
            let (stop, answered, refused) = (stop.clone(), answered.clone(), refused.clone());
            std::thread::spawn(move || {
                crate::fleet::block(async move {
                    let http = reqwest::Client::new();
                    while !stop.load(Ordering::Relaxed) {
                        let body = serde_json::json!({"model": "default", "user": "carol", "max_tokens": 8,
                            "messages": [{"role": "user", "content": "Where is order #38100?"}]});
                        let r = http
                            .post(format!("{base}/v1/chat/completions"))
                            .json(&body)
                            .send()
                            .await;
                        match r.map(|r| r.status().as_u16()) {
                            Ok(200) => {
                                answered.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(429) => {
                                refused.fetch_add(1, Ordering::Relaxed);
                                // Paced once refused: refusals are not what is measured.
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            other => panic!("unexpected {other:?}"),
                        }
                    }
                })
            })
        })
        .collect();
    wait_until("a share of the budget spent", || answered.load(Ordering::Relaxed) >= 20);
    primary.stop();
    wait_until("a replica promoted", || {
        sentinels.iter().all(|s| primary_named(s.port) == Some(replica.port))
    });
    wait_until("every instance on the new primary", || {
        instances
            .iter()
            .all(|i| i.metric("fusebox_store_degraded") == Some(0.0))
    });
    wait_until("the budget spent", || refused.load(Ordering::Relaxed) >= 40);
    stop.store(true, Ordering::Relaxed);
    for l in loads {
        l.join().unwrap();
    }
    let windows = minute() - first + 1;
    let spent: f64 = instances
        .iter()
        .map(|i| i.metric("fusebox_tokens_total").unwrap())
        .sum();
    let allowed = BUDGET * windows as f64;
    eprintln!(
        "carol: {} answered, {} refused; {spent} tokens over {windows} minute window(s) of {BUDGET}: {:.2}× the budget",
        answered.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        spent / allowed
    );
    assert!(spent <= allowed * 1.25, "spent {spent} of {allowed}");
}

#[test]
fn four_instances_keep_serving_while_a_redis_cluster_fails_a_primary_over() {
    let Some(cluster) = Cluster::start(3) else { return };
    let url = cluster.url();
    // The primary whose slot holds the index of stored actions dies.
    let (primary, replica) = cluster
        .serving("fusebox:index:actions")
        .expect("a primary with a replica");
    let live = |c: &Cluster| {
        let nodes: Vec<String> = c
            .nodes
            .iter()
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
    let cluster = std::cell::RefCell::new(cluster);
    through_a_failover(
        &url,
        Failover {
            replicated: &|| replica_holds(replica, "fusebox:index:actions"),
            kill: &mut || cluster.borrow_mut().kill(primary),
            promoted: &|| cluster.borrow().serving("fusebox:index:actions").map(|s| s.0) == Some(replica),
            live: &|| live(&cluster.borrow()),
        },
    );
}
