//! Validated but undecoded snapshots and updates, shared by the decoded and wire parsers.
//!
//! Upstream has one shape checker (`assertSubscriptionSnapshot`, `assertProviderUpdate`,
//! `assertInstance`) parameterised by an op validator: `assertValidOp` for the decoded form,
//! `assertValidWireOp` for the wire form. Here the same checker is generic over what it makes
//! of each op: a decoded [`Op`](crate::chord::Op), or the borrowed wire tuple.

use crate::chord::address::InstanceAddress;
use crate::chord::error::{ChordError, Subject};
use crate::chord::fields::{assert_keys, id, integer_at_least, record};
use crate::chord::mode::ServiceMode;
use crate::value::Value;

/// A subscription snapshot with ops of type `T`.
#[derive(Debug)]
pub(crate) struct RawSubscription<T> {
    pub(crate) service_id: String,
    pub(crate) mode: ServiceMode,
    pub(crate) instances: Vec<RawInstance<T>>,
}

/// An instance snapshot with ops of type `T`.
#[derive(Debug)]
pub(crate) struct RawInstance<T> {
    pub(crate) instance: Option<InstanceAddress>,
    pub(crate) members: Vec<RawMember<T>>,
}

/// A member snapshot with ops of type `T`.
#[derive(Debug)]
pub(crate) enum RawMember<T> {
    Method {
        name: String,
    },
    State {
        name: String,
        sequence: u64,
        ops: Vec<T>,
    },
}

/// A provider update with ops of type `T`.
#[derive(Debug)]
pub(crate) enum RawUpdate<T> {
    State {
        instance: Option<InstanceAddress>,
        member: String,
        sequence: u64,
        ops: Vec<T>,
    },
    Unavailable,
    Replaced(RawInstance<T>),
    Spawned(RawInstance<T>),
    Closed(InstanceAddress),
    Reset(RawSubscription<T>),
}

/// How to read each op, and how to recognise a root replacement (for `reset`).
pub(crate) trait OpGrammar<'a> {
    /// What an op becomes.
    type Op;
    /// Validates one op tuple.
    fn parse(&self, op: &'a Value) -> Result<Self::Op, ChordError>;
    /// True for an `r` op.
    fn is_replace(&self, op: &Self::Op) -> bool;
}

/// Parses an op array.
fn ops<'a, G: OpGrammar<'a>>(grammar: &G, items: &'a [Value]) -> Result<Vec<G::Op>, ChordError> {
    items.iter().map(|op| grammar.parse(op)).collect()
}

/// Upstream `assertSubscriptionSnapshot`.
pub(crate) fn parse_subscription<'a, G: OpGrammar<'a>>(
    grammar: &G,
    value: &'a Value,
) -> Result<RawSubscription<G::Op>, ChordError> {
    const SUBJECT: Subject = Subject::SubscriptionSnapshot;
    let map = record(value, SUBJECT)?;
    assert_keys(map, &["serviceId", "mode", "instances"], &[], SUBJECT)?;
    let (Some(service_id), Some(mode), Some(Value::Array(instances))) = (
        id(map.get("serviceId")),
        map.get("mode")
            .and_then(Value::as_str)
            .and_then(ServiceMode::parse),
        map.get("instances"),
    ) else {
        return Err(ChordError::Invalid(SUBJECT));
    };
    Ok(RawSubscription {
        service_id: service_id.to_owned(),
        mode,
        instances: instances
            .iter()
            .map(|instance| parse_instance(grammar, instance))
            .collect::<Result<_, _>>()?,
    })
}

/// Upstream `assertInstance`.
pub(crate) fn parse_instance<'a, G: OpGrammar<'a>>(
    grammar: &G,
    value: &'a Value,
) -> Result<RawInstance<G::Op>, ChordError> {
    const SUBJECT: Subject = Subject::InstanceSnapshot;
    let map = record(value, SUBJECT)?;
    assert_keys(map, &["members"], &["instance"], SUBJECT)?;
    let instance = map
        .get("instance")
        .map(InstanceAddress::parse)
        .transpose()?;
    let Some(Value::Array(members)) = map.get("members") else {
        return Err(ChordError::Invalid(SUBJECT));
    };
    Ok(RawInstance {
        instance,
        members: members
            .iter()
            .map(|member| parse_member(grammar, member))
            .collect::<Result<_, _>>()?,
    })
}

fn parse_member<'a, G: OpGrammar<'a>>(
    grammar: &G,
    value: &'a Value,
) -> Result<RawMember<G::Op>, ChordError> {
    let map = record(value, Subject::MemberSnapshot)?;
    match map.get("kind").and_then(Value::as_str) {
        Some("method") => {
            const SUBJECT: Subject = Subject::MethodSnapshot;
            assert_keys(map, &["name", "kind"], &[], SUBJECT)?;
            let name = id(map.get("name")).ok_or(ChordError::Invalid(SUBJECT))?;
            Ok(RawMember::Method {
                name: name.to_owned(),
            })
        }
        Some("state") => {
            const SUBJECT: Subject = Subject::StateSnapshot;
            assert_keys(map, &["name", "kind", "sequence", "ops"], &[], SUBJECT)?;
            let (Some(name), Some(sequence), Some(Value::Array(items))) = (
                id(map.get("name")),
                integer_at_least(map.get("sequence"), 0),
                map.get("ops"),
            ) else {
                return Err(ChordError::Invalid(SUBJECT));
            };
            Ok(RawMember::State {
                name: name.to_owned(),
                sequence,
                ops: ops(grammar, items)?,
            })
        }
        _ => Err(ChordError::Invalid(Subject::MemberSnapshot)),
    }
}

/// Upstream `assertProviderUpdate` (with the newer `reset` branch).
pub(crate) fn parse_update<'a, G: OpGrammar<'a>>(
    grammar: &G,
    value: &'a Value,
) -> Result<RawUpdate<G::Op>, ChordError> {
    let map = record(value, Subject::ProviderUpdate)?;
    match map.get("type").and_then(Value::as_str) {
        Some("state") => {
            assert_keys(
                map,
                &["type", "member", "sequence", "ops"],
                &["instance"],
                Subject::StateUpdateKeys,
            )?;
            let (Some(member), Some(sequence), Some(Value::Array(items))) = (
                id(map.get("member")),
                integer_at_least(map.get("sequence"), 1),
                map.get("ops"),
            ) else {
                return Err(ChordError::Invalid(Subject::StateUpdate));
            };
            let instance = map
                .get("instance")
                .map(InstanceAddress::parse)
                .transpose()?;
            Ok(RawUpdate::State {
                instance,
                member: member.to_owned(),
                sequence,
                ops: ops(grammar, items)?,
            })
        }
        Some("unavailable") => {
            assert_keys(map, &["type"], &[], Subject::UnavailableUpdate)?;
            Ok(RawUpdate::Unavailable)
        }
        Some("replaced") => {
            assert_keys(map, &["type", "snapshot"], &[], Subject::ReplacementUpdate)?;
            let snapshot = map.get("snapshot").unwrap_or(&Value::Null);
            Ok(RawUpdate::Replaced(parse_instance(grammar, snapshot)?))
        }
        Some("spawned") => {
            assert_keys(map, &["type", "instance"], &[], Subject::SpawnUpdate)?;
            let instance = map.get("instance").unwrap_or(&Value::Null);
            Ok(RawUpdate::Spawned(parse_instance(grammar, instance)?))
        }
        Some("closed") => {
            assert_keys(map, &["type", "instance"], &[], Subject::CloseUpdate)?;
            let instance = map.get("instance").unwrap_or(&Value::Null);
            Ok(RawUpdate::Closed(InstanceAddress::parse(instance)?))
        }
        Some("reset") => {
            assert_keys(map, &["type", "snapshot"], &[], Subject::ResetUpdate)?;
            let snapshot = map.get("snapshot").unwrap_or(&Value::Null);
            let snapshot = parse_subscription(grammar, snapshot)?;
            let full = snapshot.instances.iter().all(|instance| {
                instance.members.iter().all(|member| match member {
                    RawMember::Method { .. } => true,
                    RawMember::State { ops, .. } => {
                        matches!(ops.as_slice(), [op] if grammar.is_replace(op))
                    }
                })
            });
            if !full {
                return Err(ChordError::ResetNotRootReplacements);
            }
            Ok(RawUpdate::Reset(snapshot))
        }
        _ => Err(ChordError::Invalid(Subject::ProviderUpdate)),
    }
}

/// The decoded grammar: `assertValidOp`, producing [`Op`](crate::chord::Op)s.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Decoded;

impl<'a> OpGrammar<'a> for Decoded {
    type Op = crate::chord::op::Op;

    fn parse(&self, op: &'a Value) -> Result<Self::Op, ChordError> {
        crate::chord::op::Op::parse(op)
    }

    fn is_replace(&self, op: &Self::Op) -> bool {
        op.is_replace()
    }
}

/// The wire grammar: `assertValidWireOp`, keeping each tuple's validated view for the decoder.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wire;

impl<'a> OpGrammar<'a> for Wire {
    type Op = crate::chord::wire_op::WireOp<'a>;

    fn parse(&self, op: &'a Value) -> Result<Self::Op, ChordError> {
        crate::chord::wire_op::WireOp::parse(op)
    }

    fn is_replace(&self, op: &Self::Op) -> bool {
        matches!(op, crate::chord::wire_op::WireOp::Replace(_))
    }
}
