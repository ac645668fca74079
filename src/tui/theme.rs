//! Colour themes: four built-ins compiled in from `themes/*.toml`, and user
//! theme files that extend a built-in and override individual styles.
//!
//! A theme file has an optional `extends = "NAME"` (a built-in; user themes
//! extend `default` when absent) and a `[styles]` table keyed by [`Theme`]'s
//! field names. A style is a colour string (the foreground) or a table
//! `{ fg = "…", bg = "…", bold = true, italic = true, underline = true,
//! reversed = true, dim = true }`; either form replaces that key's whole style.
//! `bold = false` (etc.) explicitly removes the modifier when styles are
//! patched over each other. Colours are ratatui names (`red`, `darkgray`,
//! `lightcyan`, `reset`, …), `#rrggbb`, or a 256-colour index `0`–`255`.

use crate::outcome::Level;
use crate::resilience::breaker::BreakerState;
use ratatui::style::{Color, Modifier, Style};
use std::path::Path;
use std::str::FromStr;

/// The compiled-in theme files, by name.
const SOURCES: &[(&str, &str)] = &[
    ("default", include_str!("../../themes/default.toml")),
    ("light", include_str!("../../themes/light.toml")),
    ("high-contrast", include_str!("../../themes/high-contrast.toml")),
    ("mono", include_str!("../../themes/mono.toml")),
];

/// Every key allowed in `[styles]`, in field order.
const STYLE_KEYS: &[&str] = &[
    "base",
    "title",
    "border",
    "border_focused",
    "selected",
    "dim",
    "header",
    "badge",
    "warn",
    "error",
    "ok",
    "gauge_ok",
    "gauge_warn",
    "gauge_crit",
    "state_closed",
    "state_open",
    "state_half_open",
    "state_forced_open",
    "state_forced_closed",
    "state_disabled",
    "level_none",
    "level_partial",
    "level_fallback",
    "level_deferred",
    "level_failed",
];

/// Keys allowed inside a style table.
const STYLE_TABLE_KEYS: &str = "fg, bg, bold, italic, underline, reversed, dim";

/// A theme problem, naming the file, the key path and the bad value.
#[derive(Debug, thiserror::Error)]
pub enum ThemeError {
    /// Neither a built-in theme name nor a path to a file.
    #[error("unknown theme '{name}'; use a built-in ({}) or a path to a .toml theme file", Theme::BUILT_IN.join(", "))]
    UnknownTheme {
        /// What was asked for.
        name: String,
    },
    /// The theme file could not be read.
    #[error("cannot read theme file {path}: {source}")]
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
    /// A key that a theme file may not contain.
    #[error("{file}: unknown key {key}; known keys: {known}")]
    UnknownKey {
        /// The file.
        file: String,
        /// Dotted key path, e.g. `styles.stat_open`.
        key: String,
        /// The keys allowed at that level.
        known: String,
    },
    /// `extends` names something that is not a built-in theme.
    #[error("{file}: extends: '{name}' is not a built-in theme; use one of {}", Theme::BUILT_IN.join(", "))]
    UnknownExtends {
        /// The file.
        file: String,
        /// The unknown name.
        name: String,
    },
    /// A colour that cannot be parsed.
    #[error("{file}: {key}: '{value}' is an invalid colour; use a name like \"red\", \"#rrggbb\" or 0-255")]
    InvalidColour {
        /// The file.
        file: String,
        /// Dotted key path, e.g. `styles.state_open.fg`.
        key: String,
        /// The bad value.
        value: String,
    },
    /// A value of the wrong TOML type, e.g. `bold = "yes"`.
    #[error("{file}: {key}: {value} is not {expected}")]
    WrongType {
        /// The file.
        file: String,
        /// Dotted key path, e.g. `styles.selected.bold`.
        key: String,
        /// The bad value as written in TOML.
        value: String,
        /// What is allowed there.
        expected: &'static str,
    },
    /// A built-in theme that does not define every style (a bug in `themes/`).
    #[error("{file}: missing styles.{key}; a theme without `extends` must define every style")]
    Missing {
        /// The file.
        file: String,
        /// The missing key.
        key: &'static str,
    },
}

/// Every style the console draws with.
#[derive(Clone, Debug, PartialEq)]
pub struct Theme {
    /// The theme's name (a built-in name or the user file's stem).
    pub name: String,
    /// Default text (fg/bg).
    pub base: Style,
    /// Pane titles.
    pub title: Style,
    /// Unfocused pane border.
    pub border: Style,
    /// Focused pane border.
    pub border_focused: Style,
    /// Selected row; always carries a modifier in built-ins, never colour alone.
    pub selected: Style,
    /// Secondary text.
    pub dim: Style,
    /// The header bar.
    pub header: Style,
    /// Badges like READONLY, FROZEN, DRILL.
    pub badge: Style,
    /// Warnings (near-limit budgets, frozen limiter).
    pub warn: Style,
    /// Errors.
    pub error: Style,
    /// Healthy figures.
    pub ok: Style,
    /// Gauges below 80 %.
    pub gauge_ok: Style,
    /// Gauges from 80 % to below 95 %.
    pub gauge_warn: Style,
    /// Gauges at 95 % or more.
    pub gauge_crit: Style,
    /// Breaker closed.
    pub state_closed: Style,
    /// Breaker open.
    pub state_open: Style,
    /// Breaker half-open.
    pub state_half_open: Style,
    /// Breaker forced open by an operator.
    pub state_forced_open: Style,
    /// Breaker forced closed by an operator.
    pub state_forced_closed: Style,
    /// Breaker disabled.
    pub state_disabled: Style,
    /// Degradation level: none.
    pub level_none: Style,
    /// Degradation level: partial.
    pub level_partial: Style,
    /// Degradation level: fallback.
    pub level_fallback: Style,
    /// Degradation level: deferred.
    pub level_deferred: Style,
    /// Degradation level: failed.
    pub level_failed: Style,
}

impl Theme {
    /// The names of the compiled-in themes.
    pub const BUILT_IN: &'static [&'static str] = &["default", "light", "high-contrast", "mono"];

    /// A compiled-in theme by name.
    pub fn built_in(name: &str) -> Result<Theme, ThemeError> {
        let (_, text) = SOURCES
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| ThemeError::UnknownTheme { name: name.to_string() })?;
        Self::parse(text, &format!("built-in theme {name}"), name, false)
    }

    /// A built-in theme name, or a path to a user theme file. Built-in names
    /// win; use `./default` to load a file called `default`.
    pub fn load(name_or_path: &str) -> Result<Theme, ThemeError> {
        if Self::BUILT_IN.contains(&name_or_path) {
            return Self::built_in(name_or_path);
        }
        let path = Path::new(name_or_path);
        let looks_like_path = name_or_path.contains(['/', '\\']) || name_or_path.ends_with(".toml");
        if !looks_like_path && !path.exists() {
            return Err(ThemeError::UnknownTheme {
                name: name_or_path.to_string(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|source| ThemeError::Read {
            path: name_or_path.to_string(),
            source,
        })?;
        let name = path
            .file_stem()
            .map_or_else(|| name_or_path.into(), |s| s.to_string_lossy().into_owned());
        Self::parse(&text, name_or_path, &name, true)
    }

    /// The theme to use: `--theme` if given, else `mono` when `no_color`
    /// (see [`Theme::no_color_env`]), else `default`.
    pub fn select(arg: Option<&str>, no_color: bool) -> Result<Theme, ThemeError> {
        match arg {
            Some(name_or_path) => Self::load(name_or_path),
            None if no_color => Self::built_in("mono"),
            None => Self::built_in("default"),
        }
    }

    /// Whether `NO_COLOR` is set to a non-empty value (<https://no-color.org>).
    pub fn no_color_env() -> bool {
        std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
    }

    /// The gauge style for a fill ratio in `0.0..=1.0` (as `Gauge::ratio`):
    /// ok below 0.80, warn below 0.95, crit from 0.95.
    pub fn gauge(&self, ratio: f64) -> Style {
        if ratio >= 0.95 {
            self.gauge_crit
        } else if ratio >= 0.80 {
            self.gauge_warn
        } else {
            self.gauge_ok
        }
    }

    /// The style for a breaker state.
    pub fn breaker_state(&self, state: BreakerState) -> Style {
        match state {
            BreakerState::Closed => self.state_closed,
            BreakerState::Open => self.state_open,
            BreakerState::HalfOpen => self.state_half_open,
            BreakerState::ForcedOpen => self.state_forced_open,
            BreakerState::ForcedClosed => self.state_forced_closed,
            BreakerState::Disabled => self.state_disabled,
        }
    }

    /// The style for a degradation level.
    pub fn level(&self, level: Level) -> Style {
        match level {
            Level::None => self.level_none,
            Level::Partial => self.level_partial,
            Level::Fallback => self.level_fallback,
            Level::Deferred => self.level_deferred,
            Level::Failed => self.level_failed,
        }
    }

    /// A theme with every style empty.
    fn blank(name: &str) -> Theme {
        let s = Style::new();
        Theme {
            name: name.to_string(),
            base: s,
            title: s,
            border: s,
            border_focused: s,
            selected: s,
            dim: s,
            header: s,
            badge: s,
            warn: s,
            error: s,
            ok: s,
            gauge_ok: s,
            gauge_warn: s,
            gauge_crit: s,
            state_closed: s,
            state_open: s,
            state_half_open: s,
            state_forced_open: s,
            state_forced_closed: s,
            state_disabled: s,
            level_none: s,
            level_partial: s,
            level_fallback: s,
            level_deferred: s,
            level_failed: s,
        }
    }

    /// The field a `[styles]` key names.
    fn slot(&mut self, key: &str) -> Option<&mut Style> {
        Some(match key {
            "base" => &mut self.base,
            "title" => &mut self.title,
            "border" => &mut self.border,
            "border_focused" => &mut self.border_focused,
            "selected" => &mut self.selected,
            "dim" => &mut self.dim,
            "header" => &mut self.header,
            "badge" => &mut self.badge,
            "warn" => &mut self.warn,
            "error" => &mut self.error,
            "ok" => &mut self.ok,
            "gauge_ok" => &mut self.gauge_ok,
            "gauge_warn" => &mut self.gauge_warn,
            "gauge_crit" => &mut self.gauge_crit,
            "state_closed" => &mut self.state_closed,
            "state_open" => &mut self.state_open,
            "state_half_open" => &mut self.state_half_open,
            "state_forced_open" => &mut self.state_forced_open,
            "state_forced_closed" => &mut self.state_forced_closed,
            "state_disabled" => &mut self.state_disabled,
            "level_none" => &mut self.level_none,
            "level_partial" => &mut self.level_partial,
            "level_fallback" => &mut self.level_fallback,
            "level_deferred" => &mut self.level_deferred,
            "level_failed" => &mut self.level_failed,
            _ => return None,
        })
    }

    /// Parses theme text; `file` names it in errors. A user theme without
    /// `extends` extends `default`; a built-in without it must be complete.
    fn parse(text: &str, file: &str, name: &str, user: bool) -> Result<Theme, ThemeError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ThemeError::Parse {
            file: file.to_string(),
            message: crate::config::toml_message(text, &e),
        })?;
        if let Some(key) = table.keys().find(|k| !matches!(k.as_str(), "extends" | "styles")) {
            return Err(ThemeError::UnknownKey {
                file: file.to_string(),
                key: key.clone(),
                known: "extends, styles".into(),
            });
        }
        let wrong = |key: &str, value: &toml::Value, expected: &'static str| ThemeError::WrongType {
            file: file.to_string(),
            key: key.to_string(),
            value: value.to_string(),
            expected,
        };
        let base = match table.get("extends") {
            Some(v) => {
                let parent = v.as_str().ok_or_else(|| wrong("extends", v, "a built-in theme name"))?;
                if !Self::BUILT_IN.contains(&parent) {
                    return Err(ThemeError::UnknownExtends {
                        file: file.to_string(),
                        name: parent.to_string(),
                    });
                }
                Some(Self::built_in(parent)?)
            }
            None if user => Some(Self::built_in("default")?),
            None => None,
        };
        let complete = base.is_some();
        let mut theme = base.unwrap_or_else(|| Self::blank(name));
        theme.name = name.to_string();
        let empty = toml::Table::new();
        let styles = match table.get("styles") {
            Some(v) => v.as_table().ok_or_else(|| wrong("styles", v, "a table"))?,
            None => &empty,
        };
        for (key, value) in styles {
            let path = format!("styles.{key}");
            let slot = theme.slot(key).ok_or_else(|| ThemeError::UnknownKey {
                file: file.to_string(),
                key: path.clone(),
                known: STYLE_KEYS.join(", "),
            })?;
            *slot = parse_style(value, file, &path)?;
        }
        if !complete {
            if let Some(key) = STYLE_KEYS.iter().find(|k| !styles.contains_key(**k)) {
                return Err(ThemeError::Missing {
                    file: file.to_string(),
                    key,
                });
            }
        }
        Ok(theme)
    }
}

/// A style value: a colour string (the foreground) or a style table.
fn parse_style(value: &toml::Value, file: &str, path: &str) -> Result<Style, ThemeError> {
    let table = match value {
        toml::Value::String(_) | toml::Value::Integer(_) => {
            return Ok(Style::new().fg(parse_colour(value, file, path)?))
        }
        toml::Value::Table(t) => t,
        other => {
            return Err(ThemeError::WrongType {
                file: file.to_string(),
                key: path.to_string(),
                value: other.to_string(),
                expected: "a colour string or a table like { fg = \"red\", bold = true }",
            })
        }
    };
    let mut style = Style::new();
    for (key, v) in table {
        let path = format!("{path}.{key}");
        let modifier = match key.as_str() {
            "fg" => {
                style = style.fg(parse_colour(v, file, &path)?);
                continue;
            }
            "bg" => {
                style = style.bg(parse_colour(v, file, &path)?);
                continue;
            }
            "bold" => Modifier::BOLD,
            "italic" => Modifier::ITALIC,
            "underline" => Modifier::UNDERLINED,
            "reversed" => Modifier::REVERSED,
            "dim" => Modifier::DIM,
            _ => {
                return Err(ThemeError::UnknownKey {
                    file: file.to_string(),
                    key: path,
                    known: STYLE_TABLE_KEYS.into(),
                })
            }
        };
        style = match v.as_bool() {
            Some(true) => style.add_modifier(modifier),
            Some(false) => style.remove_modifier(modifier),
            None => {
                return Err(ThemeError::WrongType {
                    file: file.to_string(),
                    key: path,
                    value: v.to_string(),
                    expected: "a boolean; use true or false",
                })
            }
        };
    }
    Ok(style)
}

/// A colour: a ratatui name, `#rrggbb`, or an index 0–255 (string or integer).
fn parse_colour(value: &toml::Value, file: &str, path: &str) -> Result<Color, ThemeError> {
    let invalid = |shown: String| ThemeError::InvalidColour {
        file: file.to_string(),
        key: path.to_string(),
        value: shown,
    };
    match value {
        toml::Value::Integer(i) => u8::try_from(*i).map(Color::Indexed).map_err(|_| invalid(i.to_string())),
        toml::Value::String(s) => colour_from_str(s).ok_or_else(|| invalid(s.clone())),
        other => Err(ThemeError::WrongType {
            file: file.to_string(),
            key: path.to_string(),
            value: other.to_string(),
            expected: "a colour; use a name like \"red\", \"#rrggbb\" or 0-255",
        }),
    }
}

/// Parses a colour string strictly (ratatui's parser also accepts e.g. `+5`).
fn colour_from_str(s: &str) -> Option<Color> {
    if let Some(hex) = s.strip_prefix('#') {
        if hex.len() != 6 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let channel = |i: usize| hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok());
        return Some(Color::Rgb(channel(0)?, channel(2)?, channel(4)?));
    }
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u8>().ok().map(Color::Indexed);
    }
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphabetic() || matches!(c, ' ' | '-' | '_'))
    {
        return Color::from_str(s).ok();
    }
    None
}
