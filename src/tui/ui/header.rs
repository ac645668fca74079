//! The header: mode, time, throughput, success, spend, global budget,
//! frozen/drill indicators, READONLY badge and the state store.

use super::{bar, clock, human};
use crate::tui::app::{App, Mode};
use crate::tui::theme::Theme;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

/// The watched instances and how each is doing: each by name, or beyond
/// three, how many are live and the others by name.
fn instances<'a>(s: &crate::telemetry::snapshot::Snapshot, theme: &Theme) -> Vec<Span<'a>> {
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
    if s.instances.len() <= 3 {
        return s.instances.iter().map(one).collect();
    }
    let live = s.instances.iter().filter(|i| i.health == Health::Live).count();
    let mut spans = vec![Span::styled(
        format!(" {} instances, {live} live ", s.instances.len()),
        if live == s.instances.len() {
            theme.ok
        } else {
            theme.warn
        },
    )];
    spans.extend(s.instances.iter().filter(|i| i.health != Health::Live).map(one));
    spans
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
    if s.instances.is_empty() {
        top.push(Span::raw(format!(" {} ", app.opts.source)));
    } else {
        top.extend(instances(s, theme));
    }
    top.push(Span::styled(format!(" t={} ", clock(s.t_ms)), theme.base));
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
    top.extend([
        Span::raw(format!(" {:.1} req/s ", r.req_per_s)),
        Span::styled(format!(" ok {:.1}% ", r.success * 100.0), theme.ok),
        Span::styled(
            format!(" degraded {:.1}% ", r.degraded * 100.0),
            if r.degraded > 0.1 { theme.warn } else { theme.dim },
        ),
        Span::raw(format!(" {} tok/min ", human(r.tokens_per_min))),
        Span::raw(format!(" ${:.2}/min ", r.usd_per_min)),
    ]);
    let p = s.global.pressure;
    let mut second = vec![
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
    ];
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
        second.insert(0, badge);
    }
    let frozen: Vec<&str> = s
        .limiters
        .iter()
        .filter(|l| l.limiter.frozen.is_some())
        .map(|l| l.provider.as_str())
        .collect();
    if !frozen.is_empty() {
        second.push(Span::styled(
            format!(" REFILL FROZEN: {} ", frozen.join(",")),
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
    }
    let p = Paragraph::new(vec![Line::from(top), Line::from(second)])
        .block(Block::default().borders(Borders::BOTTOM).border_style(theme.border))
        .style(theme.header);
    f.render_widget(p, area);
}
