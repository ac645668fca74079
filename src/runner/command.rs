//! Operator commands: serde-serialisable, applied by the runner, announced
//! as events with who issued them.

use super::Runner;
use crate::provider::fault::FaultSpec;
use crate::resilience::breaker::BreakerState;
use crate::telemetry::events::EventKind;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;

/// What an operator can do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Command {
    /// Force a breaker open.
    ForceOpen {
        /// `provider:x`, `model:x` or `tool:x`.
        target: String,
    },
    /// Force a breaker closed.
    ForceClosed {
        /// Breaker name.
        target: String,
    },
    /// Turn a breaker off (metrics only).
    Disable {
        /// Breaker name.
        target: String,
    },
    /// Return a breaker to automatic, closed.
    Reset {
        /// Breaker name.
        target: String,
    },
    /// Freeze a provider's limiter refills until unfrozen.
    FreezeRefill {
        /// Provider name (`openai` or `provider:openai`).
        target: String,
    },
    /// Resume a provider's limiter refills.
    UnfreezeRefill {
        /// Provider name.
        target: String,
    },
    /// Set a mock target's fault.
    SetFault {
        /// `provider:x` or `tool:x`.
        target: String,
        /// The fault.
        fault: FaultSpec,
    },
    /// Drill mode on: every non-critical tool takes its degradation branch.
    DrillOn,
    /// Drill mode off.
    DrillOff,
}

/// Why a command could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// No such action (a recorded one this version does not know).
    #[error("unknown action `{0}`")]
    UnknownAction(String),
    /// No such breaker, provider or mock target.
    #[error("unknown target `{0}`; expected one of: {1}")]
    UnknownTarget(String, String),
    /// A target name no target can have (empty, too long, control characters).
    #[error("{0}")]
    BadTarget(String),
    /// A fault out of bounds (the field and its bound).
    #[error("fault {0}")]
    BadFault(crate::provider::fault::FaultError),
}

impl CommandError {
    /// The field of the command at fault (`target`, `fault.fault.ms`, …).
    pub fn field(&self) -> String {
        match self {
            CommandError::BadFault(e) => format!("fault.{}", e.field),
            _ => "target".into(),
        }
    }
}

/// `s` cut to at most [`crate::limits::MAX_TARGET_LEN`] bytes (on a
/// character boundary), so what an event keeps of a caller's text is bounded.
fn bounded(s: &str) -> &str {
    let mut end = s.len().min(crate::limits::MAX_TARGET_LEN);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Command {
    /// The command an announced or recorded operator action stands for
    /// (its action name, target and, for `set_fault`, the fault); None if
    /// unknown or incomplete.
    pub fn from_parts(action: &str, target: &str, fault: Option<&serde_json::Value>) -> Option<Command> {
        let target = target.to_string();
        Some(match action {
            "force_open" => Command::ForceOpen { target },
            "force_closed" => Command::ForceClosed { target },
            "disable" => Command::Disable { target },
            "reset" => Command::Reset { target },
            "freeze_refill" => Command::FreezeRefill { target },
            "unfreeze_refill" => Command::UnfreezeRefill { target },
            "set_fault" => {
                let fault = serde_json::from_value(fault?.clone()).ok()?;
                Command::SetFault { target, fault }
            }
            "drill_on" => Command::DrillOn,
            "drill_off" => Command::DrillOff,
            _ => return None,
        })
    }

    /// The action's snake_case name.
    pub fn action(&self) -> &'static str {
        match self {
            Command::ForceOpen { .. } => "force_open",
            Command::ForceClosed { .. } => "force_closed",
            Command::Disable { .. } => "disable",
            Command::Reset { .. } => "reset",
            Command::FreezeRefill { .. } => "freeze_refill",
            Command::UnfreezeRefill { .. } => "unfreeze_refill",
            Command::SetFault { .. } => "set_fault",
            Command::DrillOn => "drill_on",
            Command::DrillOff => "drill_off",
        }
    }

    /// What it applies to (`*` for drill mode).
    pub fn target(&self) -> &str {
        match self {
            Command::ForceOpen { target }
            | Command::ForceClosed { target }
            | Command::Disable { target }
            | Command::Reset { target }
            | Command::FreezeRefill { target }
            | Command::UnfreezeRefill { target }
            | Command::SetFault { target, .. } => target,
            Command::DrillOn | Command::DrillOff => "*",
        }
    }
}

impl Runner {
    /// Applies an operator command issued by `by`; the result is announced
    /// as an event either way.
    pub fn apply(&self, cmd: &Command, by: &str) -> Result<(), CommandError> {
        let r = self.check(cmd).and_then(|()| self.apply_inner(cmd, bounded(by)));
        self.events.emit(EventKind::Operator {
            action: cmd.action().into(),
            target: bounded(cmd.target()).into(),
            by: bounded(by).into(),
            result: match &r {
                Ok(s) => s.clone(),
                Err(e) => format!("rejected: {e}"),
            },
            args: match cmd {
                Command::SetFault { fault, .. } => serde_json::to_value(fault)
                    .ok()
                    .map(|f| serde_json::json!({ "fault": f })),
                _ => None,
            },
        });
        r.map(|_| ())
    }

    /// Whether `cmd` would apply here: its target names something this
    /// runner has, and its fault is within bounds. Nothing is changed.
    pub fn check(&self, cmd: &Command) -> Result<(), CommandError> {
        if matches!(cmd, Command::DrillOn | Command::DrillOff) {
            return Ok(());
        }
        crate::provider::fault::check_target(cmd.target()).map_err(CommandError::BadTarget)?;
        match cmd {
            Command::SetFault { target, fault } => {
                fault.check().map_err(CommandError::BadFault)?;
                self.fault_target(target)
            }
            Command::FreezeRefill { target } | Command::UnfreezeRefill { target } => self.limiter(target).map(|_| ()),
            _ => self.breaker(cmd.target()).map(|_| ()),
        }
    }

    fn breaker(&self, name: &str) -> Result<&super::registry::Target, CommandError> {
        self.registry.find(name).ok_or_else(|| {
            let all: Vec<&str> = self.registry.iter().map(|t| t.name.as_str()).collect();
            CommandError::UnknownTarget(name.into(), all.join(", "))
        })
    }

    fn limiter(&self, name: &str) -> Result<&crate::resilience::limiter::Limiter, CommandError> {
        let n = name.strip_prefix("provider:").unwrap_or(name);
        self.providers
            .iter()
            .find(|p| p.name == n)
            .map(|p| &p.limiter)
            .ok_or_else(|| {
                let all: Vec<&str> = self.providers.iter().map(|p| p.name.as_str()).collect();
                CommandError::UnknownTarget(name.into(), all.join(", "))
            })
    }

    /// A mock provider or tool (models have no fault of their own).
    fn fault_target(&self, name: &str) -> Result<(), CommandError> {
        if self.registry.find(name).is_some() && !name.starts_with("model:") {
            return Ok(());
        }
        let all: Vec<&str> = self
            .registry
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| !n.starts_with("model:"))
            .collect();
        Err(CommandError::UnknownTarget(name.into(), all.join(", ")))
    }

    fn apply_inner(&self, cmd: &Command, by: &str) -> Result<String, CommandError> {
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
        let set = |target: &str, state: BreakerState, why: &str| {
            self.breaker(target)
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
            Command::FreezeRefill { target } => done(self.limiter(target)?.freeze(now), "refills frozen", "frozen"),
            Command::UnfreezeRefill { target } => {
                done(self.limiter(target)?.unfreeze(now), "refills resumed", "refilling")
            }
            Command::SetFault { target, fault } => {
                self.fault_target(target)?;
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
        })
    }
}
