//! TLS configuration: a PEM certificate chain and key, and optionally a client CA for mutual
//! TLS. Built on rustls with the ring provider.

use std::fmt;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::ListenError;

/// Whether clients must present a certificate signed by the client CA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// The TLS handshake fails without a valid client certificate.
    Required,
    /// A client certificate is verified if presented; anonymous clients are admitted and
    /// reach the host as [`PeerIdentity::AnonymousTls`](crate::PeerIdentity::AnonymousTls).
    Optional,
}

/// Server-side TLS settings, ready for accepting.
#[derive(Clone)]
pub struct TlsConfig {
    inner: Arc<rustls::ServerConfig>,
    client_auth: Option<ClientAuth>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("client_auth", &self.client_auth)
            .finish_non_exhaustive()
    }
}

fn tls_error(
    reason: impl Into<String>,
    source: impl std::error::Error + Send + Sync + 'static,
) -> ListenError {
    ListenError::Tls {
        reason: reason.into(),
        source: Some(Box::new(source)),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Parses every certificate in a PEM bundle.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, ListenError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error(format!("cannot parse {what}"), e))?;
    if certs.is_empty() {
        return Err(ListenError::Tls {
            reason: format!("{what} contains no certificate"),
            source: None,
        });
    }
    Ok(certs)
}

impl TlsConfig {
    /// A server certificate chain (leaf first) and its private key (PKCS#8, PKCS#1 or SEC1),
    /// both PEM. No client authentication.
    ///
    /// # Errors
    /// [`ListenError::Tls`] if either does not parse or the key does not match.
    pub fn from_pem(cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<Self, ListenError> {
        Self::build(cert_chain_pem, key_pem, None)
    }

    /// As [`from_pem`](Self::from_pem), plus client certificates verified against the CA
    /// certificates in `client_ca_pem` (mutual TLS). The verified certificate's subject and
    /// SHA-256 fingerprint reach the host in [`PeerIdentity::Tls`](crate::PeerIdentity::Tls).
    ///
    /// # Errors
    /// [`ListenError::Tls`] if any PEM does not parse or the CA set is unusable.
    pub fn with_client_ca(
        cert_chain_pem: &[u8],
        key_pem: &[u8],
        client_ca_pem: &[u8],
        client_auth: ClientAuth,
    ) -> Result<Self, ListenError> {
        Self::build(cert_chain_pem, key_pem, Some((client_ca_pem, client_auth)))
    }

    /// Uses a prepared rustls configuration as is. Whatever client verifier it has decides
    /// client authentication; a verified certificate still reaches the host.
    pub fn from_rustls(config: Arc<rustls::ServerConfig>) -> Self {
        Self {
            inner: config,
            client_auth: None,
        }
    }

    fn build(
        cert_chain_pem: &[u8],
        key_pem: &[u8],
        client_ca: Option<(&[u8], ClientAuth)>,
    ) -> Result<Self, ListenError> {
        let chain = certificates(cert_chain_pem, "certificate chain")?;
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| tls_error("cannot parse private key", e))?;
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error("no usable protocol versions", e))?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some((ca_pem, auth)) => {
                let mut roots = RootCertStore::empty();
                for cert in certificates(ca_pem, "client CA")? {
                    roots
                        .add(cert)
                        .map_err(|e| tls_error("unusable client CA certificate", e))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
                let verifier = match auth {
                    ClientAuth::Required => verifier,
                    ClientAuth::Optional => verifier.allow_unauthenticated(),
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| tls_error("cannot build client verifier", e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder
            .with_single_cert(chain, key)
            .map_err(|e| tls_error("certificate and key do not form a usable identity", e))?;
        Ok(Self {
            inner: Arc::new(config),
            client_auth: client_ca.map(|(_, auth)| auth),
        })
    }

    /// The client authentication mode configured through PEM, if any.
    pub fn client_auth(&self) -> Option<ClientAuth> {
        self.client_auth
    }

    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::clone(&self.inner))
    }
}
