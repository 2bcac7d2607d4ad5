//! Subscription snapshots: what `subscribe` answers, and what `replaced`/`spawned`/`reset`
//! carry.
//!
//! In this decoded form a state member holds its current value; on the wire (and in
//! upstream's decoded form) it is `{"name","kind":"state","sequence","ops":[["r", value]]}`.
//! A lone `r` op is identical in both vocabularies, so [`SubscriptionSnapshot::to_value`] is
//! also the wire form.
//!
//! Parsing accepts any op batch upstream's validators accept, then folds it into a value: the
//! batch must begin with `r` (`Replicated state snapshot is not a base operation batch`,
//! which upstream reports when the consumer hydrates) and the rest is applied to it.

use crate::chord::address::InstanceAddress;
use crate::chord::apply::apply_owned;
use crate::chord::error::ChordError;
use crate::chord::js::safe_number;
use crate::chord::mode::ServiceMode;
use crate::chord::op::Op;
use crate::chord::raw::{Decoded, RawInstance, RawMember, RawSubscription, parse_subscription};
use crate::value::{Map, Value};

/// Whether a member is a method or a replicated state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemberKind {
    /// A callable member (`"method"`).
    Method,
    /// A replicated state (`"state"`).
    State,
}

impl MemberKind {
    /// The wire spelling: `"method"` or `"state"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Method => "method",
            Self::State => "state",
        }
    }
}

/// One member of an instance snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberSnapshot {
    /// `{"name", "kind":"method"}`.
    Method {
        /// The member name (non-empty).
        name: String,
    },
    /// `{"name", "kind":"state", "sequence", "ops":[["r", value]]}`.
    State {
        /// The member name (non-empty).
        name: String,
        /// The state's published sequence the value corresponds to (≥ 0).
        sequence: u64,
        /// The state's value at that sequence.
        value: Value,
    },
}

impl MemberSnapshot {
    /// A method member.
    pub fn method(name: impl Into<String>) -> Self {
        Self::Method { name: name.into() }
    }

    /// A state member at `sequence` holding `value`.
    pub fn state(name: impl Into<String>, sequence: u64, value: Value) -> Self {
        Self::State {
            name: name.into(),
            sequence,
            value,
        }
    }

    /// The member name.
    pub fn name(&self) -> &str {
        match self {
            Self::Method { name } | Self::State { name, .. } => name,
        }
    }

    /// Method or state.
    pub fn kind(&self) -> MemberKind {
        match self {
            Self::Method { .. } => MemberKind::Method,
            Self::State { .. } => MemberKind::State,
        }
    }

    /// The map, keys in upstream order: `name`, `kind`, `sequence`, `ops`.
    pub fn to_value(&self) -> Value {
        let mut map = Map::with_capacity(4);
        map.insert("name", Value::from(self.name()));
        map.insert("kind", Value::from(self.kind().as_str()));
        if let Self::State {
            sequence, value, ..
        } = self
        {
            map.insert("sequence", safe_number(*sequence));
            map.insert(
                "ops",
                Value::Array(vec![Value::Array(vec![Value::from("r"), value.clone()])]),
            );
        }
        Value::Map(map)
    }
}

/// The members of one service instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSnapshot {
    /// The address: absent for a singleton, present for a keyed instance.
    pub instance: Option<InstanceAddress>,
    /// The members, in the provider's order (upstream sorts names by UTF-16 code units).
    pub members: Vec<MemberSnapshot>,
}

impl InstanceSnapshot {
    /// An instance snapshot.
    pub fn new(instance: Option<InstanceAddress>, members: Vec<MemberSnapshot>) -> Self {
        Self { instance, members }
    }

    /// Parses a decoded instance snapshot (upstream `assertInstance` with `assertValidOp`),
    /// folding each state's ops into its value.
    ///
    /// # Errors
    /// `Invalid service instance snapshot`, `Invalid service member snapshot`,
    /// `Invalid service method snapshot`, `Invalid service state snapshot`,
    /// `Invalid service instance address`, an op validation error, or
    /// `Replicated state snapshot is not a base operation batch`.
    pub fn parse(value: &Value) -> Result<Self, ChordError> {
        Self::from_raw(crate::chord::raw::parse_instance(&Decoded, value)?)
    }

    pub(crate) fn from_raw(raw: RawInstance<Op>) -> Result<Self, ChordError> {
        Ok(Self {
            instance: raw.instance,
            members: raw
                .members
                .into_iter()
                .map(|member| match member {
                    RawMember::Method { name } => Ok(MemberSnapshot::Method { name }),
                    RawMember::State {
                        name,
                        sequence,
                        ops,
                    } => Ok(MemberSnapshot::State {
                        name,
                        sequence,
                        value: fold_base_batch(ops)?,
                    }),
                })
                .collect::<Result<_, ChordError>>()?,
        })
    }

    /// The map, keys in upstream order: `instance`?, `members`.
    pub fn to_value(&self) -> Value {
        let mut map = Map::with_capacity(2);
        if let Some(instance) = &self.instance {
            map.insert("instance", instance.to_value());
        }
        map.insert(
            "members",
            Value::Array(self.members.iter().map(MemberSnapshot::to_value).collect()),
        );
        Value::Map(map)
    }

    /// The state members, as `(name, sequence, value)`.
    pub fn states(&self) -> impl Iterator<Item = (&str, u64, &Value)> {
        self.members.iter().filter_map(|member| match member {
            MemberSnapshot::State {
                name,
                sequence,
                value,
            } => Some((name.as_str(), *sequence, value)),
            MemberSnapshot::Method { .. } => None,
        })
    }
}

/// The answer to `subscribe`: every instance of one service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionSnapshot {
    /// The service (non-empty).
    pub service_id: String,
    /// Singleton (exactly one unaddressed instance) or keyed (any number, addressed).
    pub mode: ServiceMode,
    /// The instances (keyed: upstream sorts them by key with `localeCompare`).
    pub instances: Vec<InstanceSnapshot>,
}

impl SubscriptionSnapshot {
    /// A snapshot.
    pub fn new(
        service_id: impl Into<String>,
        mode: ServiceMode,
        instances: Vec<InstanceSnapshot>,
    ) -> Self {
        Self {
            service_id: service_id.into(),
            mode,
            instances,
        }
    }

    /// Parses a decoded subscription snapshot (upstream `parseServiceSubscriptionSnapshot`),
    /// folding each state's ops into its value. Duplicate member names are accepted here.
    ///
    /// # Errors
    /// `Invalid service subscription snapshot`, any instance or member error (see
    /// [`InstanceSnapshot::parse`]).
    pub fn parse(value: &Value) -> Result<Self, ChordError> {
        Self::from_raw(parse_subscription(&Decoded, value)?)
    }

    pub(crate) fn from_raw(raw: RawSubscription<Op>) -> Result<Self, ChordError> {
        Ok(Self {
            service_id: raw.service_id,
            mode: raw.mode,
            instances: raw
                .instances
                .into_iter()
                .map(InstanceSnapshot::from_raw)
                .collect::<Result<_, _>>()?,
        })
    }

    /// The map (decoded and wire form alike), keys in upstream order:
    /// `serviceId`, `mode`, `instances`.
    pub fn to_value(&self) -> Value {
        let mut map = Map::with_capacity(3);
        map.insert("serviceId", Value::from(self.service_id.as_str()));
        map.insert("mode", Value::from(self.mode.as_str()));
        map.insert(
            "instances",
            Value::Array(
                self.instances
                    .iter()
                    .map(InstanceSnapshot::to_value)
                    .collect(),
            ),
        );
        Value::Map(map)
    }
}

/// Folds a state's snapshot batch into its value: it must begin with `r`.
pub(crate) fn fold_base_batch(ops: Vec<Op>) -> Result<Value, ChordError> {
    let mut ops = ops.into_iter();
    let Some(Op::Replace(mut value)) = ops.next() else {
        return Err(ChordError::NotBaseBatch);
    };
    apply_owned(&mut value, ops.collect())?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    fn err(json: &str) -> String {
        SubscriptionSnapshot::parse(&v(json))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn snapshot_round_trips_in_upstream_key_order() {
        let json = r#"{"serviceId":"pi.models","mode":"singleton","instances":[{"members":[{"name":"select","kind":"method"},{"name":"state","kind":"state","sequence":0,"ops":[["r",{"revision":0}]]}]}]}"#;
        let snapshot = SubscriptionSnapshot::parse(&v(json)).unwrap();
        assert_eq!(
            snapshot,
            SubscriptionSnapshot::new(
                "pi.models",
                ServiceMode::Singleton,
                vec![InstanceSnapshot::new(
                    None,
                    vec![
                        MemberSnapshot::method("select"),
                        MemberSnapshot::state("state", 0, v(r#"{"revision":0}"#)),
                    ]
                )]
            )
        );
        assert_eq!(snapshot.to_value().to_json(), json);
    }

    #[test]
    fn keyed_instances_carry_their_address_first() {
        let json = r#"{"serviceId":"pi.dialogs","mode":"keyed","instances":[{"instance":{"key":"dialog-1","generation":1},"members":[]}]}"#;
        let snapshot = SubscriptionSnapshot::parse(&v(json)).unwrap();
        assert_eq!(
            snapshot.instances[0].instance,
            Some(InstanceAddress::new("dialog-1", 1))
        );
        assert_eq!(snapshot.to_value().to_json(), json);
    }

    #[test]
    fn snapshot_validation_messages_follow_upstream() {
        assert_eq!(err("[]"), "Invalid service subscription snapshot");
        assert_eq!(
            err(r#"{"serviceId":"s","mode":"other","instances":[]}"#),
            "Invalid service subscription snapshot"
        );
        assert_eq!(
            err(r#"{"serviceId":"s","mode":"keyed","instances":[],"x":1}"#),
            "Invalid service subscription snapshot"
        );
        assert_eq!(
            err(r#"{"serviceId":"s","mode":"keyed","instances":[{"members":{}}]}"#),
            "Invalid service instance snapshot"
        );
        assert_eq!(
            err(r#"{"serviceId":"s","mode":"keyed","instances":[{"members":[],"x":1}]}"#),
            "Invalid service instance snapshot"
        );
        assert_eq!(
            err(
                r#"{"serviceId":"s","mode":"keyed","instances":[{"instance":{"key":"k"},"members":[]}]}"#
            ),
            "Invalid service instance address"
        );
        assert_eq!(
            err(r#"{"serviceId":"s","mode":"keyed","instances":[{"members":[1]}]}"#),
            "Invalid service member snapshot"
        );
        assert_eq!(
            err(
                r#"{"serviceId":"s","mode":"keyed","instances":[{"members":[{"name":"x","kind":"other"}]}]}"#
            ),
            "Invalid service member snapshot"
        );
        assert_eq!(
            err(
                r#"{"serviceId":"s","mode":"keyed","instances":[{"members":[{"name":"x","kind":"method","sequence":0}]}]}"#
            ),
            "Invalid service method snapshot"
        );
        assert_eq!(
            err(
                r#"{"serviceId":"s","mode":"keyed","instances":[{"members":[{"name":"","kind":"method"}]}]}"#
            ),
            "Invalid service method snapshot"
        );
        assert_eq!(
            err(
                r#"{"serviceId":"s","mode":"keyed","instances":[{"members":[{"name":"x","kind":"state","sequence":-1,"ops":[]}]}]}"#
            ),
            "Invalid service state snapshot"
        );
        assert_eq!(
            err(
                r#"{"serviceId":"s","mode":"keyed","instances":[{"members":[{"name":"x","kind":"state","sequence":0}]}]}"#
            ),
            "Invalid service state snapshot"
        );
    }

    #[test]
    fn decoded_snapshot_ops_use_the_decoded_validator() {
        assert_eq!(
            err(
                r#"{"serviceId":"s","mode":"singleton","instances":[{"members":[{"name":"x","kind":"state","sequence":0,"ops":[["s",1]]}]}]}"#
            ),
            "s arity"
        );
    }

    #[test]
    fn a_state_snapshot_must_be_a_base_batch() {
        assert_eq!(
            err(
                r#"{"serviceId":"s","mode":"singleton","instances":[{"members":[{"name":"x","kind":"state","sequence":0,"ops":[]}]}]}"#
            ),
            "Replicated state snapshot is not a base operation batch"
        );
        let folded = SubscriptionSnapshot::parse(&v(
            r#"{"serviceId":"s","mode":"singleton","instances":[{"members":[{"name":"x","kind":"state","sequence":3,"ops":[["r",{"a":"x"}],["a",["a"],"y"]]}]}]}"#,
        ))
        .unwrap();
        assert_eq!(
            folded.instances[0].states().collect::<Vec<_>>(),
            vec![("x", 3, &v(r#"{"a":"xy"}"#))]
        );
    }

    #[test]
    fn wire_snapshots_accept_wire_forms_that_decoded_ones_reject() {
        let json = r##"{"serviceId":"s","mode":"singleton","instances":[{"members":[{"name":"x","kind":"state","sequence":1,"ops":[["r",{"a":""}],["#",0,["a"]],["a",0,"1"],["a","2"]]}]}]}"##;
        assert_eq!(err(json), "unknown op verb: #");
        let snapshot = SubscriptionSnapshot::parse_wire(&v(json)).unwrap();
        assert_eq!(
            snapshot.instances[0].states().collect::<Vec<_>>(),
            vec![("x", 1, &v(r#"{"a":"12"}"#))]
        );
    }

    #[test]
    fn duplicate_member_names_are_accepted_by_the_parser() {
        assert!(SubscriptionSnapshot::parse(&v(
            r#"{"serviceId":"s","mode":"singleton","instances":[{"members":[{"name":"x","kind":"method"},{"name":"x","kind":"method"}]}]}"#
        ))
        .is_ok());
    }
}
