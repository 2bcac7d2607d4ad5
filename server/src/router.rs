//! Session routing (upstream `SessionRouter`): which connection is attached to which hosted
//! session, de-duplicated opens, attachment fences, termination and removal.
//!
//! Rules (`docs/protocol.md`, session routing):
//! * one attachment per connection; attach, detach and admission of session calls are
//!   serialised per connection, admitted calls then run concurrently;
//! * the `attachment` frame is queued before the attach/detach call returns, so it reaches
//!   the client before the response;
//! * attaching again to the same session is a no-op that keeps the `attachmentId`;
//! * a session call must name the current `{sessionId, attachmentId}`, else
//!   `session_not_attached`;
//! * concurrent opens of one session share one `open_session` and its failure;
//! * a terminated session releases its attachments (each client gets `attachment: null`);
//! * a disconnect releases the attachment without publishing anything.
//!
//! # What the router keeps
//! Whether a session is open is the host's fact, not the router's. The router keeps what
//! routing needs: each connection's binding, and a cache of the session handles it got from
//! [`ServerHost::open_session`], keyed by the canonical id the host's `resolve_session`
//! answered. The host invalidates a cached handle in two ways, and the router never decides
//! it by itself: the handle's `terminated` resolves (the router forgets it and releases its
//! attachments), or its `lease` answers [`ServiceError::SessionReleased`] (the router forgets
//! it and opens the session afresh, up to [`MAX_ATTACH_ATTEMPTS`] times). A handle the router
//! still holds may therefore be one the host has let go of; it is never used past a lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use baton_protocol::{Id, ServerId, SessionTarget, WireError};
use parking_lot::Mutex;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::chord::ServiceCall;
use crate::conn::shared::ConnShared;
use crate::context::{ConnectionId, Context, Peer};
use crate::error::{CloseError, ServiceError};
use crate::host::{
    CallResult, ServerHost, ServiceScope, SessionHandle, SessionMetadata, Termination,
};
use crate::panics::guarded;
use crate::presentation::{BoxFuture, Presentation, PresentationOps};
use crate::publish::Publisher;
use crate::tasks::spawn;

type Lease<H> = <<H as ServerHost>::Session as SessionHandle>::Lease;
type Parts<H> = (Arc<Router<H>>, Arc<ClientSlot<H>>);
type OpenCell<H> = Arc<OnceCell<Result<Arc<Hosted<H>>, WireError>>>;

/// How many times one attach opens a session whose host keeps releasing it under the attach
/// ([`ServiceError::SessionReleased`]) before it answers `busy`.
pub const MAX_ATTACH_ATTEMPTS: usize = 3;

/// One cached session handle, shared by every attachment to the session.
struct Hosted<H: ServerHost> {
    session_id: String,
    handle: Arc<H::Session>,
    invalidated: AtomicBool,
    clients: Mutex<HashMap<ConnectionId, Weak<ClientSlot<H>>>>,
    stop: CancellationToken,
}

/// A connection's current attachment.
struct Binding<H: ServerHost> {
    hosted: Arc<Hosted<H>>,
    /// The canonical session id, as announced in the `attachment` frame (a host may resolve a
    /// prefix or alias; the client's target then carries the id the directory lists).
    session_id: Id,
    attachment_id: Id,
    lease: Arc<Lease<H>>,
    ops: TaskTracker,
}

/// The router's view of one connection.
pub(crate) struct ClientSlot<H: ServerHost> {
    conn_id: ConnectionId,
    conn: Weak<ConnShared>,
    peer: Arc<Peer>,
    disconnected: AtomicBool,
    current: tokio::sync::Mutex<Option<Binding<H>>>,
}

impl<H: ServerHost> ClientSlot<H> {
    fn publish(&self, attachment: Option<SessionTarget>) {
        if let Some(conn) = self.conn.upgrade() {
            conn.with(|s| s.push_attachment(attachment));
        }
    }

    fn context(&self, cancellation: CancellationToken) -> Context {
        Context::new(cancellation, Some(Arc::clone(&self.peer)))
    }
}

/// Routes session calls for every connection of one server.
pub(crate) struct Router<H: ServerHost> {
    host: Arc<H>,
    server_id: ServerId,
    closing: AtomicBool,
    /// The handle cache: by canonical session id, the open (or opening) handle.
    handles: Mutex<HashMap<String, OpenCell<H>>>,
    clients: Mutex<HashMap<ConnectionId, Arc<ClientSlot<H>>>>,
    opens: TaskTracker,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

fn draining() -> ServiceError {
    ServiceError::server_draining()
}

impl<H: ServerHost> Router<H> {
    pub(crate) fn new(
        host: Arc<H>,
        server_id: ServerId,
        tasks: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            host,
            server_id,
            closing: AtomicBool::new(false),
            handles: Mutex::new(HashMap::new()),
            clients: Mutex::new(HashMap::new()),
            opens: TaskTracker::new(),
            tasks,
            shutdown,
        }
    }

    fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Makes later attaches and session calls fail with `server_draining`.
    pub(crate) fn set_closing(&self) {
        self.closing.store(true, Ordering::Release);
    }

    /// Registers a connection and returns the presentation its server services get.
    pub(crate) fn register_client(
        self: &Arc<Self>,
        conn_id: ConnectionId,
        conn: Weak<ConnShared>,
        peer: Arc<Peer>,
    ) -> Presentation {
        let slot = Arc::new(ClientSlot {
            conn_id,
            conn,
            peer,
            disconnected: AtomicBool::new(false),
            current: tokio::sync::Mutex::new(None),
        });
        self.clients.lock().insert(conn_id, Arc::clone(&slot));
        Presentation::new(Arc::new(ClientPresentation {
            router: Arc::downgrade(self),
            slot: Arc::downgrade(&slot),
        }))
    }

    /// Session handles held now (opened, or opening).
    pub(crate) fn hosted_count(&self) -> usize {
        self.handles.lock().len()
    }

    /// The live connections whose peer identity satisfies `matches`.
    pub(crate) fn connections_where(
        &self,
        matches: impl Fn(&crate::identity::PeerIdentity) -> bool,
    ) -> Vec<Arc<ConnShared>> {
        self.clients
            .lock()
            .values()
            .filter(|slot| matches(slot.peer.identity()))
            .filter_map(|slot| slot.conn.upgrade())
            .collect()
    }

    /// Runs a session-target call for `conn_id`.
    pub(crate) async fn execute(
        &self,
        conn_id: ConnectionId,
        target: &SessionTarget,
        call: ServiceCall,
        publisher: Publisher,
        ctx: Context,
    ) -> CallResult {
        let slot = self.clients.lock().get(&conn_id).cloned();
        let Some(slot) = slot else {
            return Err(draining());
        };
        if self.is_closing() || slot.disconnected.load(Ordering::Acquire) {
            return Err(draining());
        }
        // Admission is serialised with attach and detach; the call itself is not.
        let (lease, op) = {
            let current = slot.current.lock().await;
            if self.is_closing() || slot.disconnected.load(Ordering::Acquire) {
                return Err(draining());
            }
            match current.as_ref() {
                Some(a)
                    if a.session_id == target.session_id
                        && a.attachment_id == target.attachment_id
                        && !a.hosted.invalidated.load(Ordering::Acquire) =>
                {
                    (Arc::clone(&a.lease), a.ops.token())
                }
                _ => {
                    tracing::debug!(session = %target.session_id, "session call without a current attachment");
                    return Err(ServiceError::session_not_attached());
                }
            }
        };
        let result = lease.invoke_service(call, publisher, ctx).await;
        drop(op);
        result
    }

    /// The connection is gone: release its attachment without publishing.
    pub(crate) async fn disconnect(&self, conn_id: ConnectionId) {
        let slot = self.clients.lock().remove(&conn_id);
        let Some(slot) = slot else {
            return;
        };
        slot.disconnected.store(true, Ordering::Release);
        let mut current = slot.current.lock().await;
        if let Some(attachment) = current.take() {
            let ctx = slot.context(CancellationToken::new());
            release(&slot, attachment, false, ctx).await;
        }
    }

    async fn attach(
        self: &Arc<Self>,
        slot: &Arc<ClientSlot<H>>,
        session_id: String,
        ctx: Context,
    ) -> Result<(), ServiceError> {
        if self.is_closing() {
            return Err(draining());
        }
        let Ok(requested) = Id::new(session_id.clone()) else {
            return Err(ServiceError::session_not_found());
        };
        let mut current = slot.current.lock().await;
        if slot.disconnected.load(Ordering::Acquire) {
            return Err(draining());
        }
        if let Some(a) = current.as_ref()
            && (a.session_id == requested || a.hosted.session_id == session_id)
            && !a.hosted.invalidated.load(Ordering::Acquire)
        {
            // Idempotent: the current attachmentId stays valid; no frame.
            return Ok(());
        }
        let mut attempts = 0;
        let (hosted, lease) = loop {
            attempts += 1;
            let hosted = self.acquire(&session_id, &ctx).await?;
            if self.is_closing() || slot.disconnected.load(Ordering::Acquire) {
                return Err(draining());
            }
            if let Some(previous) = current.take() {
                release(slot, previous, false, ctx.clone()).await;
            }
            hosted
                .clients
                .lock()
                .insert(slot.conn_id, Arc::downgrade(slot));
            match guarded("session lease", hosted.handle.lease(ctx.clone())).await {
                Ok(lease) => break (hosted, Arc::new(lease)),
                Err(ServiceError::SessionReleased) if attempts < MAX_ATTACH_ATTEMPTS => {
                    // The host closed the session between our open and this lease (its
                    // `terminated` may not have reached the watcher yet): open it afresh.
                    hosted.clients.lock().remove(&slot.conn_id);
                    self.forget(&hosted);
                    tracing::debug!(session = %hosted.session_id, attempts, "session released by its host while attaching; opening it again");
                }
                Err(e) => {
                    hosted.clients.lock().remove(&slot.conn_id);
                    return Err(e);
                }
            }
        };
        let attachment_id = Id::new(crate::random::uuid_v4())
            .map_err(|_| ServiceError::internal("empty attachment id"))?;
        if hosted.invalidated.load(Ordering::Acquire)
            || self.is_closing()
            || slot.disconnected.load(Ordering::Acquire)
        {
            hosted.clients.lock().remove(&slot.conn_id);
            if let Err(e) = guarded("release", lease.release(ctx)).await {
                report("releasing a lease acquired while the session ended", &e);
            }
            return Err(draining());
        }
        let canonical = Id::new(hosted.session_id.clone()).unwrap_or(requested);
        slot.publish(Some(SessionTarget {
            server_id: self.server_id.clone(),
            session_id: canonical.clone(),
            attachment_id: attachment_id.clone(),
        }));
        tracing::debug!(session = %hosted.session_id, attachment = %attachment_id, "attached");
        *current = Some(Binding {
            hosted,
            session_id: canonical,
            attachment_id,
            lease,
            ops: TaskTracker::new(),
        });
        Ok(())
    }

    async fn detach(&self, slot: &Arc<ClientSlot<H>>, ctx: Context) -> Result<(), ServiceError> {
        let mut current = slot.current.lock().await;
        if let Some(attachment) = current.take() {
            release(slot, attachment, true, ctx).await;
        }
        Ok(())
    }

    /// Resolves and opens (or joins the open of) a session.
    async fn acquire(
        self: &Arc<Self>,
        session_id: &str,
        ctx: &Context,
    ) -> Result<Arc<Hosted<H>>, ServiceError> {
        let metadata = guarded(
            "resolve_session",
            self.host.resolve_session(session_id, ctx.clone()),
        )
        .await?;
        let key = metadata.session_id().to_owned();
        let cell = Arc::clone(self.handles.lock().entry(key.clone()).or_default());
        let open_ctx = Context::new(self.shutdown.child_token(), ctx.peer_arc());
        let result = cell
            .get_or_init(|| {
                let this = Arc::clone(self);
                let span = tracing::info_span!("session", id = %key);
                self.opens.track_future(
                    async move {
                        match guarded("open_session", this.host.open_session(metadata, open_ctx))
                            .await
                        {
                            Ok(handle) => Ok(this.host_session(key.clone(), handle)),
                            Err(e) => {
                                report("opening session", &e);
                                Err(e.to_wire())
                            }
                        }
                    }
                    .instrument(span),
                )
            })
            .await
            .clone();
        if result.is_err() {
            // Failure is shared by everyone who waited; the next attach tries again.
            self.handles.lock().retain(|_, c| !Arc::ptr_eq(c, &cell));
        }
        result.map_err(ServiceError::Remote)
    }

    fn host_session(self: &Arc<Self>, session_id: String, handle: H::Session) -> Arc<Hosted<H>> {
        let hosted = Arc::new(Hosted {
            session_id,
            handle: Arc::new(handle),
            invalidated: AtomicBool::new(false),
            clients: Mutex::new(HashMap::new()),
            stop: self.shutdown.child_token(),
        });
        tracing::debug!(session = %hosted.session_id, "session opened");
        let router = Arc::downgrade(self);
        let watched = Arc::clone(&hosted);
        spawn(&self.tasks, async move {
            // A panicking `terminated` counts as the session failing, not as a lost watcher.
            let terminated = async {
                guarded("terminated", async {
                    Ok(SessionHandle::terminated(&*watched.handle).await)
                })
                .await
                .unwrap_or_else(|_| Termination::Failed("host session watcher panicked".into()))
            };
            let termination: Termination = tokio::select! {
                t = terminated => t,
                () = watched.stop.cancelled() => return,
            };
            if let Some(router) = router.upgrade() {
                router.invalidate(&watched, termination).await;
            }
        });
        hosted
    }

    /// Forgets a hosted session that ended by itself and releases its attachments.
    async fn invalidate(self: &Arc<Self>, hosted: &Arc<Hosted<H>>, termination: Termination) {
        match &termination {
            Termination::Closed => {
                tracing::info!(session = %hosted.session_id, "session terminated")
            }
            Termination::Released => {
                tracing::debug!(session = %hosted.session_id, "session released by its host")
            }
            Termination::Failed(error) => {
                tracing::warn!(session = %hosted.session_id, %error, "session terminated unexpectedly");
            }
        }
        self.forget(hosted);
        self.release_all(hosted).await;
    }

    fn forget(&self, hosted: &Arc<Hosted<H>>) {
        let mut handles = self.handles.lock();
        hosted.invalidated.store(true, Ordering::Release);
        hosted.stop.cancel();
        handles.retain(|_, cell| !matches!(cell.get(), Some(Ok(h)) if Arc::ptr_eq(h, hosted)));
    }

    /// Releases every attachment of `hosted`, publishing `attachment: null` to each client.
    async fn release_all(&self, hosted: &Arc<Hosted<H>>) {
        let clients: Vec<_> = hosted
            .clients
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        let releases = TaskTracker::new();
        for slot in clients {
            let hosted = Arc::clone(hosted);
            spawn(&releases, async move {
                let mut current = slot.current.lock().await;
                if current
                    .as_ref()
                    .is_some_and(|a| Arc::ptr_eq(&a.hosted, &hosted))
                    && let Some(attachment) = current.take()
                {
                    let ctx = slot.context(CancellationToken::new());
                    release(&slot, attachment, true, ctx).await;
                }
            });
        }
        releases.close();
        releases.wait().await;
    }

    async fn prepare_removal(
        self: &Arc<Self>,
        session_id: String,
        ctx: Context,
    ) -> Result<(), ServiceError> {
        if self.is_closing() {
            return Err(draining());
        }
        let mut cell = self.handles.lock().get(&session_id).cloned();
        if cell.is_none()
            && let Ok(metadata) = guarded(
                "resolve_session",
                self.host.resolve_session(&session_id, ctx.clone()),
            )
            .await
        {
            cell = self.handles.lock().get(metadata.session_id()).cloned();
        }
        let Some(cell) = cell else {
            return Ok(());
        };
        // Joins an open in progress; never starts one.
        let opened = cell
            .get_or_init(|| async { Err(draining().to_wire()) })
            .await
            .clone();
        let Ok(hosted) = opened else {
            // A failed (or abandoned) open: forget it so a later attach opens afresh.
            self.handles.lock().retain(|_, c| !Arc::ptr_eq(c, &cell));
            return Ok(());
        };
        self.forget(&hosted);
        self.release_all(&hosted).await;
        guarded("close", hosted.handle.close(ctx))
            .await
            .inspect_err(|e| report("closing removed session", e))
    }

    /// Server shutdown: waits for opens, then closes every hosted session.
    pub(crate) async fn close(&self) -> Result<(), CloseError> {
        self.set_closing();
        self.opens.close();
        self.opens.wait().await;
        let remaining: Vec<_> = self.clients.lock().keys().copied().collect();
        for conn_id in remaining {
            self.disconnect(conn_id).await;
        }
        let cells: Vec<_> = self.handles.lock().drain().map(|(_, c)| c).collect();
        let mut failures = Vec::new();
        for cell in cells {
            if let Some(Ok(hosted)) = cell.get() {
                hosted.invalidated.store(true, Ordering::Release);
                hosted.stop.cancel();
                let ctx = Context::new(CancellationToken::new(), None);
                if let Err(e) = guarded("close", hosted.handle.close(ctx)).await {
                    report("closing session at shutdown", &e);
                    failures.push(format!("session {}: {}", hosted.session_id, describe(&e)));
                }
            }
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(CloseError { failures })
        }
    }
}

/// Releases one attachment: waits for its admitted calls, releases the lease, forgets it,
/// and optionally tells the client.
async fn release<H: ServerHost>(
    slot: &ClientSlot<H>,
    attachment: Binding<H>,
    publish: bool,
    ctx: Context,
) {
    attachment.ops.close();
    attachment.ops.wait().await;
    if let Err(e) = guarded("release", attachment.lease.release(ctx)).await {
        report("releasing session attachment", &e);
    }
    attachment.hosted.clients.lock().remove(&slot.conn_id);
    tracing::debug!(session = %attachment.hosted.session_id, attachment = %attachment.attachment_id, publish, "attachment released");
    if publish {
        slot.publish(None);
    }
}

fn describe(e: &ServiceError) -> String {
    match e {
        ServiceError::Remote(w) => w.to_string(),
        ServiceError::Internal(source) => source.to_string(),
        ServiceError::SessionReleased => e.to_string(),
    }
}

fn report(what: &str, e: &ServiceError) {
    tracing::warn!(error = %describe(e), "{what} failed");
}

struct ClientPresentation<H: ServerHost> {
    router: Weak<Router<H>>,
    slot: Weak<ClientSlot<H>>,
}

impl<H: ServerHost> ClientPresentation<H> {
    fn parts(&self) -> Result<Parts<H>, ServiceError> {
        match (self.router.upgrade(), self.slot.upgrade()) {
            (Some(r), Some(s)) => Ok((r, s)),
            _ => Err(draining()),
        }
    }
}

impl<H: ServerHost> PresentationOps for ClientPresentation<H> {
    fn attach(&self, session_id: String, ctx: Context) -> BoxFuture<Result<(), ServiceError>> {
        let parts = self.parts();
        Box::pin(async move {
            let (router, slot) = parts?;
            router.attach(&slot, session_id, ctx).await
        })
    }

    fn detach(&self, ctx: Context) -> BoxFuture<Result<(), ServiceError>> {
        let parts = self.parts();
        Box::pin(async move {
            let (router, slot) = parts?;
            router.detach(&slot, ctx).await
        })
    }

    fn prepare_removal(
        &self,
        session_id: String,
        ctx: Context,
    ) -> BoxFuture<Result<(), ServiceError>> {
        let parts = self.parts();
        Box::pin(async move {
            let (router, _slot) = parts?;
            router.prepare_removal(session_id, ctx).await
        })
    }
}
