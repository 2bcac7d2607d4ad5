//! The service adapter: a [`SessionManager`]'s sessions served through `baton-server` as the
//! chord services of `docs/services.md`.
//!
//! ```text
//!  Server ─ServerHost─▶ ServiceHost ─attach_client─▶ ServerServices (one per connection)
//!                           │                          pi.session-management, pi.session-directory,
//!                           │                          pi.models, $chord.service
//!                           └─open_session─▶ HostedSession ─attach_client─▶ SessionLease
//!                                  │ pump: SessionEvent ─▶ ops           pi.session, $chord.service
//!                                  └────────────▶ Publisher::publish_shared (one update per batch)
//! ```
//!
//! * Sessions open lazily: `create` writes the file; the first `attach` makes the server call
//!   [`ServerHost::open_session`], which opens the runtime session and starts its pump.
//! * Every `pi.session` method answers only after the updates describing its effect were
//!   published, so a client's replica already shows them when the response arrives.
//! * Runtime errors become wire errors in one place, [`service_error`].
//!
//! # Shutdown
//! [`ServiceHost::begin_shutdown`] refuses new prompts and aborts running turns, so that
//! [`baton_server::Server::close`] drains quickly; [`ServiceHost::shutdown`] then stops the
//! pumps and the runtime.

mod directory;
mod errors;
mod live;
mod publish;
mod server_scope;
mod session_scope;
mod wire;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use baton_protocol::Value;
use baton_server::{
    Context, Presentation, ServerHost, ServiceError, SessionHandle, SessionMetadata, Termination,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use errors::service_error;
pub use server_scope::ServerServices;
pub use session_scope::SessionLease;
pub use wire::session_state_value;

use directory::Directory;
use live::LiveSession;
use publish::Owner;

use crate::session::{SessionManager, StoreError};
use crate::spawn::spawn_tracked;

/// Serves a [`SessionManager`] through a `baton-server` [`Server`](baton_server::Server).
/// Cheap to clone; clones share everything.
#[derive(Debug, Clone)]
pub struct ServiceHost {
    shared: Arc<Shared>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) manager: Arc<SessionManager>,
    pub(crate) directory: Arc<Directory>,
    /// The `pi.models` list (fixed for the host's lifetime).
    pub(crate) models: Value,
    /// Handles currently open, by session id.
    live: Mutex<HashMap<String, Arc<LiveSession>>>,
    /// The pumps.
    tracker: TaskTracker,
    /// Fired by [`ServiceHost::begin_shutdown`].
    pub(crate) closing: CancellationToken,
    next_owner: AtomicU64,
}

impl Shared {
    pub(crate) fn owner(&self) -> Owner {
        self.next_owner.fetch_add(1, Ordering::Relaxed)
    }

    fn live(&self) -> MutexGuard<'_, HashMap<String, Arc<LiveSession>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The open handle of `id`, if any.
    pub(crate) fn live_session(&self, id: &str) -> Option<Arc<LiveSession>> {
        self.live().get(id).cloned()
    }

    /// Ends a handle that is still open after a removal (a concurrent attach reopened it):
    /// its `terminated` fires, so the server releases its attachments.
    pub(crate) async fn terminate(&self, id: &str) {
        let live = self.live().remove(id);
        if let Some(live) = live {
            live.terminated.cancel();
            live.stop_pump().await;
            self.directory.set_open(id, false);
        }
    }
}

impl ServiceHost {
    /// An adapter over `manager`; the directory starts from the sessions on disk.
    ///
    /// # Errors
    /// The sessions directory cannot be read.
    pub fn new(manager: SessionManager) -> Result<Self, StoreError> {
        Self::from_arc(Arc::new(manager))
    }

    /// As [`ServiceHost::new`], sharing `manager` with the caller.
    ///
    /// # Errors
    /// The sessions directory cannot be read.
    pub fn from_arc(manager: Arc<SessionManager>) -> Result<Self, StoreError> {
        let metas = manager.list()?;
        let default = manager.default_model();
        let models = Value::Array(
            manager
                .models()
                .list()
                .iter()
                .map(|m| wire::model_value(m, m.model_ref() == default))
                .collect(),
        );
        Ok(Self {
            shared: Arc::new(Shared {
                manager,
                directory: Arc::new(Directory::new(metas)),
                models,
                live: Mutex::new(HashMap::new()),
                tracker: TaskTracker::new(),
                closing: CancellationToken::new(),
                next_owner: AtomicU64::new(1),
            }),
        })
    }

    /// The runtime behind the services.
    pub fn manager(&self) -> &Arc<SessionManager> {
        &self.shared.manager
    }

    /// The current `pi.session-directory` list.
    pub fn directory(&self) -> Value {
        self.shared.directory.value()
    }

    /// Refuses new prompts and sessions (`server_draining`) and aborts every running turn.
    /// Call before [`Server::close`](baton_server::Server::close) so in-flight prompts settle
    /// at once instead of holding the drain.
    pub fn begin_shutdown(&self) {
        self.shared.closing.cancel();
        let live: Vec<_> = self.shared.live().values().cloned().collect();
        for l in live {
            l.session.abort();
        }
    }

    /// Stops every pump and shuts the runtime down (after the server closed).
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        let live: Vec<_> = self.shared.live().drain().map(|(_, l)| l).collect();
        for l in live {
            l.stop_pump().await;
        }
        self.shared.tracker.close();
        self.shared.tracker.wait().await;
        self.shared.manager.shutdown().await;
    }
}

/// What [`ServiceHost::resolve_session`](ServerHost::resolve_session) found: a canonical
/// session id.
#[derive(Debug, Clone)]
pub struct SessionKey(String);

impl SessionMetadata for SessionKey {
    fn session_id(&self) -> &str {
        &self.0
    }
}

/// One hosted session (shared by every connection attached to it).
#[derive(Debug)]
pub struct HostedSession {
    shared: Arc<Shared>,
    live: Arc<LiveSession>,
}

impl ServerHost for ServiceHost {
    type Services = ServerServices;
    type Metadata = SessionKey;
    type Session = HostedSession;

    async fn attach_client(
        &self,
        presentation: Presentation,
        ctx: Context,
    ) -> Result<ServerServices, ServiceError> {
        // The listener's authentication: Unix credentials, the verified client certificate
        // (subject and fingerprint) or the TCP address.
        tracing::debug!(peer = ?ctx.identity(), "client connected");
        Ok(ServerServices::new(Arc::clone(&self.shared), presentation))
    }

    async fn resolve_session(
        &self,
        session_id: &str,
        _ctx: Context,
    ) -> Result<SessionKey, ServiceError> {
        self.shared.directory.resolve(session_id).map(SessionKey)
    }

    async fn open_session(
        &self,
        metadata: SessionKey,
        _ctx: Context,
    ) -> Result<HostedSession, ServiceError> {
        let shared = &self.shared;
        if shared.closing.is_cancelled() {
            return Err(ServiceError::server_draining());
        }
        let session = shared.manager.open(&metadata.0).map_err(service_error)?;
        let (live, rx) = LiveSession::new(
            session,
            Arc::clone(&shared.directory),
            CancellationToken::new(),
        )
        .map_err(ServiceError::internal)?;
        let span = tracing::info_span!("pump", session_id = %live.id);
        live.set_pump(spawn_tracked(
            &shared.tracker,
            tracing::Instrument::instrument(live::pump(Arc::clone(&live), rx), span),
        ));
        let previous = shared.live().insert(live.id.clone(), Arc::clone(&live));
        if let Some(previous) = previous {
            // A handle the server forgot (it terminated); make sure its pump is gone.
            previous.stop_pump().await;
        }
        shared.directory.set_open(&live.id, true);
        shared.directory.upsert(live.session.meta());
        Ok(HostedSession {
            shared: Arc::clone(shared),
            live,
        })
    }
}

impl SessionHandle for HostedSession {
    type Attachment = SessionLease;

    async fn attach_client(&self, _ctx: Context) -> Result<SessionLease, ServiceError> {
        Ok(SessionLease::new(
            Arc::clone(&self.shared),
            Arc::clone(&self.live),
        ))
    }

    async fn terminated(&self) -> Termination {
        self.live.terminated.cancelled().await;
        Termination::Closed
    }

    async fn close(&self, _ctx: Context) -> Result<(), ServiceError> {
        let live = &self.live;
        live.stop_pump().await;
        live.session.close().await;
        let mut map = self.shared.live();
        if map.get(&live.id).is_some_and(|l| Arc::ptr_eq(l, live)) {
            map.remove(&live.id);
            drop(map);
            self.shared.directory.set_open(&live.id, false);
        }
        Ok(())
    }
}
