//! What every part of the service layer shares: the manager, the directory, the residency,
//! the access policy, the limits and the tracked tasks. One [`Shared`] per host; every
//! connection's services and every hosted session hold it.
//!
//! Its behaviour lives with the concern it serves: opening, closing and leasing sessions in
//! `super::idle`, removal in `super::removal`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use baton_protocol::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::access::Access;
use super::directory::Directory;
use super::limits::ServiceLimits;
use super::live::LiveSession;
use super::publish::Owner;
use super::residency::Residency;
#[cfg(test)]
use super::test_hooks::Hooks;
use super::wire;
use crate::clock::SystemClock;
use crate::journal::StoreError;
use crate::link::LinkStore;
use crate::session::SessionManager;

/// The state of one host.
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
    /// (`super::residency`); `super::idle` changes it.
    pub(crate) residency: Arc<Residency>,
    /// The idle reaper was started.
    pub(super) reaper_started: AtomicBool,
    /// The pumps and the idle reaper.
    pub(super) tracker: TaskTracker,
    /// Fired by [`ServiceHost::begin_shutdown`](super::ServiceHost::begin_shutdown).
    pub(crate) closing: CancellationToken,
    /// Set by [`ServiceHost::pause_new_work`](super::ServiceHost::pause_new_work): new
    /// connections and creates are refused `busy`, what is open goes on.
    pub(crate) paused: AtomicBool,
    next_owner: AtomicU64,
    /// The fleet's session directory, set once before serving (`super::fleet`).
    #[cfg(feature = "cluster")]
    pub(crate) fleet: std::sync::OnceLock<Arc<dyn super::fleet::SessionDirectoryStore>>,
    #[cfg(test)]
    pub(crate) hooks: Hooks,
}

/// What a paused host answers new connections and creates.
pub(crate) const PAUSED_MESSAGE: &str =
    "Host is not taking new work: it cannot renew its fleet lease; try again";

impl Shared {
    /// `busy` while paused ([`Shared::paused`]).
    pub(crate) fn check_taking_work(&self) -> Result<(), baton_server::ServiceError> {
        if self.paused.load(Ordering::Acquire) {
            return Err(baton_server::ServiceError::from_code(
                baton_protocol::ErrorCode::Busy,
                PAUSED_MESSAGE,
            ));
        }
        Ok(())
    }

    /// The state of a host over `manager` bounded by `limits`; the directory starts from the
    /// sessions on disk.
    ///
    /// # Errors
    /// The sessions directory cannot be read.
    pub(super) fn new(
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
        let links =
            LinkStore::open(manager.sessions_dir(), Arc::new(SystemClock)).map_err(|e| {
                StoreError::Io {
                    path: manager.sessions_dir().join(crate::link::TOKENS_FILE),
                    source: std::io::Error::other(e.to_string()),
                }
            })?;
        let residency = Arc::new(Residency::default());
        Ok(Self {
            manager,
            directory: Arc::new(Directory::with_owners(
                sessions,
                Arc::clone(&residency) as _,
            )),
            models,
            limits,
            access: Access::new(rustix::process::getuid().as_raw(), Arc::new(links)),
            residency,
            reaper_started: AtomicBool::new(false),
            tracker: TaskTracker::new(),
            closing: CancellationToken::new(),
            paused: AtomicBool::new(false),
            next_owner: AtomicU64::new(1),
            #[cfg(feature = "cluster")]
            fleet: std::sync::OnceLock::new(),
            #[cfg(test)]
            hooks: Hooks::default(),
        })
    }

    /// A new owner of subscriptions (one per connection or lease).
    pub(crate) fn owner(&self) -> Owner {
        self.next_owner.fetch_add(1, Ordering::Relaxed)
    }

    /// The open session `id`, if any.
    pub(crate) fn live_session(&self, id: &str) -> Option<Arc<LiveSession>> {
        self.residency.live(id)
    }
}
