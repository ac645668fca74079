//! Synthetic traffic logs for replay benchmarks: gateway-shaped traffic,
//! seeded, so the same arguments give the same log.

use crate::outcome::Level;
use crate::request::Via;
use crate::traffic::log::{AttemptRec, Header, OutcomeRec, Record, RequestRec, VERSION};
use compact_str::format_compact;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;

/// Writes `n` one-call requests at `rps` a second from 20,000 users, each
/// answered by openai's gpt-4o (200, 200–600 ms), with attempts and outcomes
/// at their end times as fusebox writes them.
pub fn gateway_log(n: u64, rps: u64, out: &mut impl Write) -> std::io::Result<()> {
    let rps = rps.max(1);
    let mut rng = fastrand::Rng::with_seed(1);
    let header = Record::Header(Header {
        v: VERSION,
        started_at: "2026-11-29T00:00:00Z".into(),
        seed: 42,
        tools: Default::default(),
    });
    writeln!(out, "{}", header.to_line())?;
    // Lines not yet due, by time and then by order of creation.
    let mut later: BinaryHeap<Reverse<(u64, u64, String)>> = BinaryHeap::new();
    let mut seq = 0u64;
    for id in 1..=n {
        let t = id * 1000 / rps;
        while later.peek().is_some_and(|Reverse((at, ..))| *at <= t) {
            if let Some(Reverse((_, _, line))) = later.pop() {
                writeln!(out, "{line}")?;
            }
        }
        let user = format_compact!("user-{}", rng.u32(..20_000));
        let request = Record::Request(RequestRec {
            t_ms: t,
            id: id.into(),
            session: crate::request::own_session(&user, id),
            user,
            sub_user: None,
            tenant: None,
            route: "default".into(),
            prompt_tokens: 60 + rng.u32(..20),
            max_tokens: 256,
            tools: Vec::new(),
            critical_tools: Vec::new(),
            max_steps: Some(1),
            messages: None,
            content_hash: None,
            answer_key: None,
            via: Via::Agent,
            priority: None,
            choices: None,
            reach: None,
            stream: false,
        });
        writeln!(out, "{}", request.to_line())?;
        let latency = 200 + rng.u64(..400);
        let end = t + latency;
        let attempt = Record::Attempt(AttemptRec {
            t_ms: end,
            request: id.into(),
            target: crate::target::Target::provider("openai"),
            model: Some("gpt-4o".into()),
            status: Some(200),
            transport: None,
            latency_ms: latency,
            input_tokens: 70,
            output_tokens: 40,
            headers: Default::default(),
            semantic_failure: None,
            tool_calls: Vec::new(),
            tool_keys: Vec::new(),
            answer: None,
            response_id: None,
            cut: None,
            cost_usd: None,
        });
        let outcome = Record::Outcome(OutcomeRec {
            t_ms: end,
            request: id.into(),
            level: Level::None,
            chain: vec!["gpt-4o ✓".into()],
            quality: 1.0,
            tokens: 110,
            cost_usd: 0.0005,
            missing: Vec::new(),
            key: None,
        });
        for line in [attempt.to_line(), outcome.to_line()] {
            later.push(Reverse((end, seq, line)));
            seq += 1;
        }
    }
    while let Some(Reverse((_, _, line))) = later.pop() {
        writeln!(out, "{line}")?;
    }
    out.flush()
}
