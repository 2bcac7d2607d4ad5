//! What the core hands the glue: answers for callers, what became of each subscription, and
//! what to do with the transport. Every output is an [`Event`], in the order it happened.

use baton_protocol::SessionTarget;

use super::batch::UpdateBatch;
use crate::error::RequestError;
use crate::reply::Reply;
use crate::status::{CloseReason, Status};

/// Something the glue must do or deliver.
#[derive(Debug)]
#[must_use = "events carry answers for callers and instructions for the glue"]
pub(crate) enum Event<W> {
    /// Answer a caller.
    Answer { waiter: W, answer: Answer },
    /// Something became of the subscription with this key.
    Subscription {
        key: u64,
        change: SubscriptionChange,
    },
    /// The connection's attachment changed.
    Attachment(Option<SessionTarget>),
    /// The connection status changed.
    Status(Status),
    /// Open a new transport now (a reconnect attempt), then call
    /// [`ClientConn::handle_open`](super::ClientConn::handle_open) or
    /// [`ClientConn::handle_connect_failed`](super::ClientConn::handle_connect_failed).
    Dial,
    /// Drop the current transport: the core gave up on it (a protocol error).
    Disconnect,
}

/// An answer for a caller.
#[derive(Debug)]
pub(crate) enum Answer {
    /// A request's (or detach's) result.
    Reply(Result<Reply, RequestError>),
    /// An attach's result: the attachment the server announced.
    Attached(Result<SessionTarget, RequestError>),
}

/// What became of one subscription, for its handle. A subscription's changes come in this
/// order: events (each in its place), [`Answered`](Self::Answered) once, more events and
/// [`Changed`](Self::Changed), and at most one [`Ended`](Self::Ended); nothing follows
/// `Ended` or an `Answered` error.
#[derive(Debug)]
pub(crate) enum SubscriptionChange {
    /// The first subscribe request was answered: `Ok` once its snapshot is installed (its
    /// [`SubscriptionEvent::Snapshot`] came just before), or the error that ends the
    /// subscription before it began.
    Answered(Result<(), RequestError>),
    /// Queue this event on the subscription's stream.
    Event(SubscriptionEvent),
    /// Its replica changed in place since its readers were last woken: wake them. Comes once
    /// per read at most, after the read's last update.
    Changed,
    /// It ended for good: record why, empty its replica (no stale state is shown as live) and
    /// queue [`SubscriptionEvent::Ended`].
    Ended(EndReason),
}

/// Something that happened to a subscription, in order.
#[derive(Debug, Clone)]
pub enum SubscriptionEvent {
    /// A snapshot was installed: the first one, or a re-synchronisation after a gap,
    /// overflow or reconnect (`resynced: true`).
    Snapshot {
        /// True for every snapshot after the first.
        resynced: bool,
    },
    /// Provider updates were applied to the replica: every update one read from the
    /// connection brought for this subscription in a row, in order (at least one). One event
    /// however many updates, so a consumer is woken once per read; the batch is decoded only
    /// if the consumer asks ([`UpdateBatch::iter`]), and counting or following sequences
    /// costs nothing ([`UpdateBatch::len`], [`UpdateBatch::last_sequence`]).
    Updates(UpdateBatch),
    /// Events were dropped because this consumer fell behind;
    /// [`Subscription::state`](crate::Subscription::state) is still exact. The event queue
    /// is bounded in events, and a batch is one event: whole batches are dropped, never part
    /// of one.
    Lagged,
    /// The replica lost sync and the client is re-subscribing.
    Resyncing {
        /// Why (sequence gap, lost connection, …).
        reason: String,
    },
    /// The subscription ended for good; [`Subscription::state`](crate::Subscription::state)
    /// is empty from now on and [`Subscription::end_reason`](crate::Subscription::end_reason)
    /// has the typed cause.
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
