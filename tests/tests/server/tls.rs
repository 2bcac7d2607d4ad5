//! TLS: server authentication, mutual TLS with the verified identity reaching the host,
//! missing client certificates, and plaintext sent to a TLS port.

use baton_protocol::{ClientMessage, Outcome, Target, Value};
use baton_server::{ClientAuth, PeerIdentity, SubjectAltName};
use baton_tests::certs::TestCa;
use baton_tests::host::TestHost;
use baton_tests::peer::{RawPeer, call, plaintext_alert, tls_error};
use baton_tests::server::{TestServer, config};
use baton_tests::server_id;
use rustls::AlertDescription;

fn sha256_hex(der: &[u8]) -> String {
    use std::fmt::Write;
    ring::digest::digest(&ring::digest::SHA256, der)
        .as_ref()
        .iter()
        .fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[tokio::test]
async fn tls_without_client_auth_serves_requests() {
    let ca = TestCa::new("Baton Test CA");
    let s = TestServer::tls(TestHost::new(&["s1"]), config(), &ca.server(), None).await;
    let mut p = RawPeer::tls(s.addr(), server_id(), ca.cert_pem(), None)
        .await
        .unwrap();
    p.handshake().await;
    let route = p.attach("s1").await;
    assert_eq!(
        p.call(
            Target::Session(route),
            call("test", "echo", vec![Value::from(1)])
        )
        .await,
        Outcome::Value(Value::from(1))
    );
    match &s.host.lock().peers[0] {
        Some(PeerIdentity::AnonymousTls { addr }) => assert!(addr.ip().is_loopback()),
        other => panic!("expected anonymous tls, got {other:?}"),
    }
}

#[tokio::test]
async fn mutual_tls_identity_reaches_the_host() {
    let ca = TestCa::new("Baton Test CA");
    let alice = ca.client("alice");
    let s = TestServer::tls(
        TestHost::new(&[]),
        config(),
        &ca.server(),
        Some((&ca, ClientAuth::Required)),
    )
    .await;
    let mut p = RawPeer::tls(s.addr(), server_id(), ca.cert_pem(), Some(&alice))
        .await
        .unwrap();
    p.handshake().await;
    let peers = s.host.lock().peers.clone();
    match &peers[0] {
        Some(PeerIdentity::Tls {
            client_certificate: cert,
            addr,
        }) => {
            assert!(addr.ip().is_loopback());
            assert_eq!(cert.common_name(), Some("alice"));
            // RFC 4514 order: last RDN of the DER sequence first (rcgen writes CN, then O).
            assert_eq!(cert.subject(), "O=Baton Tests,CN=alice");
            assert_eq!(
                cert.subject_alt_names(),
                [SubjectAltName::Uri("spiffe://baton.test/alice".into())]
            );
            assert_eq!(cert.sha256_fingerprint_hex(), sha256_hex(&alice.cert_der));
        }
        other => panic!("expected a verified client certificate, got {other:?}"),
    }
}

#[tokio::test]
async fn tls_requiring_a_client_certificate_rejects_a_client_without_one() {
    let ca = TestCa::new("Baton Test CA");
    let s = TestServer::tls(
        TestHost::new(&[]),
        config(),
        &ca.server(),
        Some((&ca, ClientAuth::Required)),
    )
    .await;
    assert_rejected(
        s.addr(),
        ca.cert_pem(),
        None,
        AlertDescription::CertificateRequired,
    )
    .await;
    assert_eq!(s.host.count("connect_services"), 0);
}

#[tokio::test]
async fn tls_rejects_a_client_certificate_from_another_ca() {
    let ca = TestCa::new("Baton Test CA");
    let rogue = TestCa::new("Rogue CA").client("mallory");
    let s = TestServer::tls(
        TestHost::new(&[]),
        config(),
        &ca.server(),
        Some((&ca, ClientAuth::Optional)),
    )
    .await;
    assert_rejected(
        s.addr(),
        ca.cert_pem(),
        Some(&rogue),
        AlertDescription::UnknownCA,
    )
    .await;
    assert_eq!(s.host.count("connect_services"), 0);
}

#[tokio::test]
async fn optional_client_auth_admits_anonymous_clients() {
    let ca = TestCa::new("Baton Test CA");
    let s = TestServer::tls(
        TestHost::new(&[]),
        config(),
        &ca.server(),
        Some((&ca, ClientAuth::Optional)),
    )
    .await;
    let mut p = RawPeer::tls(s.addr(), server_id(), ca.cert_pem(), None)
        .await
        .unwrap();
    p.handshake().await;
}

/// The server refuses the client with `alert` (during the handshake, or at the first read
/// after it: see [`RawPeer::tls_refusal`]).
async fn assert_rejected(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    client: Option<&baton_tests::certs::Identity>,
    alert: AlertDescription,
) {
    let e = RawPeer::tls_refusal(addr, server_id(), ca_pem, client).await;
    match tls_error(&e) {
        Some(rustls::Error::AlertReceived(got)) if *got == alert => {}
        _ => panic!("expected the alert {alert:?}, got {e:?}"),
    }
}

#[tokio::test]
async fn plaintext_sent_to_a_tls_port_is_rejected() {
    let ca = TestCa::new("Baton Test CA");
    let s = TestServer::tls(TestHost::new(&[]), config(), &ca.server(), None).await;
    let mut raw = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    raw.write_all(&RawPeer::frame(&ClientMessage::hello()))
        .await
        .unwrap();
    // The reply is TLS's: a `decode_error` alert, then the end of the stream.
    let mut got = Vec::new();
    let end = baton_tests::guard("close", raw.read_to_end(&mut got)).await;
    assert_eq!(
        got,
        plaintext_alert(AlertDescription::DecodeError),
        "{got:02x?}"
    );
    assert!(end.is_ok(), "{end:?}");
    assert_eq!(s.host.count("connect_services"), 0);
}
