//! The typed identity of a breaker target: a provider, a model or a tool,
//! and its name. Written `provider:NAME`, `model:NAME` or `tool:NAME` only
//! where fusebox meets text (config, logs, the command line, HTTP), through
//! [`Display`](fmt::Display) and [`FromStr`].

use crate::limits::MAX_TARGET_LEN;
use compact_str::CompactString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// What a target is. Ordered as written, so targets sort as their text does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A model of a provider.
    Model,
    /// A provider (its limiter and breaker).
    Provider,
    /// A tool.
    Tool,
}

impl Kind {
    /// The kind as written before the colon.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Provider => "provider",
            Kind::Model => "model",
            Kind::Tool => "tool",
        }
    }
}

/// A provider, model or tool, by name. Cheap to clone (a name of up to 24
/// bytes is kept inline).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    kind: Kind,
    name: CompactString,
}

impl Target {
    /// A target of `kind` named `name`.
    pub fn new(kind: Kind, name: &str) -> Self {
        Self {
            kind,
            name: name.into(),
        }
    }

    /// The provider `name`.
    pub fn provider(name: &str) -> Self {
        Self::new(Kind::Provider, name)
    }

    /// The model `name`.
    pub fn model(name: &str) -> Self {
        Self::new(Kind::Model, name)
    }

    /// The tool `name`.
    pub fn tool(name: &str) -> Self {
        Self::new(Kind::Tool, name)
    }

    /// What it is.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Its name, without the kind.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it is a provider or a tool: what a mock fault can apply to
    /// (a model has no fault of its own).
    pub fn has_fault(&self) -> bool {
        self.kind != Kind::Model
    }

    /// Parses an operator's limiter target: a provider's bare name or
    /// `provider:NAME`.
    pub fn parse_provider(s: &str) -> Result<Self, TargetError> {
        match s.parse::<Target>() {
            Ok(t) if t.kind == Kind::Provider => Ok(t),
            Ok(t) => Err(TargetError::NotProvider(t)),
            Err(TargetError::Kind(_)) if !s.contains(':') => Ok(Target::provider(s)),
            Err(e) => Err(e),
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.as_str(), self.name)
    }
}

/// Why text is not a target.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Empty or blank.
    #[error("target must not be empty (e.g. \"provider:openai\")")]
    Empty,
    /// Longer than [`MAX_TARGET_LEN`].
    #[error("target is longer than {MAX_TARGET_LEN} bytes")]
    TooLong,
    /// A control character (a newline would forge a log line).
    #[error("target {0:?} contains control characters")]
    Control(String),
    /// Not `provider:`, `model:` or `tool:` and a name.
    #[error("`{0}` is not `provider:NAME`, `model:NAME` or `tool:NAME`")]
    Kind(String),
    /// A limiter target that is not a provider.
    #[error("`{0}` is not a provider (limiters belong to providers)")]
    NotProvider(Target),
}

impl FromStr for Target {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Self, TargetError> {
        if s.trim().is_empty() {
            return Err(TargetError::Empty);
        }
        if s.len() > MAX_TARGET_LEN {
            return Err(TargetError::TooLong);
        }
        if s.chars().any(char::is_control) {
            return Err(TargetError::Control(s.into()));
        }
        let kind = match s.split_once(':') {
            Some(("provider", n)) if !n.is_empty() => (Kind::Provider, n),
            Some(("model", n)) if !n.is_empty() => (Kind::Model, n),
            Some(("tool", n)) if !n.is_empty() => (Kind::Tool, n),
            _ => return Err(TargetError::Kind(s.into())),
        };
        Ok(Target::new(kind.0, kind.1))
    }
}

impl Serialize for Target {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Deserializes a limiter target: a provider's bare name or `provider:NAME`.
pub fn provider_target<'de, D: Deserializer<'de>>(d: D) -> Result<Target, D::Error> {
    let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
    Target::parse_provider(&s).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_and_read_back() {
        for t in [
            Target::provider("openai"),
            Target::model("gpt-4o"),
            Target::tool("get_order"),
        ] {
            assert_eq!(t.to_string().parse::<Target>().unwrap(), t);
        }
        assert_eq!(Target::model("a:b").to_string(), "model:a:b");
        assert_eq!("model:a:b".parse::<Target>().unwrap().name(), "a:b");
    }

    #[test]
    fn targets_sort_as_their_text_does() {
        let mut t = [
            Target::tool("a"),
            Target::provider("b"),
            Target::model("c"),
            Target::model("b"),
        ];
        t.sort();
        let text: Vec<String> = t.iter().map(Target::to_string).collect();
        let mut sorted = text.clone();
        sorted.sort();
        assert_eq!(text, sorted);
    }

    #[test]
    fn what_is_not_a_target_says_why() {
        assert_eq!("".parse::<Target>(), Err(TargetError::Empty));
        assert_eq!("x".repeat(200).parse::<Target>(), Err(TargetError::TooLong));
        assert!(matches!(
            "provider:a\nb".parse::<Target>(),
            Err(TargetError::Control(_))
        ));
        assert_eq!("mock".parse::<Target>(), Err(TargetError::Kind("mock".into())));
        assert_eq!(
            "provider:".parse::<Target>(),
            Err(TargetError::Kind("provider:".into()))
        );
        assert_eq!("db:x".parse::<Target>(), Err(TargetError::Kind("db:x".into())));
    }

    #[test]
    fn a_limiter_target_is_a_provider_named_either_way() {
        assert_eq!(Target::parse_provider("openai").unwrap(), Target::provider("openai"));
        assert_eq!(
            Target::parse_provider("provider:openai").unwrap(),
            Target::provider("openai")
        );
        assert!(matches!(
            Target::parse_provider("tool:x"),
            Err(TargetError::NotProvider(_))
        ));
    }
}
