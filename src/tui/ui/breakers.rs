//! The breakers table: state, rates, window, semantic failures, next probe,
//! rolling counters by outcome, a call-rate sparkline over the span on
//! screen (2 min to 1 h) and the mock fault, sorted errors-then-volume like
//! the Hystrix dashboard.

use super::{pane_block, scroll};
use crate::telemetry::snapshot::BreakerRow;
use crate::tui::app::{row_key, App, Pane};
use crate::tui::theme::Theme;
use crate::tui::track::SAMPLES;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::Style;
use ratatui::text::Span;
use ratatui::widgets::{Cell, Row, Table};
use ratatui::Frame;
use std::collections::VecDeque;

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

/// `samples` (oldest first) in at most `width` cells, newest at the right:
/// each cell sums as many samples as the span needs to fit the width.
pub fn sparkline(samples: Option<&VecDeque<u32>>, width: usize) -> String {
    let Some(q) = samples.filter(|_| width > 0) else {
        return " ".repeat(width);
    };
    let per = SAMPLES.div_ceil(width);
    let newest: Vec<u32> = q.iter().rev().copied().collect();
    let cells: Vec<u64> = newest
        .chunks(per)
        .map(|c| c.iter().map(|&v| u64::from(v)).sum())
        .collect();
    let max = cells.iter().copied().max().unwrap_or(0).max(1);
    let mut s = " ".repeat(width - cells.len());
    s.extend(cells.iter().rev().map(|&v| match v {
        0 => ' ',
        v => SPARK[((v * 7).div_ceil(max)) as usize % 8],
    }));
    s
}

/// A column: its header, its width, and how long it stays as the pane
/// narrows (0: always; higher ones go first).
struct Col {
    head: &'static str,
    width: u16,
    keep: u8,
}

const COLS: [Col; 18] = [
    Col {
        head: "",
        width: 1,
        keep: 0,
    },
    Col {
        head: "breaker",
        width: 0,
        keep: 0,
    },
    Col {
        head: "state",
        width: 13,
        keep: 0,
    },
    Col {
        head: "fail",
        width: 5,
        keep: 1,
    },
    Col {
        head: "slow",
        width: 5,
        keep: 6,
    },
    Col {
        head: "win",
        width: 4,
        keep: 7,
    },
    Col {
        head: "sem",
        width: 4,
        keep: 8,
    },
    Col {
        head: "probe",
        width: 7,
        keep: 3,
    },
    Col {
        head: "p50/p95/p99 ms",
        width: 15,
        keep: 2,
    },
    Col {
        head: "ttft p50/p95",
        width: 12,
        keep: 7,
    },
    Col {
        head: "ok",
        width: 6,
        keep: 4,
    },
    Col {
        head: "fail",
        width: 5,
        keep: 4,
    },
    Col {
        head: "t/o",
        width: 4,
        keep: 8,
    },
    Col {
        head: "open",
        width: 5,
        keep: 4,
    },
    Col {
        head: "rate",
        width: 4,
        keep: 9,
    },
    Col {
        head: "retry",
        width: 5,
        keep: 9,
    },
    Col {
        head: "calls",
        width: 24,
        keep: 5,
    },
    Col {
        head: "mock fault",
        width: 10,
        keep: 5,
    },
];

/// The sparkline's column: it takes the room the others leave, up to a
/// cell per sample.
const SPARK_COL: usize = COLS.len() - 2;

/// Which columns fit in `room` cells with the breaker names `name` wide
/// (the most lasting first, in their order on screen), and the cells left.
fn shown(room: u16, name: u16) -> ([bool; COLS.len()], u16) {
    let mut order: Vec<usize> = (0..COLS.len()).collect();
    order.sort_by_key(|&i| COLS[i].keep);
    let mut used = 0u16;
    let mut show = [false; COLS.len()];
    for i in order {
        let w = if i == 1 { name } else { COLS[i].width } + 1;
        // Columns go strictly by how long they last: none after one that
        // does not fit.
        if COLS[i].keep > 0 && used + w > room {
            break;
        }
        used += w;
        show[i] = true;
    }
    (show, room.saturating_sub(used))
}

/// A latency in few characters: ms below a second, else seconds.
fn short_ms(ms: u64) -> String {
    if ms < 1_000 {
        ms.to_string()
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// The targets whose instances' breakers are not all in one state (their
/// combined row shows the worst, marked `≠`).
fn drifting(app: &App) -> std::collections::HashSet<&crate::target::Target> {
    let mut states: std::collections::HashMap<&crate::target::Target, Option<_>> = Default::default();
    let mut out = std::collections::HashSet::new();
    for b in app.snap.breakers.iter().filter(|b| b.instance.is_some()) {
        match states.entry(&b.target) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(b.breaker.state);
            }
            std::collections::hash_map::Entry::Occupied(o) if *o.get() != b.breaker.state => {
                out.insert(&b.target);
            }
            _ => {}
        }
    }
    out
}

/// How a row is drawn: the columns shown, the sparkline's width, and
/// whether its instances differ.
struct Layout<'a> {
    show: &'a [bool],
    spark: usize,
    drift: bool,
}

fn row<'a>(b: &'a BreakerRow, app: &App, theme: &Theme, selected: bool, layout: &Layout) -> Row<'a> {
    let Layout { show, spark, drift } = *layout;
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
    let latency = app.latency(b).map_or_else(
        || "-".to_string(),
        |h| {
            let q = |p| h.quantile(p).map_or("-".into(), short_ms);
            format!("{}/{}/{}", q(0.5), q(0.95), q(0.99))
        },
    );
    let ttft = app.ttft(b).map_or_else(
        || "-".to_string(),
        |h| {
            let q = |p| h.quantile(p).map_or("-".into(), short_ms);
            format!("{}/{}", q(0.5), q(0.95))
        },
    );
    let cells = [
        Cell::from(marker),
        Cell::from(super::row_name(app, &b.target.to_string(), b.instance.as_deref())),
        Cell::from(Span::styled(
            if drift {
                format!("{} ≠", App::state_label(v.state))
            } else {
                App::state_label(v.state).to_string()
            },
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
        Cell::from(latency),
        Cell::from(ttft),
        Cell::from(format!("{:>6}", st.ok)),
        Cell::from(format!("{:>5}", st.failed)),
        Cell::from(format!("{:>4}", st.timeouts)),
        Cell::from(format!("{:>5}", st.rejected_open)),
        Cell::from(format!("{:>4}", st.rejected_rate)),
        Cell::from(format!("{:>4}", st.retries)),
        Cell::from(sparkline(app.tracks.get(&row_key(b)).map(|t| t.calls(app.span)), spark)),
        Cell::from(Span::styled(fault.unwrap_or_default(), theme.warn)),
    ];
    let r = Row::new(cells.into_iter().zip(show).filter(|(_, s)| **s).map(|(c, _)| c));
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
    // Every name whole: the widest, within reason.
    let name = rows
        .iter()
        .map(|b| {
            super::row_name(app, &b.target.to_string(), b.instance.as_deref())
                .chars()
                .count()
        })
        .max()
        .unwrap_or(8);
    let name = name.clamp(8, 40) as u16;
    let (show, left) = shown(area.width.saturating_sub(2), name);
    let spark = if show[SPARK_COL] {
        (COLS[SPARK_COL].width + left).min(SAMPLES as u16)
    } else {
        0
    };
    let drift = drifting(app);
    let visible = rows.iter().enumerate().skip(first).take(height).map(|(i, b)| {
        let layout = Layout {
            show: &show,
            spark: spark as usize,
            drift: b.instance.is_none() && drift.contains(&b.target),
        };
        row(b, app, theme, focused && i == sel, &layout)
    });
    let pick = |i: usize| show[i];
    let calls = format!("calls, last {}", app.span.label());
    let header =
        Row::new(
            (0..COLS.len())
                .filter(|&i| pick(i))
                .map(|i| if i == SPARK_COL { calls.as_str() } else { COLS[i].head }),
        )
        .style(theme.title);
    let widths: Vec<Constraint> = (0..COLS.len())
        .filter(|&i| pick(i))
        .map(|i| match i {
            1 => Constraint::Length(name),
            SPARK_COL => Constraint::Length(spark),
            i if i == COLS.len() - 1 => Constraint::Min(COLS[i].width),
            i => Constraint::Length(COLS[i].width),
        })
        .collect();
    let t = Table::new(visible, widths).header(header).block(pane_block(
        app,
        Pane::Breakers,
        theme,
        &format!(
            "{} of {} · {sort} · last {} (t)",
            rows.len(),
            app.snap.breakers.len(),
            app.span.label()
        ),
    ));
    f.render_widget(t, area);
}
