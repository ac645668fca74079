//! The fallback-chains pane: each route's chain with every hop's live
//! availability, then recent requests with the path they actually took.

use super::{pane_block, scroll};
use crate::tui::app::{App, Pane};
use crate::tui::theme::Theme;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

/// Draws the chains pane.
pub fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let mut lines = Vec::new();
    for (route, hops) in &app.snap.routes {
        let mut spans = vec![Span::styled(format!("{route}: "), theme.title)];
        for (i, h) in hops.iter().enumerate() {
            if i > 0 {
                spans.push(Span::styled(" → ", theme.dim));
            }
            let (mark, style) = if h.available {
                ("✓", theme.state_closed)
            } else {
                ("✗", theme.state_open)
            };
            spans.push(Span::styled(format!("{} {mark}", h.model), style));
            if !h.available {
                spans.push(Span::styled(" (open)", theme.dim));
            }
        }
        lines.push(super::fit(Line::from(spans), area.width.saturating_sub(2) as usize));
    }
    let rows = app.recent_rows();
    let sel = app.selection(Pane::Chains);
    let focused = app.focus == Pane::Chains;
    let height = (area.height as usize).saturating_sub(2 + lines.len());
    let first = scroll(sel, height);
    // Ids as wide as the widest shown, so the columns after them line up.
    let idw = rows
        .iter()
        .skip(first)
        .take(height)
        .map(|r| r.id.to_string().len())
        .max()
        .unwrap_or(0)
        .max(6);
    for (i, r) in rows.iter().enumerate().skip(first).take(height) {
        let selected = focused && i == sel;
        // Replay: the recorded outcome, flagged up front when it differs
        // (a long chain would push a flag at the end out of the pane).
        let recorded = app.opts.replay.as_ref().and_then(|k| k.recorded(r.id));
        let differs = recorded.as_ref().is_some_and(|o| o.level != r.level);
        let mut spans = vec![
            Span::styled(if selected { "▶ " } else { "  " }, theme.selected),
            Span::styled(
                match &r.instance {
                    Some(i) => format!("#{:<idw$} {i} {:<13} ", r.id, r.user),
                    None => format!("#{:<idw$} {:<13} ", r.id, r.user),
                },
                if selected { theme.selected } else { theme.dim },
            ),
            Span::styled(if differs { "≠ " } else { "" }, theme.warn),
            // Level and quality first: the path's length varies.
            Span::styled(format!("{:<8}", r.level.as_str()), theme.level(r.level)),
            Span::raw(format!(" q={:.2}  ", r.quality)),
        ];
        // A request that did not get its answer says why before its path,
        // which may not be why (a refusal while a breaker is open).
        match r.why.as_deref().filter(|_| r.level != crate::outcome::Level::None) {
            Some(why) => {
                let why = why.strip_prefix("Request ").unwrap_or(why).trim_end_matches('.');
                spans.push(Span::styled(why.to_string(), theme.warn));
                if !r.chain.is_empty() {
                    spans.push(Span::styled(format!("  path {}", r.chain), theme.dim));
                }
            }
            None => spans.push(Span::raw(r.chain.clone())),
        }
        if !r.missing.is_empty() {
            spans.push(Span::styled(format!(" missing {}", r.missing), theme.warn));
        }
        lines.push(super::fit(Line::from(spans), area.width.saturating_sub(2) as usize));
        if selected && app.opts.replay.is_some() {
            lines.push(Line::from(match recorded {
                Some(o) => vec![
                    Span::styled("    recorded: ", theme.dim),
                    Span::styled(o.level.as_str(), theme.level(o.level)),
                    if differs {
                        Span::styled(format!(" (replayed {})", r.level.as_str()), theme.warn)
                    } else {
                        Span::styled(" (same)", theme.dim)
                    },
                    Span::raw(format!(" q={:.2} {} tok  ", o.quality, o.tokens)),
                    Span::raw(o.chain.join(" → ")),
                ],
                None => vec![Span::styled(
                    "    recorded: no outcome in the log for this request",
                    theme.dim,
                )],
            }));
        }
    }
    if rows.is_empty() {
        lines.push(Line::from(Span::styled("  no requests yet", theme.dim)));
    }
    let p = Paragraph::new(lines).block(pane_block(
        app,
        Pane::Chains,
        theme,
        &format!("{} recent", app.recent.len()),
    ));
    f.render_widget(p, area);
}
