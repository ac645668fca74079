//! Every built-in scenario shows what the seeds promise, on virtual time,
//! and the same scenario + config + seed gives a byte-identical summary.

use crate::common::seeds::{each_seed, median, SEEDS};
use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::fleet::store::{Granted, MemoryStore, RetryAsk, RetryShare, Store, StoreError, Take, Taken};
use fusebox::outcome::Level;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::target::{Kind, Target};
use fusebox::telemetry::events::EventKind;
use fusebox::telemetry::events::RefillFrozen;
use fusebox::traffic::load::scenario::Scenario;
use fusebox::traffic::load::{run_scenario, DemoRun};
use fusebox::traffic::summary::Summary;
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct Run {
    runner: Arc<Runner>,
    pub(crate) demo: DemoRun,
    summary: Summary,
    pub(crate) events: Vec<fusebox::telemetry::events::Event>,
}

async fn run(name: &str, minutes: u64, seed: u64) -> Run {
    run_with(name, minutes, seed, Config::default()).await
}

pub(crate) async fn run_with(name: &str, minutes: u64, seed: u64, cfg: Config) -> Run {
    run_this(Scenario::load(name).unwrap(), minutes, seed, cfg).await
}

async fn run_this(scenario: Scenario, minutes: u64, seed: u64, cfg: Config) -> Run {
    let name = scenario.name.as_str();
    let dir = tempfile::tempdir().unwrap();
    let mut parts = RunnerParts::mock(Clock::with_wall_anchor(0), Seed(seed));
    parts.spool = Some(dir.path().join("spool.jsonl"));
    let runner = Runner::new(cfg, parts).unwrap();
    let mut rx = runner.events().subscribe();
    let demo = run_scenario(runner.clone(), &scenario, Duration::from_secs(minutes * 60), Seed(seed)).await;
    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    let summary = Summary::build(&runner, &events, demo.lost, runner.clock().elapsed_ms(), 0);
    assert_eq!(summary.lost, 0, "{name}: every request has an outcome");
    assert_eq!(summary.completed, summary.requests);
    assert_eq!(demo.outcomes.len() as u64, summary.requests);
    assert_eq!(runner.spool().unwrap().len(), 0, "{name}: every deferred request ended");
    let now = tokio::time::Instant::now();
    for p in runner.catalog().providers() {
        assert_eq!(
            p.limiter.view(now).concurrency.0,
            0,
            "{name}: {} has no call left in flight",
            p.name
        );
    }
    for t in runner.catalog().tools() {
        assert_eq!(t.bulkhead.view().in_use, 0, "{name}: tool {} pool drained", t.name);
    }
    Run {
        runner,
        demo,
        summary,
        events,
    }
}

fn transitions<'a>(r: &'a Run, breaker: &str) -> Vec<(&'a str, &'a str, &'a str)> {
    r.summary
        .transitions
        .iter()
        .filter(|t| t.breaker.to_string() == breaker)
        .map(|t| (t.from.as_str(), t.to.as_str(), t.reason.as_str()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn calm_has_no_degradation() {
    let r = run("calm", 5, 1).await;
    assert!(r.summary.requests > 1000);
    assert_eq!(r.summary.by_level.none, r.summary.requests);
    assert!(r.summary.transitions.is_empty());
}

#[tokio::test(start_paused = true)]
async fn two_am_incident_opens_get_order_and_stops_the_waiting() {
    let r = run("2am-incident", 10, 1).await;
    let t = transitions(&r, "tool:get_order");
    assert_eq!(t[0].0, "closed");
    assert_eq!(t[0].1, "open");
    assert!(t[0].2.contains("consecutive failures"), "{}", t[0].2);
    assert_eq!(t.last().unwrap().1, "closed", "closes after the service recovers");
    let s = &r.summary.targets[&Target::tool("get_order")];
    // Later requests skip get_order (cache or defer) instead of calling it.
    assert!(s.rejected_open > 10 * s.failed, "{s:?}");
    assert!(r.summary.by_level.deferred > 0 && r.summary.by_level.fallback > 0);
    // Deferred requests were re-driven once get_order recovered.
    let done: Vec<&str> = r
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::DeferredDone { level, .. } => Some(level.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(done.len() as u64, r.summary.by_level.deferred);
    assert!(done.iter().all(|l| *l != "failed"), "{done:?}");
}

#[tokio::test(start_paused = true)]
async fn provider_outage_moves_traffic_and_recovers_with_bounded_probes() {
    let r = run("provider-outage", 10, 1).await;
    let t = transitions(&r, "provider:openai");
    assert_eq!((t[0].0, t[0].1), ("closed", "open"));
    assert_eq!((t.last().unwrap().0, t.last().unwrap().1), ("half_open", "closed"));
    assert!(t.last().unwrap().2.contains("half-open ramp 2→4→8 passed"));
    assert!(
        r.summary.targets[&Target::model("claude-haiku")].ok > 500,
        "traffic moved to the next provider"
    );
    assert!(r.summary.by_level.fallback > 500);
    let now = tokio::time::Instant::now();
    for name in ["provider:openai", "model:gpt-4o"] {
        let v = r
            .runner
            .catalog()
            .registry()
            .find(&name.parse().unwrap())
            .unwrap()
            .breaker
            .view(now);
        assert!(
            v.peak_probes <= 8,
            "{name}: at most the last ramp stage in flight, saw {}",
            v.peak_probes
        );
        assert!(v.peak_probes >= 1);
    }
    assert_eq!(r.summary.by_level.failed, 0);
}

#[tokio::test(start_paused = true)]
async fn rate_limit_storm_freezes_refills_and_retries_within_budget() {
    let r = run("429-storm", 6, 1).await;
    let frozen = r
        .events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::RefillFrozen(RefillFrozen { .. })))
        .count();
    assert!(frozen > 0, "Retry-After froze the limiter");
    let s = &r.summary.targets[&Target::model("gpt-4o")];
    assert!(s.retries > 0);
    // The retry budget: 20 % of requests plus budget_min_per_s (2) per second.
    let allowed = 0.2 * r.summary.requests as f64 + 2.0 * (r.summary.virtual_ms / 1000) as f64;
    assert!((s.retries as f64) <= allowed, "{} retries > {allowed}", s.retries);
    assert!(r.summary.by_level.fallback > 100);
    assert_eq!(r.summary.by_level.failed, 0);
}

#[tokio::test(start_paused = true)]
async fn slow_tokens_trip_on_token_rate_collapse() {
    let r = run("slow-tokens", 6, 1).await;
    let t = transitions(&r, "model:gpt-4o");
    assert!(t[0].2.contains("token-rate collapse"), "{t:?}");
    assert!(r.summary.by_level.fallback > 100);
}

#[tokio::test(start_paused = true)]
async fn hallucinations_are_failures_although_http_says_200() {
    let r = run("hallucination", 6, 1).await;
    let s = &r.summary.targets[&Target::model("gpt-4o")];
    assert!(s.failed > 0);
    assert_eq!(
        crate::common::entry(&r.runner, "model:gpt-4o").stats.view().semantic,
        s.failed
    );
    assert_eq!(transitions(&r, "model:gpt-4o")[0].1, "open");
    assert!(
        r.summary.tokens.wasted > 0,
        "tokens spent on hallucinated calls are counted as wasted"
    );
}

#[tokio::test(start_paused = true)]
async fn noisy_tenant_does_not_hurt_other_users() {
    let r = run("noisy-tenant", 8, 1).await;
    assert_eq!(r.summary.budget_rejections.len(), 1);
    assert!(r.summary.budget_rejections["tenant-noisy"] > 100);
    let others: Vec<_> = r.demo.outcomes.iter().filter(|o| o.user != "tenant-noisy").collect();
    let ok = others.iter().filter(|o| o.level == Level::None).count();
    assert!(ok as f64 >= 0.99 * others.len() as f64, "{ok} of {}", others.len());
    assert!(others.iter().all(|o| o.level != Level::Failed));
}

/// A runaway agent loop (its spend tripled at 15 minutes) against the
/// same run without the spend-rate breaker, at every seed of [`SEEDS`]:
/// it opens within three minutes of the surge (the median, and seed 7's
/// figures, are in `docs/overload.md`).
#[test]
fn runaway_agent_is_stopped_by_its_spend_rate_breaker_within_three_minutes() {
    const SURGE_MS: u64 = 900_000;
    let runs = each_seed(SEEDS, |seed| async move {
        let mut cfg = Config::default();
        cfg.budgets.spend_rate.enabled = true;
        let on = run_with("runaway-agent", 25, seed, cfg).await;
        let off = run("runaway-agent", 25, seed).await;
        let trips = |r: &Run| -> Vec<(u64, String)> {
            r.events
                .iter()
                .filter_map(|e| match &e.kind {
                    EventKind::SpendRateTripped(t) => Some((e.t_ms, t.scope.user().to_string())),
                    _ => None,
                })
                .collect()
        };
        let tripped = trips(&on);
        assert!(trips(&off).is_empty());
        assert!(
            !tripped.is_empty() && tripped.iter().all(|(_, u)| u == "agent-loop"),
            "seed {seed}: {tripped:?}"
        );
        // Refused while open, with the reason.
        assert!(on.summary.budget_rejections["agent-loop"] > 0);
        let said = |o: &&fusebox::outcome::Outcome| {
            o.user_message
                .as_deref()
                .is_some_and(|m| m.contains("spend-rate breaker open"))
        };
        let refused: Vec<_> = on.demo.outcomes.iter().filter(said).collect();
        assert!(!refused.is_empty() && refused.iter().all(|o| o.user == "agent-loop"));
        // What the runaway spent on requests sent after its surge (outcomes
        // are in arrival order; the surge's first request opens it).
        let surge = fusebox::traffic::load::NOISY_IDS + fusebox::traffic::load::TENANT_IDS;
        let spent_after = |r: &Run| -> u64 {
            let os = &r.demo.outcomes;
            let from = os.iter().position(|o| o.request > surge).unwrap();
            os[from..]
                .iter()
                .filter(|o| o.user == "agent-loop")
                .map(|o| o.tokens)
                .sum()
        };
        // Every other user is served exactly as without it.
        let others = |r: &Run| -> (usize, usize) {
            let o: Vec<_> = r.demo.outcomes.iter().filter(|o| o.user != "agent-loop").collect();
            (o.len(), o.iter().filter(|o| o.level == Level::None).count())
        };
        assert_eq!(others(&on), others(&off), "seed {seed}");
        (
            tripped[0].0 as i64 - SURGE_MS as i64,
            spent_after(&on),
            spent_after(&off),
        )
    });
    for (seed, (after, on, off)) in &runs {
        eprintln!(
            "seed {seed}: opened {} s after the surge; the runaway spent {on} tokens after it, {off} without",
            after / 1000
        );
    }
    eprintln!("median: {} s", median(runs.iter().map(|(_, r)| r.0 as f64 / 1000.0)));
    for (seed, (after, on, off)) in runs {
        assert!(
            (1..=180_000).contains(&after),
            "seed {seed}: opened {after} ms after the surge"
        );
        assert!(
            on * 2 < off,
            "seed {seed}: the runaway spent {on} tokens with the breaker, {off} without"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn same_seed_gives_a_byte_identical_summary() {
    let a = serde_json::to_string(&run("tour", 6, 9).await.summary).unwrap();
    let b = serde_json::to_string(&run("tour", 6, 9).await.summary).unwrap();
    assert_eq!(a, b);
    let c = serde_json::to_string(&run("tour", 6, 10).await.summary).unwrap();
    assert_ne!(a, c, "another seed gives other traffic");
}

/// openai's calls while its capacity is down (180–480 s): the share of the
/// capacity its answered calls used (call-time inside the window over 15
/// calls × 300 s), its attempts and how many were 429'd.
fn during_the_drop(r: &Run) -> (f64, usize, usize) {
    const FROM: u64 = 180_000;
    const TO: u64 = 480_000;
    let openai = Target::provider("openai");
    let mut busy_ms = 0u64;
    let (mut calls, mut rate_limited) = (0, 0);
    for e in &r.events {
        let EventKind::Attempt(a) = &e.kind else { continue };
        if a.target != openai {
            continue;
        }
        let (start, end) = (e.t_ms.saturating_sub(a.latency_ms), e.t_ms);
        if end <= FROM || start >= TO {
            continue;
        }
        calls += 1;
        match a.status {
            Some(200) => busy_ms += end.min(TO) - start.max(FROM),
            Some(429) => rate_limited += 1,
            _ => {}
        }
    }
    (busy_ms as f64 / (15.0 * (TO - FROM) as f64), calls, rate_limited)
}

#[tokio::test(start_paused = true)]
async fn adaptive_concurrency_finds_a_dropped_capacity_without_429s() {
    let defaults = run("capacity-drop", 10, 7).await;
    let mut cfg = Config::default();
    cfg.breaker.count_rate_limited = false;
    let static_limit = run_with("capacity-drop", 10, 7, cfg.clone()).await;
    cfg.limiter.adaptive.enabled = true;
    let adaptive = run_with("capacity-drop", 10, 7, cfg).await;
    for (name, r) in [
        ("defaults", &defaults),
        ("static", &static_limit),
        ("adaptive", &adaptive),
    ] {
        let (goodput, calls, limited) = during_the_drop(r);
        eprintln!("{name}: goodput {goodput:.3} of the capacity, {limited} of {calls} calls 429'd");
    }
    let (goodput, calls, limited) = during_the_drop(&adaptive);
    assert!(goodput >= 0.9, "goodput {goodput:.3} of the capacity");
    assert!(limited * 20 <= calls, "{limited} of {calls} calls 429'd");
    // The static limit sends everything: most calls are 429'd, and with
    // the breaker counting them (the defaults) it is open most of the drop.
    let (_, calls, limited) = during_the_drop(&static_limit);
    assert!(limited * 2 > calls, "{limited} of {calls} calls 429'd");
    let (goodput, ..) = during_the_drop(&defaults);
    assert!(goodput < 0.5, "goodput {goodput:.3} of the capacity");
    // The limit ends where it was cut or grew back, within its bounds.
    let now = tokio::time::Instant::now();
    let openai = crate::common::provider_slot(&adaptive.runner, "openai");
    let view = openai.limiter.view(now).adaptive.unwrap();
    assert!(view.moved.is_some() && (1..=256).contains(&view.limit), "{view:?}");
}

/// Per tenant (the users named `tenant-*`): requests, the share answered
/// by the model (whole, or with a tool's part missing), and the p99
/// latency of those answered (ms).
fn by_tenant(r: &Run) -> std::collections::BTreeMap<String, (usize, f64, u64)> {
    let mut by: std::collections::BTreeMap<String, Vec<&fusebox::outcome::Outcome>> = Default::default();
    for o in &r.demo.outcomes {
        if o.user.starts_with("tenant-") {
            by.entry(o.user.to_string()).or_default().push(o);
        }
    }
    by.into_iter()
        .map(|(t, os)| {
            let mut lat: Vec<u64> = os
                .iter()
                .filter(|o| matches!(o.level, Level::None | Level::Partial))
                .map(|o| o.latency_ms)
                .collect();
            lat.sort_unstable();
            let ok = lat.len() as f64 / os.len() as f64;
            let p99 = lat
                .get((lat.len() * 99 / 100).min(lat.len().saturating_sub(1)))
                .copied();
            (t, (os.len(), ok, p99.unwrap_or(0)))
        })
        .collect()
}

/// At every seed of [`SEEDS`] (seed 7's table is in `docs/overload.md`).
#[test]
fn fair_shares_keep_quiet_tenants_whole_through_a_flood() {
    let cfg = Config::parse(include_str!("../../examples/fair-shares.toml"), "fair-shares.toml").unwrap();
    let worst = each_seed(SEEDS, |seed| {
        let cfg = cfg.clone();
        async move { fair_shares_at(seed, cfg).await }
    });
    for (seed, (ok, p99)) in &worst {
        eprintln!("seed {seed}: quiet tenants answered at least {ok:.3} of what they were alone, p99 at most {p99:.3} of theirs alone");
    }
}

/// One seed of the fair-shares run: the quiet tenants' worst answered
/// share and p99, each against the run without the flood.
async fn fair_shares_at(seed: u64, cfg: Config) -> (f64, f64) {
    let mut off = cfg.clone();
    off.limiter.queue.enabled = false;
    let flood = Scenario::load("fair-shares").unwrap();
    // The same arrivals, the flooding tenant's aside.
    let mut calm = flood.clone();
    calm.noisy.as_mut().unwrap().rps = 1e-9;
    let fair = run_this(flood.clone(), 10, seed, cfg.clone()).await;
    let alone = run_this(calm, 10, seed, cfg).await;
    let unordered = run_this(flood, 10, seed, off).await;
    let (fair_t, alone_t, off_t) = (by_tenant(&fair), by_tenant(&alone), by_tenant(&unordered));
    for (t, (n, ok, p99)) in fair_t.iter().filter(|_| seed == 7) {
        let (_, ok_alone, p99_alone) = alone_t.get(t).copied().unwrap_or_default();
        let (_, ok_off, p99_off) = off_t[t];
        eprintln!(
            "{t}: {n} requests; answered {:.1} % (alone {:.1} %, no queue {:.1} %); p99 {p99} ms (alone {p99_alone} ms, no queue {p99_off} ms)",
            ok * 100.0,
            ok_alone * 100.0,
            ok_off * 100.0
        );
    }
    let mut worst = (f64::MAX, 0.0f64);
    for t in ["tenant-a", "tenant-b", "tenant-c"] {
        let ((_, ok, p99), (_, ok_alone, p99_alone)) = (fair_t[t], alone_t[t]);
        assert!(
            ok >= ok_alone * 0.9,
            "seed {seed}, {t}: answered {ok} against {ok_alone} alone"
        );
        assert!(
            p99 * 10 <= p99_alone * 11,
            "seed {seed}, {t}: p99 {p99} ms against {p99_alone} ms alone"
        );
        worst = (worst.0.min(ok / ok_alone), worst.1.max(p99 as f64 / p99_alone as f64));
        // Without the queue the flood takes their capacity.
        assert!(
            off_t[t].1 < 0.9,
            "seed {seed}, {t}: answered {} without the queue",
            off_t[t].1
        );
    }
    assert!(
        fair_t["tenant-ops"].1 >= 0.99,
        "seed {seed}, critical: {:?}",
        fair_t["tenant-ops"]
    );
    // Batch is shed first: less of it answered than of any default tenant,
    // and no critical call shed at all.
    assert!(fair_t["tenant-batch"].1 < fair_t["tenant-noisy"].1, "seed {seed}");
    let now = tokio::time::Instant::now();
    let openai = crate::common::provider_slot(&fair.runner, "openai");
    let q = openai.limiter.view(now).queue.unwrap();
    if seed == 7 {
        eprintln!("shed (critical, default, batch): {:?}; most: {:?}", q.shed, q.shed_most);
    }
    assert_eq!(q.waiting, [0, 0, 0]);
    assert!(q.shed[0] == 0 && q.shed[2] > 0 && q.shed[1] > 0, "seed {seed}: {q:?}");
    assert_eq!(q.shed_most[0].0, "tenant-noisy");
    // A shed request says so in its chain.
    let shed = fair
        .demo
        .outcomes
        .iter()
        .find(|o| o.user == "tenant-batch" && o.level == Level::Fallback);
    assert!(shed.is_some_and(|o| o.path().iter().any(|h| h.contains("shed"))));
    worst
}

/// A flood whose caller says `critical` without a key is served and shed
/// as `default`: the quiet tenants fare as they do against a flood that
/// claims nothing. Were the claim trusted, it would push them out.
#[tokio::test(start_paused = true)]
async fn a_flood_claiming_critical_without_a_key_is_shed_like_default() {
    let cfg = Config::parse(include_str!("../../examples/fair-shares.toml"), "fair-shares.toml").unwrap();
    let flood = Scenario::load("fair-shares").unwrap();
    let mut claiming = flood.clone();
    claiming.noisy.as_mut().unwrap().priority = Some(fusebox::config::Priority::Critical);
    let mut trusting = cfg.clone();
    trusting.limiter.queue.trust_priority = true;
    let plain = by_tenant(&run_this(flood, 10, 7, cfg.clone()).await);
    let claimed = run_this(claiming.clone(), 10, 7, cfg).await;
    let trusted = by_tenant(&run_this(claiming, 10, 7, trusting).await);
    assert_eq!(by_tenant(&claimed), plain, "the claim changes nothing");
    let openai = crate::common::provider_slot(&claimed.runner, "openai");
    let q = openai.limiter.view(tokio::time::Instant::now()).queue.unwrap();
    assert!(q.shed[1] > 0 && q.shed_most[0].0 == "tenant-noisy", "{q:?}");
    for t in ["tenant-a", "tenant-b", "tenant-c"] {
        eprintln!("{t}: answered {:.3} (claim trusted: {:.3})", plain[t].1, trusted[t].1);
        assert!(
            trusted[t].1 < plain[t].1 * 0.9,
            "{t}: {:?} against {:?}",
            trusted[t],
            plain[t]
        );
    }
}

/// Latencies (ms, sorted) of `user`'s answered requests, and how many it sent.
fn answered_latencies(r: &Run, user: &str) -> (Vec<u64>, usize) {
    let mine: Vec<_> = r.demo.outcomes.iter().filter(|o| o.user == user).collect();
    let mut lat: Vec<u64> = mine
        .iter()
        .filter(|o| matches!(o.level, Level::None | Level::Partial | Level::Fallback))
        .map(|o| o.latency_ms)
        .collect();
    lat.sort_unstable();
    (lat, mine.len())
}

fn quantile(sorted: &[u64], q: f64) -> u64 {
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)]
}

/// At every seed of [`SEEDS`] (seed 7's table is in `docs/overload.md`).
#[test]
fn hedging_cuts_a_heavy_tail_within_its_budget() {
    let figures = each_seed(SEEDS, hedging_at);
    for (seed, ((sent, p50, p99), (_, plain_p50, plain_p99), (_, _, p95_p99), refused)) in &figures {
        eprintln!("seed {seed}: {sent} requests; p99/p50 hedged {p99}/{p50} ms, p95 {p95_p99} ms, plain {plain_p99}/{plain_p50} ms; {refused} refused by their session's quota");
    }
}

/// One seed of the heavy-tail run, hedged after 2.1 s, not hedged, and
/// hedged at the p95: `tenant-summaries`' requests, p50 and p99 of each,
/// and the hedged run's requests refused by their session's concurrency
/// quota (its only unanswered ones).
async fn hedging_at(seed: u64) -> ((u64, u64, u64), (u64, u64, u64), (u64, u64, u64), usize) {
    let cfg = Config::parse(include_str!("../../examples/hedging.toml"), "hedging.toml").unwrap();
    let (mut off, mut p95) = (cfg.clone(), cfg.clone());
    off.routes.get_mut("default").unwrap().hedge = fusebox::config::Hedge::Off;
    p95.routes.get_mut("default").unwrap().hedge = fusebox::config::Hedge::P95;
    let hedged = run_with("heavy-tail", 10, seed, cfg).await;
    let plain = run_with("heavy-tail", 10, seed, off).await;
    let by_p95 = run_with("heavy-tail", 10, seed, p95).await;
    let hedges = |r: &Run| -> u64 { r.summary.targets.values().map(|s| s.hedged).sum() };
    let session_refusals = |r: &Run| {
        let said = |o: &&fusebox::outcome::Outcome| {
            o.user_message
                .as_deref()
                .is_some_and(|m| m.contains("concurrent requests already running"))
        };
        r.demo
            .outcomes
            .iter()
            .filter(|o| o.user == "tenant-summaries")
            .filter(said)
            .count()
    };
    let mut figures = Vec::new();
    for r in [&hedged, &plain, &by_p95] {
        let (lat, sent) = answered_latencies(r, "tenant-summaries");
        let (p50, p99) = (quantile(&lat, 0.5), quantile(&lat, 0.99));
        if seed == 7 {
            eprintln!(
                "tenant-summaries: {sent} requests, {} answered; p50 {p50} ms, p99 {p99} ms; hedges {} ({:.1} % of its requests)",
                lat.len(),
                hedges(r),
                hedges(r) as f64 * 100.0 / sent as f64
            );
        }
        // Every request is answered but for the odd one whose session
        // already has its four requests in flight.
        let refused = session_refusals(r);
        assert!(refused <= 1, "seed {seed}: {refused} refused");
        assert_eq!(lat.len() + refused, sent, "seed {seed}: every other request answered");
        figures.push((sent as u64, p50, p99));
    }
    let [(sent, p50, p99), (_, plain_p50, plain_p99), (_, _, p95_p99)] = figures[..] else {
        unreachable!()
    };
    assert!(
        plain_p99 >= 8 * plain_p50,
        "seed {seed}: the tail is heavy: {plain_p99} against {plain_p50}"
    );
    assert!(p99 <= 2 * p50, "seed {seed}: hedged p99 {p99} ms against p50 {p50} ms");
    assert!(hedges(&hedged) * 10 <= sent, "seed {seed}: at most a tenth more calls");
    assert!(hedges(&hedged) > 0 && hedges(&plain) == 0);
    // Hedging at the first model's p95 so far cuts the tail too.
    assert!(
        p95_p99 * 2 < plain_p99 && hedges(&by_p95) * 10 <= sent,
        "seed {seed}: p95: p99 {p95_p99} ms"
    );
    // A hedged request names the call it outran.
    let outrun = hedged
        .demo
        .outcomes
        .iter()
        .find(|o| o.path().iter().any(|h| h.contains("outrun")));
    assert!(outrun.is_some_and(|o| o.path().len() == 2), "{outrun:?}");
    (figures[0], figures[1], figures[2], session_refusals(&hedged))
}

/// A fleet member that shares only the retry budget (in a store in this
/// process, on the runners' virtual clock); budgets, deferral and trips
/// stay its own.
struct RetriesOnly(Arc<fusebox::fleet::retries::SharedRetries>);

#[async_trait::async_trait]
impl fusebox::runner::shared::Shared for RetriesOnly {
    async fn reserve(
        &self,
        _: &str,
        _: fusebox::resilience::budget::UserLimits,
        _: u32,
        _: f64,
    ) -> Result<fusebox::runner::shared::Reserved, fusebox::resilience::budget::BudgetExceeded> {
        Ok(Default::default())
    }
    fn settle(&self, _: &str, _: fusebox::runner::shared::Reserved, _: u32, _: f64) {}
    async fn retry(&self) -> Option<bool> {
        self.0.take().await
    }
    fn retried_alone(&self) {
        self.0.retried_alone();
    }
    async fn defer(&self, _: &fusebox::resilience::defer::Deferred) -> bool {
        false
    }
    fn trip(&self, _: Target, _: String) {}
}

/// Four instances running `scenario` at once on one virtual clock (at
/// seeds `seed` to `seed + 3`), sharing a retry budget when `shared`: each
/// one's outcomes.
async fn fleet_of_four(scenario: &Scenario, cfg: &Config, shared: bool, seed: u64) -> Vec<DemoRun> {
    let clock = Clock::with_wall_anchor(0);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new(clock));
    let spools = tempfile::tempdir().unwrap();
    let runners = four_runners(cfg, clock, shared.then_some(store), seed, spools.path());
    run_four(&runners, scenario, seed).await
}

/// Four runners on `clock` at seeds `seed` to `seed + 3` (spooling in
/// `spools`), sharing the retry budget in `store` where one is given.
fn four_runners(
    cfg: &Config,
    clock: Clock,
    store: Option<Arc<dyn Store>>,
    seed: u64,
    spools: &std::path::Path,
) -> Vec<Arc<Runner>> {
    (0..4)
        .map(|i| {
            let mut parts = RunnerParts::mock(clock, Seed(seed + i as u64));
            parts.spool = Some(spools.join(format!("spool{i}.jsonl")));
            let runner = Runner::new(cfg.clone(), parts).unwrap();
            if let Some(store) = &store {
                let retries = Arc::new(fusebox::fleet::retries::SharedRetries::new(
                    store.clone(),
                    runner.clone(),
                ));
                tokio::spawn(retries.clone().share());
                runner.share_with(Arc::new(RetriesOnly(retries)));
            }
            runner
        })
        .collect()
}

/// `scenario` on each of `runners` at once (for 7 minutes).
async fn run_four(runners: &[Arc<Runner>], scenario: &Scenario, seed: u64) -> Vec<DemoRun> {
    let runs = runners
        .iter()
        .enumerate()
        .map(|(i, r)| run_scenario(r.clone(), scenario, Duration::from_secs(420), Seed(seed + i as u64)));
    futures_util::future::join_all(runs).await
}

/// Retries of provider calls, as the recording's chains count them
/// (`gpt-4o ✗503×3`: two).
fn retries(runs: &[DemoRun]) -> u64 {
    let hops = runs.iter().flat_map(|r| &r.outcomes).flat_map(|o| &o.chain);
    hops.map(|h| u64::from(h.tries.saturating_sub(1))).sum()
}

/// Fleets at every seed of [`SEEDS`] (instances at seeds 7 to 10 are the
/// figures in `docs/overload.md`).
#[test]
fn a_fleets_retries_stay_within_one_shared_budget() {
    let runs = each_seed(SEEDS, fleet_retries_at);
    for (seed, (requests, with, budget, without)) in &runs {
        eprintln!(
            "instances at seeds {seed} to {}, {requests} requests: retries {with} with the shared budget (≤ {budget:.0}), {without} with one budget each ({:.2}×)",
            seed + 3,
            *without as f64 / *with as f64
        );
    }
}

/// One fleet's requests, retries with the shared budget, that budget, and
/// retries with a budget each.
async fn fleet_retries_at(seed: u64) -> (usize, u64, f64, u64) {
    let cfg = Config::parse(include_str!("../../examples/fleet-retries.toml"), "fleet-retries.toml").unwrap();
    let storm = Scenario::load("retry-storm").unwrap();
    let shared = fleet_of_four(&storm, &cfg, true, seed).await;
    let apart = fleet_of_four(&storm, &cfg, false, seed).await;
    let requests: usize = shared.iter().map(|r| r.outcomes.len()).sum();
    let (with, without) = (retries(&shared), retries(&apart));
    // The shared budget over the outage (5 minutes and the backoff after):
    // its floor once, and its share of the fleet's requests.
    let floor_s = f64::from(cfg.retry.budget_min_per_s);
    let budget = floor_s * 310.0 + cfg.retry.budget_ratio * requests as f64;
    assert!(
        with > 0 && (with as f64) <= budget,
        "seed {seed}: {with} retries against a budget of {budget}"
    );
    assert!(
        without as f64 >= 2.5 * with as f64,
        "seed {seed}: {without} against {with}"
    );
    (requests, with, budget, without)
}

/// A store the test takes away: while `down`, every operation fails, as
/// when Redis is unreachable.
struct Flaky {
    store: MemoryStore,
    down: std::sync::atomic::AtomicBool,
}

impl Flaky {
    fn up(&self) -> Result<(), StoreError> {
        match self.down.load(std::sync::atomic::Ordering::Relaxed) {
            true => Err(StoreError("the store is down".into())),
            false => Ok(()),
        }
    }
}

#[async_trait::async_trait]
impl Store for Flaky {
    async fn take(&self, buckets: &[Take], now_us: Option<u64>) -> Result<Vec<Taken>, StoreError> {
        self.up()?;
        self.store.take(buckets, now_us).await
    }

    async fn grant(&self, key: &str, want: f64, limits: [f64; 3], now_ms: Option<u64>) -> Result<Granted, StoreError> {
        self.up()?;
        self.store.grant(key, want, limits, now_ms).await
    }

    async fn retry(
        &self,
        key: &str,
        ask: RetryAsk,
        budget: RetryShare,
        now_ms: Option<u64>,
    ) -> Result<u32, StoreError> {
        self.up()?;
        self.store.retry(key, ask, budget, now_ms).await
    }
}

/// When the store of the retry-storm fleet goes away, and for how long (s).
const STORE_OUTAGE: (u64, u64) = (150, 20);

/// The fleet's retry budget through a store outage in the middle of the
/// storm, at every seed of [`SEEDS`]: meanwhile each instance's own
/// budget decides (counting what the fleet had granted it), and what it
/// allowed is counted into the store once it answers again. From the
/// outage's start to one window after its end the fleet retries at most
/// the shared budget of that span plus three more instances' floors over
/// it, and at most three floors over the outage more than the same fleet
/// with its store up (`docs/overload.md`, instances at seeds 7 to 10).
#[test]
fn a_fleets_retries_stay_bounded_through_a_store_outage() {
    let runs = each_seed(SEEDS, retries_through_an_outage_at);
    for (seed, (outage, calm, budget, bound)) in &runs {
        eprintln!(
            "instances at seeds {seed} to {}: {}s from the outage's start: {outage} retries ({calm} with the store up; the shared budget {budget:.0}, the bound {bound:.0})",
            seed + 3,
            STORE_OUTAGE.1 + 10,
        );
    }
    let over: Vec<f64> = runs
        .iter()
        .map(|(_, (outage, calm, ..))| *outage as f64 - *calm as f64)
        .collect();
    eprintln!(
        "retries over the store-up fleet's in the same span: median {:.0}, at most {:.0}",
        median(over.clone()),
        over.iter().cloned().fold(f64::MIN, f64::max)
    );
}

/// One fleet through the outage and the same fleet with its store up: the
/// retries from the outage's start to a window after its end in each, the
/// shared budget of that span and the bound the first must keep to.
async fn retries_through_an_outage_at(seed: u64) -> (u64, u64, f64, f64) {
    let cfg = Config::parse(include_str!("../../examples/fleet-retries.toml"), "fleet-retries.toml").unwrap();
    let storm = Scenario::load("retry-storm").unwrap();
    let (outage, requests) = retries_in_the_outage(&cfg, &storm, seed, true).await;
    let (calm, _) = retries_in_the_outage(&cfg, &storm, seed, false).await;
    let (floor_s, window_s) = (f64::from(cfg.retry.budget_min_per_s), 10.0);
    let (outage_s, span_s) = (STORE_OUTAGE.1 as f64, STORE_OUTAGE.1 as f64 + 10.0);
    // The most the sliding window hands out over the span: its floor over
    // the span and the window before it, and its ratio of the requests in
    // both. The bound adds three more instances' floors over the span.
    let budget = floor_s * (span_s + window_s) + cfg.retry.budget_ratio * requests as f64;
    let bound = budget + 3.0 * floor_s * span_s;
    assert!(
        (outage as f64) <= bound,
        "seed {seed}: {outage} retries through the outage against a bound of {bound}"
    );
    assert!(
        (calm as f64) <= budget,
        "seed {seed}: {calm} retries with the store up against a budget of {budget}"
    );
    // Counted into the store on its return, the retries made alone keep
    // the window after within the budget: the excess is the outage's.
    assert!(
        outage.saturating_sub(calm) as f64 <= 3.0 * floor_s * outage_s,
        "seed {seed}: {outage} retries through the outage, {calm} without"
    );
    (outage, calm, budget, bound)
}

/// Four instances through the storm with the store taken away at
/// [`STORE_OUTAGE`] (or left up unless `down`): their retries from the
/// outage's start to one window after its end, and their requests from a
/// window before it to then.
async fn retries_in_the_outage(cfg: &Config, storm: &Scenario, seed: u64, down: bool) -> (u64, u64) {
    let clock = Clock::with_wall_anchor(0);
    let store = Arc::new(Flaky {
        store: MemoryStore::new(clock),
        down: Default::default(),
    });
    let spools = tempfile::tempdir().unwrap();
    let runners = four_runners(cfg, clock, Some(store.clone()), seed, spools.path());
    // Requests and provider retries of all four so far.
    let tally = |runners: &[Arc<Runner>]| -> (u64, u64) {
        runners.iter().fold((0, 0), |(q, r), runner| {
            let s = runner.snapshot(0, 0);
            let retries = s.breakers.iter().filter(|b| b.target.kind() == Kind::Provider);
            (q + s.requests, r + retries.map(|b| b.stats.retries).sum::<u64>())
        })
    };
    let (from_s, outage_s) = STORE_OUTAGE;
    let watch = async {
        let window = Duration::from_secs(10);
        tokio::time::sleep(Duration::from_secs(from_s) - window).await;
        let before = tally(&runners);
        tokio::time::sleep(window).await;
        let start = tally(&runners);
        store.down.store(down, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(outage_s)).await;
        store.down.store(false, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(window).await;
        let end = tally(&runners);
        (end.1 - start.1, end.0 - before.0)
    };
    tokio::join!(run_four(&runners, storm, seed), watch).1
}
