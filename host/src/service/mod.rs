//! The service adapter: a [`SessionManager`]'s sessions served through `baton-server` as the
//! chord services of `docs/services.md`.
//!
//! ```text
//!  Server ─ServerHost─▶ ServiceHost ─connect_services─▶ ServerServices (one per connection)
//!                           │                          pi.session-management, pi.session-directory,
//!                           │                          pi.models, $chord.service
//!                           └─open_session─▶ HostedSession ─lease─▶ SessionLease
//!                                  │ pump: SessionEvent ─▶ ops           pi.session, $chord.service
//!                                  └────────────▶ Publisher::publish_shared (one update per batch)
//! ```
//!
//! * Sessions open lazily: `create` writes the file; the first `attach` makes the server call
//!   [`ServerHost::open_session`], which opens the runtime session and starts its pump.
//! * Every `pi.session` method answers only after the updates describing its effect were
//!   published, so a client's replica already shows them when the response arrives.
//! * Runtime errors become wire errors in one place, [`service_error`].
//! * Every call is checked against the access policy (`access`, `policy`): the listener
//!   refuses identities with no rights ([`ServerHost::admit`]), the directory lists only
//!   what the caller may see, and mutating calls need operator rights or ownership.
//! * The host is bounded ([`ServiceLimits`]): a session with no client and nothing running
//!   closes after an idle timeout and reopens on the next attach, at most so many sessions
//!   are open at once, and one identity owns at most so many sessions (`idle`, `limits`,
//!   `owners`, `idle_clock`).
//! * Whether a session is open has one owner, the `residency`; the directory, the open cap
//!   and the server's handles ask it or are told by it, and keep no copy.
//!
//! # Shutdown
//! [`ServiceHost::begin_shutdown`] refuses new prompts and aborts running turns, so that
//! [`baton_server::Server::close`] drains quickly; [`ServiceHost::shutdown`] then stops the
//! pumps and the runtime.

mod access;
mod args;
mod directory;
mod errors;
mod idle;
mod idle_clock;
mod limits;
mod live;
mod owners;
mod policy;
mod publish;
mod removal;
mod residency;
mod server_scope;
mod session_scope;
#[cfg(test)]
mod test_hooks;
mod wire;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use baton_protocol::Value;
use baton_server::{
    Context, PeerIdentity, Presentation, Server, ServerHost, ServiceError, SessionHandle,
    SessionMetadata, Termination,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use errors::service_error;
pub use limits::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_OPEN_SESSIONS, DEFAULT_MAX_SESSIONS_PER_OWNER, ServiceLimits,
    owner_key,
};
pub use policy::{AccessPolicy, Grant, MAX_POLICY_BYTES, Matcher, PolicyError, Role, Ungranted};
pub use server_scope::ServerServices;
pub use session_scope::SessionLease;
pub use wire::session_state_value;

use access::Access;
use directory::Directory;
use live::LiveSession;
use publish::Owner;
use residency::{Residency, Resident};

use crate::session::SessionManager;

use crate::journal::StoreError;

/// Serves a [`SessionManager`] through a `baton-server` [`Server`].
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
    /// The limits.
    pub(crate) limits: ServiceLimits,
    /// Who may do what.
    pub(crate) access: Access,
    /// Which sessions are open, and the handles the server holds: the one owner of both
    /// (`residency`); `idle` changes it.
    pub(crate) residency: Arc<Residency>,
    /// The idle reaper was started.
    reaper_started: AtomicBool,
    /// The pumps and the idle reaper.
    tracker: TaskTracker,
    /// Fired by [`ServiceHost::begin_shutdown`].
    pub(crate) closing: CancellationToken,
    next_owner: AtomicU64,
    #[cfg(test)]
    pub(crate) hooks: test_hooks::Hooks,
}

impl Shared {
    pub(crate) fn owner(&self) -> Owner {
        self.next_owner.fetch_add(1, Ordering::Relaxed)
    }

    /// The open session `id`, if any.
    pub(crate) fn live_session(&self, id: &str) -> Option<Arc<LiveSession>> {
        self.residency.live(id)
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
        Self::with_limits(manager, ServiceLimits::default())
    }

    /// As [`ServiceHost::from_arc`], with `limits` instead of the defaults.
    ///
    /// # Errors
    /// The sessions directory cannot be read.
    pub fn with_limits(
        manager: Arc<SessionManager>,
        limits: ServiceLimits,
    ) -> Result<Self, StoreError> {
        let sessions = manager
            .list()?
            .into_iter()
            .map(|meta| {
                let owner = manager.owner(&meta.id).unwrap_or_else(|error| {
                    tracing::warn!(session_id = %meta.id, %error, "cannot read the session's owner; only admins will see it");
                    None
                });
                (meta, owner)
            })
            .collect();
        let default = manager.default_model();
        let registry = manager.models();
        let models = Value::Array(
            registry
                .list()
                .iter()
                .map(|m| {
                    let r = m.model_ref();
                    wire::model_value(m, registry.meta(&r), r == default)
                })
                .collect(),
        );
        let residency = Arc::new(Residency::default());
        Ok(Self {
            shared: Arc::new(Shared {
                manager,
                directory: Arc::new(Directory::with_owners(
                    sessions,
                    Arc::clone(&residency) as _,
                )),
                models,
                limits,
                access: Access::new(rustix::process::getuid().as_raw()),
                residency,
                reaper_started: AtomicBool::new(false),
                tracker: TaskTracker::new(),
                closing: CancellationToken::new(),
                next_owner: AtomicU64::new(1),
                #[cfg(test)]
                hooks: test_hooks::Hooks::default(),
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

    /// Puts `policy` in force for every later connection and call (`None`: the defaults of
    /// `docs/host.md`, access). Returns which identities it changed the rights of, for
    /// [`Server::close_connections`]: [`ServiceHost::reload_access`] does both.
    pub fn set_access_policy(
        &self,
        policy: Option<AccessPolicy>,
    ) -> impl Fn(&PeerIdentity) -> bool + Send + 'static {
        let current = &self.shared.access;
        let old = current.replace(policy);
        let new = current.current();
        let uid = current.host_uid();
        move |identity| {
            access::rights(uid, old.as_ref().as_ref(), Some(identity))
                != access::rights(uid, new.as_ref().as_ref(), Some(identity))
        }
    }

    /// Reads the policy file at `path`, puts it in force, and closes the live connections of
    /// every identity whose rights it changed (a revoked identity is disconnected; one whose
    /// rights changed otherwise reconnects under them). This is what `baton-host serve`
    /// runs on `SIGHUP`. Returns how many connections were closed.
    ///
    /// # Errors
    /// The file cannot be read or is not a valid policy: the policy in force stays.
    pub fn reload_access(
        &self,
        server: &Server<ServiceHost>,
        path: &Path,
    ) -> Result<usize, PolicyError> {
        let policy = AccessPolicy::load(path)?;
        let changed = self.set_access_policy(Some(policy));
        Ok(server.close_connections(changed))
    }

    /// The limits this host enforces.
    pub fn limits(&self) -> &ServiceLimits {
        &self.shared.limits
    }

    /// Whether session `id` is open (its runtime loaded); closed sessions open on attach.
    pub fn is_open(&self, id: &str) -> bool {
        self.shared.is_open(id)
    }

    /// How many sessions are open.
    pub fn open_sessions(&self) -> usize {
        self.shared.residency.open_count()
    }

    /// Refuses new prompts and sessions (`server_draining`) and aborts every running turn.
    /// Call before [`Server::close`](baton_server::Server::close) so in-flight prompts settle
    /// at once instead of holding the drain.
    pub fn begin_shutdown(&self) {
        self.shared.closing.cancel();
        for l in self.shared.residency.all_live() {
            l.session.abort();
        }
    }

    /// Stops every pump and shuts the runtime down (after the server closed).
    pub async fn shutdown(&self) {
        self.begin_shutdown();
        for l in self.shared.residency.forget_all() {
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

/// One hosted session (shared by every connection attached to it). Its runtime is open
/// only while needed: see the `idle` module.
#[derive(Debug)]
pub struct HostedSession {
    shared: Arc<Shared>,
    resident: Arc<Resident>,
}

impl ServerHost for ServiceHost {
    type Services = ServerServices;
    type Metadata = SessionKey;
    type Session = HostedSession;

    fn admit(&self, identity: &PeerIdentity) -> Result<(), ServiceError> {
        self.shared.access.admit(identity)
    }

    async fn connect_services(
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
        ctx: Context,
    ) -> Result<SessionKey, ServiceError> {
        let rights = self.shared.access.rights(ctx.identity());
        self.shared
            .directory
            .resolve(session_id, &rights)
            .map(SessionKey)
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
        shared.start_reaper();
        let Some(resident) = shared.residency.install(&metadata.0) else {
            // Being removed: it resolved just before the removal began.
            return Err(ServiceError::session_not_found());
        };
        shared.open_resident(&resident).await?;
        Ok(HostedSession {
            shared: Arc::clone(shared),
            resident,
        })
    }
}

impl SessionHandle for HostedSession {
    type Lease = SessionLease;

    async fn lease(&self, _ctx: Context) -> Result<SessionLease, ServiceError> {
        self.shared.lease(&self.resident).await
    }

    async fn terminated(&self) -> Termination {
        self.resident.terminated.cancelled().await;
        if self.resident.is_released() {
            Termination::Released
        } else {
            Termination::Closed
        }
    }

    async fn close(&self, _ctx: Context) -> Result<(), ServiceError> {
        self.shared.retire(&self.resident).await;
        Ok(())
    }
}
