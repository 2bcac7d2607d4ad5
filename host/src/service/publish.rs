//! Subscribers of one published state, and the snapshots they start from.

use std::cmp::Ordering;
use std::collections::HashSet;

use baton_protocol::Value;
use baton_protocol::chord::{Op, ProviderUpdate};
use baton_server::chord::{InstanceSnapshot, MemberSnapshot, ServiceMode, SubscriptionSnapshot};
use baton_server::{Published, Publisher, ServiceError, SharedUpdate};
use parking_lot::{Mutex, MutexGuard};

/// Who registered a subscription: one connection's server services or one session lease.
/// Subscription ids are unique per connection, so `(owner, id)` names a subscriber.
pub(crate) type Owner = u64;

#[derive(Debug)]
struct Subscriber {
    owner: Owner,
    id: String,
    publisher: Publisher,
}

/// The subscribers of one state.
#[derive(Debug, Default)]
pub(crate) struct Subscribers {
    list: Vec<Subscriber>,
}

impl Subscribers {
    /// Registers `(owner, id)`, replacing an earlier registration of the same pair.
    pub(crate) fn add(&mut self, owner: Owner, id: String, publisher: Publisher) {
        self.remove(owner, &id);
        self.list.push(Subscriber {
            owner,
            id,
            publisher,
        });
    }

    /// Forgets `(owner, id)`.
    pub(crate) fn remove(&mut self, owner: Owner, id: &str) {
        self.list.retain(|s| !(s.owner == owner && s.id == id));
    }

    /// Forgets every subscription of `owner`.
    pub(crate) fn remove_owner(&mut self, owner: Owner) {
        self.list.retain(|s| s.owner != owner);
    }

    /// Publishes one state update (encoded once per distinct encoder state) to everyone, and
    /// forgets subscribers whose connection closed or who unsubscribed. `snapshot` is the
    /// full state including the update, for subscribers that fell behind.
    pub(crate) fn publish(
        &mut self,
        member: &str,
        sequence: u64,
        ops: Vec<Op>,
        snapshot: &dyn Fn() -> SubscriptionSnapshot,
    ) {
        if self.list.is_empty() {
            return;
        }
        let update = SharedUpdate::new(ProviderUpdate::State {
            instance: None,
            member: member.to_owned(),
            sequence,
            ops,
        });
        self.list.retain(|s| {
            !matches!(
                s.publisher.publish_shared(&s.id, &update, snapshot),
                Published::Closed | Published::Dropped
            )
        });
    }
}

/// The subscription ids one endpoint (a connection's server services, or one session lease)
/// has opened and not yet closed, as upstream's `createRemoteServiceEndpoint` keeps them: an
/// `unsubscribe` naming any other id is an error there.
#[derive(Debug, Default)]
pub(crate) struct SubscriptionIds {
    ids: Mutex<HashSet<String>>,
}

impl SubscriptionIds {
    /// Records an opened subscription.
    pub(crate) fn opened(&self, id: &str) {
        self.lock().insert(id.to_owned());
    }

    /// Forgets `id`.
    ///
    /// # Errors
    /// `id` was never opened here, or is already closed. Upstream throws a plain
    /// `Error("Service subscription was not found")`, which its server answers as
    /// `internal_error` / `Internal server error`; so does this.
    pub(crate) fn close(&self, id: &str) -> Result<(), ServiceError> {
        if self.lock().remove(id) {
            Ok(())
        } else {
            Err(ServiceError::internal(SubscriptionNotFound))
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<String>> {
        self.ids.lock()
    }
}

/// An `unsubscribe` named a subscription this endpoint does not have.
#[derive(Debug, thiserror::Error)]
#[error("Service subscription was not found")]
pub(crate) struct SubscriptionNotFound;

/// A singleton subscription snapshot: methods and state members together, sorted by name as
/// upstream's provider lists them (`Object.keys(implementation).sort()` in chord's
/// `classifyRemoteServiceImplementation`), so a snapshot's member order matches upstream's.
pub(crate) fn snapshot(
    service_id: &str,
    methods: &[&str],
    states: Vec<(&str, u64, Value)>,
) -> SubscriptionSnapshot {
    let mut members: Vec<MemberSnapshot> = methods
        .iter()
        .map(|m| MemberSnapshot::method(*m))
        .chain(
            states
                .into_iter()
                .map(|(name, sequence, value)| MemberSnapshot::state(name, sequence, value)),
        )
        .collect();
    members.sort_by(|a, b| js_order(a.name(), b.name()));
    SubscriptionSnapshot::new(
        service_id,
        ServiceMode::Singleton,
        vec![InstanceSnapshot::new(None, members)],
    )
}

/// JavaScript's default string order (`Array.prototype.sort` without a comparator): by UTF-16
/// code units. It differs from Rust's `str` order (by UTF-8 bytes, i.e. by code points) for a
/// character beyond the BMP against one in U+E000–U+FFFF: the surrogate pair (0xD800–0xDBFF)
/// sorts first in JavaScript, last in Rust.
pub(crate) fn js_order(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(snap: &SubscriptionSnapshot) -> Vec<&str> {
        snap.instances[0]
            .members
            .iter()
            .map(MemberSnapshot::name)
            .collect()
    }

    #[test]
    fn snapshot_members_are_sorted_by_name_methods_and_states_together() {
        let snap = snapshot(
            "pi.session",
            &[
                "prompt",
                "steer",
                "abort",
                "setModel",
                "setThinking",
                "bash",
            ],
            vec![("state", 3, Value::Null)],
        );
        assert_eq!(
            names(&snap),
            [
                "abort",
                "bash",
                "prompt",
                "setModel",
                "setThinking",
                "state",
                "steer"
            ]
        );
    }

    #[test]
    fn js_order_compares_utf16_code_units_not_code_points() {
        // U+1F600 is the pair D83D DE00, which sorts before U+FFFD in JavaScript.
        assert_eq!(js_order("\u{1F600}", "\u{FFFD}"), Ordering::Less);
        assert_eq!("\u{1F600}".cmp("\u{FFFD}"), Ordering::Greater);
        assert_eq!(js_order("\u{FFFD}", "\u{1F600}"), Ordering::Greater);
        // Upper case before lower case; a prefix first.
        assert_eq!(js_order("setModel", "setThinking"), Ordering::Less);
        assert_eq!(js_order("Zed", "abort"), Ordering::Less);
        assert_eq!(js_order("set", "setModel"), Ordering::Less);
        assert_eq!(js_order("state", "state"), Ordering::Equal);
        let snap = snapshot("s", &["\u{FFFD}", "\u{1F600}", "a"], Vec::new());
        assert_eq!(names(&snap), ["a", "\u{1F600}", "\u{FFFD}"]);
    }
}
