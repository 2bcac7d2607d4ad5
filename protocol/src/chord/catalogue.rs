//! The catalogue: which services a provider offers remotely, and in which mode.

use std::collections::HashSet;

use crate::chord::error::{ChordError, Subject};
use crate::chord::fields::{assert_keys, id, record};
use crate::chord::mode::ServiceMode;
use crate::value::{Map, Value};

/// One catalogue entry, `{"serviceId", "mode"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CatalogueEntry {
    /// The service (non-empty).
    pub service_id: String,
    /// Singleton or keyed.
    pub mode: ServiceMode,
}

impl CatalogueEntry {
    /// An entry.
    pub fn new(service_id: impl Into<String>, mode: ServiceMode) -> Self {
        Self {
            service_id: service_id.into(),
            mode,
        }
    }

    /// Parses one strict `{serviceId, mode}` map.
    ///
    /// # Errors
    /// `Invalid service catalogue entry` for any other shape or value.
    pub fn parse(value: &Value) -> Result<Self, ChordError> {
        Self::parse_as(value, Subject::CatalogueEntry)
    }

    /// Shape errors are always "entry"; value errors are reported as `value_subject`
    /// (upstream's list parser says "catalogue" for those).
    fn parse_as(value: &Value, value_subject: Subject) -> Result<Self, ChordError> {
        let map = record(value, Subject::CatalogueEntry)?;
        assert_keys(map, &["serviceId", "mode"], &[], Subject::CatalogueEntry)?;
        let service_id = id(map.get("serviceId")).ok_or(ChordError::Invalid(value_subject))?;
        let mode = map
            .get("mode")
            .and_then(Value::as_str)
            .and_then(ServiceMode::parse)
            .ok_or(ChordError::Invalid(value_subject))?;
        Ok(Self::new(service_id, mode))
    }

    /// The wire map, keys in upstream order: `serviceId`, `mode`.
    pub fn to_value(&self) -> Value {
        let mut map = Map::with_capacity(2);
        map.insert("serviceId", Value::from(self.service_id.as_str()));
        map.insert("mode", Value::from(self.mode.as_str()));
        Value::Map(map)
    }
}

/// Parses a catalogue (upstream `parseServiceCatalogue`): an array of entries with unique
/// service ids, kept in order.
///
/// # Errors
/// `Invalid service catalogue` when the value is not an array, an entry has a bad id or mode,
/// or an id repeats; `Invalid service catalogue entry` when an entry is not a strict
/// `{serviceId, mode}` map.
pub fn parse_catalogue(value: &Value) -> Result<Vec<CatalogueEntry>, ChordError> {
    let Value::Array(items) = value else {
        return Err(ChordError::Invalid(Subject::Catalogue));
    };
    let mut seen = HashSet::with_capacity(items.len());
    let mut entries = Vec::with_capacity(items.len());
    for item in items {
        let entry = CatalogueEntry::parse_as(item, Subject::Catalogue)?;
        if !seen.insert(entry.service_id.clone()) {
            return Err(ChordError::Invalid(Subject::Catalogue));
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// The catalogue as a wire array, in the given (registration) order.
pub fn catalogue_to_value(entries: &[CatalogueEntry]) -> Value {
    Value::Array(entries.iter().map(CatalogueEntry::to_value).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    #[test]
    fn catalogue_round_trips_in_registration_order() {
        let json = r#"[{"serviceId":"pi.models","mode":"singleton"},{"serviceId":"pi.dialogs","mode":"keyed"}]"#;
        let entries = parse_catalogue(&v(json)).unwrap();
        assert_eq!(
            entries,
            vec![
                CatalogueEntry::new("pi.models", ServiceMode::Singleton),
                CatalogueEntry::new("pi.dialogs", ServiceMode::Keyed),
            ]
        );
        assert_eq!(catalogue_to_value(&entries).to_json(), json);
    }

    #[test]
    fn catalogue_rejects_unknown_modes_and_repeated_ids() {
        for bad in [
            r#"[{"serviceId":"pi.models","mode":"unknown"}]"#,
            r#"[{"serviceId":"","mode":"keyed"}]"#,
            r#"[{"serviceId":"a","mode":"keyed"},{"serviceId":"a","mode":"singleton"}]"#,
            r#"{"serviceId":"a","mode":"keyed"}"#,
        ] {
            assert_eq!(
                parse_catalogue(&v(bad)).unwrap_err().to_string(),
                "Invalid service catalogue",
                "{bad}"
            );
        }
    }

    #[test]
    fn catalogue_entry_with_the_wrong_keys_names_the_entry() {
        for bad in [
            r#"[{"serviceId":"a","mode":"keyed","x":1}]"#,
            r#"[{"serviceId":"a"}]"#,
            r#"["a"]"#,
        ] {
            assert_eq!(
                parse_catalogue(&v(bad)).unwrap_err().to_string(),
                "Invalid service catalogue entry",
                "{bad}"
            );
        }
    }
}
