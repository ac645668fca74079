//! The limiters pane: per provider, token buckets as gauges (TPM, or input
//! and output buckets), RPM, concurrency, calibration, 429s and freezes.

use super::{bar, gauge_style, human, pane_block, scroll};
use crate::tui::app::{App, Pane};
use crate::tui::theme::Theme;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

/// Draws the limiters pane.
pub fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let sel = app.selection(Pane::Limiters);
    let focused = app.focus == Pane::Limiters;
    let per = 2usize;
    let height = area.height.saturating_sub(2) as usize / per;
    let first = scroll(sel, height);
    let mut lines = Vec::new();
    for (i, row) in app.snap.limiters.iter().enumerate().skip(first).take(height) {
        let l = &row.limiter;
        let selected = focused && i == sel;
        let mut first_line = vec![
            Span::styled(if selected { "▶ " } else { "  " }, theme.selected),
            Span::styled(
                format!("{:<10}", row.provider),
                if selected { theme.selected } else { theme.title },
            ),
        ];
        for (name, b) in [("TPM", l.tpm), ("ITPM", l.itpm), ("OTPM", l.otpm), ("RPM", l.rpm)] {
            if let Some((level, cap)) = b {
                let used = 1.0 - level / cap;
                first_line.push(Span::raw(format!(" {name} ")));
                first_line.push(Span::styled(bar(level / cap, 8), gauge_style(theme, used)));
                first_line.push(Span::raw(format!(" {}/{}", human(level.max(0.0)), human(cap))));
            }
        }
        if l.tpm.is_none() && l.itpm.is_none() && l.rpm.is_none() {
            first_line.push(Span::styled(" no token or request limits", theme.dim));
        }
        lines.push(Line::from(first_line));
        let (inflight, max) = l.concurrency;
        let conc = if max > 0 {
            format!("conc {inflight}/{max}")
        } else {
            format!("conc {inflight}/–")
        };
        let mut second = vec![
            Span::raw("    "),
            Span::styled(
                conc,
                if max > 0 && inflight >= max {
                    theme.warn
                } else {
                    theme.dim
                },
            ),
            Span::raw(format!(
                "  429s {}  waited-out {}  cpt {:.1}",
                l.rate_limited, l.rejected, l.chars_per_token
            )),
            Span::styled(
                match l.calibrated_ms_ago {
                    Some(ms) => format!("  calibrated {}s ago", ms / 1000),
                    None => "  not calibrated".into(),
                },
                theme.dim,
            ),
        ];
        match l.frozen {
            Some(Some(ms)) => second.push(Span::styled(
                format!("  FROZEN {:.0}s (retry-after)", (ms as f64 / 1000.0).ceil()),
                theme.badge,
            )),
            Some(None) => second.push(Span::styled("  FROZEN (operator)", theme.badge)),
            None => {}
        }
        lines.push(Line::from(second));
    }
    let p = Paragraph::new(lines).block(pane_block(app, Pane::Limiters, theme, ""));
    f.render_widget(p, area);
}
