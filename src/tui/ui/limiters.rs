//! The limiters pane: per provider, token buckets as gauges (TPM, or input
//! and output buckets), RPM, concurrency, the waiting queue by priority
//! and whom it sheds, calibration, 429s and freezes.

use super::{bar, human, pane_block, scroll};
use crate::resilience::limiter::Frozen;
use crate::tui::app::{App, Pane};
use crate::tui::theme::Theme;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

/// Lines drawn per provider.
pub const LINES_PER_PROVIDER: usize = 3;

/// Draws the limiters pane.
pub fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let sel = app.selection(Pane::Limiters);
    let focused = app.focus == Pane::Limiters;
    let width = area.width.saturating_sub(2) as usize;
    let height = area.height.saturating_sub(2) as usize / LINES_PER_PROVIDER;
    let first = scroll(sel, height);
    let mut lines = Vec::new();
    for (i, row) in app.snap.limiters.iter().enumerate().skip(first).take(height) {
        let l = &row.limiter;
        let selected = focused && i == sel;
        let (inflight, max) = l.concurrency;
        let conc = if max > 0 {
            format!("conc {inflight}/{max}")
        } else {
            format!("conc {inflight}/–")
        };
        let mut head = vec![
            Span::styled(if selected { "▶ " } else { "  " }, theme.selected),
            Span::styled(
                format!("{:<10}", super::row_name(app, &row.provider, row.instance.as_deref())),
                if selected { theme.selected } else { theme.title },
            ),
            Span::styled(
                format!(" {conc}"),
                if max > 0 && inflight >= max {
                    theme.warn
                } else {
                    theme.base
                },
            ),
        ];
        if let Some(a) = l.adaptive {
            let moved = match (a.moved, a.moved_ms_ago) {
                (Some(m), Some(ms)) => format!(" {} {}s ago", m.short(), ms / 1000),
                _ => String::new(),
            };
            head.push(Span::styled(format!(" adaptive{moved}"), theme.dim));
        }
        head.push(Span::raw(format!(
            "  429s {}  waited-out {}",
            l.rate_limited, l.rejected
        )));
        match l.frozen {
            Some(Frozen::For { ms }) => head.push(Span::styled(
                format!("  FROZEN {:.0}s (retry-after)", (ms as f64 / 1000.0).ceil()),
                theme.badge,
            )),
            Some(Frozen::ByOperator) => head.push(Span::styled("  FROZEN (operator)", theme.badge)),
            None => {}
        }
        lines.push(super::fit(Line::from(head), width));
        let mut gauges: Vec<Vec<Span>> = Vec::new();
        for (name, b) in [("TPM", l.tpm), ("ITPM", l.itpm), ("OTPM", l.otpm), ("RPM", l.rpm)] {
            if let Some((level, cap)) = b {
                let left = (level / cap).clamp(0.0, 1.0);
                gauges.push(vec![
                    Span::raw(format!("{name:<4} ")),
                    Span::styled(bar(left, 8), theme.gauge(1.0 - left)),
                    Span::raw(format!(" {:>5}/{:<5} ", human(level.max(0.0)), human(cap))),
                ]);
            }
        }
        if let Some(q) = &l.queue {
            let waiting: u32 = q.waiting.iter().sum();
            let [c, d, b] = q.waiting;
            let mut g = vec![Span::styled(
                format!("queue c{c} d{d} b{b} "),
                if waiting > 0 { theme.warn } else { theme.base },
            )];
            let shed: u64 = q.shed.iter().sum();
            if shed > 0 {
                let most = q.shed_most.first().map_or("", |(t, _)| t.as_str());
                g.push(Span::styled(
                    format!("shed {} {most} ", human(shed as f64)),
                    theme.error,
                ));
            }
            gauges.push(g);
        }
        let calibrated = match l.calibrated_ms_ago {
            Some(ms) => format!("calibrated {}s ago", ms / 1000),
            None => "not calibrated".into(),
        };
        let info = vec![Span::styled(
            format!("cpt {:.1}  {calibrated}", l.chars_per_token),
            theme.dim,
        )];
        if gauges.is_empty() {
            gauges.push(vec![Span::styled("no token or request limits ", theme.dim)]);
        }
        gauges.push(info);
        let mut it = gauges.into_iter();
        for _ in 1..LINES_PER_PROVIDER {
            let mut spans = vec![Span::raw("    ")];
            for _ in 0..2 {
                if let Some(g) = it.next() {
                    spans.extend(g);
                }
            }
            lines.push(super::fit(Line::from(spans), width));
        }
    }
    let p = Paragraph::new(lines).block(pane_block(app, Pane::Limiters, theme, ""));
    f.render_widget(p, area);
}
