//! Overlays: the help (every binding from the keymap), the confirmation
//! of destructive commands, and the detail of the selected row
//! ([`super::detail`]).

use super::centered;
use crate::tui::app::{App, Overlay};
use crate::tui::keymap::KeyMap;
use crate::tui::theme::Theme;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;

/// Draws the active overlay, if any.
pub fn draw(f: &mut Frame, area: Rect, app: &App, theme: &Theme, keymap: &KeyMap) {
    match &app.overlay {
        Overlay::Help => help(f, area, app, theme, keymap),
        Overlay::Confirm { prompt, .. } => confirm(f, area, prompt, theme),
        Overlay::Detail => super::detail::draw(f, area, app, theme),
        Overlay::None | Overlay::Filter => {}
    }
}

fn help(f: &mut Frame, area: Rect, app: &App, theme: &Theme, keymap: &KeyMap) {
    let rows = keymap.help_rows();
    let r = centered(area, 100, rows.len() as u16 + 6);
    // The action names are what a keymap file binds keys to.
    let mut lines = vec![Line::from(Span::styled(
        format!(" {:<16}{:<18}{}", "keys", "action", "what it does"),
        theme.dim,
    ))];
    lines.extend(rows.iter().map(|(keys, action)| {
        Line::from(vec![
            Span::styled(format!(" {keys:<16}"), theme.title),
            Span::styled(format!("{:<18}", action.name()), theme.dim),
            Span::raw(action.description()),
        ])
    }));
    lines.push(Line::from(""));
    let note = match &app.opts.readonly {
        Some(why) => format!(" read-only ({why}): commands that change the runner are disabled"),
        None if app.opts.yes => " --yes: destructive commands run without confirmation".into(),
        None => " destructive commands ask for confirmation".into(),
    };
    lines.push(Line::from(Span::styled(note, theme.dim)));
    if app.opts.mode == crate::tui::app::Mode::Attach {
        lines.push(Line::from(Span::styled(
            " ≠ after a combined row's state: its instances' breakers differ (their rows follow)",
            theme.dim,
        )));
    }
    f.render_widget(Clear, r);
    // What does not fit scrolls, and the title says so.
    let inner = r.height.saturating_sub(2);
    let hidden = (lines.len() as u16).saturating_sub(inner);
    let scroll = app.help_scroll.min(hidden);
    let title = if hidden == 0 {
        " Help — Esc to close ".to_string()
    } else {
        format!(" Help — ↑↓ PgUp PgDn to scroll ({}/{}), Esc to close ", scroll, hidden)
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.border_focused)
        .title(Span::styled(title, theme.title));
    f.render_widget(
        Paragraph::new(lines).block(block).style(theme.base).scroll((scroll, 0)),
        r,
    );
}

fn confirm(f: &mut Frame, area: Rect, prompt: &str, theme: &Theme) {
    let r = centered(area, 60, 6);
    f.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_style(theme.warn)
        .title(Span::styled(" Confirm ", theme.warn));
    let text = vec![
        Line::from(Span::styled(prompt.to_string(), theme.base)),
        Line::from(""),
        Line::from(vec![
            Span::styled(" y ", theme.badge),
            Span::raw(" yes    "),
            Span::styled(" n ", theme.badge),
            Span::raw(" no (Esc)"),
        ]),
    ];
    f.render_widget(
        Paragraph::new(text)
            .block(block)
            .wrap(Wrap { trim: false })
            .style(theme.base),
        r,
    );
}
