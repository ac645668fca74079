//! How the runner applies an operator command and announces it, with who
//! issued it.

use super::Operations;
use crate::command::{Command, CommandError, Issuer};
use crate::resilience::breaker::BreakerState;
use crate::runner::Catalog;
use crate::target::Target;
use crate::telemetry::events::EventKind;
use std::sync::atomic::Ordering;

impl Operations<'_> {
    /// Applies an operator command issued by `by`; the result is announced
    /// as an event either way. A reload reads a file, which this does not
    /// do on the caller's thread: where the runner has one, a reload is
    /// sent with [`Operations::command`].
    pub fn apply(&self, cmd: &Command, by: &Issuer) -> Result<(), CommandError> {
        self.apply_read(cmd, by, None)
    }

    /// [`Operations::apply`], a reload first reading the config file off the
    /// runtime's threads, within a time bound ([`Operations::reload_file`]).
    pub async fn command(&self, cmd: &Command, by: &Issuer) -> Result<(), CommandError> {
        let read = match cmd {
            Command::Reload => Some(self.read_reload().await),
            _ => None,
        };
        self.apply_read(cmd, by, read)
    }

    /// Applies `cmd`; `read` is a reload's file as read.
    fn apply_read(
        &self,
        cmd: &Command,
        by: &Issuer,
        read: Option<Result<crate::config::Config, String>>,
    ) -> Result<(), CommandError> {
        let r = self.catalog.check(cmd).and_then(|()| self.apply_inner(cmd, by, read));
        self.events.emit(EventKind::Operator {
            command: cmd.clone(),
            by: by.clone(),
            applied: r.is_ok(),
            result: match &r {
                Ok(s) => s.clone(),
                Err(e) => format!("rejected: {e}"),
            },
        });
        r.map(|_| ())
    }

    /// Announces a command that could not be read (`sent`, by `by`).
    pub fn refuse(&self, sent: &str, by: &Issuer, reason: &str) {
        self.events.emit(EventKind::CommandRefused {
            sent: crate::command::bounded(sent).into(),
            by: by.clone(),
            reason: crate::command::bounded(reason).into(),
        });
    }

    fn apply_inner(
        &self,
        cmd: &Command,
        by: &Issuer,
        read: Option<Result<crate::config::Config, String>>,
    ) -> Result<String, CommandError> {
        let now = self.clock.now();
        let reason = |what: &str| format!("operator {by}: {what}");
        // What it did; the state it is in already changes nothing, and says so.
        let done = |changed: bool, did: &str, state: &str| {
            if changed {
                did.to_string()
            } else {
                format!("already {state}: nothing changed")
            }
        };
        let set = |target: &Target, state: BreakerState, why: &str| {
            self.catalog
                .breaker(target)
                .map(|t| t.breaker.set_state(state, &reason(why), now))
        };
        Ok(match cmd {
            Command::ForceOpen { target } => {
                let changed = set(target, BreakerState::ForcedOpen, "force open")?;
                done(changed, "forced open", "forced open")
            }
            Command::ForceClosed { target } => {
                let changed = set(target, BreakerState::ForcedClosed, "force closed")?;
                done(changed, "forced closed", "forced closed")
            }
            Command::Disable { target } => {
                let changed = set(target, BreakerState::Disabled, "disable (metrics only)")?;
                done(changed, "disabled", "disabled")
            }
            Command::Reset { target } => {
                let changed = set(target, BreakerState::Closed, "reset to automatic")?;
                done(changed, "reset", "closed")
            }
            Command::FreezeRefill { target } => {
                done(self.catalog.limiter(target)?.freeze(now), "refills frozen", "frozen")
            }
            Command::UnfreezeRefill { target } => done(
                self.catalog.limiter(target)?.unfreeze(now),
                "refills resumed",
                "refilling",
            ),
            Command::SetFault { target, fault } => {
                self.catalog.fault_target(target)?;
                self.faults.set(target, fault.clone());
                format!("fault {}", fault.fault.label())
            }
            Command::DrillOn => {
                self.drill.store(true, Ordering::Relaxed);
                "drill mode on".into()
            }
            Command::DrillOff => {
                self.drill.store(false, Ordering::Relaxed);
                "drill mode off".into()
            }
            Command::Reload => format!("reloaded {}", self.reload_read(read).map_err(CommandError::Invalid)?),
            Command::ResetSpendRate { user } => {
                let closed = self.budgets.reset_spend_rate(user.as_deref(), self.clock.ms_at(now));
                done(closed, "spend-rate breaker closed", "closed")
            }
        })
    }
}

/// What a command may name.
impl Catalog {
    /// Whether `cmd` would apply here: its target names something this
    /// catalog has, and its fault is within bounds. Nothing is changed.
    pub fn check(&self, cmd: &Command) -> Result<(), CommandError> {
        match cmd {
            Command::DrillOn | Command::DrillOff | Command::Reload => Ok(()),
            Command::ResetSpendRate { user: Some(u) } if u.is_empty() || u.len() > crate::limits::MAX_NAME_LEN => Err(
                CommandError::BadUser(format!("user must be 1 to {} bytes", crate::limits::MAX_NAME_LEN)),
            ),
            Command::ResetSpendRate { .. } => Ok(()),
            Command::SetFault { target, fault } => {
                fault.check().map_err(CommandError::BadFault)?;
                self.fault_target(target)
            }
            Command::FreezeRefill { target } | Command::UnfreezeRefill { target } => self.limiter(target).map(|_| ()),
            Command::ForceOpen { target }
            | Command::ForceClosed { target }
            | Command::Disable { target }
            | Command::Reset { target } => self.breaker(target).map(|_| ()),
        }
    }

    /// The breaker `target` names.
    pub(super) fn breaker(&self, target: &Target) -> Result<&crate::runner::registry::Entry, CommandError> {
        self.registry
            .find(target)
            .ok_or_else(|| unknown(target, self.registry.iter().map(|t| &t.target)))
    }

    /// The limiter of the provider `target` names.
    pub(super) fn limiter(&self, target: &Target) -> Result<&crate::resilience::limiter::Limiter, CommandError> {
        self.providers
            .iter()
            .find(|p| self.registry.get(p.target).target == *target)
            .map(|p| &p.limiter)
            .ok_or_else(|| {
                unknown(
                    target,
                    self.providers.iter().map(|p| &self.registry.get(p.target).target),
                )
            })
    }

    /// A mock provider or tool (models have no fault of their own).
    fn fault_target(&self, target: &Target) -> Result<(), CommandError> {
        if target.has_fault() && self.registry.find(target).is_some() {
            return Ok(());
        }
        let all = self.registry.iter().map(|t| &t.target).filter(|t| t.has_fault());
        Err(unknown(target, all))
    }
}

/// `target` is not among `all`: the error lists what there is.
fn unknown<'a>(target: &Target, all: impl Iterator<Item = &'a Target>) -> CommandError {
    let all: Vec<String> = all.map(Target::to_string).collect();
    CommandError::UnknownTarget(target.clone(), all.join(", "))
}
