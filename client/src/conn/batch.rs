//! [`UpdateBatch`]: the updates one read brought for one subscription, handed on as they
//! arrived.

use std::fmt;

use baton_protocol::chord::{ProviderUpdate, StateDecoder};
use bytes::Bytes;

use super::decode::decode_update;

/// The provider updates one read from the connection brought for one subscription, in
/// order, every one already applied to the replica
/// ([`Subscription::state`](crate::Subscription::state)): the payload of
/// [`SubscriptionEvent::Updates`](crate::SubscriptionEvent::Updates).
///
/// A batch keeps each update as it came off the wire, its CBOR bytes (a refcounted slice of
/// the connection's read buffer, not a copy), with the sequence of each `state` update, and
/// the subscription's decoder as it was before the first one (shared, not copied, until the
/// live decoder next changes its path dictionaries). So counting updates or following
/// sequences ([`len`](Self::len), [`sequences`](Self::sequences),
/// [`last_sequence`](Self::last_sequence)) costs no decoding at all, and only a consumer
/// that wants the updates themselves ([`iter`](Self::iter)) pays for decoding them, again
/// from that decoder state, with the very result the replica was given.
///
/// While a batch is queued it keeps alive the read buffer its bytes were sliced from
/// (64 KiB reads; the subscription's event queue is bounded in events, so in batches).
#[derive(Clone)]
pub struct UpdateBatch {
    base: StateDecoder,
    updates: Vec<Encoded>,
}

#[derive(Clone)]
struct Encoded {
    bytes: Bytes,
    sequence: Option<u64>,
}

impl fmt::Debug for UpdateBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpdateBatch")
            .field("len", &self.updates.len())
            .field("last_sequence", &self.last_sequence())
            .finish_non_exhaustive()
    }
}

impl UpdateBatch {
    /// An empty batch of a subscription whose decoder is `base` before its first update.
    pub(crate) fn new(base: StateDecoder) -> Self {
        Self {
            base,
            updates: Vec::new(),
        }
    }

    /// Adds the next update, applied from `bytes` (`sequence` if it was a `state` update).
    pub(crate) fn push(&mut self, bytes: Bytes, sequence: Option<u64>) {
        self.updates.push(Encoded { bytes, sequence });
    }

    /// How many updates the batch holds (at least one in an event).
    pub fn len(&self) -> usize {
        self.updates.len()
    }

    /// Whether the batch holds no update (never in an event).
    pub fn is_empty(&self) -> bool {
        self.updates.is_empty()
    }

    /// Each update's sequence if it is a `state` update (`None` for `spawned`, `closed`,
    /// `replaced`, `unavailable` and `reset`), in order, without decoding anything.
    pub fn sequences(&self) -> impl ExactSizeIterator<Item = Option<u64>> + '_ {
        self.updates.iter().map(|update| update.sequence)
    }

    /// The sequence of the batch's last `state` update, if it has one, without decoding.
    pub fn last_sequence(&self) -> Option<u64> {
        self.updates.iter().rev().find_map(|update| update.sequence)
    }

    /// Each update's CBOR bytes as the server sent them (the wire form: path ids and short
    /// forms, only meaningful to the subscription's decoder).
    pub fn encoded(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.updates.iter().map(|update| &update.bytes[..])
    }

    /// The updates, decoded one by one as the iterator is advanced (what the replica was
    /// given, in order).
    pub fn iter(&self) -> Updates<'_> {
        Updates {
            decoder: self.base.clone(),
            rest: self.updates.iter(),
        }
    }
}

impl<'a> IntoIterator for &'a UpdateBatch {
    type Item = ProviderUpdate;
    type IntoIter = Updates<'a>;

    fn into_iter(self) -> Updates<'a> {
        self.iter()
    }
}

/// The decoded updates of an [`UpdateBatch`] ([`UpdateBatch::iter`]).
pub struct Updates<'a> {
    decoder: StateDecoder,
    rest: std::slice::Iter<'a, Encoded>,
}

impl fmt::Debug for Updates<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Updates")
            .field("left", &self.rest.len())
            .finish_non_exhaustive()
    }
}

impl Iterator for Updates<'_> {
    type Item = ProviderUpdate;

    fn next(&mut self) -> Option<ProviderUpdate> {
        let update = self.rest.next()?;
        // The same bytes from the same decoder state decoded once already, when the update
        // was applied; a failure here would be a bug in the decoder, not in the input.
        match decode_update(&mut self.decoder, &update.bytes) {
            Ok(decoded) => Some(decoded),
            Err(e) => {
                debug_assert!(false, "an applied update failed to decode again: {e}");
                self.rest = [].iter();
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.rest.len()))
    }
}
