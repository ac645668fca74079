//! Open-loop overhead benchmark for the OpenAI-compatible gateway.
//!
//! Sets up the gateway exactly as `fusebox serve` does (multi-thread runtime,
//! mimalloc, mock-kind providers answered over loopback HTTP by a mock server
//! sharing the runner's fault table, `maintain()` every second), except that
//! the mock server is [`MockServer::instant`] (no artificial latency) and the
//! budgets, rate limits and session caps are raised so that nothing is
//! refused. As in `fusebox serve`, the gateway calls the mock with
//! `stream: true` (the providers' default), so its upstream hop is SSE while
//! the direct request is a plain JSON completion; that is part of what the
//! overhead measures.
//!
//! It then sends a fixed arrival rate (open loop: one task per request,
//! spawned at its scheduled time, whatever the earlier ones are doing) of a
//! small non-streamed chat completion, alternately straight to the mock
//! server and through the gateway, for several rounds, so that machine noise
//! affects both targets alike. A request's latency runs from its *scheduled*
//! send time to the end of its body, so a stalled sender is not hidden
//! (no coordinated omission). The overhead is gateway minus direct, at p50
//! and p99, per round and as the median over rounds. Every gateway answer
//! must be a 200 with `x-fusebox-level: none`; other answers are counted and
//! invalidate the figures.
//!
//! Run: `cargo run --release --example gateway_overhead -- --rps 1000`
//! (options: `--secs 10 --rounds 3 --warmup 2 --no-jitter`).

#[global_allocator]
static GLOBAL: fusebox::alloc::Mimalloc = fusebox::alloc::Mimalloc;

use clap::Parser;
use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::gateway::GatewayOptions;
use fusebox::mockserver::MockServer;
use fusebox::runner::{Runner, RunnerParts};
use hdrhistogram::Histogram;
use std::time::{Duration, Instant};

/// Limits high enough that no request is refused at a few thousand req/s.
const CONFIG: &str = r#"
[providers.openai]
tpm = 1000000000
rpm = 10000000
[providers.anthropic]
itpm = 1000000000
otpm = 1000000000
rpm = 10000000
[providers.deepseek]
concurrency = 100000
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
"#;

const BODY: &str =
    r#"{"model":"gpt-4o","messages":[{"role":"user","content":"Where is order #38100?"}],"max_tokens":64}"#;

#[derive(Parser)]
struct Args {
    /// Requests per second (fixed arrival rate).
    #[arg(long, default_value_t = 1000)]
    rps: u32,
    /// Seconds per measured phase.
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Rounds (each: one direct phase, one gateway phase).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Warm-up seconds per target (not measured).
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// Send exactly on the period instead of at a random point of each slot.
    #[arg(long)]
    no_jitter: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Target {
    Direct,
    Gateway,
}

/// One phase's latencies (µs) and failures.
struct Phase {
    latency: Histogram<u64>,
    /// Scheduled send time to task start: the sender's own lag (µs).
    lag: Histogram<u64>,
    /// Transport errors and timeouts.
    errors: u64,
    /// Non-200 answers.
    non_200: u64,
    /// Gateway 200s whose `x-fusebox-level` is not `none`.
    not_none: u64,
    /// The first failure, for diagnosis.
    first_failure: Option<String>,
}

impl Phase {
    fn failures(&self) -> u64 {
        self.errors + self.non_200 + self.not_none
    }

    fn fail(&mut self, count: impl Fn(&mut Self) -> &mut u64, what: String) {
        *count(self) += 1;
        self.first_failure.get_or_insert(what);
    }

    fn ms(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1000.0
    }

    fn line(&self, name: &str) -> String {
        format!(
            "{name:<8} p50 {:7.3}  p90 {:7.3}  p99 {:7.3}  max {:8.3} ms  n {:6}  (send lag p50 {:.3} p99 {:.3} ms)  failed {} (transport {}, non-200 {}, level≠none {})",
            self.ms(0.5),
            self.ms(0.9),
            self.ms(0.99),
            self.latency.max() as f64 / 1000.0,
            self.latency.len(),
            self.lag.value_at_quantile(0.5) as f64 / 1000.0,
            self.lag.value_at_quantile(0.99) as f64 / 1000.0,
            self.failures(),
            self.errors,
            self.non_200,
            self.not_none,
        ) + &self.first_failure.as_ref().map(|f| format!("\n           first failure: {f}")).unwrap_or_default()
    }
}

enum Outcome {
    Ok { latency: Duration, lag: Duration },
    Transport(String),
    Status(String),
    Level(String),
}

async fn one(client: reqwest::Client, target: Target, url: String, id: u64, due: Instant) -> Outcome {
    let lag = due.elapsed();
    let mut b = client
        .post(&url)
        .header("content-type", "application/json")
        .timeout(Duration::from_secs(10))
        .body(BODY);
    if target == Target::Direct {
        // What the gateway's provider client sends upstream.
        b = b.bearer_auth("mock-key").header("x-fusebox-request", id.to_string());
    }
    let resp = match b.send().await {
        Ok(r) => r,
        Err(e) => return Outcome::Transport(e.to_string()),
    };
    let status = resp.status().as_u16();
    let level = resp
        .headers()
        .get("x-fusebox-level")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match resp.bytes().await {
        Ok(b) => b,
        Err(e) => return Outcome::Transport(e.to_string()),
    };
    let latency = due.elapsed();
    let what = || {
        format!(
            "HTTP {status}, level {level:?}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        )
    };
    match (status, target == Target::Direct || level.as_deref() == Some("none")) {
        (200, true) => Outcome::Ok { latency, lag },
        (200, false) => Outcome::Level(what()),
        _ => Outcome::Status(what()),
    }
}

/// Sends `rps` requests per second to `url` for `secs` seconds, one task per
/// request spawned at its due time, and waits for all of them.
///
/// Request `i` is due at a random point of its slot `[i, i+1) / rps` (unless
/// `no_jitter`), so that arrivals do not alias with tokio's 1 ms timer ticks:
/// the instant mock's zero-length `sleep_until` still waits for the next tick,
/// a large part of the direct latency. The pacing runs on a blocking-pool
/// thread with `std::thread::sleep` (tens of µs late), not on tokio's timer,
/// whose ticks would add up to 2 ms of send lag that varies between phases.
async fn phase(client: &reqwest::Client, target: Target, url: &str, args: &Args, secs: u64, first_id: u64) -> Phase {
    let n = args.rps as u64 * secs;
    let period = Duration::from_secs(1) / args.rps;
    let jitter = !args.no_jitter;
    let (client, url, rt) = (client.clone(), url.to_string(), tokio::runtime::Handle::current());
    let tasks = tokio::task::spawn_blocking(move || {
        let mut rng = fastrand::Rng::with_seed(first_id);
        let start = Instant::now();
        (0..n)
            .map(|i| {
                let slot = if jitter { rng.f64() } else { 0.0 };
                let due = start + period.mul_f64(i as f64 + slot);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                rt.spawn(one(client.clone(), target, url.clone(), first_id + i, due))
            })
            .collect::<Vec<_>>()
    })
    .await
    .expect("pacer panicked");
    let hist = || Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds");
    let mut p = Phase {
        latency: hist(),
        lag: hist(),
        errors: 0,
        non_200: 0,
        not_none: 0,
        first_failure: None,
    };
    for t in tasks {
        match t.await.expect("request task panicked") {
            Outcome::Ok { latency, lag } => {
                p.latency.saturating_record(latency.as_micros() as u64);
                p.lag.saturating_record(lag.as_micros() as u64);
            }
            Outcome::Transport(f) => p.fail(|p| &mut p.errors, f),
            Outcome::Status(f) => p.fail(|p| &mut p.non_200, f),
            Outcome::Level(f) => p.fail(|p| &mut p.not_none, f),
        }
    }
    p
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        args.rps > 0 && args.secs > 0 && args.rounds > 0,
        "--rps, --secs and --rounds must be positive"
    );

    // The gateway, set up as `fusebox serve` does, with an instant mock fleet.
    let cfg = Config::parse(CONFIG, "gateway_overhead")?;
    let clock = Clock::system();
    let seed = Seed(1);
    let mut parts = RunnerParts::mock(clock, seed);
    let mock = MockServer::instant(seed, parts.faults.clone())
        .spawn("127.0.0.1:0")
        .await?;
    parts.providers = fusebox::provider::http::build(&cfg, clock, Some(&format!("http://{mock}")))?;
    let runner = Runner::new(cfg, parts)?;
    let gateway = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", GatewayOptions::default()).await?;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            runner.maintain();
        }
    });

    let client = reqwest::Client::new();
    let targets = [
        ("direct", Target::Direct, format!("http://{mock}/v1/chat/completions")),
        (
            "gateway",
            Target::Gateway,
            format!("http://{gateway}/v1/chat/completions"),
        ),
    ];
    println!(
        "gateway_overhead: {} req/s{}, {} round(s) of {} s per target after {} s warm-up; latency from scheduled send to body end",
        args.rps,
        if args.no_jitter { " (strict period)" } else { " (jittered within each slot)" },
        args.rounds,
        args.secs,
        args.warmup
    );
    let mut id = 1u64 << 40;
    if args.warmup > 0 {
        for (name, target, url) in &targets {
            let p = phase(&client, *target, url, &args, args.warmup, id).await;
            id += 1 << 24;
            println!("warm-up  {}", p.line(name));
        }
    }

    let (mut d50, mut d99, mut g50, mut g99) = (vec![], vec![], vec![], vec![]);
    let mut failed = 0;
    for round in 1..=args.rounds {
        println!("round {round}");
        let mut res = Vec::new();
        for (name, target, url) in &targets {
            let p = phase(&client, *target, url, &args, args.secs, id).await;
            id += 1 << 24;
            println!("  {}", p.line(name));
            failed += p.failures();
            res.push(p);
        }
        let (d, g) = (&res[0], &res[1]);
        println!(
            "  overhead p50 {:+.3} ms  p99 {:+.3} ms",
            g.ms(0.5) - d.ms(0.5),
            g.ms(0.99) - d.ms(0.99)
        );
        d50.push(d.ms(0.5));
        d99.push(d.ms(0.99));
        g50.push(g.ms(0.5));
        g99.push(g.ms(0.99));
    }
    let over50: Vec<f64> = g50.iter().zip(&d50).map(|(g, d)| g - d).collect();
    let over99: Vec<f64> = g99.iter().zip(&d99).map(|(g, d)| g - d).collect();
    println!("median over {} round(s)", args.rounds);
    println!("  direct   p50 {:7.3}  p99 {:7.3} ms", median(d50), median(d99));
    println!("  gateway  p50 {:7.3}  p99 {:7.3} ms", median(g50), median(g99));
    println!(
        "  overhead p50 {:+.3} ms  p99 {:+.3} ms (target ≤ 1 ms, ≤ 5 ms)",
        median(over50),
        median(over99)
    );
    println!(
        "failed requests in measured rounds: {failed}{}",
        if failed > 0 { " (figures invalid)" } else { "" }
    );
    Ok(())
}
