//! Field types that accept any JSON and keep what has the expected type.
//!
//! The CLI's output drifts between versions: fields come and go, and a field may change its
//! type. A derived struct with a plain `u64` field rejects the whole line when that field turns
//! into a string, and a rejected `result` line would read as "killed". Every field of the wire
//! structs is therefore one of these types: a value of the expected JSON type is kept, anything
//! else is skipped (still parsed, so the line stays in sync) and reads as absent.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One JSON value as far as a leaf field cares: a scalar, or "something else" (skipped).
enum Scalar<'a> {
    Str(Cow<'a, str>),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    Bool(bool),
    Null,
    Container,
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Scalar::Unsigned(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Scalar::Signed(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Scalar::Float(v))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Bool(v))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        drain_seq(seq)?;
        Ok(Scalar::Container)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        drain_map(map)?;
        Ok(Scalar::Container)
    }
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

fn scalar<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Scalar<'de>, D::Error> {
    deserializer.deserialize_any(ScalarVisitor)
}

/// Reads an object key as raw bytes and maps it with `F`.
///
/// serde's derive reads keys as `&str`, which makes serde_json validate the UTF-8 of every
/// key of every object it descends into; as bytes they are only scanned (see [`wire!`]).
pub(super) struct Key<F>(pub(super) F);

impl<'de, T, F: FnOnce(&[u8]) -> T> Visitor<'de> for Key<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_bytes<E>(self, v: &[u8]) -> Result<T, E> {
        Ok((self.0)(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<T, E> {
        Ok((self.0)(v.as_bytes()))
    }
}

/// Declares a wire struct: every field defaults to absent, known keys (byte strings) fill
/// their field (a repeated key: the last one wins), unknown keys are skipped unbuilt. Use it
/// with lenient field types only, so that no value can reject the object.
macro_rules! wire {
    (
        $(#[$meta:meta])*
        struct $name:ident $(<$lt:lifetime>)? {
            $( $(#[$field_meta:meta])* $field:ident: $ty:ty = $key:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default)]
        pub(super) struct $name $(<$lt>)? {
            $( $(#[$field_meta])* pub(super) $field: $ty, )*
        }

        const _: () = {
            use std::marker::PhantomData;
            use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};

            #[allow(non_camel_case_types)]
            enum Field { $($field,)* Unknown }

            impl<'de> Deserialize<'de> for Field {
                fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                    deserializer.deserialize_bytes($crate::agent::claude::stream::lenient::Key(
                        |key: &[u8]| match key {
                            $( $key => Field::$field, )*
                            _ => Field::Unknown,
                        },
                    ))
                }
            }

            struct StructVisitor $(<$lt>)? (PhantomData<fn() -> $name $(<$lt>)?>);

            impl<'de $(: $lt, $lt)?> Visitor<'de> for StructVisitor $(<$lt>)? {
                type Value = $name $(<$lt>)?;

                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str(concat!("a ", stringify!($name), " object"))
                }

                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    let mut out = Self::Value::default();
                    while let Some(field) = map.next_key::<Field>()? {
                        match field {
                            $( Field::$field => out.$field = map.next_value()?, )*
                            Field::Unknown => {
                                map.next_value::<IgnoredAny>()?;
                            }
                        }
                    }
                    Ok(out)
                }
            }

            impl<'de $(: $lt, $lt)?> Deserialize<'de> for $name $(<$lt>)? {
                fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                    deserializer.deserialize_map(StructVisitor(PhantomData))
                }
            }
        };
    };
}

pub(super) use wire;

/// A string field, borrowed from the line when it has no escapes.
#[derive(Debug, Default)]
pub(super) struct Str<'a>(pub(super) Option<Cow<'a, str>>);

impl<'a> Str<'a> {
    pub(super) fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }

    pub(super) fn owned(&self) -> Option<String> {
        self.get().map(str::to_owned)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Str(match scalar(deserializer)? {
            Scalar::Str(s) => Some(s),
            _ => None,
        }))
    }
}

/// A non-negative integer field (token counts, durations). A float with no fraction counts.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Num(pub(super) Option<u64>);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Num(match scalar(deserializer)? {
            Scalar::Unsigned(n) => Some(n),
            Scalar::Signed(n) => u64::try_from(n).ok(),
            Scalar::Float(f) => whole(f),
            _ => None,
        }))
    }
}

/// `f` as a `u64` when it is a whole number in range.
fn whole(f: f64) -> Option<u64> {
    // 2^64 as f64; every whole f64 below it converts exactly.
    const LIMIT: f64 = 18_446_744_073_709_551_616.0;
    // The cast is exact: `f` is whole, non-negative and below 2^64.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    (f.fract() == 0.0 && (0.0..LIMIT).contains(&f)).then_some(f as u64)
}

/// A number field that may have a fraction (cost, epoch seconds).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Float(pub(super) Option<f64>);

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[allow(clippy::cast_precision_loss)] // Seconds and dollars: f64 precision is plenty.
        Ok(Float(match scalar(deserializer)? {
            Scalar::Unsigned(n) => Some(n as f64),
            Scalar::Signed(n) => Some(n as f64),
            Scalar::Float(f) => Some(f),
            _ => None,
        }))
    }
}

/// A boolean field.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Flag(pub(super) Option<bool>);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Flag(match scalar(deserializer)? {
            Scalar::Bool(b) => Some(b),
            _ => None,
        }))
    }
}

/// A field whose *absence* and *null* mean different things (`api_error_status`: absent on
/// non-API failures, null on network errors, a number on HTTP errors).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum ApiStatus {
    /// The key is not there.
    #[default]
    Absent,
    /// `null`.
    Null,
    /// A number.
    Code(u64),
    /// Something else (a string, an object): drift.
    Other,
}

impl<'de> Deserialize<'de> for ApiStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match scalar(deserializer)? {
            Scalar::Null => ApiStatus::Null,
            Scalar::Unsigned(n) => ApiStatus::Code(n),
            Scalar::Float(f) => whole(f).map_or(ApiStatus::Other, ApiStatus::Code),
            _ => ApiStatus::Other,
        })
    }
}

/// A nested object, deserialized into `T` when the value is a JSON object; anything else
/// reads as absent. `T`'s own fields must be lenient too, so `T` never rejects an object.
#[derive(Debug)]
pub(super) struct Obj<T>(pub(super) Option<T>);

impl<T> Default for Obj<T> {
    fn default() -> Self {
        Obj(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ObjVisitor(PhantomData))
    }
}

struct ObjVisitor<T>(PhantomData<T>);

/// Implements the `visit_*` methods for JSON scalars (and, by name, for strings, arrays or
/// objects) as "skip the value and return `$value`", so a field of the wrong type reads as absent.
macro_rules! skip {
    (scalars => $value:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
    (strings => $value:expr) => {
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
    (arrays => $value:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
            drain_seq(seq)?;
            Ok($value)
        }
    };
    (objects => $value:expr) => {
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            drain_map(map)?;
            Ok($value)
        }
    };
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjVisitor<T> {
    type Value = Obj<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    skip!(scalars => Obj(None));
    skip!(strings => Obj(None));
    skip!(arrays => Obj(None));

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(|t| Obj(Some(t)))
    }
}

/// An array of `T` (each element lenient itself); anything else reads as empty.
#[derive(Debug)]
pub(super) struct List<T>(pub(super) Vec<T>);

impl<T> Default for List<T> {
    fn default() -> Self {
        List(Vec::new())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for List<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ListVisitor(PhantomData))
    }
}

struct ListVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for ListVisitor<T> {
    type Value = List<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    skip!(scalars => List::default());
    skip!(strings => List::default());
    skip!(objects => List::default());

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(16));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(List(items))
    }
}

/// An object read as its entries in order (`modelUsage`, keyed by model name).
#[derive(Debug)]
pub(super) struct Entries<'a, T>(pub(super) Vec<(Cow<'a, str>, T)>);

impl<T> Default for Entries<'_, T> {
    fn default() -> Self {
        Entries(Vec::new())
    }
}

impl<'de: 'a, 'a, T: Deserialize<'de>> Deserialize<'de> for Entries<'a, T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(EntriesVisitor(PhantomData))
    }
}

struct EntriesVisitor<'a, T>(PhantomData<(Cow<'a, str>, T)>);

impl<'de: 'a, 'a, T: Deserialize<'de>> Visitor<'de> for EntriesVisitor<'a, T> {
    type Value = Entries<'a, T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    skip!(scalars => Entries::default());
    skip!(strings => Entries::default());
    skip!(arrays => Entries::default());

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut entries = Vec::new();
        while let Some((Str(key), value)) = map.next_entry::<Str<'a>, T>()? {
            if let Some(key) = key {
                entries.push((key, value));
            }
        }
        Ok(Entries(entries))
    }
}

/// A field that is a string on some lines and an object on others (`message`: the text of a
/// `permission_denied` line, the API message of an `assistant` line).
#[derive(Debug, Default)]
pub(super) enum StrOrObj<'a, T> {
    /// Neither.
    #[default]
    Neither,
    /// A string.
    Str(Cow<'a, str>),
    /// An object.
    Obj(T),
}

impl<'de: 'a, 'a, T: Deserialize<'de>> Deserialize<'de> for StrOrObj<'a, T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrOrObjVisitor(PhantomData))
    }
}

struct StrOrObjVisitor<'a, T>(PhantomData<(Cow<'a, str>, T)>);

impl<'de: 'a, 'a, T: Deserialize<'de>> Visitor<'de> for StrOrObjVisitor<'a, T> {
    type Value = StrOrObj<'a, T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    skip!(scalars => StrOrObj::Neither);
    skip!(arrays => StrOrObj::Neither);

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(StrOrObj::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(StrOrObj::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(MapAccessDeserializer::new(map)).map(StrOrObj::Obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    wire! {
        /// A struct of every lenient type.
        struct Probe<'a> {
            text: Str<'a> = b"text",
            num: Num = b"num",
            float: Float = b"float",
            flag: Flag = b"flag",
            status: ApiStatus = b"status",
            nested: Obj<Nested> = b"nested",
            list: List<Num> = b"list",
            entries: Entries<'a, Num> = b"entries",
            either: StrOrObj<'a, Nested> = b"either",
        }
    }

    wire! {
        /// A nested struct.
        struct Nested {
            n: Num = b"n",
        }
    }

    fn probe(json: &str) -> Probe<'_> {
        serde_json::from_str(json).expect("never rejected")
    }

    #[test]
    fn values_of_the_expected_type_are_kept() {
        let p = probe(
            r#"{"text":"hi","num":3.0,"float":1,"flag":true,"status":null,"nested":{"n":7},
               "list":[1,"x",2],"entries":{"a":1,"b":2},"either":"s"}"#,
        );
        assert_eq!(p.text.get(), Some("hi"));
        assert!(matches!(p.text.0, Some(Cow::Borrowed(_))));
        assert_eq!(p.num.0, Some(3));
        assert_eq!(p.float.0, Some(1.0));
        assert_eq!(p.flag.0, Some(true));
        assert_eq!(p.status, ApiStatus::Null);
        assert_eq!(p.nested.0.and_then(|i| i.n.0), Some(7));
        let list: Vec<_> = p.list.0.iter().map(|n| n.0).collect();
        assert_eq!(list, [Some(1), None, Some(2)]);
        let keys: Vec<_> = p.entries.0.iter().map(|(k, v)| (k.as_ref(), v.0)).collect();
        assert_eq!(keys, [("a", Some(1)), ("b", Some(2))]);
        assert!(matches!(p.either, StrOrObj::Str(s) if s == "s"));
    }

    #[test]
    fn values_of_another_type_read_as_absent() {
        let p = probe(
            r#"{"text":{"a":[1]},"num":-1,"float":"1.5","flag":"yes","status":"500",
               "nested":[{"n":1}],"list":{"a":1},"entries":[1],"either":7,"extra":{"deep":[{}]}}"#,
        );
        assert_eq!(p.text.get(), None);
        assert_eq!(p.num.0, None);
        assert_eq!(p.float.0, None);
        assert_eq!(p.flag.0, None);
        assert_eq!(p.status, ApiStatus::Other);
        assert!(p.nested.0.is_none());
        assert!(p.list.0.is_empty());
        assert!(p.entries.0.is_empty());
        assert!(matches!(p.either, StrOrObj::Neither));
        assert_eq!(probe("{}").status, ApiStatus::Absent);
        assert_eq!(probe(r#"{"status":429}"#).status, ApiStatus::Code(429));
        assert_eq!(probe(r#"{"num":2.5}"#).num.0, None);
    }

    #[test]
    fn escaped_strings_and_keys_are_decoded() {
        let p = probe(r#"{"te\u0078t":"a\nb","either":{"n":1},"text":"last wins"}"#);
        assert_eq!(p.text.get(), Some("last wins"));
        assert!(matches!(
            p.either,
            StrOrObj::Obj(Nested { n: Num(Some(1)) })
        ));
        assert_eq!(probe(r#"{"text":"a\nb"}"#).text.get(), Some("a\nb"));
    }

    #[test]
    fn a_non_object_line_is_rejected() {
        assert!(serde_json::from_str::<Probe<'_>>("[1, 2]").is_err());
        assert!(serde_json::from_str::<Probe<'_>>("\"text\"").is_err());
    }
}
