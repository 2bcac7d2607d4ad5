//! Opening the byte stream for an endpoint: Unix, TCP, or TLS over TCP.

use std::pin::Pin;
use std::sync::Arc;

use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

use crate::config::KeepaliveConfig;
use crate::endpoint::Endpoint;
use crate::error::ConnectError;
use crate::tls::{self, TlsFailure};

/// Any byte stream the client can speak over.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> Stream for T {}

/// A boxed transport.
pub(crate) type BoxStream = Pin<Box<dyn Stream>>;

/// Opens the transport. TLS configuration is built by the caller once per client.
pub(crate) async fn open(
    endpoint: &Endpoint,
    tls: Option<(&Arc<rustls::ClientConfig>, Option<&str>)>,
    keepalive: Option<KeepaliveConfig>,
) -> Result<BoxStream, ConnectError> {
    let io_err = |source| ConnectError::Io {
        endpoint: endpoint.clone(),
        source,
    };
    match endpoint {
        Endpoint::Unix(path) => Ok(Box::pin(UnixStream::connect(path).await.map_err(io_err)?)),
        Endpoint::Tcp { host, port } => {
            let tcp = TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(io_err)?;
            // Small frames are latency-bound: do not wait to coalesce.
            tcp.set_nodelay(true).map_err(io_err)?;
            set_keepalive(&tcp, keepalive).map_err(io_err)?;
            Ok(Box::pin(tcp))
        }
        Endpoint::Tls { host, port } => {
            let tls_err = |reason: String| ConnectError::Tls {
                endpoint: endpoint.clone(),
                reason,
                failure: TlsFailure::Other,
            };
            let (config, name_override) =
                tls.ok_or_else(|| tls_err("no TLS configuration".to_owned()))?;
            let name = name_override.unwrap_or(host);
            let server_name = ServerName::try_from(name.to_owned())
                .map_err(|_| tls_err(format!("{name:?} is not a valid server name")))?;
            let tcp = TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(io_err)?;
            tcp.set_nodelay(true).map_err(io_err)?;
            set_keepalive(&tcp, keepalive).map_err(io_err)?;
            let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
            let stream =
                connector
                    .connect(server_name, tcp)
                    .await
                    .map_err(|e| ConnectError::Tls {
                        endpoint: endpoint.clone(),
                        reason: e.to_string(),
                        failure: tls::tls_failure(&e),
                    })?;
            Ok(Box::pin(stream))
        }
    }
}

/// Keepalive probes, and on Linux a user timeout of the same budget so data sent to a
/// vanished server does not sit in retransmission for ~15 minutes.
fn set_keepalive(tcp: &TcpStream, keepalive: Option<KeepaliveConfig>) -> std::io::Result<()> {
    let Some(k) = keepalive else {
        return Ok(());
    };
    let params = socket2::TcpKeepalive::new()
        .with_time(k.time)
        .with_interval(k.interval);
    #[cfg(any(
        target_os = "linux",
        target_os = "android",
        target_os = "macos",
        target_os = "freebsd"
    ))]
    let params = params.with_retries(k.retries);
    let sock = socket2::SockRef::from(tcp);
    sock.set_tcp_keepalive(&params)?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    sock.set_tcp_user_timeout(Some(k.dead_after()))?;
    Ok(())
}
