//! One console frame with 200 breakers (each with an hour of history),
//! 10,000 users, 1,000 recent requests and 10,000 kept transitions,
//! rendered into a TestBackend (target: ≤ 2 ms).

use criterion::{criterion_group, criterion_main, Criterion};
use fusebox::clock::{Clock, Seed};
use fusebox::config::{Config, ToolConfig};
use fusebox::outcome::{Hop, HopEnd, Level, Outcome};
use fusebox::resilience::breaker::BreakerState;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::telemetry::events::Transition;
use fusebox::telemetry::events::{Event, EventKind};
use fusebox::telemetry::snapshot::Snapshot;
use fusebox::tui::app::{App, Mode, Options};
use fusebox::tui::keymap::KeyMap;
use fusebox::tui::theme::Theme;
use fusebox::tui::ui;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use std::sync::Arc;

fn big_app(rt: &tokio::runtime::Runtime) -> App {
    rt.block_on(async {
        let mut cfg = Config::default();
        cfg.budgets.global_tokens_per_hour = 0;
        cfg.budgets.global_tokens_per_day = 0;
        let template: ToolConfig = cfg.tools["search_docs"].clone();
        for i in 0..190 {
            cfg.tools.insert(format!("tool_{i:03}"), template.clone());
        }
        let runner = Runner::new(cfg, RunnerParts::mock(Clock::with_wall_anchor(0), Seed(1))).unwrap();
        assert!(runner.catalog().registry().len() >= 200);
        for i in 0..10_000u32 {
            let user = format!("user-{i:05}");
            let r = runner.budgets().reserve(&user, 100 + i % 5_000, 0.001, 1_000).unwrap();
            runner.budgets().settle(r, 100 + i % 5_000, 0.001, 1_000);
        }
        let snap = Arc::new(runner.snapshot(10_000, 300));
        assert_eq!(snap.top_users.len(), 10_000);
        let opts = Options {
            mode: Mode::Demo,
            readonly: None,
            yes: false,
            operator: "bench".into(),
            source: "bench".into(),
            replay_length_ms: None,
            replay: None,
        };
        let mut app = App::new(opts, snap.clone());
        // An hour of snapshots a second, three breakers tripping in each.
        let mut breakers = snap.breakers.clone();
        for t in 0..3_600u64 {
            let events = (0..3)
                .map(|i| Event {
                    t_ms: t * 1_000 + i,
                    kind: EventKind::Transition(Transition {
                        breaker: snap.breakers[i as usize].target.clone(),
                        from: BreakerState::Closed,
                        to: BreakerState::Open,
                        reason: "5 failures in a row (503)".into(),
                    }),
                    instance: None,
                })
                .collect();
            for b in &mut breakers {
                b.stats.attempts += 3;
                b.stats.latency.counts[(t % 8) as usize] += 3;
            }
            app.on_snapshot(Arc::new(Snapshot {
                t_ms: t * 1_000,
                breakers: breakers.clone(),
                events,
                ..Snapshot::default()
            }));
        }
        app.on_snapshot(Arc::new(Snapshot {
            t_ms: 3_600_000,
            breakers,
            ..(*snap).clone()
        }));
        for i in 0..1_000u64 {
            let o = Outcome {
                request: i,
                user: format!("user-{:05}", i * 7 % 10_000).into(),
                level: if i % 3 == 0 { Level::Fallback } else { Level::None },
                chain: vec![
                    Hop {
                        tries: 3,
                        ..Hop::new("gpt-4o", HopEnd::Failed("503".into()))
                    },
                    Hop::ok("claude-haiku"),
                ],
                quality: 0.85,
                tokens: 900,
                cost_usd: 0.004,
                missing: vec![],
                user_message: None,
                answer: None,
                stale_ms: None,
                attempts: 4,
                latency_ms: 2_300,
                key: None,
            };
            app.on_event(&Event {
                t_ms: i,
                kind: EventKind::Outcome(Box::new(o)),
                instance: None,
            });
        }
        app
    })
}

fn frame(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let app = big_app(&rt);
    let theme = Theme::built_in("default").unwrap();
    let keys = KeyMap::defaults();
    let mut t = Terminal::new(TestBackend::new(140, 45)).unwrap();
    c.bench_function(
        "console frame 140x45: 200 breakers with an hour each, 10k users, 1k recent, 10k kept events",
        |b| {
            b.iter(|| {
                t.draw(|f| ui::draw(f, &app, &theme, &keys)).unwrap();
            })
        },
    );
}

criterion_group!(benches, frame);
criterion_main!(benches);
