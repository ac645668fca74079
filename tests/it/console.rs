//! The console as the operator sees it: every pane and overlay rendered into
//! a TestBackend in meaningful states (snapshots), and key-driven commands.

use fusebox::clock::{Clock, Seed};
use fusebox::command::Command;
use fusebox::command::Issuer;
use fusebox::config::Config;
use fusebox::provider::fault::{Fault, FaultSpec};
use fusebox::request::AgentRequest;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::target::Target;
use fusebox::telemetry::events::EventKind;
use fusebox::traffic::load::make_request;
use fusebox::tui::app::{App, Dispatch, Effect, Mode, Options, Overlay, Pane};
use fusebox::tui::control::apply;
use fusebox::tui::keymap::KeyMap;
use fusebox::tui::theme::Theme;
use fusebox::tui::{ui, SNAPSHOT_EVENTS, SNAPSHOT_USERS};
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::Terminal;
use std::sync::Arc;
use std::time::Duration;

fn opts(readonly: bool) -> Options {
    Options {
        mode: Mode::Demo,
        readonly: readonly.then(|| "started with --readonly".into()),
        yes: false,
        operator: "ana".into(),
        source: "scenario test".into(),
        replay_length_ms: None,
        replay: None,
    }
}

/// A runner that went through an incident: openai down (its breakers
/// open, traffic fell back), anthropic refills frozen by an operator, one
/// user over budget. Returns the runner and a console that watched it.
pub(crate) async fn incident(readonly: bool) -> (Arc<Runner>, App) {
    let mut cfg = Config::default();
    cfg.budgets.user_tokens_per_minute = 4_000;
    let runner = Runner::new(cfg, RunnerParts::mock(Clock::with_wall_anchor(0), Seed(5))).unwrap();
    let mut events = runner.events().subscribe();
    let mut app = App::new(
        opts(readonly),
        Arc::new(runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS)),
    );
    runner
        .operations()
        .apply(
            &Command::SetFault {
                target: Target::provider("openai"),
                fault: FaultSpec::always(Fault::Status {
                    code: 503,
                    retry_after_ms: None,
                }),
            },
            &Issuer::operator("scenario"),
        )
        .unwrap();
    for i in 1..=40u64 {
        let mut req: AgentRequest = make_request(Seed(5), i, 6);
        if i % 4 == 0 {
            req.user = "tenant-big".into();
            Arc::make_mut(&mut req.messages)[1].content =
                "Summarise this contract clause by clause. ".repeat(150).into();
        }
        runner.run(&req).await;
        tokio::time::advance(Duration::from_millis(700)).await;
        app.on_snapshot(Arc::new(runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS)));
        while let Ok(e) = events.try_recv() {
            app.on_event(&e);
        }
    }
    // The big tenant's last burst, within one minute: over its budget.
    for i in 41..=44u64 {
        let mut req = make_request(Seed(5), i, 6);
        req.user = "tenant-big".into();
        Arc::make_mut(&mut req.messages)[1].content = "Summarise this contract clause by clause. ".repeat(150).into();
        runner.run(&req).await;
    }
    while let Ok(e) = events.try_recv() {
        app.on_event(&e);
    }
    runner
        .operations()
        .apply(
            &Command::FreezeRefill {
                target: Target::provider("anthropic"),
            },
            &Issuer::operator("ana"),
        )
        .unwrap();
    app.on_snapshot(Arc::new(runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS)));
    (runner, app)
}

pub(crate) fn text(buf: &Buffer) -> String {
    let area = buf.area;
    let mut out = String::new();
    for y in 0..area.height {
        let mut line = String::new();
        for x in 0..area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub(crate) fn render(app: &App, w: u16, h: u16) -> Buffer {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| ui::draw(f, app, &Theme::built_in("default").unwrap(), &KeyMap::defaults()))
        .unwrap();
    t.backend().buffer().clone()
}

fn render_pane(app: &App, w: u16, h: u16, pane: fn(&mut ratatui::Frame, Rect, &App, &Theme)) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| pane(f, Rect::new(0, 0, w, h), app, &Theme::built_in("default").unwrap()))
        .unwrap();
    text(t.backend().buffer())
}

fn key(c: char) -> crossterm::event::KeyEvent {
    crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Char(c), crossterm::event::KeyModifiers::NONE)
}

#[tokio::test(start_paused = true)]
async fn panes_in_an_incident() {
    let (_runner, mut app) = incident(false).await;
    // A user at 92 % of the minute budget, as the budget pane must flag it.
    let mut snap = (*app.snap).clone();
    snap.top_users.insert(
        0,
        fusebox::telemetry::snapshot::UserRow {
            view: fusebox::resilience::budget::UserView {
                user: "tenant-heavy".into(),
                tokens: [3_700.0, 3_700.0, 3_700.0],
                cost_day: 0.012,
                shares: [0.925, 0.0074, 0.00185, 0.0024],
                pressure: 0.925,
                rejections: 3,
                spend_rate: Default::default(),
            },
            instance: None,
        },
    );
    // An agent whose spend-rate breaker is open: said under its row.
    snap.top_users.insert(
        0,
        fusebox::telemetry::snapshot::UserRow {
            view: fusebox::resilience::budget::UserView {
                user: "agent-loop".into(),
                tokens: [21_000.0, 260_000.0, 260_000.0],
                cost_day: 0.31,
                shares: [0.42, 0.52, 0.13, 0.062],
                pressure: 1.0,
                rejections: 9,
                spend_rate: fusebox::resilience::budget::RateView {
                    tokens_per_minute: 9_000.0,
                    baseline_per_minute: 6_100.0,
                    open_ms: 252_400,
                    trip_ratio: 3.1,
                    trips: 1,
                },
            },
            instance: None,
        },
    );
    // openai's adaptive limit, just cut on a 429.
    let openai = snap.limiters.iter_mut().find(|l| l.provider == "openai").unwrap();
    openai.limiter.concurrency = (14, 14);
    openai.limiter.adaptive = Some(fusebox::resilience::limiter::AdaptiveView {
        limit: 14,
        floor: 1,
        ceiling: 256,
        moved: Some(fusebox::resilience::limiter::adaptive::Move::Overloaded),
        moved_ms_ago: Some(3_400),
        latency_ms: Some((1_840.0, 1_790.0)),
        moves: [40, 3, 0],
    });
    // Its queue, shedding the flooding tenant.
    openai.limiter.queue = Some(fusebox::resilience::limiter::QueueView {
        waiting: [0, 12, 3],
        max: 1_000,
        shed: [0, 2_327, 339],
        shed_most: vec![("tenant-noisy".into(), 2_327), ("tenant-batch".into(), 339)],
    });
    app.snap = Arc::new(snap);
    insta::assert_snapshot!("header", render_pane(&app, 140, 3, ui::header::draw));
    insta::assert_snapshot!("breakers_open", render_pane(&app, 140, 13, ui::breakers::draw));
    insta::assert_snapshot!("limiters_frozen", render_pane(&app, 64, 11, ui::limiters::draw));
    insta::assert_snapshot!("budgets_over_limit", render_pane(&app, 76, 10, ui::budgets::draw));
    insta::assert_snapshot!("chains_fallback", render_pane(&app, 100, 12, ui::chains::draw));
    insta::assert_snapshot!("events", render_pane(&app, 110, 12, ui::events::draw));
    let s = render_pane(&app, 140, 13, ui::breakers::draw);
    assert!(s.contains("provider:openai") && s.contains("open"), "{s}");
    let l = render_pane(&app, 64, 11, ui::limiters::draw);
    assert!(l.contains("FROZEN (operator)"), "{l}");
    assert!(l.contains("conc 14/14 adaptive cut: overload 3s ago"), "{l}");
    assert!(l.contains("queue c0 d12 b3 shed 2.7k tenant-noisy"), "{l}");
    let b = render_pane(&app, 76, 10, ui::budgets::draw);
    assert!(b.contains("!tenant-heavy"), "near-limit users are marked in text: {b}");
    assert!(
        b.contains("!agent-loop") && b.contains("⊘ spend-rate breaker open 4m13s: ×3.1 its baseline"),
        "an open spend-rate breaker is said under its user: {b}"
    );
    assert!(
        b.lines()
            .any(|l| l.contains("tenant-big") && l.trim_end().ends_with("14    │")),
        "{b}"
    );
    let c = render_pane(&app, 100, 12, ui::chains::draw);
    assert!(
        c.contains("gpt-4o ⊘open → claude-haiku ✓") && c.contains("fallback q=0.85"),
        "{c}"
    );
    // `r` on a user whose spend-rate breaker is open closes it (as it
    // resets a breaker, without asking).
    let keys = KeyMap::defaults();
    app.on_key(key('3'), &keys);
    assert_eq!(
        app.on_key(key('r'), &keys),
        Effect::Send(Dispatch {
            command: Command::ResetSpendRate {
                user: Some("agent-loop".into())
            },
            to: None
        })
    );
    app.on_key(key('j'), &keys);
    assert_eq!(app.on_key(key('r'), &keys), Effect::None);
    assert_eq!(app.status, "tenant-heavy's spend-rate breaker is not open");
}

#[tokio::test(start_paused = true)]
async fn whole_console_with_help_and_confirm_overlays() {
    let (_runner, mut app) = incident(false).await;
    insta::assert_snapshot!("console", text(&render(&app, 140, 45)));
    app.on_key(key('?'), &KeyMap::defaults());
    assert_eq!(app.overlay, Overlay::Help);
    let help = text(&render(&app, 140, 45));
    assert!(
        help.contains("force the selected breaker open") || help.contains("force-open") || help.contains(" o "),
        "{help}"
    );
    insta::assert_snapshot!("help", help);
    app.on_key(
        crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Esc, crossterm::event::KeyModifiers::NONE),
        &KeyMap::defaults(),
    );
    assert_eq!(app.overlay, Overlay::None);
    app.on_key(key('o'), &KeyMap::defaults());
    assert!(matches!(app.overlay, Overlay::Confirm { .. }));
    insta::assert_snapshot!("confirm", text(&render(&app, 140, 45)));
}

#[tokio::test(start_paused = true)]
async fn force_open_after_confirmation_shows_on_the_next_frame() {
    let (runner, mut app) = incident(false).await;
    let keys = KeyMap::defaults();
    // Filter the breakers down to the one to act on.
    app.on_key(key('/'), &keys);
    for c in "tool:get_order".chars() {
        app.on_key(key(c), &keys);
    }
    app.on_key(
        crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Enter, crossterm::event::KeyModifiers::NONE),
        &keys,
    );
    assert_eq!(app.focus, Pane::Breakers);
    assert_eq!(app.on_key(key('o'), &keys), Effect::None, "asks first");
    let sent = app.on_key(key('y'), &keys);
    assert_eq!(
        sent,
        Effect::Send(Dispatch {
            command: Command::ForceOpen {
                target: Target::tool("get_order")
            },
            to: None
        })
    );
    let Effect::Send(order) = sent else { unreachable!() };
    apply(&*runner, &mut app, order).await;
    let frame = text(&render(&app, 140, 45));
    let row = frame.lines().find(|l| l.contains("▶ tool:get_order")).unwrap();
    assert!(row.contains("forced_open"), "{row}");
    // The runner heard it, with the operator's name.
    let ev = runner.events().recent(5);
    assert!(ev.iter().any(|e| matches!(&e.kind,
        EventKind::Operator { command, by, .. } if command.action() == "force_open" && by.name == "ana")));
    assert!(
        frame.contains("operator ana: force_open tool:get_order"),
        "the events pane shows it"
    );
}

#[tokio::test(start_paused = true)]
async fn readonly_blocks_commands_and_says_so() {
    let (runner, mut app) = incident(true).await;
    let keys = KeyMap::defaults();
    for c in ['o', 'c', 'r', 'd', 'x', 'D'] {
        assert_eq!(app.on_key(key(c), &keys), Effect::None, "{c}");
        assert_eq!(app.overlay, Overlay::None);
        assert!(app.status.starts_with("read-only:"), "{}", app.status);
    }
    let frame = text(&render(&app, 140, 45));
    assert!(frame.contains("READONLY"));
    assert!(frame.contains("read-only: toggle-drill is disabled"), "{frame}");
    assert!(runner
        .catalog()
        .registry()
        .iter()
        .all(|t| !format!("{:?}", t.breaker.state()).contains("Forced")));
    // Watching still works.
    assert_eq!(app.on_key(key('j'), &keys), Effect::None);
    assert_eq!(app.selection(Pane::Breakers), 1);
}

#[tokio::test(start_paused = true)]
async fn fault_and_refill_keys_target_the_selection() {
    let (runner, mut app) = incident(false).await;
    let keys = KeyMap::defaults();
    app.on_key(key('2'), &keys);
    assert_eq!(app.focus, Pane::Limiters);
    // First limiter is anthropic (frozen by the operator): f unfreezes without asking.
    let e = app.on_key(key('f'), &keys);
    assert_eq!(
        e,
        Effect::Send(Dispatch {
            command: Command::UnfreezeRefill {
                target: Target::provider("anthropic")
            },
            to: None
        })
    );
    if let Effect::Send(order) = e {
        apply(&*runner, &mut app, order).await;
    }
    assert!(app.snap.limiters.iter().all(|l| l.limiter.frozen.is_none()));
    // x cycles the mock fault of the selected provider.
    let e = app.on_key(key('x'), &keys);
    assert!(
        matches!(e, Effect::Send(Dispatch { command: Command::SetFault { ref target, .. }, .. }) if *target == Target::provider("anthropic")),
        "{e:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn selection_follows_the_breaker_when_the_order_changes() {
    let (runner, mut app) = incident(false).await;
    let keys = KeyMap::defaults();
    // Select the third row, then let its rank change.
    app.on_key(key('j'), &keys);
    app.on_key(key('j'), &keys);
    let chosen = app.breaker_rows()[app.selection(Pane::Breakers)].target.clone();
    runner
        .operations()
        .apply(
            &Command::Reset {
                target: Target::provider("openai"),
            },
            &Issuer::operator("t"),
        )
        .unwrap();
    runner
        .operations()
        .apply(
            &Command::Reset {
                target: Target::model("gpt-4o"),
            },
            &Issuer::operator("t"),
        )
        .unwrap();
    app.on_snapshot(Arc::new(runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS)));
    app.on_key(key('s'), &keys); // re-sort by volume
    assert_eq!(app.breaker_rows()[app.selection(Pane::Breakers)].target, chosen);
    app.on_key(key('o'), &keys);
    let Overlay::Confirm { order, .. } = &app.overlay else {
        panic!("confirm expected")
    };
    assert_eq!(order.command, Command::ForceOpen { target: chosen });
}

#[tokio::test(start_paused = true)]
async fn replay_mode_shows_progress_through_the_log() {
    let (_runner, mut app) = incident(false).await;
    app.opts.mode = Mode::Replay;
    app.opts.replay_length_ms = Some(254_000);
    let h = render_pane(&app, 160, 3, ui::header::draw);
    // The incident ran 127 s of the log's 254 s.
    assert!(h.contains("REPLAY") && h.contains("50% of 04:14"), "{h}");
}

#[tokio::test(start_paused = true)]
async fn replay_mode_shows_how_the_replay_ended() {
    use fusebox::cli::replay::ReplayShown;
    use fusebox::traffic::log::LogError;
    use fusebox::traffic::replay::Replayed;
    let (_runner, mut app) = incident(false).await;
    app.opts.mode = Mode::Replay;
    app.opts.replay_length_ms = Some(254_000);
    let shown = Arc::new(ReplayShown::default());
    app.opts.replay = Some(shown.clone());
    shown.end.set(&Err(LogError::BadLine {
        path: "night.jsonl".into(),
        line: 7,
        field: "t_ms".into(),
        message: "goes backwards".into(),
    }));
    let h = render_pane(&app, 160, 3, ui::header::draw);
    assert!(
        h.contains("replay stopped: night.jsonl:7: field `t_ms`: goes backwards") && !h.contains("50%"),
        "{h}"
    );
    shown.end.set(&Ok(Replayed {
        requests: 631,
        lost: 0,
        bad_lines: 2,
        unknown_kinds: 0,
        torn_lines: 1,
        operator_actions: 1,
        operator_refused: vec!["line 9: reset tool:gone: unknown target `tool:gone`".into()],
        levels: Default::default(),
    }));
    let h = render_pane(&app, 160, 3, ui::header::draw);
    assert!(
        h.contains(
            "replay done: 631 requests, 0 lost, 2 bad lines, 1 torn last line skipped, 1 recorded operator action(s) not applicable"
        ),
        "{h}"
    );
    // A replay that is over stays at the log's end, its clock gone past.
    app.opts.replay_length_ms = Some(100_000);
    let h = render_pane(&app, 160, 3, ui::header::draw);
    assert!(h.contains(" t=01:40 ") && app.snap.t_ms > 100_000, "{h}");
}

#[tokio::test(start_paused = true)]
async fn replay_mode_shows_the_recorded_outcome_of_the_selected_request() {
    use fusebox::cli::replay::ReplayShown;
    use fusebox::outcome::Level;
    use fusebox::traffic::log::OutcomeRec;
    let (_runner, mut app) = incident(false).await;
    let rows: Vec<(u64, Level)> = app.recent_rows().iter().map(|r| (r.id, r.level)).collect();
    let shown = Arc::new(ReplayShown::default());
    let kept = &shown.outcomes;
    // The first listed request was recorded differently, the second alike.
    let (first, second) = (rows[0], rows[1]);
    let other = if first.1 == Level::Failed {
        Level::None
    } else {
        Level::Failed
    };
    for ((id, level), chain) in [(first.0, other), (second.0, second.1)]
        .into_iter()
        .zip(["gpt-4o ✓", "claude-haiku ✓"])
    {
        kept.add(OutcomeRec {
            t_ms: 0,
            request: id.into(),
            level,
            chain: vec![chain.into()],
            quality: 1.0,
            tokens: 321,
            cost_usd: 0.0,
            missing: vec![],
            key: None,
        });
    }
    app.opts.mode = Mode::Replay;
    app.opts.replay = Some(shown.clone());
    app.on_key(key('4'), &KeyMap::defaults());
    let pane = render_pane(&app, 140, 12, ui::chains::draw);
    let lines: Vec<&str> = pane.lines().collect();
    let at = lines.iter().position(|l| l.contains("┃▶")).expect("a selected row");
    assert!(
        lines[at].contains(&format!("#{:<6}", first.0)) && lines[at].contains("≠ "),
        "{pane}"
    );
    let detail = format!(
        "recorded: {} (replayed {}) q=1.00 321 tok  gpt-4o ✓",
        other.as_str(),
        first.1.as_str()
    );
    assert!(lines[at + 1].contains(&detail), "{pane}");
    assert!(
        !lines[at + 2].contains("≠"),
        "the second row was recorded alike: {pane}"
    );
    app.on_key(key('j'), &KeyMap::defaults());
    let pane = render_pane(&app, 140, 12, ui::chains::draw);
    let detail = format!("recorded: {} (same) q=1.00 321 tok  claude-haiku ✓", second.1.as_str());
    assert!(pane.contains(&detail), "{pane}");
}

/// The name in the header stands out from the header's own background in
/// every built-in theme (it used to be cyan on cyan, blue on blue, white on
/// white).
#[tokio::test(start_paused = true)]
async fn the_header_s_name_shows_in_every_theme() {
    use ratatui::style::{Color, Modifier};
    let (_runner, app) = incident(false).await;
    for name in ["default", "light", "high-contrast", "mono"] {
        let theme = Theme::built_in(name).unwrap();
        let mut t = Terminal::new(TestBackend::new(120, 3)).unwrap();
        t.draw(|f| ui::header::draw(f, Rect::new(0, 0, 120, 3), &app, &theme))
            .unwrap();
        let buf = t.backend().buffer();
        let word: String = (1..8).map(|x| buf[(x, 0)].symbol().to_string()).collect();
        assert_eq!(word, "fusebox", "{name}");
        let cell = &buf[(1, 0)];
        let (fg, bg) = if cell.modifier.contains(Modifier::REVERSED) {
            (cell.bg, cell.fg)
        } else {
            (cell.fg, cell.bg)
        };
        assert!(
            fg != bg || fg == Color::Reset,
            "{name}: `fusebox` drawn {fg:?} on {bg:?}"
        );
    }
}

/// A filter being typed shows a cursor; a kept one says it is a filter and
/// how to clear it; Esc then clears it.
#[tokio::test(start_paused = true)]
async fn a_kept_filter_looks_kept_and_esc_clears_it() {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let (_runner, mut app) = incident(false).await;
    let keys = KeyMap::defaults();
    let press = |app: &mut App, code| app.on_key(KeyEvent::new(code, KeyModifiers::NONE), &keys);
    app.on_key(key('/'), &keys);
    for c in "tool".chars() {
        app.on_key(key(c), &keys);
    }
    let typing = render_pane(&app, 140, 14, ui::breakers::draw);
    assert!(typing.contains("/tool▏"), "{typing}");
    press(&mut app, KeyCode::Enter);
    let kept = render_pane(&app, 140, 14, ui::breakers::draw);
    assert!(
        kept.contains("filter \"tool\" (Esc clears)") && !kept.contains('▏'),
        "{kept}"
    );
    assert!(!kept.contains("provider:openai"), "filtered: {kept}");
    press(&mut app, KeyCode::Esc);
    let cleared = render_pane(&app, 140, 14, ui::breakers::draw);
    assert!(
        !cleared.contains("filter \"") && cleared.contains("provider:openai"),
        "{cleared}"
    );
    assert_eq!(app.status, "filter cleared");
}

/// A frozen display shows nothing new at all (rates, sparklines, recent
/// requests, the clock) while the runner goes on; unfrozen, it is live again.
#[tokio::test(start_paused = true)]
async fn a_frozen_display_changes_nothing_on_screen() {
    let (runner, mut app) = incident(false).await;
    let keys = KeyMap::defaults();
    let mut events = runner.events().subscribe();
    app.on_key(key('F'), &keys);
    assert!(app.display_frozen);
    let frozen = text(&render(&app, 140, 45));
    for i in 100..110u64 {
        runner.run(&make_request(Seed(6), i, 6)).await;
        tokio::time::advance(Duration::from_millis(1_500)).await;
        app.on_snapshot(Arc::new(runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS)));
        while let Ok(e) = events.try_recv() {
            app.on_event(&e);
        }
    }
    assert_eq!(text(&render(&app, 140, 45)), frozen, "frozen: the same screen");
    app.on_key(key('F'), &keys);
    assert_eq!(app.status, "display live");
    app.on_snapshot(Arc::new(runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS)));
    assert_ne!(text(&render(&app, 140, 45)), frozen, "live again");
}

/// On an SSH terminal of 80×24 or 100×30, every breaker's full name and
/// state stay readable: columns give way by priority (sparkline and
/// counters first), and the names are never cut.
#[tokio::test(start_paused = true)]
async fn small_terminals_keep_every_breakers_name_and_state() {
    let (_runner, mut app) = incident(false).await;
    for (w, h) in [(80u16, 24u16), (100, 30)] {
        let frame = text(&render(&app, w, h));
        for b in &app.snap.breakers {
            let (name, state) = (b.target.to_string(), App::state_label(b.breaker.state));
            assert!(
                frame
                    .lines()
                    .any(|l| l.contains(&format!("{name} ")) && l.contains(state)),
                "{name} {state} at {w}×{h}:\n{frame}"
            );
        }
        insta::assert_snapshot!(format!("small_{w}x{h}"), frame);
    }
    // `z` zooms the focused pane to the whole screen, and back.
    let keys = KeyMap::defaults();
    app.on_key(key('3'), &keys);
    app.on_key(key('z'), &keys);
    let zoomed = text(&render(&app, 80, 24));
    assert!(
        zoomed.contains("3 Budgets") && !zoomed.contains("1 Breakers"),
        "{zoomed}"
    );
    insta::assert_snapshot!("small_80x24_zoomed", zoomed);
    app.on_key(key('z'), &keys);
    assert!(text(&render(&app, 80, 24)).contains("1 Breakers"));
}

/// Enter shows everything about the selected breaker (its transitions'
/// reasons whole, cut in the events pane) or event; Esc closes it.
#[tokio::test(start_paused = true)]
async fn enter_shows_the_selected_breaker_and_event_in_full() {
    let (_runner, mut app) = incident(false).await;
    let keys = KeyMap::defaults();
    app.on_key(key('1'), &keys);
    let b = app.breaker_rows()[app.selection(Pane::Breakers)].target.clone();
    app.on_key(
        crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Enter, crossterm::event::KeyModifiers::NONE),
        &keys,
    );
    assert_eq!(app.overlay, Overlay::Detail);
    let frame = text(&render(&app, 140, 45));
    assert!(
        frame.contains(&format!(" {b} ")) && frame.contains("transitions (newest first):"),
        "{frame}"
    );
    assert!(frame.contains("latency, since start: p50"), "{frame}");
    assert!(frame.contains("opens at 5 failures in a row"), "its settings: {frame}");
    assert!(frame.contains("#40 gpt-4o 503 in 62 ms"), "its last calls: {frame}");
    let trip = frame.find("tripped at 00:02 by").expect("the failures that tripped it");
    assert_eq!(
        frame[trip..]
            .lines()
            .skip(1)
            .take(5)
            .filter(|l| l.contains(" 503 in "))
            .count(),
        5,
        "{frame}"
    );
    assert!(!frame.contains("pool "), "a model has no pool: {frame}");
    insta::assert_snapshot!("detail_breaker", frame);
    let esc = crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Esc, crossterm::event::KeyModifiers::NONE);
    let enter = crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Enter, crossterm::event::KeyModifiers::NONE);
    app.on_key(esc, &keys);
    assert_eq!(app.overlay, Overlay::None);
    // A limiter: its buckets and why its refills are frozen.
    app.on_key(key('2'), &keys);
    app.on_key(enter, &keys);
    let frame = text(&render(&app, 140, 45));
    assert!(frame.contains(" limiter anthropic "), "{frame}");
    assert!(
        frame.contains("refills frozen by an operator, until unfrozen"),
        "{frame}"
    );
    assert!(frame.contains("ITPM: "), "{frame}");
    // The freeze it states is in its list of freezes, with who froze it.
    assert!(frame.contains("refill freezes (newest first):"), "{frame}");
    assert!(frame.contains("operator ana: freeze_refill anthropic"), "{frame}");
    assert!(!frame.contains("none yet"), "{frame}");
    app.on_key(esc, &keys);
    // A user: spend against each limit, refusals and recent requests.
    app.on_key(key('3'), &keys);
    let who = app.user_rows()[app.selection(Pane::Budgets)].view.user.clone();
    app.on_key(enter, &keys);
    let frame = text(&render(&app, 140, 45));
    assert!(frame.contains(&format!(" user {who} ")), "{frame}");
    assert!(
        frame.contains("tokens this minute: ") && frame.contains("refused by a budget"),
        "{frame}"
    );
    assert!(frame.contains("recent requests (newest first):"), "{frame}");
    assert!(!frame.contains("none seen yet"), "{who}'s requests are listed: {frame}");
    app.on_key(esc, &keys);
}

/// A tool's detail shows its pool: its size, what is in use and waiting,
/// its room to wait and what it refused.
#[tokio::test(start_paused = true)]
async fn a_tool_s_detail_shows_its_pool() {
    let (_runner, mut app) = incident(false).await;
    let keys = KeyMap::defaults();
    let enter = crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Enter, crossterm::event::KeyModifiers::NONE);
    app.on_key(key('1'), &keys);
    app.on_key(key('/'), &keys);
    for c in "tool:get_order".chars() {
        app.on_key(key(c), &keys);
    }
    app.on_key(enter, &keys);
    app.on_key(enter, &keys);
    assert_eq!(app.overlay, Overlay::Detail);
    let frame = text(&render(&app, 140, 45));
    assert!(frame.contains(" tool:get_order "), "{frame}");
    assert!(
        frame.contains("pool 0/8 in use · 0 waiting (room for 32) · 0 refused since start"),
        "{frame}"
    );
}

/// Spans the trace exporter dropped are said in the header, and only then.
#[test]
fn dropped_trace_spans_are_said_in_the_header() {
    let runner = Runner::new(
        Config::default(),
        RunnerParts::mock(Clock::with_wall_anchor(0), Seed(5)),
    )
    .unwrap();
    let snap = runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS);
    let app = App::new(opts(false), Arc::new(snap));
    assert!(!text(&render(&app, 160, 40)).contains("traces:"));
    runner
        .totals()
        .spans_dropped
        .fetch_add(37, std::sync::atomic::Ordering::Relaxed);
    let app = App::new(opts(false), Arc::new(runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS)));
    let screen = text(&render(&app, 160, 40));
    assert!(
        screen.lines().nth(1).unwrap().contains("traces: 37 spans dropped"),
        "{screen}"
    );
}

/// Calls fusebox refused for want of a file descriptor are said in the
/// header (its own shortage, not a provider's), and only then.
#[test]
fn calls_refused_for_want_of_descriptors_are_said_in_the_header() {
    let runner = Runner::new(
        Config::default(),
        RunnerParts::mock(Clock::with_wall_anchor(0), Seed(5)),
    )
    .unwrap();
    let mut snap = runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS);
    let app = App::new(opts(false), Arc::new(snap.clone()));
    assert!(!text(&render(&app, 160, 40)).contains("DESCRIPTORS"));
    snap.descriptor_refusals = 12;
    let screen = text(&render(&App::new(opts(false), Arc::new(snap)), 160, 40));
    assert!(
        screen
            .lines()
            .nth(1)
            .unwrap()
            .contains("OUT OF FILE DESCRIPTORS: 12 calls refused"),
        "{screen}"
    );
}

#[tokio::test(start_paused = true)]
async fn every_overlay_takes_every_key_while_open_and_the_help_scrolls_on_a_small_terminal() {
    let (runner, mut app) = incident(false).await;
    let keys = KeyMap::defaults();
    let before = runner.events().recent(1000).len();
    app.on_key(key('?'), &keys);
    // The keys that act on the panes behind it do nothing while it is open.
    for c in ['d', 'r', 'o', 'c', 'f', 'x', '1', '/', 'z', 'p'] {
        assert_eq!(app.on_key(key(c), &keys), Effect::None, "{c}");
        assert_eq!(app.overlay, Overlay::Help, "{c} left the help open");
    }
    assert_eq!(app.focus, Pane::Breakers);
    assert!(app.filters.iter().all(|f| f.is_empty()));
    assert_eq!(runner.events().recent(1000).len(), before, "no command went out");
    // At 80×24 it does not fit: it says so and scrolls to its end.
    let small = text(&render(&app, 80, 24));
    assert!(small.contains("to scroll (0/"), "{small}");
    assert!(!small.contains("ask for confirmation"), "{small}");
    let page_down = crossterm::event::KeyEvent::new(
        crossterm::event::KeyCode::PageDown,
        crossterm::event::KeyModifiers::NONE,
    );
    for _ in 0..5 {
        app.on_key(page_down, &keys);
    }
    let end = text(&render(&app, 80, 24));
    assert!(end.contains("destructive commands ask for confirmation"), "{end}");
    assert!(end.contains("clock-step"), "its last binding: {end}");
    app.on_key(key('q'), &keys);
    assert_eq!(app.overlay, Overlay::None);
    assert!(!app.quit, "q closed the help, not the console");
    assert_eq!(app.help_scroll, 0);
    // The detail and a confirmation take every key too.
    let enter = crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Enter, crossterm::event::KeyModifiers::NONE);
    app.on_key(enter, &keys);
    assert_eq!(app.overlay, Overlay::Detail);
    for c in ['d', 'r', 'o', 'c', 'f', 'x', '2', '/', '?'] {
        assert_eq!(app.on_key(key(c), &keys), Effect::None, "{c}");
        assert_eq!(app.overlay, Overlay::Detail, "{c} left the detail open");
    }
    app.on_key(key('q'), &keys);
    assert_eq!(app.overlay, Overlay::None);
    app.on_key(key('o'), &keys);
    assert!(matches!(app.overlay, Overlay::Confirm { .. }), "force open asks first");
    for c in ['d', 'r', 'c', 'f', 'x', '2', '/', '?', 'q'] {
        assert_eq!(app.on_key(key(c), &keys), Effect::None, "{c}");
        assert!(
            matches!(app.overlay, Overlay::Confirm { .. }),
            "{c} left the confirmation open"
        );
    }
    app.on_key(key('n'), &keys);
    assert_eq!(app.overlay, Overlay::None);
    assert!(!app.quit);
    assert_eq!(app.focus, Pane::Breakers);
    assert_eq!(runner.events().recent(1000).len(), before, "no command went out");
}

/// The style of the first cell of `word` in `buf`'s line `y`.
fn style_of(buf: &Buffer, y: u16, word: &str) -> ratatui::style::Style {
    let line: String = (0..buf.area.width).map(|x| buf[(x, y)].symbol().to_string()).collect();
    let at = line.find(word).unwrap_or_else(|| panic!("no `{word}` in `{line}`"));
    let x = line[..at].chars().count() as u16;
    buf[(x, y)].style()
}

#[test]
fn the_header_s_health_is_the_last_minute_s_with_its_window_named_and_coloured() {
    use fusebox::telemetry::snapshot::Snapshot;
    let theme = Theme::built_in("default").unwrap();
    let mut app = App::new(opts(false), Arc::new(Snapshot::default()));
    // A minute of failures, then a minute answered whole; 600 tokens in
    // one burst near the end.
    for t in 0..=120u64 {
        let mut s = Snapshot {
            t_ms: t * 1000,
            requests: t * 2,
            ..Snapshot::default()
        };
        s.by_level[4] = 2 * t.min(60);
        s.by_level[0] = 2 * t.saturating_sub(60);
        s.tokens = if t >= 100 { 600 } else { 0 };
        app.on_snapshot(Arc::new(s));
        if t == 30 {
            let buf = render(&app, 140, 45);
            let top = text(&buf).lines().next().unwrap().to_string();
            assert!(
                top.contains("last 30s:  ok 0.0%  degraded 0.0%  failed 100.0%"),
                "{top}"
            );
            assert_eq!(style_of(&buf, 0, "ok 0.0%").fg, theme.error.fg, "ok this low is red");
            assert_eq!(style_of(&buf, 0, "failed 100.0%").fg, theme.error.fg);
        }
    }
    // Not since the start (50 %): the last minute, all answered whole.
    let buf = render(&app, 140, 45);
    let top = text(&buf).lines().next().unwrap().to_string();
    assert!(top.contains("last 1m:  ok 100.0%  degraded 0.0%  failed 0.0%"), "{top}");
    assert_eq!(style_of(&buf, 0, "ok 100.0%").fg, theme.ok.fg, "green");
    // Sparse tokens still count: 600 in the last minute is 600/min.
    assert!(top.contains(" 600 tok/min"), "{top}");
}

#[tokio::test(start_paused = true)]
async fn an_80x24_header_keeps_every_badge() {
    let (runner, mut app) = incident(true).await;
    runner
        .operations()
        .apply(&Command::DrillOn, &Issuer::operator("ana"))
        .unwrap();
    app.on_snapshot(Arc::new(runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS)));
    app.display_frozen = true;
    let second = text(&render(&app, 80, 24)).lines().nth(1).unwrap().to_string();
    for badge in ["REFILL FROZEN: anthropic", "DRILL", "DISPLAY FROZEN", "READONLY"] {
        assert!(second.contains(badge), "{badge} on `{second}`");
    }
}

#[tokio::test(start_paused = true)]
async fn the_selection_stays_on_its_row_while_100_events_and_requests_arrive() {
    let (runner, mut app) = incident(false).await;
    let keys = KeyMap::defaults();
    let down = crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Down, crossterm::event::KeyModifiers::NONE);
    app.on_key(key('5'), &keys);
    for _ in 0..3 {
        app.on_key(down, &keys);
    }
    let picked = app.event_rows()[app.selection(Pane::Events)].first.clone();
    app.on_key(key('4'), &keys);
    app.on_key(down, &keys);
    let request = app.recent_rows()[app.selection(Pane::Chains)].id;
    // 100 events arrive above it (operator commands), and 20 requests.
    let mut events = runner.events().subscribe();
    for i in 0..100 {
        let cmd = if i % 2 == 0 {
            Command::DrillOn
        } else {
            Command::DrillOff
        };
        runner.operations().apply(&cmd, &Issuer::operator("bo")).unwrap();
    }
    for i in 100..120u64 {
        runner.run(&make_request(Seed(5), i, 6)).await;
    }
    while let Ok(e) = events.try_recv() {
        app.on_event(&e);
    }
    tokio::time::advance(Duration::from_secs(2)).await;
    app.on_snapshot(Arc::new(runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS)));
    assert_eq!(
        app.recent_rows()[app.selection(Pane::Chains)].id,
        request,
        "the same request"
    );
    app.on_key(key('5'), &keys);
    let now = app.event_rows()[app.selection(Pane::Events)].first.clone();
    assert_eq!(now, picked, "the same event, 100 rows further down");
    assert!(
        app.selection(Pane::Events) >= 100,
        "100 rows above it: the commands alternate, none coalesced"
    );
    // Enter opens it, not what took its place.
    app.on_key(
        crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Enter, crossterm::event::KeyModifiers::NONE),
        &keys,
    );
    let detail = text(&render(&app, 140, 45));
    let said = fusebox::tui::said::describe(&picked);
    let first_words: String = said.chars().take(30).collect();
    assert!(detail.contains(first_words.trim()), "{first_words} in {detail}");
}

#[tokio::test(start_paused = true)]
async fn a_refused_request_says_why_in_the_chains_pane_and_its_detail() {
    let (_runner, mut app) = incident(false).await;
    let keys = KeyMap::defaults();
    app.on_key(key('4'), &keys);
    // `/failed` finds the failed requests by their level.
    app.on_key(key('/'), &keys);
    for c in "failed".chars() {
        app.on_key(key(c), &keys);
    }
    let enter = crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Enter, crossterm::event::KeyModifiers::NONE);
    app.on_key(enter, &keys);
    let rows = app.recent_rows();
    assert!(!rows.is_empty() && rows.iter().all(|r| r.level == fusebox::outcome::Level::Failed));
    let refused = rows
        .iter()
        .position(|r| r.user == "tenant-big")
        .expect("the big tenant's refusal");
    let why = rows[refused].why.clone().expect("a reason");
    drop(rows);
    assert!(why.contains("tenant-big") && why.contains("tokens/minute"), "{why}");
    let down = crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Down, crossterm::event::KeyModifiers::NONE);
    for _ in 0..refused {
        app.on_key(down, &keys);
    }
    let frame = text(&render(&app, 140, 45));
    let row = frame.lines().find(|l| l.contains("▶ #")).unwrap();
    // Level and quality before the reason, the reason before the path.
    let (level, reason) = (
        row.find("failed").unwrap(),
        row.find("refused: user tenant-big").expect(row),
    );
    assert!(level < reason, "{row}");
    assert!(row.contains("tenant-big"), "{row}");
    app.on_key(enter, &keys);
    let detail = text(&render(&app, 140, 45));
    assert!(detail.contains("the client was told: Request refused"), "{detail}");
    assert!(detail.contains(" ms · ") && detail.contains(" tokens · $"), "{detail}");
}

#[tokio::test(start_paused = true)]
async fn slash_finds_a_request_by_its_request_id() {
    let (runner, mut app) = incident(false).await;
    let keys = KeyMap::defaults();
    let mut events = runner.events().subscribe();
    let req = fusebox::runner::chat::ChatRequest {
        key: Some("caller-77".into()),
        ..crate::common::chat_request(900)
    };
    runner.chat(req, None).await;
    for i in 901..910u64 {
        runner.run(&make_request(Seed(5), i, 6)).await;
    }
    while let Ok(e) = events.try_recv() {
        app.on_event(&e);
    }
    app.on_key(key('4'), &keys);
    app.on_key(key('/'), &keys);
    for c in "CALLER-77".chars() {
        app.on_key(key(c), &keys);
    }
    let rows = app.recent_rows();
    assert_eq!(rows.len(), 1, "found by its id, whatever the case");
    assert_eq!(rows[0].key.as_deref(), Some("caller-77"));
    app.on_key(
        crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Enter, crossterm::event::KeyModifiers::NONE),
        &keys,
    );
    app.on_key(
        crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Enter, crossterm::event::KeyModifiers::NONE),
        &keys,
    );
    let detail = text(&render(&app, 140, 45));
    assert!(detail.contains("x-fusebox-request-id: caller-77"), "{detail}");
}

#[tokio::test(start_paused = true)]
async fn an_event_said_again_and_again_is_one_row_with_its_count() {
    let (runner, mut app) = incident(false).await;
    let mut events = runner.events().subscribe();
    for _ in 0..5 {
        runner
            .operations()
            .apply(&Command::DrillOn, &Issuer::operator("bo"))
            .unwrap();
        tokio::time::advance(Duration::from_millis(200)).await;
    }
    while let Ok(e) = events.try_recv() {
        app.on_event(&e);
    }
    app.on_snapshot(Arc::new(runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS)));
    let rows = app.event_rows();
    let said: Vec<(String, usize)> = rows.iter().take(3).map(|r| (r.said.to_string(), r.repeats)).collect();
    assert_eq!(rows[0].repeats, 5, "five alike, one row: {said:?}");
    assert_eq!(rows[1].repeats, 1, "then what came before: {said:?}");
    let pane = render_pane(&app, 100, 8, ui::events::draw);
    assert!(pane.contains("×5 since"), "{pane}");
    assert_eq!(pane.matches("drill_on").count(), 1, "{pane}");
}

/// An hour of one breaker's calls and latencies: two minutes show only
/// the last steady calls; `t` twice looks an hour back, where a burst of
/// slow calls 50 minutes ago shows in the sparkline and the p99.
#[tokio::test(start_paused = true)]
async fn t_looks_an_hour_back_in_the_sparklines_and_latencies() {
    use fusebox::telemetry::snapshot::Snapshot;
    let (runner, _) = incident(false).await;
    let mut template = runner.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS);
    template.breakers.retain(|b| b.target == Target::model("gpt-4o"));
    template.faults.clear();
    let mut row = template.breakers[0].clone();
    row.stats.attempts = 0;
    row.stats.latency = Default::default();
    row.stats.ttft = Default::default();
    let mut app = App::new(opts(false), Arc::new(Snapshot::default()));
    let (fast, slow) = (2, 9); // the 25 ms and 4 s buckets
    for t in 0..3_600u64 {
        // A call a second; ten a second, all slow, in minutes 10 and 11.
        let burst = (600..720).contains(&t);
        row.stats.attempts += if burst { 10 } else { 1 };
        row.stats.latency.counts[if burst { slow } else { fast }] += if burst { 10 } else { 1 };
        // Streams' first tokens: 5 ms now, 4 s in the burst.
        row.stats.ttft.counts[if burst { slow } else { 0 }] += 1;
        let mut s = template.clone();
        s.t_ms = t * 1000;
        s.breakers = vec![row.clone()];
        app.on_snapshot(Arc::new(s));
    }
    let pane = |app: &App| render_pane(app, 140, 5, ui::breakers::draw);
    let now = pane(&app);
    assert!(
        now.contains("last 2 min (t)") && now.contains("calls, last 2 min"),
        "{now}"
    );
    assert!(now.contains("18/24/25"), "two minutes of fast calls: {now}");
    assert!(
        now.contains("ttft p50/p95") && now.contains(" 3/5 "),
        "first tokens too: {now}"
    );
    let cells = |pane: &str| {
        let row = pane.lines().nth(2).unwrap();
        row.split_whitespace()
            .find(|w| w.starts_with(['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█']))
            .unwrap()
            .to_string()
    };
    assert_eq!(cells(&now), "█".repeat(24), "steady calls are an even line: {now}");
    for _ in 0..2 {
        app.on_key(key('t'), &KeyMap::defaults());
    }
    assert!(app.status.contains("last 1 h"), "{}", app.status);
    let hour = pane(&app);
    assert!(
        hour.contains("last 1 h (t)") && hour.contains("calls, last 1 h"),
        "{hour}"
    );
    assert!(
        hour.contains("20/3.6s/3.9s"),
        "the burst's slow calls within the hour: {hour}"
    );
    // 24 cells of 150 s: the burst 50 minutes back is the fifth.
    assert_eq!(cells(&hour), format!("▂▂▂▂█{}", "▂".repeat(19)), "{hour}");
    app.on_key(key('t'), &KeyMap::defaults());
    assert!(pane(&app).contains("last 2 min (t)"), "round again");
}

/// An operator's command and a breaker's transition stay in the events
/// pane after the snapshots' newest 300 no longer carry them.
#[test]
fn operator_actions_and_transitions_stay_for_the_whole_run() {
    use fusebox::resilience::breaker::BreakerState;
    use fusebox::telemetry::events::{Event, Transition};
    use fusebox::telemetry::snapshot::Snapshot;
    let at = |t_ms, kind| Event {
        t_ms,
        kind,
        instance: None,
    };
    let forced = at(
        500,
        EventKind::Operator {
            command: Command::ForceOpen {
                target: Target::model("gpt-4o"),
            },
            by: Issuer::operator("ana"),
            applied: true,
            result: "forced open".into(),
        },
    );
    let opened = at(
        700,
        EventKind::Transition(Transition {
            breaker: Target::provider("openai"),
            from: BreakerState::Closed,
            to: BreakerState::Open,
            reason: "5 failures in a row (503)".into(),
        }),
    );
    let mut app = App::new(opts(false), Arc::new(Snapshot::default()));
    let mut all = vec![forced.clone(), opened.clone()];
    app.on_snapshot(Arc::new(Snapshot {
        t_ms: 900,
        events: all.clone(),
        ..Snapshot::default()
    }));
    for t in 1..=20u64 {
        for i in 0..300 {
            all.push(at(
                t * 1000 + i,
                EventKind::BudgetRejected {
                    user: format!("user-{t}-{i}"),
                    reason: "tokens per minute".into(),
                },
            ));
        }
        let s = Snapshot {
            t_ms: t * 1000 + 999,
            events: all[all.len().saturating_sub(SNAPSHOT_EVENTS)..].to_vec(),
            ..Snapshot::default()
        };
        app.on_snapshot(Arc::new(s));
    }
    assert!(!app.snap.events.contains(&forced), "the snapshot no longer has it");
    let rows = app.event_rows();
    assert_eq!(rows.len(), SNAPSHOT_EVENTS + 2);
    let oldest: Vec<&Event> = rows.iter().rev().take(2).map(|r| r.event).collect();
    assert_eq!(oldest, [&forced, &opened]);
    // And found by `/` like any other.
    let keys = KeyMap::defaults();
    app.on_key(key('5'), &keys);
    app.on_key(key('/'), &keys);
    for c in "ana".chars() {
        app.on_key(key(c), &keys);
    }
    let pane = render_pane(&app, 110, 6, ui::events::draw);
    assert!(pane.contains("operator ana: force_open model:gpt-4o"), "{pane}");
}

/// `/` finds a request by the upstream's id of its answer, and its detail
/// names it.
#[test]
fn slash_finds_a_request_by_its_upstream_id() {
    use fusebox::outcome::{Level, Outcome};
    use fusebox::telemetry::events::{Attempt, Event};
    use fusebox::telemetry::snapshot::Snapshot;
    let mut app = App::new(opts(false), Arc::new(Snapshot::default()));
    for request in 1..=5u64 {
        let answered = Attempt {
            status: Some(200),
            response_id: Some(format!("chatcmpl-AbC{request}")),
            ..Attempt::of(request, Target::provider("openai"))
        };
        let ended = Outcome {
            request,
            user: "ana".into(),
            level: Level::None,
            chain: vec![fusebox::outcome::Hop::ok("gpt-4o")],
            quality: 1.0,
            tokens: 10,
            cost_usd: 0.0,
            missing: vec![],
            user_message: None,
            answer: None,
            stale_ms: None,
            attempts: 1,
            latency_ms: 100,
            key: None,
        };
        for kind in [
            EventKind::Attempt(Box::new(answered)),
            EventKind::Outcome(Box::new(ended)),
        ] {
            app.on_event(&Event {
                t_ms: request * 1000,
                kind,
                instance: None,
            });
        }
    }
    let keys = KeyMap::defaults();
    app.on_key(key('4'), &keys);
    app.on_key(key('/'), &keys);
    for c in "chatcmpl-abc3".chars() {
        app.on_key(key(c), &keys);
    }
    let rows = app.recent_rows();
    assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), [3]);
    let enter = crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Enter, crossterm::event::KeyModifiers::NONE);
    app.on_key(enter, &keys);
    app.on_key(enter, &keys);
    let detail = text(&render(&app, 140, 45));
    assert!(detail.contains("upstream ids: chatcmpl-AbC3"), "{detail}");
}

/// `w` asks for an incident snapshot: the screen, the breakers, the
/// transitions and operator actions, the worst requests, as Markdown and
/// JSON in the directory given.
#[tokio::test(start_paused = true)]
async fn w_writes_an_incident_snapshot_as_markdown_and_json() {
    let (_runner, mut app) = incident(false).await;
    assert_eq!(app.on_key(key('w'), &KeyMap::defaults()), Effect::WriteIncident);
    let dir = tempfile::tempdir().unwrap();
    let md_path = fusebox::tui::incident::write(&app, &render(&app, 140, 45), dir.path()).unwrap();
    let name = md_path.file_name().unwrap().to_string_lossy().to_string();
    assert!(name.starts_with("fusebox-incident-") && name.ends_with(".md"), "{name}");
    let md = std::fs::read_to_string(&md_path).unwrap();
    for part in [
        "# fusebox incident snapshot: scenario test",
        "| provider:openai | open | 100% | 0 | 8 | 72 |",
        "## Transitions (newest first)",
        "provider:openai closed → open: 5 consecutive failures",
        "## Operator actions (newest first)",
        "operator ana: freeze_refill anthropic — refills frozen",
        "## Worst recent requests (newest first)",
        "tenant-big failed q=0.00",
        "```text\n fusebox  DEMO",
    ] {
        assert!(md.contains(part), "`{part}` in\n{md}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(md_path.with_extension("json")).unwrap()).unwrap();
    assert_eq!(json["breakers"].as_array().unwrap().len(), 10);
    assert_eq!(json["breakers"][0]["state"], "open");
    assert!(json["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["kind"] == "transition"));
    assert_eq!(
        json["operator_actions"][0]["by"]["name"], "ana",
        "{}",
        json["operator_actions"]
    );
    let worst = &json["worst_requests"][0];
    assert_eq!(worst["level"], "failed");
    assert!(worst["why"].as_str().unwrap().contains("budget"), "{worst}");
    assert_eq!(
        json["screen"][0].as_str().unwrap().split_whitespace().next(),
        Some("fusebox")
    );
}

/// The incident snapshot's names are guessable (its second), so what is
/// at them is never written through: a link planted there is left as it
/// is, its target untouched, and the snapshot takes the next free name;
/// two in one second are two snapshots; only their owner reads them.
#[tokio::test(start_paused = true)]
async fn an_incident_snapshot_never_writes_through_a_planted_link_nor_over_another() {
    use std::os::unix::fs::PermissionsExt;
    let (_runner, app) = incident(false).await;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep me").unwrap();
    // Links at the names of this second and the next few.
    let now = std::time::SystemTime::now();
    for s in 0..5 {
        let at = humantime::format_rfc3339_seconds(now + Duration::from_secs(s)).to_string();
        for ext in ["md", "json"] {
            let name = format!("fusebox-incident-{}.{ext}", at.replace(':', "-"));
            std::os::unix::fs::symlink(&victim, dir.path().join(name)).unwrap();
        }
    }
    let screen = render(&app, 140, 45);
    let first = fusebox::tui::incident::write(&app, &screen, dir.path()).unwrap();
    let second = fusebox::tui::incident::write(&app, &screen, dir.path()).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    assert_ne!(first, second, "two snapshots");
    for md in [&first, &second] {
        for path in [md.clone(), md.with_extension("json")] {
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert!(meta.is_file(), "{} is a file of its own", path.display());
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{}", path.display());
        }
        assert!(std::fs::read_to_string(md)
            .unwrap()
            .starts_with("# fusebox incident snapshot"));
    }
}

/// An open breaker's detail starts with what to do next: since when and
/// why, where its traffic went and how full that is, and the runbook's
/// advice; a closed one's has none.
#[tokio::test(start_paused = true)]
async fn an_open_breaker_s_detail_says_what_to_do_next() {
    let (_runner, app) = incident(false).await;
    let row = |t: Target| app.snap.breakers.iter().find(|b| b.target == t).unwrap();
    let [now, next] = ui::hint::next_steps(row(Target::provider("openai")), &app).expect("a hint");
    assert_eq!(
        now,
        "provider:openai open on 503 since 00:02; route default on claude-haiku, anthropic RPM 0 % used, anthropic refills frozen"
    );
    assert!(
        next.starts_with("→ a known outage? o holds it open") && next.contains("docs/operator.md"),
        "{next}"
    );
    assert!(ui::hint::next_steps(row(Target::provider("anthropic")), &app).is_none());
}
