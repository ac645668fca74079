//! The detail overlay (Enter): the selected row in full. A breaker's
//! figures, latencies, last calls, settings and transitions; a limiter's
//! buckets and frozen refills; a user's budgets and recent requests; a
//! request's whole path; an event's whole text.

use super::centered;
use crate::command::Command;
use crate::telemetry::events::EventKind;
use crate::telemetry::snapshot::{BreakerRow, LimiterRow, UserRow};
use crate::tui::app::{App, Pane};
use crate::tui::theme::Theme;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

/// `name`, and the instance it is on where there is one.
fn titled(name: &str, instance: Option<&str>) -> String {
    match instance {
        Some(i) => format!(" {name} on {i} "),
        None => format!(" {name} "),
    }
}

/// Draws the selected row of the focused pane in full.
pub fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme) {
    let mut lines = Vec::new();
    let title = match app.focus {
        Pane::Breakers => match app.selected_breaker() {
            Some(b) => {
                breaker(b, app, &mut lines);
                titled(&b.target.to_string(), b.instance.as_deref())
            }
            None => " no breaker selected ".into(),
        },
        Pane::Limiters => match app.snap.limiters.get(app.selection(Pane::Limiters)) {
            Some(l) => {
                limiter(l, app, &mut lines);
                titled(&format!("limiter {}", l.provider), l.instance.as_deref())
            }
            None => " no limiter selected ".into(),
        },
        Pane::Budgets => match app.user_rows().get(app.selection(Pane::Budgets)) {
            Some(u) => {
                user(u, app, &mut lines);
                titled(&format!("user {}", u.view.user), u.instance.as_deref())
            }
            None => " no user selected ".into(),
        },
        Pane::Chains => match app.recent_rows().get(app.selection(Pane::Chains)) {
            Some(r) => {
                lines.push(Line::from(format!(
                    "user {} · {} · quality {:.2}",
                    r.user,
                    r.level.as_str(),
                    r.quality
                )));
                lines.push(Line::from(format!(
                    "ended at t={} after {} ms · {} tokens · ${:.4}",
                    super::clock(r.t_ms),
                    r.latency_ms,
                    r.tokens,
                    r.cost_usd
                )));
                lines.push(Line::from(format!(
                    "path: {}",
                    if r.chain.is_empty() {
                        "no model called"
                    } else {
                        &r.chain
                    }
                )));
                if !r.missing.is_empty() {
                    lines.push(Line::from(format!("missing: {}", r.missing)));
                }
                if let Some(why) = &r.why {
                    lines.push(Line::from(format!("the client was told: {why}")));
                }
                if let Some(k) = &r.key {
                    lines.push(Line::from(format!("{}: {k}", crate::wire::fusebox::REQUEST_ID)));
                }
                if !r.upstream.is_empty() {
                    lines.push(Line::from(format!("upstream ids: {}", r.upstream.join(", "))));
                }
                titled(&format!("request #{}", r.id), r.instance.as_deref())
            }
            None => " no request selected ".into(),
        },
        Pane::Events => match app.event_rows().get(app.selection(Pane::Events)) {
            Some(r) => {
                lines.push(Line::from(format!("{} {}", super::clock(r.event.t_ms), r.said)));
                if r.repeats > 1 {
                    lines.push(Line::from(format!(
                        "said {} times in a row since {}",
                        r.repeats,
                        super::clock(r.first.t_ms)
                    )));
                }
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

/// `[instance] `, for lines from one of several instances.
fn on(instance: Option<&str>) -> String {
    instance.map(|i| format!("[{i}] ")).unwrap_or_default()
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// Events of the row's instance (all, on a combined or local row).
fn of_instance<'a>(
    app: &'a App,
    instance: Option<&'a str>,
) -> impl Iterator<Item = &'a crate::telemetry::events::Event> {
    app.events()
        .rev()
        .filter(move |e| instance.is_none() || e.instance.as_deref() == instance)
}

/// A limiter's buckets, concurrency, refills and calibration, and its
/// refill freezes (a Retry-After's and an operator's, newest first).
fn limiter(row: &LimiterRow, app: &App, lines: &mut Vec<Line<'static>>) {
    let l = &row.limiter;
    for (name, b) in [("TPM", l.tpm), ("ITPM", l.itpm), ("OTPM", l.otpm), ("RPM", l.rpm)] {
        if let Some((level, cap)) = b {
            lines.push(Line::from(format!(
                "{name}: {level:.0} of {cap:.0} left ({})",
                pct(level / cap.max(1.0))
            )));
        }
    }
    let (inflight, max) = l.concurrency;
    lines.push(Line::from(format!(
        "in flight {inflight} of {} · {} 429s seen · {} waited out without capacity · {:.1} chars a token",
        if max > 0 { max.to_string() } else { "no cap".into() },
        l.rate_limited,
        l.rejected,
        l.chars_per_token
    )));
    if let Some(a) = l.adaptive {
        lines.push(Line::from(format!(
            "adaptive concurrency limit {} (floor {}, ceiling {}){}",
            a.limit,
            a.floor,
            a.ceiling,
            match (a.moved, a.moved_ms_ago) {
                (Some(m), Some(ms)) => format!(" · last move {:.0} s ago: {}", ms as f64 / 1000.0, m.label()),
                _ => " · not moved yet".into(),
            }
        )));
        if let Some((recent, baseline)) = a.latency_ms {
            lines.push(Line::from(format!(
                "response time {recent:.0} ms recently, {baseline:.0} ms baseline"
            )));
        }
    }
    if let Some(q) = &l.queue {
        let [c, d, b] = q.waiting;
        let [sc, sd, sb] = q.shed;
        lines.push(Line::from(format!(
            "queue: {c} critical, {d} default, {b} batch waiting (room for {})",
            q.max
        )));
        let most: Vec<String> = q.shed_most.iter().map(|(t, n)| format!("{t} {n}")).collect();
        lines.push(Line::from(format!(
            "shed since start: {sc} critical, {sd} default, {sb} batch{}",
            if most.is_empty() {
                String::new()
            } else {
                format!(" · most: {}", most.join(", "))
            }
        )));
    }
    lines.push(Line::from(match l.frozen {
        Some(crate::resilience::limiter::Frozen::ByOperator) => {
            "refills frozen by an operator, until unfrozen".to_string()
        }
        Some(crate::resilience::limiter::Frozen::For { ms }) => {
            format!("refills frozen for {:.1} s more (retry-after)", ms as f64 / 1000.0)
        }
        None => "refills running".to_string(),
    }));
    lines.push(Line::from(match l.calibrated_ms_ago {
        Some(ms) => format!("calibrated from rate headers {:.0} s ago", ms as f64 / 1000.0),
        None => "not calibrated from rate headers yet".to_string(),
    }));
    lines.push(Line::from(""));
    // Freezes of either kind: a Retry-After's, and an operator's commands.
    let target = crate::target::Target::provider(&row.provider);
    let frozen = |k: &EventKind| match k {
        EventKind::RefillFrozen(r) => r.provider == row.provider,
        EventKind::Operator { command, .. } => {
            matches!(command, Command::FreezeRefill { target: t } | Command::UnfreezeRefill { target: t } if *t == target)
        }
        _ => false,
    };
    events_of(app, row.instance.as_deref(), "refill freezes", frozen, lines);
}

/// `title`, then the events of `instance` that `pick` takes, newest first.
fn events_of(
    app: &App,
    instance: Option<&str>,
    title: &str,
    pick: impl Fn(&EventKind) -> bool,
    lines: &mut Vec<Line<'static>>,
) {
    lines.push(Line::from(format!("{title} (newest first):")));
    let mut any = false;
    for e in of_instance(app, instance).filter(|e| pick(&e.kind)) {
        any = true;
        lines.push(Line::from(format!(
            "{} {}",
            super::clock(e.t_ms),
            crate::tui::said::describe(e)
        )));
    }
    if !any {
        lines.push(Line::from("  none yet"));
    }
}

/// A user's spend against each limit, its refusals, budget events and
/// recent requests.
fn user(row: &UserRow, app: &App, lines: &mut Vec<Line<'static>>) {
    let u = &row.view;
    for (i, window) in ["minute", "hour", "day"].iter().enumerate() {
        lines.push(Line::from(format!(
            "tokens this {window}: {:.0} ({} of its limit)",
            u.tokens[i],
            pct(u.shares[i])
        )));
    }
    lines.push(Line::from(format!(
        "cost today: ${:.4} ({} of its limit) · {} refused by a budget",
        u.cost_day,
        pct(u.shares[3]),
        u.rejections
    )));
    lines.push(Line::from(""));
    let mine = |k: &EventKind| match k {
        EventKind::BudgetWarning(w) => w.scope.user() == u.user,
        EventKind::BudgetRejected { user, .. } => *user == u.user,
        _ => false,
    };
    events_of(app, row.instance.as_deref(), "budget events", mine, lines);
    lines.push(Line::from(""));
    lines.push(Line::from("recent requests (newest first):"));
    let recent: Vec<_> = app
        .recent
        .iter()
        .rev()
        .filter(|r| r.user == u.user && (row.instance.is_none() || r.instance == row.instance))
        .take(8)
        .collect();
    for r in &recent {
        lines.push(Line::from(format!(
            "{}#{} {} q={:.2}: {}",
            on(r.instance.as_deref()),
            r.id,
            r.level.as_str(),
            r.quality,
            r.chain
        )));
    }
    if recent.is_empty() {
        lines.push(Line::from("  none seen yet"));
    }
}

/// A breaker's figures, latencies, counters, settings, last calls and
/// transitions.
fn breaker(b: &BreakerRow, app: &App, lines: &mut Vec<Line<'static>>) {
    let v = &b.breaker;
    let st = &b.stats;
    if let Some([now, next]) = super::hint::next_steps(b, app) {
        lines.push(Line::from(now));
        lines.push(Line::from(next));
        lines.push(Line::from(""));
    }
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
    lines.push(Line::from(format!(
        "latency, last {}: {}",
        app.span.label(),
        q(&recent)
    )));
    lines.push(Line::from(format!("latency, since start: {}", q(&st.latency))));
    if st.ttft.count() > 0 {
        lines.push(Line::from(format!("time to first token, since start: {}", q(&st.ttft))));
    }
    lines.push(Line::from(format!(
        "calls {} · ok {} · failed {} (timeouts {}, semantic {}) · client errors {} · short-circuited {} · refused for capacity {} · retries {} · hedged {}",
        st.attempts, st.ok, st.failed, st.timeouts, st.semantic, st.client_errors, st.rejected_open, st.rejected_rate, st.retries, st.hedged
    )));
    if let Some(p) = &b.pool {
        lines.push(Line::from(format!(
            "pool {}/{} in use · {} waiting (room for {}) · {} refused since start",
            p.in_use, p.size, p.waiting, p.queue, p.refused
        )));
    }
    let c = &b.config;
    lines.push(Line::from(format!(
        "opens at {} failures in a row, or {} failing (or {} slow, over {} ms) of a {:?} window of {} once {} calls; cooldown {} ms (again after a failed probe), then ×{} per failed probe up to {} ms; half-open ramp {:?} needing {} success",
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
    tripped_by(b, app, lines);
    lines.push(Line::from(""));
    transitions(b, app, lines);
}

/// One call as the detail lists it: when, which request, how it ended.
fn call(a: &crate::tui::history::Seen) -> Line<'static> {
    let how = match (a.status, a.transport) {
        (_, Some(t)) => format!("{t:?}").to_lowercase(),
        (Some(s), None) => s.to_string(),
        (None, None) => "-".into(),
    };
    let model = a.model.as_deref().map(|m| format!(" {m}")).unwrap_or_default();
    Line::from(format!(
        "{} {}#{}{model} {how} in {} ms",
        super::clock(a.t_ms),
        on(a.instance.as_deref()),
        a.request,
        a.latency_ms
    ))
}

/// The failed calls before the breaker's last trip from closed.
fn tripped_by(b: &BreakerRow, app: &App, lines: &mut Vec<Line<'static>>) {
    let Some((t_ms, failures)) = app.tripped_by.get(&crate::tui::app::row_key(b)) else {
        return;
    };
    lines.push(Line::from(""));
    lines.push(Line::from(format!(
        "tripped at {} by (newest first):",
        super::clock(*t_ms)
    )));
    lines.extend(failures.iter().rev().map(call));
    if failures.is_empty() {
        lines.push(Line::from("  none seen (it tripped before the console watched)"));
    }
}

/// The row's last calls with their status and latency, newest first.
fn last_calls(b: &BreakerRow, app: &App, lines: &mut Vec<Line<'static>>) {
    lines.push(Line::from("last calls (newest first):"));
    let seen = app.attempts.get(&crate::tui::app::row_key(b));
    lines.extend(seen.iter().flat_map(|q| q.iter().rev()).map(call));
    if seen.is_none_or(|q| q.is_empty()) {
        lines.push(Line::from("  none seen yet"));
    }
}

/// The breaker's transitions with their whole reasons, newest first (on
/// an instance's row, that instance's).
fn transitions(b: &BreakerRow, app: &App, lines: &mut Vec<Line<'static>>) {
    lines.push(Line::from("transitions (newest first):"));
    let mut any = false;
    for e in of_instance(app, b.instance.as_deref()) {
        if let EventKind::Transition(t) = &e.kind {
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
