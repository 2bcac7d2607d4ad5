//! Subscriptions: a replica rebuilt from one snapshot plus deltas, and a stream of changes.
//!
//! The driver owns the decoding side ([`SubCore`]); users hold a [`Subscription`]. The
//! replica is published through a `watch` channel, so its current value is never lost however
//! slowly a consumer reads. Change events go through a bounded queue; when a consumer falls
//! that far behind, the missed events collapse into one [`SubscriptionEvent::Lagged`] (in
//! order, never reordered), and [`Subscription::state`] still shows the exact server state.
//!
//! A server re-baselines a subscriber that fell behind with `reset` (pi 1.0.x) or, in baton,
//! with `replaced` (singleton) or `closed` + `spawned` (keyed); each is applied as the update
//! it is and reported as [`SubscriptionEvent::Update`], as `reset` is. A `spawned` for an
//! instance the client already holds replaces it, path dictionaries included.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use baton_protocol::chord::{
    ChordError, InstanceAddress, ProviderUpdate, Replica, ServiceMode, StateDecoder,
};
use baton_protocol::limits::{CborLimits, MAX_CONFIGURABLE_CBOR_DEPTH};
use baton_protocol::{Id, Target, Value};
use bytes::Bytes;
use futures::Stream;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::debug;

use crate::client::Shared;
use crate::config::{DEFAULT_EARLY_UPDATE_BUFFER, DEFAULT_SUBSCRIPTION_EVENTS};
use crate::driver::{Deferred, Reply, TargetSpec};
use crate::error::RequestError;

/// Something that happened to a subscription, in order.
#[derive(Debug, Clone)]
pub enum SubscriptionEvent {
    /// A snapshot was installed: the first one, or a re-synchronisation after a gap,
    /// overflow or reconnect (`resynced: true`).
    Snapshot {
        /// True for every snapshot after the first.
        resynced: bool,
    },
    /// A provider update was applied to the replica.
    Update(Arc<ProviderUpdate>),
    /// Events were dropped because this consumer fell behind; [`Subscription::state`] is
    /// still exact.
    Lagged,
    /// The replica lost sync and the client is re-subscribing.
    Resyncing {
        /// Why (sequence gap, lost connection, …).
        reason: String,
    },
    /// The subscription ended for good.
    Ended {
        /// Why.
        reason: String,
    },
}

/// A live subscription. Dropping it unsubscribes.
pub struct Subscription {
    key: u64,
    service_id: String,
    state: watch::Receiver<Arc<Replica>>,
    events: mpsc::Receiver<SubscriptionEvent>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("service_id", &self.service_id)
            .finish_non_exhaustive()
    }
}

impl Subscription {
    /// The subscribed service.
    pub fn service_id(&self) -> &str {
        &self.service_id
    }

    /// The replica as of now.
    pub fn state(&self) -> Arc<Replica> {
        Arc::clone(&self.state.borrow())
    }

    /// A watch on the replica (changes whenever an update or snapshot is applied).
    pub fn watch(&self) -> watch::Receiver<Arc<Replica>> {
        self.state.clone()
    }

    /// The next change event; `None` after the subscription ended.
    pub async fn next_event(&mut self) -> Option<SubscriptionEvent> {
        self.events.recv().await
    }

    /// The next change event if one is already queued.
    pub fn try_next_event(&mut self) -> Option<SubscriptionEvent> {
        self.events.try_recv().ok()
    }
}

impl Stream for Subscription {
    type Item = SubscriptionEvent;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<SubscriptionEvent>> {
        self.events.poll_recv(cx)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.shared.defer(Deferred::Unsubscribe(self.key));
    }
}

/// Waits for a new subscription's first snapshot.
pub(crate) struct PendingSubscription {
    ready: oneshot::Receiver<Result<(), RequestError>>,
    sub: Subscription,
}

impl PendingSubscription {
    pub(crate) async fn ready(self) -> Result<Subscription, RequestError> {
        let Self { ready, sub } = self;
        match ready.await {
            Ok(Ok(())) => Ok(sub),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(RequestError::NotSent("client closed".to_owned())),
        }
    }
}

/// A new subscription for the driver.
pub(crate) struct SubscribeCmd {
    key: u64,
    target: TargetSpec,
    service_id: String,
    mode: ServiceMode,
    view: watch::Sender<Arc<Replica>>,
    events: mpsc::Sender<SubscriptionEvent>,
    ready: oneshot::Sender<Result<(), RequestError>>,
}

impl SubscribeCmd {
    pub(crate) fn new(
        key: u64,
        target: TargetSpec,
        service_id: String,
        mode: ServiceMode,
        shared: Arc<Shared>,
    ) -> (Self, PendingSubscription) {
        let (view, state) = watch::channel(Arc::new(Replica::new(service_id.clone(), mode)));
        let (events_tx, events) = mpsc::channel(DEFAULT_SUBSCRIPTION_EVENTS);
        let (ready_tx, ready) = oneshot::channel();
        let cmd = Self {
            key,
            target,
            service_id: service_id.clone(),
            mode,
            view,
            events: events_tx,
            ready: ready_tx,
        };
        let sub = Subscription {
            key,
            service_id,
            state,
            events,
            shared,
        };
        (cmd, PendingSubscription { ready, sub })
    }

    pub(crate) fn reject(self, err: RequestError) {
        let _ = self.ready.send(Err(err));
    }
}

enum Phase {
    /// Not on the wire (waiting for a connection or an attachment).
    Idle,
    /// Subscribe sent; updates that beat the snapshot wait here, in order.
    /// Updates that arrived before the snapshot, still encoded.
    Subscribing { early: VecDeque<Bytes> },
    /// Snapshot installed; updates decode and apply directly.
    Active { decoder: StateDecoder },
}

struct Sub {
    target: TargetSpec,
    service_id: String,
    mode: ServiceMode,
    wire: Option<(Id, Target)>,
    phase: Phase,
    view: watch::Sender<Arc<Replica>>,
    events: mpsc::Sender<SubscriptionEvent>,
    lagged: bool,
    ready: Option<oneshot::Sender<Result<(), RequestError>>>,
    snapshots: u64,
}

impl Sub {
    /// Queues an event without ever blocking the driver. The last free slot is kept for a
    /// `Lagged` marker, so a consumer that falls behind always learns it, in order, right
    /// after the last event it did get.
    fn emit(&mut self, event: SubscriptionEvent) {
        if self.events.is_closed() {
            return;
        }
        if self.lagged {
            // Resume only once there is room for this event and a future marker.
            if self.events.capacity() < 2 {
                return;
            }
            self.lagged = false;
        }
        if self.events.capacity() <= 1 {
            let _ = self.events.try_send(SubscriptionEvent::Lagged);
            self.lagged = true;
            return;
        }
        let _ = self.events.try_send(event);
    }

    fn install(&mut self, snapshot: &Value, early: VecDeque<Bytes>) -> Result<(), ChordError> {
        let mut decoder = StateDecoder::new();
        let snapshot = decoder.decode_snapshot(snapshot)?;
        let mut replica = Replica::new(self.service_id.clone(), self.mode);
        replica.apply_snapshot(snapshot)?;
        let mut applied = Vec::with_capacity(early.len());
        for raw in early {
            let update = Arc::new(decode_update(&mut decoder, &raw)?);
            replica.apply_update_ref(&update)?;
            applied.push(update);
        }
        self.view.send_replace(Arc::new(replica));
        self.phase = Phase::Active { decoder };
        let resynced = self.snapshots > 0;
        self.snapshots += 1;
        self.emit(SubscriptionEvent::Snapshot { resynced });
        for update in applied {
            self.emit(SubscriptionEvent::Update(update));
        }
        Ok(())
    }
}

/// Limits for re-reading update bytes that already passed the frame's limits.
const REREAD: CborLimits = CborLimits {
    max_byte_length: u32::MAX,
    max_container_length: u32::MAX,
    max_depth: MAX_CONFIGURABLE_CBOR_DEPTH,
    max_total_items: u32::MAX,
};

/// Decodes one update's bytes, treating a `spawned` for an instance address the client
/// already holds as replacing it: that instance's path dictionaries are dropped and the
/// update decoded afresh (a server re-baselining a subscriber that fell behind re-spawns
/// every live instance). The replica then replaces the instance with the same key.
///
/// A key that comes back under a new generation keeps the old generation's dictionaries
/// until its `closed`, as upstream's decoder does: the encoder keeps them too, and may
/// still send updates for it (which the replica ignores).
fn decode_update(decoder: &mut StateDecoder, raw: &[u8]) -> Result<ProviderUpdate, ChordError> {
    match decoder.decode_update_cbor(raw) {
        Err(ChordError::DuplicateState(described)) => {
            let value = baton_protocol::cbor::decode_value(raw, &REREAD)?;
            let Some(address) = spawned_address(&value) else {
                return Err(ChordError::DuplicateState(described));
            };
            // Also drops whatever the failed attempt had added for this address.
            forget_instance(decoder, &address)?;
            decoder.decode_update(&value)
        }
        other => other,
    }
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

/// Driver-side state of every subscription of one client.
#[derive(Default)]
pub(crate) struct SubCore {
    subs: HashMap<u64, Sub>,
    by_wire: HashMap<Id, u64>,
}

/// Outcome of feeding the core: subscriptions to re-subscribe, or a fatal protocol error.
pub(crate) type Resync = Result<Vec<u64>, String>;

impl SubCore {
    pub(crate) fn insert(&mut self, cmd: SubscribeCmd) -> u64 {
        let key = cmd.key;
        self.subs.insert(
            key,
            Sub {
                target: cmd.target,
                service_id: cmd.service_id,
                mode: cmd.mode,
                wire: None,
                phase: Phase::Idle,
                view: cmd.view,
                events: cmd.events,
                lagged: false,
                ready: Some(cmd.ready),
                snapshots: 0,
            },
        );
        key
    }

    pub(crate) fn request_parts(&self, key: u64) -> Option<(TargetSpec, String, ServiceMode)> {
        let sub = self.subs.get(&key)?;
        Some((sub.target.clone(), sub.service_id.clone(), sub.mode))
    }

    pub(crate) fn begin(&mut self, key: u64, wire_id: Id, target: Target) {
        if let Some(sub) = self.subs.get_mut(&key) {
            self.by_wire.insert(wire_id.clone(), key);
            sub.wire = Some((wire_id, target));
            sub.phase = Phase::Subscribing {
                early: VecDeque::new(),
            };
        }
    }

    /// The subscribe request failed: the first one fails the caller, a later one ends it.
    pub(crate) fn fail(&mut self, key: u64, err: RequestError) {
        let Some(mut sub) = self.subs.remove(&key) else {
            return;
        };
        if let Some((wire_id, _)) = sub.wire.take() {
            self.by_wire.remove(&wire_id);
        }
        match sub.ready.take() {
            Some(ready) => {
                let _ = ready.send(Err(err));
            }
            None => sub.emit(SubscriptionEvent::Ended {
                reason: err.to_string(),
            }),
        }
    }

    /// The user dropped the subscription. Returns the wire id to unsubscribe, if any.
    pub(crate) fn remove(&mut self, key: u64) -> Option<(Id, Target)> {
        let mut sub = self.subs.remove(&key)?;
        let (wire_id, target) = sub.wire.take()?;
        self.by_wire.remove(&wire_id);
        Some((wire_id, target))
    }

    /// Forgets the current wire id of `key` (before re-subscribing under a fresh one).
    pub(crate) fn detach_wire(&mut self, key: u64) -> Option<(Id, Target)> {
        let sub = self.subs.get_mut(&key)?;
        let (wire_id, target) = sub.wire.take()?;
        self.by_wire.remove(&wire_id);
        sub.phase = Phase::Idle;
        Some((wire_id, target))
    }

    pub(crate) fn on_update(&mut self, wire_id: &Id, update: Bytes) -> Resync {
        // Updates for unknown subscriptions are ignored (upstream behaviour).
        let Some(&key) = self.by_wire.get(wire_id) else {
            return Ok(Vec::new());
        };
        let Some(sub) = self.subs.get_mut(&key) else {
            return Ok(Vec::new());
        };
        match &mut sub.phase {
            Phase::Idle => Ok(Vec::new()),
            Phase::Subscribing { early } => {
                if early.len() >= DEFAULT_EARLY_UPDATE_BUFFER {
                    sub.emit(SubscriptionEvent::Resyncing {
                        reason: "too many updates before the snapshot".to_owned(),
                    });
                    return Ok(vec![key]);
                }
                // A copy: the slice would keep the connection's whole read buffer alive for
                // as long as the snapshot takes.
                early.push_back(Bytes::copy_from_slice(&update));
                Ok(Vec::new())
            }
            Phase::Active { decoder } => {
                // A wire form we cannot decode means the server is broken: fail the connection.
                let decoded = decode_update(decoder, &update)
                    .map_err(|e| format!("invalid service update for {wire_id}: {e}"))?;
                // Applied by reference, so the event shares the update instead of a copy.
                let decoded = Arc::new(decoded);
                let mut outcome = Ok(());
                sub.view.send_modify(|replica| {
                    outcome = Arc::make_mut(replica).apply_update_ref(&decoded);
                });
                match outcome {
                    Ok(()) => {
                        sub.emit(SubscriptionEvent::Update(decoded));
                        Ok(Vec::new())
                    }
                    Err(e) => {
                        debug!(subscription = %wire_id, error = %e, "replica lost sync; re-subscribing");
                        sub.emit(SubscriptionEvent::Resyncing {
                            reason: e.to_string(),
                        });
                        Ok(vec![key])
                    }
                }
            }
        }
    }

    pub(crate) fn on_response(&mut self, key: u64, result: Result<Reply, RequestError>) -> Resync {
        let snapshot = match result {
            Ok(Reply::Value(v)) => v,
            Ok(Reply::Void) => {
                return Err("Service subscription did not return a snapshot".to_owned());
            }
            Err(e) => {
                self.fail(key, e);
                return Ok(Vec::new());
            }
        };
        let Some(sub) = self.subs.get_mut(&key) else {
            return Ok(Vec::new());
        };
        let early = match &mut sub.phase {
            Phase::Subscribing { early } => std::mem::take(early),
            Phase::Idle | Phase::Active { .. } => return Ok(Vec::new()),
        };
        match sub.install(&snapshot, early) {
            Ok(()) => {
                if let Some(ready) = sub.ready.take() {
                    let _ = ready.send(Ok(()));
                }
                Ok(Vec::new())
            }
            // A snapshot or early update we cannot decode: the server is broken.
            Err(e) => Err(format!(
                "invalid subscription snapshot for {}: {e}",
                sub.service_id
            )),
        }
    }

    /// After a reconnect: subscriptions to re-subscribe now. Session-scope ones wait for the
    /// re-attach when one is in progress.
    pub(crate) fn keys_to_resume(&self, attach_in_progress: bool) -> Vec<u64> {
        let mut keys: Vec<u64> = self
            .subs
            .iter()
            .filter(|(_, s)| matches!(s.phase, Phase::Idle))
            .filter(|(_, s)| !attach_in_progress || matches!(s.target, TargetSpec::Explicit(_)))
            .map(|(k, _)| *k)
            .collect();
        keys.sort_unstable();
        keys
    }

    pub(crate) fn keys_waiting_for_session(&self) -> Vec<u64> {
        let mut keys: Vec<u64> = self
            .subs
            .iter()
            .filter(|(_, s)| {
                matches!(s.phase, Phase::Idle) && matches!(s.target, TargetSpec::Session(_))
            })
            .map(|(k, _)| *k)
            .collect();
        keys.sort_unstable();
        keys
    }

    pub(crate) fn fail_waiting_for_session(&mut self, err: &RequestError) {
        for key in self.keys_waiting_for_session() {
            self.fail(key, err.clone());
        }
    }

    /// The connection dropped: every subscription goes idle until the next connection.
    /// A subscription still waiting for its first snapshot keeps waiting: it is re-sent after
    /// the reconnect (or fails when the client gives up).
    pub(crate) fn connection_lost(&mut self, reason: &str) {
        self.by_wire.clear();
        for sub in self.subs.values_mut() {
            sub.wire = None;
            sub.phase = Phase::Idle;
            if sub.ready.is_none() {
                sub.emit(SubscriptionEvent::Resyncing {
                    reason: format!("connection lost: {reason}"),
                });
            }
        }
    }

    /// The client is finished: every subscription ends.
    pub(crate) fn close(&mut self, reason: &str) {
        self.by_wire.clear();
        for (_, mut sub) in self.subs.drain() {
            match sub.ready.take() {
                Some(ready) => {
                    let _ = ready.send(Err(RequestError::OutcomeUnknown(reason.to_owned())));
                }
                None => sub.emit(SubscriptionEvent::Ended {
                    reason: reason.to_owned(),
                }),
            }
        }
    }
}
