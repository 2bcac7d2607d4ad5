//! Who may do what (`docs/host.md`, access): the rights an identity has under the current
//! [`AccessPolicy`], and the checks every service call makes with them.
//!
//! | identity | without a policy | with a policy, named by no grant |
//! | --- | --- | --- |
//! | in-process call (no peer) | admin | admin |
//! | Unix peer with the host's own uid | admin | admin |
//! | Unix peer with another uid | refused at the listener | refused at the listener |
//! | TLS with a verified client certificate | owns what it creates | `ungranted_tls` (default: owns what it creates) |
//! | TLS without a certificate | refused at the listener | refused at the listener |
//! | plain TCP (loopback) | admin (a warning at startup) | refused at the listener |
//! | browser `web:<id>` (a live token) | its link's rights | its link's rights |
//! | browser with a revoked or unknown token | nothing | nothing |
//!
//! An identity named by a grant has exactly what its grants give, plus, always, every right
//! on the sessions it created (an owner may operate and remove them). `[[deny]]` refuses an
//! identity whatever it is granted (except the host's own uid and in-process calls).
//!
//! A browser identity's link gives, worked out again at every call under the policy then in
//! force: for one session, operator on it (viewer for a `--viewer` link), and only as far
//! as the minter may then see and change it (no `create`, no `remove`); for no session, the
//! minter's own rights, as the minter (same sight, same owner key: what it creates is the
//! minter's), read-only for a `--viewer` link. A `[[grant]]` naming `web_token` gives it
//! exactly what its grants give instead, and owns what it creates itself.
//!
//! A session the caller may not see does not exist for it: `session_not_found`, in listings,
//! `attach` and `remove` alike. A visible session the caller may not change answers
//! `forbidden`.

use std::collections::BTreeSet;
use std::sync::Arc;

use baton_protocol::ErrorCode;
use baton_server::{PeerIdentity, ServiceError};
use parking_lot::RwLock;

use super::limits::owner_key;
use super::policy::{AccessPolicy, Role, Ungranted};
use crate::link::{LinkGrant, LinkStore};

/// What a live browser token gives, by token id (`None`: unknown or revoked).
pub(crate) type Links<'a> = &'a dyn Fn(&str) -> Option<LinkGrant>;

/// A set of sessions a right covers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) enum Scope {
    /// None.
    #[default]
    Nothing,
    /// These (full ids).
    Some(BTreeSet<String>),
    /// Every session.
    All,
}

impl Scope {
    fn contains(&self, id: &str) -> bool {
        match self {
            Self::Nothing => false,
            Self::Some(ids) => ids.contains(id),
            Self::All => true,
        }
    }

    fn add(&mut self, sessions: Option<&BTreeSet<String>>) {
        match (sessions, &mut *self) {
            (_, Self::All) => {}
            (None, _) => *self = Self::All,
            (Some(more), Self::Some(ids)) => ids.extend(more.iter().cloned()),
            (Some(more), Self::Nothing) => *self = Self::Some(more.clone()),
        }
    }

    fn is_nothing(&self) -> bool {
        matches!(self, Self::Nothing)
    }
}

/// Which sessions an identity may see: its own and those its grants cover. Directory
/// subscribers with the same sight share one published list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Sight {
    /// The identity key its own sessions are recorded under ([`owner_key`]).
    pub(crate) key: String,
    sessions: Scope,
    /// The one session a browser link is for: nothing else is seen.
    only: Option<String>,
}

impl Sight {
    /// Every session.
    pub(crate) fn all() -> Self {
        Self {
            key: owner_key(None),
            sessions: Scope::All,
            only: None,
        }
    }

    /// Only the sessions recorded under `key` (an owner with no grant to view others).
    #[cfg(all(test, feature = "cluster"))]
    pub(crate) fn own(key: String) -> Self {
        Self {
            key,
            sessions: Scope::Nothing,
            only: None,
        }
    }

    /// Whether a session with this id and recorded owner is visible. Sessions without an
    /// owner (created before owners were recorded) are visible to admins only.
    pub(crate) fn sees(&self, id: &str, owner: Option<&str>) -> bool {
        self.only.as_deref().is_none_or(|s| s == id)
            && (self.sessions.contains(id) || owner == Some(self.key.as_str()))
    }
}

/// How a browser link narrows its minter's rights.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Limit {
    /// The browser identity (`web:<id>`), for messages.
    who: String,
    /// The one session it is for.
    session: Option<String>,
    /// It may only view.
    read_only: bool,
}

/// What one identity may do under one policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rights {
    /// What its sessions are recorded under.
    pub(crate) key: String,
    admin: bool,
    create: bool,
    operate: Scope,
    view: Scope,
    /// A browser link's narrowing of its minter's rights (which the other fields are).
    limit: Option<Limit>,
}

impl Rights {
    fn none(key: String) -> Self {
        Self {
            key,
            admin: false,
            create: false,
            operate: Scope::Nothing,
            view: Scope::Nothing,
            limit: None,
        }
    }

    fn admin(key: String) -> Self {
        Self {
            key,
            admin: true,
            create: true,
            operate: Scope::All,
            view: Scope::All,
            limit: None,
        }
    }

    /// These rights as a browser link `who` narrows them.
    fn limited(self, who: String, grant: LinkGrant) -> Self {
        Self {
            limit: Some(Limit {
                who,
                session: grant.session,
                read_only: grant.read_only,
            }),
            ..self
        }
    }

    /// The identity messages name: the browser's for a link, else the owner key.
    fn who(&self) -> &str {
        self.limit.as_ref().map_or(&self.key, |l| &l.who)
    }

    /// Whether it may only view (a `--viewer` link).
    fn read_only(&self) -> bool {
        self.limit.as_ref().is_some_and(|l| l.read_only)
    }

    /// Whether it is a link confined to one session or to viewing (no create, no remove).
    fn narrowed(&self) -> bool {
        self.limit
            .as_ref()
            .is_some_and(|l| l.read_only || l.session.is_some())
    }

    /// The role `baton links` shows for a link carrying these rights whole: `admin`,
    /// `operator` (may change some sessions it does not own), `owner` (only its own) or
    /// `viewer`.
    pub(crate) fn role(&self) -> &'static str {
        if self.read_only() {
            "viewer"
        } else if self.admin {
            "admin"
        } else if !self.operate.is_nothing() {
            "operator"
        } else if self.create {
            "owner"
        } else {
            "viewer"
        }
    }

    /// Whether it may change session `id` (recorded owner `owner`) at all.
    pub(crate) fn may_operate(&self, id: &str, owner: Option<&str>) -> bool {
        self.check_operate(id, owner).is_ok()
    }

    /// Whether it may connect at all.
    pub(crate) fn admitted(&self) -> bool {
        self.admin || self.create || !self.view.is_nothing()
    }

    /// The sessions it sees.
    pub(crate) fn sight(&self) -> Sight {
        Sight {
            key: self.key.clone(),
            sessions: if self.admin {
                Scope::All
            } else {
                self.view.clone()
            },
            only: self.limit.as_ref().and_then(|l| l.session.clone()),
        }
    }

    /// Whether it sees the session `id` (recorded owner `owner`).
    pub(crate) fn sees(&self, id: &str, owner: Option<&str>) -> bool {
        if let Some(only) = self.limit.as_ref().and_then(|l| l.session.as_deref())
            && only != id
        {
            return false;
        }
        self.admin || self.view.contains(id) || self.owns(owner)
    }

    /// Whether it owns sessions recorded under `owner` (a browser acting as its minter
    /// does).
    pub(crate) fn owns(&self, owner: Option<&str>) -> bool {
        owner == Some(self.key.as_str())
    }

    /// `create`: allowed, or `forbidden`.
    pub(crate) fn check_create(&self) -> Result<(), ServiceError> {
        if self.create && !self.narrowed() {
            Ok(())
        } else {
            Err(forbidden(format!(
                "Identity {} may not create sessions",
                self.who()
            )))
        }
    }

    /// A mutating `pi.session` method on a session it sees: allowed, or `forbidden`.
    pub(crate) fn check_operate(&self, id: &str, owner: Option<&str>) -> Result<(), ServiceError> {
        if !self.sees(id, owner) {
            return Err(ServiceError::session_not_found());
        }
        if !self.read_only() && (self.admin || self.owns(owner) || self.operate.contains(id)) {
            Ok(())
        } else {
            Err(forbidden(format!(
                "Identity {} may only view session {id}",
                self.who()
            )))
        }
    }

    /// `remove`: allowed for admins and the owner; `session_not_found` if it does not see
    /// the session, `forbidden` if it only may not remove it.
    pub(crate) fn check_remove(&self, id: &str, owner: Option<&str>) -> Result<(), ServiceError> {
        if !self.sees(id, owner) {
            return Err(ServiceError::session_not_found());
        }
        if !self.narrowed() && (self.admin || self.owns(owner)) {
            Ok(())
        } else {
            Err(forbidden(format!(
                "Identity {} may not remove session {id}",
                self.who()
            )))
        }
    }
}

/// `forbidden` with `message`.
pub(crate) fn forbidden(message: impl Into<String>) -> ServiceError {
    ServiceError::from_code(ErrorCode::Forbidden, message)
}

/// The policy in force, the host's own uid, and the browser tokens whose rights it works
/// out; the policy is replaced whole on reload.
#[derive(Debug)]
pub(crate) struct Access {
    host_uid: u32,
    policy: RwLock<Arc<Option<AccessPolicy>>>,
    links: Arc<LinkStore>,
}

impl Access {
    /// No policy file: the safe defaults (module docs).
    pub(crate) fn new(host_uid: u32, links: Arc<LinkStore>) -> Self {
        Self {
            host_uid,
            policy: RwLock::new(Arc::new(None)),
            links,
        }
    }

    /// The browser tokens.
    pub(crate) fn links(&self) -> &Arc<LinkStore> {
        &self.links
    }

    /// The uid the host runs as.
    pub(crate) fn host_uid(&self) -> u32 {
        self.host_uid
    }

    /// The policy in force.
    pub(crate) fn current(&self) -> Arc<Option<AccessPolicy>> {
        Arc::clone(&self.policy.read())
    }

    /// Puts `policy` in force; returns the one it replaced.
    pub(crate) fn replace(&self, policy: Option<AccessPolicy>) -> Arc<Option<AccessPolicy>> {
        let mut current = self.policy.write();
        std::mem::replace(&mut *current, Arc::new(policy))
    }

    /// The rights of `identity` (`None`: an in-process call) under the policy in force.
    pub(crate) fn rights(&self, identity: Option<&PeerIdentity>) -> Rights {
        let links = |id: &str| self.links.grant(id);
        rights(
            self.host_uid,
            self.current().as_ref().as_ref(),
            identity,
            &links,
        )
    }

    /// Whether `identity` is the host's own account or an in-process call (which may mint
    /// any link).
    pub(crate) fn is_host_itself(&self, identity: Option<&PeerIdentity>) -> bool {
        identity.is_none_or(|i| i.uid() == Some(self.host_uid))
    }

    /// The refusal for a peer that has no rights at all (`ServerHost::admit`).
    pub(crate) fn admit(&self, identity: &PeerIdentity) -> Result<(), ServiceError> {
        let rights = self.rights(Some(identity));
        if rights.admitted() {
            return Ok(());
        }
        Err(forbidden(match identity.uid() {
            Some(uid) => format!("Unix user {uid} may not connect to this host"),
            None => format!(
                "Identity {} is not admitted by the access policy",
                rights.key
            ),
        }))
    }
}

/// The rights of `identity` for a host running as `host_uid` under `policy`, with the live
/// browser tokens `links`.
pub(crate) fn rights(
    host_uid: u32,
    policy: Option<&AccessPolicy>,
    identity: Option<&PeerIdentity>,
    links: Links<'_>,
) -> Rights {
    let key = owner_key(identity);
    let Some(identity) = identity else {
        return Rights::admin(key);
    };
    // The host's own account owns the session files and can read them anyway.
    if identity.uid() == Some(host_uid) {
        return Rights::admin(key);
    }
    // A browser whose token is revoked or unknown is nobody, whatever the policy names.
    let link = match identity.web_token_id() {
        Some(id) => match links(id) {
            Some(grant) => Some(grant),
            None => return Rights::none(key),
        },
        None => None,
    };
    if let Some(p) = policy
        && p.denies.iter().any(|m| m.matches(identity))
    {
        return Rights::none(key);
    }
    let mut rights = Rights::none(key);
    let mut named = false;
    for grant in policy
        .iter()
        .flat_map(|p| p.grants.iter())
        .filter(|g| g.matcher.matches(identity))
    {
        named = true;
        match grant.role {
            Role::Admin => return Rights::admin(rights.key),
            Role::Operator => {
                rights.create = true;
                rights.operate.add(grant.sessions.as_ref());
                rights.view.add(grant.sessions.as_ref());
            }
            Role::Viewer => rights.view.add(grant.sessions.as_ref()),
        }
    }
    if named {
        return rights;
    }
    if let Some(grant) = link {
        // Never more than the minter has now (a minter is never a browser).
        let minter = self::rights(host_uid, policy, grant.minter.as_ref(), links);
        return minter.limited(rights.key, grant);
    }
    match identity {
        PeerIdentity::Tls { .. } => {
            rights.create = policy.is_none_or(|p| p.ungranted_tls == Ungranted::Own);
            rights
        }
        // Without a policy plain TCP (loopback only) is admin; docs/host.md warns.
        PeerIdentity::Tcp { .. } if policy.is_none() => Rights::admin(rights.key),
        _ => rights,
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use baton_server::ClientCertificate;
    use rcgen::{CertificateParams, DnType, KeyPair};

    use super::*;

    const HOST: u32 = 1000;

    fn no_links(_: &str) -> Option<LinkGrant> {
        None
    }

    fn unix(uid: u32, name: &str) -> PeerIdentity {
        PeerIdentity::Unix {
            uid,
            user_name: Some(name.to_owned()),
            gid: uid,
            pid: None,
        }
    }

    fn tls(cn: &str) -> PeerIdentity {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.self_signed(&key).unwrap();
        PeerIdentity::Tls {
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            client_certificate: Arc::new(ClientCertificate::from_der(cert.der().clone())),
        }
    }

    fn tcp() -> PeerIdentity {
        PeerIdentity::Tcp {
            addr: SocketAddr::from(([127, 0, 0, 1], 2)),
            loopback: true,
        }
    }

    fn store(dir: &std::path::Path) -> Arc<LinkStore> {
        Arc::new(LinkStore::open(dir, Arc::new(crate::clock::SystemClock)).unwrap())
    }

    fn policy(text: &str) -> AccessPolicy {
        AccessPolicy::from_toml(text).unwrap()
    }

    #[test]
    fn defaults_without_a_policy_are_safe() {
        let r = |i: &PeerIdentity| rights(HOST, None, Some(i), &no_links);
        assert!(r(&unix(HOST, "me")).admin);
        assert!(!r(&unix(HOST + 1, "other")).admitted());
        let a = r(&tls("a"));
        assert!(a.admitted() && a.create && !a.admin);
        assert!(a.sees("s", Some(&a.key)));
        assert!(!a.sees("s", Some("tls:sha256=00")));
        assert!(!a.sees("s", None), "ownerless sessions are for admins");
        let anonymous = PeerIdentity::AnonymousTls {
            addr: SocketAddr::from(([127, 0, 0, 1], 3)),
        };
        assert!(!r(&anonymous).admitted());
        assert!(r(&tcp()).admin, "tcp is admin without a policy");
        assert!(
            rights(HOST, None, None, &no_links).admin,
            "in-process calls"
        );
    }

    #[test]
    fn grants_give_roles_and_a_viewer_may_only_view() {
        let bob = tls("bob");
        let carol = tls("carol");
        let fp = carol.client_certificate().unwrap().sha256_fingerprint_hex();
        let p = policy(&format!(
            r#"
            [[grant]]
            role = "operator"
            tls_cn = "bob"
            sessions = ["s1"]
            [[grant]]
            role = "viewer"
            tls_fingerprint = "{fp}"
            [[grant]]
            role = "admin"
            unix_user = "alice"
            "#
        ));
        let r = |i: &PeerIdentity| rights(HOST, Some(&p), Some(i), &no_links);
        let b = r(&bob);
        assert!(b.check_operate("s1", Some("x")).is_ok());
        assert!(
            b.check_operate("s2", Some("x"))
                .unwrap_err()
                .is(ErrorCode::SessionNotFound)
        );
        assert!(
            b.check_remove("s1", Some("x"))
                .unwrap_err()
                .is(ErrorCode::Forbidden)
        );
        assert!(
            b.check_remove("s3", Some(&b.key)).is_ok(),
            "owners may remove"
        );
        let c = r(&carol);
        assert!(c.sees("s9", Some("x")));
        let refused = c.check_operate("s9", Some("x")).unwrap_err();
        assert!(refused.is(ErrorCode::Forbidden));
        assert_eq!(
            refused.to_wire().message,
            format!("Identity tls:sha256={fp} may only view session s9")
        );
        assert!(c.check_create().unwrap_err().is(ErrorCode::Forbidden));
        assert!(r(&unix(7, "alice")).admin);
        assert!(!r(&unix(8, "mallory")).admitted());
        assert!(
            !r(&tcp()).admitted(),
            "a policy without a tcp grant refuses tcp"
        );
    }

    #[test]
    fn denies_and_ungranted_tls_refuse_at_the_listener() {
        let a = tls("a");
        let fp = a.client_certificate().unwrap().sha256_fingerprint_hex();
        let p = policy(&format!(
            "[[grant]]\nrole = \"admin\"\ntls_cn = \"a\"\n[[deny]]\ntls_fingerprint = \"{fp}\"\n"
        ));
        assert!(!rights(HOST, Some(&p), Some(&a), &no_links).admitted());
        let p = policy("ungranted_tls = \"none\"\n[[grant]]\nrole = \"viewer\"\ntcp = true\n");
        assert!(!rights(HOST, Some(&p), Some(&tls("b")), &no_links).admitted());
        let t = rights(HOST, Some(&p), Some(&tcp()), &no_links);
        assert!(t.admitted() && !t.create);
        let dir = tempfile::tempdir().unwrap();
        let access = Access::new(HOST, store(dir.path()));
        let e = access.admit(&unix(HOST + 1, "x")).unwrap_err();
        assert!(e.is(ErrorCode::Forbidden));
        assert_eq!(
            e.to_wire().message,
            "Unix user 1001 may not connect to this host"
        );
        assert!(access.replace(Some(p)).is_none());
        assert!(access.admit(&tls("c")).is_err());
    }

    fn web(id: &str) -> PeerIdentity {
        PeerIdentity::Web {
            token_id: id.to_owned(),
            addr: SocketAddr::from(([127, 0, 0, 1], 4)),
        }
    }

    /// Links by token id: `a1` for session s1 minted by `minter`, `a2` the same read-only,
    /// `a3` for no session, `a4` for no session read-only.
    fn links_of(minter: &PeerIdentity) -> impl Fn(&str) -> Option<LinkGrant> + use<> {
        let minter = minter.clone();
        move |id: &str| {
            let (session, read_only) = match id {
                "a1" => (Some("s1".to_owned()), false),
                "a2" => (Some("s1".to_owned()), true),
                "a3" => (None, false),
                "a4" => (None, true),
                _ => return None,
            };
            Some(LinkGrant {
                minter: Some(minter.clone()),
                session,
                read_only,
            })
        }
    }

    #[test]
    fn a_link_never_exceeds_its_minter_at_the_time_of_use() {
        let bob = tls("bob");
        let p = policy("[[grant]]\nrole = \"operator\"\ntls_cn = \"bob\"\nsessions = [\"s1\"]\n");
        let links = links_of(&bob);
        let r = |id: &str, p: Option<&AccessPolicy>| rights(HOST, p, Some(&web(id)), &links);
        // For one session: operator on it and nothing else, no create, no remove.
        let one = r("a1", Some(&p));
        assert!(one.admitted());
        assert!(one.check_operate("s1", Some("x")).is_ok());
        assert!(
            one.check_operate("s2", Some("x"))
                .unwrap_err()
                .is(ErrorCode::SessionNotFound)
        );
        assert!(one.check_create().unwrap_err().is(ErrorCode::Forbidden));
        assert!(
            one.check_remove("s1", Some("x"))
                .unwrap_err()
                .is(ErrorCode::Forbidden)
        );
        let bobs = owner_key(Some(&bob));
        assert!(
            !one.sees("s9", Some(&bobs)),
            "a link for s1 does not see the minter's other sessions"
        );
        assert!(!one.sight().sees("s9", Some(&bobs)));
        assert!(one.sight().sees("s1", Some("x")));
        // The minter loses s1: so does the link, at once.
        let narrower =
            policy("[[grant]]\nrole = \"viewer\"\ntls_cn = \"bob\"\nsessions = [\"s1\"]\n");
        let refused = r("a1", Some(&narrower))
            .check_operate("s1", Some("x"))
            .unwrap_err();
        assert!(refused.is(ErrorCode::Forbidden));
        assert_eq!(
            refused.to_wire().message,
            "Identity web:a1 may only view session s1"
        );
        // Without a policy bob owns only what he created: the link is operator on s1 only
        // if bob owns s1.
        let owned = r("a1", None);
        assert!(owned.check_operate("s1", Some(&bobs)).is_ok());
        assert!(owned.check_operate("s1", Some("someone")).is_err());
        // No session: the minter's own rights, as the minter (same owner key).
        let all = r("a3", None);
        assert_eq!(all.key, bobs, "what the browser creates is the minter's");
        assert!(all.check_create().is_ok());
        assert!(all.check_operate("s7", Some(&bobs)).is_ok());
        assert!(all.check_remove("s7", Some(&bobs)).is_ok());
        assert!(!all.sees("s7", Some("someone")));
    }

    #[test]
    fn a_viewer_link_cannot_mutate() {
        let links = links_of(&unix(HOST, "me"));
        for id in ["a2", "a4"] {
            let r = rights(HOST, None, Some(&web(id)), &links);
            assert!(
                r.sees("s1", None),
                "{id}: the host's own links see everything"
            );
            let refused = r.check_operate("s1", None).unwrap_err();
            assert!(refused.is(ErrorCode::Forbidden), "{id}");
            assert!(r.check_create().unwrap_err().is(ErrorCode::Forbidden));
            assert!(
                r.check_remove("s1", None)
                    .unwrap_err()
                    .is(ErrorCode::Forbidden)
            );
            assert_eq!(r.role(), "viewer");
        }
        // The host's own uid's link for no session is an admin's.
        let admin = rights(HOST, None, Some(&web("a3")), &links);
        assert!(admin.check_remove("s1", None).is_ok());
        assert_eq!(admin.role(), "admin");
    }

    #[test]
    fn a_revoked_or_unknown_token_has_nothing_whatever_the_policy_grants() {
        let links = links_of(&unix(HOST, "me"));
        let p = policy("[[grant]]\nrole = \"admin\"\nweb_token = \"a9\"\n");
        let gone = rights(HOST, Some(&p), Some(&web("a9")), &links);
        assert!(!gone.admitted());
        assert!(!gone.sees("s1", None));
    }

    #[test]
    fn the_policy_grants_and_denies_browser_identities_by_web_token() {
        let links = links_of(&unix(HOST, "me"));
        let p = policy(
            "[[grant]]\nrole = \"viewer\"\nweb_token = \"a3\"\nsessions = [\"s2\"]\n[[deny]]\nweb_token = \"a1\"\n",
        );
        let denied = rights(HOST, Some(&p), Some(&web("a1")), &links);
        assert!(!denied.admitted(), "denied whatever its link gives");
        // Named by a grant: exactly what it grants, instead of the link's admin rights.
        let granted = rights(HOST, Some(&p), Some(&web("a3")), &links);
        assert!(granted.sees("s2", Some("x")));
        assert!(!granted.sees("s1", Some("x")));
        assert!(
            granted
                .check_operate("s2", Some("x"))
                .unwrap_err()
                .is(ErrorCode::Forbidden)
        );
        assert_eq!(granted.key, "web:a3");
        // Others keep their link's rights.
        assert!(rights(HOST, Some(&p), Some(&web("a4")), &links).admitted());
        // A reload that names a browser changes its rights (so its connections close).
        let none: Option<&AccessPolicy> = None;
        assert_ne!(
            rights(HOST, none, Some(&web("a1")), &links),
            rights(HOST, Some(&p), Some(&web("a1")), &links)
        );
    }
}
