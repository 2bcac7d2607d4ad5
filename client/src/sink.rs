//! The connection task's end of each subscription's channels: where the core's
//! [`SubscriptionChange`]s become sends, and where the replicas live.
//!
//! The replica is published through a `watch` channel, so its current value is never lost
//! however slowly a consumer reads; the task lends the replicas to the core while it reads
//! ([`Replicas`]), so updates are applied in place inside the channel and readers are woken
//! once per read. Change events go through a bounded queue; when a consumer falls that far
//! behind, the missed events collapse into one [`SubscriptionEvent::Lagged`] (in order, never
//! reordered), and the replica still shows the exact server state.

use std::sync::{Arc, OnceLock};

use baton_protocol::chord::{Replica, ServiceMode};
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::DEFAULT_SUBSCRIPTION_EVENTS;
use crate::conn::{EndReason, NumberMap, Replicas, SubscriptionChange, SubscriptionEvent};
use crate::error::RequestError;

/// The sending ends of one subscription's channels.
#[derive(Debug)]
pub(crate) struct SubscriptionSink {
    view: watch::Sender<Arc<Replica>>,
    events: mpsc::Sender<SubscriptionEvent>,
    ended: Arc<OnceLock<EndReason>>,
    ready: Option<oneshot::Sender<Result<(), RequestError>>>,
    /// Events were dropped since the last `Lagged` marker went out.
    lagged: bool,
}

/// The receiving ends, for the subscription's handle.
#[derive(Debug)]
pub(crate) struct SubscriptionReceivers {
    pub(crate) state: watch::Receiver<Arc<Replica>>,
    pub(crate) events: mpsc::Receiver<SubscriptionEvent>,
    pub(crate) ended: Arc<OnceLock<EndReason>>,
    pub(crate) ready: oneshot::Receiver<Result<(), RequestError>>,
}

impl SubscriptionSink {
    /// The channels of a new subscription to `service_id`, its replica empty.
    pub(crate) fn new(service_id: &str, mode: ServiceMode) -> (Self, SubscriptionReceivers) {
        let (view, state) = watch::channel(Arc::new(Replica::new(service_id, mode)));
        let (events_tx, events) = mpsc::channel(DEFAULT_SUBSCRIPTION_EVENTS);
        let (ready_tx, ready) = oneshot::channel();
        let ended = Arc::new(OnceLock::new());
        let sink = Self {
            view,
            events: events_tx,
            ended: Arc::clone(&ended),
            ready: Some(ready_tx),
            lagged: false,
        };
        let receivers = SubscriptionReceivers {
            state,
            events,
            ended,
            ready,
        };
        (sink, receivers)
    }

    /// Whether the handle gave up before the first snapshot was answered (it was dropped).
    pub(crate) fn is_abandoned(&self) -> bool {
        self.ready.as_ref().is_none_or(oneshot::Sender::is_closed)
    }

    /// Delivers one change. Returns whether the subscription is finished (nothing follows).
    fn deliver(&mut self, change: SubscriptionChange) -> bool {
        match change {
            SubscriptionChange::Answered(result) => {
                let failed = result.is_err();
                if let Some(ready) = self.ready.take() {
                    // The caller may have given up meanwhile.
                    let _ = ready.send(result);
                }
                failed
            }
            SubscriptionChange::Event(event) => {
                self.emit(event);
                false
            }
            SubscriptionChange::Changed => {
                self.view.send_modify(|_| {});
                false
            }
            SubscriptionChange::Ended(reason) => {
                let _ = self.ended.set(reason.clone());
                let empty = {
                    let replica = self.view.borrow();
                    Replica::new(replica.service_id(), replica.mode())
                };
                self.view.send_replace(Arc::new(empty));
                self.emit(SubscriptionEvent::Ended {
                    reason: reason.to_string(),
                });
                true
            }
        }
    }

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
}

/// Every live subscription's sink, by key; the replicas the task lends the core.
#[derive(Debug, Default)]
pub(crate) struct Sinks(NumberMap<SubscriptionSink>);

impl Sinks {
    pub(crate) fn insert(&mut self, key: u64, sink: SubscriptionSink) {
        self.0.insert(key, sink);
    }

    /// The handle dropped subscription `key`.
    pub(crate) fn remove(&mut self, key: u64) {
        self.0.remove(&key);
    }

    /// Delivers a change of subscription `key` (none for a key already finished or dropped).
    pub(crate) fn deliver(&mut self, key: u64, change: SubscriptionChange) {
        if let Some(sink) = self.0.get_mut(&key)
            && sink.deliver(change)
        {
            self.0.remove(&key);
        }
    }
}

impl Replicas for Sinks {
    fn install(&mut self, key: u64, replica: Replica) {
        if let Some(sink) = self.0.get_mut(&key) {
            sink.view.send_if_modified(|current| {
                *current = Arc::new(replica);
                false
            });
        }
    }

    fn apply<T>(&mut self, key: u64, f: impl FnOnce(&mut Replica) -> T) -> Option<T> {
        let sink = self.0.get_mut(&key)?;
        let mut out = None;
        sink.view.send_if_modified(|replica| {
            // A copy only while a reader holds the current `Arc`.
            out = Some(f(Arc::make_mut(replica)));
            false
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use baton_protocol::Value;
    use baton_protocol::chord::{InstanceSnapshot, MemberSnapshot, SubscriptionSnapshot};

    use super::*;
    use crate::status::CloseReason;

    fn sinks_with(key: u64) -> (Sinks, SubscriptionReceivers) {
        let (sink, receivers) = SubscriptionSink::new("pi.models", ServiceMode::Singleton);
        let mut sinks = Sinks::default();
        sinks.insert(key, sink);
        (sinks, receivers)
    }

    fn hydrated(revision: u64) -> Replica {
        let mut replica = Replica::new("pi.models", ServiceMode::Singleton);
        let state = Value::from_json(&format!(r#"{{"revision":{revision}}}"#)).unwrap();
        replica
            .apply_snapshot(SubscriptionSnapshot::new(
                "pi.models",
                ServiceMode::Singleton,
                vec![InstanceSnapshot::new(
                    None,
                    vec![MemberSnapshot::state("state", 0, state)],
                )],
            ))
            .unwrap();
        replica
    }

    #[test]
    fn replicas_change_in_place_and_readers_wake_only_on_changed() {
        let (mut sinks, rx) = sinks_with(1);
        sinks.install(1, hydrated(1));
        assert!(
            rx.state.borrow().is_hydrated(),
            "installed where readers look"
        );
        assert!(!rx.state.has_changed().unwrap(), "but nobody woken yet");
        let held = rx.state.borrow().clone();
        assert_eq!(sinks.apply(1, |r| r.is_hydrated()), Some(true));
        assert!(
            !Arc::ptr_eq(&held, &rx.state.borrow()),
            "a reader's Arc is never written under it"
        );
        drop(held);
        let before = Arc::as_ptr(&rx.state.borrow());
        assert_eq!(sinks.apply(1, |_| ()), Some(()));
        assert_eq!(
            Arc::as_ptr(&rx.state.borrow()),
            before,
            "no copy while nobody holds it"
        );
        assert!(!rx.state.has_changed().unwrap());
        sinks.deliver(1, SubscriptionChange::Changed);
        assert!(rx.state.has_changed().unwrap());
        assert_eq!(
            sinks.apply(2, |_| ()),
            None,
            "an unknown key has no replica"
        );
    }

    #[test]
    fn a_consumer_that_falls_behind_gets_one_lagged_marker_in_order() {
        let (mut sinks, mut rx) = sinks_with(1);
        for _ in 0..DEFAULT_SUBSCRIPTION_EVENTS + 10 {
            sinks.deliver(
                1,
                SubscriptionChange::Event(SubscriptionEvent::Snapshot { resynced: true }),
            );
        }
        let mut seen = Vec::new();
        while let Ok(e) = rx.events.try_recv() {
            seen.push(e);
        }
        assert_eq!(seen.len(), DEFAULT_SUBSCRIPTION_EVENTS);
        assert!(matches!(seen.last(), Some(SubscriptionEvent::Lagged)));
        assert!(
            seen[..seen.len() - 1]
                .iter()
                .all(|e| matches!(e, SubscriptionEvent::Snapshot { .. }))
        );
        // Room again: events flow, without a second marker for what was already reported.
        sinks.deliver(
            1,
            SubscriptionChange::Event(SubscriptionEvent::Snapshot { resynced: false }),
        );
        assert!(matches!(
            rx.events.try_recv(),
            Ok(SubscriptionEvent::Snapshot { resynced: false })
        ));
    }

    #[test]
    fn an_ended_subscription_records_why_empties_its_replica_and_hears_nothing_more() {
        let (mut sinks, mut rx) = sinks_with(1);
        sinks.install(1, hydrated(4));
        sinks.deliver(1, SubscriptionChange::Answered(Ok(())));
        assert_eq!(rx.ready.try_recv(), Ok(Ok(())));
        let reason = EndReason::Closed(CloseReason::Requested("client closed".to_owned()));
        sinks.deliver(1, SubscriptionChange::Ended(reason.clone()));
        assert_eq!(rx.ended.get(), Some(&reason));
        let empty = rx.state.borrow_and_update().clone();
        assert!(!empty.is_hydrated(), "an ended replica is emptied");
        assert_eq!(empty.service_id(), "pi.models");
        assert!(matches!(
            rx.events.try_recv(),
            Ok(SubscriptionEvent::Ended { reason: r }) if r == "client closed"
        ));
        // Its sink is gone: nothing reaches the handle any more.
        sinks.deliver(
            1,
            SubscriptionChange::Event(SubscriptionEvent::Snapshot { resynced: true }),
        );
        assert!(rx.events.try_recv().is_err());
        assert_eq!(sinks.apply(1, |_| ()), None);
    }

    #[test]
    fn a_failed_first_subscribe_answers_the_caller_and_finishes_the_sink() {
        let (mut sinks, mut rx) = sinks_with(1);
        sinks.deliver(
            1,
            SubscriptionChange::Answered(Err(RequestError::NotSent("closed".to_owned()))),
        );
        assert_eq!(
            rx.ready.try_recv(),
            Ok(Err(RequestError::NotSent("closed".to_owned())))
        );
        assert!(
            rx.ended.get().is_none(),
            "it never began, so it did not end"
        );
        assert_eq!(sinks.apply(1, |_| ()), None);
    }
}
