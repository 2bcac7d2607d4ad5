//! The opaque payload value: strict JSON that keeps map key order.
//!
//! `call`, `result` and `update` payloads are opaque to the envelope layer. Upstream carries
//! them as plain JavaScript values, so what crosses the wire is exactly JSON: null, booleans,
//! finite numbers, strings, arrays and string-keyed maps. Maps keep the order their keys
//! arrived in, because upstream's encoder writes keys in insertion order and a byte-exact peer
//! must write them back the same way.

use std::fmt;

use compact_str::CompactString;

/// A JSON number as the wire carries it.
///
/// The invariant (enforced by every constructor) mirrors JavaScript's single number type:
/// an integral value is always an integer within ±(2^53−1); only non-integral values and
/// negative zero are floats. So `1.0` and `1` are the same number and encode to the same byte.
#[derive(Clone, Copy)]
pub struct Number(N);

#[derive(Clone, Copy)]
enum N {
    Int(i64),
    Float(f64),
}

/// Largest integer JavaScript represents exactly: 2^53 − 1.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// Why a number cannot be carried on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NumberError {
    /// NaN or an infinity.
    #[error("CBOR numbers must be finite")]
    NotFinite,
    /// An integral value beyond ±(2^53−1).
    #[error("CBOR integers must be safe JavaScript integers")]
    UnsafeInteger,
}

impl Number {
    /// An integer; fails outside ±(2^53−1).
    pub fn from_i64(v: i64) -> Result<Self, NumberError> {
        if (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(&v) {
            Ok(Self(N::Int(v)))
        } else {
            Err(NumberError::UnsafeInteger)
        }
    }

    /// Any finite `f64`; integral values become integers (negative zero stays a float).
    pub fn from_f64(v: f64) -> Result<Self, NumberError> {
        if !v.is_finite() {
            return Err(NumberError::NotFinite);
        }
        if v.fract() == 0.0 && !(v == 0.0 && v.is_sign_negative()) {
            if v.abs() > MAX_SAFE_INTEGER as f64 {
                return Err(NumberError::UnsafeInteger);
            }
            // Exact: |v| ≤ 2^53 − 1 and integral.
            #[expect(
                clippy::cast_possible_truncation,
                reason = "checked integral and in range"
            )]
            return Ok(Self(N::Int(v as i64)));
        }
        Ok(Self(N::Float(v)))
    }

    /// The integer value, if this number is integral.
    pub fn as_i64(&self) -> Option<i64> {
        match self.0 {
            N::Int(i) => Some(i),
            N::Float(_) => None,
        }
    }

    /// The integer value if integral and non-negative.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_i64().and_then(|i| u64::try_from(i).ok())
    }

    /// The value as an `f64` (exact for every number this type holds).
    #[expect(clippy::cast_precision_loss, reason = "safe integers are exact in f64")]
    pub fn as_f64(&self) -> f64 {
        match self.0 {
            N::Int(i) => i as f64,
            N::Float(f) => f,
        }
    }

    /// True when the number is carried as a CBOR integer.
    pub fn is_integer(&self) -> bool {
        matches!(self.0, N::Int(_))
    }
}

impl PartialEq for Number {
    fn eq(&self, other: &Self) -> bool {
        match (self.0, other.0) {
            (N::Int(a), N::Int(b)) => a == b,
            // Bitwise so that -0.0 and 0.0 differ, as they do on the wire.
            (N::Float(a), N::Float(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

impl Eq for Number {}

impl fmt::Debug for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            N::Int(i) => write!(f, "{i}"),
            N::Float(v) => write!(f, "{v:?}"),
        }
    }
}

macro_rules! number_from_small_int {
    ($($t:ty),*) => {$(
        impl From<$t> for Number {
            fn from(v: $t) -> Self {
                Self(N::Int(i64::from(v)))
            }
        }
        impl From<$t> for Value {
            fn from(v: $t) -> Self {
                Value::Number(Number::from(v))
            }
        }
    )*};
}
number_from_small_int!(u8, u16, u32, i8, i16, i32);

/// An ordered string-keyed map. Keys are unique; iteration follows insertion (wire) order.
///
/// Lookups are linear: protocol maps are small, and order matters more than asymptotics here.
/// Large maps from a peer are bounded by the container limit and checked for duplicates by
/// the decoder with a hash set.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Map {
    /// Keys up to 24 bytes (nearly all) are stored inline: a decoded map allocates its entry
    /// vector and its values, not one string per key.
    entries: Vec<(CompactString, Value)>,
}

impl Map {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty map with room for `n` entries.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            entries: Vec::with_capacity(n),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries
            .iter()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    }

    /// The value under `key`, mutably.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Value> {
        self.entries
            .iter_mut()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    }

    /// True when `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value`: replaces in place if present (keeping its position), else appends.
    /// Returns the previous value.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) -> Option<Value> {
        let key = key.into();
        match self.get_mut(&key) {
            Some(slot) => Some(std::mem::replace(slot, value)),
            None => {
                self.entries.push((CompactString::from(key), value));
                None
            }
        }
    }

    /// Appends without checking for an existing key. The caller guarantees uniqueness
    /// (the decoder does, with its own duplicate check).
    pub(crate) fn push_unique(&mut self, key: &str, value: Value) {
        self.entries.push((CompactString::new(key), value));
    }

    /// Removes `key`, keeping the order of the rest. Returns its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let pos = self.entries.iter().position(|(k, _)| k.as_str() == key)?;
        Some(self.entries.remove(pos).1)
    }

    /// Entries in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Keys in order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// Consumes the map into its entries, in order.
    pub fn into_entries(self) -> Vec<(String, Value)> {
        self.entries
            .into_iter()
            .map(|(k, v)| (k.into_string(), v))
            .collect()
    }
}

impl fmt::Debug for Map {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Into<String>> FromIterator<(K, Value)> for Map {
    /// Later duplicates replace earlier ones in place.
    fn from_iter<I: IntoIterator<Item = (K, Value)>>(iter: I) -> Self {
        let mut map = Self::new();
        for (k, v) in iter {
            map.insert(k, v);
        }
        map
    }
}

/// A strict JSON value: what an opaque `call`, `result` or `update` may hold.
#[derive(Clone, PartialEq, Eq)]
pub enum Value {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A finite number (see [`Number`] for the integer/float rule).
    Number(Number),
    /// A UTF-8 string.
    String(String),
    /// An array.
    Array(Vec<Value>),
    /// A string-keyed map in wire order.
    Map(Map),
}

impl Value {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The array, if this is one.
    pub fn as_array(&self) -> Option<&Vec<Self>> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The map, if this is one.
    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Self::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Self::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The integer, if this is an integral number.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Number(n) => n.as_i64(),
            _ => None,
        }
    }

    /// The non-negative integer, if this is one.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Self::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    /// True for `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Null => f.write_str("null"),
            Self::Bool(b) => write!(f, "{b}"),
            Self::Number(n) => write!(f, "{n}"),
            Self::String(s) => write!(f, "{s:?}"),
            Self::Array(a) => f.debug_list().entries(a).finish(),
            Self::Map(m) => fmt::Debug::fmt(m, f),
        }
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::String(v.to_owned())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Self::String(v)
    }
}

impl From<Number> for Value {
    fn from(v: Number) -> Self {
        Self::Number(v)
    }
}

impl From<Map> for Value {
    fn from(v: Map) -> Self {
        Self::Map(v)
    }
}

impl From<Vec<Self>> for Value {
    fn from(v: Vec<Self>) -> Self {
        Self::Array(v)
    }
}

impl TryFrom<i64> for Value {
    type Error = NumberError;
    fn try_from(v: i64) -> Result<Self, NumberError> {
        Number::from_i64(v).map(Self::Number)
    }
}

impl TryFrom<u64> for Value {
    type Error = NumberError;
    fn try_from(v: u64) -> Result<Self, NumberError> {
        let v = i64::try_from(v).map_err(|_| NumberError::UnsafeInteger)?;
        Number::from_i64(v).map(Self::Number)
    }
}

impl TryFrom<usize> for Value {
    type Error = NumberError;
    fn try_from(v: usize) -> Result<Self, NumberError> {
        let v = i64::try_from(v).map_err(|_| NumberError::UnsafeInteger)?;
        Number::from_i64(v).map(Self::Number)
    }
}

impl TryFrom<f64> for Value {
    type Error = NumberError;
    fn try_from(v: f64) -> Result<Self, NumberError> {
        Number::from_f64(v).map(Self::Number)
    }
}
