//! The subscriptions of one connection and their queueing: updates held while a subscribe
//! is in flight, encoded updates queued per subscriber, and the resync that replaces a
//! subscriber's backlog when it falls behind.
//!
//! Pure data, like the rest of the connection core. [`Subscriptions`] queues into the
//! connection's [`Outbound`] through a [`Sink`] and reports what must close the connection
//! as a [`Fatal`]; the connection state decides what that does to the connection. Which
//! request opens or closes a subscription, and what that request is answered, is the
//! connection state's part.

use std::collections::{BTreeSet, HashMap, VecDeque};

use baton_protocol::Id;

use crate::chord::{
    BatchCursor, InstanceAddress, ProviderUpdate, ServiceMode, SharedUpdate, SubscriptionEncoder,
    SubscriptionSnapshot, addresses, covered_by, resync,
};
use crate::conn::limits::ConnLimits;
use crate::conn::outbound::{Outbound, SubSlot};

/// What became of a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Published {
    /// Queued for the subscriber (or buffered until its subscribe response goes out).
    Queued,
    /// The subscriber was behind: its backlog was replaced by a resync from the current
    /// snapshot (see [`ResyncDialect`](crate::ResyncDialect)).
    Reset,
    /// No such subscription on this connection (never subscribed, or unsubscribed).
    Dropped,
    /// The connection is closed; the host should forget this subscriber.
    Closed,
}

/// Why queueing for a subscriber must close the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fatal {
    /// An update or a resync could not be encoded (logged where it happened).
    Encode,
    /// The frames would not fit in the connection's pending-byte limit.
    PendingBytes,
}

/// The part of the connection that subscriptions queue into.
#[derive(Debug)]
pub(crate) struct Sink<'a> {
    pub(crate) out: &'a mut Outbound,
    pub(crate) limits: &'a ConnLimits,
    /// Set when a frame is queued, so that the writer looks for work.
    pub(crate) wake: &'a mut bool,
}

#[derive(Debug)]
enum Buffered {
    Update(SharedUpdate),
    /// The held updates overflowed: re-baseline on this snapshot once open.
    Resync(SubscriptionSnapshot),
}

/// The instances a keyed subscriber's client holds, so that a resync can close exactly those.
///
/// `delivered` is what the client holds once it has applied every unit of the subscription
/// the writer has taken (the subscribe response's instances to begin with); `pending` lists
/// the instance changes still in the outbound queue, each with the number of the unit that
/// carries it. Changes move from `pending` into `delivered` as the writer takes their units,
/// checked whenever a change is queued or a resync is built, so `pending` never holds more
/// than the subscription's queue (at most one entry per queued unit) and `delivered` never
/// more than the instances the client was told of.
#[derive(Debug, Default)]
struct KeyedView {
    delivered: BTreeSet<InstanceAddress>,
    pending: VecDeque<(u64, ViewChange)>,
}

#[derive(Debug)]
enum ViewChange {
    Spawned(InstanceAddress),
    Closed(InstanceAddress),
    /// A resync: the client then holds exactly these.
    Resync(BTreeSet<InstanceAddress>),
}

impl KeyedView {
    /// Applies every change whose unit the writer has taken (`taken` units so far).
    fn settle(&mut self, taken: u64) {
        while let Some((_, change)) = self.pending.pop_front_if(|(unit, _)| *unit < taken) {
            match change {
                ViewChange::Spawned(address) => {
                    self.delivered.insert(address);
                }
                ViewChange::Closed(address) => {
                    self.delivered.remove(&address);
                }
                ViewChange::Resync(held) => self.delivered = held,
            }
        }
    }

    /// Notes a queued update that spawns or closes an instance, riding in unit `unit`.
    fn queued(&mut self, unit: u64, update: &ProviderUpdate) {
        let change = match update {
            ProviderUpdate::Spawned { instance } => match &instance.instance {
                Some(address) => ViewChange::Spawned(address.clone()),
                None => return,
            },
            ProviderUpdate::Closed { instance } => ViewChange::Closed(instance.clone()),
            _ => return,
        };
        self.pending.push_back((unit, change));
    }
}

#[derive(Debug)]
enum Subscription {
    /// Subscribe in flight: updates wait here until the response is queued.
    Opening {
        request: Id,
        buffer: VecDeque<Buffered>,
    },
    /// Response queued: updates are encoded and queued as they are published.
    Open {
        encoder: SubscriptionEncoder,
        /// Its frames in the outbound queue.
        slot: SubSlot,
        /// What the client holds, for a keyed subscription (a singleton's resync needs no
        /// history).
        view: Option<KeyedView>,
    },
}

/// The subscriptions of one connection, opening or open, by subscription id.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    by_id: HashMap<Id, Subscription>,
}

impl Subscriptions {
    /// Subscriptions opening or open.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// True if `sid` is opening or open.
    pub(crate) fn contains(&self, sid: &Id) -> bool {
        self.by_id.contains_key(sid)
    }

    /// The subscribe request `request` for `sid` was dispatched: updates for `sid` are held
    /// until [`Self::open`].
    pub(crate) fn begin(&mut self, sid: Id, request: Id) {
        self.by_id.insert(
            sid,
            Subscription::Opening {
                request,
                buffer: VecDeque::new(),
            },
        );
    }

    /// The subscribe request `request` ended without opening `sid`: forgets `sid` if that
    /// request is still the one opening it.
    pub(crate) fn abandon(&mut self, sid: &Id, request: &Id) {
        if matches!(self.by_id.get(sid), Some(Subscription::Opening { request: r, .. }) if r == request)
        {
            self.by_id.remove(sid);
        }
    }

    /// Unsubscribed: forgets `sid` and drops its queued frames.
    pub(crate) fn remove(&mut self, out: &mut Outbound, sid: &Id) {
        if let Some(Subscription::Open { slot, .. }) = self.by_id.remove(sid) {
            out.close_subscription(slot);
        }
    }

    /// Forgets every subscription (the connection is closing).
    pub(crate) fn clear(&mut self) {
        self.by_id.clear();
    }

    /// The response of the subscribe request `request` (carrying `snapshot`, encoded by
    /// `encoder`) is queued: opens `sid` and queues the updates held meanwhile, minus those
    /// the snapshot covers. Does nothing if `sid` was unsubscribed while `request` ran.
    pub(crate) fn open(
        &mut self,
        sink: &mut Sink<'_>,
        sid: &Id,
        request: &Id,
        encoder: SubscriptionEncoder,
        snapshot: &SubscriptionSnapshot,
    ) -> Result<(), Fatal> {
        let buffer = match self.by_id.get(sid) {
            Some(Subscription::Opening { request: r, .. }) if r == request => {
                let slot = sink.out.open_subscription();
                let view = (snapshot.mode == ServiceMode::Keyed).then(|| KeyedView {
                    delivered: addresses(snapshot),
                    pending: VecDeque::new(),
                });
                match self.by_id.insert(
                    sid.clone(),
                    Subscription::Open {
                        encoder,
                        slot,
                        view,
                    },
                ) {
                    Some(Subscription::Opening { buffer, .. }) => buffer,
                    _ => VecDeque::new(),
                }
            }
            // Unsubscribed while the subscribe was in flight: nothing to install.
            _ => return Ok(()),
        };
        // Updates published while the subscribe was in flight follow its response.
        for item in buffer {
            match item {
                Buffered::Update(u) if covered_by(u.update(), snapshot) => continue,
                Buffered::Update(u) => {
                    self.enqueue_updates(sink, sid, std::slice::from_ref(&u), None::<fn() -> _>)?
                }
                Buffered::Resync(s) => self.enqueue_resync(sink, sid, &s)?,
            };
        }
        Ok(())
    }

    /// Provider updates for the subscription `sid`, in order. `snapshot` is called only if
    /// the subscriber's backlog must be replaced by a resync; it must include the effect of
    /// every update in `updates`, so the rest of the batch is then dropped (the resync
    /// covers it).
    pub(crate) fn publish(
        &mut self,
        sink: &mut Sink<'_>,
        sid: &str,
        updates: &[SharedUpdate],
        snapshot: impl FnOnce() -> SubscriptionSnapshot,
    ) -> Result<Published, Fatal> {
        let queue_length = sink.limits.subscriber_queue_length;
        let Some((sid, sub)) = self.by_id.get_key_value(sid) else {
            return Ok(Published::Dropped);
        };
        let sid = sid.clone();
        match sub {
            Subscription::Opening { .. } => {
                let Some(Subscription::Opening { buffer, .. }) = self.by_id.get_mut(&sid) else {
                    return Ok(Published::Dropped);
                };
                for update in updates {
                    if buffer.len() >= queue_length {
                        buffer.clear();
                        buffer.push_back(Buffered::Resync(snapshot()));
                        return Ok(Published::Reset);
                    }
                    buffer.push_back(Buffered::Update(update.clone()));
                }
                Ok(Published::Queued)
            }
            Subscription::Open { .. } => self.enqueue_updates(sink, &sid, updates, Some(snapshot)),
        }
    }

    /// The encoder, queue slot and keyed view of the subscription `sid`, if it is open.
    fn open_mut(
        &mut self,
        sid: &Id,
    ) -> Option<(&mut SubscriptionEncoder, SubSlot, &mut Option<KeyedView>)> {
        match self.by_id.get_mut(sid) {
            Some(Subscription::Open {
                encoder,
                slot,
                view,
            }) => Some((encoder, *slot, view)),
            _ => None,
        }
    }

    /// Encodes and queues `updates` for the open subscription `sid`. With `snapshot`, a full
    /// subscriber queue (length or pending bytes) turns into a resync that replaces the
    /// backlog and covers the rest of `updates`; without (replaying what was held during the
    /// subscribe, which is bounded by the queue length already), only the pending-byte limit
    /// applies and breaking it is fatal.
    fn enqueue_updates(
        &mut self,
        sink: &mut Sink<'_>,
        sid: &Id,
        updates: &[SharedUpdate],
        snapshot: Option<impl FnOnce() -> SubscriptionSnapshot>,
    ) -> Result<Published, Fatal> {
        let Some((encoder, slot, view)) = self.open_mut(sid) else {
            return Ok(Published::Dropped);
        };
        let limits = *sink.limits;
        let out = &mut *sink.out;
        let mut full = false;
        let mut failed = None;
        let mut cursor = BatchCursor::default();
        for update in updates {
            if snapshot.is_some() && out.subscription_len(slot) >= limits.subscriber_queue_length {
                full = true;
                break;
            }
            let staged = out.stage();
            let encoded =
                encoder.encode_in_batch(&mut cursor, sid, update, limits.max_frame_length, staged);
            if let Err(reason) = encoded {
                failed = Some(reason);
                break;
            }
            if out.pending_bytes() + out.staged_len() > limits.max_pending_bytes {
                out.discard_staged();
                full = true;
                break;
            }
            out.commit_staged(slot);
            if let Some(view) = view.as_mut()
                && matches!(
                    update.update(),
                    ProviderUpdate::Spawned { .. } | ProviderUpdate::Closed { .. }
                )
            {
                let taken = out.subscription_taken(slot);
                view.settle(taken);
                // The unit just queued is the subscription's last.
                let unit = taken + out.subscription_len(slot) as u64 - 1;
                view.queued(unit, update.update());
            }
            *sink.wake = true;
        }
        encoder.end_batch(cursor);
        if let Some(reason) = failed {
            tracing::warn!(subscription = %sid, %reason, "cannot encode service update; closing connection");
            return Err(Fatal::Encode);
        }
        if !full {
            return Ok(Published::Queued);
        }
        match snapshot {
            Some(snapshot) => self.enqueue_resync(sink, sid, &snapshot()),
            None => Err(Fatal::PendingBytes),
        }
    }

    /// Replaces the backlog of the open subscription `sid` by one resync from `snapshot`
    /// (the state after everything published so far), in the configured dialect
    /// ([`resync`]). The resync is one unit of the subscriber's queue
    /// and takes the place of its oldest queued frame.
    fn enqueue_resync(
        &mut self,
        sink: &mut Sink<'_>,
        sid: &Id,
        snapshot: &SubscriptionSnapshot,
    ) -> Result<Published, Fatal> {
        let Some((encoder, slot, view)) = self.open_mut(sid) else {
            return Ok(Published::Dropped);
        };
        let taken = sink.out.subscription_taken(slot);
        let no_instances = BTreeSet::new();
        let held = match view.as_mut() {
            Some(view) => {
                view.settle(taken);
                &view.delivered
            }
            None => &no_instances,
        };
        let max_frame_length = sink.limits.max_frame_length;
        let frames = resync(sink.limits.resync, snapshot, held)
            .and_then(|updates| encoder.encode_resync(sid, snapshot, &updates, max_frame_length));
        let frames = match frames {
            Ok(frames) => frames,
            Err(reason) => {
                tracing::warn!(subscription = %sid, %reason, "cannot encode resync; closing connection");
                return Err(Fatal::Encode);
            }
        };
        let replaced = sink.out.subscription_bytes(slot);
        if sink.out.pending_bytes() - replaced + frames.len() > sink.limits.max_pending_bytes {
            return Err(Fatal::PendingBytes);
        }
        tracing::debug!(subscription = %sid, "subscriber fell behind; backlog replaced by a resync");
        if let Some(view) = view.as_mut() {
            // What was pending is dropped with the backlog; the resync is unit `taken`.
            view.pending.clear();
            view.pending
                .push_back((taken, ViewChange::Resync(addresses(snapshot))));
        }
        sink.out.replace_subscription(slot, frames);
        *sink.wake = true;
        Ok(Published::Reset)
    }

    /// Instance changes of the keyed subscription `sid` still in the outbound queue, if it
    /// is open and keyed.
    #[cfg(test)]
    pub(crate) fn pending_view_changes(&self, sid: &str) -> Option<usize> {
        match self.by_id.get(sid) {
            Some(Subscription::Open {
                view: Some(view), ..
            }) => Some(view.pending.len()),
            _ => None,
        }
    }
}
