//! The live connections of one server, and whether it drains. Each connection enters itself
//! while its task runs; the server counts them, drains them and finishes them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::conn::shared::ConnShared;
use crate::context::ConnectionId;

/// The connections of one server, by id.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    connections: Mutex<HashMap<ConnectionId, Weak<ConnShared>>>,
    draining: AtomicBool,
}

impl Registry {
    /// Enters a connection. One that enters once the server drains drains at once: either it
    /// sees the flag here, or [`Self::drain`] finds it in the map.
    pub(crate) fn register(&self, id: ConnectionId, conn: &Arc<ConnShared>) {
        self.connections.lock().insert(id, Arc::downgrade(conn));
        if self.draining.load(Ordering::Acquire) {
            conn.with(|s| s.set_draining());
        }
    }

    /// The connection's task ended.
    pub(crate) fn unregister(&self, id: ConnectionId) {
        self.connections.lock().remove(&id);
    }

    /// Connections entered and not yet gone.
    pub(crate) fn len(&self) -> usize {
        self.connections.lock().len()
    }

    /// Every connection drains, those entered now and those that enter later: new requests
    /// are answered `server_draining`.
    pub(crate) fn drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.each(|c| c.with(|st| st.set_draining()));
    }

    /// Runs `f` on every live connection, with the map unlocked.
    pub(crate) fn each(&self, f: impl Fn(&ConnShared)) {
        let conns: Vec<_> = self
            .connections
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for c in conns {
            f(&c);
        }
    }
}
