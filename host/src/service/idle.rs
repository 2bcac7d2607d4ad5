//! Bounded residency: opening and closing the sessions the server hosts, closing the idle
//! ones, and the open-session cap. Which sessions are open is the residency's fact
//! (`super::residency`); this module is what changes it (a removal too, `super::removal`),
//! and tells the directory after each change.
//!
//! The server keeps one [`HostedSession`](super::HostedSession) per session it hosts until
//! removal, shutdown or idle close; that handle is a small shell around a [`Resident`]. What
//! it hosts — the runtime [`SessionRuntime`](crate::session::SessionRuntime), its
//! [`LiveSession`] (published value, subscribers) and its pump — is open only while needed:
//!
//! * **Idle close.** A session open with no attached client, an idle phase (no turn) and
//!   hence no running command is *idle* (its idle clock runs, `super::idle_clock`). The
//!   reaper closes it once it has been idle for [`ServiceLimits::idle_timeout`](super::ServiceLimits::idle_timeout): pump
//!   stopped, runtime session closed, `LiveSession` dropped, the directory shows `closed`.
//! * **Nothing kept.** The closed session's server handle is released too (its
//!   `terminated` resolves with `Released`), so the server holds nothing for it: a host
//!   that opened a million sessions over its life holds only the open ones.
//! * **Lazy reopen.** The next attach opens it again from its file, transcript and all. An
//!   attach racing the close gets its lease refused with `SessionReleased`, and the server
//!   opens the session afresh for it (the client sees no error).
//! * **No half-closed session.** Opening, closing and creating a lease of one session (and
//!   removing it, `super::removal`) are serialised by its resident's *gate*: a client
//!   attaching while the session closes waits for the close, then gets the reopened session;
//!   one attaching before it takes its lease first, and a session with a lease is not idle. The close re-checks idleness under the
//!   gate against the runtime itself (the directory's phase may lag the pump by a moment).
//!   User commands run inside a `pi.session.bash` call, and the server releases a lease only
//!   after the calls admitted through it ended, so "no lease" implies "no command".
//! * **Open cap.** At most [`ServiceLimits::max_open_sessions`](super::ServiceLimits::max_open_sessions) are open (or opening). An
//!   open beyond it first closes the least recently used idle session (the one idle the
//!   longest); if none is idle it fails with `busy`, naming the limit.
//!
//! A session is open from the moment its [`Reservation`] is
//! committed (runtime loaded, pump started) until it is forgotten (after its runtime was
//! closed), so it is never open in the residency without its runtime being loaded.
//!
//! The gate is an async mutex because opening and closing await (reading the file, stopping
//! the pump); it is the only lock held across an await, every other lock here is released
//! before one. A gate of another session is only ever `try_lock`ed (eviction), so two gates
//! never wait on each other.

use std::sync::Arc;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use baton_server::ServiceError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::directory::Directory;
use super::errors::{service_error, too_many_open};
use super::live::{self, LiveSession};
use super::residency::{Reservation, Resident};
use super::session_scope::SessionLease;
use super::shared::Shared;
use crate::session::Phase;
use crate::spawn::spawn_tracked;

/// How many times an open at the cap tries to make room (each try closes one idle session;
/// another open may take the room first).
const EVICTION_ATTEMPTS: usize = 4;

impl Shared {
    /// Whether session `id` is open (the residency's answer).
    pub(crate) fn is_open(&self, id: &str) -> bool {
        self.residency.is_open(id)
    }

    /// Opens `resident`'s session if it is closed (the gate held by the caller).
    async fn ensure_open(&self, resident: &Resident) -> Result<Arc<LiveSession>, ServiceError> {
        if let Some(live) = self.residency.live(&resident.id) {
            return Ok(live);
        }
        if self.closing.is_cancelled() {
            return Err(ServiceError::server_draining());
        }
        let reservation = self.reserve(&resident.id).await?;
        #[cfg(test)]
        self.hooks.before_load.pass().await;
        let session = self.manager.open(&resident.id).map_err(service_error)?;
        let (live, rx) = match LiveSession::new(session.clone(), CancellationToken::new()) {
            Ok(opened) => opened,
            Err(error) => {
                // Not open, so its runtime must not stay loaded either.
                self.manager.close(&session).await;
                return Err(ServiceError::internal(error));
            }
        };
        let span = tracing::info_span!("pump", session_id = %live.id);
        live.set_pump(spawn_tracked(
            &self.tracker,
            tracing::Instrument::instrument(
                live::pump(Arc::clone(&live), rx, Arc::clone(&self.directory)),
                span,
            ),
        ));
        reservation.commit(&live);
        self.directory.opened(live.session.meta());
        Ok(live)
    }

    /// A place under the open cap for `id`, closing least recently used idle sessions to
    /// make one.
    async fn reserve(&self, id: &str) -> Result<Reservation<'_>, ServiceError> {
        let cap = self.limits.open_cap();
        for _ in 0..EVICTION_ATTEMPTS {
            if let Some(reservation) = self.residency.reserve(cap) {
                return Ok(reservation);
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

    /// Why nothing is opened through `resident` any more, if it was let go of (its gate held
    /// by the caller): the host is shutting down, it was released (the server opens the
    /// session afresh), or the server closed it or the session is being removed.
    fn let_go(&self, resident: &Resident) -> Result<(), ServiceError> {
        if !resident.is_retired() {
            return Ok(());
        }
        Err(if self.closing.is_cancelled() {
            ServiceError::server_draining()
        } else if resident.is_released() {
            ServiceError::SessionReleased
        } else {
            ServiceError::session_not_found()
        })
    }

    /// A lease on `resident`'s session, reopening it if it was closed.
    pub(crate) async fn lease(
        self: &Arc<Self>,
        resident: &Arc<Resident>,
    ) -> Result<SessionLease, ServiceError> {
        let _gate = resident.gate.lock().await;
        self.let_go(resident)?;
        let live = self.ensure_open(resident).await?;
        // Counted as attached (not idle) before the gate opens again.
        Ok(SessionLease::new(Arc::clone(self), live))
    }

    /// Opens `resident`'s session (the server's first open of a handle). When it cannot be
    /// opened (a removal took the resident while this waited for its gate, say) the server
    /// gets no handle, so the resident is dismissed.
    pub(crate) async fn open_resident(&self, resident: &Arc<Resident>) -> Result<(), ServiceError> {
        let _gate = resident.gate.lock().await;
        let opened = match self.let_go(resident) {
            Ok(()) => self.ensure_open(resident).await,
            Err(refused) => Err(refused),
        };
        if opened.is_err() {
            resident.retire();
            self.residency.dismiss(resident);
        }
        opened.map(drop)
    }

    /// Closes `id` if it is open and idle. `Wait::No` gives up at once when its gate is held
    /// (someone is attaching, opening or closing it). Returns whether it closed it.
    pub(crate) async fn close_if_idle(&self, id: &str, wait: Wait) -> bool {
        if self.closing.is_cancelled() {
            return false;
        }
        let Some(resident) = self.residency.resident(id) else {
            return false;
        };
        let _gate = match wait {
            Wait::Yes => resident.gate.lock().await,
            Wait::No => match resident.gate.try_lock() {
                Ok(gate) => gate,
                Err(_) => return false,
            },
        };
        let Some(live) = self.residency.live(id) else {
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
        resident.release();
        self.residency.dismiss(resident);
        resident.terminated.cancel();
    }

    /// Closes an open session's runtime, then forgets it (its gate held by the caller, or the
    /// server not routing to it any more) and tells the directory.
    async fn close_live(&self, live: &Arc<LiveSession>) {
        live.stop_pump().await;
        // Through the manager, so it forgets the session too and its memory is released.
        self.manager.close(&live.session).await;
        if self.residency.forget(live) {
            self.directory.closed(&live.id);
        }
        tracing::debug!(session_id = %live.id, "session runtime closed");
    }

    /// The server closed the handle of `resident` (removal or shutdown).
    pub(crate) async fn retire(&self, resident: &Arc<Resident>) {
        let _gate = resident.gate.lock().await;
        resident.retire();
        // A newer handle of the same session owns its runtime otherwise.
        if self.residency.dismiss(resident)
            && let Some(live) = self.residency.live(&resident.id)
        {
            self.close_live(&live).await;
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
    use baton_server::{Context, ServerHost, ServiceScope, SessionHandle};

    use super::*;
    use crate::service::test_support::{create, limits, listed_phase, manager};
    use crate::service::{ServiceHost, ServiceLimits, SessionKey};

    /// A host over one created session, with no idle reaper (the tests close by hand).
    fn host(dir: &std::path::Path) -> (ServiceHost, String) {
        let (host, mut ids) = host_with(dir, 1, ServiceLimits::default().max_open_sessions);
        (host, ids.remove(0))
    }

    /// A host over `sessions` created sessions, at most `max_open` open at once, with no idle
    /// reaper.
    fn host_with(
        dir: &std::path::Path,
        sessions: usize,
        max_open: usize,
    ) -> (ServiceHost, Vec<String>) {
        let manager = manager(dir);
        let ids = create(&manager, sessions);
        let host = ServiceHost::with_limits(Arc::new(manager), limits(max_open)).unwrap();
        (host, ids)
    }

    /// Whether each of `ids` is open reads the same wherever it shows: the residency (which
    /// owns it), the directory's listed phase and idle clocks, the manager's loaded runtimes
    /// and the open count.
    fn assert_agree(host: &ServiceHost, ids: &[String], when: &str) {
        let shared = &host.shared;
        let list = shared.directory.value();
        let idle = shared.directory.idle_order();
        let mut open = 0;
        for id in ids {
            let is_open = shared.residency.is_open(id);
            open += usize::from(is_open);
            assert_eq!(
                listed_phase(&list, id) != "closed",
                is_open,
                "{when}: the directory's phase of {id}"
            );
            assert_eq!(
                host.manager().is_open(id),
                is_open,
                "{when}: the manager's runtime of {id}"
            );
            assert!(
                is_open || !idle.contains(id),
                "{when}: an idle clock runs for closed {id}"
            );
        }
        assert_eq!(host.open_sessions(), open, "{when}: the open count");
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
        assert_agree(&host, std::slice::from_ref(&id), "closed under the gate");
        drop(gate);

        let lease = attach.await.unwrap();
        assert_agree(&host, std::slice::from_ref(&id), "reopened for the attach");
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

    #[tokio::test]
    async fn open_state_agrees_everywhere_through_open_lease_idle_close_eviction_and_retire() {
        let dir = tempfile::tempdir().unwrap();
        let (host, ids) = host_with(dir.path(), 3, 2);
        let (a, b, c) = (&ids[0], &ids[1], &ids[2]);
        let shared = Arc::clone(&host.shared);
        assert_agree(&host, &ids, "created");
        let ctx = Context::background;

        let hosted_a = host
            .open_session(SessionKey(a.clone()), ctx())
            .await
            .unwrap();
        assert_agree(&host, &ids, "a opened");
        let lease = hosted_a.lease(ctx()).await.unwrap();
        assert_agree(&host, &ids, "a leased");
        lease.release(ctx()).await.unwrap();
        assert_eq!(shared.directory.idle_order(), std::slice::from_ref(a));
        let hosted_b = host
            .open_session(SessionKey(b.clone()), ctx())
            .await
            .unwrap();
        assert_agree(&host, &ids, "b opened");

        // At the cap: opening c closes a, the least recently used idle session.
        let hosted_c = host
            .open_session(SessionKey(c.clone()), ctx())
            .await
            .unwrap();
        assert!(!host.is_open(a) && host.is_open(b) && host.is_open(c));
        assert_agree(&host, &ids, "a evicted for c");
        assert!(matches!(
            hosted_a.lease(ctx()).await,
            Err(ServiceError::SessionReleased)
        ));
        assert_agree(&host, &ids, "a's released handle leased");

        assert!(shared.close_if_idle(b, Wait::Yes).await);
        assert_agree(&host, &ids, "b closed idle");
        assert!(matches!(
            hosted_b.lease(ctx()).await,
            Err(ServiceError::SessionReleased)
        ));
        hosted_c.close(ctx()).await.unwrap();
        assert_agree(&host, &ids, "c's handle closed by the server");
        assert_eq!(host.open_sessions(), 0);
        assert_eq!(shared.residency.resident_count(), 0, "no handle is held");
        host.shutdown().await;
    }

    #[tokio::test]
    async fn a_session_that_cannot_open_leaves_no_resident_behind() {
        let dir = tempfile::tempdir().unwrap();
        let (host, ids) = host_with(dir.path(), 2, 1);
        let (a, b) = (&ids[0], &ids[1]);
        let shared = Arc::clone(&host.shared);
        let ctx = Context::background;
        let hosted_a = host
            .open_session(SessionKey(a.clone()), ctx())
            .await
            .unwrap();
        let lease = hosted_a.lease(ctx()).await.unwrap();

        let refused = host
            .open_session(SessionKey(b.clone()), ctx())
            .await
            .unwrap_err();
        assert!(refused.to_wire().message.contains("limit 1"), "{refused}");
        assert!(
            shared.residency.resident(b).is_none(),
            "the server holds no handle of b, so neither does the host"
        );
        assert_eq!(shared.residency.resident_count(), 1);
        assert_agree(&host, &ids, "b refused");

        lease.release(ctx()).await.unwrap();
        host.open_session(SessionKey(b.clone()), ctx())
            .await
            .unwrap();
        assert_agree(&host, &ids, "b opened in a's place");
        assert!(host.is_open(b) && !host.is_open(a));
        host.shutdown().await;
    }
}
