//! Demo scenarios: a traffic mix and a fault timeline. Built-in scenarios
//! are TOML files compiled in; users can write their own in the same format.

use crate::provider::fault::FaultSpec;
use serde::Deserialize;
use std::path::Path;

/// A scenario problem, naming the file or the scenario.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Neither a built-in name nor a readable file.
    #[error("unknown scenario `{0}`; built-in scenarios: {1} (or give a path to a scenario TOML file)")]
    Unknown(String, String),
    /// The file did not parse.
    #[error("{0}: {1}")]
    Parse(String, String),
    /// A value is out of range.
    #[error("{0}: invalid value at `{1}`: {2}")]
    Invalid(String, String, String),
}

/// A named tenant's own traffic at a steady rate over a span of time
/// (the flooding tenant, or an agent whose loop runs away).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    /// Its user name.
    pub user: String,
    /// Its requests per second.
    pub rps: f64,
    /// When it starts (s).
    pub from_s: u64,
    /// When it stops (s).
    pub to_s: u64,
    /// Prompt size of its requests (characters).
    #[serde(default = "long_prompt")]
    pub prompt_chars: usize,
    /// The priority its requests ask for (`x-fusebox-priority`; none: as
    /// the route says), granted as the config allows a caller without a key.
    #[serde(default)]
    pub priority: Option<crate::config::Priority>,
    /// Its requests offer the model a tool (`search_docs`, two steps);
    /// `false`: one tool-free call each.
    #[serde(default = "yes")]
    pub tools: bool,
    /// Output cap of its requests (tokens).
    #[serde(default = "long_answer")]
    pub max_tokens: u32,
}

fn long_prompt() -> usize {
    8_000
}
fn long_answer() -> u32 {
    1_024
}
fn yes() -> bool {
    true
}

/// A fault change at a point in time.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TimelineStep {
    /// Seconds from the start.
    pub at_s: u64,
    /// A provider or tool.
    pub target: crate::target::Target,
    /// The fault from then on.
    pub fault: crate::provider::fault::Fault,
    /// Share of calls affected.
    #[serde(default = "one")]
    pub rate: f64,
}

fn one() -> f64 {
    1.0
}

impl TimelineStep {
    /// The fault with its rate.
    pub fn spec(&self) -> FaultSpec {
        FaultSpec {
            fault: self.fault.clone(),
            rate: self.rate,
        }
    }
}

/// A scenario.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// What it shows.
    #[serde(default)]
    pub description: String,
    /// Requests per second of ordinary users.
    #[serde(default = "five")]
    pub rps: f64,
    /// Distinct ordinary users.
    #[serde(default = "users")]
    pub users: u32,
    /// Replay the timeline every this many seconds (0 = once).
    #[serde(default)]
    pub repeat_s: u64,
    /// A flooding tenant.
    #[serde(default)]
    pub noisy: Option<Tenant>,
    /// More tenants' traffic; two entries for one user add up (a steady
    /// rate, and a surge on top of it).
    #[serde(default)]
    pub tenants: Vec<Tenant>,
    /// Fault changes.
    #[serde(default)]
    pub timeline: Vec<TimelineStep>,
}

/// The most `[[tenants]]` entries a scenario may have.
pub const MAX_TENANTS: usize = 64;

impl Scenario {
    /// Every tenant's traffic: the flooding tenant first, then the others.
    pub fn tenants(&self) -> impl Iterator<Item = &Tenant> {
        self.noisy.iter().chain(&self.tenants)
    }

    /// Requests a second of all its traffic at its busiest (every tenant at once).
    pub fn peak_rps(&self) -> f64 {
        self.rps + self.tenants().map(|t| t.rps).sum::<f64>()
    }
}

fn five() -> f64 {
    5.0
}
fn users() -> u32 {
    400
}

const BUILT_IN: &[(&str, &str)] = &[
    ("calm", include_str!("scenarios/calm.toml")),
    ("2am-incident", include_str!("scenarios/2am-incident.toml")),
    ("provider-outage", include_str!("scenarios/provider-outage.toml")),
    ("outage-recovery", include_str!("scenarios/outage-recovery.toml")),
    ("429-storm", include_str!("scenarios/429-storm.toml")),
    ("slow-tokens", include_str!("scenarios/slow-tokens.toml")),
    ("hallucination", include_str!("scenarios/hallucination.toml")),
    ("noisy-tenant", include_str!("scenarios/noisy-tenant.toml")),
    ("tour", include_str!("scenarios/tour.toml")),
    ("runaway-agent", include_str!("scenarios/runaway-agent.toml")),
    ("capacity-drop", include_str!("scenarios/capacity-drop.toml")),
    ("fair-shares", include_str!("scenarios/fair-shares.toml")),
    ("heavy-tail", include_str!("scenarios/heavy-tail.toml")),
    ("retry-storm", include_str!("scenarios/retry-storm.toml")),
];

impl Scenario {
    /// Names of the built-in scenarios.
    pub fn built_in_names() -> Vec<&'static str> {
        BUILT_IN.iter().map(|(n, _)| *n).collect()
    }

    /// A built-in scenario by name, or a scenario file by path.
    pub fn load(name_or_path: &str) -> Result<Self, ScenarioError> {
        if let Some((_, text)) = BUILT_IN.iter().find(|(n, _)| *n == name_or_path) {
            return Self::parse(text, &format!("built-in scenario {name_or_path}"));
        }
        let path = Path::new(name_or_path);
        if path.is_file() {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ScenarioError::Parse(path.display().to_string(), e.to_string()))?;
            return Self::parse(&text, &path.display().to_string());
        }
        Err(ScenarioError::Unknown(
            name_or_path.into(),
            Self::built_in_names().join(", "),
        ))
    }

    /// Parses and validates scenario TOML; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Self, ScenarioError> {
        let message = |e: &toml::de::Error| crate::config::toml_message(text, e);
        let de = toml::Deserializer::parse(text).map_err(|e| ScenarioError::Parse(file.into(), message(&e)))?;
        let s: Scenario = serde_path_to_error::deserialize(de)
            .map_err(|e| ScenarioError::Parse(file.into(), format!("{}: {}", e.path(), message(e.inner()))))?;
        let bad = |k: &str, m: &str| Err(ScenarioError::Invalid(file.into(), k.into(), m.into()));
        if !(s.rps.is_finite() && s.rps > 0.0 && s.rps <= 100_000.0) {
            return bad(
                "rps",
                "must be a number of requests per second, greater than 0 and at most 100000",
            );
        }
        if s.users == 0 {
            return bad("users", "must be at least 1");
        }
        let named = s.noisy.iter().map(|n| ("noisy".to_string(), n));
        let tenants = s.tenants.iter().enumerate().map(|(i, t)| (format!("tenants[{i}]"), t));
        for (at, n) in named.chain(tenants) {
            if !(n.rps.is_finite() && n.rps > 0.0 && n.rps <= 100_000.0) {
                return bad(&format!("{at}.rps"), "must be greater than 0 and at most 100000");
            }
            if n.to_s <= n.from_s {
                return bad(&format!("{at}.to_s"), &format!("must be after {at}.from_s"));
            }
            if n.prompt_chars > 1_000_000 {
                return bad(&format!("{at}.prompt_chars"), "must be at most 1000000");
            }
            if !(1..=100_000).contains(&n.max_tokens) {
                return bad(&format!("{at}.max_tokens"), "must be 1 to 100000");
            }
        }
        if s.tenants.len() > MAX_TENANTS {
            return bad("tenants", &format!("at most {MAX_TENANTS} entries"));
        }
        for (i, st) in s.timeline.iter().enumerate() {
            if let Err(e) = st.spec().check() {
                return bad(&format!("timeline[{i}].{}", e.field), &e.bound);
            }
            if !st.target.has_fault() {
                return bad(
                    &format!("timeline[{i}].target"),
                    "must be `provider:NAME` or `tool:NAME`",
                );
            }
            if s.repeat_s > 0 && st.at_s >= s.repeat_s {
                return bad(&format!("timeline[{i}].at_s"), "must be before repeat_s");
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_parses() {
        for n in Scenario::built_in_names() {
            let s = Scenario::load(n).unwrap();
            assert_eq!(s.name, n);
        }
    }

    #[test]
    fn unknown_names_list_the_built_ins() {
        let e = Scenario::load("nope").unwrap_err().to_string();
        assert!(
            e.contains("unknown scenario `nope`") && e.contains("2am-incident"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = Scenario::parse("name = \"x\"\nrps = -1\n", "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f.toml") && e.contains("`rps`"), "{e}");
        let e = Scenario::parse(
            "name = \"x\"\n[[timeline]]\nat_s = 1\ntarget = \"db\"\nfault = { type = \"timeout\" }\n",
            "f.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("timeline[0].target"), "{e}");
    }
}
