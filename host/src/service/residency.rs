//! Residency: which sessions are open. This is the one owner of that fact in the service
//! layer; everything else that needs it asks here.
//!
//! A session is *open* while the [`Residency`] holds its [`LiveSession`]: its runtime,
//! loaded through the manager, with its published state and its pump. Beside the open
//! sessions it keeps what opening, closing and removing them needs: the places under the
//! open cap that opens in progress hold ([`Reservation`]), the host side of every handle the
//! server holds ([`Resident`], with the gate that serialises one session's opening, closing,
//! leases and removal), and the sessions being removed ([`Removal`]).
//!
//! | who | keeps of it | how it knows |
//! | --- | --- | --- |
//! | the directory (`super::directory`) | nothing: it lists a session that is not open as `closed`, runs idle clocks only for open ones, and does not resolve one being removed | asks its own [`ResidencyView`] trait, which the residency implements, under its own lock at every change and every resolve; every change here is followed by one there |
//! | the open cap (`super::idle`) | nothing | [`Residency::reserve`] counts the open sessions and the reservations |
//! | the server's router | a cache of handles | the handle's `lease` answers `SessionReleased` once the host released it, and its `terminated` resolves |
//! | the manager (`crate::session::SessionManager`) | the loaded runtimes, one per file | is told: runtimes are opened and closed through it, so a session is open here only while its runtime is loaded there |
//!
//! Sessions are opened and closed by `super::idle` (and closed by a removal, below), under
//! the session's gate (host shutdown aside, when the server no longer routes to the
//! session); a resident is installed when the server opens a handle (`super`). After each
//! open or close the directory is told, and re-reads this: a directory change reads the
//! residency under the directory's lock, so the list rendered last after any change shows
//! it.
//!
//! A removal (`super::removal`) first marks the session ([`Residency::begin_removal`]): from
//! then on it does not resolve and no resident of it is installed. It then takes the current
//! resident, and under its gate retires it, closes the session and deletes its file, all
//! before the mark ends. An open runs only under the gate of a resident that is not retired,
//! so one waiting on that gate is refused (`session_not_found`), and none starts after. (The
//! server opens one handle of a session at a time, so the current resident is the only one
//! an open can be under way through.)
//!
//! Lock order: the directory's lock, then this one. Nothing is called while this lock is
//! held, so no other lock is ever taken under it.
//!
//! Imports point one way: the residency holds [`LiveSession`]s and implements the directory's
//! [`ResidencyView`]; neither the directory nor a live session knows this module.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Mutex, MutexGuard};
use tokio_util::sync::CancellationToken;

use super::directory::ResidencyView;
use super::live::LiveSession;

/// The host's side of one session handle the server holds.
#[derive(Debug)]
pub(crate) struct Resident {
    pub(crate) id: String,
    /// Serialises opening, closing, lease creation and removal of this session. An async
    /// mutex: opening, closing and removing await (reading the file, stopping the pump).
    pub(crate) gate: tokio::sync::Mutex<()>,
    /// The server let go of this handle (closed it, or a newer one replaced it), or the host
    /// released it (`released`).
    retired: AtomicBool,
    /// The host let go of the handle after closing its idle runtime: the server forgets it
    /// (its `terminated` says `Released`) and opens the session afresh on the next attach.
    released: AtomicBool,
    /// Fired when the host ends the handle: released, or the session removed under it.
    pub(crate) terminated: CancellationToken,
}

impl Resident {
    fn new(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            gate: tokio::sync::Mutex::new(()),
            retired: AtomicBool::new(false),
            released: AtomicBool::new(false),
            terminated: CancellationToken::new(),
        }
    }

    /// Whether the server or the host let go of this handle.
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// Whether the host released it (idle close).
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Marks the handle let go of.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// Marks the handle released by the host (and so let go of).
    pub(crate) fn release(&self) {
        self.released.store(true, Ordering::Release);
        self.retire();
    }
}

/// The open sessions, the places reserved by opens in progress, the residents and the
/// sessions being removed.
#[derive(Debug, Default)]
pub(crate) struct Residency {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    open: HashMap<String, Arc<LiveSession>>,
    reserved: usize,
    residents: HashMap<String, Arc<Resident>>,
    removing: HashSet<String>,
}

/// The mark of one session being removed ([`Residency::begin_removal`]): while it lives the
/// session does not resolve and no resident of it is installed. Dropping it ends the mark
/// (the removal is over, done or failed).
#[derive(Debug)]
pub(crate) struct Removal<'a> {
    residency: &'a Residency,
    id: String,
}

impl Removal<'_> {
    /// The session being removed.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for Removal<'_> {
    fn drop(&mut self) {
        self.residency.lock().removing.remove(&self.id);
    }
}

/// A place under the open cap, held while a session opens. Dropping it unused gives the place
/// back.
#[derive(Debug)]
pub(crate) struct Reservation<'a> {
    residency: &'a Residency,
    held: bool,
}

impl Reservation<'_> {
    /// The session opened: it takes the place, and is open from now on.
    pub(crate) fn commit(mut self, live: &Arc<LiveSession>) {
        let mut state = self.residency.lock();
        state.reserved = state.reserved.saturating_sub(1);
        state.open.insert(live.id.clone(), Arc::clone(live));
        self.held = false;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.held {
            let mut state = self.residency.lock();
            state.reserved = state.reserved.saturating_sub(1);
        }
    }
}

impl Residency {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Whether session `id` is open.
    pub(crate) fn is_open(&self, id: &str) -> bool {
        self.lock().open.contains_key(id)
    }

    /// How many sessions are open.
    pub(crate) fn open_count(&self) -> usize {
        self.lock().open.len()
    }

    /// The open session `id`.
    pub(crate) fn live(&self, id: &str) -> Option<Arc<LiveSession>> {
        self.lock().open.get(id).cloned()
    }

    /// Every open session.
    pub(crate) fn all_live(&self) -> Vec<Arc<LiveSession>> {
        self.lock().open.values().cloned().collect()
    }

    /// Forgets every open session (host shutdown) and returns them.
    pub(crate) fn forget_all(&self) -> Vec<Arc<LiveSession>> {
        self.lock().open.drain().map(|(_, l)| l).collect()
    }

    /// A place for one more open session, if fewer than `cap` are open or opening.
    pub(crate) fn reserve(&self, cap: usize) -> Option<Reservation<'_>> {
        let mut state = self.lock();
        if state.open.len() + state.reserved >= cap {
            return None;
        }
        state.reserved += 1;
        Some(Reservation {
            residency: self,
            held: true,
        })
    }

    /// `live` was closed: it is not open any more, unless a newer open of the session took its
    /// place. Returns whether it was forgotten.
    pub(crate) fn forget(&self, live: &Arc<LiveSession>) -> bool {
        let mut state = self.lock();
        let current = state
            .open
            .get(&live.id)
            .is_some_and(|l| Arc::ptr_eq(l, live));
        if current {
            state.open.remove(&live.id);
        }
        current
    }

    /// Forgets the open session `id`, whichever it is, and returns it (removal).
    pub(crate) fn forget_id(&self, id: &str) -> Option<Arc<LiveSession>> {
        self.lock().open.remove(id)
    }

    /// A new resident for `id` (the server opens a handle), replacing one the server forgot,
    /// which is retired; `None` while `id` is being removed.
    pub(crate) fn install(&self, id: &str) -> Option<Arc<Resident>> {
        let resident = Arc::new(Resident::new(id));
        let previous = {
            let mut state = self.lock();
            if state.removing.contains(id) {
                return None;
            }
            state.residents.insert(id.to_owned(), Arc::clone(&resident))
        };
        if let Some(previous) = previous {
            previous.retire();
        }
        Some(resident)
    }

    /// Marks `id` as being removed until the [`Removal`] is dropped; `None` if a removal of
    /// it is under way already.
    pub(crate) fn begin_removal(&self, id: &str) -> Option<Removal<'_>> {
        self.lock().removing.insert(id.to_owned()).then(|| Removal {
            residency: self,
            id: id.to_owned(),
        })
    }

    /// The resident of `id`.
    pub(crate) fn resident(&self, id: &str) -> Option<Arc<Resident>> {
        self.lock().residents.get(id).cloned()
    }

    /// Forgets `resident` unless a newer one replaced it; returns whether it was current.
    pub(crate) fn dismiss(&self, resident: &Arc<Resident>) -> bool {
        let mut state = self.lock();
        let current = state
            .residents
            .get(&resident.id)
            .is_some_and(|r| Arc::ptr_eq(r, resident));
        if current {
            state.residents.remove(&resident.id);
        }
        current
    }

    /// Forgets the resident of `id`, whichever it is, and returns it (removal).
    pub(crate) fn take_resident(&self, id: &str) -> Option<Arc<Resident>> {
        self.lock().residents.remove(id)
    }

    /// How many residents there are (tests compare it with the server's handles).
    #[cfg(test)]
    pub(crate) fn resident_count(&self) -> usize {
        self.lock().residents.len()
    }
}

impl ResidencyView for Residency {
    fn open_ids(&self) -> HashSet<String> {
        self.lock().open.keys().cloned().collect()
    }

    fn removing_ids(&self) -> HashSet<String> {
        self.lock().removing.clone()
    }
}
