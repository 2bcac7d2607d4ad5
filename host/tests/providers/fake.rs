//! A fake model server on 127.0.0.1 (plain HTTP or HTTPS with a CA made at test start) that
//! answers each request with the next scripted [`Reply`] and records the requests.
//!
//! Shared by two test crates: the providers suite (`host/tests/providers`) and the
//! process-level `baton-host serve` suite (`host/cli/tests/providers_cli.rs`, through
//! `#[path]`), so it uses only what both have: tokio, rustls, tokio-rustls, rcgen, tempfile.
//! A reply is taken when a request has been read, so a connection that sends none (the host's
//! start-up probe) uses none.

#![allow(
    dead_code,
    reason = "each test crate including this module uses its own subset of it"
)]

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// Bound on any one test's wait for the provider (a hang guard, never a synchronisation).
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(60);

/// How a streamed body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The terminating chunk: a clean end of body.
    Finish,
    /// The connection is closed mid-body (no terminating chunk).
    Cut,
    /// The connection stays open and silent until the client closes it (or the server is
    /// dropped); [`FakeServer::hanging`] reports each such reply once its pieces are written.
    Hang,
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// 200 `text/event-stream`, each item one chunk, then `end`.
    Stream {
        /// Raw SSE text pieces (e.g. `"data: {...}\n\n"`).
        pieces: Vec<String>,
        /// How the body ends.
        end: End,
    },
    /// A status with extra headers and a body.
    Status {
        /// The status code.
        code: u16,
        /// Extra headers.
        headers: Vec<(&'static str, String)>,
        /// The body.
        body: String,
    },
    /// The request is read, then the connection is closed without a byte of answer.
    Close,
    /// The request is read, then the connection is reset (TCP RST) without an answer.
    Reset,
}

impl Reply {
    /// `data:` events (chat-completions style), cleanly finished.
    pub(crate) fn data(payloads: &[&str]) -> Self {
        Self::Stream {
            pieces: payloads.iter().map(|p| format!("data: {p}\n\n")).collect(),
            end: End::Finish,
        }
    }

    /// Named events (Messages style: `event: <type>` + `data:`), cleanly finished. Each
    /// payload starts with its `{"type":"…"` member, which names the event.
    pub(crate) fn events(payloads: &[&str]) -> Self {
        Self::Stream {
            pieces: payloads
                .iter()
                .map(|p| format!("event: {}\ndata: {p}\n\n", event_type(p)))
                .collect(),
            end: End::Finish,
        }
    }

    /// The same stream, ending as `end`.
    pub(crate) fn ending(self, end: End) -> Self {
        match self {
            Self::Stream { pieces, .. } => Self::Stream { pieces, end },
            other => other,
        }
    }

    /// A JSON error answer.
    pub(crate) fn status(code: u16, body: &str) -> Self {
        Self::Status {
            code,
            headers: Vec::new(),
            body: body.to_owned(),
        }
    }

    /// A JSON error answer with `Retry-After: value` (seconds or an HTTP-date).
    pub(crate) fn retry_after_text(code: u16, value: &str) -> Self {
        Self::Status {
            code,
            headers: vec![("retry-after", value.to_owned())],
            body: r#"{"error":{"message":"slow down"}}"#.into(),
        }
    }

    /// A JSON error answer with `Retry-After: secs`.
    pub(crate) fn retry_after(code: u16, secs: u64) -> Self {
        Self::retry_after_text(code, &secs.to_string())
    }
}

/// The `type` of a payload written as `{"type":"…",…}`.
fn event_type(payload: &str) -> &str {
    payload
        .strip_prefix(r#"{"type":""#)
        .and_then(|rest| rest.split('"').next())
        .expect("a test event payload starts with its \"type\"")
}

/// One received request.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    /// Request line and headers.
    pub(crate) head: String,
    /// The body (JSON text).
    pub(crate) body: String,
}

impl Recorded {
    /// A header's value (case-insensitive name).
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }

    /// The request line.
    pub(crate) fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or("")
    }
}

/// What the connections share.
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    hanging: mpsc::UnboundedSender<()>,
}

/// The server; dropping it stops it and closes every connection it serves.
#[derive(Debug)]
pub(crate) struct FakeServer {
    /// `http(s)://127.0.0.1:PORT/v1`.
    pub(crate) base_url: String,
    /// PEM file of the CA that signed the server certificate (HTTPS only).
    pub(crate) ca_file: Option<PathBuf>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    hanging: mpsc::UnboundedReceiver<()>,
    /// The accept loop, which owns the connection tasks: dropping it aborts them all.
    _task: JoinSet<()>,
    _dir: Option<tempfile::TempDir>,
}

impl FakeServer {
    /// A plain-HTTP server answering `replies` in order (later requests get [`Reply::Close`]).
    pub(crate) async fn plain(replies: Vec<Reply>) -> Self {
        Self::start(replies, None).await
    }

    /// An HTTPS server with a fresh CA (written to [`FakeServer::ca_file`]).
    pub(crate) async fn tls(replies: Vec<Reply>) -> Self {
        let (config, ca_pem) = tls_config();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, ca_pem).expect("write CA");
        let mut s = Self::start(replies, Some(config)).await;
        s.ca_file = Some(path);
        s._dir = Some(dir);
        s
    }

    async fn start(replies: Vec<Reply>, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let (hanging_tx, hanging) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            replies: Mutex::new(replies.into()),
            hanging: hanging_tx,
        });
        let requests = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&requests);
        let mut task = JoinSet::new();
        task.spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                let shared = Arc::clone(&shared);
                let record = Arc::clone(&record);
                let tls = tls.clone();
                connections.spawn(async move {
                    connection(tcp, tls, &shared, &record).await;
                });
                // Reap finished connections so a long test does not accumulate them.
                while connections.try_join_next().is_some() {}
            }
        });
        Self {
            base_url: format!("{scheme}://{addr}/v1"),
            ca_file: None,
            requests,
            hanging,
            _task: task,
            _dir: None,
        }
    }

    /// The requests received so far.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("lock").clone()
    }

    /// Waits (hang-guarded) until a [`End::Hang`] reply has written its pieces.
    pub(crate) async fn hanging(&mut self) {
        tokio::time::timeout(HANG_GUARD, self.hanging.recv())
            .await
            .expect("hang guard: no reply reached its hang")
            .expect("the server stopped");
    }
}

/// Serves one connection (TLS first when configured); a [`Reply::Reset`] resets it.
async fn connection(
    tcp: TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    shared: &Shared,
    record: &Mutex<Vec<Recorded>>,
) {
    match tls {
        Some(cfg) => {
            // A connection that is not TLS (or a probe that only shakes hands) never reaches
            // a request, so takes no reply and is not recorded.
            let Ok(mut conn) = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await else {
                return;
            };
            if serve(&mut conn, shared, record).await {
                let _ = conn.get_ref().0.set_zero_linger();
            }
        }
        None => {
            let mut tcp = tcp;
            if serve(&mut tcp, shared, record).await {
                let _ = tcp.set_zero_linger();
            }
        }
    }
}

/// Reads one request and answers it; true when the connection is to be reset.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut S,
    shared: &Shared,
    record: &Mutex<Vec<Recorded>>,
) -> bool {
    let Some((head, body)) = read_request(conn).await else {
        return false;
    };
    record.lock().expect("lock").push(Recorded {
        head,
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let reply = shared
        .replies
        .lock()
        .expect("lock")
        .pop_front()
        .unwrap_or(Reply::Close);
    match reply {
        Reply::Close => false,
        Reply::Reset => true,
        Reply::Status {
            code,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {code} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(body.as_bytes()).await;
            let _ = conn.flush().await;
            let _ = conn.shutdown().await;
            false
        }
        Reply::Stream { pieces, end } => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
            if conn.write_all(head.as_bytes()).await.is_err() {
                return false;
            }
            for p in pieces {
                let chunk = format!("{:x}\r\n{p}\r\n", p.len());
                if conn.write_all(chunk.as_bytes()).await.is_err() {
                    return false;
                }
                let _ = conn.flush().await;
            }
            match end {
                End::Finish => {
                    let _ = conn.write_all(b"0\r\n\r\n").await;
                    let _ = conn.flush().await;
                    let _ = conn.shutdown().await;
                }
                End::Cut => {}
                End::Hang => {
                    let _ = shared.hanging.send(());
                    // Mid-reply until the client goes away.
                    let mut sink = [0u8; 1024];
                    while matches!(conn.read(&mut sink).await, Ok(n) if n > 0) {}
                }
            }
            false
        }
    }
}

async fn read_request<S: AsyncRead + Unpin>(conn: &mut S) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())
                .flatten()
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((head, buf[head_end..head_end + len].to_vec()))
}

/// A server config for 127.0.0.1 / localhost signed by a fresh CA, and the CA's PEM.
fn tls_config() -> (Arc<rustls::ServerConfig>, String) {
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "baton provider test CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).expect("CA");
    let issuer = Issuer::new(ca, ca_key);
    let mut server = CertificateParams::default();
    server.subject_alt_names = vec![
        SanType::IpAddress("127.0.0.1".parse().expect("ip")),
        SanType::DnsName("localhost".try_into().expect("name")),
    ];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_key = KeyPair::generate().expect("key");
    let server_cert = server.signed_by(&server_key, &issuer).expect("cert");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(server_cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        )
        .expect("server config");
    (Arc::new(config), ca_cert.pem())
}
