//! The budgets pane: the global budget, then users under the most pressure:
//! minute/hour/day usage gauges, cost, rejections; near-limit highlighted.

use super::{bar, human, pane_block, scroll};
use crate::tui::app::{App, Pane};
use crate::tui::theme::Theme;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

/// Draws the budgets pane.
pub fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let s = &app.snap;
    let g = &s.global;
    let mut lines = vec![Line::from(vec![
        Span::styled("global ", theme.title),
        Span::raw(format!(
            "tokens h/d {}/{}  ${:.2}/h ${:.2}/d  ",
            human(g.tokens[0]),
            human(g.tokens[1]),
            g.cost[0],
            g.cost[1]
        )),
        Span::styled(bar(g.pressure, 10), theme.gauge(g.pressure)),
        Span::raw(format!(" {:.0}%", g.pressure * 100.0)),
    ])];
    if g.spend_rate.open_ms > 0 {
        lines.push(Line::from(Span::styled(
            format!("  {}", rate_open(&g.spend_rate)),
            theme.error,
        )));
    }
    lines.push(Line::from(Span::styled(
        "  user                minute      hour        day          $/day   rej",
        theme.dim,
    )));
    let rows = app.user_rows();
    let sel = app.selection(Pane::Budgets);
    let focused = app.focus == Pane::Budgets;
    let height = area.height.saturating_sub(4) as usize;
    let first = scroll(sel, height);
    for (i, row) in rows.iter().enumerate().skip(first).take(height) {
        let u = &row.view;
        let selected = focused && i == sel;
        let near = u.pressure >= 0.8;
        let name_style = if selected {
            theme.selected
        } else if near {
            theme.warn
        } else {
            theme.base
        };
        let mut spans = vec![
            Span::styled(if selected { "▶" } else { " " }, theme.selected),
            Span::styled(if near { "!" } else { " " }, theme.warn),
            Span::styled(
                format!(
                    "{:<18}",
                    truncate(&super::row_name(app, &u.user, row.instance.as_deref()), 18)
                ),
                name_style,
            ),
        ];
        for (t, share) in u.tokens.iter().zip(u.shares) {
            spans.push(Span::raw(format!(" {:>5} ", human(*t))));
            spans.push(Span::styled(bar(share, 5), theme.gauge(share)));
        }
        spans.push(Span::styled(
            format!("  ${:>6.3}", u.cost_day),
            theme.gauge(u.shares[3]),
        ));
        spans.push(Span::styled(
            format!(" {:>4}", u.rejections),
            if u.rejections > 0 { theme.error } else { theme.dim },
        ));
        lines.push(Line::from(spans));
        if u.spend_rate.open_ms > 0 {
            lines.push(Line::from(Span::styled(
                format!("    {}", rate_open(&u.spend_rate)),
                theme.error,
            )));
        }
    }
    if rows.is_empty() {
        lines.push(Line::from(Span::styled("  no users yet", theme.dim)));
    }
    let extra = format!(
        "{} tracked · top {} by pressure · ! ≥ 80 % of a limit",
        s.tracked_users,
        s.top_users.len()
    );
    let p = Paragraph::new(lines).block(pane_block(app, Pane::Budgets, theme, &extra));
    f.render_widget(p, area);
}

/// An open spend-rate breaker, under its user's row (or the global one):
/// `spend-rate breaker open 4m12s: ×3.1 its baseline`.
fn rate_open(r: &crate::resilience::budget::RateView) -> String {
    let s = r.open_ms.div_ceil(1000);
    format!(
        "⊘ spend-rate breaker open {}m{:02}s: ×{:.1} its baseline",
        s / 60,
        s % 60,
        r.trip_ratio
    )
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('…')).collect()
    }
}
