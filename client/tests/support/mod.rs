//! A scripted server peer on a Unix socket: the test decides every frame it sends.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the support module"
)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use baton_client::{ClientConfig, Endpoint};
use baton_protocol::{ClientMessage, Id, Outcome, Response, ServerCodec, ServerId, ServerMessage};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::UnixListener;
use tokio_util::codec::Framed;

/// Hang guard for every wait in these tests (never a synchronisation device).
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(20);

pub(crate) fn server_id() -> ServerId {
    ServerId::parse("00000000-0000-4000-8000-000000000001").unwrap()
}

pub(crate) fn other_server_id() -> ServerId {
    ServerId::parse("00000000-0000-4000-8000-000000000002").unwrap()
}

/// A listening socket in a fresh temporary directory.
pub(crate) struct Listener {
    pub(crate) path: PathBuf,
    listener: UnixListener,
}

impl Listener {
    pub(crate) fn bind() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "baton-client-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("server.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        Self { path, listener }
    }

    pub(crate) fn endpoint(&self) -> Endpoint {
        Endpoint::Unix(self.path.clone())
    }

    pub(crate) fn config(&self) -> ClientConfig {
        ClientConfig::new(self.endpoint())
    }

    pub(crate) async fn accept(&self) -> Peer {
        self.accept_within(HANG_GUARD)
            .await
            .expect("client connects")
    }

    /// The next connection, if the client makes one within `within` (in paused time, a
    /// virtual wait: `None` means the client never tried).
    pub(crate) async fn accept_within(&self, within: Duration) -> Option<Peer> {
        let (stream, _) = tokio::time::timeout(within, self.listener.accept())
            .await
            .ok()?
            .unwrap();
        Some(Peer::new(stream))
    }

    /// Accepts and completes the handshake as `server_id()`.
    pub(crate) async fn accept_ready(&self) -> Peer {
        let mut peer = self.accept().await;
        peer.handshake(server_id()).await;
        peer
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Any byte stream a scripted server can speak over (a Unix socket, TLS over TCP).
pub(crate) trait PeerStream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> PeerStream for T {}

/// The server end of one connection.
pub(crate) struct Peer {
    framed: Framed<Box<dyn PeerStream>, ServerCodec>,
}

impl Peer {
    /// The server end of an accepted `stream`.
    pub(crate) fn new(stream: impl PeerStream + 'static) -> Self {
        Self {
            framed: Framed::new(Box::new(stream), ServerCodec::default()),
        }
    }

    pub(crate) async fn recv(&mut self) -> ClientMessage {
        tokio::time::timeout(HANG_GUARD, self.framed.next())
            .await
            .expect("client sends a message")
            .expect("connection open")
            .expect("valid client frame")
    }

    /// Waits for the client to close the connection (EOF), failing on any other message.
    pub(crate) async fn expect_eof(&mut self) {
        let next = tokio::time::timeout(HANG_GUARD, self.framed.next())
            .await
            .expect("client closes");
        assert!(
            matches!(next, None | Some(Err(_))),
            "expected EOF, got {next:?}"
        );
    }

    pub(crate) async fn send(&mut self, msg: ServerMessage) {
        self.framed.send(msg).await.unwrap();
    }

    pub(crate) async fn send_raw(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        self.framed.get_mut().write_all(bytes).await.unwrap();
    }

    /// Reads one raw byte (of whatever the client is writing), bypassing the frame decoder:
    /// call only between frames, when the decoder holds nothing.
    pub(crate) async fn read_raw_byte(&mut self) -> u8 {
        use tokio::io::AsyncReadExt;
        tokio::time::timeout(HANG_GUARD, self.framed.get_mut().read_u8())
            .await
            .expect("client writes")
            .expect("connection open")
    }

    /// Reads raw bytes until the client closes the connection; returns how many.
    pub(crate) async fn read_raw_to_eof(&mut self) -> usize {
        use tokio::io::AsyncReadExt;
        let mut rest = Vec::new();
        tokio::time::timeout(HANG_GUARD, self.framed.get_mut().read_to_end(&mut rest))
            .await
            .expect("client closes")
            .expect("clean close")
    }

    pub(crate) async fn handshake(&mut self, id: ServerId) {
        assert_eq!(self.recv().await, ClientMessage::hello());
        self.send(ServerMessage::Hello { server_id: id }).await;
    }

    /// Receives a request, returning its id, target and call.
    pub(crate) async fn recv_request(&mut self) -> baton_protocol::Request {
        match self.recv().await {
            ClientMessage::Request(r) => r,
            other => panic!("expected a request, got {other:?}"),
        }
    }

    pub(crate) async fn respond(&mut self, id: &Id, outcome: Outcome) {
        self.send(ServerMessage::Response(Response {
            id: id.clone(),
            outcome,
        }))
        .await;
    }
}
