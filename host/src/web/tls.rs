//! TLS for the web listener: the host's certificate and key, and no client certificate asked
//! for (a browser would prompt its user to pick one): browsers are authenticated by cookie.

use std::sync::Arc;

use baton_server::ClientCertificate;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::error::WebError;

/// A server certificate chain and key ready for the web listener, with the DNS names the
/// leaf certificate names (the listener answers to them).
#[derive(Clone)]
pub struct WebTls {
    pub(crate) config: Arc<rustls::ServerConfig>,
    pub(crate) dns_names: Vec<String>,
}

impl std::fmt::Debug for WebTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebTls")
            .field("dns_names", &self.dns_names)
            .finish_non_exhaustive()
    }
}

impl WebTls {
    /// A certificate chain (leaf first) and its private key, both PEM.
    ///
    /// # Errors
    /// [`WebError::Tls`] if either does not parse or they do not match.
    pub fn from_pem(cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<Self, WebError> {
        let chain = CertificateDer::pem_slice_iter(cert_chain_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| WebError::Tls(format!("cannot parse the certificate chain: {e}")))?;
        let Some(leaf) = chain.first() else {
            return Err(WebError::Tls("the certificate chain is empty".into()));
        };
        let dns_names = ClientCertificate::from_der(leaf.clone())
            .dns_names()
            .map(str::to_ascii_lowercase)
            .collect();
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|e| WebError::Tls(format!("cannot parse the private key: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| WebError::Tls(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| WebError::Tls(format!("certificate and key do not match: {e}")))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            config: Arc::new(config),
            dns_names,
        })
    }

    /// The DNS names of the leaf certificate.
    pub fn dns_names(&self) -> &[String] {
        &self.dns_names
    }
}
