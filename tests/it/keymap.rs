//! Key bindings: defaults, remapping, error messages and key-event matching.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use fusebox::tui::action::Action;
use fusebox::tui::keymap::{KeyMap, KeymapError};
use std::collections::BTreeSet;
use std::path::Path;

fn press(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
    KeyEvent::new(code, modifiers)
}

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/invalid_keymaps")
        .join(name);
    match KeyMap::load(&path) {
        Ok(_) => panic!("{name} should not load"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn action_names_match_serde_and_round_trip() {
    let unique: BTreeSet<_> = Action::ALL.iter().collect();
    assert_eq!(unique.len(), Action::ALL.len(), "Action::ALL has duplicates");
    for &a in Action::ALL {
        assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{}\"", a.name()));
        assert_eq!(Action::from_name(a.name()), Some(a));
        assert!(!a.description().is_empty());
        if a.needs_confirm() {
            assert!(a.is_mutating(), "{a} needs confirmation but is not mutating");
        }
    }
    assert_eq!(Action::ForceOpen.name(), "force-open");
    assert_eq!(Action::ForceOpen.description(), "force the selected breaker open");
    let mutating: Vec<_> = Action::ALL.iter().filter(|a| a.is_mutating()).collect();
    assert_eq!(
        mutating,
        [
            &Action::ForceOpen,
            &Action::ForceClose,
            &Action::Reset,
            &Action::Disable,
            &Action::ToggleRefill,
            &Action::CycleFault,
            &Action::ToggleDrill
        ]
    );
    let confirm: Vec<_> = Action::ALL.iter().filter(|a| a.needs_confirm()).collect();
    assert_eq!(
        confirm,
        [
            &Action::ForceOpen,
            &Action::ForceClose,
            &Action::ToggleRefill,
            &Action::ToggleDrill
        ]
    );
}

#[test]
fn defaults_bind_every_action_without_clashes() {
    let keys = KeyMap::defaults();
    let mut seen = BTreeSet::new();
    for &a in Action::ALL {
        let bound = keys.keys_for(a);
        assert!(!bound.is_empty(), "{a} has no default key");
        for k in bound {
            assert!(seen.insert(k.clone()), "default key {k} is bound twice");
            let event = KeyMap::key_event(k).unwrap_or_else(|| panic!("default key {k} does not parse"));
            assert_eq!(keys.action(&event), Some(a), "default key {k}");
        }
    }
    // An empty file merges to exactly the defaults, through the clash check.
    assert!(KeyMap::parse("", "empty.toml").is_ok());
}

#[test]
fn default_keys_are_the_documented_ones() {
    let keys = KeyMap::defaults();
    let expect: &[(Action, &[&str])] = &[
        (Action::Quit, &["q", "ctrl-c"]),
        (Action::Help, &["?", "f1"]),
        (Action::NextPane, &["tab"]),
        (Action::PrevPane, &["backtab"]),
        (Action::FocusBreakers, &["1"]),
        (Action::FocusEvents, &["5"]),
        (Action::Top, &["g"]),
        (Action::Bottom, &["G"]),
        (Action::Filter, &["/"]),
        (Action::Sort, &["s"]),
        (Action::ForceOpen, &["o"]),
        (Action::ForceClose, &["c"]),
        (Action::Reset, &["r"]),
        (Action::Disable, &["d"]),
        (Action::ToggleRefill, &["f"]),
        (Action::FreezeDisplay, &["F"]),
        (Action::CycleFault, &["x"]),
        (Action::ToggleDrill, &["D"]),
        (Action::PauseEvents, &["p"]),
        (Action::ClockPause, &["space"]),
        (Action::ClockFaster, &["+"]),
        (Action::ClockSlower, &["-"]),
        (Action::ClockStep, &["n"]),
    ];
    for (action, want) in expect {
        assert_eq!(keys.keys_for(*action), *want, "{action}");
    }
}

#[test]
fn help_rows_cover_every_action_in_order() {
    let keys = KeyMap::parse("[keys]\nsort = []\n", "k.toml").unwrap();
    let rows = keys.help_rows();
    assert_eq!(rows.len(), Action::ALL.len());
    assert_eq!(rows[0], ("q, ctrl-c".to_string(), Action::Quit));
    for (row, a) in rows.iter().zip(Action::ALL) {
        assert_eq!(row.1, *a);
    }
    let sort = Action::ALL.iter().position(|a| *a == Action::Sort).unwrap();
    assert_eq!(rows[sort].0, "(unbound)");
}

#[test]
fn remap_replaces_only_the_named_actions() {
    let text = "[keys]\nforce-open = [\"O\"]\nquit = [\"q\", \"ctrl-q\"]\nsort = []\n";
    let keys = KeyMap::parse(text, "mine.toml").unwrap();
    let o = press(KeyCode::Char('o'), KeyModifiers::NONE);
    let big_o = press(KeyCode::Char('O'), KeyModifiers::SHIFT);
    assert_eq!(keys.action(&o), None, "the old key no longer maps");
    assert_eq!(keys.action(&big_o), Some(Action::ForceOpen));
    assert_eq!(keys.keys_for(Action::ForceOpen), ["O"]);
    // Ctrl-C stays: there is always a sure way out.
    assert_eq!(keys.keys_for(Action::Quit), ["q", "ctrl-q", "ctrl-c"]);
    assert_eq!(
        keys.action(&press(KeyCode::Char('q'), KeyModifiers::CONTROL)),
        Some(Action::Quit)
    );
    assert_eq!(
        keys.action(&press(KeyCode::Char('c'), KeyModifiers::CONTROL)),
        Some(Action::Quit)
    );
    assert!(keys.keys_for(Action::Sort).is_empty());
    assert_eq!(keys.action(&press(KeyCode::Char('s'), KeyModifiers::NONE)), None);
    // Untouched actions keep their defaults.
    assert_eq!(
        keys.action(&press(KeyCode::Char('r'), KeyModifiers::NONE)),
        Some(Action::Reset)
    );
    assert_eq!(keys.keys_for(Action::Reset), ["r"]);
}

#[test]
fn a_freed_default_key_can_be_reused() {
    let keys = KeyMap::parse("[keys]\nforce-open = [\"O\"]\nreset = [\"o\"]\n", "k.toml").unwrap();
    let o = press(KeyCode::Char('o'), KeyModifiers::NONE);
    assert_eq!(keys.action(&o), Some(Action::Reset));
}

#[test]
fn key_strings_accept_every_documented_form() {
    let text = r#"
[keys]
quit = ["ctrl-q", "alt-x", "esc", "ctrl-alt-f12"]
help = ["f1", "F2", "enter"]
detail = ["ctrl-e"]
next-pane = ["shift-tab", "right"]
prev-pane = ["left"]
top = ["home"]
bottom = ["end"]
filter = ["ctrl--"]
"#;
    let keys = KeyMap::parse(text, "k.toml").unwrap();
    assert_eq!(
        keys.keys_for(Action::Quit),
        ["ctrl-q", "alt-x", "esc", "ctrl-alt-f12", "ctrl-c"]
    );
    assert_eq!(keys.keys_for(Action::Help), ["f1", "f2", "enter"]);
    assert_eq!(keys.keys_for(Action::NextPane), ["backtab", "right"]);
    let m = |c, m| keys.action(&press(c, m));
    assert_eq!(m(KeyCode::Char('x'), KeyModifiers::ALT), Some(Action::Quit));
    assert_eq!(m(KeyCode::Esc, KeyModifiers::NONE), Some(Action::Quit));
    assert_eq!(
        m(KeyCode::F(12), KeyModifiers::CONTROL | KeyModifiers::ALT),
        Some(Action::Quit)
    );
    assert_eq!(m(KeyCode::F(12), KeyModifiers::CONTROL), None);
    assert_eq!(m(KeyCode::Enter, KeyModifiers::NONE), Some(Action::Help));
    assert_eq!(m(KeyCode::BackTab, KeyModifiers::SHIFT), Some(Action::NextPane));
    assert_eq!(m(KeyCode::Home, KeyModifiers::NONE), Some(Action::Top));
    assert_eq!(m(KeyCode::End, KeyModifiers::NONE), Some(Action::Bottom));
    assert_eq!(m(KeyCode::Char('-'), KeyModifiers::CONTROL), Some(Action::Filter));
    assert_eq!(m(KeyCode::Char('-'), KeyModifiers::NONE), Some(Action::ClockSlower));
}

#[test]
fn matches_key_events_as_terminals_report_them() {
    let keys = KeyMap::defaults();
    let m = |c, m| keys.action(&press(c, m));
    assert_eq!(m(KeyCode::Char('q'), KeyModifiers::NONE), Some(Action::Quit));
    assert_eq!(m(KeyCode::Char('c'), KeyModifiers::CONTROL), Some(Action::Quit));
    assert_eq!(m(KeyCode::Char('c'), KeyModifiers::NONE), Some(Action::ForceClose));
    assert_eq!(m(KeyCode::Char('G'), KeyModifiers::SHIFT), Some(Action::Bottom));
    assert_eq!(m(KeyCode::Char('G'), KeyModifiers::NONE), Some(Action::Bottom));
    assert_eq!(m(KeyCode::Char('g'), KeyModifiers::NONE), Some(Action::Top));
    assert_eq!(m(KeyCode::BackTab, KeyModifiers::SHIFT), Some(Action::PrevPane));
    assert_eq!(m(KeyCode::BackTab, KeyModifiers::NONE), Some(Action::PrevPane));
    assert_eq!(m(KeyCode::Tab, KeyModifiers::SHIFT), Some(Action::PrevPane));
    assert_eq!(m(KeyCode::Tab, KeyModifiers::NONE), Some(Action::NextPane));
    assert_eq!(m(KeyCode::F(1), KeyModifiers::NONE), Some(Action::Help));
    assert_eq!(m(KeyCode::Char('?'), KeyModifiers::SHIFT), Some(Action::Help));
    assert_eq!(m(KeyCode::Char('+'), KeyModifiers::SHIFT), Some(Action::ClockFaster));
    assert_eq!(m(KeyCode::Char(' '), KeyModifiers::NONE), Some(Action::ClockPause));
    assert_eq!(m(KeyCode::Down, KeyModifiers::NONE), Some(Action::Down));
    assert_eq!(m(KeyCode::Char('j'), KeyModifiers::NONE), Some(Action::Down));
    assert_eq!(m(KeyCode::Char('k'), KeyModifiers::NONE), Some(Action::Up));
    assert_eq!(m(KeyCode::PageDown, KeyModifiers::NONE), Some(Action::PageDown));
    assert_eq!(m(KeyCode::Char('o'), KeyModifiers::ALT), None);
    assert_eq!(m(KeyCode::Char('z'), KeyModifiers::NONE), Some(Action::Zoom));
    assert_eq!(m(KeyCode::Char('w'), KeyModifiers::NONE), Some(Action::WriteIncident));
    assert_eq!(m(KeyCode::Char('e'), KeyModifiers::NONE), None);
    let release = KeyEvent::new_with_kind(KeyCode::Char('q'), KeyModifiers::NONE, KeyEventKind::Release);
    assert_eq!(keys.action(&release), None, "release events never match");
    let repeat = KeyEvent::new_with_kind(KeyCode::Char('j'), KeyModifiers::NONE, KeyEventKind::Repeat);
    assert_eq!(keys.action(&repeat), Some(Action::Down));
}

#[test]
fn key_event_builds_what_a_terminal_sends() {
    let ev = KeyMap::key_event("ctrl-c").unwrap();
    assert_eq!((ev.code, ev.modifiers), (KeyCode::Char('c'), KeyModifiers::CONTROL));
    let ev = KeyMap::key_event("G").unwrap();
    assert_eq!((ev.code, ev.modifiers), (KeyCode::Char('G'), KeyModifiers::SHIFT));
    assert!(KeyMap::key_event("banana").is_none());
    assert!(KeyMap::key_event("").is_none());
    assert!(KeyMap::key_event("f13").is_none());
    assert!(KeyMap::key_event(" ").is_none());
}

#[test]
fn duplicate_binding_is_reported_in_the_documented_form() {
    let msg = fixture("duplicate.toml");
    assert!(
        msg.ends_with("duplicate.toml: Duplicate key bindings: o: [force-open and reset]"),
        "{msg}"
    );
    let err = KeyMap::parse("[keys]\nreset = [\"o\"]\ndisable = [\"o\", \"q\"]\n", "k.toml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "k.toml: Duplicate key bindings: o: [force-open, reset and disable]; q: [quit and disable]"
    );
    assert!(matches!(err, KeymapError::Duplicate { .. }));
}

#[test]
fn ctrl_letters_are_case_insensitive_so_they_clash() {
    let err = KeyMap::parse("[keys]\nreset = [\"ctrl-C\"]\n", "k.toml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "k.toml: Duplicate key bindings: ctrl-c: [quit and reset]"
    );
}

#[test]
fn unknown_action_lists_the_valid_names() {
    let msg = fixture("unknown_action.toml");
    assert!(
        msg.contains("unknown_action.toml: unknown action `keys.force-opn`"),
        "{msg}"
    );
    assert!(msg.contains("valid actions: quit, help, next-pane"), "{msg}");
    assert!(msg.contains("force-open"), "{msg}");
    assert!(msg.contains("clock-step"), "{msg}");
}

#[test]
fn bad_key_names_the_string_and_the_action() {
    let msg = fixture("bad_key.toml");
    assert!(
        msg.contains("bad_key.toml: keys.force-open: invalid key \"ctrl-banana\""),
        "{msg}"
    );
    assert!(msg.contains("pageup"), "says what is allowed: {msg}");
    let msg = KeyMap::parse("[keys]\nquit = [5]\n", "k.toml").unwrap_err().to_string();
    assert!(msg.starts_with("k.toml: keys.quit: invalid key 5;"), "{msg}");
    let msg = KeyMap::parse("[keys]\nquit = \"q\"\n", "k.toml")
        .unwrap_err()
        .to_string();
    assert!(msg.starts_with("k.toml: keys.quit must be an array"), "{msg}");
    let msg = KeyMap::parse("keys = 3\n", "k.toml").unwrap_err().to_string();
    assert!(msg.starts_with("k.toml: `keys` must be a table"), "{msg}");
}

#[test]
fn not_toml_is_reported_with_the_file() {
    let msg = fixture("not_toml.toml");
    assert!(msg.contains("not_toml.toml: not valid TOML"), "{msg}");
    assert!(msg.contains("line 2"), "{msg}");
}

#[test]
fn unknown_top_level_key_is_an_error() {
    let msg = fixture("unknown_table.toml");
    assert!(
        msg.contains("unknown_table.toml: unknown top-level key `bindings`; the only allowed table is [keys]"),
        "{msg}"
    );
}

#[test]
fn missing_file_names_the_path() {
    let err = KeyMap::load(Path::new("no/such/keymap.toml")).unwrap_err();
    assert!(matches!(err, KeymapError::Read { .. }));
    assert!(err.to_string().contains("no/such/keymap.toml"), "{err}");
}

/// Rebinding `quit` keeps Ctrl-C: there is always a sure way out.
#[test]
fn rebinding_quit_keeps_ctrl_c() {
    let map = KeyMap::parse("[keys]\nquit = [\"Q\"]\n", "k.toml").unwrap();
    assert_eq!(map.keys_for(Action::Quit), ["Q", "ctrl-c"]);
    let ctrl_c = press(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(map.action(&ctrl_c), Some(Action::Quit));
    assert_eq!(map.action(&press(KeyCode::Char('q'), KeyModifiers::NONE)), None);
}
