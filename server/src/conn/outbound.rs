//! The outbound queue of one connection: encoded frames in the order they were produced,
//! with per-subscription bookkeeping so a slow subscriber's backlog can be replaced by one
//! resync entry in place.
//!
//! Frames leave in the order they were queued, so responses and updates leave in the order
//! the server produced them (a response never overtakes an update published before it), and
//! a subscription's resync takes the place of the oldest frame it replaces.
//!
//! A subscription's queue is counted in *units*: one per update frame, and one for a resync
//! entry however many frames it holds (it replaced the whole backlog). Units of one
//! subscription leave in the order they were queued, and [`Outbound::subscription_taken`]
//! counts those the writer has taken, so the connection state can tell which of the updates
//! it queued have reached the writer.
//!
//! Publishing is the hot path (one publisher, many subscribers, every update), so it is kept
//! to appends: update frames are encoded straight into a per-connection arena (no allocation
//! per frame), consecutive frames of one subscription stay there as one open run that is split
//! off as a single queue entry only when something else is queued or the writer comes for
//! it, the queue is a `VecDeque`, and a subscription is addressed by a [`SubSlot`] index
//! rather than by id. Replacing or removing a subscription's frames (rare: a slow subscriber,
//! an unsubscribe) leaves tombstones in place, which the writer skips and which are compacted
//! away once they outnumber the live entries.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

/// Arena space reserved at a time for update frames: about 80 small updates per allocation,
/// and what an idle-but-subscribed connection may keep reserved.
const ARENA_CHUNK: usize = 8 * 1024;
/// Below this much free arena space a fresh chunk is reserved before encoding.
const ARENA_MIN_FREE: usize = 512;
/// An open run is closed at this size, so what the writer takes at once stays bounded.
const RUN_MAX: usize = 32 * 1024;
/// Tombstones are compacted away once there are more than this many and they outnumber the
/// live frames (so compaction is amortised O(1) per frame).
const COMPACT_AFTER: usize = 64;

/// A subscription's handle in the queue. Valid from [`Outbound::open_subscription`] until
/// [`Outbound::close_subscription`]; the index is reused only after its frames are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SubSlot(u32);

/// One queue entry: a frame, or a run of update frames of one subscription.
#[derive(Debug)]
struct Item {
    /// `None` once replaced or removed (a tombstone).
    frame: Option<Bytes>,
    subscription: Option<SubSlot>,
    /// Frames in `frame` (update runs only; 1 otherwise).
    frames: usize,
}

/// Update frames of one subscription at the front of the arena, queued after every entry
/// of `queue` but not split off yet.
#[derive(Debug, Clone, Copy)]
struct OpenRun {
    slot: SubSlot,
    frames: usize,
    len: usize,
}

/// Live units and bytes queued for one subscription, and units taken by the writer.
#[derive(Debug, Default, Clone, Copy)]
struct SlotQueue {
    frames: usize,
    bytes: usize,
    /// Units the writer has taken since the subscription opened.
    taken: u64,
}

/// Queued frames plus byte accounting. Pure data; the connection state drives it.
#[derive(Debug, Default)]
pub(crate) struct Outbound {
    queue: VecDeque<Item>,
    /// Tombstones in `queue`.
    dead: usize,
    slots: Vec<SlotQueue>,
    free_slots: Vec<u32>,
    /// The open run (if any), then the frame being staged ([`Self::stage`]).
    arena: BytesMut,
    open: Option<OpenRun>,
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
        self.queue.len() == self.dead && self.open.is_none()
    }

    /// A handle for a new subscription's frames.
    pub(crate) fn open_subscription(&mut self) -> SubSlot {
        if let Some(i) = self.free_slots.pop() {
            self.slots[i as usize] = SlotQueue::default();
            return SubSlot(i);
        }
        let i = u32::try_from(self.slots.len()).expect("fewer than 2^32 subscriptions");
        self.slots.push(SlotQueue::default());
        SubSlot(i)
    }

    /// Drops every queued frame of `slot` and releases the slot; returns how many frames
    /// there were.
    pub(crate) fn close_subscription(&mut self, slot: SubSlot) -> usize {
        let removed = self.remove_frames(slot, None);
        self.free_slots.push(slot.0);
        removed
    }

    /// Units queued for one subscription.
    pub(crate) fn subscription_len(&self, slot: SubSlot) -> usize {
        self.slots[slot.0 as usize].frames
    }

    /// Units of one subscription the writer has taken since it opened. The unit queued next
    /// has number `subscription_taken + subscription_len` (counting from 0); it has reached
    /// the writer once `subscription_taken` exceeds that.
    pub(crate) fn subscription_taken(&self, slot: SubSlot) -> u64 {
        self.slots[slot.0 as usize].taken
    }

    /// Bytes queued for one subscription.
    pub(crate) fn subscription_bytes(&self, slot: SubSlot) -> usize {
        self.slots[slot.0 as usize].bytes
    }

    /// Queues a frame that is not a subscription update.
    pub(crate) fn push(&mut self, frame: Bytes) {
        self.close_run();
        self.queued_bytes += frame.len();
        self.queue.push_back(Item {
            frame: Some(frame),
            subscription: None,
            frames: 1,
        });
    }

    /// Queues an update frame for `slot`.
    pub(crate) fn push_update(&mut self, slot: SubSlot, frame: Bytes) {
        self.close_run();
        self.count(slot, frame.len());
        self.queue.push_back(Item {
            frame: Some(frame),
            subscription: Some(slot),
            frames: 1,
        });
    }

    /// The buffer to append exactly one update frame to, then [`Self::commit_staged`] or
    /// [`Self::discard_staged`]. What it holds already (the open run) must be left alone.
    pub(crate) fn stage(&mut self) -> &mut BytesMut {
        debug_assert_eq!(self.staged_len(), 0, "a staged frame was left behind");
        if self.arena.capacity() - self.arena.len() < ARENA_MIN_FREE {
            self.arena.reserve(ARENA_CHUNK);
        }
        &mut self.arena
    }

    /// Length of the staged frame.
    pub(crate) fn staged_len(&self) -> usize {
        self.arena.len() - self.open.map_or(0, |run| run.len)
    }

    /// Queues the staged frame for `slot`: appended to the open run if that is `slot`'s.
    pub(crate) fn commit_staged(&mut self, slot: SubSlot) {
        let len = self.staged_len();
        self.count(slot, len);
        match &mut self.open {
            Some(run) if run.slot == slot && run.len + len <= RUN_MAX => {
                run.frames += 1;
                run.len += len;
            }
            _ => {
                self.close_run();
                self.open = Some(OpenRun {
                    slot,
                    frames: 1,
                    len,
                });
            }
        }
    }

    /// Forgets the staged frame.
    pub(crate) fn discard_staged(&mut self) {
        self.arena.truncate(self.open.map_or(0, |run| run.len));
    }

    /// Splits the open run off the arena into the queue.
    fn close_run(&mut self) {
        if let Some(run) = self.open.take() {
            let frame = self.arena.split_to(run.len).freeze();
            self.queue.push_back(Item {
                frame: Some(frame),
                subscription: Some(run.slot),
                frames: run.frames,
            });
        }
    }

    /// Replaces every queued unit of `slot` by `frame` (one unit, though it may hold several
    /// frames), at the position of the oldest one (or at the end if none was queued).
    pub(crate) fn replace_subscription(&mut self, slot: SubSlot, frame: Bytes) {
        if self.slots[slot.0 as usize].frames == 0 {
            self.push_update(slot, frame);
            return;
        }
        self.remove_frames(slot, Some(frame));
    }

    /// Tombstones every queued frame of `slot`, except that with `replacement` the oldest
    /// one is swapped for it instead. Returns how many frames were queued.
    fn remove_frames(&mut self, slot: SubSlot, mut replacement: Option<Bytes>) -> usize {
        self.close_run();
        let queued = self.slots[slot.0 as usize];
        let replacement_len = replacement.as_ref().map(Bytes::len);
        self.slots[slot.0 as usize] = SlotQueue {
            taken: queued.taken,
            ..SlotQueue::default()
        };
        self.queued_bytes -= queued.bytes;
        let mut left = queued.frames;
        for item in &mut self.queue {
            if left == 0 {
                break;
            }
            if item.subscription != Some(slot) || item.frame.is_none() {
                continue;
            }
            left -= item.frames;
            match replacement.take() {
                Some(frame) => {
                    item.frame = Some(frame);
                    item.frames = 1;
                }
                None => {
                    item.frame = None;
                    self.dead += 1;
                }
            }
        }
        debug_assert_eq!(left, 0, "slot bookkeeping out of step with the queue");
        // With at least one frame queued, the replacement now sits where the oldest was.
        if let Some(len) = replacement_len.filter(|_| queued.frames > 0) {
            self.queued_bytes += len;
            self.slots[slot.0 as usize] = SlotQueue {
                frames: 1,
                bytes: len,
                taken: queued.taken,
            };
        }
        self.compact();
        queued.frames
    }

    fn count(&mut self, slot: SubSlot, len: usize) {
        let q = &mut self.slots[slot.0 as usize];
        q.frames += 1;
        q.bytes += len;
        self.queued_bytes += len;
    }

    fn compact(&mut self) {
        while self.queue.front().is_some_and(|i| i.frame.is_none()) {
            self.queue.pop_front();
            self.dead -= 1;
        }
        if self.dead > COMPACT_AFTER && self.dead * 2 > self.queue.len() {
            self.queue.retain(|i| i.frame.is_some());
            self.dead = 0;
        }
    }

    /// Takes the next frame, or run of update frames, to write. Its bytes stay counted until
    /// [`Self::written`].
    pub(crate) fn pop(&mut self) -> Option<Bytes> {
        // The open run is last in line; once the writer gets here it may as well take it.
        self.close_run();
        loop {
            let item = self.queue.pop_front()?;
            let Some(frame) = item.frame else {
                self.dead -= 1;
                continue;
            };
            if let Some(slot) = item.subscription {
                let q = &mut self.slots[slot.0 as usize];
                q.frames -= item.frames;
                q.bytes -= frame.len();
                q.taken += item.frames as u64;
            }
            self.queued_bytes -= frame.len();
            self.in_flight += frame.len();
            return Some(frame);
        }
    }

    /// The frame taken by the last [`Self::pop`] has been written.
    pub(crate) fn written(&mut self, len: usize) {
        self.in_flight = self.in_flight.saturating_sub(len);
    }

    /// Forgets everything queued (the connection is being torn down).
    pub(crate) fn clear(&mut self) {
        self.queue.clear();
        self.dead = 0;
        self.slots.iter_mut().for_each(|q| {
            *q = SlotQueue {
                taken: q.taken,
                ..SlotQueue::default()
            }
        });
        self.arena = BytesMut::new();
        self.open = None;
        self.queued_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(o: &mut Outbound) -> Vec<Bytes> {
        std::iter::from_fn(|| o.pop()).collect()
    }

    #[test]
    fn frames_leave_in_production_order_across_subscriptions() {
        let mut o = Outbound::default();
        let (a, b) = (o.open_subscription(), o.open_subscription());
        o.push_update(a, Bytes::from_static(b"a1"));
        o.push(Bytes::from_static(b"r1"));
        o.push_update(b, Bytes::from_static(b"b1"));
        o.push_update(a, Bytes::from_static(b"a2"));
        assert_eq!(drain(&mut o), [&b"a1"[..], b"r1", b"b1", b"a2"]);
        assert_eq!((o.subscription_len(a), o.subscription_len(b)), (0, 0));
    }

    #[test]
    fn taken_counts_each_subscriptions_units_as_the_writer_takes_them() {
        let mut o = Outbound::default();
        let (a, b) = (o.open_subscription(), o.open_subscription());
        o.push_update(a, Bytes::from_static(b"a1"));
        o.push_update(b, Bytes::from_static(b"b1"));
        for _ in 0..3 {
            o.stage().extend_from_slice(b"a");
            o.commit_staged(a);
        }
        assert_eq!((o.subscription_taken(a), o.subscription_len(a)), (0, 4));
        o.pop();
        assert_eq!(o.subscription_taken(a), 1);
        o.pop();
        assert_eq!(o.subscription_taken(b), 1);
        // A resync replaces the run of three and counts as one unit.
        o.replace_subscription(a, Bytes::from_static(b"resync"));
        assert_eq!((o.subscription_taken(a), o.subscription_len(a)), (1, 1));
        o.pop();
        assert_eq!((o.subscription_taken(a), o.subscription_len(a)), (2, 0));
        // A reopened slot counts from zero.
        o.close_subscription(a);
        let c = o.open_subscription();
        assert_eq!((o.subscription_taken(c), o.subscription_len(c)), (0, 0));
    }

    #[test]
    fn a_resync_takes_the_place_of_the_oldest_replaced_frame() {
        let mut o = Outbound::default();
        let (a, b) = (o.open_subscription(), o.open_subscription());
        o.push(Bytes::from_static(b"r0"));
        o.push_update(a, Bytes::from_static(b"a1"));
        o.push(Bytes::from_static(b"r1"));
        o.push_update(b, Bytes::from_static(b"b1"));
        o.push_update(a, Bytes::from_static(b"a2"));
        o.push_update(a, Bytes::from_static(b"a3"));
        o.replace_subscription(a, Bytes::from_static(b"reset"));
        assert_eq!(o.subscription_len(a), 1);
        assert_eq!(o.subscription_bytes(a), 5);
        assert_eq!(o.pending_bytes(), 2 + 5 + 2 + 2);
        o.push_update(a, Bytes::from_static(b"a4"));
        assert_eq!(drain(&mut o), [&b"r0"[..], b"reset", b"r1", b"b1", b"a4"]);
        assert!(o.is_empty());
    }

    #[test]
    fn a_resync_of_a_subscription_with_nothing_queued_goes_last() {
        let mut o = Outbound::default();
        let a = o.open_subscription();
        o.push(Bytes::from_static(b"r1"));
        o.replace_subscription(a, Bytes::from_static(b"reset"));
        assert_eq!(drain(&mut o), [&b"r1"[..], b"reset"]);
    }

    #[test]
    fn closing_a_subscription_drops_its_frames_and_frees_its_slot() {
        let mut o = Outbound::default();
        let (a, b) = (o.open_subscription(), o.open_subscription());
        o.push_update(a, Bytes::from_static(b"a1"));
        o.push_update(b, Bytes::from_static(b"b1"));
        o.push_update(a, Bytes::from_static(b"a2"));
        assert_eq!(o.close_subscription(a), 2);
        assert_eq!(o.pending_bytes(), 2);
        let c = o.open_subscription();
        assert_eq!(c, a, "the slot is reused");
        assert_eq!(o.subscription_len(c), 0);
        o.push_update(c, Bytes::from_static(b"c1"));
        assert_eq!(drain(&mut o), [&b"b1"[..], b"c1"]);
    }

    #[test]
    fn repeated_resyncs_behind_a_stalled_writer_do_not_grow_the_queue() {
        let mut o = Outbound::default();
        let a = o.open_subscription();
        for round in 0..100 {
            for _ in 0..50 {
                o.push_update(a, Bytes::from_static(b"update"));
            }
            o.replace_subscription(a, Bytes::from(format!("reset{round}")));
            assert!(o.queue.len() <= 2 * COMPACT_AFTER + 50, "{}", o.queue.len());
        }
        assert_eq!(drain(&mut o), [Bytes::from("reset99")]);
        assert_eq!(o.pending_bytes(), 7);
    }

    #[test]
    fn staged_frames_leave_in_order_as_runs_per_subscription() {
        let mut o = Outbound::default();
        let (a, b) = (o.open_subscription(), o.open_subscription());
        let mut expected = Vec::new();
        for i in 0..200u8 {
            let slot = if i % 50 < 40 { a } else { b };
            o.stage().extend_from_slice(&[i; 100]);
            assert_eq!(o.staged_len(), 100);
            if i % 3 == 0 {
                o.discard_staged();
            } else {
                o.commit_staged(slot);
                expected.extend_from_slice(&[i; 100]);
            }
            if i == 120 {
                o.push(Bytes::from_static(b"response"));
                expected.extend_from_slice(b"response");
            }
        }
        assert_eq!(o.subscription_len(a), 106);
        assert_eq!(o.subscription_bytes(b), 2_700);
        let taken = drain(&mut o);
        // a 0..40, b 40..50, a 50..90, b 90..100, a 100..121, response, a 121..140,
        // b 140..150, a 150..190, b 190..200.
        assert_eq!(taken.len(), 10);
        assert_eq!(taken.concat(), expected);
        assert_eq!((o.subscription_len(a), o.subscription_len(b)), (0, 0));
    }

    #[test]
    fn a_resync_replaces_a_run_still_in_the_arena() {
        let mut o = Outbound::default();
        let (a, b) = (o.open_subscription(), o.open_subscription());
        o.push_update(b, Bytes::from_static(b"b1"));
        for _ in 0..3 {
            o.stage().extend_from_slice(b"a");
            o.commit_staged(a);
        }
        assert_eq!(o.subscription_len(a), 3);
        o.replace_subscription(a, Bytes::from_static(b"reset"));
        o.stage().extend_from_slice(b"a4");
        o.commit_staged(a);
        assert_eq!(o.subscription_len(a), 2);
        assert_eq!(o.pending_bytes(), 2 + 5 + 2);
        assert_eq!(drain(&mut o), [&b"b1"[..], b"reset", b"a4"]);
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
