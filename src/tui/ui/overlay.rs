//! Overlays: the help (every binding from the keymap) and the confirmation
//! of destructive commands.

use super::centered;
use crate::tui::app::{App, Overlay};
use crate::tui::keymap::KeyMap;
use crate::tui::theme::Theme;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

/// Draws the active overlay, if any.
pub fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme, keymap: &KeyMap) {
    match &app.overlay {
        Overlay::Help => help(f, area, app, theme, keymap),
        Overlay::Confirm { prompt, .. } => confirm(f, area, prompt, theme),
        Overlay::Detail => detail(f, area, app, theme),
        Overlay::None | Overlay::Filter => {}
    }
}

fn help(f: &mut Frame, area: Rect, app: &App, theme: &Theme, keymap: &KeyMap) {
    let rows = keymap.help_rows();
    let r = centered(area, 100, rows.len() as u16 + 6);
    // The action names are what a keymap file binds keys to.
    let mut lines = vec![Line::from(Span::styled(
        format!(" {:<16}{:<18}{}", "keys", "action", "what it does"),
        theme.dim,
    ))];
    lines.extend(rows.iter().map(|(keys, action)| {
        Line::from(vec![
            Span::styled(format!(" {keys:<16}"), theme.title),
            Span::styled(format!("{:<18}", action.name()), theme.dim),
            Span::raw(action.description()),
        ])
    }));
    lines.push(Line::from(""));
    let note = match &app.opts.readonly {
        Some(why) => format!(" read-only ({why}): commands that change the runner are disabled"),
        None if app.opts.yes => " --yes: destructive commands run without confirmation".into(),
        None => " destructive commands ask for confirmation".into(),
    };
    lines.push(Line::from(Span::styled(note, theme.dim)));
    f.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border_focused)
        .title(Span::styled(" Help — Esc to close ", theme.title));
    f.render_widget(Paragraph::new(lines).block(block).style(theme.base), r);
}

fn confirm(f: &mut Frame, area: Rect, prompt: &str, theme: &Theme) {
    let r = centered(area, 60, 6);
    f.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.warn)
        .title(Span::styled(" Confirm ", theme.warn));
    let text = vec![
        Line::from(Span::styled(prompt.to_string(), theme.base)),
        Line::from(""),
        Line::from(vec![
            Span::styled(" y ", theme.badge),
            Span::raw(" yes    "),
            Span::styled(" n ", theme.badge),
            Span::raw(" no (Esc)"),
        ]),
    ];
    f.render_widget(
        Paragraph::new(text)
            .block(block)
            .wrap(Wrap { trim: false })
            .style(theme.base),
        r,
    );
}

/// The selected breaker's figures and its transitions' reasons in full, or
/// the selected event's whole text.
fn detail(f: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let mut lines = Vec::new();
    let title = match app.focus {
        crate::tui::app::Pane::Breakers => match app.selected_breaker() {
            Some(b) => {
                breaker_detail(b, app, &mut lines);
                match &b.instance {
                    Some(i) => format!(" {} on {i} ", b.target),
                    None => format!(" {} ", b.target),
                }
            }
            None => " no breaker selected ".into(),
        },
        _ => match app.event_rows().get(app.selection(crate::tui::app::Pane::Events)) {
            Some(e) => {
                lines.push(Line::from(format!(
                    "{} {}",
                    super::clock(e.t_ms),
                    super::events::describe(e)
                )));
                " event ".into()
            }
            None => " no event selected ".into(),
        },
    };
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled("Esc or Enter closes", theme.dim)));
    let r = centered(area, 100, (lines.len() as u16 + 4).min(area.height));
    f.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border_focused)
        .title(Span::styled(title, theme.title));
    f.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false })
            .style(theme.base),
        r,
    );
}

fn breaker_detail(b: &crate::telemetry::snapshot::BreakerRow, app: &App, lines: &mut Vec<Line<'static>>) {
    let v = &b.breaker;
    let st = &b.stats;
    let pct = |x: f64| format!("{:.0}%", x * 100.0);
    lines.push(Line::from(format!(
        "state {} · failure {} · slow {} · {} calls in the window · {} failures in a row · {} trips",
        App::state_label(v.state),
        pct(v.failure_rate),
        pct(v.slow_rate),
        v.calls_in_window,
        v.consecutive_failures,
        v.trips
    )));
    if let Some(ms) = v.next_probe_ms {
        lines.push(Line::from(format!(
            "next probe in {:.0} s",
            (ms as f64 / 1000.0).ceil()
        )));
    }
    if let Some((stage, allowed)) = v.half_open_stage {
        lines.push(Line::from(format!(
            "half-open stage {} · {} of {allowed} probes in flight",
            stage + 1,
            v.probes_in_flight
        )));
    }
    let q = |h: &crate::telemetry::histogram::HistogramView| {
        let p = |x| h.quantile(x).map_or("-".to_string(), |ms| format!("{ms} ms"));
        format!(
            "p50 {} · p95 {} · p99 {} ({} calls)",
            p(0.5),
            p(0.95),
            p(0.99),
            h.count()
        )
    };
    let recent = app.latency(b).unwrap_or_default();
    lines.push(Line::from(format!("latency, last minute: {}", q(&recent))));
    lines.push(Line::from(format!("latency, since start: {}", q(&st.latency))));
    if st.ttft.count() > 0 {
        lines.push(Line::from(format!("time to first token, since start: {}", q(&st.ttft))));
    }
    lines.push(Line::from(format!(
        "calls {} · ok {} · failed {} (timeouts {}, semantic {}) · client errors {} · short-circuited {} · refused for capacity {} · retries {}",
        st.attempts, st.ok, st.failed, st.timeouts, st.semantic, st.client_errors, st.rejected_open, st.rejected_rate, st.retries
    )));
    let c = &b.config;
    lines.push(Line::from(format!(
        "opens at {} failures in a row, or {} failing (or {} slow, over {} ms) of a {:?} window of {} once {} calls; cooldown {} ms ×{} up to {} ms; half-open ramp {:?} needing {} success",
        c.consecutive_failures,
        pct(c.failure_rate),
        pct(c.slow_call_rate),
        c.slow_call_ms,
        c.window,
        c.window_size,
        c.minimum_calls,
        c.cooldown_ms,
        c.cooldown_multiplier,
        c.max_cooldown_ms,
        c.half_open_ramp,
        pct(c.half_open_success_rate)
    )));
    lines.push(Line::from(""));
    last_calls(b, app, lines);
    lines.push(Line::from(""));
    transitions(b, app, lines);
}

/// The row's last calls with their status and latency, newest first.
fn last_calls(b: &crate::telemetry::snapshot::BreakerRow, app: &App, lines: &mut Vec<Line<'static>>) {
    lines.push(Line::from("last calls (newest first):"));
    let seen = app.attempts.get(&crate::tui::app::row_key(b));
    for a in seen.iter().flat_map(|q| q.iter().rev()) {
        let how = match (a.status, a.transport) {
            (_, Some(t)) => format!("{t:?}").to_lowercase(),
            (Some(s), None) => s.to_string(),
            (None, None) => "-".into(),
        };
        let model = a.model.as_deref().map(|m| format!(" {m}")).unwrap_or_default();
        lines.push(Line::from(format!(
            "{} #{}{model} {how} in {} ms",
            super::clock(a.t_ms),
            a.request,
            a.latency_ms
        )));
    }
    if seen.is_none_or(|q| q.is_empty()) {
        lines.push(Line::from("  none seen yet"));
    }
}

/// The breaker's transitions with their whole reasons, newest first (on
/// an instance's row, that instance's).
fn transitions(b: &crate::telemetry::snapshot::BreakerRow, app: &App, lines: &mut Vec<Line<'static>>) {
    lines.push(Line::from("transitions (newest first):"));
    let mut any = false;
    for e in app.events().iter().rev() {
        if b.instance.is_some() && e.instance != b.instance {
            continue;
        }
        if let crate::telemetry::events::EventKind::Transition(t) = &e.kind {
            if t.breaker == b.target {
                any = true;
                lines.push(Line::from(format!(
                    "{} {} → {}: {}",
                    super::clock(e.t_ms),
                    t.from,
                    t.to,
                    t.reason
                )));
            }
        }
    }
    if !any {
        lines.push(Line::from("  none yet"));
    }
}
