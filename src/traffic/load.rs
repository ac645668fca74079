//! The demo load generator: synthetic agent traffic (many users and
//! sessions, a request mix, an optional flooding tenant) plus the scenario's
//! fault timeline, driven through the runner. Arrivals and request contents
//! come from the seed, so a run is reproducible.

use super::scenario::Scenario;
use crate::clock::{purpose, Seed};
use crate::provider::Message;
use crate::runner::command::Command;
use crate::runner::outcome::Outcome;
use crate::runner::request::AgentRequest;
use crate::runner::Runner;
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
        user: format!("user-{user:04}"),
        session: format!("user-{user:04}/s{}", rng.u32(0..3)),
        route: "default".into(),
        messages: vec![Message::new("system", SYSTEM_PROMPT), Message::new("user", q)],
        tools: vec![
            "get_order".into(),
            "lookup_shipping".into(),
            "search_docs".into(),
            "send_notification".into(),
        ],
        critical_tools: Vec::new(),
        max_tokens: 512,
        max_steps: 4,
    }
}

fn noisy_request(seed: Seed, id: u64, user: &str, chars: usize) -> AgentRequest {
    let mut rng = seed.stream(purpose::LOAD, id);
    let doc = "Summarise this contract clause by clause. ".repeat(chars / 42 + 1);
    AgentRequest {
        id,
        user: user.into(),
        session: format!("{user}/s{}", rng.u32(0..50)),
        route: "default".into(),
        messages: vec![Message::new("system", SYSTEM_PROMPT), Message::new("user", doc)],
        tools: vec!["search_docs".into()],
        critical_tools: Vec::new(),
        max_tokens: 1024,
        max_steps: 2,
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

    let mut tasks: JoinSet<(usize, Outcome)> = JoinSet::new();
    let mut arrivals: Vec<(Instant, AgentRequest)> = Vec::new();
    let mut rng = seed.stream(purpose::LOAD, u64::MAX);
    let mut t = start;
    let mut id = 0u64;
    loop {
        t += gap(rng.f64(), scenario.rps);
        if t >= end {
            break;
        }
        id += 1;
        arrivals.push((t, make_request(seed, id, scenario.users)));
    }
    if let Some(n) = &scenario.noisy {
        let mut rng = seed.stream(purpose::LOAD, u64::MAX - 1);
        let mut t = start + Duration::from_secs(n.from_s);
        let stop = (start + Duration::from_secs(n.to_s)).min(end);
        let mut nid = NOISY_IDS;
        loop {
            t += gap(rng.f64(), n.rps);
            if t >= stop {
                break;
            }
            nid += 1;
            arrivals.push((t, noisy_request(seed, nid, &n.user, n.prompt_chars)));
        }
        arrivals.sort_by_key(|(t, r)| (*t, r.id));
    }
    let total = arrivals.len();
    for (i, (at, req)) in arrivals.into_iter().enumerate() {
        tokio::time::sleep_until(at).await;
        let r = runner.clone();
        tasks.spawn(async move { (i, r.run(req).await) });
    }
    let mut outcomes: Vec<Option<Outcome>> = vec![None; total];
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok((i, o)) => outcomes[i] = Some(o),
            Err(e) => tracing::error!(error = %e, "request task ended without an outcome"),
        }
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
            if let Err(e) = runner.apply(&cmd, &format!("scenario {}", sc.name)) {
                tracing::warn!(error = %e, "scenario step skipped");
            }
        }
        if sc.repeat_s == 0 || steps.is_empty() {
            return;
        }
        round += 1;
    }
}
