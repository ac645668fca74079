//! Operator commands: what an operator can ask of a runner, as typed values.
//! They are written as JSON (`{"action":"force_open","target":"provider:openai"}`)
//! only at the edges: the admin API, traffic logs and the fleet's store.

use crate::provider::fault::{FaultError, FaultSpec};
use crate::target::{Target, TargetError};
use serde::{Deserialize, Serialize};

/// What an operator can do. The variants' snake_case names are the actions
/// (`force_open`, …), for serde and [`Command::action`] alike.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, strum::IntoStaticStr, strum::VariantNames)]
#[serde(tag = "action", rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Command {
    /// Force a breaker open.
    ForceOpen {
        /// The breaker's target.
        target: Target,
    },
    /// Force a breaker closed.
    ForceClosed {
        /// The breaker's target.
        target: Target,
    },
    /// Turn a breaker off (metrics only).
    Disable {
        /// The breaker's target.
        target: Target,
    },
    /// Return a breaker to automatic, closed.
    Reset {
        /// The breaker's target.
        target: Target,
    },
    /// Freeze a provider's limiter refills until unfrozen.
    FreezeRefill {
        /// The provider (written `NAME` or `provider:NAME`).
        #[serde(deserialize_with = "crate::target::provider_target")]
        target: Target,
    },
    /// Resume a provider's limiter refills.
    UnfreezeRefill {
        /// The provider (written `NAME` or `provider:NAME`).
        #[serde(deserialize_with = "crate::target::provider_target")]
        target: Target,
    },
    /// Set a mock provider's or tool's fault.
    SetFault {
        /// The provider or tool.
        target: Target,
        /// The fault.
        fault: FaultSpec,
    },
    /// Drill mode on: every non-critical tool takes its degradation branch.
    DrillOn,
    /// Drill mode off.
    DrillOff,
    /// Read the config file again and take what can change in place
    /// (breaker settings, states kept); refused whole, changing nothing,
    /// when the file does not read or a change needs a restart.
    Reload,
    /// Close a spend-rate breaker: a user's, or (no user) the global one.
    ResetSpendRate {
        /// The user (none: the global breaker).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
    },
}

/// What a command acts on: two commands on the same subject supersede each
/// other (a fleet keeps the newest per subject).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Subject {
    /// A target's breaker.
    Breaker(Target),
    /// A provider's limiter.
    Limiter(Target),
    /// A mock target's fault.
    Fault(Target),
    /// Drill mode.
    Drill,
    /// The config.
    Config,
    /// A user's spend-rate breaker (none: the global one).
    SpendRate(Option<String>),
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Breaker(t) => write!(f, "breaker/{t}"),
            Subject::Limiter(t) => write!(f, "limiter/{t}"),
            Subject::Fault(t) => write!(f, "fault/{t}"),
            Subject::Drill => f.write_str("drill"),
            Subject::Config => f.write_str("config"),
            Subject::SpendRate(Some(u)) => write!(f, "spend_rate/user:{u}"),
            Subject::SpendRate(None) => f.write_str("spend_rate/global"),
        }
    }
}

impl Command {
    /// Every action's name.
    pub const ACTIONS: &'static [&'static str] = <Command as strum::VariantNames>::VARIANTS;

    /// The action's name.
    pub fn action(&self) -> &'static str {
        self.into()
    }

    /// What it applies to (None for drill mode).
    pub fn target(&self) -> Option<&Target> {
        match self {
            Command::ForceOpen { target }
            | Command::ForceClosed { target }
            | Command::Disable { target }
            | Command::Reset { target }
            | Command::FreezeRefill { target }
            | Command::UnfreezeRefill { target }
            | Command::SetFault { target, .. } => Some(target),
            Command::DrillOn | Command::DrillOff | Command::Reload | Command::ResetSpendRate { .. } => None,
        }
    }

    /// What it acts on.
    pub fn subject(&self) -> Subject {
        match self {
            Command::FreezeRefill { target } | Command::UnfreezeRefill { target } => Subject::Limiter(target.clone()),
            Command::SetFault { target, .. } => Subject::Fault(target.clone()),
            Command::DrillOn | Command::DrillOff => Subject::Drill,
            Command::Reload => Subject::Config,
            Command::ResetSpendRate { user } => Subject::SpendRate(user.clone()),
            Command::ForceOpen { target }
            | Command::ForceClosed { target }
            | Command::Disable { target }
            | Command::Reset { target } => Subject::Breaker(target.clone()),
        }
    }

    /// The command in words, as events and the console show it
    /// (`force_open provider:openai`, `freeze_refill openai`, `drill_on`).
    pub fn describe(&self) -> String {
        match self {
            Command::FreezeRefill { target } | Command::UnfreezeRefill { target } => {
                format!("{} {}", self.action(), target.name())
            }
            Command::ResetSpendRate { user } => match user {
                Some(u) => format!("{} user {}", self.action(), bounded(u)),
                None => format!("{} global", self.action()),
            },
            _ => match self.target() {
                Some(t) => format!("{} {t}", self.action()),
                None => self.action().to_string(),
            },
        }
    }
}

/// Who issued a command: an operator by name, or another fleet instance
/// passing on its operator's command (not to be passed on again).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issuer {
    /// The operator's name (at most [`crate::limits::MAX_TARGET_LEN`] bytes).
    pub name: String,
    /// The fleet instance the command was issued on, when it came from there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

impl Issuer {
    /// The operator `name`, cut to a bounded length.
    pub fn operator(name: &str) -> Self {
        Self {
            name: bounded(name).into(),
            instance: None,
        }
    }

    /// `name`'s command as another fleet instance passed it on.
    pub fn fleet(name: &str, instance: &str) -> Self {
        Self {
            name: bounded(name).into(),
            instance: Some(bounded(instance).into()),
        }
    }

    /// Whether it came from another fleet instance.
    pub fn via_fleet(&self) -> bool {
        self.instance.is_some()
    }
}

impl std::fmt::Display for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.instance {
            Some(i) => write!(f, "{}@{i} via fleet", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// `s` cut to at most [`crate::limits::MAX_TARGET_LEN`] bytes (on a
/// character boundary), so what an event keeps of a caller's text is bounded.
pub fn bounded(s: &str) -> &str {
    let mut end = s.len().min(crate::limits::MAX_TARGET_LEN);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Why a command could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// No such action (a recorded one this version does not know).
    #[error("unknown action `{0}`")]
    UnknownAction(String),
    /// No such breaker, provider or mock target.
    #[error("unknown target `{0}`; expected one of: {1}")]
    UnknownTarget(Target, String),
    /// A command that is not well-formed (a recorded one, say).
    #[error("{0}")]
    Invalid(String),
    /// Text no target can be.
    #[error("{0}")]
    BadTarget(TargetError),
    /// A fault out of bounds (the field and its bound).
    #[error("fault {0}")]
    BadFault(FaultError),
    /// A user no budget can be kept for.
    #[error("{0}")]
    BadUser(String),
}

impl CommandError {
    /// The field of the command at fault (`target`, `fault.fault.ms`, …).
    pub fn field(&self) -> String {
        match self {
            CommandError::BadFault(e) => format!("fault.{}", e.field),
            CommandError::UnknownAction(_) => "action".into(),
            CommandError::BadUser(_) => "user".into(),
            _ => "target".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_action_is_the_serde_tag() {
        let t = Target::provider("p");
        let all = [
            Command::ForceOpen { target: t.clone() },
            Command::ForceClosed { target: t.clone() },
            Command::Disable { target: t.clone() },
            Command::Reset { target: t.clone() },
            Command::FreezeRefill { target: t.clone() },
            Command::UnfreezeRefill { target: t.clone() },
            Command::SetFault {
                target: t,
                fault: FaultSpec::always(crate::provider::fault::Fault::Healthy),
            },
            Command::DrillOn,
            Command::DrillOff,
            Command::Reload,
            Command::ResetSpendRate { user: None },
        ];
        assert_eq!(all.len(), Command::ACTIONS.len());
        for (c, name) in all.iter().zip(Command::ACTIONS) {
            assert_eq!(serde_json::to_value(c).unwrap()["action"], *name);
            assert_eq!(c.action(), *name);
        }
    }

    #[test]
    fn a_refill_command_names_a_provider_either_way() {
        for text in [r#""openai""#, r#""provider:openai""#] {
            let c: Command = serde_json::from_str(&format!(r#"{{"action":"freeze_refill","target":{text}}}"#)).unwrap();
            assert_eq!(c.subject(), Subject::Limiter(Target::provider("openai")));
        }
        let bad = serde_json::from_str::<Command>(r#"{"action":"force_open","target":"openai"}"#);
        assert!(bad.unwrap_err().to_string().contains("is not `provider:NAME`"));
    }
}
