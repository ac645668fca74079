//! Drawing: one function per pane and overlay, all reading the app state
//! (and through it the snapshot); nothing here mutates anything.

pub mod breakers;
pub mod budgets;
pub mod chains;
pub mod detail;
pub mod events;
pub mod header;
pub mod hint;
pub mod limiters;
pub mod overlay;

use super::app::{App, Pane};
use super::keymap::KeyMap;
pub use super::said::clock;
use super::theme::Theme;
use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Borders};
use ratatui::Frame;

/// Draws the whole console.
pub fn draw(f: &mut Frame, app: &App, theme: &Theme, keymap: &KeyMap) {
    let area = f.area();
    f.buffer_mut().set_style(area, theme.base);
    // Zoomed, or on a short terminal (an SSH session's 80×24, say): the
    // breakers whole, and the focused other pane below them.
    let short = area.height < 32;
    if app.zoomed || short {
        let rows = Layout::default()
            .direction(Direction::Vertical)
            .constraints([Constraint::Length(3), Constraint::Min(3), Constraint::Length(1)])
            .split(area);
        header::draw(f, rows[0], app, theme);
        if app.zoomed {
            pane(f, rows[1], app, theme, app.focus);
        } else {
            let breakers_h = (app.snap.breakers.len() as u16 + 3).min(rows[1].height.saturating_sub(6));
            let split = Layout::default()
                .direction(Direction::Vertical)
                .constraints([Constraint::Length(breakers_h), Constraint::Min(3)])
                .split(rows[1]);
            breakers::draw(f, split[0], app, theme);
            let below = if app.focus == Pane::Breakers {
                Pane::Chains
            } else {
                app.focus
            };
            pane(f, split[1], app, theme, below);
        }
        footer(f, rows[2], app, theme, keymap);
        overlay::draw(f, area, app, theme, keymap);
        return;
    }
    let breakers_h = (app.snap.breakers.len() as u16 + 3)
        .min(area.height.saturating_sub(16) / 2)
        .max(5);
    let rows = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(3),
            Constraint::Length(breakers_h),
            Constraint::Min(6),
            Constraint::Length(12),
            Constraint::Length(1),
        ])
        .split(area);
    header::draw(f, rows[0], app, theme);
    breakers::draw(f, rows[1], app, theme);
    let middle = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([Constraint::Percentage(45), Constraint::Percentage(55)])
        .split(rows[2]);
    limiters::draw(f, middle[0], app, theme);
    budgets::draw(f, middle[1], app, theme);
    let bottom = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([Constraint::Percentage(55), Constraint::Percentage(45)])
        .split(rows[3]);
    chains::draw(f, bottom[0], app, theme);
    events::draw(f, bottom[1], app, theme);
    footer(f, rows[4], app, theme, keymap);
    overlay::draw(f, area, app, theme, keymap);
}

/// A row's name: its own, or for one instance's row under the combined
/// row, the instance's (`↳ 10.0.0.7:8080`, and `stale` while it is lost:
/// the row is what it last said).
pub fn row_name(app: &App, name: &str, instance: Option<&str>) -> String {
    let Some(i) = instance else { return name.to_string() };
    let stale = app
        .snap
        .instances
        .iter()
        .any(|v| v.name == i && matches!(v.health, crate::telemetry::snapshot::Health::Stale { .. }));
    if stale {
        format!("  ↳ {i} stale")
    } else {
        format!("  ↳ {i}")
    }
}

/// Draws pane `p` in `area`.
fn pane(f: &mut Frame, area: Rect, app: &App, theme: &Theme, p: Pane) {
    match p {
        Pane::Breakers => breakers::draw(f, area, app, theme),
        Pane::Limiters => limiters::draw(f, area, app, theme),
        Pane::Budgets => budgets::draw(f, area, app, theme),
        Pane::Chains => chains::draw(f, area, app, theme),
        Pane::Events => events::draw(f, area, app, theme),
    }
}

/// A pane's frame: title with its number, focus and filter shown in text
/// (not by colour alone).
pub fn pane_block<'a>(app: &App, pane: Pane, theme: &Theme, extra: &str) -> Block<'a> {
    let focused = app.focus == pane;
    let n = Pane::ALL.iter().position(|p| *p == pane).unwrap_or(0) + 1;
    let filter = &app.filters[n - 1];
    let mut title = vec![Span::styled(format!(" {n} {} ", pane.title()), theme.title)];
    if focused {
        title.insert(0, Span::styled("▶", theme.title));
    }
    if focused && app.overlay == super::app::Overlay::Filter {
        // Being typed: a cursor.
        title.push(Span::styled(format!("/{filter}▏ "), theme.warn));
    } else if !filter.is_empty() {
        // Kept: said as a filter, with how to clear it.
        title.push(Span::styled(format!("filter \"{filter}\" (Esc clears) "), theme.warn));
    }
    if !extra.is_empty() {
        title.push(Span::styled(format!("{extra} "), theme.dim));
    }
    Block::default()
        .borders(Borders::ALL)
        .border_type(if focused { BorderType::Thick } else { BorderType::Plain })
        .border_style(if focused { theme.border_focused } else { theme.border })
        .title(Line::from(title))
}

fn footer(f: &mut Frame, area: Rect, app: &App, theme: &Theme, keymap: &KeyMap) {
    let key = |a| keymap.keys_for(a).first().cloned().unwrap_or_else(|| "-".into());
    use super::action::Action as A;
    let hints = format!(
        " {} help  {} quit  {} pane  {} filter  {} open  {} close  {} reset  {} refill  {} fault  {} drill  {} freeze display ",
        key(A::Help),
        key(A::Quit),
        key(A::NextPane),
        key(A::Filter),
        key(A::ForceOpen),
        key(A::ForceClose),
        key(A::Reset),
        key(A::ToggleRefill),
        key(A::CycleFault),
        key(A::ToggleDrill),
        key(A::FreezeDisplay),
    );
    let mut spans = Vec::new();
    if !app.status.is_empty() {
        spans.push(Span::styled(format!(" {} │", app.status), theme.warn));
    }
    spans.push(Span::styled(hints, theme.dim));
    f.render_widget(ratatui::widgets::Paragraph::new(Line::from(spans)), area);
}

/// A text bar of `width` cells filled to `ratio`.
pub fn bar(ratio: f64, width: usize) -> String {
    let r = if ratio.is_finite() { ratio.clamp(0.0, 1.0) } else { 0.0 };
    let full = (r * width as f64).round() as usize;
    let mut s = String::with_capacity(width * 3);
    for i in 0..width {
        s.push(if i < full { '█' } else { '░' });
    }
    s
}

/// A compact number: 950, 12.3k, 4.1M.
pub fn human(n: f64) -> String {
    let a = n.abs();
    if a >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", n / 1e3)
    } else if a >= 1e3 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

/// The first row index to draw so that `selected` is visible in `height` rows.
pub fn scroll(selected: usize, height: usize) -> usize {
    if height == 0 {
        0
    } else {
        selected.saturating_sub(height - 1)
    }
}

/// A rectangle of `w`×`h` centred in `r`.
pub fn centered(r: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(r.width);
    let h = h.min(r.height);
    Rect::new(r.x + (r.width - w) / 2, r.y + (r.height - h) / 2, w, h)
}

/// `line` cut to `width` cells, ending in `…` where it was cut, so a
/// cut text reads as cut (Enter shows it whole).
pub fn fit(line: Line<'_>, width: usize) -> Line<'_> {
    if line.width() <= width || width == 0 {
        return line;
    }
    let mut left = width - 1;
    let mut spans = Vec::new();
    for span in line.spans {
        if left == 0 {
            break;
        }
        let w = span.width();
        if w <= left {
            left -= w;
            spans.push(span);
            continue;
        }
        let mut cut = String::new();
        for c in span.content.chars() {
            let cw = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
            if cw > left {
                break;
            }
            left -= cw;
            cut.push(c);
        }
        spans.push(Span::styled(cut, span.style));
        left = 0;
    }
    spans.push(Span::raw("…"));
    Line::from(spans).style(line.style)
}

#[cfg(test)]
mod fit_tests {
    use super::*;

    #[test]
    fn a_cut_line_ends_in_an_ellipsis_and_a_whole_one_is_kept() {
        let line = || {
            Line::from(vec![
                Span::raw("00:15 "),
                Span::raw("closed → open: 5 failures (last: 503)"),
            ])
        };
        let cut = fit(line(), 20);
        assert_eq!(cut.to_string(), "00:15 closed → open…");
        assert_eq!(cut.width(), 20);
        assert_eq!(fit(line(), 80).to_string(), line().to_string());
    }
}
