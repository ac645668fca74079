//! What an event says, in one line: the events pane's rows, what the
//! console keeps past the snapshots and the incident export all read it.

use crate::telemetry::events::{BudgetWarning, RefillFrozen, SpendRateTrip, Transition};
use crate::telemetry::events::{Event, EventKind, InstanceChange};

/// `mm:ss` (or `h:mm:ss`) of a millisecond count.
pub fn clock(ms: u64) -> String {
    let s = ms / 1000;
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{:02}:{:02}", s / 60, s % 60)
    }
}

/// One line describing an event.
pub fn describe(e: &Event) -> String {
    match &e.instance {
        Some(i) => format!("[{i}] {}", what(e)),
        None => what(e),
    }
}

fn what(e: &Event) -> String {
    match &e.kind {
        EventKind::Transition(Transition {
            breaker,
            from,
            to,
            reason,
        }) => format!("{breaker} {from} → {to}: {reason}"),
        EventKind::BudgetWarning(BudgetWarning {
            scope,
            budget,
            used,
            limit,
        }) => {
            format!(
                "budget warning {}: {} {budget} at {:.0}% ({used:.0} of {limit:.0})",
                scope.user(),
                scope.kind(),
                used / limit * 100.0
            )
        }
        EventKind::BudgetRejected { user, reason } => format!("rejected {user}: {reason}"),
        EventKind::SpendRateTripped(SpendRateTrip { scope, trip }) => format!(
            "spend-rate breaker {} {} open {}s: {}",
            scope.kind(),
            scope.user(),
            trip.until_ms.saturating_sub(e.t_ms) / 1000,
            trip.describe()
        ),
        EventKind::RefillFrozen(RefillFrozen {
            provider,
            for_ms,
            reason,
        }) => match for_ms {
            Some(ms) => format!("{provider} refills frozen {:.1}s: {reason}", *ms as f64 / 1000.0),
            None => format!("{provider} refills frozen: {reason}"),
        },
        EventKind::Operator {
            command, by, result, ..
        } => format!("operator {by}: {} — {result}", command.describe()),
        EventKind::CommandRefused { sent, by, reason } => format!("operator {by}: refused {sent}: {reason}"),
        EventKind::Deferred { request, reason } => format!("deferred #{request}: {reason}"),
        EventKind::DeferredDone { request, level } => format!("deferred #{request} ended: {}", level.as_str()),
        EventKind::RecordingFailed { path, error } => format!("recording to {path} stopped: {error}"),
        EventKind::Reloaded { changes, applied: true } => format!("config reloaded: {changes}"),
        EventKind::Reloaded {
            changes,
            applied: false,
        } => format!("config reload refused: {changes}"),
        EventKind::EventsSkipped { target, request, count } => {
            format!(
                "{target} sent {count} stream event(s) that could not be read in #{request}: skipped, not passed on"
            )
        }
        EventKind::Instance { change, detail } => {
            let what = match change {
                InstanceChange::Lost => "lost",
                InstanceChange::Back => "back",
                InstanceChange::Restarted => "restarted",
            };
            format!("instance {what}: {detail}")
        }
        EventKind::Outcome(o) => format!("#{} {}", o.request, o.level.as_str()),
        EventKind::Request(r) => format!("#{} from {}", r.request.id, r.request.user),
        EventKind::Attempt(a) => format!("#{} {} {:?}", a.request, a.target, a.status),
        EventKind::Step(s) => format!("#{} {} {:?}", s.request, s.target, s.kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resilience::budget::{Budget, Scope, Window};

    fn warning(scope: Scope, budget: Budget) -> Event {
        Event {
            t_ms: 0,
            kind: EventKind::BudgetWarning(BudgetWarning {
                scope,
                budget,
                used: 850.0,
                limit: 1000.0,
            }),
            instance: None,
        }
    }

    #[test]
    fn a_budget_warning_names_whose_budget_it_is_and_which() {
        let user = warning(Scope::User("alice".into()), Budget::tokens(Window::Minute));
        assert_eq!(
            describe(&user),
            "budget warning alice: user tokens/minute at 85% (850 of 1000)"
        );
        let global = warning(Scope::Global, Budget::usd(Window::Day));
        assert_eq!(
            describe(&global),
            "budget warning *: global cost/day (USD) at 85% (850 of 1000)"
        );
        // As the live view sends it to an attached console, and back.
        let wire = serde_json::to_string(&user).unwrap();
        assert_eq!(serde_json::from_str::<Event>(&wire).unwrap(), user);
    }
}
