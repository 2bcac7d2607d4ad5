//! Everything that can go wrong in the chord layer, with upstream's messages verbatim.
//!
//! Upstream throws `TypeError`s and plain `Error`s whose messages travel in logs, tests and,
//! for [`RemoteServiceError`], on the wire. The `Display` of every variant is exactly the
//! upstream message (capitalisation included), so a Rust peer and a TypeScript peer report
//! the same text for the same input.

use std::fmt;

use crate::chord::remote_error::RemoteServiceError;

/// The value a strict-shape check failed on; rendered as `Invalid <subject>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Subject {
    /// `Invalid service call`.
    ServiceCall,
    /// `Invalid service instance address`.
    InstanceAddress,
    /// `Invalid service catalogue` (not an array, a bad id or mode, a repeated id).
    Catalogue,
    /// `Invalid service catalogue entry` (an entry that is not a strict `{serviceId, mode}`).
    CatalogueEntry,
    /// `Invalid service subscription snapshot`.
    SubscriptionSnapshot,
    /// `Invalid service instance snapshot`.
    InstanceSnapshot,
    /// `Invalid service method snapshot`.
    MethodSnapshot,
    /// `Invalid service state snapshot`.
    StateSnapshot,
    /// `Invalid service member snapshot` (not an object, or an unknown `kind`).
    MemberSnapshot,
    /// `Invalid service provider update` (not an object, or an unknown `type`).
    ProviderUpdate,
    /// `Invalid state update`: a `state` update with missing or extra keys.
    StateUpdateKeys,
    /// `Invalid service state update`: a `state` update with a bad member, sequence or ops.
    StateUpdate,
    /// `Invalid unavailable update`.
    UnavailableUpdate,
    /// `Invalid replacement update`.
    ReplacementUpdate,
    /// `Invalid spawn update`.
    SpawnUpdate,
    /// `Invalid close update`.
    CloseUpdate,
    /// `Invalid reset update`.
    ResetUpdate,
}

impl Subject {
    /// The words after `Invalid ` in upstream's message.
    pub fn description(self) -> &'static str {
        match self {
            Self::ServiceCall => "service call",
            Self::InstanceAddress => "service instance address",
            Self::Catalogue => "service catalogue",
            Self::CatalogueEntry => "service catalogue entry",
            Self::SubscriptionSnapshot => "service subscription snapshot",
            Self::InstanceSnapshot => "service instance snapshot",
            Self::MethodSnapshot => "service method snapshot",
            Self::StateSnapshot => "service state snapshot",
            Self::MemberSnapshot => "service member snapshot",
            Self::ProviderUpdate => "service provider update",
            Self::StateUpdateKeys => "state update",
            Self::StateUpdate => "service state update",
            Self::UnavailableUpdate => "unavailable update",
            Self::ReplacementUpdate => "replacement update",
            Self::SpawnUpdate => "spawn update",
            Self::CloseUpdate => "close update",
            Self::ResetUpdate => "reset update",
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// An op that breaks the op grammar (upstream `assertValidOp` / `assertValidWireOp`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpError {
    /// Not an array, or an empty array.
    #[error("op is not a tuple")]
    NotTuple,
    /// The first element is not one of the known verbs (rendered as JavaScript `String(x)`).
    #[error("unknown op verb: {0}")]
    UnknownVerb(String),
    /// A path (or a wire path reference) that is neither an array nor an id.
    #[error("path is not an array")]
    PathNotArray,
    /// An empty path where `s`, `d`, `a` or `t` need a non-empty one.
    #[error("path is empty")]
    PathEmpty,
    /// A numeric path reference that is not an integer ≥ 0.
    #[error("bad path id")]
    BadPathId,
    /// A `#` definition that is not `["#", id≥0, path[]]`.
    #[error("# shape")]
    DefineShape,
    /// `r` with other than one operand.
    #[error("r arity")]
    ReplaceArity,
    /// `s` with the wrong number of operands.
    #[error("s arity")]
    SetArity,
    /// `d` with the wrong number of operands.
    #[error("d arity")]
    DeleteArity,
    /// Decoded `a` that is not `["a", path, text]`.
    #[error("a shape")]
    AppendShape,
    /// Wire `a` whose text is not a string.
    #[error("a value")]
    AppendValue,
    /// Wire `a` with the wrong number of operands.
    #[error("a arity")]
    AppendArity,
    /// Decoded `t` that is not `["t", path, count≥0]`.
    #[error("t shape")]
    TruncateShape,
    /// Wire `t` whose count is not an integer ≥ 0.
    #[error("t count")]
    TruncateCount,
    /// Wire `t` with the wrong number of operands.
    #[error("t arity")]
    TruncateArity,
    /// `p` with the wrong number of operands.
    #[error("p arity")]
    SpliceArity,
    /// `p` whose index is not an integer ≥ 0.
    #[error("p index")]
    SpliceIndex,
    /// `p` whose remove count is not an integer ≥ 0.
    #[error("p remove")]
    SpliceRemove,
    /// `p` whose items are not an array.
    #[error("p items")]
    SpliceItems,
    /// `m` with the wrong number of operands.
    #[error("m arity")]
    PermuteArity,
    /// `m` whose permutation is not an array.
    #[error("m permutation is not an array")]
    PermutationNotArray,
    /// `m` whose permutation is not a bijection on `0..len`.
    #[error("m permutation is not a bijection")]
    PermutationNotBijection,
}

/// Why [`StateDecoder::apply_update_cbor`](crate::chord::StateDecoder::apply_update_cbor)
/// refused an update: at which of the two steps it replaces, so a caller can tell a broken
/// stream (fail the connection) from a replica that lost sync (re-subscribe).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateRefused {
    /// The bytes did not decode, exactly as
    /// [`decode_update_cbor`](crate::chord::StateDecoder::decode_update_cbor) refuses them;
    /// the replica is unchanged.
    #[error(transparent)]
    Decode(ChordError),
    /// The update decoded but the replica refused it, exactly as
    /// [`Replica::apply_update_ref`](crate::chord::Replica::apply_update_ref) does (with the
    /// same effect on the replica).
    #[error(transparent)]
    Apply(ChordError),
}

impl UpdateRefused {
    /// The error, whichever step refused.
    pub fn into_inner(self) -> ChordError {
        match self {
            Self::Decode(e) | Self::Apply(e) => e,
        }
    }
}

/// An error of the chord layer. `Display` is upstream's message, verbatim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChordError {
    /// A service value with the wrong shape: `Invalid <subject>`.
    #[error("Invalid {0}")]
    Invalid(Subject),
    /// Encoded update bytes that are not one item of the CBOR profile (baton's; only for
    /// bytes that did not come through the frame decoder, which validates them).
    #[error(transparent)]
    Cbor(#[from] crate::cbor::ValueDecodeError),
    /// A `reset` update whose state members do not each carry exactly one `r` op.
    #[error("Service reset must contain full root replacements")]
    ResetNotRootReplacements,
    /// An op that breaks the op grammar.
    #[error(transparent)]
    Op(#[from] OpError),
    /// A reserved or malformed path segment (`UnsafePathError`), or an array position
    /// that is not a number or lies beyond one past the end. Holds JavaScript `String(seg)`.
    #[error("unsafe path segment: {0}")]
    UnsafePath(String),
    /// A path or path id that does not resolve (`PathError`). Holds `JSON.stringify(path)`.
    #[error("unresolvable path: {0}")]
    UnresolvablePath(String),
    /// A `state` update for a (instance, member) the codec registry does not know.
    /// Holds `<member>` or `<key>@<generation>.<member>`.
    #[error("Unknown service state {0}")]
    UnknownState(String),
    /// Two state members with the same (instance, member) in one registry.
    #[error("Duplicate service state {0}")]
    DuplicateState(String),
    /// A state update whose sequence is not the previous one plus one.
    #[error("Replicated state update sequence has a gap")]
    SequenceGap,
    /// A state snapshot whose ops do not begin with `r`.
    #[error("Replicated state snapshot is not a base operation batch")]
    NotBaseBatch,
    /// A state update for a member that has no value (never hydrated, or cleared).
    #[error("Replicated state received an update before hydration")]
    NotHydrated,
    /// Consumer: a `reset` for another service or mode, or a singleton reset with more than
    /// one instance.
    #[error("Remote service reset has the wrong service or mode")]
    ResetWrongServiceOrMode,
    /// Consumer: a singleton reset instance with an address, or a keyed one without.
    #[error("Remote service reset has an invalid instance address")]
    ResetInvalidAddress,
    /// Consumer: a keyed reset naming one key twice.
    #[error("Remote service reset repeats an instance key")]
    ResetRepeatsKey,
    /// Consumer: a reset state member that is not exactly one `r` op.
    #[error("Remote service reset must contain full root replacements")]
    ResetNotFullReplacements,
    /// Consumer: a singleton subscription snapshot with other than one instance.
    #[error("Remote service {0} returned an invalid singleton snapshot")]
    InvalidSingletonSnapshot(String),
    /// Consumer: a keyed subscription answered with the wrong service or mode.
    #[error("Remote service {0} returned the wrong keyed snapshot")]
    WrongKeyedSnapshot(String),
    /// Consumer: a keyed instance snapshot without an address.
    #[error("Keyed service instance snapshot has no address")]
    KeyedInstanceWithoutAddress,
    /// Consumer: `unavailable` or `replaced` on a keyed subscription.
    #[error("Keyed service received a singleton lifecycle update")]
    KeyedSingletonLifecycle,
    /// Consumer: a keyed `state` update without an instance address.
    #[error("Keyed state update has no instance address")]
    KeyedStateWithoutAddress,
    /// Consumer: a singleton `replaced` snapshot that carries an address.
    #[error("Singleton replacement has an instance address")]
    SingletonReplacementAddressed,
    /// Consumer: an instance snapshot installed at another address than its own.
    #[error("Remote service snapshot has the wrong address")]
    WrongSnapshotAddress,
    /// Consumer: member names that are empty or repeated within one instance.
    #[error("Remote service has invalid member descriptions")]
    InvalidMemberDescriptions,
    /// Consumer: a `state` update for a member that is not a state member.
    #[error("Remote service update targets non-state member {service_id}.{member}")]
    NotStateMember {
        /// The subscription's service.
        service_id: String,
        /// The member the update named.
        member: String,
    },
    /// Consumer: a replacement that turns a state member into a method.
    #[error("Remote service member {service_id}.{member} changed kind")]
    MemberChangedKind {
        /// The subscription's service.
        service_id: String,
        /// The member whose kind changed.
        member: String,
    },
    /// An error that carries a remote service error code (e.g. a replacement that drops a
    /// state member: `service_member_not_found`).
    #[error(transparent)]
    Remote(#[from] RemoteServiceError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_subjects_render_upstream_messages() {
        assert_eq!(
            ChordError::Invalid(Subject::ServiceCall).to_string(),
            "Invalid service call"
        );
        assert_eq!(
            ChordError::Invalid(Subject::StateUpdateKeys).to_string(),
            "Invalid state update"
        );
        assert_eq!(
            ChordError::Invalid(Subject::StateUpdate).to_string(),
            "Invalid service state update"
        );
        assert_eq!(
            ChordError::Invalid(Subject::ReplacementUpdate).to_string(),
            "Invalid replacement update"
        );
    }

    #[test]
    fn op_errors_render_bare_validator_messages() {
        assert_eq!(
            ChordError::from(OpError::DefineShape).to_string(),
            "# shape"
        );
        assert_eq!(
            ChordError::from(OpError::UnknownVerb("?".into())).to_string(),
            "unknown op verb: ?"
        );
        assert_eq!(
            ChordError::UnresolvablePath("[]".into()).to_string(),
            "unresolvable path: []"
        );
    }
}
