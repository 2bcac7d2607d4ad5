//! What every handle of one client shares with its connection task: the bounded command
//! queue, the list of work queued from `Drop`, the request number allocator, the status and
//! attachment watches, and the shutdown signal.

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

/// State shared by every handle of one client and its connection task.
pub(crate) struct Shared {
    orders: mpsc::Sender<Order>,
    deferred: Mutex<Vec<Deferred>>,
    /// Woken when `deferred` gains an item.
    pub(crate) deferred_notify: Notify,
    numbers: RequestNumbers,
    next_sub_key: AtomicU64,
    status: watch::Receiver<Status>,
    attachment: watch::Receiver<Option<SessionTarget>>,
    server_id: ServerId,
    request_timeout: Option<Duration>,
    /// Cancelled when the client closes: the task finishes, every wait ends.
    pub(crate) shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Shared {
    pub(crate) fn new(
        orders: mpsc::Sender<Order>,
        numbers: RequestNumbers,
        status: watch::Receiver<Status>,
        attachment: watch::Receiver<Option<SessionTarget>>,
        server_id: ServerId,
        request_timeout: Option<Duration>,
    ) -> Arc<Self> {
        Arc::new(Self {
            orders,
            deferred: Mutex::new(Vec::new()),
            deferred_notify: Notify::new(),
            numbers,
            next_sub_key: AtomicU64::new(1),
            status,
            attachment,
            server_id,
            request_timeout,
            shutdown: CancellationToken::new(),
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

    pub(crate) fn lock_deferred(&self) -> MutexGuard<'_, Vec<Deferred>> {
        self.deferred.lock()
    }

    pub(crate) fn defer(&self, item: Deferred) {
        self.lock_deferred().push(item);
        self.deferred_notify.notify_one();
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
        self.shutdown.cancel();
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
        if self.shutdown.is_cancelled() {
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
