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
use scenario::{Scenario, Tenant};
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

/// Request ids of the flooding tenant start here (ordinary ones count from
/// 1); those of the scenario's `k`-th tenant at `k` times [`TENANT_IDS`] more.
pub const NOISY_IDS: u64 = 9_000_000;

/// The room of request ids each tenant has.
pub const TENANT_IDS: u64 = 1_000_000_000;

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
        priority: None,
        tenant: None,
        choices: None,
        reach: None,
        stream: false,
    }
}

fn noisy_request(seed: Seed, id: u64, t: &Tenant) -> AgentRequest {
    let (user, chars) = (t.user.as_str(), t.prompt_chars);
    let mut rng = seed.stream(purpose::LOAD, id);
    let doc = "Summarise this contract clause by clause. ".repeat(chars / 42 + 1);
    AgentRequest {
        id,
        user: user.into(),
        session: format_compact!("{user}/s{}", rng.u32(0..50)),
        route: "default".into(),
        messages: [Message::system(SYSTEM_PROMPT), Message::user(doc)].into(),
        tools: if t.tools {
            vec!["search_docs".into()]
        } else {
            Vec::new()
        },
        critical_tools: Vec::new(),
        max_tokens: t.max_tokens,
        max_steps: if t.tools { 2 } else { 1 },
        sub_user: None,
        priority: t.priority,
        tenant: None,
        choices: None,
        reach: None,
        stream: false,
    }
}

/// One tenant's arrivals, as they come.
struct TenantArrivals<'s> {
    tenant: &'s Tenant,
    rng: fastrand::Rng,
    stop: Instant,
    next: Option<Instant>,
    /// The last request id given.
    id: u64,
}

impl<'s> TenantArrivals<'s> {
    /// The `k`-th tenant's arrivals within `[start, end)`.
    fn new(tenant: &'s Tenant, k: u64, seed: Seed, start: Instant, end: Instant) -> Self {
        let mut rng = seed.stream(purpose::LOAD, u64::MAX - 1 - k);
        let stop = (start + Duration::from_secs(tenant.to_s)).min(end);
        let next = Some(start + Duration::from_secs(tenant.from_s) + gap(rng.f64(), tenant.rps)).filter(|t| *t < stop);
        Self {
            tenant,
            rng,
            stop,
            next,
            id: NOISY_IDS + k * TENANT_IDS,
        }
    }

    /// Its next request and when it arrives; the one after is drawn.
    fn take(&mut self, seed: Seed) -> (Instant, AgentRequest) {
        let at = self.next.unwrap_or(self.stop);
        self.id += 1;
        self.next = Some(at + gap(self.rng.f64(), self.tenant.rps)).filter(|t| *t < self.stop);
        (at, noisy_request(seed, self.id, self.tenant))
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

    // Arrivals are generated as they come (Poisson streams merged: ordinary
    // traffic and each tenant's), so a long run never holds its whole future
    // in memory. Ordinary traffic goes first at a tie, then tenants in order.
    let mut ordinary = seed.stream(purpose::LOAD, u64::MAX);
    let mut next_ordinary = Some(start + gap(ordinary.f64(), scenario.rps)).filter(|t| *t < end);
    let mut tenants: Vec<TenantArrivals> = scenario
        .tenants()
        .enumerate()
        .map(|(k, t)| TenantArrivals::new(t, k as u64, seed, start, end))
        .collect();
    let mut tasks: JoinSet<(usize, Outcome)> = JoinSet::new();
    let mut outcomes: Vec<Option<Outcome>> = Vec::new();
    let mut id = 0u64;
    loop {
        let tenant = tenants.iter_mut().filter(|t| t.next.is_some()).min_by_key(|t| t.next);
        let (at, mut req) = match (next_ordinary, tenant) {
            (Some(o), t) if t.as_ref().is_none_or(|t| t.next.is_some_and(|n| o <= n)) => {
                id += 1;
                next_ordinary = Some(o + gap(ordinary.f64(), scenario.rps)).filter(|t| *t < end);
                (o, make_request(seed, id, scenario.users))
            }
            (_, Some(t)) => t.take(seed),
            _ => break,
        };
        // A scenario's callers have no keys: what they ask is their word.
        req.priority = runner.priority_for(&req.user, req.priority, &req.route);
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
            if let Err(e) = runner
                .operations()
                .apply(&cmd, &Issuer::operator(&format!("scenario {}", sc.name)))
            {
                tracing::warn!(error = %e, "scenario step skipped");
            }
        }
        if sc.repeat_s == 0 || steps.is_empty() {
            return;
        }
        round += 1;
    }
}
