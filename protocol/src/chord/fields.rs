//! Strict-object checks shared by the chord parsers (upstream `record` / `assertKeys`).

use crate::chord::error::{ChordError, Subject};
use crate::chord::js::non_negative_integer;
use crate::value::{Map, Value};

/// The value as a map, else `Invalid <subject>` (upstream `record`).
pub(crate) fn record(value: &Value, subject: Subject) -> Result<&Map, ChordError> {
    value.as_map().ok_or(ChordError::Invalid(subject))
}

/// Every `required` key present and no key outside `required ∪ optional`
/// (upstream `assertKeys`), else `Invalid <subject>`.
pub(crate) fn assert_keys(
    map: &Map,
    required: &[&str],
    optional: &[&str],
    subject: Subject,
) -> Result<(), ChordError> {
    let missing = required.iter().any(|key| !map.contains_key(key));
    let extra = map
        .keys()
        .any(|key| !required.contains(&key) && !optional.contains(&key));
    if missing || extra {
        Err(ChordError::Invalid(subject))
    } else {
        Ok(())
    }
}

/// A non-empty string (upstream `isId`).
pub(crate) fn id(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// An integer ≥ `minimum` (upstream `isInteger(value, minimum)`).
pub(crate) fn integer_at_least(value: Option<&Value>, minimum: u64) -> Option<u64> {
    value
        .and_then(non_negative_integer)
        .filter(|n| *n >= minimum)
}
