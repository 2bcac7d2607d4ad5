//! `Replica`: the client's pure view of one subscription's replicated states.
//!
//! Feed it the decoded snapshot, then every decoded update in order (see
//! [`StateDecoder`](crate::chord::StateDecoder)); read values per (instance, member). It
//! follows upstream's consumer (`consumer.ts`, `state.ts`):
//!
//! * A state update must carry `sequence == last + 1`. Otherwise (a duplicate or a gap) the
//!   member is cleared and `Replicated state update sequence has a gap` is returned; further
//!   updates to it fail with `Replicated state received an update before hydration` until a
//!   snapshot (`replaced`, `spawned`, `reset`) hydrates it again. A root `r` in an ordinary
//!   update does not excuse a gap.
//! * Singleton: `unavailable` clears every state (the member descriptions stay); `replaced`
//!   re-installs the instance; `state` updates with an address, `spawned` and `closed` are
//!   ignored.
//! * Keyed: `spawned` installs (or replaces the instance with the same key); `closed` removes
//!   the instance if the generation matches; `state` updates for unknown or stale addresses
//!   are ignored; `unavailable`/`replaced` are errors.
//! * `reset` is checked against the subscription (service, mode, addresses, full root
//!   replacements) and re-baselines every state from its per-member sequence.
//!
//! Errors are what upstream reports to its error listener; the replica stays usable. It
//! never panics, and it does no IO.
//!
//! Deviation: when a batch fails to apply, upstream keeps the previous value (it applies to a
//! copy) and clears it at the next update's gap; this replica applies in place (no copy per
//! update) and clears the member at once.

use std::collections::HashSet;

use crate::chord::address::InstanceAddress;
use crate::chord::apply::{apply, apply_owned};
use crate::chord::error::ChordError;
use crate::chord::mode::ServiceMode;
use crate::chord::op::Op;
use crate::chord::remote_error::RemoteServiceError;
use crate::chord::snapshot::{InstanceSnapshot, MemberKind, MemberSnapshot, SubscriptionSnapshot};
use crate::chord::update::ProviderUpdate;
use crate::value::Value;

/// One replicated state of an instance: its value and sequence, once hydrated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateReplica {
    name: String,
    current: Option<(u64, Value)>,
}

impl StateReplica {
    /// The member name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current value; `None` before hydration and after a clear.
    pub fn value(&self) -> Option<&Value> {
        self.current.as_ref().map(|(_, value)| value)
    }

    /// The sequence of the current value.
    pub fn sequence(&self) -> Option<u64> {
        self.current.as_ref().map(|(sequence, _)| *sequence)
    }

    fn update(&mut self, sequence: u64, ops: impl ApplyOps) -> Result<(), ChordError> {
        let Some((last, value)) = &mut self.current else {
            return Err(ChordError::NotHydrated);
        };
        if last.checked_add(1) != Some(sequence) {
            self.current = None;
            return Err(ChordError::SequenceGap);
        }
        if let Err(error) = ops.apply_to(value) {
            self.current = None;
            return Err(error);
        }
        *last = sequence;
        Ok(())
    }
}

/// A batch to apply to a state's value: moved in, borrowed from an update someone else
/// keeps, or read from where it arrived ([`Replica::apply_state_with`]).
pub(crate) trait ApplyOps {
    /// Runs the batch on `value` in order (not transactional: see [`apply`]).
    fn apply_to(self, value: &mut Value) -> Result<(), ChordError>;
}

impl ApplyOps for Vec<Op> {
    fn apply_to(self, value: &mut Value) -> Result<(), ChordError> {
        apply_owned(value, self)
    }
}

impl ApplyOps for &[Op] {
    fn apply_to(self, value: &mut Value) -> Result<(), ChordError> {
        apply(value, self)
    }
}

impl<F: FnOnce(&mut Value) -> Result<(), ChordError>> ApplyOps for F {
    fn apply_to(self, value: &mut Value) -> Result<(), ChordError> {
        self(value)
    }
}

/// One service instance as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceReplica {
    address: Option<InstanceAddress>,
    /// The member descriptions of the last installed snapshot.
    members: Vec<(String, MemberKind)>,
    /// State slots; they outlive re-installs, as upstream's member slots do.
    states: Vec<StateReplica>,
}

impl InstanceReplica {
    fn new(address: Option<InstanceAddress>) -> Self {
        Self {
            address,
            members: Vec::new(),
            states: Vec::new(),
        }
    }

    /// The address (absent for a singleton).
    pub fn address(&self) -> Option<&InstanceAddress> {
        self.address.as_ref()
    }

    /// The members of the last installed snapshot, in its order.
    pub fn members(&self) -> impl Iterator<Item = (&str, MemberKind)> {
        self.members
            .iter()
            .map(|(name, kind)| (name.as_str(), *kind))
    }

    /// The kind of a member, if the snapshot described it.
    pub fn kind(&self, member: &str) -> Option<MemberKind> {
        self.members
            .iter()
            .find(|(name, _)| name == member)
            .map(|(_, kind)| *kind)
    }

    /// A state member.
    pub fn state(&self, member: &str) -> Option<&StateReplica> {
        self.states.iter().find(|state| state.name == member)
    }

    /// The current value of a state member.
    pub fn value(&self, member: &str) -> Option<&Value> {
        self.state(member).and_then(StateReplica::value)
    }

    /// The sequence of a state member's current value.
    pub fn sequence(&self, member: &str) -> Option<u64> {
        self.state(member).and_then(StateReplica::sequence)
    }

    fn clear(&mut self) {
        for state in &mut self.states {
            state.current = None;
        }
    }

    /// Upstream `ServiceFacade.install`: checks everything first, then hydrates.
    fn install(&mut self, service_id: &str, snapshot: InstanceSnapshot) -> Result<(), ChordError> {
        if snapshot.instance != self.address {
            return Err(ChordError::WrongSnapshotAddress);
        }
        let mut names = HashSet::with_capacity(snapshot.members.len());
        for member in &snapshot.members {
            if member.name().is_empty() || !names.insert(member.name()) {
                return Err(ChordError::InvalidMemberDescriptions);
            }
        }
        for state in &self.states {
            let Some(member) = snapshot.members.iter().find(|m| m.name() == state.name) else {
                return Err(RemoteServiceError::unknown_member(service_id, &state.name).into());
            };
            if member.kind() != MemberKind::State {
                return Err(ChordError::MemberChangedKind {
                    service_id: service_id.to_owned(),
                    member: state.name.clone(),
                });
            }
        }
        self.members = snapshot
            .members
            .iter()
            .map(|member| (member.name().to_owned(), member.kind()))
            .collect();
        for member in snapshot.members {
            let MemberSnapshot::State {
                name,
                sequence,
                value,
            } = member
            else {
                continue;
            };
            match self.states.iter_mut().find(|state| state.name == name) {
                Some(state) => state.current = Some((sequence, value)),
                None => self.states.push(StateReplica {
                    name,
                    current: Some((sequence, value)),
                }),
            }
        }
        Ok(())
    }

    /// Upstream `ServiceFacade.update`.
    fn update(
        &mut self,
        service_id: &str,
        member: &str,
        sequence: u64,
        ops: impl ApplyOps,
    ) -> Result<(), ChordError> {
        let state = match self.kind(member) {
            Some(MemberKind::State) => self.states.iter_mut().find(|state| state.name == member),
            _ => None,
        };
        let Some(state) = state else {
            return Err(ChordError::NotStateMember {
                service_id: service_id.to_owned(),
                member: member.to_owned(),
            });
        };
        state.update(sequence, ops)
    }
}

/// The client's view of one subscription (see the module docs for the rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    service_id: String,
    mode: ServiceMode,
    hydrated: bool,
    instances: Vec<InstanceReplica>,
}

impl Replica {
    /// An empty replica for a subscription to `service_id` in `mode`.
    pub fn new(service_id: impl Into<String>, mode: ServiceMode) -> Self {
        Self {
            service_id: service_id.into(),
            mode,
            hydrated: false,
            instances: Vec::new(),
        }
    }

    /// The subscribed service.
    pub fn service_id(&self) -> &str {
        &self.service_id
    }

    /// The subscribed mode.
    pub fn mode(&self) -> ServiceMode {
        self.mode
    }

    /// True once a snapshot has been applied.
    pub fn is_hydrated(&self) -> bool {
        self.hydrated
    }

    /// The live instances (a singleton has exactly one, without an address).
    pub fn instances(&self) -> &[InstanceReplica] {
        &self.instances
    }

    /// The instance at `address` (`None` for a singleton's instance).
    pub fn instance(&self, address: Option<&InstanceAddress>) -> Option<&InstanceReplica> {
        self.instances
            .iter()
            .find(|instance| instance.address.as_ref() == address)
    }

    /// The current value of a state member of an instance.
    pub fn value(&self, address: Option<&InstanceAddress>, member: &str) -> Option<&Value> {
        self.instance(address)
            .and_then(|instance| instance.value(member))
    }

    /// The sequence of a state member's current value.
    pub fn sequence(&self, address: Option<&InstanceAddress>, member: &str) -> Option<u64> {
        self.instance(address)
            .and_then(|instance| instance.sequence(member))
    }

    /// Hydrates from the subscribe response, replacing whatever the replica held.
    ///
    /// # Errors
    /// `Remote service <id> returned an invalid singleton snapshot` (wrong service or mode, or
    /// not exactly one instance), `Remote service <id> returned the wrong keyed snapshot`,
    /// `Keyed service instance snapshot has no address`, `Remote service snapshot has the
    /// wrong address`, `Remote service has invalid member descriptions`. On error the
    /// replica is unchanged.
    pub fn apply_snapshot(&mut self, snapshot: SubscriptionSnapshot) -> Result<(), ChordError> {
        let mut instances = Vec::with_capacity(snapshot.instances.len());
        match self.mode {
            ServiceMode::Singleton => {
                if snapshot.mode != ServiceMode::Singleton
                    || snapshot.service_id != self.service_id
                    || snapshot.instances.len() != 1
                {
                    return Err(ChordError::InvalidSingletonSnapshot(
                        self.service_id.clone(),
                    ));
                }
                for instance_snapshot in snapshot.instances {
                    let mut instance = InstanceReplica::new(None);
                    instance.install(&self.service_id, instance_snapshot)?;
                    instances.push(instance);
                }
            }
            ServiceMode::Keyed => {
                if snapshot.mode != ServiceMode::Keyed || snapshot.service_id != self.service_id {
                    return Err(ChordError::WrongKeyedSnapshot(self.service_id.clone()));
                }
                for instance_snapshot in snapshot.instances {
                    spawn_into(&mut instances, &self.service_id, instance_snapshot)?;
                }
            }
        }
        self.instances = instances;
        self.hydrated = true;
        Ok(())
    }

    /// Applies one decoded update.
    ///
    /// # Errors
    /// `Replicated state received an update before hydration` before the snapshot or for a
    /// cleared state; the sequence gap error; an apply error; the lifecycle and reset errors
    /// listed in the module docs. Ignored updates return `Ok`.
    pub fn apply_update(&mut self, update: ProviderUpdate) -> Result<(), ChordError> {
        if !self.hydrated {
            return Err(ChordError::NotHydrated);
        }
        match self.mode {
            ServiceMode::Singleton => self.apply_singleton(update),
            ServiceMode::Keyed => self.apply_keyed(update),
        }
    }

    /// [`apply_update`](Self::apply_update) without taking the update, for a caller that
    /// also hands it on (a client's subscription events): a `state` batch is applied from
    /// the borrowed ops (appends are not even copied); any other update is cloned.
    ///
    /// # Errors
    /// As [`apply_update`](Self::apply_update).
    pub fn apply_update_ref(&mut self, update: &ProviderUpdate) -> Result<(), ChordError> {
        let ProviderUpdate::State {
            instance,
            member,
            sequence,
            ops,
        } = update
        else {
            return self.apply_update(update.clone());
        };
        self.apply_state_with(instance.as_ref(), member, *sequence, ops.as_slice())
    }

    /// Applies a `state` update (`instance`, `member`, `sequence`) whose batch `ops` runs on
    /// the member's value in place: what [`apply_update`](Self::apply_update) does with a
    /// decoded `state` update, same checks, same errors, same effect, for a caller that reads
    /// the ops from somewhere else (`StateDecoder::apply_update_cbor`, from the frame bytes).
    pub(crate) fn apply_state_with(
        &mut self,
        instance: Option<&InstanceAddress>,
        member: &str,
        sequence: u64,
        ops: impl ApplyOps,
    ) -> Result<(), ChordError> {
        if !self.hydrated {
            return Err(ChordError::NotHydrated);
        }
        // The same dispatch as `apply_singleton` and `apply_keyed` for `state`.
        match (self.mode, instance) {
            (ServiceMode::Singleton, None) => match self.instances.first_mut() {
                Some(live) => live.update(&self.service_id, member, sequence, ops),
                None => Err(ChordError::InvalidSingletonSnapshot(
                    self.service_id.clone(),
                )),
            },
            (ServiceMode::Singleton, Some(_)) => Ok(()),
            (ServiceMode::Keyed, None) => Err(ChordError::KeyedStateWithoutAddress),
            (ServiceMode::Keyed, Some(address)) => match self
                .instances
                .iter_mut()
                .find(|live| live.address.as_ref() == Some(address))
            {
                Some(live) => live.update(&self.service_id, member, sequence, ops),
                None => Ok(()),
            },
        }
    }

    fn singleton(&mut self) -> Result<&mut InstanceReplica, ChordError> {
        self.instances
            .first_mut()
            .ok_or_else(|| ChordError::InvalidSingletonSnapshot(self.service_id.clone()))
    }

    fn apply_singleton(&mut self, update: ProviderUpdate) -> Result<(), ChordError> {
        match update {
            ProviderUpdate::Unavailable => {
                self.singleton()?.clear();
                Ok(())
            }
            ProviderUpdate::Replaced { snapshot } => {
                if snapshot.instance.is_some() {
                    return Err(ChordError::SingletonReplacementAddressed);
                }
                let service_id = self.service_id.clone();
                self.singleton()?.install(&service_id, snapshot)
            }
            ProviderUpdate::State {
                instance: None,
                member,
                sequence,
                ops,
            } => {
                let service_id = self.service_id.clone();
                self.singleton()?
                    .update(&service_id, &member, sequence, ops)
            }
            ProviderUpdate::State {
                instance: Some(_), ..
            }
            | ProviderUpdate::Spawned { .. }
            | ProviderUpdate::Closed { .. } => Ok(()),
            ProviderUpdate::Reset { snapshot } => {
                self.check_reset(&snapshot)?;
                let service_id = self.service_id.clone();
                match snapshot.instances.into_iter().next() {
                    None => self.singleton()?.clear(),
                    Some(instance) => self.singleton()?.install(&service_id, instance)?,
                }
                Ok(())
            }
        }
    }

    fn apply_keyed(&mut self, update: ProviderUpdate) -> Result<(), ChordError> {
        match update {
            ProviderUpdate::Unavailable | ProviderUpdate::Replaced { .. } => {
                Err(ChordError::KeyedSingletonLifecycle)
            }
            ProviderUpdate::Spawned { instance } => {
                spawn_into(&mut self.instances, &self.service_id, instance)
            }
            ProviderUpdate::Closed { instance } => {
                self.instances
                    .retain(|live| live.address.as_ref() != Some(&instance));
                Ok(())
            }
            ProviderUpdate::State {
                instance,
                member,
                sequence,
                ops,
            } => {
                let Some(address) = instance else {
                    return Err(ChordError::KeyedStateWithoutAddress);
                };
                match self
                    .instances
                    .iter_mut()
                    .find(|live| live.address.as_ref() == Some(&address))
                {
                    Some(live) => live.update(&self.service_id, &member, sequence, ops),
                    // Unknown key or stale generation: ignored.
                    None => Ok(()),
                }
            }
            ProviderUpdate::Reset { snapshot } => {
                self.check_reset(&snapshot)?;
                let generation_of = |key: &str| {
                    snapshot
                        .instances
                        .iter()
                        .filter_map(|instance| instance.instance.as_ref())
                        .find(|address| address.key == key)
                        .map(|address| address.generation)
                };
                self.instances.retain(|live| {
                    live.address
                        .as_ref()
                        .is_some_and(|a| generation_of(&a.key) == Some(a.generation))
                });
                for instance in snapshot.instances {
                    let existing = self
                        .instances
                        .iter_mut()
                        .find(|live| live.address == instance.instance);
                    match existing {
                        Some(live) => live.install(&self.service_id, instance)?,
                        None => spawn_into(&mut self.instances, &self.service_id, instance)?,
                    }
                }
                Ok(())
            }
        }
    }

    /// The consumer's reset checks (newer `consumer.ts`).
    fn check_reset(&self, snapshot: &SubscriptionSnapshot) -> Result<(), ChordError> {
        if snapshot.service_id != self.service_id
            || snapshot.mode != self.mode
            || (self.mode == ServiceMode::Singleton && snapshot.instances.len() > 1)
        {
            return Err(ChordError::ResetWrongServiceOrMode);
        }
        let mut keys = HashSet::new();
        for instance in &snapshot.instances {
            let addressed = instance.instance.is_some();
            if addressed != (self.mode == ServiceMode::Keyed) {
                return Err(ChordError::ResetInvalidAddress);
            }
            if let Some(address) = &instance.instance
                && !keys.insert(address.key.as_str())
            {
                return Err(ChordError::ResetRepeatsKey);
            }
            // Decoded snapshots always hold full root replacements: every state carries
            // exactly its value (the wire parser already required one `r` per state).
        }
        Ok(())
    }
}

/// Upstream `KeyedBinding.#spawn`: install a fresh instance, replacing one with the same key.
fn spawn_into(
    instances: &mut Vec<InstanceReplica>,
    service_id: &str,
    snapshot: InstanceSnapshot,
) -> Result<(), ChordError> {
    let Some(address) = snapshot.instance.clone() else {
        return Err(ChordError::KeyedInstanceWithoutAddress);
    };
    let mut instance = InstanceReplica::new(Some(address.clone()));
    instance.install(service_id, snapshot)?;
    match instances
        .iter_mut()
        .find(|live| live.address.as_ref().is_some_and(|a| a.key == address.key))
    {
        Some(slot) => *slot = instance,
        None => instances.push(instance),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    fn ops(json: &str) -> Vec<Op> {
        v(json)
            .as_array()
            .unwrap()
            .iter()
            .map(|op| Op::parse(op).unwrap())
            .collect()
    }

    fn singleton(value: &str, sequence: u64) -> Replica {
        let mut replica = Replica::new("pi.models", ServiceMode::Singleton);
        replica
            .apply_snapshot(SubscriptionSnapshot::new(
                "pi.models",
                ServiceMode::Singleton,
                vec![InstanceSnapshot::new(
                    None,
                    vec![
                        MemberSnapshot::method("select"),
                        MemberSnapshot::state("state", sequence, v(value)),
                    ],
                )],
            ))
            .unwrap();
        replica
    }

    fn state(member: &str, sequence: u64, batch: &str) -> ProviderUpdate {
        ProviderUpdate::State {
            instance: None,
            member: member.into(),
            sequence,
            ops: ops(batch),
        }
    }

    #[test]
    fn contiguous_updates_apply_in_order() {
        let mut replica = singleton(r#"{"revision":0}"#, 0);
        for n in 1..=3 {
            replica
                .apply_update(state("state", n, &format!(r#"[["s",["revision"],{n}]]"#)))
                .unwrap();
        }
        assert_eq!(replica.value(None, "state"), Some(&v(r#"{"revision":3}"#)));
        assert_eq!(replica.sequence(None, "state"), Some(3));
    }

    #[test]
    fn a_duplicate_sequence_clears_the_state() {
        let mut replica = singleton("{}", 0);
        let err = replica
            .apply_update(state("state", 0, r#"[["s",["a"],1]]"#))
            .unwrap_err();
        assert!(err.to_string().contains("sequence has a gap"));
        assert_eq!(replica.value(None, "state"), None);
        assert_eq!(
            replica
                .apply_update(state("state", 1, r#"[["s",["a"],1]]"#))
                .unwrap_err()
                .to_string(),
            "Replicated state received an update before hydration"
        );
    }

    #[test]
    fn a_sequence_gap_clears_the_state_even_with_a_root_replacement() {
        let mut replica = singleton("{}", 0);
        let err = replica
            .apply_update(state("state", 2, r#"[["r",{"a":1}]]"#))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Replicated state update sequence has a gap"
        );
        assert_eq!(replica.value(None, "state"), None);
    }

    #[test]
    fn a_failed_batch_clears_the_state() {
        let mut replica = singleton("{}", 0);
        let err = replica
            .apply_update(state("state", 1, r#"[["a",["missing"],"x"]]"#))
            .unwrap_err();
        assert_eq!(err.to_string(), r#"unresolvable path: ["missing"]"#);
        assert_eq!(replica.value(None, "state"), None);
    }

    #[test]
    fn updates_to_methods_or_unknown_members_are_errors() {
        let mut replica = singleton("{}", 0);
        assert_eq!(
            replica
                .apply_update(state("select", 1, "[]"))
                .unwrap_err()
                .to_string(),
            "Remote service update targets non-state member pi.models.select"
        );
        assert_eq!(
            replica
                .apply_update(state("nope", 1, "[]"))
                .unwrap_err()
                .to_string(),
            "Remote service update targets non-state member pi.models.nope"
        );
    }

    #[test]
    fn an_update_before_the_snapshot_is_not_hydrated() {
        let mut replica = Replica::new("pi.models", ServiceMode::Singleton);
        assert_eq!(
            replica.apply_update(state("state", 1, "[]")).unwrap_err(),
            ChordError::NotHydrated
        );
    }

    #[test]
    fn singleton_snapshot_needs_exactly_one_instance() {
        let mut replica = Replica::new("pi.models", ServiceMode::Singleton);
        let err = replica
            .apply_snapshot(SubscriptionSnapshot::new(
                "pi.models",
                ServiceMode::Singleton,
                vec![],
            ))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Remote service pi.models returned an invalid singleton snapshot"
        );
        assert!(!replica.is_hydrated());
    }

    #[test]
    fn unavailable_clears_and_replaced_rehydrates() {
        let mut replica = singleton(r#"{"a":1}"#, 4);
        replica.apply_update(ProviderUpdate::Unavailable).unwrap();
        assert_eq!(replica.value(None, "state"), None);
        replica
            .apply_update(ProviderUpdate::Replaced {
                snapshot: InstanceSnapshot::new(
                    None,
                    vec![
                        MemberSnapshot::method("select"),
                        MemberSnapshot::state("state", 9, v(r#"{"a":2}"#)),
                    ],
                ),
            })
            .unwrap();
        assert_eq!(replica.value(None, "state"), Some(&v(r#"{"a":2}"#)));
        replica
            .apply_update(state("state", 10, r#"[["s",["a"],3]]"#))
            .unwrap();
        assert_eq!(replica.value(None, "state"), Some(&v(r#"{"a":3}"#)));
    }

    #[test]
    fn a_replacement_takes_its_sequences_from_its_snapshot() {
        // The replacement may start below the old instance's sequence, and updates follow it:
        // an update from before the replacement that fits them cannot be told from its own.
        let mut replica = singleton("[0]", 4);
        replica
            .apply_update(ProviderUpdate::Replaced {
                snapshot: InstanceSnapshot::new(
                    None,
                    vec![
                        MemberSnapshot::method("select"),
                        MemberSnapshot::state("state", 0, v("[1]")),
                    ],
                ),
            })
            .unwrap();
        replica
            .apply_update(state("state", 1, r#"[["p",[],1,0,[2]]]"#))
            .unwrap();
        assert_eq!(replica.value(None, "state"), Some(&v("[1,2]")));
        assert_eq!(replica.sequence(None, "state"), Some(1));
        let err = replica
            .apply_update(state("state", 5, r#"[["p",[],0,1,[]]]"#))
            .unwrap_err();
        assert!(err.to_string().contains("sequence has a gap"));
    }

    #[test]
    fn a_replacement_must_keep_every_state_member() {
        let mut replica = singleton("{}", 0);
        let err = replica
            .apply_update(ProviderUpdate::Replaced {
                snapshot: InstanceSnapshot::new(None, vec![MemberSnapshot::method("select")]),
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Unknown remote service member pi.models.state"
        );
        let err = replica
            .apply_update(ProviderUpdate::Replaced {
                snapshot: InstanceSnapshot::new(None, vec![MemberSnapshot::method("state")]),
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Remote service member pi.models.state changed kind"
        );
        let err = replica
            .apply_update(ProviderUpdate::Replaced {
                snapshot: InstanceSnapshot::new(Some(InstanceAddress::new("k", 1)), vec![]),
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Singleton replacement has an instance address"
        );
        // Nothing changed.
        assert_eq!(replica.value(None, "state"), Some(&v("{}")));
    }

    #[test]
    fn singleton_reset_rebaselines_from_the_reset_sequence() {
        let mut replica = singleton(r#"{"value":0}"#, 0);
        replica
            .apply_update(ProviderUpdate::Reset {
                snapshot: SubscriptionSnapshot::new(
                    "pi.models",
                    ServiceMode::Singleton,
                    vec![InstanceSnapshot::new(
                        None,
                        vec![
                            MemberSnapshot::method("select"),
                            MemberSnapshot::state("state", 101, v(r#"{"value":101}"#)),
                        ],
                    )],
                ),
            })
            .unwrap();
        assert_eq!(replica.sequence(None, "state"), Some(101));
        replica
            .apply_update(state("state", 102, r#"[["s",["value"],102]]"#))
            .unwrap();
        assert_eq!(replica.value(None, "state"), Some(&v(r#"{"value":102}"#)));
    }

    #[test]
    fn reset_is_checked_against_the_subscription() {
        let mut replica = singleton("{}", 0);
        let reset = |service: &str, mode, instances| ProviderUpdate::Reset {
            snapshot: SubscriptionSnapshot::new(service, mode, instances),
        };
        assert_eq!(
            replica
                .apply_update(reset("other", ServiceMode::Singleton, vec![]))
                .unwrap_err(),
            ChordError::ResetWrongServiceOrMode
        );
        assert_eq!(
            replica
                .apply_update(reset(
                    "pi.models",
                    ServiceMode::Singleton,
                    vec![
                        InstanceSnapshot::new(None, vec![]),
                        InstanceSnapshot::new(None, vec![])
                    ]
                ))
                .unwrap_err(),
            ChordError::ResetWrongServiceOrMode
        );
        assert_eq!(
            replica
                .apply_update(reset(
                    "pi.models",
                    ServiceMode::Singleton,
                    vec![InstanceSnapshot::new(
                        Some(InstanceAddress::new("a", 1)),
                        vec![]
                    )]
                ))
                .unwrap_err()
                .to_string(),
            "Remote service reset has an invalid instance address"
        );
        // An empty singleton reset clears.
        replica
            .apply_update(reset("pi.models", ServiceMode::Singleton, vec![]))
            .unwrap();
        assert_eq!(replica.value(None, "state"), None);
    }

    fn keyed() -> Replica {
        let mut replica = Replica::new("pi.dialogs", ServiceMode::Keyed);
        replica
            .apply_snapshot(SubscriptionSnapshot::new(
                "pi.dialogs",
                ServiceMode::Keyed,
                vec![],
            ))
            .unwrap();
        replica
    }

    fn spawned(key: &str, generation: u64, value: &str) -> ProviderUpdate {
        ProviderUpdate::Spawned {
            instance: InstanceSnapshot::new(
                Some(InstanceAddress::new(key, generation)),
                vec![MemberSnapshot::state("request", 0, v(value))],
            ),
        }
    }

    #[test]
    fn keyed_lifecycle_spawns_updates_and_closes_instances() {
        let mut replica = keyed();
        let address = InstanceAddress::new("dialog-1", 1);
        replica
            .apply_update(spawned("dialog-1", 1, r#"{"value":0}"#))
            .unwrap();
        replica
            .apply_update(ProviderUpdate::State {
                instance: Some(address.clone()),
                member: "request".into(),
                sequence: 1,
                ops: ops(r#"[["s",["value"],1]]"#),
            })
            .unwrap();
        assert_eq!(
            replica.value(Some(&address), "request"),
            Some(&v(r#"{"value":1}"#))
        );
        // A stale generation is ignored by close and by state updates.
        replica
            .apply_update(ProviderUpdate::Closed {
                instance: InstanceAddress::new("dialog-1", 2),
            })
            .unwrap();
        assert_eq!(replica.instances().len(), 1);
        replica
            .apply_update(ProviderUpdate::Closed {
                instance: address.clone(),
            })
            .unwrap();
        assert!(replica.instances().is_empty());
        replica
            .apply_update(ProviderUpdate::State {
                instance: Some(address),
                member: "request".into(),
                sequence: 2,
                ops: vec![],
            })
            .unwrap();
    }

    #[test]
    fn keyed_respawn_replaces_the_instance_with_the_same_key() {
        let mut replica = keyed();
        replica.apply_update(spawned("k", 1, "1")).unwrap();
        replica.apply_update(spawned("k", 2, "2")).unwrap();
        assert_eq!(replica.instances().len(), 1);
        assert_eq!(
            replica.value(Some(&InstanceAddress::new("k", 2)), "request"),
            Some(&v("2"))
        );
        assert_eq!(
            replica.value(Some(&InstanceAddress::new("k", 1)), "request"),
            None
        );
    }

    #[test]
    fn keyed_rejects_singleton_lifecycle_and_unaddressed_updates() {
        let mut replica = keyed();
        assert_eq!(
            replica
                .apply_update(ProviderUpdate::Unavailable)
                .unwrap_err(),
            ChordError::KeyedSingletonLifecycle
        );
        assert_eq!(
            replica.apply_update(state("request", 1, "[]")).unwrap_err(),
            ChordError::KeyedStateWithoutAddress
        );
        assert_eq!(
            replica
                .apply_update(ProviderUpdate::Spawned {
                    instance: InstanceSnapshot::new(None, vec![]),
                })
                .unwrap_err(),
            ChordError::KeyedInstanceWithoutAddress
        );
    }

    #[test]
    fn keyed_reset_drops_stale_instances_and_installs_the_rest() {
        let mut replica = keyed();
        replica.apply_update(spawned("a", 1, "1")).unwrap();
        replica.apply_update(spawned("b", 1, "1")).unwrap();
        replica
            .apply_update(ProviderUpdate::Reset {
                snapshot: SubscriptionSnapshot::new(
                    "pi.dialogs",
                    ServiceMode::Keyed,
                    vec![
                        InstanceSnapshot::new(
                            Some(InstanceAddress::new("a", 1)),
                            vec![MemberSnapshot::state("request", 7, v("7"))],
                        ),
                        InstanceSnapshot::new(
                            Some(InstanceAddress::new("b", 2)),
                            vec![MemberSnapshot::state("request", 0, v("0"))],
                        ),
                        InstanceSnapshot::new(
                            Some(InstanceAddress::new("c", 1)),
                            vec![MemberSnapshot::state("request", 0, v("9"))],
                        ),
                    ],
                ),
            })
            .unwrap();
        let live: Vec<_> = replica
            .instances()
            .iter()
            .map(|i| i.address().unwrap().to_string())
            .collect();
        assert_eq!(live, ["a@1", "b@2", "c@1"]);
        assert_eq!(
            replica.sequence(Some(&InstanceAddress::new("a", 1)), "request"),
            Some(7)
        );
        assert_eq!(
            replica
                .apply_update(ProviderUpdate::Reset {
                    snapshot: SubscriptionSnapshot::new(
                        "pi.dialogs",
                        ServiceMode::Keyed,
                        vec![
                            InstanceSnapshot::new(Some(InstanceAddress::new("a", 1)), vec![]),
                            InstanceSnapshot::new(Some(InstanceAddress::new("a", 2)), vec![]),
                        ],
                    ),
                })
                .unwrap_err()
                .to_string(),
            "Remote service reset repeats an instance key"
        );
    }

    #[test]
    fn repeated_member_names_are_invalid_descriptions() {
        let mut replica = keyed();
        let err = replica
            .apply_update(ProviderUpdate::Spawned {
                instance: InstanceSnapshot::new(
                    Some(InstanceAddress::new("k", 1)),
                    vec![MemberSnapshot::method("x"), MemberSnapshot::method("x")],
                ),
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Remote service has invalid member descriptions"
        );
    }
}
