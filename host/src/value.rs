//! Conversion of runtime types to the protocol's [`baton_protocol::Value`] (what the service
//! layer publishes), directly through serde: no JSON text in between, so converting an item
//! costs one walk of it, not a print and a parse.
//!
//! Key order is kept: structs serialise their fields in declaration order and opaque values
//! (tool arguments, details) are already order-keeping [`baton_protocol::Value`]s. Numbers
//! follow `serde_json`'s rules, which the previous text round trip had: a non-finite float
//! becomes `null`, an integer beyond ±(2^53−1) is an error.
//!
//! [`to_clipped_value`] also bounds the result: strings are kept whole until a byte budget is
//! spent, after which long strings are cut (at a character boundary) and their paths
//! reported, so a 50 MiB tool output is published as a bounded prefix without ever being
//! copied whole into a [`Value`].

use baton_protocol::chord::{Path, PathSegment};
use baton_protocol::{Map, Number, Value};
use serde::Serialize;
use serde::ser::{self, Impossible};

/// Strings at most this long are never cut by [`to_clipped_value`] (they still count against
/// the budget): identifiers, roles, model names and statuses stay intact however long the
/// text before them.
pub const MIN_CLIPPED_STRING: usize = 256;

/// A value the wire cannot carry (an integer beyond ±(2^53−1), a non-string map key).
#[derive(Debug, thiserror::Error)]
#[error("value cannot be represented as a protocol value: {0}")]
pub struct ValueError(String);

impl ser::Error for ValueError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Self(msg.to_string())
    }
}

/// `value` as a protocol [`Value`].
///
/// # Errors
/// [`ValueError`] if it holds something strict JSON cannot carry.
pub fn to_protocol_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, ValueError> {
    let mut budget = Budget::unlimited();
    value.serialize(ValueSerializer {
        budget: &mut budget,
    })
}

/// A value whose long strings were cut to fit a budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Clipped {
    /// The value, with cut strings shortened.
    pub value: Value,
    /// Paths (from the value's root) of the strings that were cut, in serialisation order.
    pub cut: Vec<Path>,
    /// String bytes the value holds (what the budget was charged).
    pub used: usize,
}

/// `value` as a protocol [`Value`] holding at most about `budget` bytes of string data:
/// strings are kept whole, in serialisation order, while they fit; a longer string that does
/// not fit is cut to what is left (possibly nothing) and its path recorded. Strings of at most
/// [`MIN_CLIPPED_STRING`] bytes are never cut.
///
/// # Errors
/// As [`to_protocol_value`].
pub fn to_clipped_value<T: Serialize + ?Sized>(
    value: &T,
    budget: usize,
) -> Result<Clipped, ValueError> {
    let mut b = Budget {
        limit: budget,
        ..Budget::unlimited()
    };
    let value = value.serialize(ValueSerializer { budget: &mut b })?;
    Ok(Clipped {
        value,
        cut: b.cut,
        used: b.used,
    })
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn prefix_at_boundary(s: &str, max: usize) -> &str {
    &s[..s.floor_char_boundary(max)]
}

/// A byte range of one string, as [`read_string`] returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The text of `offset..end`.
    pub text: String,
    /// Start, in UTF-8 bytes (a character boundary at or before the requested offset).
    pub offset: usize,
    /// End, in UTF-8 bytes (a character boundary): where the next read starts.
    pub end: usize,
    /// The whole string's length in bytes.
    pub total: usize,
}

/// Reads up to `max` bytes from `offset` of the string at `path` in `value`'s serialised
/// form, without converting the rest (other strings are skipped, not copied). The range is
/// moved to character boundaries: `offset` back, the end back (but past at least one
/// character when any remain). `None` when `path` names no string.
///
/// # Errors
/// As [`to_protocol_value`].
pub fn read_string<T: Serialize + ?Sized>(
    value: &T,
    path: &Path,
    offset: usize,
    max: usize,
) -> Result<Option<Slice>, ValueError> {
    let mut b = Budget::unlimited();
    b.extract = Some(Extract {
        target: path.clone(),
        offset,
        max,
        found: None,
    });
    value.serialize(ValueSerializer { budget: &mut b })?;
    Ok(b.extract.and_then(|e| e.found))
}

struct Extract {
    target: Path,
    offset: usize,
    max: usize,
    found: Option<Slice>,
}

fn slice(s: &str, offset: usize, max: usize) -> Slice {
    let start = s.floor_char_boundary(offset);
    let mut end = s.floor_char_boundary(start.saturating_add(max));
    if end == start && start < s.len() {
        // `max` is smaller than the next character: return that one character.
        end = s.ceil_char_boundary(start + 1);
    }
    Slice {
        text: s[start..end].to_owned(),
        offset: start,
        end,
        total: s.len(),
    }
}

struct Budget {
    limit: usize,
    used: usize,
    path: Path,
    cut: Vec<Path>,
    /// Set by [`read_string`]: every string becomes `null` except the target's slice.
    extract: Option<Extract>,
}

impl Budget {
    fn unlimited() -> Self {
        Self {
            limit: usize::MAX,
            used: 0,
            path: Vec::new(),
            cut: Vec::new(),
            extract: None,
        }
    }

    fn string(&mut self, s: &str) -> Value {
        if let Some(e) = &mut self.extract {
            if self.path == e.target {
                e.found = Some(slice(s, e.offset, e.max));
            }
            return Value::Null;
        }
        let left = self.limit.saturating_sub(self.used);
        if s.len() <= left || s.len() <= MIN_CLIPPED_STRING {
            self.used = self.used.saturating_add(s.len());
            return Value::from(s);
        }
        let kept = prefix_at_boundary(s, left);
        self.used += kept.len();
        self.cut.push(self.path.clone());
        Value::from(kept)
    }
}

fn number(n: Result<Number, baton_protocol::NumberError>) -> Result<Value, ValueError> {
    n.map(Value::Number).map_err(ser::Error::custom)
}

fn index(i: usize) -> PathSegment {
    PathSegment::Index(u64::try_from(i).unwrap_or(u64::MAX))
}

struct ValueSerializer<'b> {
    budget: &'b mut Budget,
}

impl<'b> ser::Serializer for ValueSerializer<'b> {
    type Ok = Value;
    type Error = ValueError;
    type SerializeSeq = SeqSerializer<'b>;
    type SerializeTuple = SeqSerializer<'b>;
    type SerializeTupleStruct = SeqSerializer<'b>;
    type SerializeTupleVariant = VariantSerializer<SeqSerializer<'b>>;
    type SerializeMap = MapSerializer<'b>;
    type SerializeStruct = MapSerializer<'b>;
    type SerializeStructVariant = VariantSerializer<MapSerializer<'b>>;

    fn serialize_bool(self, v: bool) -> Result<Value, ValueError> {
        Ok(Value::Bool(v))
    }
    fn serialize_i8(self, v: i8) -> Result<Value, ValueError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<Value, ValueError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<Value, ValueError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_i64(self, v: i64) -> Result<Value, ValueError> {
        number(Number::from_i64(v))
    }
    fn serialize_u8(self, v: u8) -> Result<Value, ValueError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<Value, ValueError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<Value, ValueError> {
        self.serialize_i64(i64::from(v))
    }
    fn serialize_u64(self, v: u64) -> Result<Value, ValueError> {
        let v = i64::try_from(v).map_err(ser::Error::custom)?;
        self.serialize_i64(v)
    }
    fn serialize_f32(self, v: f32) -> Result<Value, ValueError> {
        self.serialize_f64(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<Value, ValueError> {
        // serde_json writes a non-finite float as `null`.
        if v.is_finite() {
            number(Number::from_f64(v))
        } else {
            Ok(Value::Null)
        }
    }
    fn serialize_char(self, v: char) -> Result<Value, ValueError> {
        Ok(Value::from(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<Value, ValueError> {
        Ok(self.budget.string(v))
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<Value, ValueError> {
        Ok(Value::Array(v.iter().map(|b| Value::from(*b)).collect()))
    }
    fn serialize_none(self) -> Result<Value, ValueError> {
        Ok(Value::Null)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<Value, ValueError> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<Value, ValueError> {
        Ok(Value::Null)
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<Value, ValueError> {
        Ok(Value::Null)
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<Value, ValueError> {
        Ok(Value::from(variant))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<Value, ValueError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Value, ValueError> {
        self.budget.path.push(PathSegment::key(variant));
        let inner = value.serialize(ValueSerializer {
            budget: &mut *self.budget,
        });
        self.budget.path.pop();
        let mut m = Map::with_capacity(1);
        m.insert(variant, inner?);
        Ok(Value::Map(m))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<SeqSerializer<'b>, ValueError> {
        Ok(SeqSerializer {
            budget: self.budget,
            items: Vec::with_capacity(len.unwrap_or(0)),
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<SeqSerializer<'b>, ValueError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<SeqSerializer<'b>, ValueError> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, ValueError> {
        self.budget.path.push(PathSegment::key(variant));
        Ok(VariantSerializer {
            variant,
            inner: SeqSerializer {
                budget: self.budget,
                items: Vec::with_capacity(len),
            },
        })
    }
    fn serialize_map(self, len: Option<usize>) -> Result<MapSerializer<'b>, ValueError> {
        Ok(MapSerializer {
            budget: self.budget,
            map: Map::with_capacity(len.unwrap_or(0)),
            key: None,
        })
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        len: usize,
    ) -> Result<MapSerializer<'b>, ValueError> {
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, ValueError> {
        self.budget.path.push(PathSegment::key(variant));
        Ok(VariantSerializer {
            variant,
            inner: MapSerializer {
                budget: self.budget,
                map: Map::with_capacity(len),
                key: None,
            },
        })
    }
}

struct SeqSerializer<'b> {
    budget: &'b mut Budget,
    items: Vec<Value>,
}

impl SeqSerializer<'_> {
    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ValueError> {
        self.budget.path.push(index(self.items.len()));
        let v = value.serialize(ValueSerializer {
            budget: &mut *self.budget,
        });
        self.budget.path.pop();
        self.items.push(v?);
        Ok(())
    }
}

impl ser::SerializeSeq for SeqSerializer<'_> {
    type Ok = Value;
    type Error = ValueError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ValueError> {
        self.push(value)
    }
    fn end(self) -> Result<Value, ValueError> {
        Ok(Value::Array(self.items))
    }
}

impl ser::SerializeTuple for SeqSerializer<'_> {
    type Ok = Value;
    type Error = ValueError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ValueError> {
        self.push(value)
    }
    fn end(self) -> Result<Value, ValueError> {
        Ok(Value::Array(self.items))
    }
}

impl ser::SerializeTupleStruct for SeqSerializer<'_> {
    type Ok = Value;
    type Error = ValueError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ValueError> {
        self.push(value)
    }
    fn end(self) -> Result<Value, ValueError> {
        Ok(Value::Array(self.items))
    }
}

struct MapSerializer<'b> {
    budget: &'b mut Budget,
    map: Map,
    key: Option<String>,
}

impl MapSerializer<'_> {
    fn entry<T: Serialize + ?Sized>(&mut self, key: String, value: &T) -> Result<(), ValueError> {
        self.budget.path.push(PathSegment::Key(key));
        let v = value.serialize(ValueSerializer {
            budget: &mut *self.budget,
        });
        let Some(PathSegment::Key(key)) = self.budget.path.pop() else {
            unreachable!("the key pushed above")
        };
        self.map.insert(key, v?);
        Ok(())
    }
}

impl ser::SerializeMap for MapSerializer<'_> {
    type Ok = Value;
    type Error = ValueError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), ValueError> {
        self.key = Some(key.serialize(KeySerializer)?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ValueError> {
        let key = self
            .key
            .take()
            .ok_or_else(|| ser::Error::custom("map value without a key"))?;
        self.entry(key, value)
    }
    fn end(self) -> Result<Value, ValueError> {
        Ok(Value::Map(self.map))
    }
}

impl ser::SerializeStruct for MapSerializer<'_> {
    type Ok = Value;
    type Error = ValueError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), ValueError> {
        self.entry(key.to_owned(), value)
    }
    fn end(self) -> Result<Value, ValueError> {
        Ok(Value::Map(self.map))
    }
}

/// `{variant: inner}` for tuple and struct variants; the variant's path segment was pushed
/// when it started and is popped when it ends.
struct VariantSerializer<S> {
    variant: &'static str,
    inner: S,
}

fn wrap(variant: &'static str, inner: Value) -> Value {
    let mut m = Map::with_capacity(1);
    m.insert(variant, inner);
    Value::Map(m)
}

impl ser::SerializeTupleVariant for VariantSerializer<SeqSerializer<'_>> {
    type Ok = Value;
    type Error = ValueError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), ValueError> {
        self.inner.push(value)
    }
    fn end(self) -> Result<Value, ValueError> {
        self.inner.budget.path.pop();
        Ok(wrap(self.variant, Value::Array(self.inner.items)))
    }
}

impl ser::SerializeStructVariant for VariantSerializer<MapSerializer<'_>> {
    type Ok = Value;
    type Error = ValueError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), ValueError> {
        self.inner.entry(key.to_owned(), value)
    }
    fn end(self) -> Result<Value, ValueError> {
        self.inner.budget.path.pop();
        Ok(wrap(self.variant, Value::Map(self.inner.map)))
    }
}

/// Map keys: strings, and integers and booleans as their text (as `serde_json` writes them).
struct KeySerializer;

impl ser::Serializer for KeySerializer {
    type Ok = String;
    type Error = ValueError;
    type SerializeSeq = Impossible<String, ValueError>;
    type SerializeTuple = Impossible<String, ValueError>;
    type SerializeTupleStruct = Impossible<String, ValueError>;
    type SerializeTupleVariant = Impossible<String, ValueError>;
    type SerializeMap = Impossible<String, ValueError>;
    type SerializeStruct = Impossible<String, ValueError>;
    type SerializeStructVariant = Impossible<String, ValueError>;

    fn serialize_bool(self, v: bool) -> Result<String, ValueError> {
        Ok(v.to_string())
    }
    fn serialize_i8(self, v: i8) -> Result<String, ValueError> {
        Ok(v.to_string())
    }
    fn serialize_i16(self, v: i16) -> Result<String, ValueError> {
        Ok(v.to_string())
    }
    fn serialize_i32(self, v: i32) -> Result<String, ValueError> {
        Ok(v.to_string())
    }
    fn serialize_i64(self, v: i64) -> Result<String, ValueError> {
        Ok(v.to_string())
    }
    fn serialize_u8(self, v: u8) -> Result<String, ValueError> {
        Ok(v.to_string())
    }
    fn serialize_u16(self, v: u16) -> Result<String, ValueError> {
        Ok(v.to_string())
    }
    fn serialize_u32(self, v: u32) -> Result<String, ValueError> {
        Ok(v.to_string())
    }
    fn serialize_u64(self, v: u64) -> Result<String, ValueError> {
        Ok(v.to_string())
    }
    fn serialize_f32(self, _v: f32) -> Result<String, ValueError> {
        Err(key_error())
    }
    fn serialize_f64(self, _v: f64) -> Result<String, ValueError> {
        Err(key_error())
    }
    fn serialize_char(self, v: char) -> Result<String, ValueError> {
        Ok(v.to_string())
    }
    fn serialize_str(self, v: &str) -> Result<String, ValueError> {
        Ok(v.to_owned())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<String, ValueError> {
        Err(key_error())
    }
    fn serialize_none(self) -> Result<String, ValueError> {
        Err(key_error())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<String, ValueError> {
        Err(key_error())
    }
    fn serialize_unit(self) -> Result<String, ValueError> {
        Err(key_error())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<String, ValueError> {
        Err(key_error())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<String, ValueError> {
        Ok(variant.to_owned())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<String, ValueError> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _value: &T,
    ) -> Result<String, ValueError> {
        Err(key_error())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq, ValueError> {
        Err(key_error())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple, ValueError> {
        Err(key_error())
    }
    fn serialize_tuple_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleStruct, ValueError> {
        Err(key_error())
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant, ValueError> {
        Err(key_error())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap, ValueError> {
        Err(key_error())
    }
    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStruct, ValueError> {
        Err(key_error())
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant, ValueError> {
        Err(key_error())
    }
}

fn key_error() -> ValueError {
    ser::Error::custom("map keys must be strings")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AgentMessage, UserMessage};

    #[test]
    fn messages_convert_with_key_order_kept() {
        let v = to_protocol_value(&AgentMessage::User(UserMessage::text("hi", 3))).unwrap();
        assert_eq!(
            v.to_json(),
            r#"{"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":3}"#
        );
    }

    #[test]
    fn direct_conversion_matches_the_json_text_round_trip() {
        let m = AgentMessage::User(UserMessage::text("h\u{e9}llo \"q\"", 1_748_568_000_000));
        let via_text = Value::from_json(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(to_protocol_value(&m).unwrap(), via_text);
        assert_eq!(to_protocol_value(&f64::NAN).unwrap(), Value::Null);
        assert!(to_protocol_value(&u64::MAX).is_err());
        assert!(to_protocol_value(&(1u64 << 53)).is_err());
    }

    #[test]
    fn clipping_cuts_long_strings_past_the_budget_and_reports_their_paths() {
        let long = "\u{e9}".repeat(1000); // 2,000 bytes
        let m = AgentMessage::User(UserMessage::text(long.clone(), 3));
        let whole = to_clipped_value(&m, 10_000).unwrap();
        assert!(whole.cut.is_empty());
        assert_eq!(whole.value, to_protocol_value(&m).unwrap());
        let clipped = to_clipped_value(&m, 1001).unwrap();
        let path = vec![
            PathSegment::key("content"),
            PathSegment::Index(0),
            PathSegment::key("text"),
        ];
        assert_eq!(clipped.cut, vec![path]);
        let text = clipped
            .value
            .as_map()
            .unwrap()
            .get("content")
            .unwrap()
            .as_array()
            .unwrap()[0]
            .as_map()
            .unwrap()
            .get("text")
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        // "user" and "text" (8 bytes) came first; the cut lands on a character boundary.
        assert_eq!(text.len(), 992);
        assert!(long.starts_with(&text));
        // Reading a range moves it to character boundaries and says where to go on.
        let target = vec![
            PathSegment::key("content"),
            PathSegment::Index(0),
            PathSegment::key("text"),
        ];
        let s = read_string(&m, &target, 1, 3).unwrap().unwrap();
        assert_eq!(
            (s.text.as_str(), s.offset, s.end, s.total),
            ("\u{e9}", 0, 2, 2000)
        );
        let s = read_string(&m, &target, 1998, 100).unwrap().unwrap();
        assert_eq!((s.offset, s.end), (1998, 2000));
        // A range shorter than the character it starts in still returns that character.
        let s = read_string(&m, &target, 2, 1).unwrap().unwrap();
        assert_eq!((s.text.as_str(), s.offset, s.end), ("\u{e9}", 2, 4));
        assert_eq!(
            read_string(&m, &vec![PathSegment::key("nope")], 0, 1).unwrap(),
            None
        );
        // Short strings are never cut, even with nothing left.
        let tiny = to_clipped_value(&m, 0).unwrap();
        assert_eq!(
            tiny.value.as_map().unwrap().get("role").unwrap().as_str(),
            Some("user")
        );
    }
}
