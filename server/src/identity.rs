//! Who is on the other end of a connection, as established by the listener before any
//! protocol byte was read.
//!
//! Unix peers are named by the kernel (`SO_PEERCRED`: uid, gid, pid) plus the user name
//! `/etc/passwd` gives the uid ([`passwd`]); TLS peers by their verified client certificate:
//! SHA-256 fingerprint, subject, common name and subject alternative names, read with the
//! `x509-parser` crate ([`x509`]). A TLS peer without a certificate (`ClientAuth::Optional`)
//! is [`PeerIdentity::AnonymousTls`]: an identity of its own, which a host grants nothing to
//! unless it chooses to.

pub(crate) mod passwd;
mod subject_alt_name;
pub(crate) mod x509;

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use rustls_pki_types::CertificateDer;

pub use self::subject_alt_name::SubjectAltName;

/// The transport a connection arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A Unix domain socket.
    Unix,
    /// Plain TCP.
    Tcp,
    /// TLS over TCP.
    Tls,
    /// A WebSocket the host upgraded on its web listener (plain HTTP on loopback, or HTTPS),
    /// carrying the same frame bytes as binary messages.
    Web,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unix => "unix",
            Self::Tcp => "tcp",
            Self::Tls => "tls",
            Self::Web => "web",
        })
    }
}

/// The authenticated identity of a peer, as far as its transport establishes one.
///
/// This is what reaches the host in every [`Context`](crate::Context): upstream passes a
/// placeholder instead. A host decides what each identity may do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerIdentity {
    /// A Unix-socket peer, identified by the kernel (`SO_PEERCRED`).
    Unix {
        /// Effective user id of the connecting process.
        uid: u32,
        /// The user name `/etc/passwd` lists for `uid`, if any (other NSS sources are not
        /// consulted). The uid is the identity; the name is read when the peer connects.
        user_name: Option<String>,
        /// Effective group id of the connecting process.
        gid: u32,
        /// Process id, where the platform reports it.
        pid: Option<i32>,
    },
    /// Plain TCP. Only the address is known; nothing is authenticated. `loopback` is true
    /// for 127.0.0.0/8 and ::1 (the only addresses plain TCP binds to without an opt-in).
    Tcp {
        /// The peer's address.
        addr: SocketAddr,
        /// True when the peer address is a loopback address.
        loopback: bool,
    },
    /// TLS with a client certificate that verified against the configured client CA (or the
    /// verifier of a [`TlsConfig::from_rustls`](crate::TlsConfig::from_rustls) configuration).
    Tls {
        /// The peer's address.
        addr: SocketAddr,
        /// The verified client certificate (mutual TLS).
        client_certificate: Arc<ClientCertificate>,
    },
    /// TLS without a client certificate: a server with no client CA, or
    /// [`ClientAuth::Optional`](crate::ClientAuth::Optional) and a client that presented
    /// none. The channel is encrypted but the peer is nobody in particular: grant it nothing
    /// you would not grant anyone who can reach the port.
    AnonymousTls {
        /// The peer's address.
        addr: SocketAddr,
    },
    /// A browser on the host's web listener, authenticated by the host before the upgrade
    /// (a cookie the host issued for a one-time link): the browser identity `web:<token_id>`.
    Web {
        /// The browser token's public id (never its secret).
        token_id: String,
        /// The peer's address.
        addr: SocketAddr,
    },
}

impl PeerIdentity {
    /// True for identities a transport authenticated: Unix (kernel credentials), TLS with
    /// a verified client certificate, and a browser the host authenticated by its cookie.
    /// Plain TCP and anonymous TLS are not.
    pub fn is_authenticated(&self) -> bool {
        match self {
            Self::Unix { .. } | Self::Tls { .. } | Self::Web { .. } => true,
            Self::Tcp { .. } | Self::AnonymousTls { .. } => false,
        }
    }

    /// The Unix peer's uid.
    pub fn uid(&self) -> Option<u32> {
        match self {
            Self::Unix { uid, .. } => Some(*uid),
            Self::Tcp { .. } | Self::Tls { .. } | Self::AnonymousTls { .. } | Self::Web { .. } => {
                None
            }
        }
    }

    /// The Unix peer's user name, if `/etc/passwd` lists its uid.
    pub fn user_name(&self) -> Option<&str> {
        match self {
            Self::Unix { user_name, .. } => user_name.as_deref(),
            Self::Tcp { .. } | Self::Tls { .. } | Self::AnonymousTls { .. } | Self::Web { .. } => {
                None
            }
        }
    }

    /// The browser token id of a web peer.
    pub fn web_token_id(&self) -> Option<&str> {
        match self {
            Self::Web { token_id, .. } => Some(token_id),
            Self::Unix { .. } | Self::Tcp { .. } | Self::Tls { .. } | Self::AnonymousTls { .. } => {
                None
            }
        }
    }

    /// The verified TLS client certificate.
    pub fn client_certificate(&self) -> Option<&ClientCertificate> {
        match self {
            Self::Tls {
                client_certificate, ..
            } => Some(client_certificate),
            Self::Unix { .. } | Self::Tcp { .. } | Self::AnonymousTls { .. } | Self::Web { .. } => {
                None
            }
        }
    }

    /// The peer's network address (TCP and TLS).
    pub fn addr(&self) -> Option<SocketAddr> {
        match self {
            Self::Tcp { addr, .. }
            | Self::Tls { addr, .. }
            | Self::AnonymousTls { addr }
            | Self::Web { addr, .. } => Some(*addr),
            Self::Unix { .. } => None,
        }
    }
}

impl fmt::Display for PeerIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix {
                uid,
                user_name,
                gid,
                pid,
            } => {
                write!(f, "unix uid={uid}")?;
                if let Some(name) = user_name {
                    write!(f, " user={name}")?;
                }
                write!(f, " gid={gid}")?;
                if let Some(pid) = pid {
                    write!(f, " pid={pid}")?;
                }
                Ok(())
            }
            Self::Tcp { addr, .. } => write!(f, "tcp {addr}"),
            Self::Tls {
                addr,
                client_certificate,
            } => write!(
                f,
                "tls {addr} client=\"{}\" sha256={}",
                client_certificate.subject(),
                client_certificate.sha256_fingerprint_hex()
            ),
            Self::AnonymousTls { addr } => write!(f, "tls {addr} anonymous"),
            Self::Web { token_id, addr } => write!(f, "web {addr} token={token_id}"),
        }
    }
}

/// A verified TLS client certificate.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    subject: String,
    common_name: Option<String>,
    alt_names: Vec<SubjectAltName>,
    sha256: [u8; 32],
    der: CertificateDer<'static>,
}

impl ClientCertificate {
    /// Describes an end-entity certificate (DER). Never fails: bytes `x509-parser` cannot
    /// read give an empty subject and no names (the fingerprint is of the bytes as given).
    pub fn from_der(der: CertificateDer<'static>) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, der.as_ref());
        let mut sha256 = [0; 32];
        sha256.copy_from_slice(digest.as_ref());
        let names = x509::names(der.as_ref());
        Self {
            subject: names.subject,
            common_name: names.common_name,
            alt_names: names.alt_names,
            sha256,
            der,
        }
    }

    /// The subject distinguished name in RFC 4514 form (`CN=alice,O=Example`: most specific
    /// RDN first, values escaped, non-string values as `#` and hex DER), or empty if it could
    /// not be read.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The common name (`CN`), unescaped, if the subject has one (the most specific one if
    /// it has several).
    pub fn common_name(&self) -> Option<&str> {
        self.common_name.as_deref()
    }

    /// The subject alternative names (DNS, URI, e-mail, IP; other kinds are skipped), in
    /// certificate order.
    pub fn subject_alt_names(&self) -> &[SubjectAltName] {
        &self.alt_names
    }

    /// The `dNSName` alternative names, in certificate order.
    pub fn dns_names(&self) -> impl Iterator<Item = &str> {
        self.alt_names.iter().filter_map(|n| match n {
            SubjectAltName::Dns(s) => Some(s.as_str()),
            SubjectAltName::Uri(_) | SubjectAltName::Email(_) | SubjectAltName::Ip(_) => None,
        })
    }

    /// The `iPAddress` alternative names, in certificate order.
    pub fn ip_addresses(&self) -> impl Iterator<Item = IpAddr> {
        self.alt_names.iter().filter_map(|n| match n {
            SubjectAltName::Ip(ip) => Some(*ip),
            SubjectAltName::Dns(_) | SubjectAltName::Uri(_) | SubjectAltName::Email(_) => None,
        })
    }

    /// The `rfc822Name` (e-mail) alternative names, in certificate order.
    pub fn emails(&self) -> impl Iterator<Item = &str> {
        self.alt_names.iter().filter_map(|n| match n {
            SubjectAltName::Email(s) => Some(s.as_str()),
            SubjectAltName::Dns(_) | SubjectAltName::Uri(_) | SubjectAltName::Ip(_) => None,
        })
    }

    /// The `uniformResourceIdentifier` alternative names (e.g. SPIFFE ids), in certificate
    /// order.
    pub fn uris(&self) -> impl Iterator<Item = &str> {
        self.alt_names.iter().filter_map(|n| match n {
            SubjectAltName::Uri(s) => Some(s.as_str()),
            SubjectAltName::Dns(_) | SubjectAltName::Email(_) | SubjectAltName::Ip(_) => None,
        })
    }

    /// SHA-256 of the DER certificate.
    pub fn sha256_fingerprint(&self) -> &[u8; 32] {
        &self.sha256
    }

    /// The fingerprint as lowercase hex, colon-free.
    pub fn sha256_fingerprint_hex(&self) -> String {
        self.sha256
            .iter()
            .fold(String::with_capacity(64), |mut s, b| {
                s.push(char::from(HEX[usize::from(b >> 4)]));
                s.push(char::from(HEX[usize::from(b & 0x0f)]));
                s
            })
    }

    /// The certificate itself.
    pub fn der(&self) -> &CertificateDer<'static> {
        &self.der
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Debug for ClientCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCertificate")
            .field("subject", &self.subject)
            .field("alt_names", &self.alt_names)
            .field("sha256", &self.sha256_fingerprint_hex())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    use std::sync::Arc;

    use rcgen::{CertificateParams, DnType, DnValue, KeyPair, SanType};

    use super::{ClientCertificate, PeerIdentity, SubjectAltName};

    fn certificate(params: CertificateParams) -> ClientCertificate {
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        ClientCertificate::from_der(cert.der().clone())
    }

    fn every_san_kind() -> CertificateParams {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "agent");
        params.subject_alt_names = vec![
            SanType::URI("spiffe://example.org/agent".try_into().unwrap()),
            SanType::DnsName("agent.example.org".try_into().unwrap()),
            SanType::Rfc822Name("ops@example.org".try_into().unwrap()),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))),
            SanType::IpAddress(IpAddr::V6(Ipv6Addr::LOCALHOST)),
            SanType::DnsName("*.agents.example.org".try_into().unwrap()),
        ];
        params
    }

    #[test]
    fn alternative_names_of_every_supported_kind_are_read_in_order_and_by_kind() {
        let cert = certificate(every_san_kind());
        assert_eq!(
            cert.subject_alt_names(),
            [
                SubjectAltName::Uri("spiffe://example.org/agent".into()),
                SubjectAltName::Dns("agent.example.org".into()),
                SubjectAltName::Email("ops@example.org".into()),
                SubjectAltName::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7))),
                SubjectAltName::Ip(IpAddr::V6(Ipv6Addr::LOCALHOST)),
                SubjectAltName::Dns("*.agents.example.org".into()),
            ]
        );
        assert_eq!(
            cert.dns_names().collect::<Vec<_>>(),
            ["agent.example.org", "*.agents.example.org"]
        );
        assert_eq!(
            cert.ip_addresses().collect::<Vec<_>>(),
            [
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)),
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            ]
        );
        assert_eq!(cert.emails().collect::<Vec<_>>(), ["ops@example.org"]);
        assert_eq!(
            cert.uris().collect::<Vec<_>>(),
            ["spiffe://example.org/agent"]
        );
        assert_eq!(cert.common_name(), Some("agent"));
        assert_eq!(cert.subject(), "CN=agent");
        assert_eq!(
            cert.subject_alt_names()[0].to_string(),
            "URI:spiffe://example.org/agent"
        );
        assert_eq!(cert.subject_alt_names()[4].to_string(), "IP:::1");
    }

    #[test]
    fn the_fingerprint_is_the_sha256_of_the_der_in_lowercase_hex() {
        let cert = certificate(every_san_kind());
        let digest = ring::digest::digest(&ring::digest::SHA256, cert.der().as_ref());
        assert_eq!(cert.sha256_fingerprint().as_slice(), digest.as_ref());
        let hex = cert.sha256_fingerprint_hex();
        let expected: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, expected);
        assert_eq!(hex.len(), 64);
    }

    #[test]
    fn a_certificate_without_alternative_names_has_none() {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "bob");
        let cert = certificate(params);
        assert!(cert.subject_alt_names().is_empty());
        assert_eq!(cert.subject(), "CN=bob");
    }

    #[test]
    fn the_subject_is_rfc4514_most_specific_first_with_specials_escaped() {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CountryName, "NL");
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Example");
        params
            .distinguished_name
            .push(DnType::OrganizationalUnitName, "ops");
        params
            .distinguished_name
            .push(DnType::CommonName, "Doe, Jane+ops");
        let cert = certificate(params);
        // rcgen writes CN first, then the others in push order: OU is the most specific RDN.
        assert_eq!(cert.subject(), "OU=ops,O=Example,C=NL,CN=Doe\\, Jane\\+ops");
        assert_eq!(cert.common_name(), Some("Doe, Jane+ops"));
    }

    #[test]
    fn bmp_and_unknown_attributes_are_rendered() {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(
            DnType::CommonName,
            DnValue::BmpString("Zoë".try_into().unwrap()),
        );
        params
            .distinguished_name
            .push(DnType::CustomDnType(vec![1, 3, 6, 1, 4, 1, 99999, 1]), "x");
        let cert = certificate(params);
        assert_eq!(cert.common_name(), Some("Zoë"));
        assert!(
            cert.subject().starts_with("1.3.6.1.4.1.99999.1=x,CN=Zoë"),
            "{}",
            cert.subject()
        );
    }

    #[test]
    fn an_anonymous_tls_peer_is_its_own_unauthenticated_identity() {
        let addr: SocketAddr = "192.0.2.7:4433".parse().unwrap();
        let anonymous = PeerIdentity::AnonymousTls { addr };
        assert!(!anonymous.is_authenticated());
        assert!(anonymous.client_certificate().is_none());
        assert_eq!(anonymous.addr(), Some(addr));
        assert_eq!(anonymous.to_string(), "tls 192.0.2.7:4433 anonymous");

        let cert = Arc::new(certificate(every_san_kind()));
        let verified = PeerIdentity::Tls {
            addr,
            client_certificate: Arc::clone(&cert),
        };
        assert!(verified.is_authenticated());
        assert_eq!(
            verified.client_certificate().unwrap().common_name(),
            Some("agent")
        );
        assert_eq!(
            verified.to_string(),
            format!(
                "tls 192.0.2.7:4433 client=\"CN=agent\" sha256={}",
                cert.sha256_fingerprint_hex()
            )
        );
        assert_ne!(verified, anonymous);
    }

    #[test]
    fn a_unix_identity_shows_uid_and_user_name() {
        let unix = PeerIdentity::Unix {
            uid: 1000,
            user_name: Some("alice".into()),
            gid: 100,
            pid: Some(42),
        };
        assert!(unix.is_authenticated());
        assert_eq!(unix.uid(), Some(1000));
        assert_eq!(unix.user_name(), Some("alice"));
        assert_eq!(unix.to_string(), "unix uid=1000 user=alice gid=100 pid=42");
    }
}
