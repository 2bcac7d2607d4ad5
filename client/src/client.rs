//! The client handle: connect, request, cancel, subscribe, close.
//!
//! Handles talk to the connection task through one bounded order queue; every answer comes
//! back on the caller's own `oneshot`. The request table and the in-flight limit live in the
//! task's `ClientConn` (`crate::conn`) only.

use std::sync::Arc;
use std::time::Duration;

use baton_protocol::chord::ServiceMode;
use baton_protocol::{ServerId, SessionTarget, Target, Value};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::config::ClientConfig;
use crate::conn::{Answer, Command, Subscribe, TargetSpec, UserRequest};
use crate::driver;
use crate::error::{ConnectError, RequestError};
use crate::reply::Reply;
use crate::shared::{Deferred, Order, Shared};
use crate::sink::SubscriptionSink;
use crate::status::Status;
use crate::subscription::{PendingSubscription, Subscription};

/// What the connection task answered, or why it did not.
pub(crate) fn answered(answer: Result<Answer, oneshot::error::RecvError>) -> Answer {
    answer.unwrap_or_else(|_| Answer::Reply(Err(RequestError::NotSent("client closed".to_owned()))))
}

/// A request's (or detach's) reply; an attach's success as [`Reply::Void`].
fn into_reply(answer: Answer) -> Result<Reply, RequestError> {
    match answer {
        Answer::Reply(r) => r,
        Answer::Attached(r) => r.map(|_| Reply::Void),
    }
}

/// Resolves when `token` is cancelled; never without one.
async fn cancelled(token: Option<&CancellationToken>) {
    match token {
        Some(token) => token.cancelled().await,
        None => std::future::pending().await,
    }
}

/// Resolves at `deadline`; never without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Per-request options.
#[derive(Debug, Clone, Default)]
pub struct RequestOptions {
    /// Cancels the request when triggered (sends `cancel` if it was already sent).
    pub cancel: Option<CancellationToken>,
    /// Overrides the client's default request timeout.
    pub timeout: Option<Duration>,
}

/// A connected client. Cheap to clone; all clones share one connection, which lives until
/// the last clone, [`Session`](crate::Session) and [`Subscription`] is dropped (see the
/// [crate docs](crate#lifetime)) or [`close`](Self::close) is called.
///
/// # Cancellation
/// Dropping a request future before it completes cancels the request: if it was already
/// sent, the server receives a `cancel` and its late answer is ignored. The pending entry is
/// always removed.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server_id", self.shared.server_id())
            .field("status", &*self.shared.status().borrow())
            .finish_non_exhaustive()
    }
}

/// Gives up on a request when dropped unless disarmed: the connection task forgets it and
/// sends `cancel` if it was sent.
struct CancelOnDrop<'a> {
    shared: &'a Shared,
    number: Option<u64>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(number) = self.number.take() {
            self.shared.defer(Deferred::Cancel(number));
        }
    }
}

impl Client {
    /// Connects, performs the handshake and starts the connection task.
    ///
    /// # Errors
    /// [`ConnectError`] for an unreachable server, TLS failure, `hello_error` (e.g. version
    /// mismatch) or a server id other than `config.expected_server_id`.
    pub async fn connect(config: ClientConfig) -> Result<Self, ConnectError> {
        Ok(Self {
            shared: driver::connect(config).await?,
        })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The server's identity from its hello.
    pub fn server_id(&self) -> &ServerId {
        self.shared.server_id()
    }

    /// The server target.
    pub fn server_target(&self) -> Target {
        Target::Server(self.shared.server_id().clone())
    }

    /// Current connection status.
    pub fn status(&self) -> Status {
        self.shared.status().borrow().clone()
    }

    /// Watch the connection status.
    pub fn watch_status(&self) -> watch::Receiver<Status> {
        self.shared.status().clone()
    }

    /// The current attachment, from the server's `attachment` frames.
    pub fn attachment(&self) -> Option<SessionTarget> {
        self.shared.attachment().borrow().clone()
    }

    /// Watch the attachment.
    pub fn watch_attachment(&self) -> watch::Receiver<Option<SessionTarget>> {
        self.shared.attachment().clone()
    }

    /// Sends `call` to `target` and waits for the answer (responses may arrive in any order).
    ///
    /// # Errors
    /// [`RequestError`]; server errors keep the server's code.
    pub async fn request(&self, target: Target, call: Value) -> Result<Reply, RequestError> {
        self.request_with(
            TargetSpec::Explicit(target),
            call,
            RequestOptions::default(),
        )
        .await
    }

    /// [`request`](Self::request) with a cancellation token and/or timeout.
    ///
    /// # Errors
    /// As [`request`](Self::request), plus [`RequestError::Cancelled`] and
    /// [`RequestError::TimedOut`].
    pub async fn request_with_options(
        &self,
        target: Target,
        call: Value,
        options: RequestOptions,
    ) -> Result<Reply, RequestError> {
        self.request_with(TargetSpec::Explicit(target), call, options)
            .await
    }

    pub(crate) async fn request_with(
        &self,
        target: TargetSpec,
        call: Value,
        options: RequestOptions,
    ) -> Result<Reply, RequestError> {
        // Already cancelled: send nothing.
        if options
            .cancel
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
        {
            return Err(RequestError::Cancelled);
        }
        let deadline = options
            .timeout
            .or(self.shared.request_timeout())
            .map(|t| tokio::time::Instant::now() + t);
        let number = self.shared.next_request();
        let (waiter, rx) = oneshot::channel();
        let order = Order::Core(Command::Request(UserRequest {
            number,
            target,
            call,
            deadline: deadline.map(tokio::time::Instant::into_std),
            waiter,
        }));
        // The deadline and the token bound the whole wait here, queued or not: a queued order
        // waits for the task while the in-flight limit or the write backlog is full, and the
        // core sees its deadline only once it takes it. Giving up after the order was queued
        // tells the core (`CancelOnDrop`), which forgets the request or, if it was sent,
        // cancels it on the wire (as it does itself when a sent request's deadline passes).
        let queued = self.shared.order_until(order, options.cancel.as_ref());
        match deadline {
            Some(at) => tokio::time::timeout_at(at, queued)
                .await
                .unwrap_or(Err(RequestError::TimedOut))?,
            None => queued.await?,
        }
        let mut guard = CancelOnDrop {
            shared: &self.shared,
            number: Some(number),
        };
        let answer = match (&options.cancel, deadline) {
            (None, None) => answered(rx.await),
            (cancel, deadline) => tokio::select! {
                biased;
                r = rx => answered(r),
                () = cancelled(cancel.as_ref()) => return Err(RequestError::Cancelled),
                () = sleep_until(deadline) => return Err(RequestError::TimedOut),
            },
        };
        // Answered (or failed for good): nothing left to cancel.
        guard.number = None;
        into_reply(answer)
    }

    /// Detaches from the current session (no-op if none).
    ///
    /// # Errors
    /// A server or connection error.
    pub async fn detach(&self) -> Result<(), RequestError> {
        let (waiter, rx) = oneshot::channel();
        self.shared
            .order(Order::Core(Command::Detach { waiter }))
            .await?;
        into_reply(answered(rx.await)).map(drop)
    }

    /// Subscribes to a server-scope service and waits for its snapshot.
    ///
    /// # Errors
    /// The server's error (e.g. `service_not_found`) or a connection error.
    pub async fn subscribe(
        &self,
        service_id: &str,
        mode: ServiceMode,
    ) -> Result<Subscription, RequestError> {
        self.subscribe_at(TargetSpec::Explicit(self.server_target()), service_id, mode)
            .await
    }

    pub(crate) async fn subscribe_at(
        &self,
        target: TargetSpec,
        service_id: &str,
        mode: ServiceMode,
    ) -> Result<Subscription, RequestError> {
        let key = self.shared.next_sub_key();
        let (sink, receivers) = SubscriptionSink::new(service_id, mode);
        let pending = PendingSubscription::new(
            key,
            service_id.to_owned(),
            receivers,
            Arc::clone(&self.shared),
        );
        let subscribe = Subscribe {
            key,
            target,
            service_id: service_id.to_owned(),
            mode,
        };
        self.shared
            .order(Order::Subscribe(Box::new((subscribe, sink))))
            .await?;
        pending.ready().await
    }

    /// Closes the connection now, for every handle: pending requests fail, subscriptions
    /// end, the task stops (and is waited for). Idempotent. Dropping the last handle closes
    /// it too, without waiting.
    pub async fn close(&self) {
        self.shared.close().await;
    }
}
