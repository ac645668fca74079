//! What keys do to the console: an open overlay (filter, confirm, help,
//! detail) takes every key, closing on its own; else the keymap's actions.

use super::action::Action;
use super::app::{App, BreakerSort, Dispatch, Effect, Overlay, Pane};
use super::keymap::KeyMap;
use crate::command::Command;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

impl App {
    /// Handles one key.
    pub fn on_key(&mut self, key: KeyEvent, keymap: &KeyMap) -> Effect {
        match &self.overlay {
            Overlay::Filter => return self.filter_key(key),
            Overlay::Confirm { order, .. } => {
                let order = order.clone();
                return match key.code {
                    KeyCode::Char('y') | KeyCode::Char('Y') | KeyCode::Enter => {
                        self.overlay = Overlay::None;
                        self.send(order)
                    }
                    KeyCode::Char('n') | KeyCode::Char('N') | KeyCode::Esc => {
                        self.overlay = Overlay::None;
                        self.status = "cancelled".into();
                        Effect::None
                    }
                    _ => Effect::None,
                };
            }
            Overlay::Detail => {
                if matches!(key.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q')) {
                    self.overlay = Overlay::None;
                }
                return Effect::None;
            }
            Overlay::Help => {
                let last = keymap.help_rows().len() as u16;
                match keymap.action(&key) {
                    _ if matches!(key.code, KeyCode::Esc | KeyCode::Char('q')) => {
                        self.overlay = Overlay::None;
                        self.help_scroll = 0;
                    }
                    Some(Action::Help) => {
                        self.overlay = Overlay::None;
                        self.help_scroll = 0;
                    }
                    Some(Action::Up) => self.help_scroll = self.help_scroll.saturating_sub(1),
                    Some(Action::Down) => self.help_scroll = (self.help_scroll + 1).min(last),
                    Some(Action::PageUp) => self.help_scroll = self.help_scroll.saturating_sub(10),
                    Some(Action::PageDown) => self.help_scroll = (self.help_scroll + 10).min(last),
                    Some(Action::Top) => self.help_scroll = 0,
                    Some(Action::Bottom) => self.help_scroll = last,
                    // Nothing reaches the panes behind it.
                    _ => {}
                }
                return Effect::None;
            }
            Overlay::None => {}
        }
        match keymap.action(&key) {
            Some(a) => self.on_action(a),
            // Esc clears the focused pane's kept filter (unless bound otherwise).
            None if key.code == KeyCode::Esc && !self.filters[self.focus.index()].is_empty() => {
                self.filters[self.focus.index()].clear();
                self.select(0);
                self.status = "filter cleared".into();
                Effect::None
            }
            None => Effect::None,
        }
    }

    pub(super) fn filter_key(&mut self, key: KeyEvent) -> Effect {
        let f = &mut self.filters[self.focus.index()];
        match key.code {
            KeyCode::Enter => self.overlay = Overlay::None,
            KeyCode::Esc => {
                f.clear();
                self.overlay = Overlay::None;
            }
            KeyCode::Backspace => {
                f.pop();
            }
            KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => f.push(c),
            _ => {}
        }
        self.select(0);
        Effect::None
    }

    /// Applies an action (keys map to actions through the keymap).
    pub fn on_action(&mut self, a: Action) -> Effect {
        if let Some(why) = self.opts.readonly.as_deref().filter(|_| a.is_mutating()) {
            self.status = format!("read-only: {} is disabled ({why})", a.name());
            return Effect::None;
        }
        let i = self.focus.index();
        match a {
            Action::Quit => {
                self.quit = true;
                return Effect::Quit;
            }
            Action::Help => self.overlay = Overlay::Help,
            Action::NextPane => self.focus = Pane::ALL[(i + 1) % 5],
            Action::PrevPane => self.focus = Pane::ALL[(i + 4) % 5],
            Action::FocusBreakers => self.focus = Pane::Breakers,
            Action::FocusLimiters => self.focus = Pane::Limiters,
            Action::FocusBudgets => self.focus = Pane::Budgets,
            Action::FocusChains => self.focus = Pane::Chains,
            Action::FocusEvents => self.focus = Pane::Events,
            Action::Up => self.select(self.selection(self.focus).saturating_sub(1)),
            Action::Down => self.select((self.selection(self.focus) + 1).min(self.rows_in_focus().saturating_sub(1))),
            Action::PageUp => self.select(self.selection(self.focus).saturating_sub(10)),
            Action::PageDown => {
                self.select((self.selection(self.focus) + 10).min(self.rows_in_focus().saturating_sub(1)))
            }
            Action::Top => self.select(0),
            Action::Bottom => self.select(self.rows_in_focus().saturating_sub(1)),
            Action::Filter => {
                if matches!(self.focus, Pane::Limiters) {
                    self.status = "the limiters pane has no filter".into();
                } else {
                    self.overlay = Overlay::Filter;
                }
            }
            Action::Sort => {
                self.sort = match self.sort {
                    BreakerSort::Errors => BreakerSort::Volume,
                    BreakerSort::Volume => BreakerSort::Name,
                    BreakerSort::Name => BreakerSort::Errors,
                };
                self.status = format!("breakers sorted by {:?}", self.sort).to_lowercase();
            }
            Action::FreezeDisplay => {
                self.display_frozen = !self.display_frozen;
                if !self.display_frozen {
                    self.restart_sampling();
                }
                self.status = if self.display_frozen {
                    "display frozen (the runner keeps going)"
                } else {
                    "display live"
                }
                .into();
            }
            Action::Detail => self.overlay = Overlay::Detail,
            Action::Zoom => {
                self.zoomed = !self.zoomed;
                self.status = if self.zoomed {
                    format!("{} zoomed (z for all panes)", self.focus.title())
                } else {
                    "all panes".into()
                };
            }
            Action::TimeSpan => {
                self.span = self.span.next();
                self.status = format!(
                    "sparklines and latencies over the last {} (t for {})",
                    self.span.label(),
                    self.span.next().label()
                );
            }
            Action::PauseEvents => {
                self.events_paused = !self.events_paused;
                if self.events_paused {
                    self.events_frozen = self.snap.events.clone();
                }
            }
            Action::ClockPause | Action::ClockFaster | Action::ClockSlower | Action::ClockStep => {
                return Effect::Clock(a)
            }
            Action::WriteIncident => return Effect::WriteIncident,
            Action::Reset if self.focus == Pane::Budgets => return self.spend_rate_command(),
            Action::ForceOpen | Action::ForceClose | Action::Reset | Action::Disable => return self.breaker_command(a),
            Action::ToggleRefill => return self.refill_command(),
            Action::CycleFault => return self.fault_command(),
            Action::ToggleDrill => {
                let cmd = if self.snap.drill {
                    Command::DrillOff
                } else {
                    Command::DrillOn
                };
                let prompt = if self.snap.drill {
                    "Turn drill mode OFF?".to_string()
                } else {
                    "Turn drill mode ON (every optional tool takes its degradation branch)?".to_string()
                };
                return self.confirm_or_send(a, prompt, Dispatch { command: cmd, to: None });
            }
        }
        Effect::None
    }
}
