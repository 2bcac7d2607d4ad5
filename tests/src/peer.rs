//! A client that speaks raw frames, for driving the server byte by byte.

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use baton_protocol::codec::{ServerMessageDecoder, encode_frame};
use baton_protocol::{
    Cancel, ClientMessage, Id, Map, Outcome, Request, Response, ServerId, ServerMessage,
    SessionTarget, Target, Value, WireError,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::{HANG_GUARD, guard};

/// Any byte stream.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// What [`RawPeer::next_event`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A decoded server message.
    Message(ServerMessage),
    /// End of stream (or a reset).
    Closed,
}

/// A frame-level client.
pub struct RawPeer {
    io: Pin<Box<dyn Io>>,
    decoder: ServerMessageDecoder,
    pending: std::collections::VecDeque<ServerMessage>,
    /// The server id used for targets.
    pub server_id: ServerId,
    next_request: u64,
}

impl std::fmt::Debug for RawPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawPeer").finish_non_exhaustive()
    }
}

/// A `{serviceId, member, args}` call value.
pub fn call(service: &str, member: &str, args: Vec<Value>) -> Value {
    let mut m = Map::new();
    m.insert("serviceId", Value::from(service));
    m.insert("member", Value::from(member));
    m.insert("args", Value::Array(args));
    Value::Map(m)
}

/// `Id` from a literal.
pub fn id(s: &str) -> Id {
    Id::new(s).expect("non-empty id")
}

impl RawPeer {
    /// Wraps a connected stream.
    pub fn new(io: impl Io + 'static, server_id: ServerId) -> Self {
        Self {
            io: Box::pin(io),
            decoder: ServerMessageDecoder::new(u32::MAX),
            pending: std::collections::VecDeque::new(),
            server_id,
            next_request: 0,
        }
    }

    /// Connects to a Unix socket.
    pub async fn unix(path: &Path, server_id: ServerId) -> Self {
        let s = tokio::net::UnixStream::connect(path)
            .await
            .expect("connect unix");
        Self::new(s, server_id)
    }

    /// Connects over plain TCP.
    pub async fn tcp(addr: SocketAddr, server_id: ServerId) -> Self {
        let s = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connect tcp");
        Self::new(s, server_id)
    }

    /// Connects over TLS, trusting `ca_pem`, optionally presenting a client identity.
    ///
    /// # Errors
    /// The TLS handshake error.
    pub async fn tls(
        addr: SocketAddr,
        server_id: ServerId,
        ca_pem: &str,
        client: Option<&crate::certs::Identity>,
    ) -> std::io::Result<Self> {
        let config = tls_client_config(ca_pem, client);
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        let name = rustls_pki_types::ServerName::try_from("localhost").expect("valid name");
        let tls = connector.connect(name, tcp).await?;
        Ok(Self::new(tls, server_id))
    }

    /// Connects over TLS to a listener that must refuse the client, and returns the error
    /// that ends the connection: the handshake's, or (TLS 1.3, where the client finishes its
    /// half first and the server's verdict on its certificate follows) the first read's after
    /// a hello is sent. A clean end of stream is [`std::io::ErrorKind::UnexpectedEof`].
    ///
    /// # Panics
    /// If the server sends anything but the refusal, or nothing within [`HANG_GUARD`].
    pub async fn tls_refusal(
        addr: SocketAddr,
        server_id: ServerId,
        ca_pem: &str,
        client: Option<&crate::certs::Identity>,
    ) -> std::io::Error {
        let mut peer = match Self::tls(addr, server_id, ca_pem, client).await {
            Ok(peer) => peer,
            Err(e) => return e,
        };
        // The server may already have closed: the read below sees what it sent first.
        let _ = peer
            .try_send_bytes(&Self::frame(&ClientMessage::hello()))
            .await;
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(HANG_GUARD, peer.io.read(&mut buf)).await {
            Err(_) => panic!("hung waiting for the server to refuse the TLS client"),
            Ok(Ok(0)) => std::io::ErrorKind::UnexpectedEof.into(),
            Ok(Ok(n)) => panic!("a refused TLS client got {n} bytes: {:02x?}", &buf[..n]),
            Ok(Err(e)) => e,
        }
    }

    /// Sends raw bytes.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        self.io.write_all(bytes).await.expect("write");
        self.io.flush().await.expect("flush");
    }

    /// Sends raw bytes; reports failure instead of panicking.
    pub async fn try_send_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.io.write_all(bytes).await?;
        self.io.flush().await
    }

    /// Encodes one client message as a frame.
    pub fn frame(msg: &ClientMessage) -> Vec<u8> {
        encode_frame(msg, u32::MAX).expect("encode").to_vec()
    }

    /// Sends one message.
    pub async fn send(&mut self, msg: &ClientMessage) {
        self.send_bytes(&Self::frame(msg)).await;
    }

    /// Half-closes the write side.
    pub async fn shutdown(&mut self) {
        let _ = self.io.shutdown().await;
    }

    /// Sends hello and expects the server hello.
    pub async fn handshake(&mut self) {
        self.send(&ClientMessage::hello()).await;
        let m = self.recv().await;
        assert_eq!(
            m,
            ServerMessage::Hello {
                server_id: self.server_id.clone()
            }
        );
    }

    /// The next event (message or close), waiting at most [`HANG_GUARD`].
    pub async fn next_event(&mut self) -> Event {
        if let Some(m) = self.pending.pop_front() {
            return Event::Message(m);
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match tokio::time::timeout(HANG_GUARD, self.io.read(&mut buf)).await {
                Ok(Ok(n)) => n,
                Ok(Err(_)) => 0,
                Err(_) => panic!("hung waiting for a server frame"),
            };
            if n == 0 {
                return Event::Closed;
            }
            let msgs = self
                .decoder
                .push(&buf[..n])
                .expect("server sent a valid frame");
            self.pending.extend(msgs);
            if let Some(m) = self.pending.pop_front() {
                return Event::Message(m);
            }
        }
    }

    /// The next message; panics on close.
    pub async fn recv(&mut self) -> ServerMessage {
        match self.next_event().await {
            Event::Message(m) => m,
            Event::Closed => panic!("connection closed while a message was expected"),
        }
    }

    /// Expects end of stream with no further message.
    pub async fn expect_closed(&mut self) {
        match self.next_event().await {
            Event::Closed => {}
            Event::Message(m) => panic!("expected close, got {m:?}"),
        }
    }

    /// Expects `hello_error{code, message}` and then end of stream.
    pub async fn expect_hello_error(&mut self, code: &str, message: &str) {
        let m = self.recv().await;
        assert_eq!(m, ServerMessage::HelloError(WireError::new(code, message)));
        self.expect_closed().await;
    }

    /// A server target for this peer's server.
    pub fn server_target(&self) -> Target {
        Target::Server(self.server_id.clone())
    }

    /// A fresh request id (`request-<n>`).
    pub fn next_id(&mut self) -> Id {
        self.next_request += 1;
        id(&format!("request-{}", self.next_request))
    }

    /// Sends a request with an explicit id.
    pub async fn request_with_id(&mut self, rid: &Id, target: Target, call: Value) {
        self.send(&ClientMessage::Request(Request {
            id: rid.clone(),
            target,
            call,
        }))
        .await;
    }

    /// Sends a request and returns its id.
    pub async fn request(&mut self, target: Target, call: Value) -> Id {
        let rid = self.next_id();
        self.request_with_id(&rid, target, call).await;
        rid
    }

    /// Sends a cancel.
    pub async fn cancel(&mut self, rid: &Id, target: Target) {
        self.send(&ClientMessage::Cancel(Cancel {
            id: rid.clone(),
            target,
        }))
        .await;
    }

    /// Expects the next message to be the response to `rid`; returns its outcome.
    pub async fn expect_response(&mut self, rid: &Id) -> Outcome {
        match self.recv().await {
            ServerMessage::Response(Response { id, outcome }) if &id == rid => outcome,
            other => panic!("expected response to {rid}, got {other:?}"),
        }
    }

    /// Calls and waits for the response (nothing else may arrive in between).
    pub async fn call(&mut self, target: Target, call: Value) -> Outcome {
        let rid = self.request(target, call).await;
        self.expect_response(&rid).await
    }

    /// Expects an `attachment` message.
    pub async fn expect_attachment(&mut self) -> Option<SessionTarget> {
        match self.recv().await {
            ServerMessage::Attachment(a) => a,
            other => panic!("expected attachment, got {other:?}"),
        }
    }

    /// Attaches to `session` through the test host's `pi.session-management.attach` and
    /// returns the route (expects the attachment frame, then the `null` result).
    pub async fn attach(&mut self, session: &str) -> SessionTarget {
        let rid = self
            .request(
                self.server_target(),
                call(
                    "pi.session-management",
                    "attach",
                    vec![Value::from(session)],
                ),
            )
            .await;
        let route = self.expect_attachment().await.expect("attached route");
        assert_eq!(
            self.expect_response(&rid).await,
            Outcome::Value(Value::Null)
        );
        route
    }
}

/// Convenience for asserting an error outcome.
pub fn error(code: &str, message: &str) -> Outcome {
    Outcome::Error(WireError::new(code, message))
}

/// The TLS error an I/O error carries, if it carries one (tokio-rustls reports rustls errors,
/// alerts received included, as [`std::io::ErrorKind::InvalidData`] wrapping them).
pub fn tls_error(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref()
}

/// The record of the fatal `alert` a TLS server writes to a peer it refuses before any key is
/// agreed (in the clear).
pub fn plaintext_alert(alert: rustls::AlertDescription) -> Vec<u8> {
    const FATAL: u8 = 2;
    let mut record = vec![u8::from(rustls::ContentType::Alert)];
    record.extend(rustls::ProtocolVersion::TLSv1_2.to_array());
    record.extend([0, 2, FATAL, u8::from(alert)]);
    record
}

fn tls_client_config(
    ca_pem: &str,
    client: Option<&crate::certs::Identity>,
) -> rustls::ClientConfig {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.expect("CA pem")).expect("add CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots);
    match client {
        None => builder.with_no_client_auth(),
        Some(id) => {
            let chain = vec![CertificateDer::from(id.cert_der.clone())];
            let key = PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).expect("client key");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client auth")
        }
    }
}

/// Waits, with the hang guard, for `f` to become true, polling after each `notify` wakeup.
pub async fn until(what: &str, notify: &tokio::sync::Notify, mut f: impl FnMut() -> bool) {
    guard(what, async {
        loop {
            let n = notify.notified();
            if f() {
                return;
            }
            n.await;
        }
    })
    .await;
}
