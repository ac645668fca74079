//! What to do next about a breaker that is not letting calls through:
//! since when and why, where its traffic goes now and how much room that
//! has, and the runbook's advice, in two lines at the top of its detail.

use crate::resilience::breaker::BreakerState;
use crate::target::{Kind, Target};
use crate::telemetry::events::EventKind;
use crate::telemetry::snapshot::BreakerRow;
use crate::tui::app::{row_key, App};

/// The runbook section on breaker states.
const RUNBOOK: &str = "docs/operator.md, \"Breaker states\"";

/// The situation and the advice, or None for a breaker letting calls
/// through.
pub fn next_steps(b: &BreakerRow, app: &App) -> Option<[String; 2]> {
    let state = b.breaker.state?;
    if !matches!(
        state,
        BreakerState::Open | BreakerState::HalfOpen | BreakerState::ForcedOpen
    ) {
        return None;
    }
    let mut said = vec![format!("{} {}{}", b.target, state, since(b, app, state))];
    said.extend(elsewhere(&b.target, app));
    let advice = match state {
        BreakerState::ForcedOpen => format!(
            "held open by an operator, it never probes: r hands it back to automatic once it is healthy ({RUNBOOK})"
        ),
        BreakerState::HalfOpen => format!(
            "probing: it closes by itself if the probes pass; o holds it open if the outage is known ({RUNBOOK})"
        ),
        _ => {
            format!("a known outage? o holds it open without probes until r; otherwise it probes by itself ({RUNBOOK})")
        }
    };
    Some([said.join("; "), format!("→ {advice}")])
}

/// ` on 503 since 02:15`: the last trip's time and cause (the failed call
/// that tripped it, or the transition's reason).
fn since(b: &BreakerRow, app: &App, state: BreakerState) -> String {
    let trip = app.events().rev().find_map(|e| match &e.kind {
        EventKind::Transition(t)
            if t.breaker == b.target
                && (b.instance.is_none() || e.instance == b.instance)
                && matches!(t.to, BreakerState::Open | BreakerState::ForcedOpen)
                && t.from != BreakerState::HalfOpen =>
        {
            Some((e.t_ms, t.reason.clone()))
        }
        _ => None,
    });
    let failed = app.tripped_by.get(&row_key(b)).and_then(|(_, by)| by.last());
    let cause = match (state, failed) {
        (BreakerState::ForcedOpen, _) => None,
        (_, Some(f)) => Some(match (f.transport, f.status) {
            (Some(t), _) => format!("{t:?}").to_lowercase(),
            (None, Some(s)) => s.to_string(),
            (None, None) => "failures".into(),
        }),
        (_, None) => trip.as_ref().map(|(_, why)| why.clone()),
    };
    let mut out = String::new();
    if let Some(c) = cause {
        out.push_str(&format!(" on {c}"));
    }
    if let Some((t, _)) = trip {
        out.push_str(&format!(" since {}", super::clock(t)));
    }
    out
}

/// Where each route that had `target` first sends its traffic now, and
/// how full that provider's limiter is.
fn elsewhere(target: &Target, app: &App) -> Vec<String> {
    let s = &app.snap;
    let mine = |model: &str, provider: &str| match target.kind() {
        Kind::Model => model == target.name(),
        Kind::Provider => provider == target.name(),
        _ => false,
    };
    let mut out = Vec::new();
    for (route, chain) in &s.routes {
        let Some(at) = chain.iter().position(|h| mine(&h.model, &h.provider)) else {
            continue;
        };
        let said = match chain[at + 1..].iter().find(|h| h.available) {
            Some(next) => {
                let limiter = s
                    .limiters
                    .iter()
                    .find(|l| l.instance.is_none() && l.provider == next.provider);
                let mut room = limiter
                    .and_then(|l| fullest(&l.limiter))
                    .map(|(bucket, used)| format!(", {} {bucket} {:.0} % used", next.provider, used * 100.0))
                    .unwrap_or_default();
                if limiter.is_some_and(|l| l.limiter.frozen.is_some()) {
                    room.push_str(&format!(", {} refills frozen", next.provider));
                }
                format!("route {route} on {}{room}", next.model)
            }
            None => format!("route {route} has no model left: its requests fail or wait"),
        };
        if !out.contains(&said) {
            out.push(said);
        }
    }
    out
}

/// A limiter's most used bucket and how much of it is used.
fn fullest(l: &crate::resilience::limiter::LimiterView) -> Option<(&'static str, f64)> {
    [("TPM", l.tpm), ("ITPM", l.itpm), ("OTPM", l.otpm), ("RPM", l.rpm)]
        .into_iter()
        .filter_map(|(name, b)| {
            b.filter(|(_, cap)| *cap > 0.0)
                .map(|(level, cap)| (name, 1.0 - level / cap))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
}
