//! The operator commands the console's keys turn into: on the selected
//! breaker or limiter, confirmed first where they are destructive.

use super::action::Action;
use super::app::{App, Dispatch, Effect, Overlay, Pane};
use crate::command::Command;
use crate::provider::fault::{Fault, FaultSpec};
use crate::target::{Kind, Target};
use crate::telemetry::snapshot::BreakerRow;

impl App {
    pub(super) fn selected_breaker(&self) -> Option<&BreakerRow> {
        if self.focus != Pane::Breakers {
            return None;
        }
        self.breaker_rows().get(self.selection(Pane::Breakers)).copied()
    }

    /// The selected provider, and the instance owning its row.
    pub(super) fn selected_provider(&self) -> Option<(Target, Option<String>)> {
        match self.focus {
            Pane::Limiters => self
                .snap
                .limiters
                .get(self.selection(Pane::Limiters))
                .map(|l| (Target::provider(&l.provider), l.instance.clone())),
            Pane::Breakers => self
                .selected_breaker()
                .filter(|b| b.target.kind() == Kind::Provider)
                .map(|b| (b.target.clone(), b.instance.clone())),
            _ => None,
        }
    }

    /// Sends `order`, or asks first where `a` is destructive.
    pub(super) fn confirm_or_send(&mut self, a: Action, prompt: String, order: Dispatch) -> Effect {
        if a.needs_confirm() && !self.opts.yes {
            self.overlay = Overlay::Confirm { prompt, order };
            Effect::None
        } else {
            self.send(order)
        }
    }

    /// Says `order` is sent, and sends it.
    pub(super) fn send(&mut self, order: Dispatch) -> Effect {
        self.status = match &order.to {
            Some(to) => format!("{} sent to {to}", order.command.describe()),
            None => format!("{} sent", order.command.describe()),
        };
        Effect::Send(order)
    }

    pub(super) fn breaker_command(&mut self, a: Action) -> Effect {
        let Some(b) = self.selected_breaker() else {
            self.status = "select a breaker first (pane 1)".into();
            return Effect::None;
        };
        let (target, to) = (b.target.clone(), b.instance.clone());
        let (cmd, verb) = match a {
            Action::ForceOpen => (Command::ForceOpen { target: target.clone() }, "Force OPEN"),
            Action::ForceClose => (Command::ForceClosed { target: target.clone() }, "Force CLOSED"),
            Action::Disable => (Command::Disable { target: target.clone() }, "Disable (metrics only)"),
            _ => (Command::Reset { target: target.clone() }, "Reset"),
        };
        let prompt = match &to {
            Some(i) => format!("{verb} {target} on {i}?"),
            None => format!("{verb} {target}?"),
        };
        self.confirm_or_send(a, prompt, Dispatch { command: cmd, to })
    }

    /// Closes the selected user's spend-rate breaker (pane 3).
    pub(super) fn spend_rate_command(&mut self) -> Effect {
        let rows = self.user_rows();
        let Some(u) = rows.get(self.selection(Pane::Budgets)) else {
            self.status = "select a user first (pane 3)".into();
            return Effect::None;
        };
        let (user, to) = (u.view.user.clone(), u.instance.clone());
        if u.view.spend_rate.open_ms == 0 {
            self.status = format!("{user}'s spend-rate breaker is not open");
            return Effect::None;
        }
        let prompt = match &to {
            Some(i) => format!("Close {user}'s spend-rate breaker on {i}?"),
            None => format!("Close {user}'s spend-rate breaker?"),
        };
        let command = Command::ResetSpendRate { user: Some(user) };
        self.confirm_or_send(Action::Reset, prompt, Dispatch { command, to })
    }

    pub(super) fn refill_command(&mut self) -> Effect {
        let Some((p, to)) = self.selected_provider() else {
            self.status = "select a limiter (pane 2) or a provider breaker first".into();
            return Effect::None;
        };
        let frozen = self
            .snap
            .limiters
            .iter()
            .any(|l| l.provider == p.name() && l.instance == to && l.limiter.frozen.is_some());
        if frozen {
            let command = Command::UnfreezeRefill { target: p };
            return self.send(Dispatch { command, to });
        }
        self.confirm_or_send(
            Action::ToggleRefill,
            format!("Freeze refills of {} until unfrozen?", p.name()),
            Dispatch {
                command: Command::FreezeRefill { target: p },
                to,
            },
        )
    }

    pub(super) fn fault_command(&mut self) -> Effect {
        let target = match self.focus {
            Pane::Limiters => self.selected_provider(),
            _ => self.selected_breaker().map(|b| (b.target.clone(), b.instance.clone())),
        };
        let Some((target, to)) = target.filter(|(t, _)| t.has_fault()) else {
            self.status = "select a provider or tool breaker (models have no mock fault)".into();
            return Effect::None;
        };
        let current = self
            .snap
            .faults
            .get(&target)
            .map(|f| f.fault.clone())
            .unwrap_or(Fault::Healthy);
        let cycle = Fault::cycle();
        let pos = cycle
            .iter()
            .position(|f| *f == current)
            .map_or(1, |p| (p + 1) % cycle.len());
        let fault = cycle[pos].clone();
        self.status = format!("{target}: fault {}", fault.label());
        Effect::Send(Dispatch {
            command: Command::SetFault {
                target,
                fault: FaultSpec::always(fault),
            },
            to,
        })
    }
}
