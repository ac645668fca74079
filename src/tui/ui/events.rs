//! The events pane: transitions with reasons, operator actions, budget
//! warnings, freezes and deferred-queue activity, newest first.

use super::{clock, pane_block, scroll};
use crate::resilience::breaker::BreakerState;
use crate::telemetry::events::{BudgetWarning, RefillFrozen, SpendRateTrip, Transition};
use crate::telemetry::events::{Event, EventKind, InstanceChange};
use crate::tui::app::{App, Pane};
use crate::tui::theme::Theme;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

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

fn style(theme: &Theme, e: &Event) -> Style {
    match &e.kind {
        EventKind::Transition(Transition { to, .. }) if !to.admits() => theme.state_open,
        EventKind::Transition(Transition {
            to: BreakerState::Closed,
            ..
        }) => theme.state_closed,
        EventKind::Transition(Transition { .. }) => theme.state_half_open,
        EventKind::Operator { .. }
        | EventKind::Reloaded { .. }
        | EventKind::Instance {
            change: InstanceChange::Back | InstanceChange::Restarted,
            ..
        } => theme.badge,
        EventKind::Instance {
            change: InstanceChange::Lost,
            ..
        } => theme.error,
        EventKind::BudgetWarning(BudgetWarning { .. })
        | EventKind::RefillFrozen(RefillFrozen { .. })
        | EventKind::EventsSkipped { .. } => theme.warn,
        EventKind::BudgetRejected { .. }
        | EventKind::SpendRateTripped(_)
        | EventKind::RecordingFailed { .. }
        | EventKind::CommandRefused { .. } => theme.error,
        _ => theme.dim,
    }
}

/// Draws the events pane.
pub fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let rows = app.event_rows();
    let sel = app.selection(Pane::Events);
    let focused = app.focus == Pane::Events;
    let height = area.height.saturating_sub(2) as usize;
    let first = scroll(sel, height);
    let mut lines: Vec<Line> = rows
        .iter()
        .enumerate()
        .skip(first)
        .take(height)
        .map(|(i, r)| {
            let selected = focused && i == sel;
            let mut spans = vec![
                Span::styled(if selected { "▶" } else { " " }, theme.selected),
                Span::styled(format!("{} ", clock(r.event.t_ms)), theme.dim),
                Span::styled(
                    r.said.clone(),
                    if selected {
                        theme.selected
                    } else {
                        style(theme, r.event)
                    },
                ),
            ];
            if r.repeats > 1 {
                spans.push(Span::styled(
                    format!("  ×{} since {}", r.repeats, clock(r.first.t_ms)),
                    theme.dim,
                ));
            }
            super::fit(Line::from(spans), area.width.saturating_sub(2) as usize)
        })
        .collect();
    if lines.is_empty() {
        lines.push(Line::from(Span::styled(" nothing notable yet", theme.dim)));
    }
    let extra = if app.events_paused { "PAUSED" } else { "" };
    f.render_widget(
        Paragraph::new(lines).block(pane_block(app, Pane::Events, theme, extra)),
        area,
    );
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
