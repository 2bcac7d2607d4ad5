//! Subscriptions: a replica rebuilt from one snapshot plus deltas, and a stream of changes.
//!
//! A [`Subscription`] reads what the connection task publishes for it (see `crate::sink`): the
//! replica through a `watch` channel, so its current value is never lost however slowly a
//! consumer reads, and change events through a bounded queue; when a consumer falls that far
//! behind, the missed events collapse into one [`SubscriptionEvent::Lagged`] (in order, never
//! reordered), and [`Subscription::state`] still shows the exact server state.
//!
//! A subscription ends for good ([`SubscriptionEvent::Ended`], [`Subscription::end_reason`])
//! when what it was made through is gone: for a session subscription, the attachment (the
//! client detached, the server released it, the client attached elsewhere, or re-attaching
//! after a reconnect failed); for any subscription, the client. Its replica is then emptied,
//! so no stale state is ever shown as live. A dropped connection alone does not end it: the
//! client re-attaches and re-subscribes ([`SubscriptionEvent::Resyncing`]).
//!
//! The decoding and the resync rules are the connection core's (`crate::conn`).

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use baton_protocol::chord::Replica;
use futures::Stream;
use tokio::sync::{mpsc, oneshot, watch};

use crate::conn::{EndReason, SubscriptionEvent};
use crate::error::RequestError;
use crate::shared::{Deferred, Shared};
use crate::sink::SubscriptionReceivers;

/// A live subscription. It keeps its connection alive, even after its [`Client`] was
/// dropped; dropping it unsubscribes (and closes the connection if it was the last handle).
///
/// [`Client`]: crate::Client
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
    /// The handle of subscription `key`, reading `receivers`; dropping it unsubscribes
    /// through `shared`.
    pub(crate) fn new(
        key: u64,
        service_id: String,
        receivers: SubscriptionReceivers,
        shared: Arc<Shared>,
    ) -> Self {
        let SubscriptionReceivers {
            state,
            events,
            ended,
            ready,
        } = receivers;
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
