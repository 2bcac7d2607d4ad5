//! The start-up reachability probe of a configured provider: one connection, nothing sent.
//!
//! `baton-host serve` runs one probe per remote provider beside serving (so start-up never
//! waits for the network): resolve the base URL's host, connect over TCP, and for `https://`
//! complete a TLS handshake with the roots the provider's client trusts (a wrong or missing CA
//! is the common failure), all within [`PROBE_TIMEOUT`]. No HTTP request is sent, so nothing
//! is billed and nothing is logged upstream. When the environment's proxy variables
//! (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, minus `NO_PROXY`; the same rules reqwest
//! applies) route the provider through a proxy, the proxy is connected to instead and the
//! failure says so. A failure is one warning line naming the provider, the URL (never the
//! key) and the cause; the host serves either way.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::client::proxy::matcher::Matcher;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

use super::config::ProviderConfig;
use super::transport::{ProviderUrl, trust_anchors};

/// Bound on one probe: resolving, connecting and the TLS handshake together.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Where a probe connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTarget {
    /// The provider's base URL as `scheme://host:port/path` (no credentials or query).
    pub url: String,
    /// Host to connect to (the proxy's when [`ProbeTarget::proxy`] is set; no IPv6 brackets).
    pub host: String,
    /// Port to connect to.
    pub port: u16,
    /// Complete a TLS handshake with this name (direct `https://` only).
    pub tls: bool,
    /// The proxy the provider's requests go through, as `scheme://host:port`.
    pub proxy: Option<String>,
}

impl ProbeTarget {
    /// The target for `base_url` under the proxy rules `proxies`.
    ///
    /// # Errors
    /// The base URL's parse failure (already a start-up warning of its own).
    pub fn plan(base_url: &str, proxies: &Matcher) -> Result<Self, String> {
        let endpoint = ProviderUrl::parse(base_url, "").map_err(|e| e.to_string())?;
        let url = endpoint.url();
        let host = unbracket(url.host_str().unwrap_or("")).to_owned();
        let port = url.port_or_known_default().unwrap_or(0);
        let https = endpoint.is_https();
        let origin = format!("{}://{}:{port}/", url.scheme(), bracket(&host))
            .parse::<hyper::Uri>()
            .map_err(|e| e.to_string())?;
        if let Some(intercept) = proxies.intercept(&origin) {
            let proxy = intercept.uri();
            let proxy_host = unbracket(proxy.host().unwrap_or("")).to_owned();
            let proxy_port = proxy.port_u16().unwrap_or(match proxy.scheme_str() {
                Some("https") => 443,
                Some("socks5" | "socks5h") => 1080,
                _ => 80,
            });
            return Ok(Self {
                url: endpoint.to_string(),
                proxy: Some(format!(
                    "{}://{}:{proxy_port}",
                    proxy.scheme_str().unwrap_or("http"),
                    bracket(&proxy_host)
                )),
                host: proxy_host,
                port: proxy_port,
                tls: false,
            });
        }
        Ok(Self {
            url: endpoint.to_string(),
            host,
            port,
            tls: https,
            proxy: None,
        })
    }
}

/// Why a probe failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeCause {
    /// The host name did not resolve.
    Dns(String),
    /// Nothing listens there.
    Refused,
    /// The TLS handshake failed (e.g. `unknown issuer`: the CA is not trusted).
    Tls(String),
    /// Nothing answered within [`PROBE_TIMEOUT`].
    TimedOut(Duration),
    /// Another connection failure.
    Io(String),
}

impl fmt::Display for ProbeCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dns(e) => write!(f, "dns lookup failed ({e})"),
            Self::Refused => f.write_str("connection refused"),
            Self::Tls(e) => write!(f, "tls: {e}"),
            Self::TimedOut(d) => write!(f, "timed out after {} s", d.as_secs_f64()),
            Self::Io(e) => f.write_str(e),
        }
    }
}

/// A failed probe: the provider, what was connected to, and why it failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe(.target, .cause))]
pub struct ProbeFailure {
    /// The provider id.
    pub provider: String,
    /// What was probed.
    pub target: ProbeTarget,
    /// Why it failed.
    pub cause: ProbeCause,
}

fn describe(target: &ProbeTarget, cause: &ProbeCause) -> String {
    match &target.proxy {
        Some(proxy) => format!(
            "cannot reach the proxy {proxy} (from the environment's *_PROXY variables) for {}: {cause}",
            target.url
        ),
        None => format!("cannot reach {}: {cause}", target.url),
    }
}

/// Probes `config` under the environment's proxy rules, within [`PROBE_TIMEOUT`].
///
/// # Errors
/// A [`ProbeFailure`] naming the provider, the URL and the cause. A base URL that does not
/// parse or a CA file that cannot be read is not probed (`Ok(None)`): start-up validation
/// warns about those already.
pub async fn probe(config: &ProviderConfig) -> Result<Option<ProbeTarget>, ProbeFailure> {
    probe_with(config, &Matcher::from_env(), PROBE_TIMEOUT).await
}

/// [`probe`] with explicit proxy rules and time limit.
///
/// # Errors
/// As [`probe`].
pub async fn probe_with(
    config: &ProviderConfig,
    proxies: &Matcher,
    limit: Duration,
) -> Result<Option<ProbeTarget>, ProbeFailure> {
    let Ok(target) = ProbeTarget::plan(&config.base_url, proxies) else {
        return Ok(None);
    };
    let tls = if target.tls {
        match tls_connector(config) {
            Some(c) => Some(c),
            None => return Ok(None),
        }
    } else {
        None
    };
    let fail = |cause| ProbeFailure {
        provider: config.id.clone(),
        target: target.clone(),
        cause,
    };
    match tokio::time::timeout(limit, connect(&target, tls)).await {
        Ok(Ok(())) => Ok(Some(target.clone())),
        Ok(Err(cause)) => Err(fail(cause)),
        Err(_) => Err(fail(ProbeCause::TimedOut(limit))),
    }
}

/// Probes `config` and logs the outcome: a warning on failure, a debug line on success.
pub async fn probe_and_warn(config: ProviderConfig) {
    match probe(&config).await {
        Ok(Some(target)) => tracing::debug!(
            provider = %config.id,
            url = %target.url,
            proxy = target.proxy.as_deref().unwrap_or("none"),
            "provider endpoint reachable"
        ),
        Ok(None) => {}
        Err(failure) => tracing::warn!(provider = %failure.provider, "{failure}"),
    }
}

/// The TLS client for `config`'s roots, or `None` when they cannot be read (already a
/// start-up warning).
fn tls_connector(config: &ProviderConfig) -> Option<tokio_rustls::TlsConnector> {
    let anchors = trust_anchors(config.ca_file.as_deref()).ok()?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(anchors);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Some(tokio_rustls::TlsConnector::from(Arc::new(client)))
}

/// Resolves, connects to the first address that accepts, and shakes hands if asked.
async fn connect(
    target: &ProbeTarget,
    tls: Option<tokio_rustls::TlsConnector>,
) -> Result<(), ProbeCause> {
    let addrs: Vec<_> = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(|e| ProbeCause::Dns(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(ProbeCause::Dns("no addresses".into()));
    }
    let mut last = ProbeCause::Refused;
    let mut tcp = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                last = ProbeCause::Refused;
            }
            Err(e) => last = ProbeCause::Io(e.to_string()),
        }
    }
    let tcp = tcp.ok_or(last)?;
    let Some(connector) = tls else {
        return Ok(());
    };
    let name = ServerName::try_from(target.host.clone())
        .map_err(|e| ProbeCause::Tls(format!("invalid server name: {e}")))?;
    connector
        .connect(name, tcp)
        .await
        .map(drop)
        .map_err(|e| ProbeCause::Tls(tls_reason(&e)))
}

/// A handshake failure in a few words (`unknown issuer`, `certificate expired`, …).
fn tls_reason(e: &std::io::Error) -> String {
    use rustls::CertificateError as C;
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(c)) => match c {
            C::UnknownIssuer => "unknown issuer".into(),
            C::Expired | C::ExpiredContext { .. } => "certificate expired".into(),
            C::NotValidYet | C::NotValidYetContext { .. } => "certificate not yet valid".into(),
            C::NotValidForName | C::NotValidForNameContext { .. } => {
                "certificate not valid for this host name".into()
            }
            other => format!("invalid certificate ({other:?})"),
        },
        Some(other) => other.to_string(),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            "the server closed the connection during the handshake".into()
        }
        None => e.to_string(),
    }
}

fn unbracket(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

fn bracket(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    fn no_proxy() -> Matcher {
        Matcher::builder().build()
    }

    #[test]
    fn a_direct_target_is_the_base_urls_host_and_port_with_tls_for_https() {
        let t = ProbeTarget::plan("https://api.example.test/v1", &no_proxy()).unwrap();
        assert_eq!(
            t,
            ProbeTarget {
                url: "https://api.example.test:443/v1".into(),
                host: "api.example.test".into(),
                port: 443,
                tls: true,
                proxy: None,
            }
        );
        let t = ProbeTarget::plan("http://[::1]:8080/v1", &no_proxy()).unwrap();
        assert_eq!((t.host.as_str(), t.port, t.tls), ("::1", 8080, false));
    }

    #[test]
    fn a_proxied_target_is_the_proxy_named_without_its_credentials() {
        let proxies = Matcher::builder()
            .https("http://user:hunter2@proxy.corp.test:3128")
            .no("localhost,127.0.0.1")
            .build();
        let t = ProbeTarget::plan("https://api.example.test/v1", &proxies).unwrap();
        assert_eq!(t.proxy.as_deref(), Some("http://proxy.corp.test:3128"));
        assert_eq!(
            (t.host.as_str(), t.port, t.tls),
            ("proxy.corp.test", 3128, false)
        );
        let failure = ProbeFailure {
            provider: "p".into(),
            target: t,
            cause: ProbeCause::Refused,
        };
        let text = failure.to_string();
        assert_eq!(
            text,
            "cannot reach the proxy http://proxy.corp.test:3128 (from the environment's *_PROXY variables) for https://api.example.test:443/v1: connection refused"
        );
        assert!(!text.contains("hunter2"));
        // NO_PROXY and a scheme without a proxy go direct.
        let t = ProbeTarget::plan("https://127.0.0.1:9/v1", &proxies).unwrap();
        assert_eq!(t.proxy, None);
        let t = ProbeTarget::plan("http://gpu-box.test/v1", &proxies).unwrap();
        assert_eq!(t.proxy, None);
    }

    #[tokio::test]
    async fn a_closed_port_is_connection_refused_naming_the_url() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let config = ProviderConfig::openai(format!("http://{addr}/v1"));
        let failure = probe_with(&config, &no_proxy(), PROBE_TIMEOUT)
            .await
            .unwrap_err();
        assert_eq!(failure.cause, ProbeCause::Refused);
        assert_eq!(
            failure.to_string(),
            format!("cannot reach http://{addr}/v1: connection refused")
        );
        assert_eq!(failure.provider, "openai");
    }

    #[tokio::test]
    async fn a_listening_server_passes_and_receives_not_a_single_byte() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = ProviderConfig::openai(format!("http://{addr}/v1"));
        let server = async {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut received = Vec::new();
            conn.read_to_end(&mut received).await.unwrap();
            received
        };
        let proxies = no_proxy();
        let (outcome, received) =
            tokio::join!(probe_with(&config, &proxies, PROBE_TIMEOUT), server);
        assert_eq!(outcome.unwrap().unwrap().url, format!("http://{addr}/v1"));
        assert!(received.is_empty(), "the probe sent {received:?}");
    }

    #[tokio::test]
    async fn a_server_that_never_completes_the_handshake_times_out_within_the_limit() {
        // The kernel accepts the TCP connection (backlog); nobody ever answers the TLS hello.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = ProviderConfig::openai(format!("https://{addr}/v1"));
        let limit = Duration::from_millis(200);
        let failure = probe_with(&config, &no_proxy(), limit).await.unwrap_err();
        assert_eq!(failure.cause, ProbeCause::TimedOut(limit));
        assert_eq!(
            failure.to_string(),
            format!("cannot reach https://{addr}/v1: timed out after 0.2 s")
        );
        drop(listener);
    }

    #[tokio::test]
    async fn an_unusable_base_url_is_not_probed() {
        let config = ProviderConfig::openai("ftp://example.test/v1");
        assert_eq!(
            probe_with(&config, &no_proxy(), PROBE_TIMEOUT).await,
            Ok(None)
        );
    }
}
