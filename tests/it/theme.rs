//! Themes: built-ins, user overrides, `extends`, selection and error messages.

use fusebox::outcome::Level;
use fusebox::resilience::breaker::BreakerState;
use fusebox::tui::theme::{Theme, ThemeError};
use ratatui::style::{Color, Modifier, Style};
use std::path::{Path, PathBuf};

/// Every style of a theme with its key name.
fn styles(t: &Theme) -> Vec<(&'static str, Style)> {
    vec![
        ("base", t.base),
        ("title", t.title),
        ("border", t.border),
        ("border_focused", t.border_focused),
        ("selected", t.selected),
        ("dim", t.dim),
        ("header", t.header),
        ("badge", t.badge),
        ("warn", t.warn),
        ("error", t.error),
        ("ok", t.ok),
        ("gauge_ok", t.gauge_ok),
        ("gauge_warn", t.gauge_warn),
        ("gauge_crit", t.gauge_crit),
        ("state_closed", t.state_closed),
        ("state_open", t.state_open),
        ("state_half_open", t.state_half_open),
        ("state_forced_open", t.state_forced_open),
        ("state_forced_closed", t.state_forced_closed),
        ("state_disabled", t.state_disabled),
        ("level_none", t.level_none),
        ("level_partial", t.level_partial),
        ("level_fallback", t.level_fallback),
        ("level_deferred", t.level_deferred),
        ("level_failed", t.level_failed),
    ]
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/invalid_themes")
        .join(name)
        .display()
        .to_string()
}

fn load_err(path: &str) -> String {
    match Theme::load(path) {
        Ok(t) => panic!("{path} should not load, got theme {}", t.name),
        Err(e) => e.to_string(),
    }
}

/// Writes a user theme file into a temp dir and returns its path.
fn user_theme(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn every_built_in_loads_by_name() {
    for &name in Theme::BUILT_IN {
        let t = Theme::built_in(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.name, name);
        assert_eq!(Theme::load(name).unwrap(), t);
    }
}

#[test]
fn mono_uses_no_colours_at_all() {
    let mono = Theme::built_in("mono").unwrap();
    for (key, style) in styles(&mono) {
        assert_eq!((style.fg, style.bg), (None, None), "mono styles.{key} has a colour");
        assert!(
            style.underline_color.is_none(),
            "mono styles.{key} has an underline colour"
        );
    }
}

#[test]
fn selection_is_never_colour_alone() {
    for &name in Theme::BUILT_IN {
        let t = Theme::built_in(name).unwrap();
        let m = t.selected.add_modifier;
        assert!(
            m.intersects(Modifier::REVERSED | Modifier::BOLD | Modifier::UNDERLINED),
            "{name}: selected has no modifier: {:?}",
            t.selected
        );
    }
    assert!(Theme::built_in("high-contrast")
        .unwrap()
        .selected
        .add_modifier
        .contains(Modifier::REVERSED));
}

#[test]
fn default_breaker_colours_are_hystrix_like() {
    let t = Theme::built_in("default").unwrap();
    assert_eq!(t.state_closed.fg, Some(Color::Green));
    assert_eq!(t.state_open.fg, Some(Color::Red));
    assert_eq!(t.state_half_open.fg, Some(Color::Yellow));
    assert_eq!(t.state_forced_open.fg, Some(Color::Magenta));
    assert!(t.state_forced_open.add_modifier.contains(Modifier::BOLD));
    assert_eq!(t.state_forced_closed.fg, Some(Color::Cyan));
    assert_eq!(t.state_disabled.fg, Some(Color::DarkGray));
    assert_eq!(
        (t.gauge_ok.fg, t.gauge_warn.fg, t.gauge_crit.fg),
        (Some(Color::Green), Some(Color::Yellow), Some(Color::Red))
    );
}

#[test]
fn helpers_pick_the_right_style() {
    let t = Theme::built_in("default").unwrap();
    assert_eq!(t.gauge(0.0), t.gauge_ok);
    assert_eq!(t.gauge(0.79), t.gauge_ok);
    assert_eq!(t.gauge(0.80), t.gauge_warn);
    assert_eq!(t.gauge(0.949), t.gauge_warn);
    assert_eq!(t.gauge(0.95), t.gauge_crit);
    assert_eq!(t.gauge(1.5), t.gauge_crit);
    assert_eq!(t.breaker_state(BreakerState::HalfOpen), t.state_half_open);
    assert_eq!(t.breaker_state(BreakerState::ForcedClosed), t.state_forced_closed);
    assert_eq!(t.level(Level::Deferred), t.level_deferred);
    assert_eq!(t.level(Level::Failed), t.level_failed);
}

#[test]
fn built_ins_differ_from_each_other() {
    let themes: Vec<Theme> = Theme::BUILT_IN.iter().map(|n| Theme::built_in(n).unwrap()).collect();
    for (i, a) in themes.iter().enumerate() {
        for b in &themes[i + 1..] {
            assert_ne!(styles(a), styles(b), "{} and {} are identical", a.name, b.name);
        }
    }
}

#[test]
fn user_theme_overriding_one_key_changes_only_that_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = user_theme(&dir, "mytheme.toml", "[styles]\nstate_open = \"#ff8800\"\n");
    let user = Theme::load(path.to_str().unwrap()).unwrap();
    let default = Theme::built_in("default").unwrap();
    assert_eq!(user.name, "mytheme");
    assert_eq!(user.state_open, Style::new().fg(Color::Rgb(0xff, 0x88, 0x00)));
    for ((key, u), (_, d)) in styles(&user).into_iter().zip(styles(&default)) {
        if key != "state_open" {
            assert_eq!(u, d, "styles.{key} changed");
        }
    }
}

#[test]
fn style_tables_replace_the_whole_style() {
    let dir = tempfile::tempdir().unwrap();
    let text = r#"
[styles]
state_forced_open = { bg = "17", underline = true }
title = { fg = "LightBlue", bold = false, italic = true, reversed = true, dim = true }
ok = 82
"#;
    let path = user_theme(&dir, "t.toml", text);
    let t = Theme::load(path.to_str().unwrap()).unwrap();
    // default's forced_open is magenta + bold; the table replaces both.
    assert_eq!(
        t.state_forced_open,
        Style::new().bg(Color::Indexed(17)).add_modifier(Modifier::UNDERLINED)
    );
    assert_eq!(
        t.title,
        Style::new()
            .fg(Color::LightBlue)
            .remove_modifier(Modifier::BOLD)
            .add_modifier(Modifier::ITALIC | Modifier::REVERSED | Modifier::DIM)
    );
    assert_eq!(t.ok, Style::new().fg(Color::Indexed(82)));
}

#[test]
fn extends_light_starts_from_light() {
    let dir = tempfile::tempdir().unwrap();
    let path = user_theme(&dir, "mine.toml", "extends = \"light\"\n\n[styles]\nbadge = \"red\"\n");
    let t = Theme::load(path.to_str().unwrap()).unwrap();
    let light = Theme::built_in("light").unwrap();
    assert_eq!(t.badge, Style::new().fg(Color::Red));
    assert_eq!(t.state_open, light.state_open);
    assert_eq!(t.base, light.base);
    assert_eq!(t.name, "mine");
    // No [styles] at all is just the parent under a new name.
    let path = user_theme(&dir, "plain.toml", "extends = \"mono\"\n");
    let t = Theme::load(path.to_str().unwrap()).unwrap();
    assert_eq!(styles(&t), styles(&Theme::built_in("mono").unwrap()));
}

#[test]
fn select_honours_theme_then_no_color() {
    assert_eq!(Theme::select(None, true).unwrap().name, "mono");
    assert_eq!(Theme::select(None, false).unwrap().name, "default");
    assert_eq!(Theme::select(Some("light"), true).unwrap().name, "light");
    assert_eq!(
        Theme::select(Some("high-contrast"), false).unwrap().name,
        "high-contrast"
    );
}

#[test]
fn bad_colour_names_the_key_path_and_value() {
    let path = fixture("bad_colour.toml");
    let msg = load_err(&path);
    assert_eq!(
        msg,
        format!(
            "{path}: styles.state_open: '#zzzzzz' is an invalid colour; use a name like \"red\", \"#rrggbb\" or 0-255"
        )
    );
    let dir = tempfile::tempdir().unwrap();
    for (text, key, value) in [
        ("[styles]\nok = { fg = \"purple-ish\" }\n", "styles.ok.fg", "purple-ish"),
        ("[styles]\nok = { bg = \"256\" }\n", "styles.ok.bg", "256"),
        ("[styles]\nok = -1\n", "styles.ok", "-1"),
        ("[styles]\nok = \"#12345\"\n", "styles.ok", "#12345"),
        ("[styles]\nok = \"+5\"\n", "styles.ok", "+5"),
    ] {
        let p = user_theme(&dir, "c.toml", text);
        let msg = load_err(p.to_str().unwrap());
        assert!(msg.contains(&format!("{key}: '{value}' is an invalid colour")), "{msg}");
    }
}

#[test]
fn unknown_key_lists_the_known_keys() {
    let path = fixture("unknown_key.toml");
    let msg = load_err(&path);
    assert!(
        msg.starts_with(&format!(
            "{path}: unknown key styles.stat_open; known keys: base, title, border"
        )),
        "{msg}"
    );
    assert!(msg.contains("state_open"), "{msg}");
    let dir = tempfile::tempdir().unwrap();
    let p = user_theme(&dir, "u.toml", "[styles]\nok = { fg = \"red\", blink = true }\n");
    let msg = load_err(p.to_str().unwrap());
    assert!(
        msg.ends_with("unknown key styles.ok.blink; known keys: fg, bg, bold, italic, underline, reversed, dim"),
        "{msg}"
    );
    let p = user_theme(&dir, "v.toml", "colours = {}\n");
    let msg = load_err(p.to_str().unwrap());
    assert!(
        msg.ends_with("unknown key colours; known keys: extends, styles"),
        "{msg}"
    );
}

#[test]
fn unknown_extends_lists_the_built_ins() {
    let path = fixture("unknown_extends.toml");
    let msg = load_err(&path);
    assert_eq!(
        msg,
        format!("{path}: extends: 'solarized' is not a built-in theme; use one of default, light, high-contrast, mono")
    );
}

#[test]
fn not_toml_is_reported_with_the_file() {
    let path = fixture("not_toml.toml");
    let msg = load_err(&path);
    assert!(msg.starts_with(&format!("{path}: not valid TOML")), "{msg}");
    assert!(msg.contains("line 2"), "{msg}");
}

#[test]
fn wrong_type_names_the_key_path_and_value() {
    let path = fixture("wrong_type.toml");
    let msg = load_err(&path);
    assert_eq!(
        msg,
        format!("{path}: styles.selected.bold: \"yes\" is not a boolean; use true or false")
    );
    let dir = tempfile::tempdir().unwrap();
    for (text, start) in [
        ("styles = 3\n", "styles: 3 is not a table"),
        ("extends = 1\n", "extends: 1 is not a built-in theme name"),
        (
            "[styles]\nok = true\n",
            "styles.ok: true is not a colour string or a table",
        ),
        ("[styles]\nok = { fg = [1] }\n", "styles.ok.fg: [1] is not a colour"),
    ] {
        let p = user_theme(&dir, "w.toml", text);
        let msg = load_err(p.to_str().unwrap());
        assert!(msg.contains(start), "{msg}");
    }
}

#[test]
fn missing_file_names_the_path() {
    let err = Theme::load("no/such/theme.toml").unwrap_err();
    assert!(matches!(err, ThemeError::Read { .. }));
    assert!(
        err.to_string()
            .starts_with("cannot read theme file no/such/theme.toml:"),
        "{err}"
    );
}

#[test]
fn unknown_theme_name_lists_the_built_ins() {
    let msg = Theme::load("solarized").unwrap_err().to_string();
    assert_eq!(
        msg,
        "unknown theme 'solarized'; use a built-in (default, light, high-contrast, mono) or a path to a .toml theme file"
    );
    assert!(Theme::built_in("nope").is_err());
    assert!(Theme::select(Some("nope"), true).is_err());
}
