//! [`SubjectAltName`]: one name a client certificate carries, below both the identity types
//! and the certificate reader that fills them in.

use std::fmt;
use std::net::IpAddr;

/// One subject alternative name of a client certificate: how service meshes (SPIFFE URIs),
/// device fleets (DNS names) and people (e-mail) are usually named in mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SubjectAltName {
    /// `dNSName`.
    Dns(String),
    /// `uniformResourceIdentifier`, e.g. `spiffe://example.org/agent`.
    Uri(String),
    /// `rfc822Name`.
    Email(String),
    /// `iPAddress`.
    Ip(IpAddr),
}

impl fmt::Display for SubjectAltName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dns(name) => write!(f, "DNS:{name}"),
            Self::Uri(uri) => write!(f, "URI:{uri}"),
            Self::Email(email) => write!(f, "email:{email}"),
            Self::Ip(ip) => write!(f, "IP:{ip}"),
        }
    }
}
