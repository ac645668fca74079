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
        let spawned = Command::new("redis-server")
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
        let r = Redis { child, port };
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
