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
//!
//! An identity named by a grant has exactly what its grants give, plus, always, every right
//! on the sessions it created (an owner may operate and remove them). `[[deny]]` refuses an
//! identity whatever it is granted (except the host's own uid and in-process calls).
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
}

impl Sight {
    /// Every session.
    pub(crate) fn all() -> Self {
        Self {
            key: owner_key(None),
            sessions: Scope::All,
        }
    }

    /// Whether a session with this id and recorded owner is visible. Sessions without an
    /// owner (created before owners were recorded) are visible to admins only.
    pub(crate) fn sees(&self, id: &str, owner: Option<&str>) -> bool {
        self.sessions.contains(id) || owner == Some(self.key.as_str())
    }
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
}

impl Rights {
    fn none(key: String) -> Self {
        Self {
            key,
            admin: false,
            create: false,
            operate: Scope::Nothing,
            view: Scope::Nothing,
        }
    }

    fn admin(key: String) -> Self {
        Self {
            key,
            admin: true,
            create: true,
            operate: Scope::All,
            view: Scope::All,
        }
    }

    /// Whether it may connect at all.
    pub(crate) fn admitted(&self) -> bool {
        self.admin || self.create || !self.view.is_nothing()
    }

    /// The sessions it sees.
    pub(crate) fn sight(&self) -> Sight {
        Sight {
            key: self.key.clone(),
            sessions: self.view.clone(),
        }
    }

    /// Whether it sees the session `id` (recorded owner `owner`).
    pub(crate) fn sees(&self, id: &str, owner: Option<&str>) -> bool {
        self.admin || self.view.contains(id) || self.owns(owner)
    }

    fn owns(&self, owner: Option<&str>) -> bool {
        owner == Some(self.key.as_str())
    }

    /// `create`: allowed, or `forbidden`.
    pub(crate) fn check_create(&self) -> Result<(), ServiceError> {
        if self.create {
            Ok(())
        } else {
            Err(forbidden(format!(
                "Identity {} may not create sessions",
                self.key
            )))
        }
    }

    /// A mutating `pi.session` method on a session it sees: allowed, or `forbidden`.
    pub(crate) fn check_operate(&self, id: &str, owner: Option<&str>) -> Result<(), ServiceError> {
        if !self.sees(id, owner) {
            return Err(ServiceError::session_not_found());
        }
        if self.admin || self.owns(owner) || self.operate.contains(id) {
            Ok(())
        } else {
            Err(forbidden(format!(
                "Identity {} may only view session {id}",
                self.key
            )))
        }
    }

    /// `remove`: allowed for admins and the owner; `session_not_found` if it does not see
    /// the session, `forbidden` if it only may not remove it.
    pub(crate) fn check_remove(&self, id: &str, owner: Option<&str>) -> Result<(), ServiceError> {
        if !self.sees(id, owner) {
            return Err(ServiceError::session_not_found());
        }
        if self.admin || self.owns(owner) {
            Ok(())
        } else {
            Err(forbidden(format!(
                "Identity {} may not remove session {id}",
                self.key
            )))
        }
    }
}

/// `forbidden` with `message`.
pub(crate) fn forbidden(message: impl Into<String>) -> ServiceError {
    ServiceError::from_code(ErrorCode::Forbidden, message)
}

/// The policy in force and the host's own uid; the policy is replaced whole on reload.
#[derive(Debug)]
pub(crate) struct Access {
    host_uid: u32,
    policy: RwLock<Arc<Option<AccessPolicy>>>,
}

impl Access {
    /// No policy file: the safe defaults (module docs).
    pub(crate) fn new(host_uid: u32) -> Self {
        Self {
            host_uid,
            policy: RwLock::new(Arc::new(None)),
        }
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
        rights(self.host_uid, self.current().as_ref().as_ref(), identity)
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

/// The rights of `identity` for a host running as `host_uid` under `policy`.
pub(crate) fn rights(
    host_uid: u32,
    policy: Option<&AccessPolicy>,
    identity: Option<&PeerIdentity>,
) -> Rights {
    let key = owner_key(identity);
    let Some(identity) = identity else {
        return Rights::admin(key);
    };
    // The host's own account owns the session files and can read them anyway.
    if identity.uid() == Some(host_uid) {
        return Rights::admin(key);
    }
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

    fn policy(text: &str) -> AccessPolicy {
        AccessPolicy::from_toml(text).unwrap()
    }

    #[test]
    fn defaults_without_a_policy_are_safe() {
        let r = |i: &PeerIdentity| rights(HOST, None, Some(i));
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
        assert!(rights(HOST, None, None).admin, "in-process calls");
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
        let r = |i: &PeerIdentity| rights(HOST, Some(&p), Some(i));
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
        assert!(!rights(HOST, Some(&p), Some(&a)).admitted());
        let p = policy("ungranted_tls = \"none\"\n[[grant]]\nrole = \"viewer\"\ntcp = true\n");
        assert!(!rights(HOST, Some(&p), Some(&tls("b"))).admitted());
        let t = rights(HOST, Some(&p), Some(&tcp()));
        assert!(t.admitted() && !t.create);
        let access = Access::new(HOST);
        let e = access.admit(&unix(HOST + 1, "x")).unwrap_err();
        assert!(e.is(ErrorCode::Forbidden));
        assert_eq!(
            e.to_wire().message,
            "Unix user 1001 may not connect to this host"
        );
        assert!(access.replace(Some(p)).is_none());
        assert!(access.admit(&tls("c")).is_err());
    }
}
