//! A web listener in front of a server with the test host, a fake gate, raw HTTP and a
//! WebSocket client.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use baton_host::web::{
    PairRefused, Paired, WebConfig, WebGate, WebListener, WebPeer, WsBytes, websocket_config,
};
use baton_server::{Listener, Server, ServerConfig};
use baton_tests::host::TestHost;
use baton_tests::peer::RawPeer;
use baton_tests::{guard, server_id};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_util::sync::CancellationToken;

/// The cookie value of token `id` in the fake gate.
pub(crate) fn cookie_of(id: &str) -> String {
    format!("secret-{id}")
}

/// A gate with codes and tokens set by the test: `code-<id>` pairs once for token `<id>`;
/// `expired` is refused as expired.
#[derive(Default)]
pub(crate) struct FakeGate {
    inner: Mutex<Gate>,
}

#[derive(Default)]
struct Gate {
    codes: HashMap<String, String>,
    tokens: HashMap<String, WebPeer>,
}

impl FakeGate {
    /// A live token `id` (cookie [`cookie_of`]) and an unused code `code-<id>` for it.
    pub(crate) fn add(&self, id: &str) -> CancellationToken {
        let revoked = CancellationToken::new();
        let mut g = self.inner.lock();
        g.codes.insert(format!("code-{id}"), id.to_owned());
        g.tokens.insert(
            cookie_of(id),
            WebPeer {
                token_id: id.to_owned(),
                role: "operator".into(),
                session: None,
                revoked: revoked.clone(),
            },
        );
        revoked
    }

    /// Revokes token `id`.
    pub(crate) fn revoke(&self, id: &str) {
        let g = self.inner.lock();
        let peer = g.tokens.get(&cookie_of(id)).unwrap();
        peer.revoked.cancel();
    }
}

impl WebGate for FakeGate {
    fn pair(&self, code: &str) -> Result<Paired, PairRefused> {
        if code == "expired" {
            return Err(PairRefused("this link has expired".into()));
        }
        let mut g = self.inner.lock();
        let Some(id) = g.codes.remove(code) else {
            return Err(PairRefused("unknown link".into()));
        };
        let cookie_value = cookie_of(&id);
        let peer = g.tokens.get(&cookie_value).unwrap().clone();
        Ok(Paired { cookie_value, peer })
    }

    fn authenticate(&self, cookie_value: &str) -> Option<WebPeer> {
        let g = self.inner.lock();
        g.tokens
            .get(cookie_value)
            .filter(|p| !p.revoked.is_cancelled())
            .cloned()
    }
}

/// A server (test host, a Unix listener) with a web listener in front.
pub(crate) struct Web {
    pub(crate) host: TestHost,
    pub(crate) server: Arc<Server<TestHost>>,
    pub(crate) web: WebListener,
    pub(crate) gate: Arc<FakeGate>,
    _dir: tempfile::TempDir,
}

impl Web {
    /// Plain http on 127.0.0.1 with the server's default configuration.
    pub(crate) async fn start() -> Self {
        Self::with(TestHost::new(&[]), ServerConfig::new(server_id()), |_| {}).await
    }

    /// Plain http in front of `host`, the server's default configuration.
    pub(crate) async fn start_with_host(host: TestHost) -> Self {
        Self::with(host, ServerConfig::new(server_id()), |_| {}).await
    }

    /// With `config` for the server and `web` applied to the listener's configuration.
    pub(crate) async fn with(
        host: TestHost,
        config: ServerConfig,
        web: impl FnOnce(&mut WebConfig),
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut web_config = WebConfig::new("127.0.0.1:0".parse().unwrap());
        web_config.max_frame_length = config.max_frame_length;
        web(&mut web_config);
        let server = Arc::new(
            Server::start(config, host.clone(), vec![Listener::unix(dir.path())])
                .await
                .unwrap(),
        );
        let gate = Arc::new(FakeGate::default());
        let web = WebListener::start(
            web_config,
            Arc::clone(&server),
            Arc::clone(&gate) as Arc<dyn WebGate>,
        )
        .await
        .unwrap();
        Self {
            host,
            server,
            web,
            gate,
            _dir: dir,
        }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.web.local_addr()
    }

    /// The page's own `Host` value.
    pub(crate) fn host_header(&self) -> String {
        self.addr().to_string()
    }

    /// The page's own origin.
    pub(crate) fn origin(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// A raw HTTP exchange over a fresh connection.
    pub(crate) async fn http(&self, request: &str) -> HttpResponse {
        let tcp = TcpStream::connect(self.addr()).await.unwrap();
        exchange(tcp, request).await
    }

    /// `GET path` with the page's own Host (and `extra` header lines).
    pub(crate) async fn get(&self, path: &str, extra: &str) -> HttpResponse {
        self.http(&format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\n{extra}Connection: close\r\n\r\n",
            self.host_header()
        ))
        .await
    }

    /// `POST /pair` from the page (own Host and Origin) with `body`.
    pub(crate) async fn pair(&self, body: &str) -> HttpResponse {
        self.http(&pair_request(&self.host_header(), &self.origin(), body))
            .await
    }

    /// A WebSocket upgrade of `/ws` from the page with `cookie`, as the frame-level peer.
    pub(crate) async fn peer(&self, cookie: &str) -> RawPeer {
        let ws = self
            .ws(&[
                ("Origin", &self.origin()),
                ("Cookie", &format!("baton_web={cookie}")),
            ])
            .await
            .unwrap();
        RawPeer::new(WsBytes::new(ws), server_id())
    }

    /// A peer of token `id` (added to the gate), hello done.
    pub(crate) async fn ready_peer(&self, id: &str) -> RawPeer {
        self.gate.add(id);
        let mut p = self.peer(&cookie_of(id)).await;
        p.handshake().await;
        p
    }

    /// A WebSocket upgrade of `/ws` with these headers (replacing the client's own).
    pub(crate) async fn ws(
        &self,
        headers: &[(&str, &str)],
    ) -> Result<WebSocketStream<TcpStream>, tokio_tungstenite::tungstenite::Error> {
        ws_connect(self.addr(), headers).await
    }
}

/// A WebSocket upgrade of `/ws` at `addr` with these headers (replacing the client's own).
pub(crate) async fn ws_connect(
    addr: SocketAddr,
    headers: &[(&str, &str)],
) -> Result<WebSocketStream<TcpStream>, tokio_tungstenite::tungstenite::Error> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let mut request = format!("ws://{addr}/ws").into_client_request().unwrap();
    for (name, value) in headers {
        request.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
    }
    guard(
        "websocket upgrade",
        tokio_tungstenite::client_async_with_config(request, tcp, Some(websocket_config(u32::MAX))),
    )
    .await
    .map(|(ws, _)| ws)
}

/// `POST /pair` as the page sends it.
pub(crate) fn pair_request(host: &str, origin: &str, body: &str) -> String {
    format!(
        "POST /pair HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A parsed HTTP response.
#[derive(Debug)]
pub(crate) struct HttpResponse {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    /// The body as text (lossy: see `bytes` for a gzip).
    pub(crate) body: String,
    pub(crate) bytes: Vec<u8>,
}

impl HttpResponse {
    /// The value of the one header `name`; panics if absent or repeated.
    pub(crate) fn header<'a>(&'a self, name: &'a str) -> &'a str {
        let mut values = self.headers_named(name);
        let v = values
            .next()
            .unwrap_or_else(|| panic!("no {name} header in {self:?}"));
        assert!(values.next().is_none(), "{name} repeated");
        v
    }

    pub(crate) fn headers_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Writes `request`, reads the response until the server closes (the request said
/// `Connection: close`).
pub(crate) async fn exchange(
    mut io: impl AsyncRead + AsyncWrite + Unpin,
    request: &str,
) -> HttpResponse {
    io.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    guard("http response", io.read_to_end(&mut raw))
        .await
        .unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let bytes = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    HttpResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
        bytes,
    }
}
