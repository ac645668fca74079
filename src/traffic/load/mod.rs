//! The demo load generator: synthetic agent traffic (many users and
//! sessions, a request mix, an optional flooding tenant) plus the scenario's
//! fault timeline, driven through the runner. Arrivals and request contents
//! come from the seed, so a run is reproducible.

pub mod scenario;
pub mod synth;

use crate::clock::{purpose, Seed};
use crate::command::{Command, Issuer};
use crate::outcome::Outcome;
use crate::provider::Message;
use crate::request::AgentRequest;
use crate::runner::Runner;
use compact_str::format_compact;
use scenario::Scenario;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::Instant;

const SYSTEM_PROMPT: &str = "You are the customer-support agent of an online shop. Use the tools to look up \
orders, shipping and help-centre articles. Be brief and accurate; never invent order data. If a tool is \
unavailable, say what you could not check.";

const QUESTIONS: &[&str] = &[
    "When will my order #{} arrive?",
    "My order #{} says shipped but nothing came. Can you check?",
    "Can I still change the address on order #{}?",
    "What is the return policy for order #{}?",
    "Please notify me when order #{} ships.",
];

/// Request ids of the flooding tenant start here (ordinary ones count from 1).
pub const NOISY_IDS: u64 = 9_000_000;

/// One request of ordinary traffic.
pub fn make_request(seed: Seed, id: u64, users: u32) -> AgentRequest {
    let mut rng = seed.stream(purpose::LOAD, id);
    let user = rng.u32(0..users);
    let order = 38_000 + rng.u32(0..200);
    let q = QUESTIONS[rng.usize(..QUESTIONS.len())].replace("{}", &order.to_string());
    AgentRequest {
        id,
        user: format_compact!("user-{user:04}"),
        session: format_compact!("user-{user:04}/s{}", rng.u32(0..3)),
        route: "default".into(),
        messages: [Message::system(SYSTEM_PROMPT), Message::user(q)].into(),
        tools: vec![
            "get_order".into(),
            "lookup_shipping".into(),
            "search_docs".into(),
            "send_notification".into(),
        ],
        critical_tools: Vec::new(),
        max_tokens: 512,
        max_steps: 4,
        sub_user: None,
    }
}

fn noisy_request(seed: Seed, id: u64, user: &str, chars: usize) -> AgentRequest {
    let mut rng = seed.stream(purpose::LOAD, id);
    let doc = "Summarise this contract clause by clause. ".repeat(chars / 42 + 1);
    AgentRequest {
        id,
        user: user.into(),
        session: format_compact!("{user}/s{}", rng.u32(0..50)),
        route: "default".into(),
        messages: [Message::system(SYSTEM_PROMPT), Message::user(doc)].into(),
        tools: vec!["search_docs".into()],
        critical_tools: Vec::new(),
        max_tokens: 1024,
        max_steps: 2,
        sub_user: None,
    }
}

/// Exponential inter-arrival time for `rps`, from a uniform draw.
fn gap(u: f64, rps: f64) -> Duration {
    Duration::from_secs_f64(-(1.0 - u).max(1e-12).ln() / rps)
}

/// What a demo run produced.
pub struct DemoRun {
    /// Outcomes of every request, in arrival order.
    pub outcomes: Vec<Outcome>,
    /// Requests whose task ended without an outcome (must be 0).
    pub lost: u64,
}

/// Drives `scenario` through `runner` for `duration` of (virtual) time, then
/// waits for every request and ends every deferred request.
pub async fn run_scenario(runner: Arc<Runner>, scenario: &Scenario, duration: Duration, seed: Seed) -> DemoRun {
    let start = Instant::now();
    let end = start + duration;
    let mut background = JoinSet::new();
    {
        let runner = runner.clone();
        let sc = scenario.clone();
        background.spawn(async move { apply_timeline(runner, sc, start, end).await });
    }
    background.spawn(runner.clone().run_deferred_loop());

    // Arrivals are generated as they come (two Poisson streams merged), so a
    // long run never holds its whole future in memory.
    let mut ordinary = seed.stream(purpose::LOAD, u64::MAX);
    let mut next_ordinary = Some(start + gap(ordinary.f64(), scenario.rps)).filter(|t| *t < end);
    let mut noisy_rng = seed.stream(purpose::LOAD, u64::MAX - 1);
    let noisy_stop = scenario
        .noisy
        .as_ref()
        .map(|n| (start + Duration::from_secs(n.to_s)).min(end));
    let mut next_noisy = scenario
        .noisy
        .as_ref()
        .map(|n| start + Duration::from_secs(n.from_s) + gap(noisy_rng.f64(), n.rps))
        .filter(|t| noisy_stop.is_some_and(|stop| *t < stop));
    let mut tasks: JoinSet<(usize, Outcome)> = JoinSet::new();
    let mut outcomes: Vec<Option<Outcome>> = Vec::new();
    let (mut id, mut nid) = (0u64, NOISY_IDS);
    loop {
        let (at, req) = match (next_ordinary, next_noisy, &scenario.noisy) {
            (Some(o), n, _) if n.is_none_or(|n| o <= n) => {
                id += 1;
                next_ordinary = Some(o + gap(ordinary.f64(), scenario.rps)).filter(|t| *t < end);
                (o, make_request(seed, id, scenario.users))
            }
            (_, Some(n), Some(noisy)) => {
                nid += 1;
                next_noisy =
                    Some(n + gap(noisy_rng.f64(), noisy.rps)).filter(|t| noisy_stop.is_some_and(|stop| *t < stop));
                (n, noisy_request(seed, nid, &noisy.user, noisy.prompt_chars))
            }
            _ => break,
        };
        tokio::time::sleep_until(at).await;
        while let Some(done) = tasks.try_join_next() {
            keep(&mut outcomes, done);
        }
        let r = runner.clone();
        let i = outcomes.len();
        outcomes.push(None);
        tasks.spawn(async move { (i, r.run(&req).await) });
    }
    while let Some(done) = tasks.join_next().await {
        keep(&mut outcomes, done);
    }
    background.abort_all();
    // Every deferred request ends in an outcome before we stop.
    runner.redrive_deferred(false).await;
    runner.redrive_deferred(true).await;
    let lost = outcomes.iter().filter(|o| o.is_none()).count() as u64;
    DemoRun {
        outcomes: outcomes.into_iter().flatten().collect(),
        lost,
    }
}

fn keep(outcomes: &mut [Option<Outcome>], done: Result<(usize, Outcome), tokio::task::JoinError>) {
    match done {
        Ok((i, o)) => outcomes[i] = Some(o),
        Err(e) => tracing::error!(error = %e, "request task ended without an outcome"),
    }
}

async fn apply_timeline(runner: Arc<Runner>, sc: Scenario, start: Instant, end: Instant) {
    let mut steps = sc.timeline.clone();
    steps.sort_by_key(|s| s.at_s);
    let mut round = 0u64;
    loop {
        for s in &steps {
            let at = start + Duration::from_secs(round * sc.repeat_s + s.at_s);
            if at >= end {
                return;
            }
            tokio::time::sleep_until(at).await;
            let cmd = Command::SetFault {
                target: s.target.clone(),
                fault: s.spec(),
            };
            if let Err(e) = runner.apply(&cmd, &Issuer::operator(&format!("scenario {}", sc.name))) {
                tracing::warn!(error = %e, "scenario step skipped");
            }
        }
        if sc.repeat_s == 0 || steps.is_empty() {
            return;
        }
        round += 1;
    }
}
