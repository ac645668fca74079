//! Open-loop overhead benchmark for the gateway: the same chat completion
//! sent at a fixed rate straight to a mock provider and through `fusebox
//! serve` (and, where given, LiteLLM's proxy) in alternating rounds, whole
//! or streamed, measuring time to first byte, whole-answer latency, the
//! gateway process's own CPU per request and how often the kernel preempted
//! it (a preempted proxy holds up the request it was serving: a tail).
//!
//! The mock provider is [`MockServer::instant`] (no artificial latency),
//! served from this process; the gateway runs as its own process (`fusebox
//! serve --headless`, the release binary), configured with one
//! OpenAI-compatible provider at the mock and limits raised so nothing is
//! refused, so its CPU time (from `/proc/PID/stat`) is its own. LiteLLM's
//! proxy, when `--litellm PATH` is given, is set up the same way (one model
//! at the mock) and measured in the same rounds as the side-by-side anchor.
//! `--bare PATH` (the `bare_proxy` example) adds the floor: a proxy with no
//! resilience, so fusebox's own cost is told apart from what the machine
//! charges any proxy for two sockets and two wake-ups per request.
//!
//! `--parsing` adds the second floor, `bare_proxy --parse`: the least any
//! gateway that reads what models answer must do (each streamed event
//! parsed as JSON, its usage counted, the bytes passed on as they came).
//!
//! `--instructions` counts instead of timing: each proxy runs under
//! callgrind, once sending a phase of requests and once idle as long after
//! the same warm-up, and the difference over the requests is its work for
//! each (background work of the idle time excluded), a figure the
//! machine's noise does not move. `--sequential` sends one request at a
//! time, each when the last has answered, in either mode.
//!
//! Each request is its own task spawned at its scheduled time (open loop);
//! latencies run from the scheduled send time (no coordinated omission), to
//! the first body bytes (TTFB) and to the end of the body. The overhead is
//! target minus direct, at p50 and p99, per round and as the median over
//! rounds. A gateway answer must be a 200 with `x-fusebox-level: none`;
//! anything else is counted and invalidates the figures.
//!
//! Run: `cargo build --profile dist && cargo run --profile dist --example
//! gateway_overhead -- --rps 1000 [--stream] [--bare PATH [--parsing]] [--litellm PATH]`
//! (options: `--secs 10 --rounds 3 --warmup 2 --fusebox target/dist/fusebox`);
//! instructions per request: `… -- --instructions --sequential --secs 20
//! --bare target/dist/examples/bare_proxy --parsing [--stream]`.

#[global_allocator]
static GLOBAL: fusebox::alloc::Mimalloc = fusebox::alloc::Mimalloc;

use clap::Parser;
use fusebox::clock::Seed;
use fusebox::mockserver::MockServer;
use futures_util::StreamExt;
use hdrhistogram::Histogram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The gateway's config: one provider at the mock, nothing refused at
/// thousands of requests a second.
fn fusebox_config(mock: &str) -> String {
    format!(
        r#"
[providers.openai]
kind = "openai-compatible"
base_url = "http://{mock}/v1"
api_key_env = "FUSEBOX_BENCH_KEY"
tpm = 1000000000
rpm = 10000000
[models.gpt-4o]
provider = "openai"
input_per_m = 2.5
output_per_m = 10.0
[routes.default]
chain = ["gpt-4o"]
[budgets]
user_tokens_per_minute = 100000000
user_tokens_per_hour = 100000000
user_tokens_per_day = 1000000000
user_cost_per_day_usd = 100000.0
global_tokens_per_hour = 100000000000
global_tokens_per_day = 100000000000
global_cost_per_hour_usd = 100000000.0
global_cost_per_day_usd = 100000000.0
# Every request is user (and session) `anonymous`: lift the per-session caps.
[sessions]
max_concurrent = 1000000
max_steps = 4000000000
max_tokens = 1000000000000
"#
    )
}

fn litellm_config(mock: &str) -> String {
    format!(
        "model_list:\n  - model_name: gpt-4o\n    litellm_params:\n      model: openai/gpt-4o\n      api_base: http://{mock}/v1\n      api_key: mock-key\n"
    )
}

fn body(stream: bool) -> String {
    format!(
        r#"{{"model":"gpt-4o","messages":[{{"role":"user","content":"Where is order #38100?"}}],"max_tokens":64,"stream":{stream}}}"#
    )
}

#[derive(Parser)]
struct Args {
    /// Requests per second (fixed arrival rate).
    #[arg(long, default_value_t = 1000)]
    rps: u32,
    /// Stream the answers.
    #[arg(long)]
    stream: bool,
    /// Seconds per measured phase.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Rounds (each: one phase per target).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Warm-up seconds per target (not measured).
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// The fusebox binary to run as the gateway.
    #[arg(long, default_value = "target/dist/fusebox")]
    fusebox: PathBuf,
    /// Threads fusebox serves on (its `serve --threads`; by default half
    /// the cores: on two, one current-thread runtime, as the floors run).
    #[arg(long)]
    fusebox_threads: Option<usize>,
    /// LiteLLM's `litellm` executable, to measure its proxy alongside.
    #[arg(long)]
    litellm: Option<PathBuf>,
    /// The `bare_proxy` example, to measure the floor alongside: a proxy
    /// with no resilience, whose cost is what this machine charges any proxy.
    #[arg(long)]
    bare: Option<PathBuf>,
    /// Send exactly on the period instead of at a random point of each slot.
    #[arg(long)]
    no_jitter: bool,
    /// With `--bare`: measure the parsing floor too (`bare_proxy --parse`),
    /// which reads every answer and streamed event as JSON as any gateway
    /// that counts usage must.
    #[arg(long)]
    parsing: bool,
    /// One request at a time, each sent when the last has answered, for
    /// `--secs` (instead of `--rps` a second).
    #[arg(long)]
    sequential: bool,
    /// Count each proxy's instructions per request instead of timing it:
    /// each runs under callgrind (valgrind must be installed) twice, once
    /// sending a phase of requests and once idle as long, each after
    /// `--warmup` seconds of requests; the difference over the requests
    /// (those one warm-up sent beyond the other's counted) is its work for
    /// each,
    /// which the machine's noise does not move. Use a rate callgrind keeps
    /// up with (`--sequential`, or `--rps 50`).
    #[arg(long)]
    instructions: bool,
}

/// What is measured.
struct Target {
    name: &'static str,
    url: String,
    /// The process serving it, whose CPU time is counted.
    pid: Option<u32>,
    /// Its answers must say `x-fusebox-level: none`.
    fusebox: bool,
}

/// One phase's latencies (µs) and failures.
struct Phase {
    ttfb: Histogram<u64>,
    whole: Histogram<u64>,
    /// Scheduled send time to task start: the sender's own lag (µs).
    lag: Histogram<u64>,
    failed: u64,
    first_failure: Option<String>,
    /// What the serving process used over the phase, when known.
    used: Option<Used>,
    /// How long it ran, from the first send to the last answer.
    took: Duration,
}

impl Phase {
    fn ms(h: &Histogram<u64>, q: f64) -> f64 {
        h.value_at_quantile(q) as f64 / 1000.0
    }

    fn line(&self, name: &str) -> String {
        let n = self.whole.len() as f64;
        let cpu = match self.used {
            Some(u) if n > 0.0 => format!(
                "  cpu {:6.1} µs/req  preempted {:.2}/req",
                u.cpu_us as f64 / n,
                u.preempted as f64 / n
            ),
            _ => String::new(),
        };
        format!(
            "{name:<8} ttfb p50 {:7.3} p99 {:7.3}  whole p50 {:7.3} p99 {:7.3} ms  n {:6}  (send lag p99 {:.3} ms){cpu}  failed {}",
            Self::ms(&self.ttfb, 0.5),
            Self::ms(&self.ttfb, 0.99),
            Self::ms(&self.whole, 0.5),
            Self::ms(&self.whole, 0.99),
            self.whole.len(),
            Self::ms(&self.lag, 0.99),
            self.failed,
        ) + &self.first_failure.as_ref().map(|f| format!("\n           first failure: {f}")).unwrap_or_default()
    }
}

enum Outcome {
    Ok {
        ttfb: Duration,
        whole: Duration,
        lag: Duration,
    },
    Failed(String),
}

async fn one(client: reqwest::Client, url: String, body: String, fusebox: bool, id: u64, due: Instant) -> Outcome {
    let lag = due.elapsed();
    let resp = client
        .post(&url)
        .header("content-type", "application/json")
        // What the gateway's provider client sends upstream (others ignore it).
        .bearer_auth("mock-key")
        .header("x-fusebox-request", id.to_string())
        .timeout(Duration::from_secs(10))
        .body(body)
        .send()
        .await;
    let resp = match resp {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let status = resp.status().as_u16();
    let level = resp
        .headers()
        .get("x-fusebox-level")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut chunks = resp.bytes_stream();
    let mut ttfb = None;
    let mut head = Vec::new();
    while let Some(c) = chunks.next().await {
        match c {
            Ok(b) => {
                ttfb.get_or_insert_with(|| due.elapsed());
                if head.len() < 200 {
                    head.extend_from_slice(&b[..b.len().min(200)]);
                }
            }
            Err(e) => return Outcome::Failed(e.to_string()),
        }
    }
    let whole = due.elapsed();
    if status != 200 || (fusebox && level.as_deref() != Some("none")) {
        return Outcome::Failed(format!(
            "HTTP {status}, level {level:?}: {}",
            String::from_utf8_lossy(&head)
        ));
    }
    Outcome::Ok {
        ttfb: ttfb.unwrap_or(whole),
        whole,
        lag,
    }
}

/// What a serving process has used so far.
#[derive(Clone, Copy)]
struct Used {
    /// CPU time, user and system (µs).
    cpu_us: u64,
    /// Times the kernel took the CPU from one of its threads while it could
    /// still run (involuntary context switches): each may hold up a request
    /// that thread was serving, one of the things a tail is made of.
    preempted: u64,
}

impl Used {
    /// Process `pid`'s use so far (its threads' preemptions summed).
    fn of(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces) in parentheses.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        let preempted = std::fs::read_dir(format!("/proc/{pid}/task"))
            .ok()?
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
            .filter_map(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("nonvoluntary_ctxt_switches:"))?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        // Linux reports 100 ticks a second to user space.
        Some(Self {
            cpu_us: ticks * 10_000,
            preempted,
        })
    }

    fn since(self, before: Self) -> Self {
        Self {
            cpu_us: self.cpu_us.saturating_sub(before.cpu_us),
            preempted: self.preempted.saturating_sub(before.preempted),
        }
    }
}

/// Sends `rps` requests per second to `t` for `secs` seconds, one task per
/// request spawned at its due time, and waits for all of them.
///
/// Request `i` is due at a random point of its slot `[i, i+1) / rps` (unless
/// `no_jitter`), so that arrivals do not alias with tokio's 1 ms timer ticks.
/// The pacing runs on a blocking-pool thread with `std::thread::sleep` (tens
/// of µs late), not on tokio's timer, whose ticks would add up to 2 ms of
/// send lag that varies between phases.
async fn phase(client: &reqwest::Client, t: &Target, args: &Args, secs: u64, first_id: u64) -> Phase {
    let started = Instant::now();
    let before = t.pid.and_then(Used::of);
    let outcomes = if args.sequential {
        sequential(client, t, args, secs, first_id).await
    } else {
        paced(client, t, args, secs, first_id).await
    };
    let hist = || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut p = Phase {
        ttfb: hist(),
        whole: hist(),
        lag: hist(),
        failed: 0,
        first_failure: None,
        used: None,
        took: Duration::ZERO,
    };
    for o in outcomes {
        match o {
            Outcome::Ok { ttfb, whole, lag } => {
                p.ttfb.saturating_record(ttfb.as_micros() as u64);
                p.whole.saturating_record(whole.as_micros() as u64);
                p.lag.saturating_record(lag.as_micros() as u64);
            }
            Outcome::Failed(f) => {
                p.failed += 1;
                p.first_failure.get_or_insert(f);
            }
        }
    }
    p.used = match (before, t.pid.and_then(Used::of)) {
        (Some(a), Some(b)) => Some(b.since(a)),
        _ => None,
    };
    p.took = started.elapsed();
    p
}

/// One request after another to `t` for `secs` seconds.
async fn sequential(client: &reqwest::Client, t: &Target, args: &Args, secs: u64, first_id: u64) -> Vec<Outcome> {
    let start = Instant::now();
    let mut out = Vec::new();
    while start.elapsed() < Duration::from_secs(secs) {
        let id = first_id + out.len() as u64;
        out.push(
            one(
                client.clone(),
                t.url.clone(),
                body(args.stream),
                t.fusebox,
                id,
                Instant::now(),
            )
            .await,
        );
    }
    out
}

/// `rps` requests a second to `t` for `secs` seconds (see [`phase`]).
async fn paced(client: &reqwest::Client, t: &Target, args: &Args, secs: u64, first_id: u64) -> Vec<Outcome> {
    let n = args.rps as u64 * secs;
    let period = Duration::from_secs(1) / args.rps;
    let jitter = !args.no_jitter;
    let (client, url, fusebox, rt) = (
        client.clone(),
        t.url.clone(),
        t.fusebox,
        tokio::runtime::Handle::current(),
    );
    let body = body(args.stream);
    let tasks = tokio::task::spawn_blocking(move || {
        let mut rng = fastrand::Rng::with_seed(first_id);
        let start = Instant::now();
        (0..n)
            .map(|i| {
                let slot = if jitter { rng.f64() } else { 0.0 };
                let due = start + period.mul_f64(i as f64 + slot);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                rt.spawn(one(
                    client.clone(),
                    url.clone(),
                    body.clone(),
                    fusebox,
                    first_id + i,
                    due,
                ))
            })
            .collect::<Vec<_>>()
    })
    .await
    .expect("pacer panicked");
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await.expect("request task panicked"));
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A free loopback port.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A child process: asked to stop on drop (SIGTERM, so that one run under
/// callgrind writes its counts), killed if it lingers.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        for _ in 0..600 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50)); // its exit
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `url` answers 200.
async fn ready(client: &reqwest::Client, what: &str, url: &str, within: Duration) -> anyhow::Result<()> {
    let start = Instant::now();
    while start.elapsed() < within {
        if client.get(url).send().await.is_ok_and(|r| r.status().is_success()) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!("{what} did not come up at {url} within {within:?}")
}

/// The proxies this harness starts and measures.
#[derive(Clone, Copy, PartialEq)]
enum Proxy {
    Fusebox,
    Bare,
    Parsing,
    Litellm,
}

impl Proxy {
    fn name(self) -> &'static str {
        match self {
            Proxy::Fusebox => "fusebox",
            Proxy::Bare => "bare",
            Proxy::Parsing => "parsing",
            Proxy::Litellm => "litellm",
        }
    }

    /// The ones `args` asks for.
    fn asked(args: &Args) -> Vec<Proxy> {
        let mut out = vec![Proxy::Fusebox];
        if args.bare.is_some() {
            out.push(Proxy::Bare);
            if args.parsing {
                out.push(Proxy::Parsing);
            }
        }
        if args.litellm.is_some() {
            out.push(Proxy::Litellm);
        }
        out
    }
}

/// What every proxy is started with: the mock it forwards to, fusebox's
/// config (whose `base_url` the floors read) and a directory of its own.
struct Setup {
    mock: String,
    config: PathBuf,
    dir: PathBuf,
}

impl Setup {
    /// Starts `proxy` (its output discarded; under callgrind, logging to
    /// `callgrind_log`), waits until it is up, and says where to reach it;
    /// the process stops when the returned value drops.
    async fn start(
        &self,
        proxy: Proxy,
        args: &Args,
        client: &reqwest::Client,
        callgrind_log: Option<&std::path::Path>,
    ) -> anyhow::Result<(Server, Target)> {
        let port = free_port()?;
        let listen = format!("127.0.0.1:{port}");
        let (mut cmd, hint, health, within) = match proxy {
            Proxy::Fusebox => {
                let mut cmd = Command::new(&args.fusebox);
                cmd.args(["serve", "--headless", "--listen", &listen, "--config"])
                    .arg(&self.config)
                    .env("FUSEBOX_LOG_DIR", &self.dir)
                    .env("FUSEBOX_BENCH_KEY", "mock-key");
                if let Some(n) = args.fusebox_threads {
                    cmd.arg("--threads").arg(n.to_string());
                }
                (cmd, " (build it: cargo build --profile dist)", "/healthz", 20)
            }
            Proxy::Bare | Proxy::Parsing => {
                let bin = args.bare.as_ref().expect("a floor is measured only with --bare");
                let mut cmd = Command::new(bin);
                cmd.args(["--listen", &listen, "--config"]).arg(&self.config);
                if proxy == Proxy::Parsing {
                    cmd.arg("--parse");
                }
                (
                    cmd,
                    " (build it: cargo build --profile dist --examples)",
                    "/healthz",
                    20,
                )
            }
            Proxy::Litellm => {
                let cfg = self.dir.join("litellm.yaml");
                std::fs::write(&cfg, litellm_config(&self.mock))?;
                let mut cmd = Command::new(args.litellm.as_ref().expect("litellm is measured only with --litellm"));
                cmd.args([
                    "--port",
                    &port.to_string(),
                    "--host",
                    "127.0.0.1",
                    "--num_workers",
                    "1",
                    "--config",
                ])
                .arg(&cfg)
                .env("LITELLM_LOG", "ERROR")
                .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                // Loopback only: it refuses to start without a master key otherwise.
                .env("LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY", "true");
                (cmd, "", "/health/liveliness", 120)
            }
        };
        let mut within = Duration::from_secs(within);
        if let Some(log) = callgrind_log {
            cmd = under_callgrind(&cmd, log);
            within *= 10;
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot start {}: {e}{hint}", cmd.get_program().to_string_lossy()))?;
        let server = Server(child);
        let base = format!("http://{listen}");
        ready(client, proxy.name(), &format!("{base}{health}"), within).await?;
        let target = Target {
            name: proxy.name(),
            url: format!("{base}/v1/chat/completions"),
            pid: Some(server.0.id()),
            fusebox: proxy != Proxy::Litellm,
        };
        Ok((server, target))
    }
}

/// `cmd` run under callgrind, its summary in `log`.
fn under_callgrind(cmd: &Command, log: &std::path::Path) -> Command {
    let mut v = Command::new("valgrind");
    v.arg("--tool=callgrind")
        .arg("--callgrind-out-file=/dev/null")
        .arg(format!("--log-file={}", log.display()))
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, val) in cmd.get_envs() {
        if let Some(val) = val {
            v.env(k, val);
        }
    }
    v
}

/// The instructions callgrind counted in the run that logged to `log`.
fn collected(log: &std::path::Path) -> anyhow::Result<u64> {
    let text = std::fs::read_to_string(log)?;
    text.lines()
        .find_map(|l| l.split("Collected :").nth(1)?.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("{}: no \"Collected :\" line (did callgrind run?)", log.display()))
}

/// `--warmup` seconds of requests, if any: how many were sent.
async fn warm_up(client: &reqwest::Client, t: &Target, args: &Args, first_id: u64) -> u64 {
    if args.warmup == 0 {
        return 0;
    }
    let w = phase(client, t, args, args.warmup, first_id).await;
    w.whole.len() + w.failed
}

/// Stops `server` and waits for its exit, off the runtime.
async fn stop(server: Server) {
    let _ = tokio::task::spawn_blocking(move || drop(server)).await;
}

/// `--instructions`: each proxy's instructions per request, and fusebox's
/// over each floor's.
async fn instructions(setup: &Setup, args: &Args, client: &reqwest::Client) -> anyhow::Result<()> {
    println!(
        "gateway_overhead --instructions: {}, {} after {} s warm-up, under callgrind",
        if args.stream { "streamed" } else { "whole answers" },
        if args.sequential {
            format!("one request at a time for {} s", args.secs)
        } else {
            format!("{} req/s for {} s", args.rps, args.secs)
        },
        args.warmup
    );
    let mut per = Vec::new();
    for proxy in Proxy::asked(args).into_iter().filter(|p| *p != Proxy::Litellm) {
        let name = proxy.name();
        // Sending, then idle as long: what differs is the requests' work.
        let log = setup.dir.join(format!("{name}.sending.callgrind.log"));
        let (server, t) = setup.start(proxy, args, client, Some(&log)).await?;
        let warm = warm_up(client, &t, args, 1 << 40).await;
        let p = phase(client, &t, args, args.secs, 2 << 40).await;
        stop(server).await;
        anyhow::ensure!(
            p.failed == 0,
            "{name}: {} requests failed under callgrind ({:?}); try a lower --rps",
            p.failed,
            p.first_failure
        );
        let sending = collected(&log)?;
        let log = setup.dir.join(format!("{name}.idle.callgrind.log"));
        let (server, t) = setup.start(proxy, args, client, Some(&log)).await?;
        let idle_warm = warm_up(client, &t, args, 3 << 40).await;
        tokio::time::sleep(p.took).await;
        stop(server).await;
        let idle = collected(&log)?;
        // Both runs warm up for as long, not for as many requests: those
        // the sending run's warm-up sent more are counted with its own.
        let n = (p.whole.len() + warm).saturating_sub(idle_warm);
        let each = sending.saturating_sub(idle) as f64 / n.max(1) as f64;
        println!(
            "  {name:<8} {each:9.0} instructions a request ({} requests in {:.1} s, {warm} and {idle_warm} in the warm-ups)",
            p.whole.len(),
            p.took.as_secs_f64()
        );
        per.push((proxy, each));
    }
    let of = |proxy| per.iter().find(|(p, _)| *p == proxy).map(|(_, i)| *i);
    if let Some(f) = of(Proxy::Fusebox) {
        for floor in [Proxy::Bare, Proxy::Parsing] {
            if let Some(b) = of(floor) {
                println!("  fusebox / {}: {:.2}×", floor.name(), f / b);
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.rps > 0 && args.secs > 0 && args.rounds > 0,
        "--rps, --secs and --rounds must be positive"
    );
    let dir = tempfile::tempdir()?;
    let client = reqwest::Client::new();
    let mock = MockServer::instant(Seed(1), Default::default())
        .spawn("127.0.0.1:0")
        .await?;
    let cfg = dir.path().join("fusebox.toml");
    std::fs::write(&cfg, fusebox_config(&mock.to_string()))?;
    let setup = Setup {
        mock: mock.to_string(),
        config: cfg,
        dir: dir.path().to_path_buf(),
    };
    if args.instructions {
        return instructions(&setup, &args, &client).await;
    }
    let mut targets = vec![Target {
        name: "direct",
        url: format!("http://{mock}/v1/chat/completions"),
        pid: None,
        fusebox: false,
    }];
    let mut servers = Vec::new();
    for proxy in Proxy::asked(&args) {
        let (server, target) = setup.start(proxy, &args, &client, None).await?;
        servers.push(server);
        targets.push(target);
    }

    println!(
        "gateway_overhead: {}, {}, {} round(s) of {} s per target after {} s warm-up; latency from scheduled send",
        if args.sequential {
            "one request at a time".to_string()
        } else {
            format!("{} req/s", args.rps)
        },
        if args.stream { "streamed" } else { "whole answers" },
        args.rounds,
        args.secs,
        args.warmup
    );
    let mut id = 1u64 << 40;
    if args.warmup > 0 {
        for t in &targets {
            let p = phase(&client, t, &args, args.warmup, id).await;
            id += 1 << 24;
            println!("warm-up  {}", p.line(t.name));
        }
    }
    // Per target: ttfb p50, ttfb p99, whole p50, whole p99, cpu µs/req,
    // preemptions a request.
    let mut figures: Vec<[Vec<f64>; 6]> = targets.iter().map(|_| Default::default()).collect();
    let mut failed = 0;
    for round in 1..=args.rounds {
        println!("round {round}");
        for (t, f) in targets.iter().zip(&mut figures) {
            let p = phase(&client, t, &args, args.secs, id).await;
            id += 1 << 24;
            println!("  {}", p.line(t.name));
            failed += p.failed;
            f[0].push(Phase::ms(&p.ttfb, 0.5));
            f[1].push(Phase::ms(&p.ttfb, 0.99));
            f[2].push(Phase::ms(&p.whole, 0.5));
            f[3].push(Phase::ms(&p.whole, 0.99));
            if let Some(u) = p.used.filter(|_| !p.whole.is_empty()) {
                f[4].push(u.cpu_us as f64 / p.whole.len() as f64);
                f[5].push(u.preempted as f64 / p.whole.len() as f64);
            }
        }
    }
    println!("median over {} round(s)", args.rounds);
    let med: Vec<[f64; 6]> = figures
        .into_iter()
        .map(|f| f.map(|v| if v.is_empty() { f64::NAN } else { median(v) }))
        .collect();
    for (t, m) in targets.iter().zip(&med) {
        let cpu = if m[4].is_nan() {
            String::new()
        } else {
            format!("  cpu {:.1} µs/req  preempted {:.2}/req", m[4], m[5])
        };
        println!(
            "  {:<8} ttfb p50 {:7.3} p99 {:7.3}  whole p50 {:7.3} p99 {:7.3} ms{cpu}",
            t.name, m[0], m[1], m[2], m[3]
        );
    }
    let d = &med[0];
    for (t, m) in targets.iter().zip(&med).skip(1) {
        println!(
            "  {} added: ttfb p50 {:+.3} p99 {:+.3}  whole p50 {:+.3} p99 {:+.3} ms",
            t.name,
            m[0] - d[0],
            m[1] - d[1],
            m[2] - d[2],
            m[3] - d[3]
        );
    }
    let by_name = |name| targets.iter().position(|t| t.name == name).map(|i| &med[i]);
    let f = &med[1];
    for floor in ["bare", "parsing"] {
        if let Some(b) = by_name(floor) {
            println!(
                "  fusebox − {floor} (its own work): whole p50 {:+.3} ms, p99 {:+.3} ms (added p99 {:.2}×), cpu {:+.1} µs/req ({:.2}×)",
                f[2] - b[2],
                f[3] - b[3],
                (f[3] - d[3]) / (b[3] - d[3]),
                f[4] - b[4],
                f[4] / b[4]
            );
        }
    }
    if let Some(l) = by_name("litellm") {
        println!(
            "  litellm / fusebox: added whole p50 {:.1}×, cpu per request {:.1}×",
            (l[2] - d[2]) / (f[2] - d[2]).max(1e-3),
            l[4] / f[4]
        );
    }
    println!(
        "failed requests in measured rounds: {failed}{}",
        if failed > 0 { " (figures invalid)" } else { "" }
    );
    Ok(())
}
