//! Per-subscription state codecs: one delta codec per (instance address, state member).
//!
//! A server keeps one [`StateEncoder`] per subscription per connection; a client keeps one
//! [`StateDecoder`] per subscription. Their registries follow the same lifecycle (upstream
//! `StateCodecRegistry`, spec §6.8), so every decoder sees exactly the batches its encoder
//! produced:
//!
//! | event | effect on the registry |
//! | --- | --- |
//! | snapshot (subscribe response) | reset, then a fresh codec per state member |
//! | `state` | that member's codec; missing → `Unknown service state …` |
//! | `r` inside a batch | resets only that member's codec |
//! | `replaced` | reset, then codecs for the replacement's state members |
//! | `unavailable` | reset |
//! | `spawned` | codecs added for the new instance; a repeat → `Duplicate service state …` |
//! | `closed` | that address's codecs removed |
//! | `reset` | reset, then codecs for every state member of the new snapshot |
//!
//! [`SubscriptionSnapshot::parse_wire`] lives here too, above the snapshot types: it is a
//! fresh decoder's snapshot.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::chord::address::InstanceAddress;
use crate::chord::delta_codec::{OpDecoder, OpEncoder};
use crate::chord::error::{ChordError, UpdateRefused};
use crate::chord::op::Op;
use crate::chord::raw::{
    RawInstance, RawMember, RawSubscription, RawUpdate, Wire, parse_subscription, parse_update,
};
use crate::chord::replica::Replica;
use crate::chord::snapshot::{InstanceSnapshot, SubscriptionSnapshot};
use crate::chord::update::{ProviderUpdate, state_update_value};
use crate::chord::update_cbor::{parse_state_update, read_leaf_update};
use crate::chord::wire_op::WireOp;
use crate::limits::VALIDATED;
use crate::value::Value;

/// Codecs keyed by instance address (absent for a singleton), then member name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Registry<C> {
    instances: BTreeMap<Option<InstanceAddress>, BTreeMap<String, C>>,
}

impl<C> Default for Registry<C> {
    fn default() -> Self {
        Self {
            instances: BTreeMap::new(),
        }
    }
}

/// `<member>` or `<key>@<generation>.<member>`, as upstream names a state.
fn describe(instance: Option<&InstanceAddress>, member: &str) -> String {
    match instance {
        None => member.to_owned(),
        Some(address) => format!("{address}.{member}"),
    }
}

impl<C> Registry<C> {
    /// The codec of a state, if there is one.
    fn get(&self, instance: &Option<InstanceAddress>, member: &str) -> Option<&C> {
        self.instances
            .get(instance)
            .and_then(|members| members.get(member))
    }
}

impl<C: Default> Registry<C> {
    fn contains(&self, instance: &Option<InstanceAddress>, member: &str) -> bool {
        self.instances
            .get(instance)
            .is_some_and(|members| members.contains_key(member))
    }

    /// Adds a fresh codec; a repeat is `Duplicate service state …`.
    fn add(
        &mut self,
        instance: &Option<InstanceAddress>,
        member: &str,
    ) -> Result<&mut C, ChordError> {
        if self.contains(instance, member) {
            return Err(ChordError::DuplicateState(describe(
                instance.as_ref(),
                member,
            )));
        }
        Ok(self
            .instances
            .entry(instance.clone())
            .or_default()
            .entry(member.to_owned())
            .or_default())
    }

    /// The codec of a state; missing is `Unknown service state …`.
    fn get_mut(
        &mut self,
        instance: &Option<InstanceAddress>,
        member: &str,
    ) -> Result<&mut C, ChordError> {
        self.instances
            .get_mut(instance)
            .and_then(|members| members.get_mut(member))
            .ok_or_else(|| ChordError::UnknownState(describe(instance.as_ref(), member)))
    }

    fn remove_instance(&mut self, address: &InstanceAddress) {
        self.instances.remove(&Some(address.clone()));
    }

    /// Adds fresh codecs for every state member of `instance`, checking every name first so
    /// that a duplicate leaves the registry unchanged.
    fn add_instance(&mut self, instance: &InstanceSnapshot) -> Result<(), ChordError> {
        let mut fresh: Vec<&str> = Vec::new();
        for (name, _, _) in instance.states() {
            if fresh.contains(&name) || self.contains(&instance.instance, name) {
                return Err(ChordError::DuplicateState(describe(
                    instance.instance.as_ref(),
                    name,
                )));
            }
            fresh.push(name);
        }
        for name in fresh {
            self.add(&instance.instance, name)?;
        }
        Ok(())
    }

    /// A registry with fresh codecs for every state member of `instances`.
    fn for_instances<'i>(
        instances: impl IntoIterator<Item = &'i InstanceSnapshot>,
    ) -> Result<Self, ChordError> {
        let mut registry = Self::default();
        for instance in instances {
            registry.add_instance(instance)?;
        }
        Ok(registry)
    }
}

/// Server side: encodes one subscription's snapshot and updates into wire values.
///
/// Encoding is transactional: on error the encoder's state is unchanged. The state is
/// `Clone + Eq`: subscribers whose encoders compare equal get identical bytes for the same
/// update, so a server may encode once, share the frame, and clone the advanced encoder into
/// the others.
///
/// The dictionaries are immutable once shared: a clone shares them (O(1)) and an encoder
/// copies them only when it next advances while shared (copy on write). So clones of one
/// state that none has advanced since are recognised in O(1) by
/// [`shares_state_with`](Self::shares_state_with), which is what lets a server match a
/// subscriber to a shared encoding without comparing dictionaries. `==` tries that first and
/// falls back to comparing contents.
#[derive(Debug, Clone, Default)]
pub struct StateEncoder {
    codecs: Arc<Registry<OpEncoder>>,
}

impl PartialEq for StateEncoder {
    fn eq(&self, other: &Self) -> bool {
        self.shares_state_with(other) || self.codecs == other.codecs
    }
}

impl Eq for StateEncoder {}

impl StateEncoder {
    /// An encoder with no states (encode the snapshot first).
    pub fn new() -> Self {
        Self::default()
    }

    /// True when `self` and `other` are clones of one state that neither has advanced since
    /// (O(1)). Such encoders are equal; equal encoders that reached their state separately
    /// are not recognised here (use `==`).
    pub fn shares_state_with(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.codecs, &other.codecs)
    }

    /// Encodes the subscribe response and starts a fresh codec for every state member.
    ///
    /// The wire snapshot is identical to the decoded one: each state is `[["r", value]]`.
    ///
    /// # Errors
    /// `Duplicate service state …` when an instance repeats a state name.
    pub fn encode_snapshot(
        &mut self,
        snapshot: &SubscriptionSnapshot,
    ) -> Result<Value, ChordError> {
        self.codecs = Arc::new(Registry::for_instances(&snapshot.instances)?);
        Ok(snapshot.to_value())
    }

    /// Encodes one provider update, advancing the codecs as §6.8 says.
    ///
    /// # Errors
    /// `Unknown service state …` for a `state` update without a codec; an op validation error;
    /// `Duplicate service state …` for a repeated state in a new snapshot or instance.
    pub fn encode_update(&mut self, update: &ProviderUpdate) -> Result<Value, ChordError> {
        match update {
            ProviderUpdate::State {
                instance,
                member,
                sequence,
                ops,
            } => {
                // A failed lookup or validation changes nothing (`encode` validates every op
                // first), so at worst the dictionaries were copied unchanged.
                let wire = Arc::make_mut(&mut self.codecs)
                    .get_mut(instance, member)?
                    .encode(ops)?;
                Ok(state_update_value(
                    instance.as_ref(),
                    member,
                    *sequence,
                    wire,
                ))
            }
            ProviderUpdate::Unavailable => {
                self.codecs = Arc::default();
                Ok(update.to_value())
            }
            ProviderUpdate::Replaced { snapshot } => {
                self.codecs = Arc::new(Registry::for_instances([snapshot])?);
                Ok(update.to_value())
            }
            ProviderUpdate::Spawned { instance } => {
                // `add_instance` checks every name before adding any.
                Arc::make_mut(&mut self.codecs).add_instance(instance)?;
                Ok(update.to_value())
            }
            ProviderUpdate::Closed { instance } => {
                Arc::make_mut(&mut self.codecs).remove_instance(instance);
                Ok(update.to_value())
            }
            ProviderUpdate::Reset { snapshot } => {
                self.codecs = Arc::new(Registry::for_instances(&snapshot.instances)?);
                Ok(update.to_value())
            }
        }
    }
}

/// Client side: validates and decodes one subscription's wire snapshot and updates.
///
/// Wire values are checked with the wire grammar (upstream
/// `parseWire*`) before decoding. After an error the stream is broken: upstream fails the
/// connection, and the decoder's state is unspecified (decoding of snapshots, `replaced` and
/// `reset` is transactional; decoding of `state` and `spawned` may have advanced).
///
/// A clone shares the dictionaries (O(1)) until either side next changes them (copy on
/// write, as [`StateEncoder`] does): a client keeps the decoder's state as of the first
/// update of a batch it hands on undecoded, so the batch can be decoded later.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateDecoder {
    codecs: Arc<Registry<OpDecoder>>,
}

impl StateDecoder {
    /// A decoder with no states (decode the snapshot first).
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes the subscribe response and starts a fresh codec for every state member.
    ///
    /// # Errors
    /// Any snapshot validation error (wire grammar), `Duplicate service state …`, a decode
    /// error, or `Replicated state snapshot is not a base operation batch`.
    pub fn decode_snapshot(&mut self, value: &Value) -> Result<SubscriptionSnapshot, ChordError> {
        let raw = parse_subscription(&Wire, value)?;
        let mut codecs = Registry::default();
        let decoded = decode_subscription(&mut codecs, raw)?;
        let snapshot = SubscriptionSnapshot::from_raw(decoded)?;
        self.codecs = Arc::new(codecs);
        Ok(snapshot)
    }

    /// Decodes one wire provider update, advancing the codecs as §6.8 says.
    ///
    /// # Errors
    /// Any update validation error (wire grammar), `Unknown service state …`,
    /// `Duplicate service state …`, `unresolvable path: …`, or
    /// `Replicated state snapshot is not a base operation batch`.
    pub fn decode_update(&mut self, value: &Value) -> Result<ProviderUpdate, ChordError> {
        Ok(match parse_update(&Wire, value)? {
            RawUpdate::State {
                instance,
                member,
                sequence,
                ops,
            } => {
                let ops = Arc::make_mut(&mut self.codecs)
                    .get_mut(&instance, &member)?
                    .decode_parsed(ops)?;
                ProviderUpdate::State {
                    instance,
                    member,
                    sequence,
                    ops,
                }
            }
            RawUpdate::Unavailable => {
                self.codecs = Arc::default();
                ProviderUpdate::Unavailable
            }
            RawUpdate::Replaced(raw) => {
                let mut codecs = Registry::default();
                let snapshot = InstanceSnapshot::from_raw(decode_instance(&mut codecs, raw)?)?;
                self.codecs = Arc::new(codecs);
                ProviderUpdate::Replaced { snapshot }
            }
            RawUpdate::Spawned(raw) => {
                let instance = decode_instance(Arc::make_mut(&mut self.codecs), raw)?;
                ProviderUpdate::Spawned {
                    instance: InstanceSnapshot::from_raw(instance)?,
                }
            }
            RawUpdate::Closed(instance) => {
                Arc::make_mut(&mut self.codecs).remove_instance(&instance);
                ProviderUpdate::Closed { instance }
            }
            RawUpdate::Reset(raw) => {
                let mut codecs = Registry::default();
                let snapshot =
                    SubscriptionSnapshot::from_raw(decode_subscription(&mut codecs, raw)?)?;
                self.codecs = Arc::new(codecs);
                ProviderUpdate::Reset { snapshot }
            }
        })
    }
}

impl StateDecoder {
    /// [`decode_update`](Self::decode_update) from the update's CBOR bytes, as
    /// [`ServerFrameDecoder`](crate::ServerFrameDecoder) hands them over: the same result, the
    /// same errors and the same codec state afterwards, but a singleton `state` batch of
    /// `a`/`t`/`d` ops is read in place instead of through a [`Value`].
    ///
    /// # Errors
    /// As [`decode_update`](Self::decode_update), plus [`ChordError::Cbor`] for bytes that are
    /// not one valid CBOR item (never the case for bytes from the frame codec).
    pub fn decode_update_cbor(&mut self, bytes: &[u8]) -> Result<ProviderUpdate, ChordError> {
        let mut arena = Vec::new();
        if let Some(update) = parse_state_update(bytes, &mut arena) {
            let ops = Arc::make_mut(&mut self.codecs)
                .get_mut(&None, update.member)?
                .decode_parsed(update.ops)?;
            return Ok(ProviderUpdate::State {
                instance: None,
                member: update.member.to_owned(),
                sequence: update.sequence,
                ops,
            });
        }
        let value = crate::cbor::decode_value(bytes, &VALIDATED)?;
        self.decode_update(&value)
    }
}

impl StateDecoder {
    /// Decodes one update's CBOR bytes and applies it to `replica`: what
    /// [`decode_update_cbor`](Self::decode_update_cbor) then
    /// [`Replica::apply_update_ref`] do, with the same result, the same errors, the same
    /// decoder state and the same replica afterwards, but the common update (a singleton
    /// `state` batch of `a`/`t`/`d` ops, a streamed reply) goes from the bytes into the
    /// replica's value with no decoded update, op, path or text in between: its ops are
    /// read and resolved against the dictionary first (so a refusal leaves the replica as it
    /// was, as decoding first does), then applied in place. Anything else takes the two
    /// steps.
    ///
    /// Returns the update's sequence if it is a `state` update (applied or, as the replica's
    /// rules say, ignored).
    ///
    /// # Errors
    /// [`UpdateRefused::Decode`] with what `decode_update_cbor` returns (the replica is
    /// unchanged); [`UpdateRefused::Apply`] with what `apply_update_ref` returns.
    pub fn apply_update_cbor(
        &mut self,
        bytes: &[u8],
        replica: &mut Replica,
    ) -> Result<Option<u64>, UpdateRefused> {
        if let Some(update) = read_leaf_update(bytes, |member| self.codecs.get(&None, member)) {
            replica
                .apply_state_with(None, update.member, update.sequence, |value: &mut Value| {
                    update.apply_to(value)
                })
                .map_err(UpdateRefused::Apply)?;
            return Ok(Some(update.sequence));
        }
        let update = self
            .decode_update_cbor(bytes)
            .map_err(UpdateRefused::Decode)?;
        let sequence = match &update {
            ProviderUpdate::State { sequence, .. } => Some(*sequence),
            _ => None,
        };
        replica.apply_update(update).map_err(UpdateRefused::Apply)?;
        Ok(sequence)
    }
}

impl SubscriptionSnapshot {
    /// Parses a wire subscription snapshot (upstream `parseWireServiceSubscriptionSnapshot`,
    /// then decoding each state with a fresh delta codec): what a client does with the
    /// `subscribe` result. Use [`StateDecoder::decode_snapshot`] instead to keep the codecs
    /// for the updates that follow.
    ///
    /// # Errors
    /// As [`SubscriptionSnapshot::parse`] with the wire grammar, plus
    /// `Duplicate service state …` and decode errors.
    pub fn parse_wire(value: &Value) -> Result<Self, ChordError> {
        StateDecoder::new().decode_snapshot(value)
    }
}

fn decode_subscription(
    codecs: &mut Registry<OpDecoder>,
    raw: RawSubscription<WireOp<'_>>,
) -> Result<RawSubscription<Op>, ChordError> {
    Ok(RawSubscription {
        service_id: raw.service_id,
        mode: raw.mode,
        instances: raw
            .instances
            .into_iter()
            .map(|instance| decode_instance(codecs, instance))
            .collect::<Result<_, _>>()?,
    })
}

/// Adds a codec per state member (upstream `codecs.add`) and decodes its ops with it.
fn decode_instance(
    codecs: &mut Registry<OpDecoder>,
    raw: RawInstance<WireOp<'_>>,
) -> Result<RawInstance<Op>, ChordError> {
    let mut members = Vec::with_capacity(raw.members.len());
    for member in raw.members {
        members.push(match member {
            RawMember::Method { name } => RawMember::Method { name },
            RawMember::State {
                name,
                sequence,
                ops,
            } => {
                let ops = codecs.add(&raw.instance, &name)?.decode_parsed(ops)?;
                RawMember::State {
                    name,
                    sequence,
                    ops,
                }
            }
        });
    }
    Ok(RawInstance {
        instance: raw.instance,
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chord::mode::ServiceMode;
    use crate::chord::snapshot::MemberSnapshot;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    fn state(member: &str, sequence: u64, ops: &str) -> ProviderUpdate {
        ProviderUpdate::State {
            instance: None,
            member: member.into(),
            sequence,
            ops: v(ops)
                .as_array()
                .unwrap()
                .iter()
                .map(|op| Op::parse(op).unwrap())
                .collect(),
        }
    }

    #[test]
    fn duplicate_state_names_are_rejected_by_both_sides() {
        let snapshot = SubscriptionSnapshot::new(
            "s",
            ServiceMode::Singleton,
            vec![InstanceSnapshot::new(
                None,
                vec![
                    MemberSnapshot::state("x", 0, Value::Null),
                    MemberSnapshot::state("x", 0, Value::Null),
                ],
            )],
        );
        let mut enc = StateEncoder::new();
        assert_eq!(
            enc.encode_snapshot(&snapshot).unwrap_err().to_string(),
            "Duplicate service state x"
        );
        assert_eq!(
            StateDecoder::new()
                .decode_snapshot(&snapshot.to_value())
                .unwrap_err()
                .to_string(),
            "Duplicate service state x"
        );
    }

    #[test]
    fn duplicate_method_names_do_not_need_codecs() {
        let json = r#"{"serviceId":"s","mode":"singleton","instances":[{"members":[{"name":"m","kind":"method"},{"name":"m","kind":"method"}]}]}"#;
        assert!(StateDecoder::new().decode_snapshot(&v(json)).is_ok());
    }

    #[test]
    fn a_state_update_before_the_snapshot_is_unknown() {
        let mut enc = StateEncoder::new();
        assert_eq!(
            enc.encode_update(&state("state", 1, r#"[["s",["a"],1]]"#))
                .unwrap_err()
                .to_string(),
            "Unknown service state state"
        );
    }

    #[test]
    fn unavailable_discards_every_codec() {
        let snapshot = SubscriptionSnapshot::new(
            "s",
            ServiceMode::Singleton,
            vec![InstanceSnapshot::new(
                None,
                vec![MemberSnapshot::state("x", 0, v("{}"))],
            )],
        );
        let mut enc = StateEncoder::new();
        let mut dec = StateDecoder::new();
        dec.decode_snapshot(&enc.encode_snapshot(&snapshot).unwrap())
            .unwrap();
        let wire = enc.encode_update(&ProviderUpdate::Unavailable).unwrap();
        assert_eq!(wire.to_json(), r#"{"type":"unavailable"}"#);
        assert_eq!(
            dec.decode_update(&wire).unwrap(),
            ProviderUpdate::Unavailable
        );
        assert_eq!(enc, StateEncoder::new());
        assert_eq!(dec, StateDecoder::new());
    }

    #[test]
    fn clones_share_state_until_one_advances_and_equality_still_compares_contents() {
        let snapshot = SubscriptionSnapshot::new(
            "s",
            ServiceMode::Singleton,
            vec![InstanceSnapshot::new(
                None,
                vec![MemberSnapshot::state("x", 0, v(r#"{"a":""}"#))],
            )],
        );
        let append = state("x", 1, r#"[["a",["a"],"t"]]"#);
        let mut a = StateEncoder::new();
        a.encode_snapshot(&snapshot).unwrap();
        let mut b = a.clone();
        assert!(a.shares_state_with(&b));
        // Advancing one copies its dictionaries; the other keeps the old state.
        let before = a.clone();
        let wire = a.encode_update(&append).unwrap();
        assert!(!a.shares_state_with(&b));
        assert_eq!(b, before);
        assert_ne!(a, b);
        // The same update from the same state gives the same bytes and an equal state that
        // was reached separately, so it is equal by contents but not shared.
        assert_eq!(b.encode_update(&append).unwrap(), wire);
        assert_eq!(a, b);
        assert!(!a.shares_state_with(&b));
        // A failed update leaves the state as it was.
        let a_before = a.clone();
        assert!(a.encode_update(&state("y", 1, "[]")).is_err());
        assert_eq!(a, a_before);
    }

    #[test]
    fn spawning_an_existing_state_is_a_duplicate_with_its_address() {
        let address = InstanceAddress::new("dialog-1", 1);
        let spawned = ProviderUpdate::Spawned {
            instance: InstanceSnapshot::new(
                Some(address),
                vec![MemberSnapshot::state("request", 0, v("0"))],
            ),
        };
        let mut enc = StateEncoder::new();
        enc.encode_snapshot(&SubscriptionSnapshot::new("d", ServiceMode::Keyed, vec![]))
            .unwrap();
        enc.encode_update(&spawned).unwrap();
        let before = enc.clone();
        assert_eq!(
            enc.encode_update(&spawned).unwrap_err().to_string(),
            "Duplicate service state dialog-1@1.request"
        );
        assert_eq!(enc, before);
    }

    #[test]
    fn wire_updates_are_checked_with_the_wire_grammar() {
        let mut dec = StateDecoder::new();
        dec.decode_snapshot(&v(
            r#"{"serviceId":"s","mode":"singleton","instances":[{"members":[{"name":"state","kind":"state","sequence":0,"ops":[["r",{}]]}]}]}"#,
        ))
        .unwrap();
        assert_eq!(
            dec.decode_update(&v(
                r#"{"type":"state","member":"state","sequence":1,"ops":[["?",0]]}"#
            ))
            .unwrap_err()
            .to_string(),
            "unknown op verb: ?"
        );
        // Validation precedes the registry lookup.
        assert_eq!(
            dec.decode_update(&v(
                r#"{"type":"state","member":"other","sequence":1,"ops":[["t",["a"],-1]]}"#
            ))
            .unwrap_err()
            .to_string(),
            "t count"
        );
        assert_eq!(
            dec.decode_update(&v(
                r#"{"type":"state","member":"other","sequence":1,"ops":[]}"#
            ))
            .unwrap_err()
            .to_string(),
            "Unknown service state other"
        );
    }

    /// Two clients fed the same bytes: one decodes then applies by reference (the old
    /// path), the other applies from the bytes. Every step must agree on the outcome (and at
    /// which step a refusal came), and the decoders and replicas must stay equal.
    struct Pair {
        old: (StateDecoder, Replica),
        new: (StateDecoder, Replica),
    }

    impl Pair {
        fn new(mode: ServiceMode, snapshot: &str) -> Self {
            let mut decoder = StateDecoder::new();
            let mut replica = Replica::new("s", mode);
            replica
                .apply_snapshot(decoder.decode_snapshot(&v(snapshot)).unwrap())
                .unwrap();
            Self {
                old: (decoder.clone(), replica.clone()),
                new: (decoder, replica),
            }
        }

        /// Feeds one wire update, whatever the outcome.
        fn step(&mut self, wire: &Value) {
            let _outcome = self.feed(wire);
        }

        /// Feeds one wire update; returns the outcome for the caller to look at.
        fn feed(&mut self, wire: &Value) -> Result<Option<u64>, UpdateRefused> {
            let bytes = crate::cbor::to_vec(wire, &crate::limits::CborLimits::default()).unwrap();
            let (decoder, replica) = &mut self.old;
            let old = match decoder.decode_update_cbor(&bytes) {
                Err(e) => Err(UpdateRefused::Decode(e)),
                Ok(update) => {
                    let sequence = match &update {
                        ProviderUpdate::State { sequence, .. } => Some(*sequence),
                        _ => None,
                    };
                    replica
                        .apply_update_ref(&update)
                        .map(|()| sequence)
                        .map_err(UpdateRefused::Apply)
                }
            };
            let (decoder, replica) = &mut self.new;
            let new = decoder.apply_update_cbor(&bytes, replica);
            let json = wire.to_json();
            assert_eq!(new, old, "outcome of {json}");
            if !matches!(old, Err(UpdateRefused::Decode(_))) {
                assert_eq!(self.new.0, self.old.0, "decoders after {json}");
            }
            assert_eq!(self.new.1, self.old.1, "replicas after {json}");
            new
        }
    }

    const SINGLETON: &str = r#"{"serviceId":"s","mode":"singleton","instances":[{"members":[{"name":"m","kind":"state","sequence":0,"ops":[["r",{"text":"","list":["x","y"],"n":1}]]},{"name":"f","kind":"method"}]}]}"#;

    fn state_update(sequence: u64, member: &str, ops: &str) -> Value {
        v(&format!(
            r#"{{"type":"state","member":"{member}","sequence":{sequence},"ops":{ops}}}"#
        ))
    }

    #[test]
    fn applying_from_the_bytes_agrees_with_decoding_then_applying_on_every_shape() {
        let batches = [
            r#"[["a",["text"],"he"]]"#,
            r##"[["#",0,["text"]],["a",0,"llo"]]"##,
            r#"[["a",0," w"],["a","or"],["t",1],["a","ld"]]"#,
            r#"[["a",["list",0],"!"],["t",["list",1],5],["d",["list",1]]]"#,
            r#"[["d",["list",7]]]"#,
            r#"[["a",["text"],"a"],["a","b"],["a","c"],["t",1],["a","d"],["a",["list",0],"e"]]"#,
            r#"[["a",["text"],"a"],["a","b"],["a","c"],["t",1],["a","d"],["a",["nope"],"e"]]"#,
            r#"[["a",["missing"],"x"]]"#,
            r#"[["a",["n"],"x"]]"#,
            r#"[["a",9,"x"]]"#,
            r#"[["a","x"]]"#,
            r#"[["a",[],"x"]]"#,
            r#"[["t",["text"],9007199254740991]]"#,
            r#"[["d",["list",0]],["a",["list"],"x"]]"#,
            r#"[["a",["list","k"],"x"]]"#,
            r#"[["a",["__proto__"],"x"]]"#,
            r#"[["s",["n"],2],["a",["text"],"!"]]"#,
            r#"[["r",{"text":"fresh"}],["a",["text"],"!"]]"#,
            r#"[["a",0,"x"]]"#,
            r#"[["d",["text"]],["d"]]"#,
            r#"[]"#,
            r#"[["a",["text"],1]]"#,
            r#"[["?",0]]"#,
        ];
        for (i, ops) in batches.iter().enumerate() {
            let mut pair = Pair::new(ServiceMode::Singleton, SINGLETON);
            // Each batch after a prefix of the others, so dictionaries and values vary.
            let mut sequence = 0;
            for prefix in &batches[..i] {
                sequence += 1;
                if pair.feed(&state_update(sequence, "m", prefix)).is_err() {
                    pair = Pair::new(ServiceMode::Singleton, SINGLETON);
                    sequence = 0;
                }
            }
            pair.step(&state_update(sequence + 1, "m", ops));
            // The same batch once more, now a duplicate sequence.
            pair.step(&state_update(sequence + 1, "m", ops));
        }
        let mut pair = Pair::new(ServiceMode::Singleton, SINGLETON);
        for wire in [
            state_update(1, "f", r#"[["a",["text"],"x"]]"#),
            state_update(1, "other", r#"[["a",["text"],"x"]]"#),
            state_update(3, "m", r#"[["a",["text"],"x"]]"#),
        ] {
            pair.step(&wire);
        }
        assert_eq!(
            pair.feed(&state_update(4, "m", r#"[["a",["text"],"x"]]"#)),
            Err(UpdateRefused::Apply(ChordError::NotHydrated)),
            "a state cleared by a gap refuses further updates"
        );
        for wire in [
            v(r#"{"type":"unavailable"}"#),
            v(
                r#"{"type":"state","member":"m","sequence":1,"ops":[],"instance":{"key":"k","generation":1}}"#,
            ),
            v(r#"{"type":"state","member":"m","sequence":0,"ops":[]}"#),
            v(r#"{"type":"state","member":"","sequence":1,"ops":[]}"#),
            v(r#"{"type":"closed"}"#),
        ] {
            pair.step(&wire);
        }
        assert_eq!(
            pair.feed(&state_update(5, "m", r#"[["a",["text"],"x"]]"#)),
            Err(UpdateRefused::Decode(ChordError::UnknownState(
                "m".to_owned()
            ))),
            "`unavailable` dropped the dictionaries"
        );
    }

    #[test]
    fn a_streamed_append_is_read_in_place_and_anything_else_is_left_to_the_general_path() {
        let mut codec = OpDecoder::new();
        codec.decode(&[v(r##"["#",0,["text"]]"##)]).unwrap();
        let bytes = |json: &str| {
            crate::cbor::to_vec(&v(json), &crate::limits::CborLimits::default()).unwrap()
        };
        let append = bytes(r#"{"type":"state","member":"m","sequence":2,"ops":[["a",0,"x"]]}"#);
        let read = read_leaf_update(&append, |member| (member == "m").then_some(&codec));
        assert!(read.is_some_and(|u| u.member == "m" && u.sequence == 2));
        for other in [
            r#"{"type":"state","member":"m","sequence":2,"ops":[["a",1,"x"]]}"#,
            r#"{"type":"state","member":"m","sequence":2,"ops":[["s",0,"x"]]}"#,
            r#"{"type":"state","member":"other","sequence":2,"ops":[["a",0,"x"]]}"#,
            r#"{"type":"state","ops":[["a",0,"x"]],"member":"m","sequence":2}"#,
        ] {
            let bytes = bytes(other);
            assert!(
                read_leaf_update(&bytes, |member| (member == "m").then_some(&codec)).is_none(),
                "{other}"
            );
        }
    }

    #[test]
    fn applying_from_the_bytes_agrees_on_random_leaf_streams() {
        // A small deterministic generator: op verbs, references and sequences drawn so that
        // most batches apply and some refer to undefined ids, repeat or skip a sequence.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        let paths = [r#"["text"]"#, r#"["list",0]"#, r#"["list",1]"#, r#"["n"]"#];
        for _ in 0..300 {
            let mut pair = Pair::new(ServiceMode::Singleton, SINGLETON);
            let mut sequence = 0;
            for _ in 0..12 {
                let mut ops = Vec::new();
                for _ in 0..=next(4) {
                    let at = match next(4) {
                        0 => paths[next(4) as usize].to_owned(),
                        1 => next(3).to_string(),
                        _ => String::new(),
                    };
                    let at = if at.is_empty() {
                        String::new()
                    } else {
                        format!("{at},")
                    };
                    ops.push(match next(6) {
                        0 | 1 => format!(r#"["a",{at}"t{}"]"#, next(10)),
                        2 => format!(r#"["t",{at}{}]"#, next(3)),
                        3 if at.is_empty() => r#"["d"]"#.to_owned(),
                        3 => format!(r#"["d",{}]"#, at.trim_end_matches(',')),
                        4 => format!(r##"["#",{},{}]"##, next(3), paths[next(4) as usize]),
                        _ => format!(r#"["s",{at}"v"]"#),
                    });
                }
                sequence = match next(10) {
                    0 => sequence,
                    1 => sequence + 2,
                    _ => sequence + 1,
                };
                let wire = state_update(sequence, "m", &format!("[{}]", ops.join(",")));
                if pair.feed(&wire).is_err() {
                    pair = Pair::new(ServiceMode::Singleton, SINGLETON);
                    sequence = 0;
                }
            }
        }
    }

    #[test]
    fn applying_from_the_bytes_agrees_for_keyed_and_lifecycle_updates() {
        let keyed = r#"{"serviceId":"s","mode":"keyed","instances":[{"instance":{"key":"k","generation":1},"members":[{"name":"m","kind":"state","sequence":0,"ops":[["r",{"text":""}]]}]}]}"#;
        let mut pair = Pair::new(ServiceMode::Keyed, keyed);
        for wire in [
            r#"{"type":"state","instance":{"key":"k","generation":1},"member":"m","sequence":1,"ops":[["a",["text"],"x"]]}"#,
            r#"{"type":"state","member":"m","sequence":2,"ops":[["a",["text"],"x"]]}"#,
            r#"{"type":"state","instance":{"key":"j","generation":1},"member":"m","sequence":1,"ops":[["a",["text"],"x"]]}"#,
            r#"{"type":"spawned","instance":{"instance":{"key":"j","generation":1},"members":[{"name":"m","kind":"state","sequence":0,"ops":[["r",{"text":"j"}]]}]}}"#,
            r#"{"type":"state","instance":{"key":"j","generation":1},"member":"m","sequence":1,"ops":[["a",["text"],"x"]]}"#,
            r#"{"type":"closed","instance":{"key":"k","generation":1}}"#,
            r#"{"type":"unavailable"}"#,
        ] {
            pair.step(&v(wire));
        }
    }
}
