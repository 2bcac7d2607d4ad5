//! The key layout in etcd, in one place (docs/cluster.md, Keys).
//!
//! ```text
//! /baton/v1/owners/<server-id>   the process that owns the server id (a HolderRecord),
//!                                created only if absent, under the host's lease
//! /baton/v1/hosts/<server-id>    the host's member record (a MemberRecord): endpoints,
//!                                labels, load; under the same lease
//! /baton/v1/sessions/<server-id>/<session-id>
//!                                a session's record (a SessionRecord), not under any lease
//! /baton/v1/names/<owner>/<name> the session id holding that name for that owner, not
//!                                under any lease (owner and name escaped, [`escape`])
//! ```
//!
//! The first two keys are under one lease, so a host that dies or is partitioned away loses
//! both at once when the lease expires, and a clean shutdown deletes both by revoking it. The
//! session keys outlive their host: a dead host's sessions stay listed, as unavailable.

use baton_protocol::ServerId;

/// Everything baton keeps in etcd starts with this; the `v1` changes if the layout does.
pub const ROOT: &str = "/baton/v1/";
/// The member records, one per live host.
pub const HOSTS_PREFIX: &str = "/baton/v1/hosts/";
/// The ownership records, one per server id served.
pub const OWNERS_PREFIX: &str = "/baton/v1/owners/";

/// The session records, per server id.
pub const SESSIONS_PREFIX: &str = "/baton/v1/sessions/";
/// The name claims, per owner.
pub const NAMES_PREFIX: &str = "/baton/v1/names/";

/// `/baton/v1/sessions/<server-id>/<session-id>`: one session's record.
pub fn session_key(server_id: &str, session_id: &str) -> String {
    format!(
        "{SESSIONS_PREFIX}{}/{}",
        escape(server_id),
        escape(session_id)
    )
}

/// `/baton/v1/sessions/<server-id>/`: the records of one host's sessions.
pub fn sessions_of(server_id: &str) -> String {
    format!("{SESSIONS_PREFIX}{}/", escape(server_id))
}

/// `/baton/v1/names/<owner>/<name>`: which session of `owner` is named `name`. A session
/// without a recorded owner claims under `%`, which no escaped owner can be.
pub fn name_key(owner: Option<&str>, name: &str) -> String {
    format!("{NAMES_PREFIX}{}/{}", escape_owner(owner), escape(name))
}

/// The owner segment: escaped, or `%` for no recorded owner (never the escape of a string,
/// which spells `%` only before two hex digits).
fn escape_owner(owner: Option<&str>) -> String {
    owner.map_or_else(|| "%".to_owned(), escape)
}

/// `s` with every byte outside `A-Z a-z 0-9 . _ - : = @` as `%XX`, so a `/` in an owner or
/// a name cannot reach into another key, and distinct strings stay distinct keys.
pub fn escape(s: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':' | b'=' | b'@') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

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

    #[test]
    fn a_slash_in_an_owner_or_name_cannot_reach_into_another_key() {
        assert_eq!(
            name_key(Some("unix:uid=1000"), "a/b c"),
            "/baton/v1/names/unix:uid=1000/a%2Fb%20c"
        );
        assert_ne!(name_key(Some("a/b"), "c"), name_key(Some("a"), "b/c"));
        assert_ne!(name_key(None, "x"), name_key(Some(""), "x"));
        assert_eq!(name_key(None, "x"), "/baton/v1/names/%/x");
        assert_eq!(session_key("s", "t"), format!("{}t", sessions_of("s")));
        assert!(session_key("s", "t").starts_with(SESSIONS_PREFIX));
    }
}
