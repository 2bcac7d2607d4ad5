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
/// and latency-bound) and keepalive, plus on Linux a TCP user timeout of
/// [`KeepaliveConfig::dead_after`]. Failures are logged, not fatal. The server's listeners
/// apply it to every accepted TCP and TLS socket; an embedder that accepts its own (a web
/// listener) applies it with [`ServerConfig::tcp_keepalive`](crate::ServerConfig::tcp_keepalive).
pub fn configure_accepted(stream: &TcpStream, keepalive: Option<KeepaliveConfig>) {
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
        // Keepalive probes only go out while nothing is unacknowledged; with data in flight
        // to a vanished peer the kernel would retransmit for ~15 minutes. The user timeout
        // bounds that case by the same budget.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Err(error) = SockRef::from(stream).set_tcp_user_timeout(Some(k.dead_after())) {
            tracing::debug!(%error, "cannot set TCP_USER_TIMEOUT on accepted socket");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use std::time::Duration;

    use socket2::SockRef;
    use tokio::net::{TcpListener, TcpStream};

    use super::configure_accepted;
    use crate::config::{KeepaliveConfig, ServerConfig};

    /// A connection accepted on loopback, as the accept loop sees it.
    async fn accepted() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (server, client)
    }

    /// Half-open connections are the kernel's to detect: the documented defaults (30 s idle,
    /// 10 s interval, 3 probes) and no Nagle delay land on every accepted TCP/TLS socket.
    #[tokio::test]
    async fn accepted_sockets_get_the_default_keepalive_and_nodelay() {
        let id = baton_protocol::ServerId::parse("00000000-0000-4000-8000-000000000001").unwrap();
        let defaults = ServerConfig::new(id).tcp_keepalive;
        assert_eq!(defaults, Some(KeepaliveConfig::default()));
        let (server, _client) = accepted().await;
        assert!(!SockRef::from(&server).keepalive().unwrap());
        configure_accepted(&server, defaults);
        let sock = SockRef::from(&server);
        assert!(sock.keepalive().unwrap(), "SO_KEEPALIVE");
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(30));
        #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
        {
            assert_eq!(
                sock.tcp_keepalive_interval().unwrap(),
                Duration::from_secs(10)
            );
            assert_eq!(sock.tcp_keepalive_retries().unwrap(), 3);
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        assert_eq!(
            sock.tcp_user_timeout().unwrap(),
            Some(Duration::from_secs(60)),
            "TCP_USER_TIMEOUT = 30 s + 3 × 10 s"
        );
        assert!(server.nodelay().unwrap(), "TCP_NODELAY");
    }

    #[tokio::test]
    async fn keepalive_off_leaves_the_socket_alone_but_still_sets_nodelay() {
        let (server, _client) = accepted().await;
        configure_accepted(&server, None);
        assert!(!SockRef::from(&server).keepalive().unwrap());
        #[cfg(any(target_os = "linux", target_os = "android"))]
        assert_eq!(SockRef::from(&server).tcp_user_timeout().unwrap(), None);
        assert!(server.nodelay().unwrap());
    }

    #[tokio::test]
    async fn custom_keepalive_is_applied_as_configured() {
        let (server, _client) = accepted().await;
        let k = KeepaliveConfig::new(Duration::from_secs(7), Duration::from_secs(2), 5);
        configure_accepted(&server, Some(k));
        let sock = SockRef::from(&server);
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(7));
        #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
        {
            assert_eq!(
                sock.tcp_keepalive_interval().unwrap(),
                Duration::from_secs(2)
            );
            assert_eq!(sock.tcp_keepalive_retries().unwrap(), 5);
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        assert_eq!(
            sock.tcp_user_timeout().unwrap(),
            Some(Duration::from_secs(17))
        );
    }
}
