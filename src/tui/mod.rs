//! The operator console: a ratatui + crossterm app over the runner's
//! snapshots. One loop drains input, snapshots and events, applies operator
//! commands, and redraws only when something changed (at most ~30 fps).

pub mod action;
pub mod app;
mod commands;
pub mod control;
pub mod history;
pub mod incident;
mod input;
pub mod keymap;
pub mod lasting;
pub mod replay;
pub mod said;
pub mod theme;
pub mod track;
pub mod ui;

use crate::traffic::pace::Pace;
use app::{App, Effect, Options};
use control::{Control, Feed};
use crossterm::event::{Event as TermEvent, KeyEventKind};
use keymap::KeyMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use theme::Theme;
use tokio::sync::mpsc;

/// Users and events carried in each snapshot for the console.
pub const SNAPSHOT_USERS: usize = 500;
/// Events carried in each snapshot.
pub const SNAPSHOT_EVENTS: usize = 300;
const FRAME: Duration = Duration::from_millis(33);

static PANICKED: AtomicBool = AtomicBool::new(false);

/// Why the console could not run.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// stdout is not a terminal.
    #[error(
        "the console needs a terminal, but stdout is not a TTY; run `fusebox demo --headless` for a printed summary"
    )]
    NotATerminal,
    /// Terminal I/O failed.
    #[error("terminal error: {0}")]
    Io(#[from] std::io::Error),
    /// Something panicked; the terminal was restored first.
    #[error("the console stopped after a panic (see the message above and the log file)")]
    Panicked,
    /// A signal stopped it (the terminal was restored, the run ended as on `q`).
    #[error("stopped by signal {0}")]
    Signalled(i32),
}

enum Input {
    Term(TermEvent),
    /// A command's answer.
    Reply(control::CommandReply),
    Tick,
    /// SIGTERM, SIGHUP or SIGINT: leave as `q` would, terminal restored.
    Signal(i32),
}

/// Runs the console over `feed` until the operator quits.
pub async fn run(
    mut feed: Feed,
    opts: Options,
    theme: Theme,
    keymap: KeyMap,
    pace: Option<Arc<Pace>>,
) -> Result<(), ConsoleError> {
    if !std::io::stdout().is_terminal() {
        return Err(ConsoleError::NotATerminal);
    }
    install_panic_hook();
    let mut terminal = ratatui::try_init()?;
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let signals = on_signals(tx.clone());
    let replies = tx.clone();
    {
        let stop = stop.clone();
        std::thread::spawn(move || read_input(tx, stop));
    }
    let app = App::new(opts, feed.snapshots.borrow_and_update().clone());
    let result = event_loop(&mut terminal, feed, app, (&theme, &keymap), pace, (replies, &mut rx)).await;
    // The input thread sees this within its 50 ms poll and ends; it is not
    // waited for: one caught in a read when the terminal left raw mode
    // would wait for a whole line.
    stop.store(true, Ordering::Relaxed);
    ratatui::restore();
    if let Some(s) = signals {
        s.close();
    }
    if PANICKED.load(Ordering::Relaxed) {
        return Err(ConsoleError::Panicked);
    }
    result
}

/// Turns SIGTERM, SIGHUP and SIGINT into an input, so that a console
/// stopped by `kill` (or a closed terminal) leaves the terminal as it found
/// it and its run ends as on `q`. None if they cannot be caught (then they
/// act as by default).
fn on_signals(tx: mpsc::UnboundedSender<Input>) -> Option<signal_hook::iterator::Handle> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGHUP, SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "signals will not restore the terminal");
            return None;
        }
    };
    let handle = signals.handle();
    let spawned = std::thread::Builder::new()
        .name("console-signals".into())
        .spawn(move || {
            if let Some(sig) = signals.forever().next() {
                let _ = tx.send(Input::Signal(sig));
            }
        });
    match spawned {
        Ok(_) => Some(handle),
        Err(e) => {
            tracing::warn!(error = %e, "signals will not restore the terminal");
            None
        }
    }
}

/// Draws `app` as `theme` and `keymap` say and takes the operator's keys,
/// snapshots, events and replies until the operator quits.
async fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    feed: Feed,
    mut app: App,
    (theme, keymap): (&Theme, &KeyMap),
    pace: Option<Arc<Pace>>,
    (tx, rx): (mpsc::UnboundedSender<Input>, &mut mpsc::UnboundedReceiver<Input>),
) -> Result<(), ConsoleError> {
    let Feed {
        snapshots: mut snaps,
        mut events,
        control,
    } = feed;
    let mut last_draw: Option<std::time::Instant> = None;
    let mut dirty = true;
    loop {
        if let Some(p) = &pace {
            app.clock = (p.factor(), p.is_paused());
        }
        let due = last_draw.is_none_or(|t| t.elapsed() >= FRAME);
        if dirty && due {
            terminal.draw(|f| ui::draw(f, &app, theme, keymap))?;
            last_draw = Some(std::time::Instant::now());
            dirty = false;
        }
        tokio::select! {
            biased;
            input = rx.recv() => {
                let Some(input) = input else { break };
                // Drain every pending input before drawing again.
                let mut next = Some(input);
                while let Some(i) = next.take() {
                    match i {
                        Input::Term(ev) => {
                            dirty = true;
                            last_draw = None; // keys are answered on the next frame
                            if handle(ev, &control, &tx, &mut app, keymap, pace.as_deref()) {
                                write_incident(terminal, &mut app, theme, keymap);
                            }
                        }
                        Input::Reply(r) => {
                            dirty = true;
                            app.on_reply(r);
                        }
                        Input::Signal(sig) => return Err(ConsoleError::Signalled(sig)),
                        Input::Tick => {}
                    }
                    next = rx.try_recv().ok();
                }
            }
            changed = snaps.changed() => {
                if changed.is_err() {
                    break;
                }
                let snap = snaps.borrow_and_update().clone();
                app.on_snapshot(snap);
                dirty = true;
            }
        }
        while let Ok(e) = events.try_recv() {
            app.on_event(&e);
        }
        if app.quit || PANICKED.load(Ordering::Relaxed) {
            break;
        }
    }
    Ok(())
}

/// Writes the screen as it is drawn now and an incident snapshot to the
/// current directory, and says where (or why not) on the status line.
fn write_incident(terminal: &ratatui::DefaultTerminal, app: &mut App, theme: &Theme, keymap: &KeyMap) {
    let written = terminal.size().and_then(|size| {
        let backend = ratatui::backend::TestBackend::new(size.width, size.height);
        let mut shot = ratatui::Terminal::new(backend).unwrap_or_else(|e| match e {});
        shot.draw(|f| ui::draw(f, app, theme, keymap))
            .unwrap_or_else(|e| match e {});
        incident::write(app, shot.backend().buffer(), std::path::Path::new("."))
    });
    app.status = match written {
        Ok(md) => format!("incident snapshot written: {} and .json", md.display()),
        Err(e) => format!("cannot write the incident snapshot here: {e}"),
    };
}

/// Applies a terminal event; true when the operator asked for an
/// incident snapshot (it needs the terminal).
fn handle(
    ev: TermEvent,
    control: &Arc<dyn Control>,
    tx: &mpsc::UnboundedSender<Input>,
    app: &mut App,
    keymap: &KeyMap,
    pace: Option<&Pace>,
) -> bool {
    let TermEvent::Key(key) = ev else { return false };
    if key.kind == KeyEventKind::Release {
        return false;
    }
    match app.on_key(key, keymap) {
        Effect::WriteIncident => return true,
        Effect::None | Effect::Quit => {}
        Effect::Send(order) => {
            let answer = control.send(order, crate::command::Issuer::operator(&app.opts.operator));
            let tx = tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(Input::Reply(answer.await));
            });
        }
        Effect::Clock(a) => match pace {
            Some(p) => clock_action(p, app, a),
            None => app.status = "live traffic runs in real time: pause and speed apply to demo and replay".into(),
        },
    }
    false
}

fn clock_action(p: &Pace, app: &mut App, a: action::Action) {
    use action::Action as A;
    match a {
        A::ClockPause => {
            p.set_paused(!p.is_paused());
            app.status = if p.is_paused() {
                "paused (n steps one second)"
            } else {
                "running"
            }
            .into();
        }
        A::ClockFaster => app.status = format!("speed {}×", p.step_speed(true)),
        A::ClockSlower => app.status = format!("speed {}×", p.step_speed(false)),
        A::ClockStep if p.is_paused() => p.step(),
        A::ClockStep => app.status = "step works while paused (space)".into(),
        _ => {}
    }
}

fn read_input(tx: mpsc::UnboundedSender<Input>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let msg = match crossterm::event::poll(Duration::from_millis(50)) {
            Ok(true) => match crossterm::event::read() {
                Ok(ev) => Input::Term(ev),
                Err(_) => break,
            },
            Ok(false) => Input::Tick,
            Err(_) => break,
        };
        if tx.send(msg).is_err() {
            break;
        }
    }
}

/// A panic anywhere (also in a spawned task) restores the terminal before
/// its message is printed, and stops the console.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICKED.store(true, Ordering::Relaxed);
        ratatui::restore();
        previous(info);
    }));
}
