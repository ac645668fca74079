//! The events pane: transitions with reasons, operator actions, budget
//! warnings, freezes and deferred-queue activity, newest first.

use super::{clock, pane_block, scroll};
use crate::resilience::breaker::BreakerState;
use crate::telemetry::events::{BudgetWarning, RefillFrozen, Transition};
use crate::telemetry::events::{Event, EventKind, InstanceChange};
use crate::tui::app::{App, Pane};
use crate::tui::theme::Theme;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

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
