//! The handle on one connection's state that its reader, writer, request tasks, publishers,
//! the router and the server's registry share. It knows the sans-IO state and the two
//! wake-ups (writer and reader), nothing of the connection task that drives them.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::conn::state::ConnState;

/// The state of one connection, shared by its reader, writer, request tasks and publishers.
#[derive(Debug)]
pub(crate) struct ConnShared {
    state: Mutex<ConnState>,
    /// Wakes the writer: the state has something to write.
    pub(super) wake: Notify,
    /// Cancelled once the state is closing: stops the reader.
    pub(super) closing: CancellationToken,
    /// While set, [`Self::with`] leaves the state's wake flag for [`WakeHold`] to act on, so
    /// the reader wakes the writer once per read batch instead of once per response. Only
    /// read or written with `state` locked, which orders it with the flag.
    holding: AtomicBool,
}

impl ConnShared {
    pub(crate) fn new(state: ConnState) -> Self {
        Self {
            state: Mutex::new(state),
            wake: Notify::new(),
            closing: CancellationToken::new(),
            holding: AtomicBool::new(false),
        }
    }

    /// Runs `f` on the state, then wakes the writer and the reader as needed.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut ConnState) -> R) -> R {
        let mut state = self.state.lock();
        let r = f(&mut state);
        let wake = !self.holding.load(Ordering::Relaxed) && state.take_wake();
        let closing = state.closing().is_some();
        drop(state);
        if wake {
            self.wake.notify_one();
        }
        if closing {
            self.closing.cancel();
        }
        r
    }

    /// Holds writer wake-ups until the guard drops (one wake for a whole read batch).
    pub(super) fn hold_wakes(&self) -> WakeHold<'_> {
        let _state = self.state.lock();
        self.holding.store(true, Ordering::Relaxed);
        WakeHold(self)
    }
}

/// See [`ConnShared::hold_wakes`].
pub(super) struct WakeHold<'a>(&'a ConnShared);

impl Drop for WakeHold<'_> {
    fn drop(&mut self) {
        let shared = self.0;
        shared.with(|_| shared.holding.store(false, Ordering::Relaxed));
    }
}
