//! The https listener: no client certificate asked for, `Secure` cookies, HSTS, and the
//! socket over TLS.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use baton_host::web::{STRICT_TRANSPORT_SECURITY, WebTls, WsBytes};
use baton_server::ServerConfig;
use baton_tests::host::TestHost;
use baton_tests::peer::RawPeer;
use baton_tests::server_id;
use rustls::client::ResolvesClientCert;
use rustls::pki_types::ServerName;
use rustls::sign::CertifiedKey;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::{Web, cookie_of, exchange, pair_request};

/// Records whether the server asked for a client certificate (it must not: browsers would
/// prompt their user).
#[derive(Debug, Default)]
struct AskedForCertificate(AtomicBool);

impl ResolvesClientCert for AskedForCertificate {
    fn resolve(
        &self,
        _hints: &[&[u8]],
        _schemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.0.store(true, Ordering::SeqCst);
        None
    }

    fn has_certs(&self) -> bool {
        true
    }
}

struct Https {
    web: Web,
    connector: TlsConnector,
    asked: Arc<AskedForCertificate>,
}

impl Https {
    async fn start() -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let tls = WebTls::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes()).unwrap();
        assert_eq!(tls.dns_names(), ["localhost"]);
        let web = Web::with(TestHost::new(&[]), ServerConfig::new(server_id()), |c| {
            c.tls = Some(tls);
        })
        .await;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let asked = Arc::new(AskedForCertificate::default());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_cert_resolver(asked.clone());
        Self {
            web,
            connector: TlsConnector::from(Arc::new(config)),
            asked,
        }
    }

    fn host(&self) -> String {
        format!("localhost:{}", self.web.addr().port())
    }

    async fn connect(&self) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.web.addr()).await.unwrap();
        self.connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn https_pairs_with_a_secure_cookie_and_hsts_and_asks_no_client_certificate() {
    let h = Https::start().await;
    h.web.gate.add("t1");
    let origin = format!("https://{}", h.host());
    let r = exchange(
        h.connect().await,
        &pair_request(&h.host(), &origin, r#"{"code":"code-t1"}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        r.header("Set-Cookie"),
        format!(
            "__Host-baton_web={}; HttpOnly; SameSite=Strict; Path=/; Secure",
            cookie_of("t1")
        )
    );
    assert_eq!(
        r.header("Strict-Transport-Security"),
        STRICT_TRANSPORT_SECURITY
    );
    let page = exchange(
        h.connect().await,
        &format!(
            "GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            h.host()
        ),
    )
    .await;
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("Strict-Transport-Security"),
        STRICT_TRANSPORT_SECURITY
    );
    // The http origin of the same name is not this page's.
    let wrong = exchange(
        h.connect().await,
        &pair_request(
            &h.host(),
            &format!("http://{}", h.host()),
            r#"{"code":"x"}"#,
        ),
    )
    .await;
    assert_eq!(wrong.status, 403);
    assert!(
        !h.asked.0.load(Ordering::SeqCst),
        "the server asked for a client certificate"
    );
}

#[tokio::test]
async fn the_socket_runs_over_tls() {
    let h = Https::start().await;
    h.web.gate.add("t1");
    let mut request = format!("wss://{}/ws", h.host())
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("Origin", format!("https://{}", h.host()).parse().unwrap());
    request.headers_mut().insert(
        "Cookie",
        format!("__Host-baton_web={}", cookie_of("t1"))
            .parse()
            .unwrap(),
    );
    let (ws, _) = tokio_tungstenite::client_async(request, h.connect().await)
        .await
        .unwrap();
    let mut p = RawPeer::new(WsBytes::new(ws), server_id());
    p.handshake().await;
    assert_eq!(
        p.call(
            p.server_target(),
            baton_tests::peer::call("test", "echo", vec![baton_protocol::Value::from(3)])
        )
        .await,
        baton_protocol::Outcome::Value(baton_protocol::Value::from(3))
    );
}
