//! The outbound queue of one connection: encoded frames in the order they were produced,
//! with per-subscription bookkeeping so a slow subscriber's backlog can be replaced by one
//! `reset` frame in place.
//!
//! Every frame gets a sequence number when it is queued; the writer takes the lowest. So
//! responses and updates leave in the order the server produced them (a response never
//! overtakes an update published before it), and a subscription's `reset` takes the place
//! of the oldest frame it replaces.

use std::collections::{BTreeMap, HashMap, VecDeque};

use baton_protocol::Id;
use bytes::Bytes;

#[derive(Debug)]
struct Item {
    frame: Bytes,
    subscription: Option<Id>,
}

/// Queued frames plus byte accounting. Pure data; the connection state drives it.
#[derive(Debug, Default)]
pub(crate) struct Outbound {
    next_seq: u64,
    queue: BTreeMap<u64, Item>,
    by_subscription: HashMap<Id, VecDeque<u64>>,
    queued_bytes: usize,
    in_flight: usize,
}

impl Outbound {
    /// Bytes queued or being written.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.queued_bytes + self.in_flight
    }

    /// True when nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Frames queued for one subscription.
    pub(crate) fn subscription_len(&self, id: &Id) -> usize {
        self.by_subscription.get(id).map_or(0, VecDeque::len)
    }

    /// Bytes queued for one subscription.
    pub(crate) fn subscription_bytes(&self, id: &Id) -> usize {
        self.by_subscription.get(id).map_or(0, |seqs| {
            seqs.iter()
                .filter_map(|s| self.queue.get(s))
                .map(|i| i.frame.len())
                .sum()
        })
    }

    fn seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Queues a frame that is not a subscription update.
    pub(crate) fn push(&mut self, frame: Bytes) {
        let seq = self.seq();
        self.queued_bytes += frame.len();
        self.queue.insert(
            seq,
            Item {
                frame,
                subscription: None,
            },
        );
    }

    /// Queues an update frame for `id`.
    pub(crate) fn push_update(&mut self, id: &Id, frame: Bytes) {
        let seq = self.seq();
        self.insert_update(seq, id, frame);
    }

    fn insert_update(&mut self, seq: u64, id: &Id, frame: Bytes) {
        self.queued_bytes += frame.len();
        self.queue.insert(
            seq,
            Item {
                frame,
                subscription: Some(id.clone()),
            },
        );
        self.by_subscription
            .entry(id.clone())
            .or_default()
            .push_back(seq);
    }

    /// Drops every queued frame of `id`; returns how many there were.
    pub(crate) fn remove_subscription(&mut self, id: &Id) -> usize {
        let Some(seqs) = self.by_subscription.remove(id) else {
            return 0;
        };
        for seq in &seqs {
            if let Some(item) = self.queue.remove(seq) {
                self.queued_bytes -= item.frame.len();
            }
        }
        seqs.len()
    }

    /// Replaces every queued frame of `id` by `frame`, at the position of the oldest one
    /// (or at the end if none was queued).
    pub(crate) fn replace_subscription(&mut self, id: &Id, frame: Bytes) {
        let first = self
            .by_subscription
            .get(id)
            .and_then(|seqs| seqs.front().copied());
        self.remove_subscription(id);
        let seq = match first {
            Some(seq) => seq,
            None => self.seq(),
        };
        self.insert_update(seq, id, frame);
    }

    /// Takes the next frame to write. Its bytes stay counted until [`Self::written`].
    pub(crate) fn pop(&mut self) -> Option<Bytes> {
        let (seq, item) = self.queue.pop_first()?;
        if let Some(id) = &item.subscription
            && let Some(seqs) = self.by_subscription.get_mut(id)
        {
            if seqs.front() == Some(&seq) {
                seqs.pop_front();
            } else {
                seqs.retain(|s| *s != seq);
            }
            if seqs.is_empty() {
                self.by_subscription.remove(id);
            }
        }
        self.queued_bytes -= item.frame.len();
        self.in_flight += item.frame.len();
        Some(item.frame)
    }

    /// The frame taken by the last [`Self::pop`] has been written.
    pub(crate) fn written(&mut self, len: usize) {
        self.in_flight = self.in_flight.saturating_sub(len);
    }

    /// Forgets everything (the connection is being torn down).
    pub(crate) fn clear(&mut self) {
        self.queue.clear();
        self.by_subscription.clear();
        self.queued_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Id {
        Id::new(s).unwrap()
    }

    #[test]
    fn frames_leave_in_production_order_across_subscriptions() {
        let mut o = Outbound::default();
        o.push_update(&id("a"), Bytes::from_static(b"a1"));
        o.push(Bytes::from_static(b"r1"));
        o.push_update(&id("b"), Bytes::from_static(b"b1"));
        o.push_update(&id("a"), Bytes::from_static(b"a2"));
        let order: Vec<_> = std::iter::from_fn(|| o.pop()).collect();
        assert_eq!(order, [&b"a1"[..], b"r1", b"b1", b"a2"]);
    }

    #[test]
    fn reset_takes_the_place_of_the_oldest_replaced_frame() {
        let mut o = Outbound::default();
        o.push_update(&id("a"), Bytes::from_static(b"a1"));
        o.push(Bytes::from_static(b"r1"));
        o.push_update(&id("a"), Bytes::from_static(b"a2"));
        o.replace_subscription(&id("a"), Bytes::from_static(b"reset"));
        assert_eq!(o.subscription_len(&id("a")), 1);
        assert_eq!(o.pending_bytes(), 7);
        let order: Vec<_> = std::iter::from_fn(|| o.pop()).collect();
        assert_eq!(order, [&b"reset"[..], b"r1"]);
    }

    #[test]
    fn bytes_stay_counted_until_written() {
        let mut o = Outbound::default();
        o.push(Bytes::from_static(b"abcd"));
        let f = o.pop().unwrap();
        assert_eq!(o.pending_bytes(), 4);
        o.written(f.len());
        assert_eq!(o.pending_bytes(), 0);
    }
}
