//! The client handle: connect, request, cancel, attach, subscribe, close.
//!
//! Handles talk to the connection task through one bounded command channel; every answer
//! comes back on the caller's own `oneshot`. The request table lives in the task's
//! `ClientConn` (`crate::conn`) only.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use baton_protocol::chord::ServiceMode;
use baton_protocol::{Id, ServerId, SessionTarget, Target, Value};
use tokio::sync::{Notify, Semaphore, SemaphorePermit, TryAcquireError, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::ClientConfig;
use crate::conn::{Answer, ClientConn, Command, ConnConfig, RequestNumbers, TargetSpec};
use crate::driver::{self, Driver};
use crate::endpoint::Endpoint;
use crate::error::{ConnectError, RequestError};
use crate::reply::Reply;
use crate::session::Session;
use crate::status::Status;
use crate::subscription::{PendingSubscription, SubscribeCmd, Subscription};
use crate::tls;

/// Commands queued for the connection task before callers wait.
const COMMAND_QUEUE: usize = 256;

/// How a caller waits for the connection task's answer.
pub(crate) type Waiter = oneshot::Sender<Answer>;

/// Work that handles queue from `Drop` (which cannot await, and must not be refused by a
/// full command channel).
#[derive(Debug)]
pub(crate) enum Deferred {
    /// Request number `.0` was given up on.
    Cancel(u64),
    /// The subscription with this key was dropped.
    Unsubscribe(u64),
}

/// State shared by every handle of one client and its connection task.
pub(crate) struct Shared {
    commands: mpsc::Sender<Command<Waiter>>,
    deferred: Mutex<Vec<Deferred>>,
    pub(crate) deferred_notify: Notify,
    numbers: RequestNumbers,
    next_sub_key: AtomicU64,
    in_flight: Semaphore,
    status: watch::Receiver<Status>,
    attachment: watch::Receiver<Option<SessionTarget>>,
    server_id: ServerId,
    request_timeout: Option<Duration>,
    pub(crate) shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Shared {
    pub(crate) fn next_sub_key(&self) -> u64 {
        self.next_sub_key.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn lock_deferred(&self) -> MutexGuard<'_, Vec<Deferred>> {
        // A poisoned list is still a valid list of numbers.
        self.deferred
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn defer(&self, item: Deferred) {
        self.lock_deferred().push(item);
        self.deferred_notify.notify_one();
    }

    /// Spawns a task that `close` waits for.
    pub(crate) fn spawn<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(self.tracker.spawn(fut));
    }

    pub(crate) async fn command(&self, cmd: Command<Waiter>) -> Result<(), RequestError> {
        if self.shutdown.is_cancelled() {
            return Err(RequestError::Closed);
        }
        // The queue is rarely full: taking a slot without building a waiting future first is
        // a measurable share of a request's cost (the profile in BENCHMARKS.md, issue 13).
        match self.commands.try_send(cmd) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(cmd)) => self
                .commands
                .send(cmd)
                .await
                .map_err(|_| RequestError::Closed),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(RequestError::Closed),
        }
    }

    /// A slot of the in-flight limit, without a waiting future while one is free.
    async fn in_flight_permit(
        &self,
        cancel: Option<&CancellationToken>,
    ) -> Result<SemaphorePermit<'_>, RequestError> {
        match self.in_flight.try_acquire() {
            Ok(permit) => return Ok(permit),
            Err(TryAcquireError::Closed) => return Err(RequestError::Closed),
            Err(TryAcquireError::NoPermits) => {}
        }
        match cancel {
            Some(cancel) => tokio::select! {
                permit = self.in_flight.acquire() => permit,
                () = cancel.cancelled() => return Err(RequestError::Cancelled),
            },
            None => self.in_flight.acquire().await,
        }
        .map_err(|_| RequestError::Closed)
    }
}

/// What the connection task answered, or why it did not.
fn answered(answer: Result<Answer, oneshot::error::RecvError>) -> Answer {
    answer.unwrap_or_else(|_| Answer::Reply(Err(RequestError::NotSent("client closed".to_owned()))))
}

fn into_reply(answer: Answer) -> Result<Reply, RequestError> {
    match answer {
        Answer::Reply(r) => r,
        Answer::Attached(r) => r.map(|_| Reply::Void),
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

/// A connected client. Cheap to clone; all clones share one connection.
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
            .field("server_id", &self.shared.server_id)
            .field("status", &*self.shared.status.borrow())
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
        let tls = match config.endpoint {
            Endpoint::Tls { .. } => Some(tls::client_config(&config.tls)?),
            Endpoint::Unix(_) | Endpoint::Tcp { .. } => None,
        };
        let (commands, command_rx) = mpsc::channel(COMMAND_QUEUE);
        let numbers = RequestNumbers::default();
        let seed = u64::from(std::process::id()) ^ (&raw const commands as u64);
        let mut conn = ClientConn::new(
            ConnConfig {
                max_frame_length: config.max_frame_length,
                expected_server_id: config.expected_server_id.clone(),
                reconnect: config.reconnect.clone(),
                jitter_seed: seed,
            },
            numbers.clone(),
        );
        let transport = driver::establish(&config, tls.as_ref(), &mut conn).await?;
        let server_id = conn
            .server_id()
            .cloned()
            .unwrap_or_else(|| unreachable!("a handshaken connection knows its server"));
        let (status_tx, status) = watch::channel(Status::Connected);
        let (attachment_tx, attachment) = watch::channel(None);
        let shared = Arc::new(Shared {
            commands,
            deferred: Mutex::new(Vec::new()),
            deferred_notify: Notify::new(),
            numbers,
            next_sub_key: AtomicU64::new(1),
            in_flight: Semaphore::new(config.max_in_flight.max(1)),
            status,
            attachment,
            server_id: server_id.clone(),
            request_timeout: config.request_timeout,
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
        });
        let span =
            tracing::debug_span!("client", endpoint = %config.endpoint, server_id = %server_id);
        let driver = Driver::new(
            Arc::clone(&shared),
            config,
            tls,
            conn,
            command_rx,
            status_tx,
            attachment_tx,
        );
        shared.spawn(driver.run(transport).instrument(span));
        Ok(Self { shared })
    }

    /// The server's identity from its hello.
    pub fn server_id(&self) -> &ServerId {
        &self.shared.server_id
    }

    /// The server target.
    pub fn server_target(&self) -> Target {
        Target::Server(self.shared.server_id.clone())
    }

    /// Current connection status.
    pub fn status(&self) -> Status {
        self.shared.status.borrow().clone()
    }

    /// Watch the connection status.
    pub fn watch_status(&self) -> watch::Receiver<Status> {
        self.shared.status.clone()
    }

    /// The current attachment, from the server's `attachment` frames.
    pub fn attachment(&self) -> Option<SessionTarget> {
        self.shared.attachment.borrow().clone()
    }

    /// Watch the attachment.
    pub fn watch_attachment(&self) -> watch::Receiver<Option<SessionTarget>> {
        self.shared.attachment.clone()
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
            .or(self.shared.request_timeout)
            .map(|t| tokio::time::Instant::now() + t);
        // Until the command is queued the deadline is ours; after, the connection's.
        let queue = async {
            let permit = self
                .shared
                .in_flight_permit(options.cancel.as_ref())
                .await?;
            let number = self.shared.numbers.next();
            let (waiter, rx) = oneshot::channel();
            self.shared
                .command(Command::Request {
                    number,
                    target,
                    call,
                    deadline: deadline.map(tokio::time::Instant::into_std),
                    waiter,
                })
                .await?;
            Ok((permit, number, rx))
        };
        let (_permit, number, rx) = match deadline {
            Some(at) => tokio::time::timeout_at(at, queue)
                .await
                .unwrap_or(Err(RequestError::TimedOut))?,
            None => queue.await?,
        };
        let mut guard = CancelOnDrop {
            shared: &self.shared,
            number: Some(number),
        };
        let answer = match &options.cancel {
            Some(cancel) => tokio::select! {
                r = rx => answered(r),
                () = cancel.cancelled() => return Err(RequestError::Cancelled),
            },
            None => answered(rx.await),
        };
        // Answered (or failed for good): nothing left to cancel.
        guard.number = None;
        into_reply(answer)
    }

    /// Attaches this connection to `session_id` (or a prefix the server resolves) and returns
    /// a handle that addresses its calls to the current attachment; its
    /// [`id`](Session::id) is the session id the server announced.
    ///
    /// # Errors
    /// The server's error (e.g. `session_not_found`) or a connection error.
    pub async fn attach(&self, session_id: &str) -> Result<Session, RequestError> {
        let session_id =
            Id::new(session_id).map_err(|_| RequestError::NotAttached(String::new()))?;
        let (waiter, rx) = oneshot::channel();
        self.shared
            .command(Command::Attach { session_id, waiter })
            .await?;
        let target = match answered(rx.await) {
            Answer::Attached(r) => r?,
            Answer::Reply(r) => {
                r?;
                return Err(RequestError::NotSent("client closed".to_owned()));
            }
        };
        // The session as the server names it (`session_id` may have been a prefix).
        Ok(Session::new(
            self.clone(),
            target.session_id.clone(),
            target,
        ))
    }

    /// Detaches from the current session (no-op if none).
    ///
    /// # Errors
    /// A server or connection error.
    pub async fn detach(&self) -> Result<(), RequestError> {
        let (waiter, rx) = oneshot::channel();
        self.shared.command(Command::Detach { waiter }).await?;
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
        let (cmd, parts) = SubscribeCmd::new(key, target, service_id.to_owned(), mode);
        let pending = PendingSubscription::new(parts, Arc::clone(&self.shared));
        self.shared.command(Command::Subscribe(cmd)).await?;
        pending.ready().await
    }

    /// Closes the connection: pending requests fail, subscriptions end, tasks stop.
    /// Idempotent.
    pub async fn close(&self) {
        self.shared.shutdown.cancel();
        self.shared.tracker.close();
        self.shared.tracker.wait().await;
    }
}
