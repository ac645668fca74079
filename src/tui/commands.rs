//! The operator commands the console's keys turn into: on the selected
//! breaker or limiter, confirmed first where they are destructive.

use super::action::Action;
use super::app::{App, Effect, Overlay, Pane};
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

    pub(super) fn selected_provider(&self) -> Option<Target> {
        match self.focus {
            Pane::Limiters => self
                .snap
                .limiters
                .get(self.selection(Pane::Limiters))
                .map(|l| Target::provider(&l.provider)),
            Pane::Breakers => self
                .selected_breaker()
                .map(|b| b.target.clone())
                .filter(|t| t.kind() == Kind::Provider),
            _ => None,
        }
    }

    pub(super) fn confirm_or_send(&mut self, a: Action, prompt: String, cmd: Command) -> Effect {
        if a.needs_confirm() && !self.opts.yes {
            self.overlay = Overlay::Confirm { prompt, command: cmd };
            Effect::None
        } else {
            self.status = format!("{} sent", cmd.describe());
            Effect::Send(cmd)
        }
    }

    pub(super) fn breaker_command(&mut self, a: Action) -> Effect {
        let Some(b) = self.selected_breaker() else {
            self.status = "select a breaker first (pane 1)".into();
            return Effect::None;
        };
        let target = b.target.clone();
        let (cmd, verb) = match a {
            Action::ForceOpen => (Command::ForceOpen { target: target.clone() }, "Force OPEN"),
            Action::ForceClose => (Command::ForceClosed { target: target.clone() }, "Force CLOSED"),
            Action::Disable => (Command::Disable { target: target.clone() }, "Disable (metrics only)"),
            _ => (Command::Reset { target: target.clone() }, "Reset"),
        };
        self.confirm_or_send(a, format!("{verb} {target}?"), cmd)
    }

    pub(super) fn refill_command(&mut self) -> Effect {
        let Some(p) = self.selected_provider() else {
            self.status = "select a limiter (pane 2) or a provider breaker first".into();
            return Effect::None;
        };
        let frozen = self
            .snap
            .limiters
            .iter()
            .any(|l| l.provider == p.name() && l.limiter.frozen.is_some());
        if frozen {
            let cmd = Command::UnfreezeRefill { target: p };
            self.status = format!("{} sent", cmd.describe());
            return Effect::Send(cmd);
        }
        self.confirm_or_send(
            Action::ToggleRefill,
            format!("Freeze refills of {} until unfrozen?", p.name()),
            Command::FreezeRefill { target: p },
        )
    }

    pub(super) fn fault_command(&mut self) -> Effect {
        let target = match self.focus {
            Pane::Limiters => self.selected_provider(),
            _ => self.selected_breaker().map(|b| b.target.clone()),
        };
        let Some(target) = target.filter(Target::has_fault) else {
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
        Effect::Send(Command::SetFault {
            target,
            fault: FaultSpec::always(fault),
        })
    }
}
