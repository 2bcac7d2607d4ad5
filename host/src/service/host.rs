//! The host the server calls: [`ServiceHost`] (a [`ServerHost`]), the [`HostedSession`] it
//! opens for each session the server hosts, and the [`SessionKey`] a session id resolves to.

use std::path::Path;
use std::sync::Arc;

use baton_protocol::Value;
use baton_server::{
    Context, PeerIdentity, Presentation, Server, ServerHost, ServiceError, SessionHandle,
    SessionMetadata, Termination,
};

use super::access;
use super::limits::ServiceLimits;
use super::policy::{AccessPolicy, PolicyError};
use super::residency::Resident;
use super::server_scope::ServerServices;
use super::session_scope::SessionLease;
use super::shared::Shared;
use crate::journal::StoreError;
use crate::link::LinkStore;
use crate::session::SessionManager;

/// Serves a [`SessionManager`] through a `baton-server` [`Server`].
/// Cheap to clone; clones share everything.
#[derive(Debug, Clone)]
pub struct ServiceHost {
    pub(super) shared: Arc<Shared>,
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
        Ok(Self {
            shared: Arc::new(Shared::new(manager, limits)?),
        })
    }

    /// Joins the fleet's session directory `store`: reconciles this host's records with the
    /// sessions on disk, then keeps them with every create and removal, and serves
    /// `baton.cluster`. Call once, before serving (a second call reconciles, nothing more).
    ///
    /// # Errors
    /// etcd did not answer the reconcile; the host is then not in the directory.
    #[cfg(feature = "cluster")]
    pub async fn join_fleet(
        &self,
        store: Arc<dyn super::fleet::SessionDirectoryStore>,
    ) -> Result<super::fleet::Reconciled, super::fleet::FleetError> {
        let local = self
            .shared
            .directory
            .sessions()
            .into_iter()
            .map(|(meta, owner)| super::fleet::LocalSession {
                session_id: meta.id,
                owner,
                name: meta.name,
                created: meta.created_at,
            })
            .collect();
        let reconciled = store.reconcile(local).await?;
        let _ = self.shared.fleet.set(store);
        Ok(reconciled)
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
        let store = Arc::clone(current.links());
        move |identity| {
            let links = |id: &str| store.grant(id);
            access::rights(uid, old.as_ref().as_ref(), Some(identity), &links)
                != access::rights(uid, new.as_ref().as_ref(), Some(identity), &links)
        }
    }

    /// The browser identities and one-time links (`baton link`): what the web listener's
    /// gate pairs and authenticates with.
    pub fn links(&self) -> &Arc<LinkStore> {
        self.shared.access.links()
    }

    /// The web listener's public base URLs, first preferred, that `baton link` makes its
    /// URLs from (`http://127.0.0.1:7880`, `https://NAME:PORT`). Until some are set, minting
    /// a link answers that this host serves no web listener.
    pub fn set_web_base_urls(&self, urls: Vec<String>) {
        self.links().set_web_base_urls(urls);
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

    /// Stops taking new work: new connections (their hello) and `create` are answered `busy`
    /// until [`ServiceHost::resume_new_work`]; open sessions and connections go on. The
    /// fleet's lease calls it when it cannot be renewed (docs/cluster.md).
    pub fn pause_new_work(&self) {
        self.shared
            .paused
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Takes new work again after [`ServiceHost::pause_new_work`].
    pub fn resume_new_work(&self) {
        self.shared
            .paused
            .store(false, std::sync::atomic::Ordering::Release);
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
pub struct SessionKey(pub(super) String);

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
    pub(super) resident: Arc<Resident>,
}

impl ServerHost for ServiceHost {
    type Services = ServerServices;
    type Metadata = SessionKey;
    type Session = HostedSession;

    fn admit(&self, identity: &PeerIdentity) -> Result<(), ServiceError> {
        self.shared.check_taking_work()?;
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::ServiceHost;
    use crate::service::ServiceLimits;
    use crate::service::test_support::manager;
    use crate::session::CreateOptions;

    #[test]
    fn sessions_on_disk_count_for_the_owner_their_header_names() {
        let dir = tempfile::tempdir().unwrap();
        let manager = manager(dir.path());
        for owner in [Some("unix:uid=7"), Some("unix:uid=7"), None] {
            manager
                .create(CreateOptions {
                    owner: owner.map(str::to_owned),
                    ..CreateOptions::default()
                })
                .unwrap();
        }
        // A host started over them: the two of uid 7 fill its allowance of 2.
        let limits = ServiceLimits {
            max_sessions_per_owner: 2,
            ..ServiceLimits::default()
        };
        let host = ServiceHost::with_limits(Arc::new(manager), limits).unwrap();
        let directory = &host.shared.directory;
        assert!(directory.claim("unix:uid=7".into(), 2).is_err());
        assert!(directory.claim("unix:uid=8".into(), 2).is_ok());
    }
}
