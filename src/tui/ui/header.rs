//! The header: mode, time, throughput, success, spend, global budget,
//! frozen/drill indicators, READONLY badge and the state store.

use super::{bar, clock, human};
use crate::tui::app::{App, Mode};
use crate::tui::theme::Theme;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

/// The watched instances and how each is doing: each live one by name (or
/// beyond three, how many are live), for the first line; and each one not
/// live by name and why, a badge for the second, where a narrow terminal
/// keeps it.
fn instances<'a>(s: &crate::telemetry::snapshot::Snapshot, theme: &Theme) -> (Vec<Span<'a>>, Vec<Span<'a>>) {
    use crate::telemetry::snapshot::Health;
    let one = |i: &crate::telemetry::snapshot::InstanceView| match i.health {
        Health::Live => Span::styled(format!(" {} live ", i.name), theme.ok),
        Health::Connecting => Span::styled(format!(" {} connecting ", i.name), theme.dim),
        Health::Stale { for_ms, retry_ms } => Span::styled(
            format!(
                " {} STALE {}s ({}) retry {:.1}s ",
                i.name,
                for_ms / 1000,
                i.error.as_deref().unwrap_or("lost"),
                retry_ms as f64 / 1000.0
            ),
            theme.error,
        ),
    };
    let (live, trouble): (Vec<_>, Vec<_>) = s.instances.iter().partition(|i| i.health == Health::Live);
    let trouble = trouble.into_iter().map(one).collect();
    if s.instances.len() <= 3 {
        return (live.into_iter().map(one).collect(), trouble);
    }
    let summary = Span::styled(
        format!(" {} instances, {} live ", s.instances.len(), live.len()),
        if live.len() == s.instances.len() {
            theme.ok
        } else {
            theme.warn
        },
    );
    (vec![summary], trouble)
}

/// Draws the header.
pub fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let s = &app.snap;
    let r = &app.rates;
    let mut top = vec![
        // The header's own colours swapped: it stands out in every theme.
        Span::styled(
            " fusebox ",
            theme.header.add_modifier(ratatui::style::Modifier::REVERSED),
        ),
        Span::styled(format!(" {} ", app.opts.mode.label()), theme.badge),
    ];
    top.push(Span::styled(format!(" t={} ", clock(shown_t(app))), theme.base));
    if !matches!(app.opts.mode, Mode::Serve | Mode::Attach) {
        let (speed, paused) = app.clock;
        let label = if paused {
            "PAUSED".to_string()
        } else {
            format!("{speed}×")
        };
        top.push(Span::styled(
            format!(" {label} "),
            if paused { theme.badge } else { theme.dim },
        ));
    }
    top.extend(health(r, theme));
    // What is watched last: a narrow terminal keeps the health. An
    // instance not live is a badge.
    let (watched, trouble) = instances(s, theme);
    if s.instances.is_empty() {
        top.push(Span::raw(format!(" {} ", app.opts.source)));
    } else {
        top.extend(watched);
    }
    let p = s.global.pressure;
    let mut second = badges(app, theme);
    second.extend(trouble);
    second.extend([
        Span::raw(" global budget "),
        Span::styled(bar(p, 10), theme.gauge(p)),
        Span::raw(format!(" {:.0}%  ", p * 100.0)),
        Span::raw(format!(
            "requests {}  tracked users {}  deferred {}  ",
            s.requests, s.tracked_users, s.deferred_pending
        )),
        Span::styled(
            format!("store: {} ", s.store.label()),
            if s.store.degraded { theme.warn } else { theme.dim },
        ),
    ]);
    let p = Paragraph::new(vec![Line::from(top), Line::from(second)])
        .block(Block::default().borders(Borders::BOTTOM).border_style(theme.border))
        .style(theme.header);
    f.render_widget(p, area);
}

/// The last minute's throughput and health, the window named: each share
/// coloured against its thresholds ([`OK_GOOD`], [`OK_FAIR`],
/// [`FAILED_BAD`], [`DEGRADED_HIGH`]).
fn health<'a>(r: &crate::tui::app::Throughput, theme: &Theme) -> Vec<Span<'a>> {
    let window = match r.window_ms {
        0 => return vec![Span::styled(" rates from the next second ", theme.dim)],
        ms if ms + 500 >= crate::tui::app::RATE_WINDOW_MS => "last 1m".to_string(),
        ms => format!("last {}s", ms.div_ceil(1000)),
    };
    // The shares first: a narrow terminal cuts the rates.
    let mut spans = vec![Span::styled(format!(" {window}: "), theme.dim)];
    if r.ended == 0 {
        spans.push(Span::styled(" no request ended ", theme.dim));
    } else {
        let ok = match r.success {
            s if s >= OK_GOOD => theme.ok,
            s if s >= OK_FAIR => theme.warn,
            _ => theme.error,
        };
        let failed = match r.failed {
            0.0 => theme.dim,
            f if f > FAILED_BAD => theme.error,
            _ => theme.warn,
        };
        let degraded = if r.degraded > DEGRADED_HIGH {
            theme.warn
        } else {
            theme.dim
        };
        spans.extend([
            Span::styled(format!(" ok {:.1}% ", r.success * 100.0), ok),
            Span::styled(format!(" degraded {:.1}% ", r.degraded * 100.0), degraded),
            Span::styled(format!(" failed {:.1}% ", r.failed * 100.0), failed),
        ]);
    }
    spans.extend([
        Span::raw(format!(" {} tok/min ", human(r.tokens_per_min))),
        Span::raw(format!(" ${:.2}/min ", r.usd_per_min)),
    ]);
    spans
}

/// At least this share answered whole is healthy (green); at least
/// [`OK_FAIR`] is a warning; less is an error.
pub const OK_GOOD: f64 = 0.99;
/// See [`OK_GOOD`].
pub const OK_FAIR: f64 = 0.90;
/// More than this share failed is an error (any is a warning).
pub const FAILED_BAD: f64 = 0.05;
/// More than this share degraded is a warning.
pub const DEGRADED_HIGH: f64 = 0.10;

/// The time on screen: a replay that is over stays at the log's end (its
/// clock goes on, but nothing is left to happen).
fn shown_t(app: &App) -> u64 {
    let t = app.snap.t_ms;
    let over = app.opts.replay.as_ref().is_some_and(|r| r.ended().is_some());
    match app.opts.replay_length_ms {
        Some(total) if over => t.min(total),
        _ => t,
    }
}

/// The states an operator must not miss (replay progress, frozen refills,
/// dropped spans, drill, a frozen display, read-only): first on the
/// second line, so a narrow terminal keeps them.
fn badges<'a>(app: &App, theme: &Theme) -> Vec<Span<'a>> {
    let s = &app.snap;
    let mut second = Vec::new();
    if app.opts.mode == Mode::Replay {
        let ended = app.opts.replay.as_ref().and_then(|e| e.ended());
        let badge = match (ended, app.opts.replay_length_ms) {
            (Some(Ok(done)), _) => Span::styled(format!(" replay done: {done} "), theme.badge),
            (Some(Err(e)), _) => Span::styled(format!(" replay stopped: {e} "), theme.error),
            (None, Some(total)) => {
                let done = (s.t_ms as f64 / total.max(1) as f64).min(1.0);
                let progress = format!(" replay {} {:.0}% of {} ", bar(done, 12), done * 100.0, clock(total));
                Span::styled(progress, theme.badge)
            }
            (None, None) => Span::raw(""),
        };
        second.push(badge);
    }
    // A provider once; attached to several, the instances frozen where
    // not all are.
    let frozen: Vec<String> = s
        .limiters
        .iter()
        .filter(|l| l.instance.is_none() && l.limiter.frozen.is_some())
        .map(|l| {
            let own = || {
                s.limiters
                    .iter()
                    .filter(|o| o.instance.is_some() && o.provider == l.provider)
            };
            if own().all(|o| o.limiter.frozen.is_some()) {
                l.provider.clone()
            } else {
                let on: Vec<&str> = own()
                    .filter(|o| o.limiter.frozen.is_some())
                    .filter_map(|o| o.instance.as_deref())
                    .collect();
                format!("{} on {}", l.provider, on.join("+"))
            }
        })
        .collect();
    if !frozen.is_empty() {
        second.push(Span::styled(
            format!(" REFILL FROZEN: {} ", frozen.join(",")),
            theme.badge,
        ));
        second.push(Span::raw(" "));
    }
    if s.descriptor_refusals > 0 {
        second.push(Span::styled(
            format!(
                " OUT OF FILE DESCRIPTORS: {} calls refused (raise ulimit -n) ",
                s.descriptor_refusals
            ),
            theme.badge,
        ));
        second.push(Span::raw(" "));
    }
    if s.spans_dropped > 0 {
        second.push(Span::styled(
            format!(" traces: {} spans dropped ", s.spans_dropped),
            theme.warn,
        ));
        second.push(Span::raw(" "));
    }
    if s.drill {
        second.push(Span::styled(" DRILL ", theme.badge));
        second.push(Span::raw(" "));
    }
    if app.display_frozen {
        second.push(Span::styled(" DISPLAY FROZEN ", theme.badge));
        second.push(Span::raw(" "));
    }
    if app.opts.readonly.is_some() {
        second.push(Span::styled(" READONLY ", theme.badge));
        second.push(Span::raw(" "));
    }
    second
}
