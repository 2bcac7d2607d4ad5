//! The HTTP client the model providers share, and how their URLs are named.
//!
//! `reqwest` over rustls (the ring provider the rest of the tree uses; no OpenSSL): the
//! platform's roots (`rustls-native-certs`, which reads `SSL_CERT_FILE` / `SSL_CERT_DIR` in
//! place of the platform store when they are set) plus an optional extra CA file; connect,
//! between-chunks read and pool-idle timeouts; `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` from
//! the environment (reqwest's default). Error text names the [`ProviderUrl`] as
//! `scheme://host:port/path` — never credentials, a query or the API key.

use std::fmt;
use std::io::Read;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Url;
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// Bound on establishing a connection (TCP plus TLS handshake).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on the silence between two reads of a response (head or body chunk). Generous: a
/// reasoning model may think for minutes before its first token.
pub const READ_TIMEOUT: Duration = Duration::from_secs(300);
/// How long an idle pooled connection is kept for the next call.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Largest CA file read.
pub const MAX_CA_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Most bytes of an error response body read (and quoted, trimmed, in the error message).
pub const ERROR_BODY_LIMIT: usize = 4096;

/// The timeouts of one client (defaults: the named consts above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// See [`CONNECT_TIMEOUT`].
    pub connect: Duration,
    /// See [`READ_TIMEOUT`].
    pub read: Duration,
    /// See [`POOL_IDLE_TIMEOUT`].
    pub pool_idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: CONNECT_TIMEOUT,
            read: READ_TIMEOUT,
            pool_idle: POOL_IDLE_TIMEOUT,
        }
    }
}

/// Why a provider's transport could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The base URL does not parse.
    #[error("invalid base URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as configured (may be echoed: a parse failure has no safe part to cut).
        url: String,
        /// The parser's reason.
        reason: String,
    },
    /// The base URL is neither `https://` nor `http://`.
    #[error("unsupported URL scheme {scheme:?} in the base URL (use https:// or http://)")]
    UnsupportedScheme {
        /// The scheme found.
        scheme: String,
    },
    /// The CA file cannot be read.
    #[error("cannot read CA file {}: {source}", path.display())]
    CaFileRead {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The CA file is too large.
    #[error("CA file {} is larger than {MAX_CA_FILE_BYTES} bytes", path.display())]
    CaFileTooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The CA file holds no usable PEM certificate.
    #[error("CA file {} holds no PEM certificate{}", path.display(), reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    CaFileInvalid {
        /// The file.
        path: PathBuf,
        /// What was wrong, when known.
        reason: Option<String>,
    },
    /// An extra header has an invalid name or value.
    #[error("invalid extra header {name:?}")]
    InvalidHeader {
        /// The header name.
        name: String,
    },
    /// reqwest refused the client configuration.
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
}

/// A request URL, displayed without credentials or query.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderUrl {
    url: Url,
}

impl ProviderUrl {
    /// `base` (e.g. `https://api.example.test/v1`) with `suffix` (e.g. `/chat/completions`)
    /// appended to its path.
    ///
    /// # Errors
    /// [`TransportError::InvalidUrl`] or [`TransportError::UnsupportedScheme`].
    pub fn parse(base: &str, suffix: &str) -> Result<Self, TransportError> {
        let mut url = Url::parse(base.trim()).map_err(|e| TransportError::InvalidUrl {
            url: base.to_owned(),
            reason: e.to_string(),
        })?;
        match url.scheme() {
            "https" | "http" => {}
            other => {
                return Err(TransportError::UnsupportedScheme {
                    scheme: other.to_owned(),
                });
            }
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(TransportError::InvalidUrl {
                url: base.to_owned(),
                reason: "no host".into(),
            });
        }
        let path = format!("{}{suffix}", url.path().trim_end_matches('/'));
        url.set_path(&path);
        url.set_fragment(None);
        Ok(Self { url })
    }

    /// The full URL requests go to.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// True for `https://`.
    pub fn is_https(&self) -> bool {
        self.url.scheme() == "https"
    }

    /// True when the host is `localhost` or a loopback address (a key sent there in clear
    /// never leaves the machine).
    pub fn is_loopback(&self) -> bool {
        let host = self.host();
        match host.parse::<IpAddr>() {
            Ok(ip) => ip.is_loopback(),
            Err(_) => {
                let host = host.to_ascii_lowercase();
                host == "localhost" || host.ends_with(".localhost")
            }
        }
    }

    /// The host without IPv6 brackets.
    fn host(&self) -> &str {
        let h = self.url.host_str().unwrap_or("");
        h.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(h)
    }
}

impl fmt::Display for ProviderUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let port = self.url.port_or_known_default().unwrap_or(0);
        // host_str keeps IPv6 brackets.
        let host = self.url.host_str().unwrap_or("");
        write!(
            f,
            "{}://{host}:{port}{}",
            self.url.scheme(),
            self.url.path()
        )
    }
}

impl fmt::Debug for ProviderUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProviderUrl({self})")
    }
}

/// Builds the client: platform roots plus `ca_file`, the timeouts, env proxies.
///
/// # Errors
/// A [`TransportError`] naming the CA file or the client failure.
pub(crate) fn build_client(
    ca_file: Option<&Path>,
    timeouts: &Timeouts,
) -> Result<reqwest::Client, TransportError> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        .read_timeout(timeouts.read)
        .pool_idle_timeout(timeouts.pool_idle)
        .user_agent(concat!("baton-host/", env!("CARGO_PKG_VERSION")))
        .tls_built_in_root_certs(false)
        // Redirects would resend the key to wherever a server points; model APIs do not
        // redirect.
        .redirect(reqwest::redirect::Policy::none());
    for der in trust_anchors(ca_file)? {
        // The platform's certificates reqwest cannot use are skipped; the CA file's were
        // checked by `trust_anchors`.
        if let Ok(cert) = reqwest::Certificate::from_der(&der) {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .build()
        .map_err(|e| TransportError::Client(describe(&e.without_url())))
}

/// The certificates a provider's server may chain to: the platform's roots plus those of
/// `ca_file` (shared by the HTTP client and the start-up probe, so both trust the same).
///
/// # Errors
/// A [`TransportError`] naming the CA file.
pub(crate) fn trust_anchors(
    ca_file: Option<&Path>,
) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let native = rustls_native_certs::load_native_certs();
    if !native.errors.is_empty() {
        tracing::debug!(
            errors = native.errors.len(),
            "some platform root certificates could not be loaded"
        );
    }
    let mut out = native.certs;
    if let Some(path) = ca_file {
        for der in read_ca_file(path)? {
            reqwest::Certificate::from_der(&der).map_err(|e| TransportError::CaFileInvalid {
                path: path.to_owned(),
                reason: Some(e.without_url().to_string()),
            })?;
            out.push(der);
        }
    }
    Ok(out)
}

/// The PEM certificates of `path` (bounded; at least one).
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let read_err = |source| TransportError::CaFileRead {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut pem = Vec::new();
    file.take(MAX_CA_FILE_BYTES + 1)
        .read_to_end(&mut pem)
        .map_err(read_err)?;
    if pem.len() as u64 > MAX_CA_FILE_BYTES {
        return Err(TransportError::CaFileTooLarge {
            path: path.to_owned(),
        });
    }
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&pem).collect();
    match certs {
        Ok(certs) if !certs.is_empty() => Ok(certs),
        Ok(_) => Err(TransportError::CaFileInvalid {
            path: path.to_owned(),
            reason: None,
        }),
        Err(e) => Err(TransportError::CaFileInvalid {
            path: path.to_owned(),
            reason: Some(e.to_string()),
        }),
    }
}

/// Error text with its source chain, for the model and the UI.
pub(crate) fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        // hyper and reqwest repeat their inner error in their own text; skip exact repeats.
        if !text.ends_with(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_display_drops_credentials_and_query() {
        let e = ProviderUrl::parse("https://user:secret@api.example.test/v1/?key=abc", "/chat")
            .unwrap();
        assert_eq!(e.to_string(), "https://api.example.test:443/v1/chat");
        assert!(!format!("{e:?}").contains("secret"));
        assert_eq!(e.url().query(), Some("key=abc"));
    }

    #[test]
    fn endpoint_names_the_default_port_and_brackets_ipv6() {
        let e = ProviderUrl::parse("http://[::1]/v1", "/messages").unwrap();
        assert_eq!(e.to_string(), "http://[::1]:80/v1/messages");
        assert!(e.is_loopback());
    }

    #[test]
    fn loopback_hosts_are_recognised_and_others_are_not() {
        for (url, lo) in [
            ("http://127.0.0.1:8000/v1", true),
            ("http://127.9.9.9/v1", true),
            ("http://localhost:11434/v1", true),
            ("http://LOCALHOST/v1", true),
            ("http://gpu-box.lan:8000/v1", false),
            ("http://10.0.0.2/v1", false),
            ("https://api.example.test/v1", false),
        ] {
            assert_eq!(
                ProviderUrl::parse(url, "").unwrap().is_loopback(),
                lo,
                "{url}"
            );
        }
    }

    #[test]
    fn bad_urls_and_schemes_are_typed_errors() {
        assert!(matches!(
            ProviderUrl::parse("not a url", ""),
            Err(TransportError::InvalidUrl { .. })
        ));
        assert!(matches!(
            ProviderUrl::parse("ftp://h/v1", ""),
            Err(TransportError::UnsupportedScheme { scheme }) if scheme == "ftp"
        ));
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = build_client(Some(&path), &Timeouts::default()).unwrap_err();
        assert!(matches!(err, TransportError::CaFileInvalid { .. }));
        assert!(err.to_string().contains("ca.pem"), "{err}");
        let missing = dir.path().join("missing.pem");
        let err = build_client(Some(&missing), &Timeouts::default()).unwrap_err();
        assert!(err.to_string().contains("missing.pem"), "{err}");
    }
}
