//! A fleet whose Redis fails over: a primary, a replica and three
//! Sentinels (real `redis-server`s on loopback), four `fusebox serve`
//! instances on `redis+sentinel://…` under load; the primary is killed and
//! the Sentinels promote the replica. Skipped, with a notice, without
//! redis-server (unless FUSEBOX_REQUIRE_REDIS is set, as in CI).

use crate::common::redis::{free_port, wait_until, Redis, Sentinel};
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

/// The port of the primary the Sentinel at `port` names for `fleet`.
fn primary_named(port: u16) -> Option<u16> {
    let addr: Vec<String> = query(port, redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg("fleet")).ok()?;
    addr.get(1)?.parse().ok()
}

const FORCED: &str = "fusebox_breaker_state{target=\"model:deepseek-chat\",state=\"forced_open\"}";

#[test]
fn four_instances_keep_serving_while_their_sentinel_managed_redis_fails_over() {
    let Some(mut primary) = Redis::start() else { return };
    let replica = Redis::start_with(free_port(), &["--replicaof", "127.0.0.1", &primary.port.to_string()]).unwrap();
    wait_until("the replica in sync", || {
        query::<String>(replica.port, redis::cmd("INFO").arg("replication"))
            .is_ok_and(|i| i.contains("master_link_status:up"))
    });
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start("fleet", primary.port, 2)).collect();
    wait_until("the Sentinels know the replica and each other", || {
        sentinels.iter().all(|s| {
            let replicas: redis::RedisResult<Vec<redis::Value>> =
                query(s.port, redis::cmd("SENTINEL").arg("replicas").arg("fleet"));
            let others: redis::RedisResult<Vec<redis::Value>> =
                query(s.port, redis::cmd("SENTINEL").arg("sentinels").arg("fleet"));
            replicas.is_ok_and(|r| r.len() == 1) && others.is_ok_and(|o| o.len() == 2)
        })
    });
    let url = format!(
        "redis+sentinel://{}/fleet/0",
        sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect::<Vec<_>>()
            .join(",")
    );
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("fleet.toml");
    // Budgets out of the way: this test counts failures, not refusals.
    std::fs::write(
        &cfg,
        "[budgets]\nuser_tokens_per_minute = 0\nuser_tokens_per_hour = 0\nuser_tokens_per_day = 0\nuser_cost_per_day_usd = 0\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap().to_string();
    let instances: Vec<Instance> = (0..4)
        .map(|_| Instance::start_with(&url, &["--config", &cfg]))
        .collect();
    wait_until("four live instances", || {
        instances
            .iter()
            .all(|i| i.metric("fusebox_fleet_instances") == Some(4.0))
    });

    // An operator action before the failover, applied everywhere and
    // stored (on the replica too).
    let forced = r#"{"action":"force_open","target":"model:deepseek-chat"}"#;
    assert_eq!(instances[0].command(forced), 200);
    wait_until("the action applied everywhere", || {
        instances.iter().all(|i| i.metric(FORCED) == Some(1.0))
    });
    wait_until("the action replicated", || {
        query::<Vec<String>>(replica.port, redis::cmd("KEYS").arg("fusebox:op:*")).is_ok_and(|k| !k.is_empty())
    });

    // Load on every instance, each call's status counted.
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
                        let r = http
                            .post(format!("{base}/v1/chat/completions"))
                            .json(&body)
                            .send()
                            .await;
                        match r {
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

    // The primary dies; the Sentinels promote the replica.
    primary.stop();
    let took = wait_until("a replica promoted", || {
        sentinels.iter().all(|s| primary_named(s.port) == Some(replica.port))
    });
    eprintln!("the Sentinels promoted the replica {took:?} after the primary died");
    wait_until("every instance on the new primary", || {
        instances
            .iter()
            .all(|i| i.metric("fusebox_store_degraded") == Some(0.0))
            && query::<Vec<String>>(replica.port, redis::cmd("KEYS").arg("fusebox:instance:*"))
                .is_ok_and(|k| k.len() == 4)
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

    // The action still holds, also on an instance started after it.
    assert!(instances.iter().all(|i| i.metric(FORCED) == Some(1.0)));
    let fifth = Instance::start_with(&url, &["--config", &cfg]);
    wait_until("the stored action applied by a new instance", || {
        fifth.metric(FORCED) == Some(1.0)
    });
    wait_until("five live instances on the new primary", || {
        fifth.metric("fusebox_fleet_instances") == Some(5.0)
    });
}
