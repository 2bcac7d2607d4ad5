//! serde support for [`Value`]: JSON text in and out with key order kept
//! ([`Value::from_json`], [`Value::to_json`], `Display`), above the data types.
//!
//! Deserialising builds our own [`Map`] in the order the source yields entries, so
//! `serde_json` needs no `preserve_order` feature.

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::value::{Map, Number, NumberError, Value};

impl Value {
    /// Parses JSON text (key order kept; a later duplicate key replaces the earlier value).
    ///
    /// # Errors
    /// Malformed JSON, or a number the wire cannot carry (non-finite or an unsafe integer).
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Renders compact JSON text in key order.
    ///
    /// Negative zero is written `-0` (serde_json would write `-0.0`; JavaScript's
    /// `JSON.stringify` writes `0`, losing the sign). [`from_json`](Self::from_json) reads
    /// `-0` back as the float −0, so the text round-trips to the same CBOR (`fb8000000000000000`).
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(128);
        let mut ser = serde_json::Serializer::with_formatter(&mut out, JsonText);
        // Serialising our own tree cannot fail: every key is a string and every number is
        // finite.
        if self.serialize(&mut ser).is_err() {
            return String::new();
        }
        // serde_json writes UTF-8 only.
        String::from_utf8(out).unwrap_or_default()
    }
}

/// The compact JSON text of [`Value::to_json`].
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json())
    }
}

/// serde_json's compact output, except `-0` for negative zero.
struct JsonText;

impl serde_json::ser::Formatter for JsonText {
    fn write_f64<W: ?Sized + std::io::Write>(&mut self, w: &mut W, v: f64) -> std::io::Result<()> {
        if v == 0.0 && v.is_sign_negative() {
            return w.write_all(b"-0");
        }
        serde_json::ser::CompactFormatter.write_f64(w, v)
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Null => s.serialize_unit(),
            Self::Bool(b) => s.serialize_bool(*b),
            Self::Number(n) => n.serialize(s),
            Self::String(v) => s.serialize_str(v),
            Self::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Self::Map(map) => map.serialize(s),
        }
    }
}

impl Serialize for Map {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl Serialize for Number {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.as_i64() {
            Some(i) => s.serialize_i64(i),
            None => s.serialize_f64(self.as_f64()),
        }
    }
}

struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a strict JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Value::deserialize(d)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Number::from_i64(v).map(Value::Number).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        let v = i64::try_from(v).map_err(|_| E::custom(NumberError::UnsafeInteger))?;
        self.visit_i64(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v).map(Value::Number).map_err(E::custom)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        // Cap the hint: it comes from the input.
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::with_capacity(access.size_hint().unwrap_or(0).min(1024));
        while let Some((k, v)) = access.next_entry::<String, Value>()? {
            map.insert(k, v);
        }
        Ok(Value::Map(map))
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}
