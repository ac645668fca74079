//! An incident snapshot for the incident channel (`w`): the screen as it
//! is, the breakers, every transition and operator action the console
//! kept, and the worst recent requests, as Markdown to paste and JSON to
//! process, both written to the current directory, new files its owner
//! alone reads.

use super::app::App;
use super::history::Recent;
use super::said::clock;
use crate::outcome::Level;
use crate::telemetry::events::{Event, EventKind};
use ratatui::buffer::Buffer;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Transitions, operator actions and requests listed at most (newest).
const LISTED: usize = 200;
/// Worst requests listed.
const WORST: usize = 20;

/// The screen's text, a line per row, trailing blanks cut.
pub fn screen_text(buf: &Buffer) -> Vec<String> {
    let area = buf.area;
    (0..area.height)
        .map(|y| {
            let line: String = (0..area.width).map(|x| buf[(x, y)].symbol()).collect();
            line.trim_end().to_string()
        })
        .collect()
}

/// The newest `LISTED` events of the kinds `pick` chooses, newest first.
fn listed(app: &App, pick: fn(&EventKind) -> bool) -> Vec<&Event> {
    app.events().rev().filter(|e| pick(&e.kind)).take(LISTED).collect()
}

fn is_transition(k: &EventKind) -> bool {
    matches!(k, EventKind::Transition(_))
}

fn is_operator(k: &EventKind) -> bool {
    matches!(k, EventKind::Operator { .. } | EventKind::CommandRefused { .. })
}

/// The recent requests that did not get their whole answer, newest first.
fn worst(app: &App) -> Vec<&Recent> {
    app.recent
        .iter()
        .rev()
        .filter(|r| r.level != Level::None)
        .take(WORST)
        .collect()
}

/// The snapshot as Markdown and as JSON; `written` is the wall time
/// (RFC 3339) it is written at.
pub fn report(app: &App, screen: &[String], written: &str) -> (String, Value) {
    let s = &app.snap;
    let r = &app.rates;
    let mut md = String::new();
    let _ = writeln!(md, "# fusebox incident snapshot: {}\n", app.opts.source);
    let _ = writeln!(md, "Written {written}, console time t={}.\n", clock(s.t_ms));
    let _ = writeln!(
        md,
        "Last {} s: ok {:.1}% · degraded {:.1}% · failed {:.1}% of {} requests · {:.0} tok/min · ${:.2}/min\n",
        r.window_ms / 1000,
        r.success * 100.0,
        r.degraded * 100.0,
        r.failed * 100.0,
        r.ended,
        r.tokens_per_min,
        r.usd_per_min
    );
    md.push_str("## Breakers\n\n| breaker | state | failing | ok | failed | short-circuited | p50/p95/p99 ms |\n|---|---|---|---|---|---|---|\n");
    let mut breakers = Vec::new();
    for b in app.breaker_rows() {
        let q = |h: &crate::telemetry::histogram::HistogramView, p| h.quantile(p);
        let lat = app.latency(b).unwrap_or_default();
        let name = match &b.instance {
            Some(i) => format!("{} on {i}", b.target),
            None => b.target.to_string(),
        };
        let state = App::state_label(b.breaker.state);
        let cell = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
        let _ = writeln!(
            md,
            "| {name} | {state} | {:.0}% | {} | {} | {} | {}/{}/{} |",
            b.breaker.failure_rate * 100.0,
            b.stats.ok,
            b.stats.failed,
            b.stats.rejected_open,
            cell(q(&lat, 0.5)),
            cell(q(&lat, 0.95)),
            cell(q(&lat, 0.99)),
        );
        breakers.push(json!({
            "target": b.target,
            "instance": b.instance,
            "state": state,
            "failure_rate": b.breaker.failure_rate,
            "ok": b.stats.ok,
            "failed": b.stats.failed,
            "short_circuited": b.stats.rejected_open,
            "latency_ms": {"p50": q(&lat, 0.5), "p95": q(&lat, 0.95), "p99": q(&lat, 0.99), "over": app.span.label()},
        }));
    }
    let transitions = listed(app, is_transition);
    let operator = listed(app, is_operator);
    for (title, events) in [("Transitions", &transitions), ("Operator actions", &operator)] {
        let _ = writeln!(md, "\n## {title} (newest first)\n");
        for e in events.iter() {
            let on = e.instance.as_deref().map(|i| format!("[{i}] ")).unwrap_or_default();
            let _ = writeln!(md, "- {} {on}{}", clock(e.t_ms), super::said::describe(e));
        }
        if events.is_empty() {
            md.push_str("- none\n");
        }
    }
    let worst = worst(app);
    md.push_str("\n## Worst recent requests (newest first)\n\n");
    let mut requests = Vec::new();
    for q in &worst {
        let id = q.key.as_deref().map(|k| format!(" {k}")).unwrap_or_default();
        let why = q.why.as_deref().map(|w| format!(": {w}")).unwrap_or_default();
        let _ = writeln!(
            md,
            "- {} #{}{id} {} {} q={:.2} path `{}`{why}",
            clock(q.t_ms),
            q.id,
            q.user,
            q.level.as_str(),
            q.quality,
            q.chain
        );
        requests.push(json!({
            "t_ms": q.t_ms, "id": q.id, "request_id": q.key, "upstream_ids": q.upstream,
            "instance": q.instance, "user": q.user, "level": q.level.as_str(), "quality": q.quality,
            "path": q.chain, "why": q.why, "latency_ms": q.latency_ms, "tokens": q.tokens, "cost_usd": q.cost_usd,
        }));
    }
    if worst.is_empty() {
        md.push_str("- none: every recent request got its whole answer\n");
    }
    let _ = writeln!(md, "\n## Screen\n\n```text\n{}\n```", screen.join("\n"));
    let data = json!({
        "written": written,
        "source": app.opts.source,
        "t_ms": s.t_ms,
        "health": {
            "window_ms": r.window_ms, "ended": r.ended, "ok": r.success, "degraded": r.degraded,
            "failed": r.failed, "tokens_per_min": r.tokens_per_min, "usd_per_min": r.usd_per_min,
        },
        "breakers": breakers,
        "transitions": transitions,
        "operator_actions": operator,
        "worst_requests": requests,
        "screen": screen,
    });
    (md, data)
}

/// Snapshots of one second given a name of their own at most (`TIME-2`,
/// `TIME-3`, …).
const SAME_SECOND: usize = 100;

/// Writes the snapshot into `dir` as `fusebox-incident-TIME.md` and
/// `.json`, readable by their owner alone; the Markdown's path. The names
/// are guessable, so nothing already at one is written over or through (a
/// file, a link planted there): the pair takes the next free name,
/// `TIME-2` and so on.
pub fn write(app: &App, screen: &Buffer, dir: &Path) -> std::io::Result<PathBuf> {
    use std::io::Write;
    let written = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let (md, data) = report(app, &screen_text(screen), &written);
    let base = format!("fusebox-incident-{}", written.replace(':', "-"));
    for n in 1..=SAME_SECOND {
        let stem = if n == 1 { base.clone() } else { format!("{base}-{n}") };
        let md_path = dir.join(format!("{stem}.md"));
        let Some(mut md_file) = create_new(&md_path)? else {
            continue;
        };
        let Some(mut json_file) = create_new(&dir.join(format!("{stem}.json")))? else {
            // Just made, empty: given up for the next name.
            drop(md_file);
            std::fs::remove_file(&md_path)?;
            continue;
        };
        md_file.write_all(md.as_bytes())?;
        json_file.write_all(format!("{data:#}\n").as_bytes())?;
        return Ok(md_path);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!("{base}.md and {SAME_SECOND} more of that second are here already: write it from another directory"),
    ))
}

/// A new file at `path`, readable and writable by its owner alone; `None`
/// where the name is taken by anything (a link too, followed nowhere).
fn create_new(path: &Path) -> std::io::Result<Option<std::fs::File>> {
    let mut open = std::fs::OpenOptions::new();
    open.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    match open.open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(e),
    }
}
