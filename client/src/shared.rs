//! What every handle of one client shares, and the part of it the connection task holds too.
//!
//! The handles ([`Client`](crate::Client) and its clones, each [`Session`](crate::Session),
//! each [`Subscription`](crate::Subscription)) hold a [`Shared`]: the bounded order queue, the
//! request number allocator, the status and attachment watches. The task holds only the
//! [`Mailbox`] (the work queued from `Drop` and the signals that stop it), never a `Shared`,
//! so the handles alone keep the connection alive: when the last `Shared` is dropped the task
//! learns it at once, closes the socket and ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use baton_protocol::{ServerId, SessionTarget};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::conn::{Answer, Command, RequestNumbers, Subscribe};
use crate::error::RequestError;
use crate::sink::SubscriptionSink;
use crate::status::Status;

/// Why the task stops after [`Client::close`](crate::Client::close).
pub(crate) const CLOSED: &str = "client closed";
/// Why the task stops after the last handle was dropped.
pub(crate) const RELEASED: &str = "every client handle was dropped";

/// How a caller waits for the connection task's answer.
pub(crate) type Waiter = oneshot::Sender<Answer>;

/// What a handle asks of the connection task.
#[derive(Debug)]
pub(crate) enum Order {
    /// A command for the core, as it is.
    Core(Command<Waiter>),
    /// A new subscription: the task keeps its channels and hands the core the subscribe
    /// (boxed: requests, the common order, need not carry its room).
    Subscribe(Box<(Subscribe, SubscriptionSink)>),
}

/// Work that handles queue from `Drop` (which cannot await, and must not be refused by a
/// full command queue).
#[derive(Debug)]
pub(crate) enum Deferred {
    /// Request number `.0` was given up on.
    Cancel(u64),
    /// The subscription with this key was dropped.
    Unsubscribe(u64),
}

/// What the connection task and the handles both hold: the work queued from `Drop`, its
/// wake-up, and the two signals that stop the task.
#[derive(Default)]
pub(crate) struct Mailbox {
    /// One entry per dropped request or subscription handle.
    deferred: Mutex<Vec<Deferred>>,
    /// Woken when `deferred` gains an item.
    pub(crate) deferred_notify: Notify,
    /// Cancelled when the client closes, and by the task when it ends: every wait ends.
    pub(crate) shutdown: CancellationToken,
    /// Cancelled when the last handle's [`Shared`] is dropped.
    released: CancellationToken,
}

impl Mailbox {
    pub(crate) fn lock_deferred(&self) -> MutexGuard<'_, Vec<Deferred>> {
        self.deferred.lock()
    }

    /// Resolves once the task must stop, with why: [`CLOSED`] or [`RELEASED`] (a close wins
    /// if both happened).
    pub(crate) async fn stopped(&self) -> &'static str {
        tokio::select! {
            biased;
            () = self.shutdown.cancelled() => CLOSED,
            () = self.released.cancelled() => RELEASED,
        }
    }
}

/// State shared by every handle of one client; dropping the last one stops the connection
/// task.
pub(crate) struct Shared {
    orders: mpsc::Sender<Order>,
    mailbox: Arc<Mailbox>,
    numbers: RequestNumbers,
    next_sub_key: AtomicU64,
    status: watch::Receiver<Status>,
    attachment: watch::Receiver<Option<SessionTarget>>,
    server_id: ServerId,
    request_timeout: Option<Duration>,
    tracker: TaskTracker,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.mailbox.released.cancel();
    }
}

impl Shared {
    pub(crate) fn new(
        orders: mpsc::Sender<Order>,
        mailbox: Arc<Mailbox>,
        numbers: RequestNumbers,
        status: watch::Receiver<Status>,
        attachment: watch::Receiver<Option<SessionTarget>>,
        server_id: ServerId,
        request_timeout: Option<Duration>,
    ) -> Arc<Self> {
        Arc::new(Self {
            orders,
            mailbox,
            numbers,
            next_sub_key: AtomicU64::new(1),
            status,
            attachment,
            server_id,
            request_timeout,
            tracker: TaskTracker::new(),
        })
    }

    pub(crate) fn server_id(&self) -> &ServerId {
        &self.server_id
    }

    pub(crate) fn status(&self) -> &watch::Receiver<Status> {
        &self.status
    }

    pub(crate) fn attachment(&self) -> &watch::Receiver<Option<SessionTarget>> {
        &self.attachment
    }

    pub(crate) fn request_timeout(&self) -> Option<Duration> {
        self.request_timeout
    }

    /// A fresh request number (see [`RequestNumbers`]).
    pub(crate) fn next_request(&self) -> u64 {
        self.numbers.next()
    }

    pub(crate) fn next_sub_key(&self) -> u64 {
        self.next_sub_key.fetch_add(1, Ordering::Relaxed)
    }

    /// Queues `item` for the task (nothing once the client is closed: the task drains no
    /// more, and a closed core has nothing to cancel).
    pub(crate) fn defer(&self, item: Deferred) {
        if self.mailbox.shutdown.is_cancelled() {
            return;
        }
        self.mailbox.lock_deferred().push(item);
        self.mailbox.deferred_notify.notify_one();
    }

    /// Spawns a task that [`close`](Self::close) waits for.
    pub(crate) fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(self.tracker.spawn(fut));
    }

    /// Cancels every wait, then waits for every task spawned through
    /// [`spawn`](Self::spawn).
    pub(crate) async fn close(&self) {
        self.mailbox.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }

    /// Queues `order` for the connection task, waiting while the queue is full.
    ///
    /// # Errors
    /// [`RequestError::Closed`] once the client is closed.
    pub(crate) async fn order(&self, order: Order) -> Result<(), RequestError> {
        self.order_until(order, None).await
    }

    /// [`order`](Self::order), giving up with [`RequestError::Cancelled`] when `cancel` fires
    /// while the queue is full.
    pub(crate) async fn order_until(
        &self,
        order: Order,
        cancel: Option<&CancellationToken>,
    ) -> Result<(), RequestError> {
        if self.mailbox.shutdown.is_cancelled() {
            return Err(RequestError::Closed);
        }
        // The queue is rarely full: taking a slot without building a waiting future first is
        // a measurable share of a request's cost (the profile in BENCHMARKS.md).
        let order = match self.orders.try_send(order) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Full(order)) => order,
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(RequestError::Closed),
        };
        let sent = match cancel {
            Some(cancel) => tokio::select! {
                sent = self.orders.send(order) => sent,
                () = cancel.cancelled() => return Err(RequestError::Cancelled),
            },
            None => self.orders.send(order).await,
        };
        sent.map_err(|_| RequestError::Closed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> (Arc<Shared>, Arc<Mailbox>) {
        let mailbox = Arc::new(Mailbox::default());
        let (orders, _) = mpsc::channel(1);
        let (_, status) = watch::channel(Status::Connected);
        let (_, attachment) = watch::channel(None);
        let server_id = ServerId::parse("00000000-0000-4000-8000-000000000001").unwrap();
        let shared = Shared::new(
            orders,
            Arc::clone(&mailbox),
            RequestNumbers::default(),
            status,
            attachment,
            server_id,
            None,
        );
        (shared, mailbox)
    }

    #[tokio::test]
    async fn the_task_is_stopped_by_the_last_handle_dropped_and_a_close_wins() {
        let (shared, mailbox) = shared();
        let clone = Arc::clone(&shared);
        drop(shared);
        assert!(!mailbox.released.is_cancelled(), "a handle remains");
        drop(clone);
        assert_eq!(mailbox.stopped().await, RELEASED);
        mailbox.shutdown.cancel();
        assert_eq!(mailbox.stopped().await, CLOSED);
    }

    #[test]
    fn nothing_is_deferred_once_the_client_is_closed() {
        let (shared, mailbox) = shared();
        shared.defer(Deferred::Cancel(1));
        assert_eq!(mailbox.lock_deferred().len(), 1);
        mailbox.lock_deferred().clear();
        mailbox.shutdown.cancel();
        shared.defer(Deferred::Unsubscribe(2));
        assert!(
            mailbox.lock_deferred().is_empty(),
            "no one drains it any more"
        );
    }
}
