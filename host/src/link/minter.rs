//! Who minted a link: the identity a browser acts for, recorded with its token so that its
//! rights can be worked out again at every use under the policy then in force.

use std::net::SocketAddr;
use std::sync::Arc;

use baton_server::{ClientCertificate, PeerIdentity};
use rustls_pki_types::CertificateDer;
use serde::{Deserialize, Serialize};

use super::secret::{hex, parse_hex};

/// A minting identity as the token file records it: what the policy matches on, and
/// nothing else (no addresses, no process ids).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Minter {
    /// An in-process call (an embedder): every right.
    Local,
    /// A Unix peer.
    #[serde(rename_all = "camelCase")]
    Unix {
        /// Its uid.
        uid: u32,
        /// Its gid.
        gid: u32,
        /// Its user name, as `/etc/passwd` named it when it minted.
        user_name: Option<String>,
    },
    /// A TLS client with a verified certificate.
    Tls {
        /// The certificate (DER, hex): the policy matches its names and fingerprint.
        certificate: String,
    },
    /// A plain-TCP (loopback) peer.
    Tcp,
    /// A TLS peer without a client certificate.
    AnonymousTls,
}

/// The address a rebuilt identity carries; the policy never matches on addresses.
const NO_ADDR: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

impl Minter {
    /// The record of `identity` (`None`: an in-process call); `None` for a browser identity,
    /// which mints nothing.
    pub fn of(identity: Option<&PeerIdentity>) -> Option<Self> {
        Some(match identity {
            None => Self::Local,
            Some(PeerIdentity::Unix {
                uid,
                gid,
                user_name,
                ..
            }) => Self::Unix {
                uid: *uid,
                gid: *gid,
                user_name: user_name.clone(),
            },
            Some(PeerIdentity::Tls {
                client_certificate, ..
            }) => Self::Tls {
                certificate: hex(client_certificate.der().as_ref()),
            },
            Some(PeerIdentity::Tcp { .. }) => Self::Tcp,
            Some(PeerIdentity::AnonymousTls { .. }) => Self::AnonymousTls,
            Some(_) => return None,
        })
    }

    /// The identity to work its rights out for (`None`: in-process); `None` inside
    /// `Some` never happens. A certificate that does not decode is `Err` (a damaged file).
    pub(crate) fn identity(&self) -> Result<Option<PeerIdentity>, String> {
        Ok(Some(match self {
            Self::Local => return Ok(None),
            Self::Unix {
                uid,
                gid,
                user_name,
            } => PeerIdentity::Unix {
                uid: *uid,
                gid: *gid,
                user_name: user_name.clone(),
                pid: None,
            },
            Self::Tls { certificate } => {
                let der = parse_hex(certificate)
                    .filter(|d| !d.is_empty())
                    .ok_or_else(|| "a minter's certificate is not hex DER".to_owned())?;
                PeerIdentity::Tls {
                    addr: NO_ADDR,
                    client_certificate: Arc::new(ClientCertificate::from_der(
                        CertificateDer::from(der),
                    )),
                }
            }
            Self::Tcp => PeerIdentity::Tcp {
                addr: NO_ADDR,
                loopback: true,
            },
            Self::AnonymousTls => PeerIdentity::AnonymousTls { addr: NO_ADDR },
        }))
    }
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DnType, KeyPair};

    use super::*;

    #[test]
    fn a_recorded_tls_minter_is_the_same_certificate_again() {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["a.example".to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "alice");
        let cert = params.self_signed(&key).unwrap();
        let identity = PeerIdentity::Tls {
            addr: SocketAddr::from(([127, 0, 0, 1], 9)),
            client_certificate: Arc::new(ClientCertificate::from_der(cert.der().clone())),
        };
        let minter = Minter::of(Some(&identity)).unwrap();
        let json = serde_json::to_string(&minter).unwrap();
        let back: Minter = serde_json::from_str(&json).unwrap();
        let rebuilt = back.identity().unwrap().unwrap();
        let (a, b) = (
            identity.client_certificate().unwrap(),
            rebuilt.client_certificate().unwrap(),
        );
        assert_eq!(a.sha256_fingerprint_hex(), b.sha256_fingerprint_hex());
        assert_eq!(b.common_name(), Some("alice"));
        assert_eq!(Minter::of(None), Some(Minter::Local));
        let web = PeerIdentity::Web {
            token_id: "ab12cd34".into(),
            addr: NO_ADDR,
        };
        assert_eq!(Minter::of(Some(&web)), None, "a browser mints nothing");
    }
}
