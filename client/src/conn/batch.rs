//! [`UpdateBatch`]: the updates one read brought for one subscription, handed on as they
//! arrived.

use std::fmt;

use super::decode::decode_update;
use baton_protocol::chord::{ProviderUpdate, StateDecoder};

/// The provider updates one read from the connection brought for one subscription, in
/// order, every one already applied to the replica
/// ([`Subscription::state`](crate::Subscription::state)): the payload of
/// [`SubscriptionEvent::Updates`](crate::SubscriptionEvent::Updates).
///
/// A batch keeps each update as it came off the wire, its CBOR bytes (copied into one buffer
/// per batch: slices would keep the connection's whole read buffer alive while the batch is
/// queued, and make every read allocate a fresh one), with the sequence of each `state`
/// update, and the subscription's decoder as it was before the first one (shared, not
/// copied, until the live decoder next changes its path dictionaries). So counting updates
/// or following sequences ([`len`](Self::len), [`sequences`](Self::sequences),
/// [`last_sequence`](Self::last_sequence)) costs no decoding at all, and only a consumer
/// that wants the updates themselves ([`iter`](Self::iter)) pays for decoding them, again
/// from that decoder state, with the very result the replica was given.
#[derive(Clone)]
pub struct UpdateBatch {
    base: StateDecoder,
    /// Every update's bytes, back to back.
    bytes: Vec<u8>,
    updates: Vec<Encoded>,
}

/// One update of a batch: where its bytes end in [`UpdateBatch::bytes`] (they start where
/// the previous one's end), and its sequence if it is a `state` update.
#[derive(Clone, Copy)]
struct Encoded {
    end: usize,
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
            bytes: Vec::new(),
            updates: Vec::new(),
        }
    }

    /// Adds the next update, applied from `bytes` (`sequence` if it was a `state` update).
    pub(crate) fn push(&mut self, bytes: &[u8], sequence: Option<u64>) {
        self.bytes.extend_from_slice(bytes);
        self.updates.push(Encoded {
            end: self.bytes.len(),
            sequence,
        });
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
    pub fn encoded(&self) -> Encodings<'_> {
        Encodings {
            bytes: &self.bytes,
            start: 0,
            rest: self.updates.iter(),
        }
    }

    /// The updates, decoded one by one as the iterator is advanced (what the replica was
    /// given, in order).
    pub fn iter(&self) -> Updates<'_> {
        Updates {
            decoder: self.base.clone(),
            encoded: self.encoded(),
        }
    }
}

/// The CBOR bytes of each update of an [`UpdateBatch`] ([`UpdateBatch::encoded`]).
#[derive(Clone)]
pub struct Encodings<'a> {
    bytes: &'a [u8],
    start: usize,
    rest: std::slice::Iter<'a, Encoded>,
}

impl fmt::Debug for Encodings<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Encodings")
            .field("left", &self.rest.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Iterator for Encodings<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let Encoded { end, .. } = *self.rest.next()?;
        let bytes = self.bytes.get(self.start..end).unwrap_or_default();
        self.start = end;
        Some(bytes)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.rest.size_hint()
    }
}

impl ExactSizeIterator for Encodings<'_> {}

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
    encoded: Encodings<'a>,
}

impl fmt::Debug for Updates<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Updates")
            .field("left", &self.encoded.len())
            .finish_non_exhaustive()
    }
}

impl Iterator for Updates<'_> {
    type Item = ProviderUpdate;

    fn next(&mut self) -> Option<ProviderUpdate> {
        let bytes = self.encoded.next()?;
        // The same bytes from the same decoder state decoded once already, when the update
        // was applied; a failure here would be a bug in the decoder, not in the input.
        match decode_update(&mut self.decoder, bytes) {
            Ok(decoded) => Some(decoded),
            Err(e) => {
                debug_assert!(false, "an applied update failed to decode again: {e}");
                self.encoded.rest = [].iter();
                None
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.encoded.len()))
    }
}
