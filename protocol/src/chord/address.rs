//! `InstanceAddress`: which instance of a keyed service a call or update is about.

use std::fmt;

use crate::chord::error::{ChordError, Subject};
use crate::chord::fields::{assert_keys, id, integer_at_least, record};
use crate::chord::js::safe_number;
use crate::value::{Map, Value};

/// `{"key": string≥1, "generation": integer≥1}`: one live incarnation of a keyed instance.
///
/// The generation starts at 1 and grows by one each time a key is spawned again, so an
/// address names exactly one incarnation. Generations above 2^53 − 1 cannot cross the wire.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceAddress {
    /// The instance key (non-empty).
    pub key: String,
    /// The incarnation, ≥ 1.
    pub generation: u64,
}

impl InstanceAddress {
    /// An address.
    pub fn new(key: impl Into<String>, generation: u64) -> Self {
        Self {
            key: key.into(),
            generation,
        }
    }

    /// Parses a strict `{key, generation}` map.
    ///
    /// # Errors
    /// `Invalid service instance address` for any other shape, an empty key, or a generation
    /// that is not an integer ≥ 1.
    pub fn parse(value: &Value) -> Result<Self, ChordError> {
        const SUBJECT: Subject = Subject::InstanceAddress;
        let map = record(value, SUBJECT)?;
        assert_keys(map, &["key", "generation"], &[], SUBJECT)?;
        match (
            id(map.get("key")),
            integer_at_least(map.get("generation"), 1),
        ) {
            (Some(key), Some(generation)) => Ok(Self::new(key, generation)),
            _ => Err(ChordError::Invalid(SUBJECT)),
        }
    }

    /// The wire map, keys in upstream order: `key`, `generation`.
    pub fn to_value(&self) -> Value {
        let mut map = Map::with_capacity(2);
        map.insert("key", Value::from(self.key.as_str()));
        map.insert("generation", safe_number(self.generation));
        Value::Map(map)
    }
}

impl fmt::Display for InstanceAddress {
    /// `<key>@<generation>`, as upstream describes keyed states.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.key, self.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    #[test]
    fn address_parses_strict_key_and_generation() {
        let a = InstanceAddress::parse(&v(r#"{"generation":2,"key":"k"}"#)).unwrap();
        assert_eq!(a, InstanceAddress::new("k", 2));
        assert_eq!(a.to_value().to_json(), r#"{"key":"k","generation":2}"#);
    }

    #[test]
    fn address_rejects_zero_generation_empty_key_and_extra_keys() {
        for bad in [
            r#"{"key":"k","generation":0}"#,
            r#"{"key":"k","generation":1.5}"#,
            r#"{"key":"","generation":1}"#,
            r#"{"key":"k"}"#,
            r#"{"key":"k","generation":1,"x":1}"#,
            r#"["k",1]"#,
            "null",
        ] {
            assert_eq!(
                InstanceAddress::parse(&v(bad)).unwrap_err().to_string(),
                "Invalid service instance address",
                "{bad}"
            );
        }
    }
}
