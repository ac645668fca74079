//! Key bindings: the defaults, an optional TOML keymap file that remaps
//! actions, and matching of crossterm key events to [`Action`]s.
//!
//! A keymap file has one `[keys]` table mapping action names to arrays of key
//! strings. Naming an action replaces its default keys, `[]` unbinds it, and
//! actions not named keep their defaults:
//!
//! ```toml
//! [keys]
//! force-open = ["O"]
//! quit = ["q", "ctrl-q"]
//! ```
//!
//! Key strings are a single printable character (`"o"`, `"O"`, `"?"`), a
//! named key (`space`, `enter`, `esc`, `tab`, `backtab` alias `shift-tab`,
//! `up`, `down`, `left`, `right`, `pageup`, `pagedown`, `home`, `end`,
//! `f1`..`f12`), optionally prefixed with `ctrl-` and/or `alt-`.

use crate::tui::action::Action;
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// What a key string may look like, for error messages.
const KEY_HELP: &str = "use a single character (\"o\", \"O\", \"?\"), space, enter, esc, tab, backtab, up, down, \
                        left, right, pageup, pagedown, home, end or f1-f12, optionally prefixed with ctrl- or alt-";

/// The default bindings, in help order.
const DEFAULTS: &[(Action, &[&str])] = &[
    (Action::Quit, &["q", "ctrl-c"]),
    (Action::Help, &["?", "f1"]),
    (Action::NextPane, &["tab"]),
    (Action::PrevPane, &["backtab"]),
    (Action::FocusBreakers, &["1"]),
    (Action::FocusLimiters, &["2"]),
    (Action::FocusBudgets, &["3"]),
    (Action::FocusChains, &["4"]),
    (Action::FocusEvents, &["5"]),
    (Action::Up, &["k", "up"]),
    (Action::Down, &["j", "down"]),
    (Action::PageUp, &["pageup"]),
    (Action::PageDown, &["pagedown"]),
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
    (Action::Zoom, &["z"]),
    (Action::TimeSpan, &["t"]),
    (Action::WriteIncident, &["w"]),
    (Action::Detail, &["enter"]),
    (Action::ClockPause, &["space"]),
    (Action::ClockFaster, &["+"]),
    (Action::ClockSlower, &["-"]),
    (Action::ClockStep, &["n"]),
];

/// A keymap problem, naming the file, the action or key, and what is allowed.
#[derive(Debug, thiserror::Error)]
pub enum KeymapError {
    /// The file could not be read.
    #[error("cannot read keymap file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{file}: not valid TOML: {message}")]
    Parse {
        /// The file.
        file: String,
        /// toml's message, with line and column.
        message: String,
    },
    /// A top-level key other than `keys`.
    #[error("{file}: unknown top-level key `{key}`; the only allowed table is [keys]")]
    UnknownKey {
        /// The file.
        file: String,
        /// The offending key.
        key: String,
    },
    /// `keys` is not a table.
    #[error("{file}: `keys` must be a table of action names to arrays of keys, e.g. [keys] force-open = [\"O\"]")]
    NotATable {
        /// The file.
        file: String,
    },
    /// An action name that does not exist.
    #[error("{file}: unknown action `keys.{action}`; valid actions: {valid}")]
    UnknownAction {
        /// The file.
        file: String,
        /// The unknown name.
        action: String,
        /// Every valid action name, comma-separated.
        valid: String,
    },
    /// An action's value is not an array.
    #[error("{file}: keys.{action} must be an array of key strings, e.g. [\"o\", \"ctrl-o\"] (or [] to unbind)")]
    NotAnArray {
        /// The file.
        file: String,
        /// The action name.
        action: String,
    },
    /// A key string (or non-string value) that is not a valid key.
    #[error("{file}: keys.{action}: invalid key {key}; {KEY_HELP}")]
    BadKey {
        /// The file.
        file: String,
        /// The action name.
        action: String,
        /// The offending value, as written in TOML (strings are quoted).
        key: String,
    },
    /// After merging with the defaults, a key is bound to more than one action.
    #[error("{file}: Duplicate key bindings: {clashes}")]
    Duplicate {
        /// The file.
        file: String,
        /// Every clash, e.g. `o: [force-open and reset]`, separated by `; `.
        clashes: String,
    },
}

/// A normalised key: code plus the modifiers that matter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    code: KeyCode,
    ctrl: bool,
    alt: bool,
}

/// Always bound to quit.
const CTRL_C: Key = Key {
    code: KeyCode::Char('c'),
    ctrl: true,
    alt: false,
};

impl Key {
    /// Parses a key string; `None` if it is not valid.
    fn parse(spec: &str) -> Option<Key> {
        let mut rest = spec;
        let (mut ctrl, mut alt) = (false, false);
        loop {
            let lower = rest.to_ascii_lowercase();
            // A prefix needs something after it: "-" and "ctrl--" are keys.
            if lower.starts_with("ctrl-") && rest.len() > 5 && !ctrl {
                ctrl = true;
                rest = rest.get(5..)?;
            } else if lower.starts_with("alt-") && rest.len() > 4 && !alt {
                alt = true;
                rest = rest.get(4..)?;
            } else {
                break;
            }
        }
        let mut chars = rest.chars();
        let code = match (chars.next(), chars.next()) {
            (Some(c), None) if !c.is_control() && !c.is_whitespace() => KeyCode::Char(c),
            (Some(_), Some(_)) => match rest.to_ascii_lowercase().as_str() {
                "space" => KeyCode::Char(' '),
                "enter" => KeyCode::Enter,
                "esc" => KeyCode::Esc,
                "tab" => KeyCode::Tab,
                "backtab" | "shift-tab" => KeyCode::BackTab,
                "up" => KeyCode::Up,
                "down" => KeyCode::Down,
                "left" => KeyCode::Left,
                "right" => KeyCode::Right,
                "pageup" => KeyCode::PageUp,
                "pagedown" => KeyCode::PageDown,
                "home" => KeyCode::Home,
                "end" => KeyCode::End,
                name => {
                    let digits = name.strip_prefix('f')?;
                    if !digits.bytes().all(|b| b.is_ascii_digit()) {
                        return None;
                    }
                    let n: u8 = digits.parse().ok()?;
                    if !(1..=12).contains(&n) {
                        return None;
                    }
                    KeyCode::F(n)
                }
            },
            _ => return None,
        };
        Some(Key { code, ctrl, alt }.normalised())
    }

    /// The key a terminal event stands for, ignoring SHIFT where the
    /// character already carries it (terminals differ in reporting it).
    fn from_event(event: &KeyEvent) -> Key {
        let m = event.modifiers;
        let shift = m.contains(KeyModifiers::SHIFT);
        let code = match event.code {
            KeyCode::Char(c) if shift && c.is_ascii_lowercase() => KeyCode::Char(c.to_ascii_uppercase()),
            KeyCode::Tab if shift => KeyCode::BackTab,
            other => other,
        };
        Key {
            code,
            ctrl: m.contains(KeyModifiers::CONTROL),
            alt: m.contains(KeyModifiers::ALT),
        }
        .normalised()
    }

    /// Ctrl+letter is case-insensitive: most terminals cannot tell them apart.
    fn normalised(mut self) -> Key {
        if let KeyCode::Char(c) = self.code {
            if self.ctrl && c.is_ascii_uppercase() {
                self.code = KeyCode::Char(c.to_ascii_lowercase());
            }
        }
        self
    }

    /// The canonical display name, e.g. `ctrl-c`, `O`, `space`, `f1`.
    fn display(self) -> String {
        let base = match self.code {
            KeyCode::Char(' ') => "space".to_string(),
            KeyCode::Char(c) => c.to_string(),
            KeyCode::Enter => "enter".into(),
            KeyCode::Esc => "esc".into(),
            KeyCode::Tab => "tab".into(),
            KeyCode::BackTab => "backtab".into(),
            KeyCode::Up => "up".into(),
            KeyCode::Down => "down".into(),
            KeyCode::Left => "left".into(),
            KeyCode::Right => "right".into(),
            KeyCode::PageUp => "pageup".into(),
            KeyCode::PageDown => "pagedown".into(),
            KeyCode::Home => "home".into(),
            KeyCode::End => "end".into(),
            KeyCode::F(n) => format!("f{n}"),
            other => format!("{other:?}").to_lowercase(),
        };
        let ctrl = if self.ctrl { "ctrl-" } else { "" };
        let alt = if self.alt { "alt-" } else { "" };
        format!("{ctrl}{alt}{base}")
    }

    /// A press event for this key, as a terminal would report it.
    fn event(self) -> KeyEvent {
        let mut modifiers = KeyModifiers::NONE;
        if self.ctrl {
            modifiers |= KeyModifiers::CONTROL;
        }
        if self.alt {
            modifiers |= KeyModifiers::ALT;
        }
        match self.code {
            KeyCode::Char(c) if c.is_ascii_uppercase() => modifiers |= KeyModifiers::SHIFT,
            KeyCode::BackTab => modifiers |= KeyModifiers::SHIFT,
            _ => {}
        }
        KeyEvent::new(self.code, modifiers)
    }
}

/// Key → action and action → keys.
#[derive(Clone, Debug)]
pub struct KeyMap {
    by_key: HashMap<Key, Action>,
    names: BTreeMap<Action, Vec<String>>,
}

impl Default for KeyMap {
    fn default() -> Self {
        Self::defaults()
    }
}

impl KeyMap {
    /// The built-in bindings.
    pub fn defaults() -> Self {
        let (map, clashes) = Self::assemble(&Self::default_bindings());
        debug_assert!(clashes.is_empty(), "default keymap clashes: {clashes}");
        map
    }

    /// Reads a keymap file and merges it over the defaults.
    pub fn load(path: &Path) -> Result<Self, KeymapError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeymapError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses keymap text and merges it over the defaults; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self, KeymapError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| KeymapError::Parse {
            file: file.to_string(),
            message: crate::config::toml_message(text, &e),
        })?;
        let mut bindings = Self::default_bindings();
        for (top, value) in &table {
            if top != "keys" {
                return Err(KeymapError::UnknownKey {
                    file: file.to_string(),
                    key: top.clone(),
                });
            }
            let keys = value
                .as_table()
                .ok_or_else(|| KeymapError::NotATable { file: file.to_string() })?;
            for (name, value) in keys {
                let action = Action::from_name(name).ok_or_else(|| KeymapError::UnknownAction {
                    file: file.to_string(),
                    action: name.clone(),
                    valid: Action::ALL.iter().map(|a| a.name()).collect::<Vec<_>>().join(", "),
                })?;
                let items = value.as_array().ok_or_else(|| KeymapError::NotAnArray {
                    file: file.to_string(),
                    action: name.clone(),
                })?;
                let mut parsed = Vec::with_capacity(items.len());
                for item in items {
                    let key = item.as_str().and_then(Key::parse).ok_or_else(|| KeymapError::BadKey {
                        file: file.to_string(),
                        action: name.clone(),
                        key: item.to_string(),
                    })?;
                    if !parsed.contains(&key) {
                        parsed.push(key);
                    }
                }
                bindings.insert(action, parsed);
            }
        }
        // Ctrl-C quits whatever the file binds to `quit`: a sure way out.
        let quit = bindings.entry(Action::Quit).or_default();
        if !quit.contains(&CTRL_C) {
            quit.push(CTRL_C);
        }
        let (map, clashes) = Self::assemble(&bindings);
        if clashes.is_empty() {
            Ok(map)
        } else {
            Err(KeymapError::Duplicate {
                file: file.to_string(),
                clashes,
            })
        }
    }

    /// The action bound to a key event, if any; release events never match.
    pub fn action(&self, key: &KeyEvent) -> Option<Action> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        self.by_key.get(&Key::from_event(key)).copied()
    }

    /// The display names of the keys bound to an action, e.g. `["q", "ctrl-c"]`.
    pub fn keys_for(&self, action: Action) -> &[String] {
        self.names.get(&action).map_or(&[], Vec::as_slice)
    }

    /// One `(keys, action)` row per action in [`Action::ALL`] order, e.g.
    /// `("q, ctrl-c", Action::Quit)`; actions without keys show `(unbound)`.
    pub fn help_rows(&self) -> Vec<(String, Action)> {
        Action::ALL
            .iter()
            .map(|&a| {
                let keys = self.keys_for(a);
                let shown = if keys.is_empty() {
                    "(unbound)".to_string()
                } else {
                    keys.join(", ")
                };
                (shown, a)
            })
            .collect()
    }

    /// The press event a terminal would send for a key string (same syntax as
    /// keymap files), e.g. `"ctrl-c"`; `None` if the string is not a valid key.
    /// Handy for tests and for showing keys.
    pub fn key_event(spec: &str) -> Option<KeyEvent> {
        Key::parse(spec).map(Key::event)
    }

    /// The defaults as parsed keys.
    fn default_bindings() -> BTreeMap<Action, Vec<Key>> {
        DEFAULTS
            .iter()
            .map(|(action, keys)| (*action, keys.iter().filter_map(|k| Key::parse(k)).collect()))
            .collect()
    }

    /// Builds the map (first binding wins) and describes any clashes, e.g.
    /// `o: [force-open and reset]`; empty when there are none.
    fn assemble(bindings: &BTreeMap<Action, Vec<Key>>) -> (KeyMap, String) {
        let mut by_key: HashMap<Key, Action> = HashMap::new();
        let mut names = BTreeMap::new();
        let mut clashes: Vec<(Key, Vec<Action>)> = Vec::new();
        for &action in Action::ALL {
            let keys = bindings.get(&action).map_or(&[][..], Vec::as_slice);
            for &key in keys {
                match by_key.get(&key) {
                    Some(&first) if first != action => match clashes.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, actions)) => actions.push(action),
                        None => clashes.push((key, vec![first, action])),
                    },
                    Some(_) => {}
                    None => {
                        by_key.insert(key, action);
                    }
                }
            }
            names.insert(action, keys.iter().map(|k| k.display()).collect());
        }
        let described = clashes
            .iter()
            .map(|(key, actions)| format!("{}: [{}]", key.display(), list_and(actions)))
            .collect::<Vec<_>>()
            .join("; ");
        (KeyMap { by_key, names }, described)
    }
}

/// `a`, `a and b`, `a, b and c`.
fn list_and(actions: &[Action]) -> String {
    match actions.split_last() {
        None => String::new(),
        Some((last, [])) => last.name().to_string(),
        Some((last, rest)) => {
            let head = rest.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ");
            format!("{head} and {}", last.name())
        }
    }
}
