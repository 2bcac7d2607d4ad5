//! TCP listeners (plain and as the carrier for TLS).

use std::net::SocketAddr;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::{TcpListener, TcpStream};

use crate::config::KeepaliveConfig;
use crate::error::ListenError;

/// A bound TCP socket.
#[derive(Debug)]
pub(crate) struct BoundTcp {
    pub(crate) listener: TcpListener,
    pub(crate) local: SocketAddr,
}

impl BoundTcp {
    /// Binds `addr`, refusing plaintext on a non-loopback address unless allowed.
    pub(crate) async fn bind(
        addr: SocketAddr,
        plaintext: bool,
        allow_non_loopback: bool,
    ) -> Result<Self, ListenError> {
        if plaintext && !addr.ip().is_loopback() && !allow_non_loopback {
            return Err(ListenError::PlaintextNotLoopback { addr });
        }
        let io = |source| ListenError::Io {
            what: addr.to_string(),
            source,
        };
        let listener = TcpListener::bind(addr).await.map_err(io)?;
        let local = listener.local_addr().map_err(io)?;
        Ok(Self { listener, local })
    }
}

/// Applies per-socket options to an accepted TCP stream: no Nagle delay (frames are small
/// and latency-bound) and keepalive. Failures are logged, not fatal.
pub(crate) fn configure_accepted(stream: &TcpStream, keepalive: Option<KeepaliveConfig>) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "cannot disable Nagle on accepted socket");
    }
    if let Some(k) = keepalive {
        let params = TcpKeepalive::new()
            .with_time(k.time)
            .with_interval(k.interval);
        #[cfg(any(
            target_os = "linux",
            target_os = "android",
            target_os = "macos",
            target_os = "freebsd"
        ))]
        let params = params.with_retries(k.retries);
        if let Err(error) = SockRef::from(stream).set_tcp_keepalive(&params) {
            tracing::debug!(%error, "cannot enable TCP keepalive on accepted socket");
        }
    }
}
