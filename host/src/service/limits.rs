//! The named limits of a service host (`docs/host.md`, limits): how long an unattached idle
//! session stays open, how many sessions may be open at once, and how many sessions one
//! client identity may own.

use std::time::Duration;

use baton_server::PeerIdentity;

/// How long a hosted session with no attached client and nothing running stays open.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Most sessions open (runtime loaded, state published) at once.
pub const DEFAULT_MAX_OPEN_SESSIONS: usize = 64;
/// Most sessions one client identity may own (created and not removed).
pub const DEFAULT_MAX_SESSIONS_PER_OWNER: usize = 256;

/// The limits of a [`ServiceHost`](super::ServiceHost). Start from
/// [`ServiceLimits::default`] and change the fields you need.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServiceLimits {
    /// An open session with no attached client, no running turn and no running command is
    /// closed (runtime and published state released) after this long; the next attach opens
    /// it again from its file. `None` keeps sessions open until removal or shutdown.
    pub idle_timeout: Option<Duration>,
    /// Most sessions open at once (at least 1). An attach that would open one more first
    /// closes the least recently used idle session; when none is idle it answers `busy`.
    pub max_open_sessions: usize,
    /// Most sessions one owner identity may own; `create` over it answers `busy`. The owner
    /// is the creating connection's verified peer ([`owner_key`]).
    pub max_sessions_per_owner: usize,
}

impl Default for ServiceLimits {
    fn default() -> Self {
        Self {
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_open_sessions: DEFAULT_MAX_OPEN_SESSIONS,
            max_sessions_per_owner: DEFAULT_MAX_SESSIONS_PER_OWNER,
        }
    }
}

impl ServiceLimits {
    /// [`ServiceLimits::max_open_sessions`], never below 1 (a host that can open nothing
    /// could serve nothing).
    pub(crate) fn open_cap(&self) -> usize {
        self.max_open_sessions.max(1)
    }
}

/// The owner a connection's sessions are counted under: what its transport verified, and
/// nothing it merely claims.
///
/// | peer | owner |
/// | --- | --- |
/// | Unix socket | `unix:uid=<uid>` |
/// | TLS with a verified client certificate | `tls:sha256=<fingerprint hex>` |
/// | TLS without one | `tls` |
/// | plain TCP (nothing is authenticated) | `tcp` |
/// | a browser (web listener) | `web:<token id>` |
/// | no connection (in-process calls) | `local` |
pub fn owner_key(identity: Option<&PeerIdentity>) -> String {
    match identity {
        None => "local".to_owned(),
        Some(PeerIdentity::Unix { uid, .. }) => format!("unix:uid={uid}"),
        Some(PeerIdentity::Tls {
            client_certificate: cert,
            ..
        }) => format!("tls:sha256={}", cert.sha256_fingerprint_hex()),
        Some(PeerIdentity::AnonymousTls { .. }) => "tls".to_owned(),
        Some(PeerIdentity::Tcp { .. }) => "tcp".to_owned(),
        Some(PeerIdentity::Web { token_id, .. }) => format!("web:{token_id}"),
        // A transport added later authenticates nothing we know of yet.
        Some(_) => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_the_verified_peer_not_the_address() {
        let unix = PeerIdentity::Unix {
            uid: 1000,
            user_name: None,
            gid: 1000,
            pid: Some(7),
        };
        assert_eq!(owner_key(Some(&unix)), "unix:uid=1000");
        let tcp = |port| PeerIdentity::Tcp {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            loopback: true,
        };
        // Every plain-TCP peer is one owner, whatever its port.
        assert_eq!(owner_key(Some(&tcp(1))), "tcp");
        assert_eq!(owner_key(Some(&tcp(2))), "tcp");
        assert_eq!(owner_key(None), "local");
        let web = PeerIdentity::Web {
            token_id: "ab12cd34".into(),
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 3)),
        };
        assert_eq!(owner_key(Some(&web)), "web:ab12cd34");
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let limits = ServiceLimits::default();
        assert_eq!(limits.idle_timeout, Some(Duration::from_secs(600)));
        assert_eq!(limits.max_open_sessions, 64);
        assert_eq!(limits.max_sessions_per_owner, 256);
        let none = ServiceLimits {
            max_open_sessions: 0,
            ..ServiceLimits::default()
        };
        assert_eq!(none.open_cap(), 1);
    }
}
