//! Subscriptions as the core keeps them: where each is on the wire, its decoder, the updates
//! that beat its snapshot, and what its handle must learn ([`SubscriptionChange`]).
//!
//! The replicas are not the core's: they live with the glue, where readers see them, and the
//! core writes them only through [`Replicas`], lent to it while it handles what the server
//! sent. So an update is applied once, in place, where readers find it (never to a copy that
//! would have to be published); readers are woken by [`SubscriptionChange::Changed`], once per
//! read however many updates it held.
//!
//! A subscription ends for good ([`SubscriptionChange::Ended`]) when what it was made through
//! is gone: for a session subscription, the attachment (the client detached, the server
//! released it, the client attached elsewhere, or re-attaching after a reconnect failed); for
//! any subscription, the client. A dropped connection alone does not end it: it goes idle and
//! is re-subscribed on the next transport ([`SubscriptionEvent::Resyncing`]).
//!
//! A server re-baselines a subscriber that fell behind with `reset` (pi 1.0.x) or, in baton,
//! with `replaced` (singleton) or `closed` + `spawned` (keyed); each is applied as the update
//! it is and reported in a [`SubscriptionEvent::Updates`], as `reset` is. A `spawned` for an
//! instance the client already holds replaces it, path dictionaries included.
//!
//! Updates are applied straight from their bytes
//! ([`StateDecoder::apply_update_cbor`]) and handed on undecoded: the updates of one read
//! for one subscription, in a row, make one [`UpdateBatch`] event, so a read costs each
//! subscription one event and one wake-up however many updates it held.

use std::collections::{HashMap, VecDeque};
use std::mem;

use baton_protocol::chord::{ChordError, Replica, ServiceMode, StateDecoder, UpdateRefused};
use baton_protocol::{Id, SessionTarget, Target, Value};
use bytes::Bytes;
use tracing::debug;

use super::batch::UpdateBatch;
use super::command::{Subscribe, TargetSpec};
use super::decode::apply_update;
use super::event::{EndReason, Event, SubscriptionChange, SubscriptionEvent};
use super::requests::NumberMap;
use crate::config::DEFAULT_EARLY_UPDATE_BUFFER;
use crate::error::RequestError;
use crate::reply::Reply;
use crate::status::CloseReason;

/// Where the replicas of a client's subscriptions live: the glue's, lent to the core for one
/// input. The core keeps no replica of its own; the glue keeps one for every subscription key
/// from its [`Subscribe`] until the key's [`SubscriptionChange::Ended`] or an
/// [`Answered`](SubscriptionChange::Answered) error, or until the glue unsubscribes it.
pub(crate) trait Replicas {
    /// Puts `replica` in place of subscription `key`'s (a snapshot was installed), without
    /// waking readers ([`SubscriptionChange::Changed`] follows).
    fn install(&mut self, key: u64, replica: Replica);

    /// Applies `f` to subscription `key`'s replica in place, without waking readers; `None`
    /// if the glue holds none for `key`.
    fn apply<T>(&mut self, key: u64, f: impl FnOnce(&mut Replica) -> T) -> Option<T>;
}

/// Outcome of feeding the subscriptions: keys to re-subscribe, or a fatal protocol error.
pub(crate) type Resync = Result<Vec<u64>, String>;

#[derive(Debug)]
enum Phase {
    /// Not on the wire (waiting for a connection or an attachment).
    Idle,
    /// Subscribe sent; updates that beat the snapshot wait here, in order, still encoded.
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
    /// Its handle still waits for the first snapshot (no [`SubscriptionChange::Answered`] yet).
    unanswered: bool,
    snapshots: u64,
    /// The replica changed since its readers were last woken (see
    /// [`Subscriptions::notify_changed`]).
    unnotified: bool,
}

/// Every subscription of one client.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    subs: NumberMap<Sub>,
    by_wire: HashMap<Id, u64>,
    /// Keys of subscriptions whose replica changed in place since their readers were last
    /// woken.
    unnotified: Vec<u64>,
}

fn emit<W>(out: &mut VecDeque<Event<W>>, key: u64, change: SubscriptionChange) {
    out.push_back(Event::Subscription { key, change });
}

fn emit_event<W>(out: &mut VecDeque<Event<W>>, key: u64, event: SubscriptionEvent) {
    emit(out, key, SubscriptionChange::Event(event));
}

impl Subscriptions {
    pub(crate) fn insert(&mut self, sub: Subscribe) -> u64 {
        let key = sub.key;
        self.subs.insert(
            key,
            Sub {
                target: sub.target,
                service_id: sub.service_id,
                mode: sub.mode,
                wire: None,
                phase: Phase::Idle,
                unanswered: true,
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
    pub(crate) fn fail<W>(&mut self, key: u64, err: RequestError, out: &mut VecDeque<Event<W>>) {
        let reason = EndReason::ResubscribeFailed(err.clone());
        self.end(key, reason, || err, out);
    }

    /// Takes `key` out and ends it: a handle still waiting for the first snapshot gets
    /// `err`, any other learns `reason`.
    fn end<W>(
        &mut self,
        key: u64,
        reason: EndReason,
        err: impl FnOnce() -> RequestError,
        out: &mut VecDeque<Event<W>>,
    ) {
        let Some(mut sub) = self.subs.remove(&key) else {
            return;
        };
        if let Some((wire_id, _)) = sub.wire.take() {
            self.by_wire.remove(&wire_id);
        }
        let change = if sub.unanswered {
            SubscriptionChange::Answered(Err(err()))
        } else {
            SubscriptionChange::Ended(reason)
        };
        emit(out, key, change);
    }

    /// The server says the connection's attachment is `current` (an `attachment` frame;
    /// `detaching` when this client asked for it to end). Every session subscription made
    /// through another attachment is gone on the server: it ends, and is not unsubscribed
    /// (its route is stale). Subscriptions that are not on the wire (waiting for a re-attach
    /// after a reconnect) are left to the re-attach's outcome.
    pub(crate) fn attachment_changed<W>(
        &mut self,
        current: Option<&SessionTarget>,
        detaching: bool,
        out: &mut VecDeque<Event<W>>,
    ) {
        let mut gone: Vec<(u64, String)> = self
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
        gone.sort_unstable();
        for (key, session_id) in gone {
            let reason = match current {
                None if detaching => EndReason::Detached,
                None => EndReason::Released,
                Some(other) => EndReason::AttachedElsewhere {
                    session_id: other.session_id.to_string(),
                },
            };
            debug!(session = %session_id, %reason, "session subscription ended");
            self.end(key, reason, || RequestError::NotAttached(session_id), out);
        }
    }

    /// After a reconnect: session subscriptions for a session other than the one being
    /// re-attached (a detach or attach that the lost connection cut short) end.
    pub(crate) fn end_orphaned<W>(&mut self, desired: Option<&Id>, out: &mut VecDeque<Event<W>>) {
        let mut orphaned: Vec<(u64, String)> = self
            .subs
            .iter()
            .filter_map(|(key, sub)| match &sub.target {
                TargetSpec::Session(session_id) if Some(session_id) != desired => {
                    Some((*key, session_id.to_string()))
                }
                TargetSpec::Session(_) | TargetSpec::Explicit(_) => None,
            })
            .collect();
        orphaned.sort_unstable();
        for (key, session_id) in orphaned {
            let reason = match desired {
                None => EndReason::Detached,
                Some(other) => EndReason::AttachedElsewhere {
                    session_id: other.to_string(),
                },
            };
            self.end(key, reason, || RequestError::NotAttached(session_id), out);
        }
    }

    /// The handle dropped the subscription: it is forgotten without a word to the handle.
    /// Returns the wire id to unsubscribe, if any.
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

    /// An update for wire subscription `wire_id`: buffered before the snapshot, applied in
    /// place (through `replicas`) after it.
    pub(crate) fn on_update<W>(
        &mut self,
        wire_id: &Id,
        update: Bytes,
        replicas: &mut impl Replicas,
        out: &mut VecDeque<Event<W>>,
    ) -> Resync {
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
                    emit_event(
                        out,
                        key,
                        SubscriptionEvent::Resyncing {
                            reason: "too many updates before the snapshot".to_owned(),
                        },
                    );
                    return Ok(vec![key]);
                }
                // A copy: the slice would keep the connection's whole read buffer alive for
                // as long as the snapshot takes.
                early.push_back(Bytes::copy_from_slice(&update));
                Ok(Vec::new())
            }
            Phase::Active { decoder } => {
                let batch = open_batch(out, key);
                // The decoder as of the batch's first update, kept for decoding it later.
                let base = batch.is_none().then(|| decoder.clone());
                // Applied in place without waking readers: one wake-up per read
                // ([`Self::notify_changed`]) instead of one per update, which the fan-out
                // profile showed as the largest cost after decoding.
                let outcome = match replicas.apply(key, |r| apply_update(decoder, &update, Some(r)))
                {
                    Some(outcome) => outcome,
                    None => apply_update(decoder, &update, None),
                };
                if !sub.unnotified {
                    sub.unnotified = true;
                    self.unnotified.push(key);
                }
                match outcome {
                    Ok(sequence) => {
                        match (batch, base) {
                            (Some(batch), _) => batch.push(&update, sequence),
                            (None, base) => {
                                let mut batch = UpdateBatch::new(base.unwrap_or_default());
                                batch.push(&update, sequence);
                                emit_event(out, key, SubscriptionEvent::Updates(batch));
                            }
                        }
                        Ok(Vec::new())
                    }
                    // A wire form we cannot decode means the server is broken: fail the
                    // connection.
                    Err(UpdateRefused::Decode(e)) => {
                        Err(format!("invalid service update for {wire_id}: {e}"))
                    }
                    Err(UpdateRefused::Apply(e)) => {
                        debug!(
                            subscription = %wire_id, error = %e,
                            "replica lost sync; re-subscribing"
                        );
                        emit_event(
                            out,
                            key,
                            SubscriptionEvent::Resyncing {
                                reason: e.to_string(),
                            },
                        );
                        Ok(vec![key])
                    }
                }
            }
        }
    }

    /// Emits [`SubscriptionChange::Changed`] for every replica changed in place since the
    /// last call. The core calls it after each read, so readers wake once per read and never
    /// miss the last state.
    pub(crate) fn notify_changed<W>(&mut self, out: &mut VecDeque<Event<W>>) {
        for key in self.unnotified.drain(..) {
            // A subscription that ended meanwhile is told so instead.
            if let Some(sub) = self.subs.get_mut(&key)
                && mem::take(&mut sub.unnotified)
            {
                emit(out, key, SubscriptionChange::Changed);
            }
        }
    }

    /// Whether `wire_id` is subscription `key`'s current subscribe attempt.
    pub(crate) fn is_current(&self, key: u64, wire_id: &Id) -> bool {
        self.subs
            .get(&key)
            .and_then(|sub| sub.wire.as_ref())
            .is_some_and(|(current, _)| current == wire_id)
    }

    /// The answer to subscription `key`'s subscribe request under `wire_id`: its snapshot is
    /// installed (through `replicas`) with the updates that beat it. The late answer of an
    /// attempt already given up on (its id unsubscribed, a fresh one sent) is ignored.
    pub(crate) fn on_response<W>(
        &mut self,
        key: u64,
        wire_id: &Id,
        result: Result<Reply, RequestError>,
        replicas: &mut impl Replicas,
        out: &mut VecDeque<Event<W>>,
    ) -> Resync {
        if !self.is_current(key, wire_id) {
            return Ok(Vec::new());
        }
        let snapshot = match result {
            Ok(Reply::Value(v)) => v,
            Ok(Reply::Void) => {
                return Err("Service subscription did not return a snapshot".to_owned());
            }
            Err(e) => {
                self.fail(key, e, out);
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
        let (decoder, replica, applied) = match install(sub, &snapshot, early) {
            Ok(installed) => installed,
            // A snapshot or early update we cannot decode: the server is broken.
            Err(e) => {
                return Err(format!(
                    "invalid subscription snapshot for {}: {e}",
                    sub.service_id
                ));
            }
        };
        replicas.install(key, replica);
        sub.phase = Phase::Active { decoder };
        if !sub.unnotified {
            sub.unnotified = true;
            self.unnotified.push(key);
        }
        let resynced = sub.snapshots > 0;
        sub.snapshots += 1;
        emit_event(out, key, SubscriptionEvent::Snapshot { resynced });
        if let Some(applied) = applied {
            emit_event(out, key, SubscriptionEvent::Updates(applied));
        }
        if mem::take(&mut sub.unanswered) {
            emit(out, key, SubscriptionChange::Answered(Ok(())));
        }
        Ok(Vec::new())
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
    pub(crate) fn fail_waiting_for_session<W>(
        &mut self,
        err: &RequestError,
        out: &mut VecDeque<Event<W>>,
    ) {
        for key in self.keys_waiting_for_session() {
            self.end(
                key,
                EndReason::ReattachFailed(err.clone()),
                || err.clone(),
                out,
            );
        }
    }

    /// The connection dropped: every subscription goes idle until the next connection.
    /// A subscription still waiting for its first snapshot keeps waiting: it is re-sent after
    /// the reconnect (or fails when the client gives up).
    pub(crate) fn connection_lost<W>(&mut self, reason: &str, out: &mut VecDeque<Event<W>>) {
        self.by_wire.clear();
        let mut keys: Vec<u64> = self.subs.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            let Some(sub) = self.subs.get_mut(&key) else {
                continue;
            };
            sub.wire = None;
            sub.phase = Phase::Idle;
            if !sub.unanswered {
                emit_event(
                    out,
                    key,
                    SubscriptionEvent::Resyncing {
                        reason: format!("connection lost: {reason}"),
                    },
                );
            }
        }
    }

    /// The client is finished: every subscription ends.
    pub(crate) fn close<W>(&mut self, reason: &CloseReason, out: &mut VecDeque<Event<W>>) {
        let mut keys: Vec<u64> = self.subs.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            self.end(
                key,
                EndReason::Closed(reason.clone()),
                || RequestError::OutcomeUnknown(reason.to_string()),
                out,
            );
        }
    }

    /// Subscriptions the core holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.subs.len()
    }
}

/// The batch of updates for subscription `key` that the last event queued still takes: the
/// last event is that subscription's [`SubscriptionEvent::Updates`]. Anything queued since
/// (for any subscription, or for the glue) ends it, so batching never reorders an update
/// against any other output.
fn open_batch<W>(out: &mut VecDeque<Event<W>>, key: u64) -> Option<&mut UpdateBatch> {
    match out.back_mut() {
        Some(Event::Subscription {
            key: last,
            change: SubscriptionChange::Event(SubscriptionEvent::Updates(batch)),
        }) if *last == key => Some(batch),
        _ => None,
    }
}

/// Decodes `snapshot` and the updates that beat it into a fresh decoder and replica; returns
/// them with the early updates as applied.
fn install(
    sub: &Sub,
    snapshot: &Value,
    early: VecDeque<Bytes>,
) -> Result<(StateDecoder, Replica, Option<UpdateBatch>), ChordError> {
    let mut decoder = StateDecoder::new();
    let snapshot = decoder.decode_snapshot(snapshot)?;
    let mut replica = Replica::new(sub.service_id.clone(), sub.mode);
    replica.apply_snapshot(snapshot)?;
    if early.is_empty() {
        return Ok((decoder, replica, None));
    }
    let mut batch = UpdateBatch::new(decoder.clone());
    for raw in early {
        let sequence = apply_update(&mut decoder, &raw, Some(&mut replica))
            .map_err(UpdateRefused::into_inner)?;
        batch.push(&raw, sequence);
    }
    Ok((decoder, replica, Some(batch)))
}
