//! Bounded residency: which hosted sessions have their runtime open, closing the idle ones,
//! and the open-session cap.
//!
//! The server keeps one [`HostedSession`](super::HostedSession) per session it hosts until
//! removal, shutdown or idle close; that handle is a small shell around a [`Resident`]. What
//! it hosts —
//! the runtime [`SessionRuntime`](crate::session::SessionRuntime), its [`LiveSession`] (published value,
//! subscribers) and its pump — is open only while needed:
//!
//! * **Idle close.** A session open with no attached client, an idle phase (no turn) and
//!   hence no running command is *idle* (the directory keeps the instant it became so). The
//!   reaper closes it once it has been idle for [`ServiceLimits::idle_timeout`]: pump
//!   stopped, runtime session closed, `LiveSession` dropped, the directory shows `closed`.
//! * **Nothing kept.** The closed session's server handle is released too (its
//!   `terminated` resolves with `Released`), so the server holds nothing for it: a host
//!   that opened a million sessions over its life holds only the open ones.
//! * **Lazy reopen.** The next attach opens it again from its file, transcript and all. An
//!   attach racing the close gets its lease refused with `SessionReleased`, and the server
//!   opens the session afresh for it (the client sees no error).
//! * **No half-closed session.** Opening, closing and creating a lease of one session are
//!   serialised by its resident's *gate*: a client attaching while the session closes waits
//!   for the close, then gets the reopened session; one attaching before it takes its lease
//!   first, and a session with a lease is not idle. The close re-checks idleness under the
//!   gate against the runtime itself (the directory's phase may lag the pump by a moment).
//!   User commands run inside a `pi.session.bash` call, and the server releases a lease only
//!   after the calls admitted through it ended, so "no lease" implies "no command".
//! * **Open cap.** At most [`ServiceLimits::max_open_sessions`] are open (or opening). An
//!   open beyond it first closes the least recently used idle session (the one idle the
//!   longest); if none is idle it fails with `busy`, naming the limit.
//!
//! The gate is an async mutex because opening and closing await (reading the file, stopping
//! the pump); it is the only lock held across an await, every std lock here is released
//! before one. A gate of another session is only ever `try_lock`ed (eviction), so two gates
//! never wait on each other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use baton_server::ServiceError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::directory::Directory;
use super::errors::{service_error, too_many_open};
use super::live::{self, LiveSession};
use super::session_scope::SessionLease;
use crate::session::Phase;
use crate::spawn::spawn_tracked;

/// How many times an open at the cap tries to make room (each try closes one idle session;
/// another open may take the room first).
const EVICTION_ATTEMPTS: usize = 4;

/// The host's side of one session the server hosts.
#[derive(Debug)]
pub(crate) struct Resident {
    pub(crate) id: String,
    /// Serialises opening, closing and lease creation of this session.
    gate: tokio::sync::Mutex<()>,
    /// The server let go of this handle (closed it, or a newer one replaced it), or the host
    /// released it (`released`).
    retired: AtomicBool,
    /// The host let go of the handle after closing its idle runtime: the server forgets it
    /// (its `terminated` says `Released`) and opens the session afresh on the next attach.
    pub(crate) released: AtomicBool,
    /// Fired when the host ends the handle by itself (the session was removed under it).
    pub(crate) terminated: CancellationToken,
}

/// The sessions whose runtime is open, plus places reserved by opens in progress.
#[derive(Debug, Default)]
pub(crate) struct OpenSet {
    pub(crate) live: HashMap<String, Arc<LiveSession>>,
    reserved: usize,
}

/// A place under the open cap, held while a session opens.
#[derive(Debug)]
struct Reservation<'a> {
    shared: &'a Shared,
    held: bool,
}

impl Reservation<'_> {
    /// The session opened: it takes the place.
    fn commit(mut self, live: &Arc<LiveSession>) {
        let mut open = self.shared.open_set();
        open.reserved = open.reserved.saturating_sub(1);
        open.live.insert(live.id.clone(), Arc::clone(live));
        self.held = false;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.held {
            let mut open = self.shared.open_set();
            open.reserved = open.reserved.saturating_sub(1);
        }
    }
}

impl Shared {
    pub(crate) fn open_set(&self) -> MutexGuard<'_, OpenSet> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn residents(&self) -> MutexGuard<'_, HashMap<String, Arc<Resident>>> {
        self.residents
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the runtime of `id` is open.
    pub(crate) fn is_open(&self, id: &str) -> bool {
        self.open_set().live.contains_key(id)
    }

    /// A new resident for `id` (the server opens a handle), replacing any the server forgot.
    pub(crate) fn install_resident(&self, id: &str) -> Arc<Resident> {
        let resident = Arc::new(Resident {
            id: id.to_owned(),
            gate: tokio::sync::Mutex::new(()),
            retired: AtomicBool::new(false),
            released: AtomicBool::new(false),
            terminated: CancellationToken::new(),
        });
        let previous = self
            .residents()
            .insert(id.to_owned(), Arc::clone(&resident));
        if let Some(previous) = previous {
            previous.retired.store(true, Ordering::Release);
        }
        resident
    }

    /// Opens `resident`'s session if it is closed (the gate held by the caller).
    async fn ensure_open(&self, resident: &Resident) -> Result<Arc<LiveSession>, ServiceError> {
        if let Some(live) = self.open_set().live.get(&resident.id) {
            return Ok(Arc::clone(live));
        }
        if self.closing.is_cancelled() {
            return Err(ServiceError::server_draining());
        }
        let reservation = self.reserve(&resident.id).await?;
        let session = self.manager.open(&resident.id).map_err(service_error)?;
        let (live, rx) = LiveSession::new(
            session,
            Arc::clone(&self.directory),
            CancellationToken::new(),
        )
        .map_err(ServiceError::internal)?;
        let span = tracing::info_span!("pump", session_id = %live.id);
        live.set_pump(spawn_tracked(
            &self.tracker,
            tracing::Instrument::instrument(live::pump(Arc::clone(&live), rx), span),
        ));
        reservation.commit(&live);
        self.directory.set_open(&live.id, true);
        self.directory.upsert(live.session.meta());
        Ok(live)
    }

    /// A place under the open cap for `id`, closing least recently used idle sessions to
    /// make one.
    async fn reserve(&self, id: &str) -> Result<Reservation<'_>, ServiceError> {
        let cap = self.limits.open_cap();
        for _ in 0..EVICTION_ATTEMPTS {
            {
                let mut open = self.open_set();
                if open.live.len() + open.reserved < cap {
                    open.reserved += 1;
                    return Ok(Reservation {
                        shared: self,
                        held: true,
                    });
                }
            }
            let mut evicted = false;
            for victim in self.directory.idle_order() {
                if victim != id && self.close_if_idle(&victim, Wait::No).await {
                    tracing::info!(session_id = %victim, opening = %id, "closed the least recently used idle session to stay within the open-session limit");
                    evicted = true;
                    break;
                }
            }
            if !evicted {
                break;
            }
        }
        tracing::debug!(session_id = %id, limit = cap, "open-session limit reached");
        Err(too_many_open(cap))
    }

    /// A lease on `resident`'s session, reopening it if it was closed.
    pub(crate) async fn lease(
        self: &Arc<Self>,
        resident: &Arc<Resident>,
    ) -> Result<SessionLease, ServiceError> {
        let _gate = resident.gate.lock().await;
        if resident.retired.load(Ordering::Acquire) {
            return Err(if self.closing.is_cancelled() {
                ServiceError::server_draining()
            } else if resident.released.load(Ordering::Acquire) {
                ServiceError::SessionReleased
            } else {
                ServiceError::session_not_found()
            });
        }
        let live = self.ensure_open(resident).await?;
        // Counted as attached (not idle) before the gate opens again.
        Ok(SessionLease::new(Arc::clone(self), live))
    }

    /// Opens `resident`'s session (the server's first open of a handle).
    pub(crate) async fn open_resident(&self, resident: &Resident) -> Result<(), ServiceError> {
        let _gate = resident.gate.lock().await;
        self.ensure_open(resident).await.map(drop)
    }

    /// Closes `id` if it is open and idle. `Wait::No` gives up at once when its gate is held
    /// (someone is attaching, opening or closing it). Returns whether it closed it.
    pub(crate) async fn close_if_idle(&self, id: &str, wait: Wait) -> bool {
        if self.closing.is_cancelled() {
            return false;
        }
        let resident = self.residents().get(id).cloned();
        let Some(resident) = resident else {
            return false;
        };
        let _gate = match wait {
            Wait::Yes => resident.gate.lock().await,
            Wait::No => match resident.gate.try_lock() {
                Ok(gate) => gate,
                Err(_) => return false,
            },
        };
        let live = self.open_set().live.get(id).cloned();
        let Some(live) = live else {
            return false;
        };
        // The runtime's own phase: the directory's may not show a just-started turn yet.
        if !self.directory.is_idle(id) || live.session.meta().phase != Phase::Idle {
            return false;
        }
        self.close_live(&live).await;
        self.release_handle(&resident);
        true
    }

    /// Lets go of the server's handle of a session whose runtime was closed (its gate held by
    /// the caller), so the server keeps nothing for it either: the handle's `terminated`
    /// fires with `Released`, a lease racing it gets `SessionReleased` and the server opens
    /// the session again.
    fn release_handle(&self, resident: &Arc<Resident>) {
        resident.released.store(true, Ordering::Release);
        resident.retired.store(true, Ordering::Release);
        let mut residents = self.residents();
        if residents
            .get(&resident.id)
            .is_some_and(|r| Arc::ptr_eq(r, resident))
        {
            residents.remove(&resident.id);
        }
        drop(residents);
        resident.terminated.cancel();
    }

    /// Closes an open session's runtime and forgets it (its gate held by the caller, or the
    /// server no longer routing to it).
    async fn close_live(&self, live: &Arc<LiveSession>) {
        live.stop_pump().await;
        // Through the manager, so it forgets the session too and its memory is released.
        self.manager.close(&live.session).await;
        let mut open = self.open_set();
        if open
            .live
            .get(&live.id)
            .is_some_and(|l| Arc::ptr_eq(l, live))
        {
            open.live.remove(&live.id);
            drop(open);
            self.directory.set_open(&live.id, false);
        }
        tracing::debug!(session_id = %live.id, "session runtime closed");
    }

    /// The server closed the handle of `resident` (removal or shutdown).
    pub(crate) async fn retire(&self, resident: &Arc<Resident>) {
        let _gate = resident.gate.lock().await;
        resident.retired.store(true, Ordering::Release);
        let current = {
            let mut residents = self.residents();
            let current = residents
                .get(&resident.id)
                .is_some_and(|r| Arc::ptr_eq(r, resident));
            if current {
                residents.remove(&resident.id);
            }
            current
        };
        // A newer handle of the same session owns its runtime now.
        if current {
            let live = self.open_set().live.get(&resident.id).cloned();
            if let Some(live) = live {
                self.close_live(&live).await;
            }
        }
    }

    /// Ends a handle that is still hosted after a removal (a concurrent attach reopened it):
    /// its `terminated` fires, so the server releases its attachments.
    pub(crate) async fn terminate(&self, id: &str) {
        let resident = self.residents().remove(id);
        if let Some(resident) = &resident {
            resident.retired.store(true, Ordering::Release);
            resident.terminated.cancel();
        }
        let live = self.open_set().live.remove(id);
        if let Some(live) = live {
            live.terminated.cancel();
            live.stop_pump().await;
            self.directory.set_open(id, false);
        }
    }

    /// Starts the idle reaper once (from inside the runtime); nothing when sessions never
    /// time out.
    pub(crate) fn start_reaper(self: &Arc<Self>) {
        let Some(timeout) = self.limits.idle_timeout else {
            return;
        };
        if self.reaper_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let span = tracing::info_span!("idle reaper");
        spawn_tracked(
            &self.tracker,
            tracing::Instrument::instrument(
                reap(
                    Arc::downgrade(self),
                    Arc::clone(&self.directory),
                    self.closing.clone(),
                    timeout,
                ),
                span,
            ),
        );
    }
}

/// Whether [`Shared::close_if_idle`] waits for a held gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Wait (the reaper: a held gate means the session is busy for a moment only).
    Yes,
    /// Give up (eviction: another idle session will do).
    No,
}

/// Closes sessions idle for `timeout`, sleeping until the next one is due or one becomes
/// idle, until the host shuts down.
async fn reap(
    shared: Weak<Shared>,
    directory: Arc<Directory>,
    closing: CancellationToken,
    timeout: Duration,
) {
    loop {
        let (due, next) = directory.idle_due(Instant::now(), timeout);
        for id in due {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            if shared.close_if_idle(&id, Wait::Yes).await {
                tracing::info!(session_id = %id, idle_timeout = ?timeout, "closed an idle session");
            } else {
                // Not idle after all (or already closed): its clock starts again, so it is
                // not due again at once.
                directory.touch(&id);
            }
        }
        let sleep = async {
            match next {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = closing.cancelled() => return,
            () = directory.idle_changed() => {}
            () = sleep => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use baton_server::{Context, ServerHost, ServiceScope, SessionHandle};

    use super::*;
    use crate::clock::ManualClock;
    use crate::journal::FsyncPolicy;
    use crate::provider::ModelRegistry;
    use crate::provider::scripted::ScriptedConfig;
    use crate::service::{ServiceHost, ServiceLimits, SessionKey};
    use crate::session::{CreateOptions, HostConfig, SUMMARY_REQUEST_OPENING, SessionManager};

    /// A host over one created session, with no idle reaper (the tests close by hand).
    fn host(dir: &std::path::Path) -> (ServiceHost, String) {
        let mut config = HostConfig::new(dir.join("sessions"));
        config.default_cwd = dir.to_path_buf();
        config.fsync = FsyncPolicy::Never;
        let manager = SessionManager::new(
            config,
            ModelRegistry::scripted(ScriptedConfig::new(Duration::ZERO, SUMMARY_REQUEST_OPENING)),
            Arc::new(ManualClock::new(1_748_568_000_000, 1)),
        )
        .unwrap();
        let id = manager.create(CreateOptions::default()).unwrap();
        let limits = ServiceLimits {
            idle_timeout: None,
            ..ServiceLimits::default()
        };
        (
            ServiceHost::with_limits(Arc::new(manager), limits).unwrap(),
            id,
        )
    }

    #[tokio::test]
    async fn an_attach_during_a_close_waits_for_it_and_gets_the_reopened_session() {
        let dir = tempfile::tempdir().unwrap();
        let (host, id) = host(dir.path());
        let hosted = host
            .open_session(SessionKey(id.clone()), Context::background())
            .await
            .unwrap();
        let shared = Arc::clone(&host.shared);
        let old = shared.live_session(&id).unwrap();

        // The reaper's side of a close, step by step: it holds the gate while it closes.
        let gate = hosted.resident.gate.lock().await;
        let attach = hosted.lease(Context::background());
        tokio::pin!(attach);
        tokio::select! {
            biased;
            _ = &mut attach => panic!("an attach got past a close in progress"),
            () = tokio::task::yield_now() => {}
        }
        shared.close_live(&old).await;
        assert!(!host.is_open(&id));
        drop(gate);

        let lease = attach.await.unwrap();
        let new = shared.live_session(&id).unwrap();
        assert!(!Arc::ptr_eq(&old, &new), "reopened, not the closed one");
        assert!(
            !shared.directory.is_idle(&id),
            "attached before anyone can close it"
        );
        lease.release(Context::background()).await.unwrap();
        host.shutdown().await;
    }

    #[tokio::test]
    async fn a_leased_session_is_not_closed_and_closes_once_released() {
        let dir = tempfile::tempdir().unwrap();
        let (host, id) = host(dir.path());
        let hosted = host
            .open_session(SessionKey(id.clone()), Context::background())
            .await
            .unwrap();
        let shared = Arc::clone(&host.shared);
        let lease = hosted.lease(Context::background()).await.unwrap();
        assert!(!shared.close_if_idle(&id, Wait::Yes).await);
        assert!(host.is_open(&id));
        lease.release(Context::background()).await.unwrap();
        assert!(shared.close_if_idle(&id, Wait::Yes).await);
        assert!(!host.is_open(&id));
        assert_eq!(host.open_sessions(), 0);
        host.shutdown().await;
    }
}
