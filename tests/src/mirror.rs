//! A client-side mirror of one `test.counter` subscription, for tests that speak raw frames:
//! the wire snapshot and updates go through the protocol's own `StateDecoder` and `Replica`,
//! counting updates and re-baselines on the way.

use baton_protocol::Value;
use baton_protocol::chord::{Replica, ServiceMode, StateDecoder};

/// The replica of a `test.counter` subscription and what it was fed.
#[derive(Debug)]
pub struct Mirror {
    decoder: StateDecoder,
    replica: Replica,
    /// Re-baselines applied: `replaced` (how baton resyncs a singleton subscriber that fell
    /// behind) or `reset` (the pi 1.0.x dialect).
    pub resets: usize,
    /// Updates applied, re-baselines included.
    pub updates: usize,
    /// Updates applied, by type (`state`, `replaced`, …).
    pub types: std::collections::BTreeMap<&'static str, usize>,
}

impl Mirror {
    /// Hydrates from a subscribe response's wire snapshot.
    pub fn new(snapshot: &Value) -> Self {
        let mut decoder = StateDecoder::new();
        let snap = decoder.decode_snapshot(snapshot).expect("wire snapshot");
        let mut replica = Replica::new("test.counter", ServiceMode::Singleton);
        replica.apply_snapshot(snap).expect("hydrate");
        Self {
            decoder,
            replica,
            resets: 0,
            updates: 0,
            types: std::collections::BTreeMap::new(),
        }
    }

    /// Applies one wire update; panics if it does not decode or apply in sequence.
    pub fn apply(&mut self, update: &Value) {
        let u = self.decoder.decode_update(update).expect("wire update");
        if matches!(u.type_name(), "reset" | "replaced") {
            self.resets += 1;
        }
        *self.types.entry(u.type_name()).or_default() += 1;
        self.updates += 1;
        self.replica.apply_update(u).expect("apply in sequence");
    }

    /// The counter's `state` member.
    pub fn value(&self) -> Option<&Value> {
        self.replica.value(None, "state")
    }

    /// The sequence of the `state` member.
    pub fn sequence(&self) -> Option<u64> {
        self.replica.sequence(None, "state")
    }
}
