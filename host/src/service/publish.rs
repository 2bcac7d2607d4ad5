//! Subscribers of one published state, and the snapshots they start from.

use baton_protocol::Value;
use baton_protocol::chord::{Op, ProviderUpdate};
use baton_server::chord::{InstanceSnapshot, MemberSnapshot, ServiceMode, SubscriptionSnapshot};
use baton_server::{Published, Publisher, SharedUpdate};

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

/// A singleton subscription snapshot: `methods`, then the state members.
pub(crate) fn snapshot(
    service_id: &str,
    methods: &[&str],
    states: Vec<(&str, u64, Value)>,
) -> SubscriptionSnapshot {
    let members = methods
        .iter()
        .map(|m| MemberSnapshot::method(*m))
        .chain(
            states
                .into_iter()
                .map(|(name, sequence, value)| MemberSnapshot::state(name, sequence, value)),
        )
        .collect();
    SubscriptionSnapshot::new(
        service_id,
        ServiceMode::Singleton,
        vec![InstanceSnapshot::new(None, members)],
    )
}
