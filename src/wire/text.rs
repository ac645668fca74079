//! Optional JSON strings read borrowed from a body's bytes, the one
//! element of an array fusebox reads, and objects read only from objects.
//!
//! serde borrows a `Cow<str>` field's text, but an `Option<Cow<str>>` it
//! always copies (its `Cow` impl owns what it reads): fields read with
//! [`opt`] borrow as well, and copy only a string whose escapes had to be
//! undone.

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

/// A string: borrowed where the reader can lend it, owned otherwise.
struct Text;

impl<'de> Visitor<'de> for Text {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E: Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// A string or `null`.
struct Maybe;

impl<'de> Visitor<'de> for Maybe {
    type Value = Option<Cow<'de, str>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string or null")
    }

    fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(Text).map(Some)
    }
}

/// Reads an `Option<Cow<str>>` field (`#[serde(default, borrow,
/// deserialize_with = "crate::wire::text::opt")]`): `null` is `None`, a
/// string is borrowed where it has no escapes.
pub fn opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    d.deserialize_option(Maybe)
}

/// An array's first element, the rest skipped unread (and unchecked).
struct First<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for First<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array or null")
    }

    fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let first = seq.next_element::<T>()?;
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(first)
    }
}

/// Reads the first element of an array field of which one is read (a
/// completion's `choices`), without collecting the others: `null`, absent
/// or empty is `None`.
pub fn first<'de, T: Deserialize<'de>, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
    d.deserialize_any(First(PhantomData))
}

/// A `T` read from a JSON object only. serde reads a struct from an array
/// of its fields too (`["user", "hi"]` as a message), which the general
/// read refuses; a one-pass read that must read as it does wraps its
/// structs in this.
pub struct Object<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Map<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Map<T> {
            type Value = Object<T>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Object)
            }
        }
        d.deserialize_map(Map(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    #[derive(serde::Deserialize)]
    struct Chunk<'a> {
        #[serde(default, borrow, deserialize_with = "super::opt")]
        a: Option<Cow<'a, str>>,
        #[serde(default, borrow, deserialize_with = "super::opt")]
        b: Option<Cow<'a, str>>,
    }

    #[test]
    fn strings_are_borrowed_unless_escaped_and_null_or_absent_is_none() {
        let c: Chunk = serde_json::from_str(r#"{"a":"plain","b":"t\u00e9\n"}"#).unwrap();
        assert!(matches!(c.a, Some(Cow::Borrowed("plain"))));
        assert!(matches!(c.b.as_deref(), Some("té\n")));
        assert!(matches!(c.b, Some(Cow::Owned(_))));
        let c: Chunk = serde_json::from_str(r#"{"a":null}"#).unwrap();
        assert!(c.a.is_none() && c.b.is_none());
        let bytes: Chunk = serde_json::from_slice(br#"{"a":"x"}"#).unwrap();
        assert!(matches!(bytes.a, Some(Cow::Borrowed("x"))));
        assert!(serde_json::from_str::<Chunk>(r#"{"a":1}"#).is_err());
    }

    #[derive(serde::Deserialize)]
    struct Choices<'a> {
        #[serde(default, borrow, deserialize_with = "super::first")]
        choices: Option<Chunk<'a>>,
    }

    #[test]
    fn the_first_element_is_read_and_the_rest_skipped_whatever_they_are() {
        let c: Choices = serde_json::from_str(r#"{"choices":[{"a":"one"},{"a":2},[3],"x"]}"#).unwrap();
        assert_eq!(c.choices.and_then(|c| c.a).as_deref(), Some("one"));
        for none in [r#"{"choices":[]}"#, r#"{"choices":null}"#, "{}"] {
            assert!(
                serde_json::from_str::<Choices>(none).unwrap().choices.is_none(),
                "{none}"
            );
        }
        for bad in [
            r#"{"choices":{"a":"x"}}"#,
            r#"{"choices":[{"a":1}]}"#,
            r#"{"choices":[{},"#,
        ] {
            assert!(serde_json::from_str::<Choices>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_object_is_read_from_an_object_only() {
        let c: super::Object<Chunk> = serde_json::from_str(r#"{"a":"x"}"#).unwrap();
        assert_eq!(c.0.a.as_deref(), Some("x"));
        // serde alone reads the struct from an array of its fields.
        assert!(serde_json::from_str::<Chunk>(r#"["x"]"#).is_ok());
        for bad in [r#"["x"]"#, "null", r#""x""#] {
            assert!(serde_json::from_str::<super::Object<Chunk>>(bad).is_err(), "{bad}");
        }
    }
}
