//! The handle a host uses to emit provider updates to one connection's subscribers.

use std::fmt;
use std::sync::Weak;

use crate::chord::{ProviderUpdate, SharedUpdate, SubscriptionSnapshot};
use crate::conn::shared::ConnShared;

pub use crate::conn::subscriptions::Published;

/// Emits chord provider updates for subscriptions of one connection (upstream's
/// `publish(subscriptionId, update)` callback).
///
/// Cheap to clone, `Send + Sync`, and **never blocks**: an update is encoded with the
/// subscription's own state encoder and queued. Each subscriber has a bounded backlog
/// ([`DEFAULT_SUBSCRIBER_QUEUE_LENGTH`](crate::DEFAULT_SUBSCRIBER_QUEUE_LENGTH) updates, and
/// the connection's pending-byte budget); when an update does not fit, the whole backlog is
/// replaced by one resync from `snapshot()` (a `replaced`, or `closed` + `spawned` for a
/// keyed service; see [`ResyncDialect`](crate::ResyncDialect)), so memory stays bounded and
/// the client converges on the current state.
///
/// Updates published while the subscribe call is still running are held and sent right
/// after its response (state updates the snapshot already covers are dropped).
#[derive(Clone)]
pub struct Publisher {
    conn: Weak<ConnShared>,
}

impl fmt::Debug for Publisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher")
            .field("open", &(self.conn.strong_count() > 0))
            .finish()
    }
}

impl Publisher {
    pub(crate) fn new(conn: Weak<ConnShared>) -> Self {
        Self { conn }
    }

    /// A publisher attached to no connection: every publish reports
    /// [`Published::Closed`]. For tests and for hosts that build calls by hand.
    pub fn detached() -> Self {
        Self { conn: Weak::new() }
    }

    /// Publishes `update` for `subscription_id`.
    ///
    /// `snapshot` must return the subscription's full current state, including the effect
    /// of `update` (the state a fresh subscriber would see now). It is called at most once,
    /// synchronously, only when the subscriber has fallen behind, and while this
    /// connection's state is locked: it must not block, publish, or wait for anything that
    /// might itself be publishing to this connection.
    ///
    /// Returns what became of the update; on [`Published::Closed`] the host should drop
    /// this subscriber.
    pub fn publish(
        &self,
        subscription_id: &str,
        update: ProviderUpdate,
        snapshot: impl FnOnce() -> SubscriptionSnapshot,
    ) -> Published {
        self.publish_shared(subscription_id, &SharedUpdate::new(update), snapshot)
    }

    /// As [`publish`](Self::publish), for an update that goes to several subscriptions
    /// (possibly on several connections): it is encoded once per distinct encoder state
    /// rather than once per subscriber.
    pub fn publish_shared(
        &self,
        subscription_id: &str,
        update: &SharedUpdate,
        snapshot: impl FnOnce() -> SubscriptionSnapshot,
    ) -> Published {
        let Some(conn) = self.conn.upgrade() else {
            return Published::Closed;
        };
        conn.with(|state| state.publish(subscription_id, update, snapshot))
    }

    /// As [`publish_shared`](Self::publish_shared) for several updates to one subscription,
    /// in order: the connection is locked and its writer woken once for the whole batch
    /// rather than once per update, which is what makes streaming many small updates to many
    /// subscribers cheap.
    ///
    /// `snapshot` must return the subscription's full current state including the effect of
    /// **every** update in `updates`. If the subscriber falls behind part-way, its backlog
    /// is replaced by one resync from that snapshot and the rest of the batch is not
    /// queued (the snapshot already contains it); the result is then
    /// [`Published::Reset`]. The same rules as for [`publish`](Self::publish) apply to
    /// `snapshot`.
    pub fn publish_shared_many(
        &self,
        subscription_id: &str,
        updates: &[SharedUpdate],
        snapshot: impl FnOnce() -> SubscriptionSnapshot,
    ) -> Published {
        let Some(conn) = self.conn.upgrade() else {
            return Published::Closed;
        };
        conn.with(|state| state.publish_many(subscription_id, updates, snapshot))
    }

    /// True while the connection is open.
    pub fn is_open(&self) -> bool {
        self.conn
            .upgrade()
            .is_some_and(|c| c.with(|s| s.closing().is_none()))
    }
}
