//! `ProviderUpdate`: the decoded `update` of a `service_update` message.

use crate::chord::address::InstanceAddress;
use crate::chord::error::ChordError;
use crate::chord::js::safe_number;
use crate::chord::op::Op;
use crate::chord::raw::{Decoded, RawUpdate, parse_update};
use crate::chord::snapshot::{InstanceSnapshot, SubscriptionSnapshot};
use crate::value::{Map, Value};

/// What a provider publishes to one subscription (upstream `ServiceProviderUpdate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderUpdate {
    /// A replicated state published a non-empty batch:
    /// `{"type":"state","instance"?,"member","sequence","ops"}`.
    State {
        /// The keyed instance, absent for a singleton.
        instance: Option<InstanceAddress>,
        /// The state member (non-empty).
        member: String,
        /// The state's new sequence (≥ 1; the previous one plus one).
        sequence: u64,
        /// The batch.
        ops: Vec<Op>,
    },
    /// The singleton was withdrawn or its provider disposed: `{"type":"unavailable"}`.
    Unavailable,
    /// The singleton was replaced: `{"type":"replaced","snapshot"}` (no address).
    Replaced {
        /// The replacement instance.
        snapshot: InstanceSnapshot,
    },
    /// A keyed instance was spawned: `{"type":"spawned","instance"}` (with address).
    Spawned {
        /// The new instance.
        instance: InstanceSnapshot,
    },
    /// A keyed instance was closed: `{"type":"closed","instance":{key,generation}}`.
    Closed {
        /// The closed instance.
        instance: InstanceAddress,
    },
    /// The subscriber fell behind; start over from this snapshot:
    /// `{"type":"reset","snapshot"}` (pi 1.0.x).
    Reset {
        /// The full current snapshot.
        snapshot: SubscriptionSnapshot,
    },
}

impl ProviderUpdate {
    /// The `type` tag.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::State { .. } => "state",
            Self::Unavailable => "unavailable",
            Self::Replaced { .. } => "replaced",
            Self::Spawned { .. } => "spawned",
            Self::Closed { .. } => "closed",
            Self::Reset { .. } => "reset",
        }
    }

    /// Parses a decoded update (upstream `parseServiceProviderUpdate`: wire-only op forms are
    /// rejected). Snapshot states are folded into values.
    ///
    /// # Errors
    /// `Invalid service provider update`, `Invalid state update`,
    /// `Invalid service state update`, `Invalid unavailable update`,
    /// `Invalid replacement update`, `Invalid spawn update`, `Invalid close update`,
    /// `Invalid reset update`, `Service reset must contain full root replacements`, any
    /// snapshot, address or op validation error.
    pub fn parse(value: &Value) -> Result<Self, ChordError> {
        Self::from_raw(parse_update(&Decoded, value)?)
    }

    pub(crate) fn from_raw(raw: RawUpdate<Op>) -> Result<Self, ChordError> {
        Ok(match raw {
            RawUpdate::State {
                instance,
                member,
                sequence,
                ops,
            } => Self::State {
                instance,
                member,
                sequence,
                ops,
            },
            RawUpdate::Unavailable => Self::Unavailable,
            RawUpdate::Replaced(snapshot) => Self::Replaced {
                snapshot: InstanceSnapshot::from_raw(snapshot)?,
            },
            RawUpdate::Spawned(instance) => Self::Spawned {
                instance: InstanceSnapshot::from_raw(instance)?,
            },
            RawUpdate::Closed(instance) => Self::Closed { instance },
            RawUpdate::Reset(snapshot) => Self::Reset {
                snapshot: SubscriptionSnapshot::from_raw(snapshot)?,
            },
        })
    }

    /// The decoded map, keys in upstream order (`type` first; see the variants).
    pub fn to_value(&self) -> Value {
        match self {
            Self::State {
                instance,
                member,
                sequence,
                ops,
            } => state_update_value(
                instance.as_ref(),
                member,
                *sequence,
                ops.iter().map(Op::to_value).collect(),
            ),
            Self::Unavailable => tagged("unavailable", None),
            Self::Replaced { snapshot } => {
                tagged("replaced", Some(("snapshot", snapshot.to_value())))
            }
            Self::Spawned { instance } => {
                tagged("spawned", Some(("instance", instance.to_value())))
            }
            Self::Closed { instance } => tagged("closed", Some(("instance", instance.to_value()))),
            Self::Reset { snapshot } => tagged("reset", Some(("snapshot", snapshot.to_value()))),
        }
    }
}

/// `{"type": tag, key: value}`.
pub(crate) fn tagged(tag: &str, field: Option<(&str, Value)>) -> Value {
    let mut map = Map::with_capacity(2);
    map.insert("type", Value::from(tag));
    if let Some((key, value)) = field {
        map.insert(key, value);
    }
    Value::Map(map)
}

/// `{"type":"state","instance"?,"member","sequence","ops"}` with the given op tuples.
pub(crate) fn state_update_value(
    instance: Option<&InstanceAddress>,
    member: &str,
    sequence: u64,
    ops: Vec<Value>,
) -> Value {
    let mut map = Map::with_capacity(5);
    map.insert("type", Value::from("state"));
    if let Some(instance) = instance {
        map.insert("instance", instance.to_value());
    }
    map.insert("member", Value::from(member));
    map.insert("sequence", safe_number(sequence));
    map.insert("ops", Value::Array(ops));
    Value::Map(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    fn err(json: &str) -> String {
        ProviderUpdate::parse(&v(json)).unwrap_err().to_string()
    }

    #[test]
    fn updates_round_trip_in_upstream_key_order() {
        for json in [
            r#"{"type":"state","member":"state","sequence":1,"ops":[["s",["revision"],1]]}"#,
            r#"{"type":"state","instance":{"key":"dialog-1","generation":1},"member":"request","sequence":1,"ops":[["s",["value"],1]]}"#,
            r#"{"type":"unavailable"}"#,
            r#"{"type":"replaced","snapshot":{"members":[{"name":"state","kind":"state","sequence":4,"ops":[["r",1]]}]}}"#,
            r#"{"type":"spawned","instance":{"instance":{"key":"dialog-1","generation":1},"members":[{"name":"request","kind":"state","sequence":0,"ops":[["r",{"value":0}]]}]}}"#,
            r#"{"type":"closed","instance":{"key":"dialog-1","generation":1}}"#,
            r#"{"type":"reset","snapshot":{"serviceId":"test.delivery-counter","mode":"singleton","instances":[{"members":[{"name":"state","kind":"state","sequence":101,"ops":[["r",{"value":101}]]}]}]}}"#,
        ] {
            let update = ProviderUpdate::parse(&v(json)).unwrap();
            assert_eq!(update.to_value().to_json(), json);
        }
    }

    #[test]
    fn state_update_with_sequence_zero_is_invalid() {
        assert_eq!(
            err(r#"{"type":"state","member":"state","sequence":0,"ops":[]}"#),
            "Invalid service state update"
        );
    }

    #[test]
    fn update_validation_messages_follow_upstream() {
        assert_eq!(err("[]"), "Invalid service provider update");
        assert_eq!(
            err(r#"{"type":"other"}"#),
            "Invalid service provider update"
        );
        assert_eq!(err(r#"{"member":"m"}"#), "Invalid service provider update");
        assert_eq!(
            err(r#"{"type":"state","member":"state","sequence":1,"ops":[],"x":1}"#),
            "Invalid state update"
        );
        assert_eq!(
            err(r#"{"type":"state","member":"","sequence":1,"ops":[]}"#),
            "Invalid service state update"
        );
        assert_eq!(
            err(r#"{"type":"state","member":"m","sequence":1,"ops":{}}"#),
            "Invalid service state update"
        );
        assert_eq!(
            err(
                r#"{"type":"state","instance":{"key":"k","generation":0},"member":"m","sequence":1,"ops":[]}"#
            ),
            "Invalid service instance address"
        );
        assert_eq!(
            err(r#"{"type":"unavailable","x":1}"#),
            "Invalid unavailable update"
        );
        assert_eq!(err(r#"{"type":"replaced"}"#), "Invalid replacement update");
        assert_eq!(
            err(r#"{"type":"spawned","snapshot":{}}"#),
            "Invalid spawn update"
        );
        assert_eq!(
            err(r#"{"type":"closed","instance":{"key":"k"}}"#),
            "Invalid service instance address"
        );
        assert_eq!(err(r#"{"type":"closed"}"#), "Invalid close update");
        assert_eq!(
            err(r#"{"type":"replaced","snapshot":{"members":[]},"x":1}"#),
            "Invalid replacement update"
        );
    }

    #[test]
    fn decoded_updates_reject_wire_only_ops() {
        assert_eq!(
            err(r#"{"type":"state","member":"state","sequence":1,"ops":[["s",0,1]]}"#),
            "path is not an array"
        );
        assert_eq!(
            err(r##"{"type":"state","member":"state","sequence":1,"ops":[["#",0,["a"]]]}"##),
            "unknown op verb: #"
        );
    }

    #[test]
    fn reset_verdict_table() {
        let reset = |members: &str| {
            format!(
                r#"{{"type":"reset","snapshot":{{"serviceId":"test.delivery-counter","mode":"singleton","instances":[{{"members":{members}}}]}}}}"#
            )
        };
        // zeroOps
        assert_eq!(
            err(&reset(
                r#"[{"name":"state","kind":"state","sequence":1,"ops":[]}]"#
            )),
            "Service reset must contain full root replacements"
        );
        // twoReplaces
        assert_eq!(
            err(&reset(
                r#"[{"name":"state","kind":"state","sequence":1,"ops":[["r",1],["r",2]]}]"#
            )),
            "Service reset must contain full root replacements"
        );
        // a delta instead of a replacement
        assert_eq!(
            err(&reset(
                r#"[{"name":"state","kind":"state","sequence":1,"ops":[["s",["a"],1]]}]"#
            )),
            "Service reset must contain full root replacements"
        );
        // extraKey
        assert_eq!(
            err(
                r#"{"type":"reset","snapshot":{"serviceId":"s","mode":"singleton","instances":[]},"extra":true}"#
            ),
            "Invalid reset update"
        );
        // zeroSequence
        assert!(
            ProviderUpdate::parse(&v(&reset(
                r#"[{"name":"state","kind":"state","sequence":0,"ops":[["r",0]]}]"#
            )))
            .is_ok()
        );
        // duplicateMemberNames
        assert!(
            ProviderUpdate::parse(&v(&reset(
                r#"[{"name":"state","kind":"state","sequence":1,"ops":[["r",0]]},{"name":"state","kind":"state","sequence":1,"ops":[["r",0]]}]"#
            )))
            .is_ok()
        );
    }
}
