//! A fake model server on 127.0.0.1 (plain HTTP or HTTPS with a CA made at test start) that
//! answers each connection with the next scripted [`Reply`] and records the requests.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use baton_host::message::AssistantMessage;
use baton_host::provider::retry::{RetryPolicy, SleepFn};
use baton_host::provider::{AssistantBuilder, ModelRequest, Provider, ProviderEvent};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Bound on any one test's wait for the provider (a hang guard, never a synchronisation).
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(60);

/// How a streamed body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The terminating chunk: a clean end of body.
    Finish,
    /// The connection is closed mid-body (no terminating chunk).
    Cut,
    /// The connection stays open and silent until the server is dropped.
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
}

impl Reply {
    /// `data:` events (chat-completions style), cleanly finished.
    pub(crate) fn data(payloads: &[&str]) -> Self {
        Self::Stream {
            pieces: payloads.iter().map(|p| format!("data: {p}\n\n")).collect(),
            end: End::Finish,
        }
    }

    /// Named events (Messages style: `event: <type>` + `data:`), cleanly finished.
    pub(crate) fn events(payloads: &[&str]) -> Self {
        Self::Stream {
            pieces: payloads
                .iter()
                .map(|p| {
                    let v: serde_json::Value = serde_json::from_str(p).expect("test JSON");
                    format!("event: {}\ndata: {p}\n\n", v["type"].as_str().unwrap_or(""))
                })
                .collect(),
            end: End::Finish,
        }
    }

    /// The same stream, ending as `end`.
    pub(crate) fn ending(self, end: End) -> Self {
        match self {
            Self::Stream { pieces, .. } => Self::Stream { pieces, end },
            other @ Self::Status { .. } => other,
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

    /// A JSON error answer with `Retry-After: secs`.
    pub(crate) fn retry_after(code: u16, secs: u64) -> Self {
        Self::Status {
            code,
            headers: vec![("retry-after", secs.to_string())],
            body: r#"{"error":{"message":"slow down"}}"#.into(),
        }
    }
}

/// One received request.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    /// Request line and headers.
    pub(crate) head: String,
    /// The JSON body.
    pub(crate) body: serde_json::Value,
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

/// The server; dropping it stops it (and closes hanging connections).
#[derive(Debug)]
pub(crate) struct FakeServer {
    /// `http(s)://127.0.0.1:PORT/v1`.
    pub(crate) base_url: String,
    /// PEM file of the CA that signed the server certificate (HTTPS only).
    pub(crate) ca_file: Option<PathBuf>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    stop: CancellationToken,
    tracker: TaskTracker,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        // The accept task sees the token at its next await and ends; nothing waits for it.
        self.stop.cancel();
        self.tracker.close();
    }
}

impl FakeServer {
    /// A plain-HTTP server answering `replies` in order (later connections are closed).
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
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let task_requests = Arc::clone(&requests);
        let task_stop = stop.clone();
        let tracker = TaskTracker::new();
        tracker.spawn(async move {
            let mut replies = replies.into_iter();
            loop {
                let (tcp, _) = tokio::select! {
                    () = task_stop.cancelled() => return,
                    r = listener.accept() => match r { Ok(c) => c, Err(_) => return },
                };
                let reply = replies.next();
                let record = Arc::clone(&task_requests);
                let stop = task_stop.clone();
                let tls = tls.clone();
                // One connection at a time, in order: the provider retries sequentially.
                let served = async move {
                    match tls {
                        Some(cfg) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
                            if let Ok(conn) = acceptor.accept(tcp).await {
                                serve(conn, reply, &record, &stop).await;
                            }
                        }
                        None => serve(tcp, reply, &record, &stop).await,
                    }
                };
                tokio::select! {
                    () = task_stop.cancelled() => return,
                    () = served => {}
                }
            }
        });
        Self {
            base_url: format!("{scheme}://{addr}/v1"),
            ca_file: None,
            requests,
            stop,
            tracker,
            _dir: None,
        }
    }

    /// The requests received so far.
    pub(crate) fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("lock").clone()
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut conn: S,
    reply: Option<Reply>,
    record: &Mutex<Vec<Recorded>>,
    stop: &CancellationToken,
) {
    let Some((head, body)) = read_request(&mut conn).await else {
        return;
    };
    let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    record.lock().expect("lock").push(Recorded { head, body });
    let Some(reply) = reply else { return };
    match reply {
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
        }
        Reply::Stream { pieces, end } => {
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
            if conn.write_all(head.as_bytes()).await.is_err() {
                return;
            }
            for p in pieces {
                let chunk = format!("{:x}\r\n{p}\r\n", p.len());
                if conn.write_all(chunk.as_bytes()).await.is_err() {
                    return;
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
                End::Hang => stop.cancelled().await,
            }
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

/// A retry policy that records each wait and returns at once.
pub(crate) fn recording_retry() -> (RetryPolicy, Arc<Mutex<Vec<Duration>>>) {
    let waits = Arc::new(Mutex::new(Vec::new()));
    let w = Arc::clone(&waits);
    let sleep: SleepFn = Arc::new(move |d| {
        w.lock().expect("lock").push(d);
        Box::pin(async {})
    });
    (RetryPolicy::default().with_sleep(sleep), waits)
}

/// A retry policy whose wait never ends, reporting when it starts.
pub(crate) fn stuck_retry() -> (RetryPolicy, mpsc::UnboundedReceiver<Duration>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let sleep: SleepFn = Arc::new(move |d| {
        let _ = tx.send(d);
        Box::pin(std::future::pending())
    });
    (RetryPolicy::default().with_sleep(sleep), rx)
}

/// Runs one call to the end: the settled message and every event.
pub(crate) async fn call(
    provider: &dyn Provider,
    request: ModelRequest,
) -> (AssistantMessage, Vec<ProviderEvent>) {
    call_with(provider, request, CancellationToken::new()).await
}

/// [`call`] with a cancellation token (cancelled tokens settle as `aborted`).
pub(crate) async fn call_with(
    provider: &dyn Provider,
    request: ModelRequest,
    cancel: CancellationToken,
) -> (AssistantMessage, Vec<ProviderEvent>) {
    let model = request.model.clone();
    let mut stream = provider.stream(request, cancel.clone());
    let mut builder = AssistantBuilder::new(provider.api(), provider.id(), &model, 1);
    let mut events = Vec::new();
    loop {
        let ev = tokio::time::timeout(HANG_GUARD, stream.next())
            .await
            .expect("hang guard: the provider stream stalled");
        let Some(ev) = ev else { break };
        events.push(ev.clone());
        builder.apply(ev);
        if builder.is_finished() {
            break;
        }
    }
    (builder.finish(cancel.is_cancelled()), events)
}
