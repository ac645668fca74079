//! Request ids as a log writes them: opaque strings (`"r0"`, a UUID,
//! `chatcmpl-…`) or whole numbers, kept as written, each with the number the
//! reader runs it under.

use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where internal numbers run out of the ordinary: one a string id gets
/// when its request's place in the log is taken, and one a number gets when
/// its own value is. Numeric ids must be below it.
pub const STRING_IDS_FROM: u64 = 1 << 62;

/// A request's id in a log.
///
/// The reader gives every id a number to run under ([`LogId::n`]) when its
/// request line is read, and the attempts and outcome that name it get the
/// same: a number its own value, a string the place of its request among the
/// log's requests (1 for the first). A log whose ids were renamed thus runs
/// as the original did when those numbered requests in order, as fusebox
/// writes them (seeded jitter is keyed by it). Where that number is taken, a
/// fresh one from [`STRING_IDS_FROM`] up. Written back, an id is what was read.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LogId {
    n: u64,
    written: Written,
}

/// An id as written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Written {
    Number(u64),
    Text(CompactString),
}

impl LogId {
    /// A string id, not yet numbered ([`LogId::n`] is 0).
    pub fn text(s: impl Into<CompactString>) -> Self {
        LogId {
            n: 0,
            written: Written::Text(s.into()),
        }
    }

    /// The number the request runs under.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// The id's text, if it was written as a string.
    pub fn as_text(&self) -> Option<&str> {
        match &self.written {
            Written::Text(t) => Some(t),
            Written::Number(_) => None,
        }
    }

    /// The id's value, if it was written as a number.
    pub fn as_number(&self) -> Option<u64> {
        match self.written {
            Written::Number(v) => Some(v),
            Written::Text(_) => None,
        }
    }

    /// Gives the id the number it runs under.
    pub(super) fn number(&mut self, n: u64) {
        self.n = n;
    }
}

impl From<u64> for LogId {
    fn from(n: u64) -> Self {
        LogId {
            n,
            written: Written::Number(n),
        }
    }
}

impl PartialEq<u64> for LogId {
    fn eq(&self, n: &u64) -> bool {
        self.as_number() == Some(*n)
    }
}

impl fmt::Display for LogId {
    /// As written: a string in quotes (so `"42"` and `42` read apart), a number bare.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.written {
            Written::Text(t) => write!(f, "\"{t}\""),
            Written::Number(v) => write!(f, "{v}"),
        }
    }
}

impl Serialize for LogId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.written {
            Written::Text(t) => s.serialize_str(t),
            Written::Number(v) => s.serialize_u64(*v),
        }
    }
}

impl<'de> Deserialize<'de> for LogId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Id;
        impl serde::de::Visitor<'_> for Id {
            type Value = LogId;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a whole number")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<LogId, E> {
                if n >= STRING_IDS_FROM {
                    return Err(E::custom(format!(
                        "{n} is too large for a numeric id (below {STRING_IDS_FROM}); write it as a string"
                    )));
                }
                Ok(LogId::from(n))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<LogId, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(format!(
                        "{n} is negative; an id is a string or a whole number"
                    ))),
                }
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<LogId, E> {
                let max = crate::limits::MAX_NAME_LEN;
                if s.is_empty() {
                    return Err(E::custom("an empty string is not an id"));
                }
                if s.len() > max {
                    return Err(E::custom(format!("longer than {max} bytes")));
                }
                Ok(LogId::text(s))
            }
        }
        d.deserialize_any(Id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_and_write_back_as_written() {
        for text in [
            "17",
            "\"r0\"",
            "\"chatcmpl-9xZ\"",
            "\"3f2b0c7e-1d2a-4c55-9a8e-1b2c3d4e5f60\"",
            "\"42\"",
        ] {
            let id: LogId = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&id).unwrap(), text);
            assert_eq!(id.to_string(), text);
        }
        let n: LogId = serde_json::from_str("42").unwrap();
        let s: LogId = serde_json::from_str("\"42\"").unwrap();
        assert_ne!(n, s, "a string is not the number it spells");
        assert_eq!(n, 42);
    }

    #[test]
    fn bad_ids_say_what_an_id_is() {
        for (text, says) in [
            ("-1", "negative"),
            ("1.5", "a string or a whole number"),
            ("\"\"", "empty"),
            ("4611686018427387904", "write it as a string"),
            ("true", "a string or a whole number"),
        ] {
            let e = serde_json::from_str::<LogId>(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
