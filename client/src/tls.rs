//! TLS client configuration: trust roots from a CA file or the platform store, and an
//! optional client certificate for mutual TLS; and what a failed TLS handshake says about who
//! refused whom ([`TlsFailure`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::{AlertDescription, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Where TLS trust and identity come from.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    /// PEM file of CA certificates to trust. `None` uses the platform trust store.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain for mutual TLS (requires `client_key`).
    pub client_cert: Option<PathBuf>,
    /// PEM private key for `client_cert`.
    pub client_key: Option<PathBuf>,
    /// Name to verify in the server certificate instead of the endpoint's host: for a
    /// tunnel or an address, e.g. `tls://127.0.0.1:17879` with `build-box.example`. A DNS
    /// name or an IP address; checked when the configuration is built.
    pub server_name: Option<String>,
}

/// What a failed TLS handshake says about who refused whom.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The server refused this client's certificate, or its lack of one: it sent a fatal
    /// alert about the certificate (`unknown_ca`, `bad_certificate`, `certificate_required`,
    /// `certificate_revoked`, `certificate_expired`, `access_denied`, or `decrypt_error` for
    /// a signature that does not verify, …).
    ClientRefused,
    /// This client did not accept the server's certificate (unknown issuer, not valid for
    /// the name, expired).
    ServerRejected,
    /// Anything else: the connection reset mid-handshake, a protocol error, a bad name.
    Other,
}

/// A TLS setup problem, reported before any connection attempt.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// A PEM file could not be read or parsed.
    #[error("cannot read {what} from {path}: {reason}")]
    Pem {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        reason: String,
    },
    /// No usable trust anchors.
    #[error("no trusted CA certificates ({0})")]
    NoRoots(String),
    /// A certificate without a key or the reverse.
    #[error("--cert and --key must be given together")]
    IncompleteIdentity,
    /// rustls refused the configuration (e.g. a key that does not match the certificate).
    #[error("invalid TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// [`TlsOptions::server_name`] is neither a DNS name nor an IP address.
    #[error("{0:?} is not a valid TLS server name (expected a DNS name or an IP address)")]
    ServerName(String),
}

impl TlsOptions {
    /// The name verified in the server certificate of a `tls://` endpoint at `host`:
    /// [`server_name`](Self::server_name) when set, else `host`.
    pub fn verified_name<'a>(&'a self, host: &'a str) -> &'a str {
        self.server_name.as_deref().unwrap_or(host)
    }
}

fn pem_err(what: &'static str, path: &Path, reason: impl ToString) -> TlsConfigError {
    TlsConfigError::Pem {
        what,
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

fn load_certs(
    path: &Path,
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_err(what, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(what, path, e))?;
    if certs.is_empty() {
        return Err(pem_err(what, path, "no certificates in file"));
    }
    Ok(certs)
}

/// Builds the rustls client configuration for `options`.
///
/// # Errors
/// Unreadable PEM files, an empty trust store, or a certificate/key mismatch.
pub(crate) fn client_config(
    options: &TlsOptions,
) -> Result<Arc<rustls::ClientConfig>, TlsConfigError> {
    if let Some(name) = &options.server_name {
        ServerName::try_from(name.as_str())
            .map_err(|_| TlsConfigError::ServerName(name.clone()))?;
    }
    let mut roots = RootCertStore::empty();
    match &options.ca_file {
        Some(path) => {
            for cert in load_certs(path, "CA certificates")? {
                roots
                    .add(cert)
                    .map_err(|e| pem_err("CA certificates", path, e))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                // Unparseable platform certificates are skipped, as browsers do.
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(TlsConfigError::NoRoots(
                    "the platform trust store is empty; pass --ca".to_owned(),
                ));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let config = match (&options.client_cert, &options.client_key) {
        (Some(cert), Some(key)) => {
            let chain = load_certs(cert, "client certificate")?;
            let key =
                PrivateKeyDer::from_pem_file(key).map_err(|e| pem_err("private key", key, e))?;
            builder.with_client_auth_cert(chain, key)?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err(TlsConfigError::IncompleteIdentity),
    };
    Ok(Arc::new(config))
}

/// Who refused whom, from the I/O error a TLS handshake or the first read after it failed
/// with (tokio-rustls wraps the rustls error). In TLS 1.3 a server's refusal of the client
/// certificate arrives as an alert after the client finished its side of the handshake, so
/// it surfaces on the first read, not in `connect`.
pub(crate) fn tls_failure(e: &std::io::Error) -> TlsFailure {
    let Some(error) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return TlsFailure::Other;
    };
    match error {
        rustls::Error::AlertReceived(alert) if refuses_the_client_certificate(*alert) => {
            TlsFailure::ClientRefused
        }
        rustls::Error::InvalidCertificate(_) => TlsFailure::ServerRejected,
        _ => TlsFailure::Other,
    }
}

/// The alerts a server sends about the certificate a client presented (or did not).
/// `decrypt_error` is among them: it is what a server answers a certificate whose signature
/// does not verify, e.g. one issued by another CA of the same name (a regenerated
/// development PKI); a handshake's cryptography failing never heals on retry either.
fn refuses_the_client_certificate(alert: AlertDescription) -> bool {
    matches!(
        alert,
        AlertDescription::BadCertificate
            | AlertDescription::DecryptError
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::AccessDenied
            | AlertDescription::CertificateRequired
    )
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use super::*;
    use crate::endpoint::Endpoint;

    /// Options with the platform trust store and `server_name`.
    fn options_with(server_name: Option<&str>) -> TlsOptions {
        TlsOptions {
            server_name: server_name.map(str::to_owned),
            ..TlsOptions::default()
        }
    }

    #[test]
    fn the_server_name_overrides_the_endpoint_host_for_verification() {
        let Endpoint::Tls { host, .. } = "tls://127.0.0.1:17879".parse().unwrap() else {
            panic!("not a tls endpoint");
        };
        // What `ClientConfig::new` starts from.
        let mut options = TlsOptions::default();
        assert_eq!(options.verified_name(&host), "127.0.0.1");
        options.server_name = Some("build-box.example".to_owned());
        assert_eq!(options.verified_name(&host), "build-box.example");
    }

    #[test]
    fn an_invalid_server_name_is_refused_before_connecting() {
        for bad in ["", "bad name", "a..b", "build-box.example:7879"] {
            let err = client_config(&options_with(Some(bad))).unwrap_err();
            assert!(
                matches!(&err, TlsConfigError::ServerName(n) if n == bad),
                "{bad:?}: {err}"
            );
            assert!(
                err.to_string().contains("not a valid TLS server name"),
                "{err}"
            );
        }
    }

    fn wrapped(e: rustls::Error) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }

    #[test]
    fn an_alert_about_the_client_certificate_is_a_refusal_of_the_client() {
        for alert in [
            AlertDescription::UnknownCA,
            AlertDescription::BadCertificate,
            AlertDescription::CertificateRequired,
            AlertDescription::CertificateRevoked,
            AlertDescription::AccessDenied,
            AlertDescription::DecryptError,
        ] {
            let e = wrapped(rustls::Error::AlertReceived(alert));
            assert_eq!(tls_failure(&e), TlsFailure::ClientRefused, "{alert:?}");
        }
    }

    #[test]
    fn a_server_certificate_this_client_rejects_is_told_apart_from_other_tls_failures() {
        let untrusted = wrapped(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ));
        assert_eq!(tls_failure(&untrusted), TlsFailure::ServerRejected);
        for other in [
            wrapped(rustls::Error::AlertReceived(
                AlertDescription::HandshakeFailure,
            )),
            wrapped(rustls::Error::DecryptError),
            std::io::Error::from(std::io::ErrorKind::ConnectionReset),
            std::io::Error::other("not a rustls error"),
        ] {
            assert_eq!(tls_failure(&other), TlsFailure::Other, "{other}");
        }
    }

    #[test]
    fn dns_names_and_ip_addresses_are_valid_server_names() {
        for good in ["build-box.example", "localhost", "10.0.0.7", "::1"] {
            // Past the name check, the only possible failure is the trust store (a machine
            // without platform roots), never the name.
            match client_config(&options_with(Some(good))) {
                Ok(_) | Err(TlsConfigError::NoRoots(_)) => {}
                Err(e) => panic!("{good:?}: {e}"),
            }
        }
    }
}
