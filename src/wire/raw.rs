//! A JSON object as a client sent it: its members in their order, each
//! value's text untouched. A request of the same API as the upstream is
//! passed on as this, with only the members fusebox must change replaced.

use compact_str::CompactString;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::fmt;
use std::ops::Range;

/// A JSON object's members, in order, with their values as written: the
/// object's text held once, each value where it lies in it.
#[derive(Clone, Debug, Default)]
pub struct RawBody {
    text: Box<str>,
    members: Vec<(CompactString, Range<usize>)>,
}

impl RawBody {
    /// Reads a JSON object; anything else is an error.
    pub fn parse(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        // Text checked once as a whole, not each string (and each member's
        // raw text) as it is read; bytes that are not UTF-8 are left to the
        // byte reader, whose error says where.
        let Ok(text) = std::str::from_utf8(bytes) else {
            serde_json::from_slice::<Members>(bytes)?;
            return Err(serde::de::Error::custom("request body is not UTF-8"));
        };
        let read: Members = serde_json::from_str(text)?;
        let at = |v: &RawValue| {
            let start = v.get().as_ptr() as usize - text.as_ptr() as usize;
            start..start + v.get().len()
        };
        Ok(RawBody {
            members: read.0.into_iter().map(|(k, v)| (k, at(v))).collect(),
            text: text.into(),
        })
    }

    /// The value of `key` as written (the last one, if the key repeats).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.members().rev().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The value of `key` read as `T`; `None` when absent.
    pub fn read<'a, T: Deserialize<'a>>(&'a self, key: &str) -> Option<Result<T, serde_json::Error>> {
        self.get(key).map(serde_json::from_str)
    }

    /// The members' names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.members().map(|(k, _)| k)
    }

    /// The members, each value's JSON text as written, in order (a
    /// repeated key as often as it was written).
    pub fn members(&self) -> impl DoubleEndedIterator<Item = (&str, &str)> {
        self.members.iter().map(|(k, v)| (k.as_str(), &self.text[v.clone()]))
    }

    /// The object written out with `set` members replaced where present
    /// (the first occurrence; later repeats are dropped) or appended, and
    /// `remove` members left out. Untouched members keep their bytes.
    pub fn render(&self, set: &[(&str, &RawValue)], remove: &[&str]) -> Vec<u8> {
        let size = self.members().map(|(k, v)| k.len() + v.len() + 4).sum::<usize>()
            + set.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum::<usize>();
        let mut out = Vec::with_capacity(size + 2);
        out.push(b'{');
        let mut first = true;
        let mut put = |out: &mut Vec<u8>, k: &str, v: &str| {
            if !first {
                out.push(b',');
            }
            first = false;
            // A key is a JSON string; writing one cannot fail.
            let _ = serde_json::to_writer(&mut *out, k);
            out.push(b':');
            out.extend_from_slice(v.as_bytes());
        };
        let mut done: smallvec::SmallVec<[bool; 8]> = smallvec::smallvec![false; set.len()];
        // A repeated key keeps only its last value, as JSON readers do.
        let last = Repeats::of(&self.members);
        for (i, (k, v)) in self.members().enumerate() {
            if remove.contains(&k) {
                continue;
            }
            match set.iter().position(|(sk, _)| *sk == k) {
                Some(j) if done[j] => {}
                Some(j) => {
                    done[j] = true;
                    put(&mut out, k, set[j].1.get());
                }
                None if !last.is_last(i, k) => {}
                None => put(&mut out, k, v),
            }
        }
        for ((k, v), done) in set.iter().zip(done) {
            if !done {
                put(&mut out, k, v.get());
            }
        }
        out.push(b'}');
        out
    }
}

/// Which member is the last of its key, for a body whose keys repeat.
enum Repeats<'a> {
    /// Every key once (a client's body, nearly always): no map built.
    None,
    /// Where each key is written last.
    Last(std::collections::HashMap<&'a str, usize>),
}

impl<'a> Repeats<'a> {
    fn of(members: &'a [(CompactString, Range<usize>)]) -> Self {
        // Up to this many members, comparing each key with those before it
        // costs less than hashing them all.
        const FEW: usize = 32;
        let repeats = members.len() > FEW
            || members
                .iter()
                .enumerate()
                .any(|(i, (k, _))| members[..i].iter().any(|(before, _)| before == k));
        if !repeats {
            return Repeats::None;
        }
        Repeats::Last(members.iter().enumerate().map(|(i, (k, _))| (k.as_str(), i)).collect())
    }

    /// Whether member `i`, of `key`, is its key's last.
    fn is_last(&self, i: usize, key: &str) -> bool {
        match self {
            Repeats::None => true,
            Repeats::Last(last) => last.get(key) == Some(&i),
        }
    }
}

/// A JSON object's members as read: each value's text borrowed.
struct Members<'a>(Vec<(CompactString, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Read;
        impl<'de> Visitor<'de> for Read {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Read)
    }
}

/// `v` as raw JSON text.
pub fn to_raw(v: &impl serde::Serialize) -> Box<RawValue> {
    // Serialising a `serde_json::Value` or plain data cannot fail.
    serde_json::value::to_raw_value(v).unwrap_or_else(|_| raw_null())
}

/// `null`, as raw JSON.
pub fn raw_null() -> Box<RawValue> {
    RawValue::from_string("null".into()).unwrap_or_else(|_| unreachable!("null is JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untouched_members_keep_their_bytes_and_order() {
        let b = RawBody::parse(br#"{"z": 1.50, "model":"a","messages":[ {"role":"user"} ],"x":{"k":[1,2]}}"#).unwrap();
        assert_eq!(b.keys().collect::<Vec<_>>(), ["z", "model", "messages", "x"]);
        let model = to_raw(&"b");
        let extra = to_raw(&serde_json::json!({"include_usage": true}));
        let out = b.render(&[("model", &model), ("stream_options", &extra)], &["x"]);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"z":1.50,"model":"b","messages":[ {"role":"user"} ],"stream_options":{"include_usage":true}}"#
        );
    }

    #[test]
    fn bytes_that_are_not_utf_8_are_refused_saying_where() {
        let e = RawBody::parse(b"{\"model\":\"a\xff\"}").unwrap_err();
        assert!(e.to_string().contains("line 1 column"), "{e}");
        assert!(RawBody::parse("{\"model\":\"é\"}".as_bytes()).is_ok());
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value() {
        let b = RawBody::parse(br#"{"a":1,"a":2,"b":3}"#).unwrap();
        assert_eq!(b.get("a"), Some("2"));
        assert_eq!(String::from_utf8(b.render(&[], &[])).unwrap(), r#"{"a":2,"b":3}"#);
        let one = to_raw(&9);
        assert_eq!(
            String::from_utf8(b.render(&[("a", &one)], &[])).unwrap(),
            r#"{"a":9,"b":3}"#
        );
        // A body of many members, one repeated: the same, found by a map.
        let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        let b = RawBody::parse(format!("{{{},\"k3\":\"last\"}}", many.join(",")).as_bytes()).unwrap();
        let out = String::from_utf8(b.render(&[], &[])).unwrap();
        assert!(out.starts_with(r#"{"k0":0,"k1":1,"k2":2,"k4":4,"#), "{out}");
        assert!(out.ends_with(r#""k39":39,"k3":"last"}"#), "{out}");
    }

    #[test]
    fn only_objects_are_bodies() {
        assert!(RawBody::parse(b"[1]").is_err());
        assert!(RawBody::parse(b"{\"a\":").is_err());
    }
}
