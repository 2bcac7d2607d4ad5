//! Subscriptions: a replica rebuilt from one snapshot plus deltas, and a stream of changes.
//!
//! The connection core owns the decoding side ([`SubCore`]); users hold a [`Subscription`]. The
//! replica is published through a `watch` channel, so its current value is never lost however
//! slowly a consumer reads. Change events go through a bounded queue; when a consumer falls
//! that far behind, the missed events collapse into one [`SubscriptionEvent::Lagged`] (in
//! order, never reordered), and [`Subscription::state`] still shows the exact server state.
//!
//! A subscription ends for good ([`SubscriptionEvent::Ended`], [`Subscription::end_reason`])
//! when what it was made through is gone: for a session subscription, the attachment (the
//! client detached, the server released it, the client attached elsewhere, or re-attaching
//! after a reconnect failed); for any subscription, the client. Its replica is then emptied,
//! so no stale state is ever shown as live. A dropped connection alone does not end it: the
//! client re-attaches and re-subscribes ([`SubscriptionEvent::Resyncing`]).
//!
//! A server re-baselines a subscriber that fell behind with `reset` (pi 1.0.x) or, in baton,
//! with `replaced` (singleton) or `closed` + `spawned` (keyed); each is applied as the update
//! it is and reported as [`SubscriptionEvent::Update`], as `reset` is. A `spawned` for an
//! instance the client already holds replaces it, path dictionaries included.

use std::collections::{HashMap, VecDeque};
use std::mem;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use baton_protocol::chord::{
    ChordError, InstanceAddress, ProviderUpdate, Replica, ServiceMode, StateDecoder,
};
use baton_protocol::limits::{CborLimits, MAX_CONFIGURABLE_CBOR_DEPTH};
use baton_protocol::{Id, SessionTarget, Target, Value};
use bytes::Bytes;
use futures::Stream;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::debug;

use crate::client::{Deferred, Shared};
use crate::config::{DEFAULT_EARLY_UPDATE_BUFFER, DEFAULT_SUBSCRIPTION_EVENTS};
use crate::conn::TargetSpec;
use crate::error::RequestError;
use crate::reply::Reply;
use crate::status::CloseReason;

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
    /// The subscription ended for good; [`Subscription::state`] is empty from now on and
    /// [`Subscription::end_reason`] has the typed cause.
    Ended {
        /// Why (the [`EndReason`]'s message).
        reason: String,
    },
}

/// Why a subscription ended for good.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EndReason {
    /// The server released the session's attachment (an `attachment: null` this client did not
    /// ask for): the session terminated or was removed.
    #[error("the server released the session attachment (the session ended or was removed)")]
    Released,
    /// This client detached from the session ([`Client::detach`](crate::Client::detach)).
    #[error("detached from the session")]
    Detached,
    /// This client's connection was attached to another session (or attachment), which
    /// released the one the subscription belonged to.
    #[error("the connection was attached to session {session_id} instead")]
    AttachedElsewhere {
        /// The session the connection is attached to now.
        session_id: String,
    },
    /// After a reconnect the client could not re-attach to the session, e.g.
    /// `session_not_found` when it was removed meanwhile (see [`RequestError::kind`]).
    #[error("re-attaching to the session failed: {0}")]
    ReattachFailed(RequestError),
    /// Re-subscribing (after a gap, an overflow or a reconnect) failed.
    #[error("re-subscribing failed: {0}")]
    ResubscribeFailed(RequestError),
    /// The client finished: it was closed, or the connection ended with no (more)
    /// reconnecting ([`CloseReason::Refused`] when reconnecting was refused).
    #[error("{0}")]
    Closed(CloseReason),
}

/// A live subscription. Dropping it unsubscribes.
pub struct Subscription {
    key: u64,
    service_id: String,
    state: watch::Receiver<Arc<Replica>>,
    events: mpsc::Receiver<SubscriptionEvent>,
    ended: Arc<OnceLock<EndReason>>,
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

    /// The replica as of now. After the subscription ended it is empty (not hydrated).
    pub fn state(&self) -> Arc<Replica> {
        Arc::clone(&self.state.borrow())
    }

    /// Why the subscription ended, once it has (kept even if its
    /// [`Ended`](SubscriptionEvent::Ended) event was lost to a lag).
    pub fn end_reason(&self) -> Option<EndReason> {
        self.ended.get().cloned()
    }

    /// Whether the subscription is still live (it may be resyncing).
    pub fn is_live(&self) -> bool {
        self.ended.get().is_none()
    }

    /// A watch on the replica (changes whenever an update or snapshot is applied, and when
    /// the subscription ends). Updates that arrive together (one read from the connection)
    /// are applied one by one but wake a watcher once, after the last of them.
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
    /// The handle side of a [`SubscribeCmd`]; dropping it unsubscribes through `shared`.
    pub(crate) fn new(parts: SubscriptionParts, shared: Arc<Shared>) -> Self {
        let SubscriptionParts {
            key,
            service_id,
            state,
            events,
            ended,
            ready,
        } = parts;
        Self {
            ready,
            sub: Subscription {
                key,
                service_id,
                state,
                events,
                ended,
                shared,
            },
        }
    }

    pub(crate) async fn ready(self) -> Result<Subscription, RequestError> {
        let Self { ready, sub } = self;
        match ready.await {
            Ok(Ok(())) => Ok(sub),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(RequestError::NotSent("client closed".to_owned())),
        }
    }
}

/// The receiving ends of a [`SubscribeCmd`]'s channels.
#[derive(Debug)]
pub(crate) struct SubscriptionParts {
    pub(crate) key: u64,
    pub(crate) service_id: String,
    pub(crate) state: watch::Receiver<Arc<Replica>>,
    pub(crate) events: mpsc::Receiver<SubscriptionEvent>,
    pub(crate) ended: Arc<OnceLock<EndReason>>,
    pub(crate) ready: oneshot::Receiver<Result<(), RequestError>>,
}

/// A new subscription for the connection core: where its replica, events, end reason and
/// first-snapshot answer go.
#[derive(Debug)]
pub(crate) struct SubscribeCmd {
    key: u64,
    target: TargetSpec,
    service_id: String,
    mode: ServiceMode,
    view: watch::Sender<Arc<Replica>>,
    events: mpsc::Sender<SubscriptionEvent>,
    ended: Arc<OnceLock<EndReason>>,
    ready: oneshot::Sender<Result<(), RequestError>>,
}

impl SubscribeCmd {
    pub(crate) fn new(
        key: u64,
        target: TargetSpec,
        service_id: String,
        mode: ServiceMode,
    ) -> (Self, SubscriptionParts) {
        let (view, state) = watch::channel(Arc::new(Replica::new(service_id.clone(), mode)));
        let (events_tx, events) = mpsc::channel(DEFAULT_SUBSCRIPTION_EVENTS);
        let (ready_tx, ready) = oneshot::channel();
        let ended = Arc::new(OnceLock::new());
        let cmd = Self {
            key,
            target,
            service_id: service_id.clone(),
            mode,
            view,
            events: events_tx,
            ended: Arc::clone(&ended),
            ready: ready_tx,
        };
        let parts = SubscriptionParts {
            key,
            service_id,
            state,
            events,
            ended,
            ready,
        };
        (cmd, parts)
    }

    /// The subscription's key.
    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    pub(crate) fn reject(self, err: RequestError) {
        let _ = self.ready.send(Err(err));
    }
}

#[derive(Debug)]
enum Phase {
    /// Not on the wire (waiting for a connection or an attachment).
    Idle,
    /// Subscribe sent; updates that beat the snapshot wait here, in order.
    /// Updates that arrived before the snapshot, still encoded.
    Subscribing { early: VecDeque<Bytes> },
    /// Snapshot installed; updates decode and apply directly.
    Active { decoder: StateDecoder },
}

#[derive(Debug)]
struct Sub {
    target: TargetSpec,
    service_id: String,
    mode: ServiceMode,
    wire: Option<(Id, Target)>,
    phase: Phase,
    view: watch::Sender<Arc<Replica>>,
    events: mpsc::Sender<SubscriptionEvent>,
    ended: Arc<OnceLock<EndReason>>,
    lagged: bool,
    ready: Option<oneshot::Sender<Result<(), RequestError>>>,
    snapshots: u64,
    /// The replica changed since its watchers were last notified (see
    /// [`SubCore::notify_changed`]).
    unnotified: bool,
}

impl Sub {
    /// Queues an event without ever blocking the connection task. The last free slot is kept
    /// for a `Lagged` marker, so a consumer that falls behind always learns it, in order, right
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
        self.unnotified = false;
        self.phase = Phase::Active { decoder };
        let resynced = self.snapshots > 0;
        self.snapshots += 1;
        self.emit(SubscriptionEvent::Snapshot { resynced });
        for update in applied {
            self.emit(SubscriptionEvent::Update(update));
        }
        Ok(())
    }

    /// Ends the subscription: a caller still waiting for the first snapshot gets `err`;
    /// otherwise the reason is recorded, the replica emptied (watchers see it) and `Ended`
    /// queued. The caller has already taken the sub out of the core.
    fn end(mut self, reason: EndReason, err: impl FnOnce() -> RequestError) {
        if let Some(ready) = self.ready.take() {
            let _ = ready.send(Err(err()));
            return;
        }
        let _ = self.ended.set(reason.clone());
        self.view
            .send_replace(Arc::new(Replica::new(self.service_id.clone(), self.mode)));
        self.emit(SubscriptionEvent::Ended {
            reason: reason.to_string(),
        });
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

/// The connection core's state of every subscription of one client.
#[derive(Debug, Default)]
pub(crate) struct SubCore {
    subs: HashMap<u64, Sub>,
    by_wire: HashMap<Id, u64>,
    /// Keys of subscriptions whose replica changed in place since their watchers were last
    /// notified.
    unnotified: Vec<u64>,
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
                ended: cmd.ended,
                lagged: false,
                ready: Some(cmd.ready),
                snapshots: 0,
                unnotified: false,
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
        let reason = EndReason::ResubscribeFailed(err.clone());
        self.end(key, reason, || err);
    }

    /// Takes `key` out of the core and ends it (see [`Sub::end`]).
    fn end(&mut self, key: u64, reason: EndReason, err: impl FnOnce() -> RequestError) {
        let Some(mut sub) = self.subs.remove(&key) else {
            return;
        };
        if let Some((wire_id, _)) = sub.wire.take() {
            self.by_wire.remove(&wire_id);
        }
        sub.end(reason, err);
    }

    /// The server says the connection's attachment is now `current` (an `attachment` frame;
    /// `detaching` when this client asked for it to end). Every session subscription made
    /// through another attachment is gone on the server: it ends, and is not unsubscribed
    /// (its route is stale). Subscriptions that are not on the wire (waiting for a re-attach
    /// after a reconnect) are left to the re-attach's outcome.
    pub(crate) fn attachment_changed(&mut self, current: Option<&SessionTarget>, detaching: bool) {
        let gone: Vec<(u64, String)> = self
            .subs
            .iter()
            .filter_map(|(key, sub)| match (&sub.target, &sub.wire) {
                (TargetSpec::Session(session_id), Some((_, Target::Session(route))))
                    if current != Some(route) =>
                {
                    Some((*key, session_id.to_string()))
                }
                _ => None,
            })
            .collect();
        for (key, session_id) in gone {
            let reason = match current {
                None if detaching => EndReason::Detached,
                None => EndReason::Released,
                Some(now) => EndReason::AttachedElsewhere {
                    session_id: now.session_id.to_string(),
                },
            };
            debug!(session = %session_id, %reason, "session subscription ended");
            self.end(key, reason, || RequestError::NotAttached(session_id));
        }
    }

    /// After a reconnect: session subscriptions for a session other than the one being
    /// re-attached (a detach or attach that the lost connection cut short) end.
    pub(crate) fn end_orphaned(&mut self, desired: Option<&Id>) {
        let orphaned: Vec<(u64, String)> = self
            .subs
            .iter()
            .filter_map(|(key, sub)| match &sub.target {
                TargetSpec::Session(session_id) if Some(session_id) != desired => {
                    Some((*key, session_id.to_string()))
                }
                TargetSpec::Session(_) | TargetSpec::Explicit(_) => None,
            })
            .collect();
        for (key, session_id) in orphaned {
            let reason = match desired {
                None => EndReason::Detached,
                Some(now) => EndReason::AttachedElsewhere {
                    session_id: now.to_string(),
                },
            };
            self.end(key, reason, || RequestError::NotAttached(session_id));
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
                // Applied in place without waking the watchers: one notification per read
                // ([`Self::notify_changed`]) instead of one per update, which the fan-out
                // profile showed as the largest cost after decoding.
                sub.view.send_if_modified(|replica| {
                    outcome = Arc::make_mut(replica).apply_update_ref(&decoded);
                    false
                });
                if !sub.unnotified {
                    sub.unnotified = true;
                    self.unnotified.push(key);
                }
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

    /// Notifies the watchers of every replica changed in place since the last call. The
    /// core calls it after each batch of frames (one read), so a watcher wakes once per batch
    /// and never misses the last state.
    pub(crate) fn notify_changed(&mut self) {
        for key in self.unnotified.drain(..) {
            // A subscription that ended meanwhile already published its empty replica.
            if let Some(sub) = self.subs.get_mut(&key)
                && mem::take(&mut sub.unnotified)
            {
                sub.view.send_modify(|_| {});
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
            Phase::Subscribing { early } => mem::take(early),
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

    /// Re-attaching after a reconnect failed: every session subscription waiting for it ends.
    pub(crate) fn fail_waiting_for_session(&mut self, err: &RequestError) {
        for key in self.keys_waiting_for_session() {
            self.end(key, EndReason::ReattachFailed(err.clone()), || err.clone());
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
    pub(crate) fn close(&mut self, reason: &CloseReason) {
        self.by_wire.clear();
        for (_, sub) in self.subs.drain() {
            sub.end(EndReason::Closed(reason.clone()), || {
                RequestError::OutcomeUnknown(reason.to_string())
            });
        }
    }
}
