//! A real `redis-server` for the fleet tests: started on a free loopback
//! port when the binary is on PATH, stopped on drop. Without it the tests
//! print a notice and pass, unless FUSEBOX_REQUIRE_REDIS is set (as
//! `.ci/run` does), where a missing server fails them.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server on a free loopback port, stopped on drop.
pub struct Redis {
    child: Child,
    pub port: u16,
    /// Its working directory: what a replica's sync or a cluster node
    /// writes lands here, not in the checkout.
    _dir: tempfile::TempDir,
}

impl Redis {
    /// Starts one, or None (with a notice) when redis-server is missing.
    pub fn start() -> Option<Redis> {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        Self::start_on(port)
    }

    pub fn start_on(port: u16) -> Option<Redis> {
        Self::start_with(port, &[])
    }

    /// Starts one on `port` with `extra` arguments (`--replicaof H P`, …).
    pub fn start_with(port: u16, extra: &[&str]) -> Option<Redis> {
        let dir = tempfile::tempdir().unwrap();
        let spawned = Command::new("redis-server")
            .current_dir(dir.path())
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(c) => c,
            Err(e) if std::env::var_os("FUSEBOX_REQUIRE_REDIS").is_some() => {
                panic!("FUSEBOX_REQUIRE_REDIS is set but redis-server cannot start: {e}")
            }
            Err(_) => {
                eprintln!("notice: redis-server is not on PATH; the Redis (fleet) tests were skipped");
                return None;
            }
        };
        let r = Redis { child, port, _dir: dir };
        wait_until("redis-server accepts connections", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Some(r)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A Redis Sentinel (`redis-server --sentinel`) watching the primary at
/// `primary` as `master`, stopped on drop.
pub struct Sentinel {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Sentinel {
    /// Starts one; `quorum` Sentinels must agree the primary is down, after
    /// it has not answered for a second.
    pub fn start(master: &str, primary: u16, quorum: u32) -> Sentinel {
        let port = free_port();
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {master} 127.0.0.1 {primary} {quorum}\n\
                 sentinel down-after-milliseconds {master} 1000\n\
                 sentinel failover-timeout {master} 3000\n\
                 sentinel parallel-syncs {master} 1\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .spawn()
            .expect("run redis-server --sentinel");
        let s = Sentinel { child, port, _dir: dir };
        wait_until("redis-sentinel accepts connections", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        s
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Redis Cluster of `masters` primaries, each with a replica, on
/// loopback; its servers stopped on drop.
pub struct Cluster {
    pub nodes: Vec<Redis>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts one, or None (with a notice) without redis-server; a node
    /// that stops answering for a second is failed over.
    pub fn start(masters: usize) -> Option<Cluster> {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        for _ in 0..masters * 2 {
            let port = free_port();
            let conf = dir.path().join(format!("nodes-{port}.conf"));
            let node = Redis::start_with(
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    conf.to_str().unwrap(),
                    "--cluster-node-timeout",
                    "1000",
                    "--repl-diskless-sync-delay",
                    "0",
                    "--dir",
                    dir.path().to_str().unwrap(),
                ],
            )?;
            nodes.push(node);
        }
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let made = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stdout));
        let c = Cluster { nodes, _dir: dir };
        wait_until("the cluster ok on every node", || {
            c.nodes.iter().all(|n| c.info(n.port).contains("cluster_state:ok"))
        });
        // A replica that has not synced yet is not promoted.
        wait_until("every node knowing every replica, each in sync", || {
            c.nodes.iter().all(|n| {
                let nodes = redis_cli(n.port, &["cluster", "nodes"]);
                let replication = redis_cli(n.port, &["info", "replication"]);
                nodes.lines().filter(|l| l.contains("slave")).count() == masters
                    && (replication.contains("role:master") || replication.contains("master_link_status:up"))
            })
        });
        Some(c)
    }

    /// `CLUSTER INFO` of the node at `port` ("" if it does not answer).
    pub fn info(&self, port: u16) -> String {
        redis_cli(port, &["cluster", "info"])
    }

    /// The node serving `key`'s slot as primary now, and its replica (None
    /// while no node serves it, or it has none).
    pub fn serving(&self, key: &str) -> Option<(u16, u16)> {
        let any = self.nodes.iter().find(|n| !self.info(n.port).is_empty()).unwrap().port;
        let slot: u32 = redis_cli(any, &["cluster", "keyslot", key]).trim().parse().unwrap();
        let nodes = redis_cli(any, &["cluster", "nodes"]);
        let port_of = |line: &str| -> u16 {
            let addr = line.split_whitespace().nth(1).unwrap();
            addr.split(['@', ':']).nth(1).unwrap().parse().unwrap()
        };
        let master = nodes.lines().find(|l| {
            l.contains("master")
                && !l.contains("fail")
                && l.split_whitespace().skip(8).any(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    (a.parse::<u32>().unwrap_or(u32::MAX)..=b.parse().unwrap_or(0)).contains(&slot)
                })
        })?;
        let id = master.split_whitespace().next().unwrap();
        let replica = nodes
            .lines()
            .find(|l| l.split_whitespace().nth(3) == Some(id) && !l.contains("fail"));
        Some((port_of(master), replica.map_or(0, port_of)))
    }

    /// Stops the node at `port`, as a crash would.
    pub fn kill(&mut self, port: u16) {
        self.nodes.iter_mut().find(|n| n.port == port).unwrap().stop();
    }

    /// `redis+cluster://` naming every node.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", nodes.join(","))
    }
}

/// What `redis-cli -p PORT ARGS…` prints ("" where it cannot run).
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Polls (real time, up to 10 s) for something other processes do.
pub fn wait_until(what: &str, cond: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if cond() {
            return start.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{what}: not within 10 s");
}
