//! The client handle: connect, request, cancel, attach, subscribe, close.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use baton_protocol::chord::ServiceMode;
use baton_protocol::{
    Cancel, ClientMessage, Id, Request, ServerId, SessionTarget, Target, Value, encode_frame,
};
use bytes::Bytes;
use tokio::sync::{Notify, Semaphore, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::config::ClientConfig;
use crate::connect;
use crate::driver::{Command, Deferred, Driver, Reply, ReplyTx, TargetSpec};
use crate::endpoint::Endpoint;
use crate::error::{ConnectError, RequestError};
use crate::session::Session;
use crate::status::Status;
use crate::subscription::{SubCore, SubscribeCmd, Subscription};
use crate::tls;

/// Commands queued for the driver before callers wait.
const COMMAND_QUEUE: usize = 256;

/// A caller's request that was written to the current connection and awaits its response.
pub(crate) struct SentRequest {
    pub(crate) reply: ReplyTx,
    pub(crate) target: Target,
}

/// The request path of the live connection, shared by handles and the driver.
///
/// A caller encodes its request and queues the frame for the writer task itself, recording
/// it here in the same critical section, so a request costs no hop through the driver task.
/// The driver (which reads the connection) completes entries from here, cancels them, and
/// clears this when the connection ends: an entry then either was never recorded (the caller
/// gets `NotSent`) or is failed by the driver (`OutcomeUnknown`). Never locked across an
/// `.await`.
#[derive(Default)]
pub(crate) struct Wire {
    /// Bumped whenever the connection is installed or cleared.
    generation: u64,
    /// The writer queue of the live connection; `None` while disconnected (requests then
    /// queue for the driver, which sends them once reconnected, as before).
    outbound: Option<mpsc::Sender<Bytes>>,
    /// User requests written to the current connection, by id.
    sent: HashMap<Id, SentRequest>,
    /// Requests cancelled after sending: their late response is ignored, not fatal.
    abandoned: HashSet<Id>,
}

/// Whom a response id answers.
pub(crate) enum Answered {
    Sent(SentRequest),
    Abandoned,
    Unknown,
}

/// State shared by every handle of one client and its driver task.
pub(crate) struct Shared {
    commands: mpsc::Sender<Command>,
    wire: Mutex<Wire>,
    max_frame_length: u32,
    deferred: Mutex<Vec<Deferred>>,
    pub(crate) deferred_notify: Notify,
    next_request: AtomicU64,
    next_subscription: AtomicU64,
    next_sub_key: AtomicU64,
    jitter_state: AtomicU64,
    in_flight: Arc<Semaphore>,
    status: watch::Receiver<Status>,
    attachment: watch::Receiver<Option<SessionTarget>>,
    server_id: ServerId,
    request_timeout: Option<Duration>,
    pub(crate) shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Shared {
    pub(crate) fn next_request_id(&self) -> Id {
        let n = self.next_request.fetch_add(1, Ordering::Relaxed);
        Id::new(format!("request-{n}"))
            .unwrap_or_else(|_| unreachable!("non-empty by construction"))
    }

    pub(crate) fn next_subscription_id(&self) -> Id {
        let n = self.next_subscription.fetch_add(1, Ordering::Relaxed);
        Id::new(format!("service-{n}"))
            .unwrap_or_else(|_| unreachable!("non-empty by construction"))
    }

    pub(crate) fn next_sub_key(&self) -> u64 {
        self.next_sub_key.fetch_add(1, Ordering::Relaxed)
    }

    /// A number in `[0, 1)` for backoff jitter (xorshift; quality is irrelevant here).
    pub(crate) fn jitter(&self) -> f64 {
        let mut x = self.jitter_state.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter_state.store(x, Ordering::Relaxed);
        #[expect(clippy::cast_precision_loss, reason = "jitter only needs 53 bits")]
        let f = (x >> 11) as f64 / (1u64 << 53) as f64;
        f
    }

    fn lock_wire(&self) -> MutexGuard<'_, Wire> {
        // Every critical section leaves the map and the queue consistent.
        self.wire
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lets handles write requests to a new connection's writer queue.
    pub(crate) fn install_wire(&self, outbound: mpsc::Sender<Bytes>) {
        let mut wire = self.lock_wire();
        wire.generation += 1;
        wire.outbound = Some(outbound);
    }

    /// The connection ended: stops direct writes and returns the requests that were sent
    /// on it (their outcome is unknown).
    pub(crate) fn clear_wire(&self) -> Vec<SentRequest> {
        let mut wire = self.lock_wire();
        wire.generation += 1;
        wire.outbound = None;
        wire.abandoned.clear();
        wire.sent.drain().map(|(_, r)| r).collect()
    }

    /// Records a request the driver sent on the current connection.
    pub(crate) fn record_sent(&self, id: Id, request: SentRequest) {
        self.lock_wire().sent.insert(id, request);
    }

    /// Takes a sent request's entry (it is being cancelled).
    pub(crate) fn take_sent(&self, id: &Id) -> Option<SentRequest> {
        self.lock_wire().sent.remove(id)
    }

    /// Marks a request whose `cancel` was sent: its late answer is ignored.
    pub(crate) fn abandon(&self, id: Id) {
        self.lock_wire().abandoned.insert(id);
    }

    /// Takes what the response with `id` answers.
    pub(crate) fn take_answered(&self, id: &Id) -> Answered {
        let mut wire = self.lock_wire();
        if let Some(sent) = wire.sent.remove(id) {
            Answered::Sent(sent)
        } else if wire.abandoned.remove(id) {
            Answered::Abandoned
        } else {
            Answered::Unknown
        }
    }

    /// A caller gave up on request `id`: if it was sent, queue its `cancel` right behind it
    /// (so it precedes anything the caller sends next) and ignore its late answer.
    fn cancel_sent(&self, id: Id) {
        let mut wire = self.lock_wire();
        let queued = match (wire.sent.remove(&id), &wire.outbound) {
            (Some(sent), Some(outbound)) => {
                let msg = ClientMessage::Cancel(Cancel {
                    id: id.clone(),
                    target: sent.target.clone(),
                });
                match encode_frame(&msg, self.max_frame_length) {
                    Ok(frame) => match outbound.try_send(frame) {
                        Ok(()) => true,
                        // A full queue: put it back for the driver, which can wait for room.
                        Err(_) => {
                            wire.sent.insert(id.clone(), sent);
                            false
                        }
                    },
                    // Cannot happen for ids and targets that encoded in the request; still,
                    // never leave the answer fatal.
                    Err(_) => true,
                }
            }
            (Some(sent), None) => {
                wire.sent.insert(id.clone(), sent);
                false
            }
            (None, _) => false,
        };
        if queued {
            wire.abandoned.insert(id);
            return;
        }
        drop(wire);
        // Not sent by us (still queued for the driver, or being sent by it): the driver
        // cancels it if it was sent, in order with its own sends.
        self.defer(Deferred::Cancel(id));
    }

    /// Sends a user request: straight to the writer queue while connected, through the
    /// driver otherwise. On `Ok` the answer arrives on `reply`'s receiver.
    async fn send_request(
        &self,
        id: Id,
        spec: TargetSpec,
        call: Value,
        reply: ReplyTx,
    ) -> Result<(), RequestError> {
        if self.shutdown.is_cancelled() {
            return Err(RequestError::Closed);
        }
        let live = {
            let wire = self.lock_wire();
            wire.outbound.clone().map(|o| (wire.generation, o))
        };
        let Some((generation, outbound)) = live else {
            return self
                .command(Command::Request {
                    id,
                    target: spec,
                    call,
                    reply,
                })
                .await;
        };
        // Resolved at send time, as the driver does: a session call never goes out with a
        // route the client already knows is stale.
        let target = match spec {
            TargetSpec::Explicit(t) => t,
            TargetSpec::Session(session_id) => match &*self.attachment.borrow() {
                Some(a) if a.session_id == session_id => Target::Session(a.clone()),
                _ => return Err(RequestError::NotAttached(session_id.to_string())),
            },
        };
        let frame = encode_frame(
            &ClientMessage::Request(Request {
                id: id.clone(),
                target: target.clone(),
                call,
            }),
            self.max_frame_length,
        )?;
        // Waits for queue space without holding the lock (the queue is bounded).
        let lost = || RequestError::NotSent("connection lost".to_owned());
        let permit = outbound.reserve_owned().await.map_err(|_| lost())?;
        let mut wire = self.lock_wire();
        if wire.generation != generation {
            // The connection ended while we waited: this frame was never written.
            return Err(lost());
        }
        // Recorded and queued together, so the driver can never see the response (or clear
        // the map) without the entry, and a later `cancel` always follows the request.
        wire.sent.insert(id, SentRequest { reply, target });
        permit.send(frame);
        Ok(())
    }

    pub(crate) fn lock_deferred(&self) -> MutexGuard<'_, Vec<Deferred>> {
        // A poisoned list is still a valid list of ids.
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

    pub(crate) async fn command(&self, cmd: Command) -> Result<(), RequestError> {
        if self.shutdown.is_cancelled() {
            return Err(RequestError::Closed);
        }
        self.commands
            .send(cmd)
            .await
            .map_err(|_| RequestError::Closed)
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

/// Removes a request's pending entry and sends `cancel` unless disarmed.
struct CancelOnDrop<'a> {
    shared: &'a Shared,
    id: Option<Id>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.shared.cancel_sent(id);
        }
    }
}

impl Client {
    /// Connects, performs the handshake and starts the connection driver.
    ///
    /// # Errors
    /// [`ConnectError`] for an unreachable server, TLS failure, `hello_error` (e.g. version
    /// mismatch) or a server id other than `config.expected_server_id`.
    pub async fn connect(config: ClientConfig) -> Result<Self, ConnectError> {
        let tls = match config.endpoint {
            Endpoint::Tls { .. } => Some(tls::client_config(&config.tls)?),
            Endpoint::Unix(_) | Endpoint::Tcp { .. } => None,
        };
        let conn =
            connect::connect(&config, tls.as_ref(), config.expected_server_id.as_ref()).await?;
        let server_id = conn.server_id.clone();
        let (commands, command_rx) = mpsc::channel(COMMAND_QUEUE);
        let (status_tx, status) = watch::channel(Status::Connected);
        let (attachment_tx, attachment) = watch::channel(None);
        let seed = std::process::id() as u64 ^ (&commands as *const _ as u64) | 1;
        let shared = Arc::new(Shared {
            commands,
            wire: Mutex::new(Wire::default()),
            max_frame_length: config.max_frame_length,
            deferred: Mutex::new(Vec::new()),
            deferred_notify: Notify::new(),
            next_request: AtomicU64::new(1),
            next_subscription: AtomicU64::new(1),
            next_sub_key: AtomicU64::new(1),
            jitter_state: AtomicU64::new(seed),
            in_flight: Arc::new(Semaphore::new(config.max_in_flight.max(1))),
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
            server_id,
            command_rx,
            status_tx,
            attachment_tx,
            SubCore::default(),
        );
        shared.spawn(driver.run(conn).instrument(span));
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
        let cancel = options.cancel.unwrap_or_default();
        // Already cancelled: send nothing.
        if cancel.is_cancelled() {
            return Err(RequestError::Cancelled);
        }
        let timeout = options.timeout.or(self.shared.request_timeout);
        let work = async {
            let _permit = tokio::select! {
                permit = Arc::clone(&self.shared.in_flight).acquire_owned() => {
                    permit.map_err(|_| RequestError::Closed)?
                }
                () = cancel.cancelled() => return Err(RequestError::Cancelled),
            };
            let id = self.shared.next_request_id();
            let (reply, rx) = oneshot::channel();
            self.shared
                .send_request(id.clone(), target, call, reply)
                .await?;
            let mut guard = CancelOnDrop {
                shared: &self.shared,
                id: Some(id),
            };
            let result = tokio::select! {
                r = rx => r.unwrap_or_else(|_| Err(RequestError::NotSent("client closed".to_owned()))),
                () = cancel.cancelled() => return Err(RequestError::Cancelled),
            };
            // Answered (or failed for good): nothing left to cancel.
            guard.id = None;
            result
        };
        match timeout {
            Some(t) => tokio::time::timeout(t, work)
                .await
                .unwrap_or(Err(RequestError::TimedOut)),
            None => work.await,
        }
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
        let (reply, rx) = oneshot::channel();
        self.shared
            .command(Command::Attach {
                session_id: session_id.clone(),
                reply,
            })
            .await?;
        let target = rx
            .await
            .unwrap_or_else(|_| Err(RequestError::NotSent("client closed".to_owned())))?;
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
        let (reply, rx) = oneshot::channel();
        self.shared.command(Command::Detach { reply }).await?;
        rx.await
            .unwrap_or_else(|_| Err(RequestError::NotSent("client closed".to_owned())))
            .map(drop)
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
        let (cmd, handle) = SubscribeCmd::new(
            key,
            target,
            service_id.to_owned(),
            mode,
            Arc::clone(&self.shared),
        );
        self.shared.command(Command::Subscribe(cmd)).await?;
        handle.ready().await
    }

    /// Closes the connection: pending requests fail, subscriptions end, tasks stop.
    /// Idempotent.
    pub async fn close(&self) {
        self.shared.shutdown.cancel();
        self.shared.tracker.close();
        self.shared.tracker.wait().await;
    }
}
