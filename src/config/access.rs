//! Who may call the gateway and who may operate it: caller keys (each
//! bound to a user, what it may call, its budgets and expiry) and operator
//! tokens (with the scope they grant). Both are kept as SHA-256 hashes
//! only: a config never holds the secret itself.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};
use std::fmt;
use std::str::FromStr;
use std::time::SystemTime;

/// The SHA-256 of a secret, written `sha256:` and 64 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SecretHash([u8; 32]);

impl SecretHash {
    /// The hash of `secret`.
    pub fn of(secret: &str) -> Self {
        Self(Sha256::digest(secret.as_bytes()).into())
    }
}

impl fmt::Display for SecretHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sha256:")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for SecretHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for SecretHash {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let hex = s
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or("expected `sha256:` and 64 hex digits (`fusebox keys hash` prints one)")?;
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
        }
        Ok(Self(out))
    }
}

impl Serialize for SecretHash {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SecretHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// A point in time written in RFC 3339 (`2027-01-01T00:00:00Z`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant(pub SystemTime);

impl Instant {
    /// Milliseconds since the Unix epoch.
    pub fn unix_ms(self) -> u64 {
        self.0
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

impl Serialize for Instant {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_rfc3339(self.0))
    }
}

impl<'de> Deserialize<'de> for Instant {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_rfc3339_weak(&s).map(Instant).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{s}` is not an RFC 3339 time ({e}), e.g. 2027-01-01T00:00:00Z"
            ))
        })
    }
}

/// A caller key: whose calls it makes and what they may do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// The key's hash (the key itself is never kept).
    pub hash: SecretHash,
    /// The user (tenant) its calls are made as and billed to, whatever a
    /// call's `user` field or header says.
    pub user: String,
    /// The routes or models it may call (empty: all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<String>,
    /// The MCP servers (`[mcp.NAME]`) it may reach at `/mcp` (empty: all):
    /// the others' tools, resources and prompts are as absent to it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<String>,
    /// When it stops working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Instant>,
    /// Its user's budgets, in place of the defaults of `[budgets]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<UserBudgets>,
    /// Its calls may name a sub-user (a `user` field or `x-fusebox-user`)
    /// for reporting: recorded with each request, still billed to `user`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sub_users: bool,
    /// The most urgent priority its calls may have: a call asking for
    /// more (`x-fusebox-priority`) gets this. Only a key given `critical`
    /// sends critical traffic; a `batch` key's calls are all batch.
    #[serde(default, skip_serializing_if = "super::Priority::is_default")]
    pub priority: super::Priority,
}

/// A user's own budgets (each unset one is the `[budgets]` default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserBudgets {
    /// Tokens per minute (0 = unlimited).
    pub tokens_per_minute: Option<u64>,
    /// Tokens per hour (0 = unlimited).
    pub tokens_per_hour: Option<u64>,
    /// Tokens per day (0 = unlimited).
    pub tokens_per_day: Option<u64>,
    /// USD per day (0 = unlimited).
    pub cost_per_day_usd: Option<f64>,
}

/// What an operator token grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Grant {
    /// Snapshots, events and metrics.
    View,
    /// Those, and operator commands.
    Operate,
}

/// An operator token: its holder's name is the operator's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorConfig {
    /// The token's hash.
    pub hash: SecretHash,
    /// What it grants.
    pub scope: Grant,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_is_written_and_read_back_and_bad_ones_say_why() {
        let h = SecretHash::of("abc");
        assert_eq!(
            h.to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(h.to_string().parse::<SecretHash>().unwrap(), h);
        assert!("sha256:zz".parse::<SecretHash>().unwrap_err().contains("64 hex digits"));
        assert!("md5:00".parse::<SecretHash>().is_err());
    }
}
