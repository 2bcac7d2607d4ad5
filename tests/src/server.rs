//! Starting a server with the test host on each transport.

use std::path::PathBuf;

use baton_server::{ClientAuth, Listener, Server, ServerConfig, TlsConfig};

use crate::TempDir;
use crate::certs::{Identity, TestCa};
use crate::host::TestHost;
use crate::peer::RawPeer;

/// A running server plus what a test needs to reach it.
#[derive(Debug)]
pub struct TestServer {
    /// The server.
    pub server: Server<TestHost>,
    /// The host it routes to (shared state).
    pub host: TestHost,
    /// Holds the Unix socket directory.
    pub dir: TempDir,
}

/// The default test configuration.
pub fn config() -> ServerConfig {
    ServerConfig::new(crate::server_id())
}

impl TestServer {
    /// A server on a Unix socket in a fresh directory.
    pub async fn unix(host: TestHost, config: ServerConfig) -> Self {
        let dir = TempDir::new();
        let server = Server::start(config, host.clone(), vec![Listener::unix(dir.path())])
            .await
            .expect("start unix server");
        Self { server, host, dir }
    }

    /// A server on loopback TCP.
    pub async fn tcp(host: TestHost, config: ServerConfig) -> Self {
        let server = Server::start(
            config,
            host.clone(),
            vec![Listener::tcp("127.0.0.1:0".parse().expect("addr"))],
        )
        .await
        .expect("start tcp server");
        Self {
            server,
            host,
            dir: TempDir::new(),
        }
    }

    /// A TLS server with a certificate from `ca`, optionally verifying clients against
    /// `client_ca`.
    pub async fn tls(
        host: TestHost,
        config: ServerConfig,
        server_identity: &Identity,
        client_ca: Option<(&TestCa, ClientAuth)>,
    ) -> Self {
        let tls = match client_ca {
            None => TlsConfig::from_pem(
                server_identity.cert_pem.as_bytes(),
                server_identity.key_pem.as_bytes(),
            ),
            Some((ca, auth)) => TlsConfig::with_client_ca(
                server_identity.cert_pem.as_bytes(),
                server_identity.key_pem.as_bytes(),
                ca.cert_pem().as_bytes(),
                auth,
            ),
        }
        .expect("tls config");
        let server = Server::start(
            config,
            host.clone(),
            vec![Listener::tls("127.0.0.1:0".parse().expect("addr"), tls)],
        )
        .await
        .expect("start tls server");
        Self {
            server,
            host,
            dir: TempDir::new(),
        }
    }

    /// The Unix socket path (Unix servers).
    pub fn socket_path(&self) -> PathBuf {
        self.server.local_addrs()[0]
            .unix_path()
            .expect("unix listener")
            .to_owned()
    }

    /// The TCP or TLS address.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.local_addrs()[0]
            .socket_addr()
            .expect("tcp listener")
    }

    /// A raw peer connected to the first listener (Unix or plain TCP).
    pub async fn connect(&self) -> RawPeer {
        match &self.server.local_addrs()[0] {
            baton_server::ListenAddr::Unix(p) => RawPeer::unix(p, crate::server_id()).await,
            other => RawPeer::tcp(other.socket_addr().expect("addr"), crate::server_id()).await,
        }
    }

    /// Connects and completes the handshake.
    pub async fn ready_peer(&self) -> RawPeer {
        let mut p = self.connect().await;
        p.handshake().await;
        p
    }
}
