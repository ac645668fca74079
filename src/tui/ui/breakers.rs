//! The breakers table: state, rates, window, semantic failures, next probe,
//! rolling counters by outcome, a 2-minute request-rate sparkline and the
//! mock fault, sorted errors-then-volume like the Hystrix dashboard.

use super::{pane_block, scroll};
use crate::telemetry::snapshot::BreakerRow;
use crate::tui::app::{App, Pane};
use crate::tui::theme::Theme;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::Span;
use ratatui::widgets::{Cell, Row, Table};
use ratatui::Frame;

const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// Hystrix-style health of an error rate: ≤10 % ok, < 50 % warn, else error.
fn health(theme: &Theme, rate: f64) -> Style {
    if rate >= 0.5 {
        theme.error
    } else if rate > 0.1 {
        theme.warn
    } else {
        theme.ok
    }
}

/// A sparkline of the last `width` samples.
pub fn sparkline(samples: Option<&std::collections::VecDeque<u64>>, width: usize) -> String {
    let Some(q) = samples else { return " ".repeat(width) };
    let take = q.len().min(width);
    let slice: Vec<u64> = q.iter().skip(q.len() - take).copied().collect();
    let max = slice.iter().copied().max().unwrap_or(0).max(1);
    let mut s = " ".repeat(width - take);
    for v in slice {
        s.push(if v == 0 {
            ' '
        } else {
            SPARK[((v * 7).div_ceil(max)) as usize % 8]
        });
    }
    s
}

fn row<'a>(b: &'a BreakerRow, app: &App, theme: &Theme, selected: bool) -> Row<'a> {
    let v = &b.breaker;
    let st = &b.stats;
    let probe = match (v.next_probe_ms, v.half_open_stage) {
        (Some(ms), _) => format!("{:.0}s", (ms as f64 / 1000.0).ceil()),
        (_, Some((stage, allow))) => format!("{}/{allow}·s{}", v.probes_in_flight, stage + 1),
        _ => "-".into(),
    };
    let fault = app.snap.faults.get(&b.target).map(|f| {
        let label = f.fault.label();
        if f.rate < 1.0 {
            format!("{label} @{:.0}%", f.rate * 100.0)
        } else {
            label
        }
    });
    let marker = if selected { "▶" } else { " " };
    let cells = vec![
        Cell::from(marker),
        Cell::from(b.target.to_string()),
        Cell::from(Span::styled(
            App::state_label(v.state),
            v.state.map_or(theme.state_disabled, |s| theme.breaker_state(s)),
        )),
        Cell::from(Span::styled(
            format!("{:>4.0}%", v.failure_rate * 100.0),
            health(theme, v.failure_rate),
        )),
        Cell::from(format!("{:>4.0}%", v.slow_rate * 100.0)),
        Cell::from(format!("{:>4}", v.calls_in_window)),
        Cell::from(format!("{:>4}", st.semantic)),
        Cell::from(probe),
        Cell::from(format!("{:>6}", st.ok)),
        Cell::from(format!("{:>5}", st.failed)),
        Cell::from(format!("{:>4}", st.timeouts)),
        Cell::from(format!("{:>5}", st.rejected_open)),
        Cell::from(format!("{:>4}", st.rejected_rate)),
        Cell::from(format!("{:>4}", st.retries)),
        Cell::from(sparkline(app.spark.get(&b.target), 24)),
        Cell::from(Span::styled(fault.unwrap_or_default(), theme.warn)),
    ];
    let r = Row::new(cells);
    if selected {
        r.style(theme.selected)
    } else {
        r
    }
}

/// Draws the breakers pane.
pub fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let rows = app.breaker_rows();
    let sel = app.selection(Pane::Breakers);
    let height = area.height.saturating_sub(3) as usize;
    let first = scroll(sel, height);
    let focused = app.focus == Pane::Breakers;
    let sort = format!("sort: {:?}", app.sort).to_lowercase();
    let visible = rows
        .iter()
        .enumerate()
        .skip(first)
        .take(height)
        .map(|(i, b)| row(b, app, theme, focused && i == sel));
    let header = Row::new(vec![
        "",
        "breaker",
        "state",
        "fail",
        "slow",
        "win",
        "sem",
        "probe",
        "ok",
        "fail",
        "t/o",
        "open",
        "rate",
        "retry",
        "calls/s (2 min)",
        "mock fault",
    ])
    .style(theme.title);
    let widths = [
        Constraint::Length(1),
        Constraint::Length(24),
        Constraint::Length(13),
        Constraint::Length(5),
        Constraint::Length(5),
        Constraint::Length(4),
        Constraint::Length(4),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(5),
        Constraint::Length(4),
        Constraint::Length(5),
        Constraint::Length(4),
        Constraint::Length(5),
        Constraint::Length(24),
        Constraint::Min(10),
    ];
    let t = Table::new(visible, widths).header(header).block(pane_block(
        app,
        Pane::Breakers,
        theme,
        &format!("{} of {} · {sort}", rows.len(), app.snap.breakers.len()),
    ));
    f.render_widget(t, area);
}
