//! A deserializer adapter whose errors quote at most a bounded part of a string the client
//! sent ([`Bounded`]), for the params and tool arguments of every request
//! ([`parse_object`](super::parse_object)).
//!
//! serde words an `invalid type: string "…"` error (or `invalid value`) as it makes it,
//! escaping the whole string with `{:?}`: about 200 ns a character that needs an escape, so
//! 3.5 MB of U+E000 sent where an object belongs cost its event loop 250 ms (a valid 3.5 MB
//! params parses in a few), for an error of which 1 KiB is ever sent. Two places make such
//! errors, and the adapter keeps a long string from both:
//!
//! - the visitor of the type asked for, given a string it does not take (`visit_str`'s
//!   default, a `char` given a long string): the adapter hands it every string with an error
//!   type of its own, [`Clipped`], whose `invalid_type` and `invalid_value` quote a long
//!   string by its length and as every error quotes the client ([`quoted`]: its first 128
//!   characters);
//! - serde_json itself, asked for a type that is not a string (a map, a number, a sequence)
//!   and finding one: for those types the adapter asks `deserialize_any` instead, which
//!   hands the string to the visitor (above). serde_json's `deserialize_any` visits what it
//!   finds as the typed calls do (`{` a map, `[` a sequence, a number by its form, `null` a
//!   unit), so the values read are the same (a `null` refused where serde_json's typed call
//!   refuses it); its `arbitrary_precision` feature, which would change numbers, is off.
//!   128-bit integers and `f32` are asked as asked (serde_json reads them itself: an `f32`
//!   read as an `f64` first would be rounded twice with `float_roundtrip`), and so are
//!   options, enums, strings and identifiers (map keys included: a number-keyed map reads
//!   its keys from strings). A type whose visitor takes a string where it is asked for a
//!   map or a number (a "string or struct" type of a library tool's arguments) now gets it.
//!
//! What serde buffers to read again (`#[serde(flatten)]`, untagged and internally tagged
//! enums) errs in the outer error type, unbounded. The server's own such part,
//! `completion/complete`'s `ref`, holds only strings (never refused as strings) and names
//! its variant by a string an unknown one of which is quoted by `Display` (copied, not
//! escaped); a library tool's argument type with such parts is bounded outside them only.

use super::quoted;
use serde::de::{self, DeserializeSeed, Deserializer, Unexpected, Visitor};
use std::fmt;

/// serde_json's name for [`RawValue`](serde_json::value::RawValue), which its deserializer
/// reads only from a `deserialize_newtype_struct` of this name with RawValue's own visitor
/// (`serde_json::raw::TOKEN`, not exported): asked as asked, the visitor not wrapped.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// A deserializer whose errors quote a bounded part of any string; see the module docs.
pub struct Bounded<D>(pub D);

/// The error type the wrapped visitors are given a string with: serde_json's, but with
/// `invalid_type` and `invalid_value` quoting a string as [`quoted`] does.
#[derive(Debug)]
pub struct Clipped(serde_json::Error);

impl fmt::Display for Clipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Clipped {}

impl de::Error for Clipped {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Self(de::Error::custom(message))
    }

    fn invalid_type(unexpected: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        match unexpected {
            Unexpected::Str(text) if text.len() > LONG_STRING_BYTES => Self(
                de::Error::invalid_type(Unexpected::Other(&long_string(text)), expected),
            ),
            _ => Self(de::Error::invalid_type(unexpected, expected)),
        }
    }

    fn invalid_value(unexpected: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        match unexpected {
            Unexpected::Str(text) if text.len() > LONG_STRING_BYTES => Self(
                de::Error::invalid_value(Unexpected::Other(&long_string(text)), expected),
            ),
            _ => Self(de::Error::invalid_value(unexpected, expected)),
        }
    }
}

/// Strings longer than this are quoted by their beginning: a few escapes' worth of work,
/// whatever they hold.
const LONG_STRING_BYTES: usize = 128;

/// How an error names a long string: its length first (an error is cut at 200 bytes where
/// it is told), then its beginning, escaped as serde quotes a string.
#[cold]
fn long_string(text: &str) -> String {
    format!("string of {} bytes {}", text.len(), quoted(text))
}

/// A [`Clipped`] error as the deserializer's own (its message kept; serde_json gives it the
/// position it was found at, as it gives any error of a visitor).
fn outer<E: de::Error>(error: Clipped) -> E {
    E::custom(error.0)
}

/// Types that are not strings: asked of `deserialize_any`, so that a string in their place
/// reaches the wrapped visitor (see the module docs).
macro_rules! by_any {
    ($($method:ident),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.0.deserialize_any(Visit::not_null(visitor))
        }
    )*};
}

/// The rest: asked as asked, the visitor wrapped.
macro_rules! as_asked {
    ($($method:ident),*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.0.$method(Visit::new(visitor))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Bounded<D> {
    type Error = D::Error;

    by_any!(
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_f64,
        deserialize_seq,
        deserialize_map
    );

    as_asked!(
        deserialize_any,
        deserialize_i128,
        deserialize_u128,
        deserialize_f32,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_identifier,
        deserialize_ignored_any
    );

    // A unit is `null`, so asked of `deserialize_any` without refusing it.
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(Visit::new(visitor))
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(Visit::new(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        if name == RAW_VALUE_TOKEN {
            return self.0.deserialize_newtype_struct(name, visitor);
        }
        self.0.deserialize_newtype_struct(name, Visit::new(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(Visit::not_null(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(Visit::not_null(visitor))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(Visit::not_null(visitor))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_enum(name, variants, Visit::new(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// A visitor given strings with the [`Clipped`] error type, and what it reads inside a
/// value (an option's, a sequence's, a map's values, an enum's) through [`Bounded`].
struct Visit<V> {
    visitor: V,
    /// Whether `null` is refused, as serde_json refuses it for the type asked when it is
    /// asked through `deserialize_any` (a map, a sequence, a struct, a number or a bool:
    /// visited as a unit, a `serde_json::Map` would read it as empty).
    refuses_null: bool,
}

impl<V> Visit<V> {
    /// Visits as `visitor` does.
    fn new(visitor: V) -> Self {
        Self {
            visitor,
            refuses_null: false,
        }
    }

    /// Visits as `visitor` does, but for `null`, refused.
    fn not_null(visitor: V) -> Self {
        Self {
            visitor,
            refuses_null: true,
        }
    }
}

/// Values that are not strings: their errors quote no client string.
macro_rules! plain_visits {
    ($($method:ident($type:ty)),*) => {$(
        fn $method<E: de::Error>(self, value: $type) -> Result<V::Value, E> {
            self.visitor.$method(value)
        }
    )*};
}

/// Strings: the inner visitor's errors in [`Clipped`], made the deserializer's.
macro_rules! string_visits {
    ($($method:ident($type:ty)),*) => {$(
        fn $method<E: de::Error>(self, value: $type) -> Result<V::Value, E> {
            self.visitor.$method::<Clipped>(value).map_err(outer)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Visit<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    plain_visits!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char)
    );

    string_visits!(
        visit_str(&str),
        visit_borrowed_str(&'de str),
        visit_string(String),
        visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]),
        visit_byte_buf(Vec<u8>)
    );

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        if self.refuses_null {
            return Err(E::invalid_type(Unexpected::Unit, &self.visitor));
        }
        self.visitor.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_some(Bounded(deserializer))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.visitor.visit_newtype_struct(Bounded(deserializer))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_seq(Seq(seq))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(Map(map))
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_enum(Enum(data))
    }
}

/// A seed that deserializes through [`Bounded`].
struct Seed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Bounded(deserializer))
    }
}

/// A sequence whose elements are read through [`Bounded`].
struct Seq<A>(A);

impl<'de, A: de::SeqAccess<'de>> de::SeqAccess<'de> for Seq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// A map whose values are read through [`Bounded`]; its keys as they are (serde_json reads a
/// number key from its string, which `deserialize_any` would not).
struct Map<A>(A);

impl<'de, A: de::MapAccess<'de>> de::MapAccess<'de> for Map<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(seed)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.0.next_value_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// An enum whose variant's content is read through [`Bounded`].
struct Enum<A>(A);

impl<'de, A: de::EnumAccess<'de>> de::EnumAccess<'de> for Enum<A> {
    type Error = A::Error;
    type Variant = Variant<A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        self.0
            .variant_seed(seed)
            .map(|(value, variant)| (value, Variant(variant)))
    }
}

/// A variant's content, read through [`Bounded`].
struct Variant<A>(A);

impl<'de, A: de::VariantAccess<'de>> de::VariantAccess<'de> for Variant<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(Seed(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Visit::new(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.struct_variant(fields, Visit::new(visitor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;
    use serde::Deserialize;
    use serde_json::value::RawValue;
    use serde_json::Value;
    use std::borrow::Cow;
    use std::collections::{BTreeMap, HashMap};

    // The test types are compared through their `Debug` text only.
    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    enum Kind {
        Plain,
        Wrapped(u8),
        Pair(u8, String),
        Shaped { size: u32 },
    }

    #[derive(Debug, Deserialize)]
    struct Unit;

    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    struct Newtype(Vec<i64>);

    #[allow(dead_code)]
    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Everything {
        flag: bool,
        small: u8,
        count: u32,
        delta: i64,
        ratio: f64,
        single: f32,
        wide: Option<u128>,
        letter: Option<char>,
        maybe: Option<HashMap<String, String>>,
        names: Vec<String>,
        by_number: BTreeMap<u32, String>,
        pair: (u8, String),
        kinds: Vec<Kind>,
        unit: Option<Unit>,
        newtype: Option<Newtype>,
        any: Value,
    }

    /// `T` from `text` through [`Bounded`], as `parse_object` reads it.
    fn bounded<T: DeserializeOwned>(text: &str) -> Result<T, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(text);
        T::deserialize(Bounded(&mut de)).and_then(|value| de.end().map(|()| value))
    }

    /// Both readings, each as its value's or its error's text (without the position, which
    /// an error of a visitor is given after its value, and `parse_object` does not tell).
    fn both<T: DeserializeOwned + fmt::Debug>(text: &str) -> (String, String) {
        let show = |result: Result<T, serde_json::Error>| match result {
            Ok(value) => format!("{value:?}"),
            Err(error) => {
                let error = error.to_string();
                let end = error.rfind(" at line ").unwrap_or(error.len());
                format!("error: {}", &error[..end])
            }
        };
        (
            show(serde_json::from_str::<T>(text)),
            show(bounded::<T>(text)),
        )
    }

    const EVERYTHING: &str = r#"{"flag": true, "small": 7, "count": 4000000000, "delta": -5,
        "ratio": 2, "single": 3.4028235677973366e38, "wide": 340282366920938463463374607431768211455, "letter": "é",
        "maybe": {"a": "b"}, "names": ["x", "y\n"], "byNumber": {"1": "one", "22": "two"},
        "pair": [1, "one"], "kinds": ["Plain", {"Wrapped": 3}, {"Pair": [1, "p"]},
        {"Shaped": {"size": 9}}], "unit": null, "newtype": [1, -2],
        "any": {"deep": [1, 2.5, null, true, "s", {"k": -1}]}}"#;

    #[test]
    fn values_read_as_serde_json_reads_them() {
        let (plain, through) = both::<Everything>(EVERYTHING);
        assert!(!plain.starts_with("error"), "{plain}");
        assert_eq!(plain, through);
        assert!(
            plain.contains("single: 3.4028235e38"),
            "f32::MAX, read once: {plain}"
        );
        // `null` where a map is asked is refused, as serde_json refuses it (a
        // `serde_json::Map` visited as a unit would read it as empty).
        let (plain, through) = both::<serde_json::Map<String, Value>>("null");
        assert!(plain.starts_with("error: invalid type: null"), "{plain}");
        assert_eq!(plain, through);
        let (plain, through) = both::<Unit>("null");
        assert_eq!(plain, through);
        assert!(
            !plain.starts_with("error"),
            "a unit struct is null: {plain}"
        );
        for (field, value) in [
            ("small", "256"),
            ("small", "-1"),
            ("small", "1.5"),
            ("count", "\"12\""),
            ("ratio", "\"x\""),
            ("ratio", "null"),
            ("single", "1e39"),
            ("single", "null"),
            ("count", "null"),
            ("names", "null"),
            ("maybe", "{\"a\": null}"),
            ("pair", "null"),
            ("newtype", "null"),
            ("flag", "1"),
            ("flag", "null"),
            ("letter", "\"ab\""),
            ("maybe", "[]"),
            ("maybe", "\"short\""),
            ("names", "{}"),
            ("names", "[1]"),
            ("byNumber", r#"{"x": "y"}"#),
            ("pair", "[1]"),
            ("kinds", r#"["Missing"]"#),
            ("kinds", r#"[{"Wrapped": "x"}]"#),
            ("kinds", r#"[{"Shaped": []}]"#),
            ("unit", "1"),
            ("newtype", "\"n\""),
            ("wide", "-1"),
        ] {
            let mut object: serde_json::Map<String, Value> =
                serde_json::from_str(EVERYTHING).expect("the fixture");
            object.insert(
                field.to_owned(),
                serde_json::from_str(value).expect("a value"),
            );
            let text = Value::Object(object).to_string();
            let (plain, through) = both::<Everything>(&text);
            assert!(plain.starts_with("error"), "{field}: {value}: {plain}");
            assert_eq!(plain, through, "{field}: {value}");
        }
        for text in ["[]", "\"s\"", "{", "{\"flag\": true} x", r#"{"other": 1}"#] {
            let (plain, through) = both::<Everything>(text);
            assert_eq!(plain, through, "{text}");
        }
    }

    #[test]
    fn strings_and_raw_values_are_borrowed_as_without_it() {
        #[derive(Deserialize)]
        struct Borrowing<'a> {
            #[serde(borrow)]
            name: Cow<'a, str>,
            #[serde(borrow)]
            arguments: Option<&'a RawValue>,
        }
        let text = r#"{"name": "echo", "arguments": {"text" : [1, "two"]}}"#;
        let mut de = serde_json::Deserializer::from_str(text);
        let read = Borrowing::deserialize(Bounded(&mut de)).expect("reads");
        assert!(matches!(read.name, Cow::Borrowed("echo")));
        assert_eq!(
            read.arguments.map(RawValue::get),
            Some(r#"{"text" : [1, "two"]}"#)
        );
    }

    #[test]
    fn a_long_string_where_it_does_not_belong_is_quoted_by_its_beginning() {
        let long = "\u{e000}".repeat(10_000);
        let quoted = serde_json::to_string(&long).expect("a string");
        for (field, expected) in [
            ("flag", "invalid type"),
            ("count", "invalid type"),
            ("maybe", "invalid type"),
            ("names", "invalid type"),
            ("pair", "invalid type"),
            ("letter", "invalid value"),
            ("unit", "invalid type"),
            ("newtype", "invalid type"),
            ("byNumber", "invalid type"),
        ] {
            let mut object: serde_json::Map<String, Value> =
                serde_json::from_str(EVERYTHING).expect("the fixture");
            object.insert(
                field.to_owned(),
                serde_json::from_str(&quoted).expect("json"),
            );
            let text = Value::Object(object).to_string();
            let error = bounded::<Everything>(&text).expect_err(field).to_string();
            let shown: String = error.chars().take(300).collect();
            assert!(error.starts_with(expected), "{field}: {shown}");
            assert!(
                error.contains("string of 30000 bytes \"\\u{e000}"),
                "{field}: {shown}"
            );
            assert!(error.len() < 1_500, "{field}: {} bytes", error.len());
        }
        // In a sequence's element and an enum's content too.
        let error = bounded::<Vec<u32>>(&format!("[1, {quoted}]"))
            .expect_err("a string")
            .to_string();
        assert!(
            error.contains("string of 30000 bytes") && error.len() < 1_500,
            "{} bytes",
            error.len()
        );
        let error = bounded::<Kind>(&format!(r#"{{"Wrapped": {quoted}}}"#))
            .expect_err("a string")
            .to_string();
        assert!(
            error.contains("string of 30000 bytes") && error.len() < 1_500,
            "{} bytes",
            error.len()
        );
        // Without it, serde_json quotes all of it.
        let plain = serde_json::from_str::<Vec<u32>>(&format!("[{quoted}]"))
            .expect_err("a string")
            .to_string();
        assert!(plain.len() > 60_000, "{} bytes", plain.len());
    }
}
