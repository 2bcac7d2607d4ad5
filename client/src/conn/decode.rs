//! One subscription's update bytes, decoded or applied the way the client reads them.
//!
//! The only rule beyond the protocol crate's [`StateDecoder`]: a `spawned` for an instance
//! address the client already holds replaces it (a server re-baselining a subscriber that
//! fell behind re-spawns every live instance), so that instance's path dictionaries are
//! dropped and the update decoded afresh; the replica then replaces the instance with the
//! same key.
//!
//! A key that comes back under a new generation keeps the old generation's dictionaries
//! until its `closed`, as upstream's decoder does: the encoder keeps them too, and may still
//! send updates for it (which the replica ignores).

use baton_protocol::Value;
use baton_protocol::chord::{
    ChordError, InstanceAddress, ProviderUpdate, Replica, StateDecoder, UpdateRefused,
};
use baton_protocol::limits::{CborLimits, MAX_CONFIGURABLE_CBOR_DEPTH};

const REREAD: CborLimits = CborLimits {
    max_byte_length: u32::MAX,
    max_container_length: u32::MAX,
    max_depth: MAX_CONFIGURABLE_CBOR_DEPTH,
    max_total_items: u32::MAX,
};

/// Applies one update's bytes to `replica` straight from the bytes
/// ([`StateDecoder::apply_update_cbor`]), or only advances the decoder when the glue holds no
/// replica. Returns the update's sequence if it is a `state` update.
pub(super) fn apply_update(
    decoder: &mut StateDecoder,
    raw: &[u8],
    replica: Option<&mut Replica>,
) -> Result<Option<u64>, UpdateRefused> {
    let Some(replica) = replica else {
        return decode_update(decoder, raw)
            .map(|update| sequence_of(&update))
            .map_err(UpdateRefused::Decode);
    };
    match decoder.apply_update_cbor(raw, replica) {
        // The decoder refused before touching the replica.
        Err(UpdateRefused::Decode(ChordError::DuplicateState(described))) => {
            let update = respawn(decoder, raw, described).map_err(UpdateRefused::Decode)?;
            replica.apply_update(update).map_err(UpdateRefused::Apply)?;
            Ok(None)
        }
        other => other,
    }
}

/// Decodes one update's bytes (what [`apply_update`] applies).
pub(super) fn decode_update(
    decoder: &mut StateDecoder,
    raw: &[u8],
) -> Result<ProviderUpdate, ChordError> {
    match decoder.decode_update_cbor(raw) {
        Err(ChordError::DuplicateState(described)) => respawn(decoder, raw, described),
        other => other,
    }
}

fn sequence_of(update: &ProviderUpdate) -> Option<u64> {
    match update {
        ProviderUpdate::State { sequence, .. } => Some(*sequence),
        _ => None,
    }
}

/// A `spawned` for an instance the decoder holds: its dictionaries are dropped and the update
/// decoded afresh. Anything else that repeats a state stays the error `described`.
fn respawn(
    decoder: &mut StateDecoder,
    raw: &[u8],
    described: String,
) -> Result<ProviderUpdate, ChordError> {
    let value = baton_protocol::cbor::decode_value(raw, &REREAD)?;
    let Some(address) = spawned_address(&value) else {
        return Err(ChordError::DuplicateState(described));
    };
    // Also drops whatever the failed attempt had added for this address.
    forget_instance(decoder, &address)?;
    decoder.decode_update(&value)
}

/// The address of a wire `spawned` update, if `value` is one.
fn spawned_address(value: &Value) -> Option<InstanceAddress> {
    let map = value.as_map()?;
    if map.get("type")?.as_str()? != "spawned" {
        return None;
    }
    InstanceAddress::parse(map.get("instance")?.as_map()?.get("instance")?).ok()
}

/// Drops the decoder's path dictionaries of one instance, as a `closed` for it would (the
/// decoder has no other way to forget an instance; the replica is not told).
fn forget_instance(
    decoder: &mut StateDecoder,
    address: &InstanceAddress,
) -> Result<(), ChordError> {
    let closed = ProviderUpdate::Closed {
        instance: address.clone(),
    };
    decoder.decode_update(&closed.to_value()).map(drop)
}
