//! `fusebox replay LOG --compare A B`: one log under two configs, in
//! virtual time, side by side.

use super::replay::{replay_runner, ReplayArgs};
use super::run::spool_file;
use crate::config::Config;
use crate::telemetry::stats::StatsView;
use crate::traffic::replay::ReplayOptions;
use crate::traffic::summary::{collect_transitions, Summary};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Replays the log under `a` and under `b` and prints what differs.
pub fn compare(args: &ReplayArgs, a: &PathBuf, b: &PathBuf) -> Result<()> {
    crate::alloc::keep_freed_memory();
    let recorded = args.recorded()?;
    let mut summaries = Vec::new();
    let configs = [Config::load(a)?, Config::load(b)?];
    for (i, cfg) in configs.iter().cloned().enumerate() {
        args.check(&cfg, recorded, super::args::Speed::Max)?;
        let (reader, seed) = args.open()?;
        let (spool, _spool_dir) = spool_file(None, &cfg)?;
        let rt = crate::traffic::replay::runtime(!recorded, true)?;
        let wall = std::time::Instant::now();
        let opts = ReplayOptions {
            operator: !args.no_operator,
            jump_idle: true,
            ..ReplayOptions::default()
        };
        let summary = rt.block_on(async move {
            let clock = crate::traffic::replay::replay_clock(reader.header());
            let (runner, fleet) = replay_runner(cfg, reader.header(), seed, spool, recorded, clock)?;
            let transitions = collect_transitions(&runner);
            let out = crate::traffic::replay::replay(runner.clone(), reader, fleet, opts).await?;
            runner.events().close_subscribers();
            let seen = transitions.await?;
            let mut s = Summary::build(
                &runner,
                &seen,
                out.lost,
                clock.elapsed_ms(),
                wall.elapsed().as_millis() as u64,
            );
            // Both configs read the same log: its skipped lines are said once.
            args.skipped(&mut s, &out, i == 0);
            anyhow::Ok(s)
        })?;
        summaries.push(summary);
    }
    let (x, y) = (&summaries[0], &summaries[1]);
    println!("A = {}\nB = {}", a.display(), b.display());
    let changed = settings_changed(&configs[0], &configs[1]);
    if changed.is_empty() {
        println!("settings: the same");
    } else {
        println!("settings that differ (A → B):");
        for line in &changed {
            println!("  {line}");
        }
    }
    println!();
    print_table(x, y, a, b);
    if let Some(p) = &args.summary_json {
        let both = serde_json::json!({ "a": { "config": a, "summary": x }, "b": { "config": b, "summary": y } });
        std::fs::write(p, format!("{}\n", serde_json::to_string_pretty(&both)?))
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

/// The two summaries, a row per figure, differences marked.
fn print_table(x: &Summary, y: &Summary, a: &Path, b: &Path) {
    let rows: Vec<(&str, f64, f64)> = vec![
        ("requests", x.requests as f64, y.requests as f64),
        ("level none", x.by_level.none as f64, y.by_level.none as f64),
        ("level partial", x.by_level.partial as f64, y.by_level.partial as f64),
        ("level fallback", x.by_level.fallback as f64, y.by_level.fallback as f64),
        ("level deferred", x.by_level.deferred as f64, y.by_level.deferred as f64),
        ("level failed", x.by_level.failed as f64, y.by_level.failed as f64),
        ("tokens consumed", x.tokens.consumed as f64, y.tokens.consumed as f64),
        ("tokens wasted", x.tokens.wasted as f64, y.tokens.wasted as f64),
        ("cost usd", x.cost_usd, y.cost_usd),
        ("calls made", calls(x, |t| t.attempts), calls(y, |t| t.attempts)),
        ("calls failed", calls(x, |t| t.failed), calls(y, |t| t.failed)),
        (
            "calls short-circuited",
            calls(x, |t| t.rejected_open),
            calls(y, |t| t.rejected_open),
        ),
        ("retries", calls(x, |t| t.retries), calls(y, |t| t.retries)),
        ("transitions", x.transitions.len() as f64, y.transitions.len() as f64),
        (
            "budget rejections",
            x.budget_rejections.values().sum::<u64>() as f64,
            y.budget_rejections.values().sum::<u64>() as f64,
        ),
        ("lost", x.lost as f64, y.lost as f64),
    ];
    let label = |tag: &str, p: &Path| {
        let name: String = short(p).chars().take(11).collect();
        format!("{tag}: {name}")
    };
    println!("{:<22} {:>14} {:>14} {:>12}", "", label("A", a), label("B", b), "B - A");
    for (name, va, vb) in rows {
        let mark = if (va - vb).abs() > 1e-9 { "  *" } else { "" };
        let fmt = |v: f64| {
            if v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.4}")
            }
        };
        println!("{name:<22} {:>14} {:>14} {:>12}{mark}", fmt(va), fmt(vb), fmt(vb - va));
    }
}

/// A figure summed over providers and tools (model breakers see the same
/// calls as their provider).
fn calls(s: &Summary, f: impl Fn(&StatsView) -> u64) -> f64 {
    s.targets
        .iter()
        .filter(|(k, _)| k.kind() != crate::target::Kind::Model)
        .map(|(_, v)| f(v))
        .sum::<u64>() as f64
}

/// Settings shown past this many are counted, not listed.
const CHANGES_SHOWN: usize = 40;

/// Each setting whose value differs between `a` and `b`, as
/// `path: A → B` (defaults filled in, so a file that leaves a setting
/// out is compared with its default).
fn settings_changed(a: &Config, b: &Config) -> Vec<String> {
    let (Ok(va), Ok(vb)) = (serde_json::to_value(a), serde_json::to_value(b)) else {
        return vec!["(the configs could not be compared)".into()];
    };
    let mut out = Vec::new();
    diff("", &va, &vb, &mut out);
    if out.len() > CHANGES_SHOWN {
        let more = out.len() - CHANGES_SHOWN;
        out.truncate(CHANGES_SHOWN);
        out.push(format!("… and {more} more"));
    }
    out
}

fn diff(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    let at = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => diff(&at(k), p, q, out),
                    (p, q) => out.push(format!("{}: {} → {}", at(k), shown(p), shown(q))),
                }
            }
        }
        _ if a != b => out.push(format!("{path}: {a} → {b}")),
        _ => {}
    }
}

fn shown(v: Option<&serde_json::Value>) -> String {
    v.map_or_else(|| "(none)".into(), ToString::to_string)
}

fn short(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}
