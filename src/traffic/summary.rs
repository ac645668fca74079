//! The headless summary: the JSON later work relies on (exact top-level
//! fields), built from the runner's totals and the transitions seen.

use crate::runner::Runner;
use crate::target::Target;
use crate::traffic::log::TransitionRec;

use crate::telemetry::events::{Event, EventKind};
use crate::telemetry::stats::StatsView;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

/// Outcomes by level.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct ByLevel {
    /// Full answers.
    pub none: u64,
    /// Answers with missing components.
    pub partial: u64,
    /// Answers from a fallback model or cache.
    pub fallback: u64,
    /// Deferred to the spool.
    pub deferred: u64,
    /// No answer.
    pub failed: u64,
}

impl From<[u64; 5]> for ByLevel {
    /// Counts in [`Level::ALL`](crate::outcome::Level::ALL) order.
    fn from(lv: [u64; 5]) -> Self {
        ByLevel {
            none: lv[0],
            partial: lv[1],
            fallback: lv[2],
            deferred: lv[3],
            failed: lv[4],
        }
    }
}

/// Token totals.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Tokens {
    /// All tokens consumed.
    pub consumed: u64,
    /// Tokens consumed by failed calls.
    pub wasted: u64,
}

/// The counts of each target's counters that the summary schema (v1)
/// holds.
fn counts<S: serde::Serializer>(targets: &BTreeMap<Target, StatsView>, s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Counts {
        attempts: u64,
        ok: u64,
        failed: u64,
        rejected_open: u64,
        rejected_rate: u64,
        retries: u64,
        client_errors: u64,
        #[serde(skip_serializing_if = "is_zero")]
        hedged: u64,
    }
    fn is_zero(n: &u64) -> bool {
        *n == 0
    }
    s.collect_map(targets.iter().map(|(t, v)| {
        let c = Counts {
            attempts: v.attempts,
            ok: v.ok,
            failed: v.failed,
            rejected_open: v.rejected_open,
            rejected_rate: v.rejected_rate,
            retries: v.retries,
            client_errors: v.client_errors,
            hedged: v.hedged,
        };
        (t, c)
    }))
}

/// The summary schema's version.
pub const SUMMARY_VERSION: u32 = 1;

/// The summary of a headless run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Summary {
    /// The schema's version ([`SUMMARY_VERSION`]): raised when a field
    /// changes meaning or goes; new fields may be added within a version.
    pub v: u32,
    /// Requests received.
    pub requests: u64,
    /// Requests with an outcome.
    pub completed: u64,
    /// Requests without an outcome (always 0).
    pub lost: u64,
    /// Outcomes by level.
    pub by_level: ByLevel,
    /// Deferred requests re-driven once their dependency recovered (or at
    /// the run's end), by how they then ended; one given up on (still
    /// failing when it expired) ends `failed`. Those in `by_level.deferred`
    /// and not here are still queued.
    pub redriven: ByLevel,
    /// Per-target counters (the summary shows the counts, not the
    /// latencies).
    #[serde(serialize_with = "counts")]
    pub targets: BTreeMap<Target, StatsView>,
    /// Every breaker transition, in order.
    pub transitions: Vec<TransitionRec>,
    /// Tokens.
    pub tokens: Tokens,
    /// Cost (USD).
    pub cost_usd: f64,
    /// Budget rejections per user.
    pub budget_rejections: BTreeMap<String, u64>,
    /// Every spend-rate breaker that opened, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spend_rate_trips: Vec<SpendRateRec>,
    /// Virtual time covered (ms).
    pub virtual_ms: u64,
    /// Real time taken (ms).
    pub wall_ms: u64,
    /// Log lines skipped as bad (replay with --skip-bad-lines only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bad_lines: Option<u64>,
    /// Log lines of an unknown kind, skipped (replay only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_kinds: Option<u64>,
    /// A torn last line, skipped (replay only: 0 or 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torn_lines: Option<u64>,
    /// Recorded operator actions this replay could not apply (replay only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator_not_applied: Option<u64>,
    /// Fleet mode only (`--state redis://…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<crate::fleet::FleetSummary>,
}

/// A spend-rate breaker that opened, when (virtual ms).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SpendRateRec {
    /// When it opened.
    pub t_ms: u64,
    /// Whose, and why.
    #[serde(flatten)]
    pub trip: crate::telemetry::events::SpendRateTrip,
}

/// Keeps a run's transitions and spend-rate trips (the only events a
/// summary needs) as they happen, so a long run does not hold every event;
/// the task ends when the bus closes its subscribers.
pub fn collect_transitions(runner: &Runner) -> tokio::task::JoinHandle<Vec<Event>> {
    let mut rx = runner.events().subscribe_notable();
    tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Some(e) = rx.recv().await {
            if matches!(e.kind, EventKind::Transition(_) | EventKind::SpendRateTripped(_)) {
                kept.push(e);
            }
        }
        kept
    })
}

impl Summary {
    /// Builds the summary from the runner and the events seen during the run.
    pub fn build(runner: &Runner, events: &[Event], lost_tasks: u64, virtual_ms: u64, wall_ms: u64) -> Self {
        let t = runner.totals();
        let lv = runner.by_level();
        let completed: u64 = lv.iter().sum();
        let requests = t.requests.load(Ordering::Relaxed);
        let transitions = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Transition(t) => Some(TransitionRec::of(e.t_ms, t)),
                _ => None,
            })
            .collect();
        let spend_rate_trips = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::SpendRateTripped(trip) => Some(SpendRateRec {
                    t_ms: e.t_ms,
                    trip: trip.clone(),
                }),
                _ => None,
            })
            .collect();
        Summary {
            v: SUMMARY_VERSION,
            requests,
            completed,
            lost: requests.saturating_sub(completed).max(lost_tasks),
            by_level: ByLevel::from(lv),
            redriven: ByLevel::from(
                runner
                    .totals()
                    .deferred_done
                    .each_ref()
                    .map(|n| n.load(Ordering::Relaxed)),
            ),
            targets: runner
                .catalog()
                .registry()
                .iter()
                .map(|t| (t.target.clone(), t.stats.view()))
                .collect(),
            transitions,
            tokens: Tokens {
                consumed: t.tokens.load(Ordering::Relaxed),
                wasted: t.wasted.load(Ordering::Relaxed),
            },
            cost_usd: (t.cost_micro_usd.load(Ordering::Relaxed) as f64 / 1e6 * 1e4).round() / 1e4,
            budget_rejections: t
                .budget_rejections
                .iter()
                .map(|e| (e.key().clone(), *e.value()))
                .collect(),
            spend_rate_trips,
            virtual_ms,
            wall_ms,
            bad_lines: None,
            unknown_kinds: None,
            torn_lines: None,
            operator_not_applied: None,
            fleet: None,
        }
    }
}
