//! The key layout in etcd, in one place (docs/cluster.md, Keys).
//!
//! ```text
//! /baton/v1/owners/<server-id>   the process that owns the server id (a HolderRecord),
//!                                created only if absent, under the host's lease
//! /baton/v1/hosts/<server-id>    the host's member record (a MemberRecord): endpoints,
//!                                labels, load; under the same lease
//! ```
//!
//! Both keys are under one lease, so a host that dies or is partitioned away loses both at
//! once when the lease expires, and a clean shutdown deletes both by revoking it.

use baton_protocol::ServerId;

/// Everything baton keeps in etcd starts with this; the `v1` changes if the layout does.
pub const ROOT: &str = "/baton/v1/";
/// The member records, one per live host.
pub const HOSTS_PREFIX: &str = "/baton/v1/hosts/";
/// The ownership records, one per server id served.
pub const OWNERS_PREFIX: &str = "/baton/v1/owners/";

/// `/baton/v1/hosts/<server-id>`: the host's member record.
pub fn host_key(server_id: &ServerId) -> String {
    format!("{HOSTS_PREFIX}{server_id}")
}

/// `/baton/v1/owners/<server-id>`: who owns the server id.
pub fn owner_key(server_id: &ServerId) -> String {
    format!("{OWNERS_PREFIX}{server_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_keys_are_under_the_versioned_root_and_end_with_the_server_id() {
        let id = ServerId::from_random_bytes([7; 16]);
        assert_eq!(host_key(&id), format!("/baton/v1/hosts/{id}"));
        assert_eq!(owner_key(&id), format!("/baton/v1/owners/{id}"));
        assert!(host_key(&id).starts_with(ROOT) && owner_key(&id).starts_with(ROOT));
    }
}
