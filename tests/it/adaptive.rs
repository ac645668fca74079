//! Adaptive concurrency does no harm: with `[limiter.adaptive]` on, the
//! first model is back within a minute of an outage ending, calm and tour
//! traffic are answered as without it, and the capacity-drop figures hold,
//! at every seed from 1 to 30 (virtual time; see [`each_seed`]).

use crate::common::seeds::{each_seed, SEEDS};
use crate::scenarios::run_with;
use fusebox::config::Config;
use fusebox::outcome::Level;
use fusebox::target::Target;
use fusebox::telemetry::events::EventKind;
use std::collections::HashMap;

/// One request: when it arrived (ms), its level and its latency (ms).
#[derive(Clone, Copy)]
struct Request {
    at_ms: u64,
    level: Level,
    latency_ms: u64,
}

/// One `openai` attempt: when it began and ended (ms), and its status.
#[derive(Clone, Copy)]
struct Call {
    from_ms: u64,
    to_ms: u64,
    status: Option<u16>,
}

/// What a run leaves for these tests.
struct Ran {
    requests: Vec<Request>,
    openai: Vec<Call>,
}

/// The default config, with adaptive concurrency on or off and, on, the
/// breaker setting of `examples/adaptive.toml`.
fn config(adaptive: bool) -> Config {
    if !adaptive {
        return Config::default();
    }
    let cfg = Config::parse(include_str!("../../examples/adaptive.toml"), "adaptive.toml").unwrap();
    assert!(cfg.limiter.adaptive.enabled);
    cfg
}

/// Runs `scenario` for `minutes` of virtual time at `seed` (as every
/// scenario test does, with its checks that nothing was lost).
async fn run(scenario: &str, minutes: u64, seed: u64, cfg: Config) -> Ran {
    let r = run_with(scenario, minutes, seed, cfg).await;
    let (mut arrived, mut openai) = (HashMap::new(), Vec::new());
    let provider = Target::provider("openai");
    for e in &r.events {
        match &e.kind {
            EventKind::Request(a) => {
                arrived.insert(a.request.id, e.t_ms);
            }
            EventKind::Attempt(a) if a.target == provider => openai.push(Call {
                from_ms: e.t_ms.saturating_sub(a.latency_ms),
                to_ms: e.t_ms,
                status: a.status,
            }),
            _ => {}
        }
    }
    let requests = r
        .demo
        .outcomes
        .iter()
        .map(|o| Request {
            at_ms: arrived[&o.request],
            level: o.level,
            latency_ms: o.latency_ms,
        })
        .collect();
    Ran { requests, openai }
}

/// Whether a request was answered by the first model (whole, or with a
/// tool's part missing).
fn first_model(l: Level) -> bool {
    matches!(l, Level::None | Level::Partial)
}

/// Whether a request was answered at all (by any model, or the cache).
fn answered(l: Level) -> bool {
    matches!(l, Level::None | Level::Partial | Level::Fallback)
}

/// The share of the requests arriving in `[from_s, to_s)` that `is` holds for.
fn share(r: &Ran, from_s: u64, to_s: u64, is: fn(Level) -> bool) -> f64 {
    let within: Vec<_> = r
        .requests
        .iter()
        .filter(|q| (from_s * 1000..to_s * 1000).contains(&q.at_ms))
        .collect();
    within.iter().filter(|q| is(q.level)).count() as f64 / within.len().max(1) as f64
}

/// The p99 latency (ms) of the answered requests.
fn p99(r: &Ran) -> u64 {
    let mut lat: Vec<u64> = r
        .requests
        .iter()
        .filter(|q| answered(q.level))
        .map(|q| q.latency_ms)
        .collect();
    lat.sort_unstable();
    lat.get((lat.len() * 99 / 100).min(lat.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0)
}

/// The outage of `outage-recovery` ends at 120 s.
const RECOVERED_S: u64 = 120;

#[test]
fn after_an_outage_the_first_model_is_back_within_a_minute() {
    // From a minute after recovery for a minute.
    let (from, to) = (RECOVERED_S + 60, RECOVERED_S + 120);
    let figures = each_seed(SEEDS, |seed| async move {
        let on = run("outage-recovery", 4, seed, config(true)).await;
        let off = run("outage-recovery", 4, seed, config(false)).await;
        let f = |r: &Ran| share(r, from, to, first_model);
        (f(&on), f(&off))
    });
    for (seed, (on, off)) in &figures {
        eprintln!(
            "seed {seed}: first model {:.1} % on, {:.1} % off ({from}–{to} s)",
            on * 100.0,
            off * 100.0
        );
    }
    for (seed, (on, _)) in figures {
        assert!(on >= 0.85, "seed {seed}: first model answered {:.1} %", on * 100.0);
    }
}

/// Answered, first-model share and p99 of `scenario` on and off, at
/// every seed: as many answered (within a point), as many by the first
/// model (within `first_pp` points) and p99 within 10 %.
fn on_and_off(scenario: &'static str, minutes: u64, first_pp: f64) {
    let figures = each_seed(SEEDS, |seed| async move {
        let on = run(scenario, minutes, seed, config(true)).await;
        let off = run(scenario, minutes, seed, config(false)).await;
        let f = |r: &Ran| {
            let all = minutes * 60;
            (share(r, 0, all, answered), share(r, 0, all, first_model), p99(r))
        };
        (f(&on), f(&off))
    });
    for (seed, ((a, m, p), (a_off, m_off, p_off))) in &figures {
        eprintln!(
            "{scenario} seed {seed}: answered {:.1} % / {:.1} %, first model {:.1} % / {:.1} %, p99 {p} / {p_off} ms (on / off)",
            a * 100.0,
            a_off * 100.0,
            m * 100.0,
            m_off * 100.0
        );
    }
    for (seed, ((a, m, p), (a_off, m_off, p_off))) in figures {
        assert!(
            a >= a_off - 0.01,
            "{scenario} seed {seed}: answered {a:.4} against {a_off:.4}"
        );
        assert!(
            m >= m_off - first_pp / 100.0,
            "{scenario} seed {seed}: first model {m:.4} against {m_off:.4}"
        );
        assert!(
            10 * p <= 11 * p_off,
            "{scenario} seed {seed}: p99 {p} ms against {p_off} ms"
        );
    }
}

#[test]
fn calm_traffic_is_answered_as_without_it() {
    on_and_off("calm", 2, 0.0);
}

#[test]
fn the_tour_is_answered_as_without_it() {
    // Its outage (15–75 s) and 429 storm (90–150 s) and what follows.
    // The first model's share moves by up to 1.6 points either way: the
    // breaker's half-open ramp meets the limit at other times.
    on_and_off("tour", 3, 2.0);
}

/// `openai`'s calls while its capacity is down (180–480 s): the share of
/// the capacity its answered calls used (call time inside the window over
/// 15 calls × 300 s), its calls and how many were 429'd.
fn during_the_drop(r: &Ran) -> (f64, usize, usize) {
    const FROM: u64 = 180_000;
    const TO: u64 = 480_000;
    let mut busy_ms = 0u64;
    let (mut calls, mut rate_limited) = (0, 0);
    for c in r.openai.iter().filter(|c| c.to_ms > FROM && c.from_ms < TO) {
        calls += 1;
        match c.status {
            Some(200) => busy_ms += c.to_ms.min(TO) - c.from_ms.max(FROM),
            Some(429) => rate_limited += 1,
            _ => {}
        }
    }
    (busy_ms as f64 / (15.0 * (TO - FROM) as f64), calls, rate_limited)
}

#[test]
fn a_dropped_capacity_is_found_at_every_seed() {
    // Eight minutes: the drop ends at 480 s.
    let figures = each_seed(SEEDS, |seed| async move {
        during_the_drop(&run("capacity-drop", 8, seed, config(true)).await)
    });
    for (seed, (goodput, calls, limited)) in &figures {
        eprintln!(
            "capacity-drop seed {seed}: goodput {:.1} %, {limited} of {calls} calls 429'd ({:.1} %)",
            goodput * 100.0,
            *limited as f64 * 100.0 / *calls as f64
        );
    }
    for (seed, (goodput, calls, limited)) in figures {
        assert!(goodput >= 0.9, "seed {seed}: goodput {goodput:.3}");
        assert!(limited * 20 <= calls, "seed {seed}: {limited} of {calls} calls 429'd");
    }
}
