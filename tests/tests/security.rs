//! Security suite: who gets in and what leaks out.
//!
//! * Mutual TLS: no certificate, a certificate from another CA and an expired certificate are
//!   all refused during the TLS handshake, before any protocol byte (the host's
//!   `connect_services` never runs), while a valid client on the same server is served.
//! * Wrong protocol on a port: a TLS ClientHello sent to a plaintext port gets the framing
//!   error and a close; plaintext sent to a TLS port is closed without a protocol frame; both
//!   servers keep serving.
//! * No internal detail (paths, secrets, panic messages) in anything sent to a client.
//! * The listener's identity reaches the host, and the host can refuse a client or a session
//!   to an identity (TLS common name, Unix uid) with an error code of its choosing.
//!
//! Covered elsewhere and not repeated here: plain TCP on a non-loopback address needs the
//! opt-in (`server/listeners.rs`: `plaintext_tcp_on_a_non_loopback_address_needs_an_opt_in`,
//! `explicit_opt_in_allows_plaintext_on_any_address`); the Unix socket is mode 0600 in a
//! 0700 directory and unsafe directories are refused (`server/listeners.rs`:
//! `unix_socket_is_named_by_server_id_with_mode_0600`, `unix_directory_is_created_private`,
//! `a_socket_directory_others_can_write_is_refused`).
#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::Arc;

use baton_protocol::{ClientMessage, Outcome, ServerMessage, Target, Value, WireError};
use baton_server::ClientAuth;
use baton_tests::certs::{Identity, TestCa};
use baton_tests::host::TestHost;
use baton_tests::peer::{RawPeer, call, error, plaintext_alert, tls_error};
use baton_tests::server::{TestServer, config};
use baton_tests::{guard, server_id};
use rustls::AlertDescription;

const SECRET: &str = "sk-live-9f8e7d6c5b4a";
const PATH: &str = "/home/alice/.config/baton/credentials.json";

/// The server refuses the client with `alert`, during the TLS handshake or (TLS 1.3: the
/// client finishes first) at the first read after it; no protocol frame ever arrives.
async fn assert_refused(
    s: &TestServer,
    ca: &TestCa,
    client: Option<&Identity>,
    alert: AlertDescription,
    what: &str,
) {
    let e = RawPeer::tls_refusal(s.addr(), server_id(), ca.cert_pem(), client).await;
    match tls_error(&e) {
        Some(rustls::Error::AlertReceived(got)) if *got == alert => {}
        _ => panic!("{what}: expected the alert {alert:?}, got {e:?}"),
    }
}

/// A certificate from another CA (`rogue`) and an `expired` one are refused, each with its
/// own alert, whatever the client-auth mode (`auth`, for the messages).
async fn assert_bad_certificates_refused(
    s: &TestServer,
    ca: &TestCa,
    rogue: &Identity,
    expired: &Identity,
    auth: &str,
) {
    assert_refused(
        s,
        ca,
        Some(rogue),
        AlertDescription::UnknownCA,
        &format!("certificate from another CA ({auth})"),
    )
    .await;
    assert_refused(
        s,
        ca,
        Some(expired),
        AlertDescription::CertificateExpired,
        &format!("expired certificate ({auth})"),
    )
    .await;
}

async fn mtls_server(auth: ClientAuth, ca: &TestCa, host: TestHost) -> TestServer {
    TestServer::tls(host, config(), &ca.server(), Some((ca, auth))).await
}

#[tokio::test]
async fn mutual_tls_refuses_missing_foreign_and_expired_certificates_before_any_protocol_byte() {
    let ca = TestCa::new("Baton Test CA");
    let rogue = TestCa::new("Rogue CA").client("mallory");
    let expired = ca.expired_client("old-laptop");
    let alice = ca.client("alice");

    let s = mtls_server(ClientAuth::Required, &ca, TestHost::new(&[])).await;
    assert_refused(
        &s,
        &ca,
        None,
        AlertDescription::CertificateRequired,
        "no client certificate",
    )
    .await;
    assert_bad_certificates_refused(&s, &ca, &rogue, &expired, "required auth").await;
    assert_eq!(
        s.host.count("connect_services"),
        0,
        "{:?}",
        s.host.lock().events
    );
    // The server is unharmed and serves a valid client.
    let mut p = RawPeer::tls(s.addr(), server_id(), ca.cert_pem(), Some(&alice))
        .await
        .unwrap();
    p.handshake().await;
    assert_eq!(s.host.count("connect_services"), 1);

    // Optional client auth admits anonymous clients, but never a bad certificate.
    let s = mtls_server(ClientAuth::Optional, &ca, TestHost::new(&[])).await;
    assert_bad_certificates_refused(&s, &ca, &rogue, &expired, "optional auth").await;
    assert_eq!(s.host.count("connect_services"), 0);
}

fn client_hello_bytes() -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut out = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut out).unwrap();
    }
    out
}

#[tokio::test]
async fn a_tls_client_hello_on_a_plaintext_port_fails_cleanly() {
    let s = TestServer::tcp(TestHost::new(&[]), config()).await;
    let hello = client_hello_bytes();
    // The record header reads as a frame length far over the limit: refused at the header.
    let declared = u32::from_be_bytes(hello[..4].try_into().unwrap());
    let mut raw = s.connect().await;
    raw.send_bytes(&hello).await;
    raw.expect_hello_error(
        "invalid_request",
        &format!(
            "Invalid client protocol frame: Frame length {declared} exceeds configured limit of 16777216"
        ),
    )
    .await;

    // A real TLS client fails its handshake without hanging: the reply (the `hello_error`
    // frame, whose length prefix starts with a zero byte) is no TLS record.
    let ca = TestCa::new("Baton Test CA");
    let tls = guard(
        "tls handshake against plaintext",
        RawPeer::tls(s.addr(), server_id(), ca.cert_pem(), None),
    )
    .await;
    let e = tls.expect_err("a TLS handshake with a plaintext server fails");
    assert!(
        matches!(
            tls_error(&e),
            Some(rustls::Error::InvalidMessage(
                rustls::InvalidMessage::InvalidContentType
            ))
        ),
        "{e:?}"
    );

    assert_eq!(s.host.count("connect_services"), 0);
    let mut p = s.ready_peer().await;
    assert_eq!(
        p.call(
            p.server_target(),
            call("test", "echo", vec![Value::from(1)])
        )
        .await,
        Outcome::Value(Value::from(1))
    );
}

#[tokio::test]
async fn plaintext_on_a_tls_port_is_closed_and_the_server_keeps_serving() {
    // `server/tls.rs` checks that no protocol frame comes back; this adds that the listener
    // survives and serves TLS afterwards.
    let ca = TestCa::new("Baton Test CA");
    let s = TestServer::tls(TestHost::new(&[]), config(), &ca.server(), None).await;
    for _ in 0..3 {
        // The reply is TLS's `decode_error` alert, then the end of the stream.
        let mut stream = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(&RawPeer::frame(&ClientMessage::hello()))
            .await
            .unwrap();
        let mut got = Vec::new();
        let end = guard("close", stream.read_to_end(&mut got)).await;
        assert_eq!(
            got,
            plaintext_alert(AlertDescription::DecodeError),
            "{got:02x?}"
        );
        assert!(end.is_ok(), "{end:?}");
    }
    assert_eq!(s.host.count("connect_services"), 0);
    let mut p = RawPeer::tls(s.addr(), server_id(), ca.cert_pem(), None)
        .await
        .unwrap();
    p.handshake().await;
}

fn leaky(detail: &str) -> Value {
    call("test", "fail_with", vec![Value::from(detail)])
}

/// Nothing the client received may contain the secret, the path or the panic text.
fn assert_clean(msgs: &[ServerMessage]) {
    let text = format!("{msgs:?}");
    for needle in [SECRET, PATH, "panic", "private"] {
        assert!(!text.contains(needle), "{needle:?} leaked: {text}");
    }
}

#[tokio::test]
async fn no_internal_detail_path_or_secret_reaches_a_client() {
    let host = TestHost::new(&["s1", "s2"]);
    let s = TestServer::unix(host.clone(), config()).await;
    let detail = format!("open {PATH}: permission denied (token={SECRET})");
    let internal = error("internal_error", "Internal server error");
    let mut seen = Vec::new();

    let mut p = s.ready_peer().await;
    // A server-scope call failing with the detail.
    assert_eq!(p.call(p.server_target(), leaky(&detail)).await, internal);
    // A session-scope call failing with the detail.
    let route = p.attach("s1").await;
    assert_eq!(
        p.call(Target::Session(route.clone()), leaky(&detail)).await,
        internal
    );
    // A panicking host call whose message carries the secret.
    assert_eq!(
        p.call(
            Target::Session(route),
            call("test", "panic", vec![Value::from(detail.as_str())])
        )
        .await,
        internal
    );
    // A failing session open (the host's private text).
    host.with(|i| i.fail_open = true);
    let rid = p
        .request(
            p.server_target(),
            call("pi.session-management", "attach", vec![Value::from("s2")]),
        )
        .await;
    assert_eq!(p.expect_response(&rid).await, internal);
    seen.push(ServerMessage::Response(baton_protocol::Response {
        id: rid,
        outcome: internal.clone(),
    }));
    // Still serving.
    assert_eq!(
        p.call(
            p.server_target(),
            call("test", "echo", vec![Value::from(1)])
        )
        .await,
        Outcome::Value(Value::from(1))
    );

    // A failing connect_services: the handshake answer is sanitised too.
    let uid = owner_uid(&s);
    host.with(|i| {
        i.refuse_clients
            .insert(format!("uid:{uid}"), (String::new(), detail.clone()));
    });
    let mut q = s.connect().await;
    q.send(&ClientMessage::hello()).await;
    let m = q.recv().await;
    assert_eq!(
        m,
        ServerMessage::HelloError(WireError::new("internal_error", "Internal server error"))
    );
    q.expect_closed().await;
    seen.push(m);
    assert_clean(&seen);
}

fn owner_uid(s: &TestServer) -> u32 {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(s.dir.path()).unwrap())
}

#[tokio::test]
async fn the_host_refuses_clients_and_sessions_by_tls_identity() {
    let ca = TestCa::new("Baton Test CA");
    let host = TestHost::new(&["s1"]);
    host.with(|i| {
        i.refuse_sessions.insert(
            "cn:bob".into(),
            ("forbidden".into(), "Session access denied".into()),
        );
        i.refuse_clients.insert(
            "cn:mallory".into(),
            ("forbidden".into(), "Client not allowed".into()),
        );
    });
    let s = mtls_server(ClientAuth::Required, &ca, host.clone()).await;
    let connect = |who: &str| {
        let id = ca.client(who);
        let (addr, pem) = (s.addr(), ca.cert_pem().to_owned());
        async move {
            RawPeer::tls(addr, server_id(), &pem, Some(&id))
                .await
                .unwrap()
        }
    };

    // alice: allowed everything.
    let mut alice = connect("alice").await;
    alice.handshake().await;
    let route = alice.attach("s1").await;
    assert_eq!(
        alice
            .call(
                Target::Session(route),
                call("test", "echo", vec![Value::from(1)])
            )
            .await,
        Outcome::Value(Value::from(1))
    );

    // bob: may connect, may not open a session; the connection stays usable.
    let mut bob = connect("bob").await;
    bob.handshake().await;
    assert_eq!(
        bob.call(
            bob.server_target(),
            call("pi.session-management", "attach", vec![Value::from("s1")])
        )
        .await,
        error("forbidden", "Session access denied")
    );
    assert_eq!(
        bob.call(
            bob.server_target(),
            call("test", "echo", vec![Value::from(2)])
        )
        .await,
        Outcome::Value(Value::from(2))
    );

    // mallory: a valid certificate, refused at the handshake with the host's code.
    let mut mallory = connect("mallory").await;
    mallory.send(&ClientMessage::hello()).await;
    mallory
        .expect_hello_error("forbidden", "Client not allowed")
        .await;

    let i = host.lock();
    assert!(i.events.iter().any(|e| e == "refused session s1 to cn:bob"));
    assert_eq!(
        i.events.iter().filter(|e| *e == "refused client").count(),
        1
    );
    assert_eq!(i.session_attaches.get("s1"), Some(&1), "only alice's lease");
}

#[tokio::test]
async fn the_host_refuses_sessions_by_unix_uid() {
    let host = TestHost::new(&["s1"]);
    let s = TestServer::unix(host.clone(), config()).await;
    let uid = owner_uid(&s);
    host.with(|i| {
        i.refuse_sessions.insert(
            format!("uid:{uid}"),
            ("session_not_found".into(), "Session was not found".into()),
        );
    });
    let mut p = s.ready_peer().await;
    // The host hides the session from this user entirely.
    assert_eq!(
        p.call(
            p.server_target(),
            call("pi.session-management", "attach", vec![Value::from("s1")])
        )
        .await,
        error("session_not_found", "Session was not found")
    );
    assert!(host.lock().opens.is_empty());
    host.with(|i| i.refuse_sessions.clear());
    p.attach("s1").await;
}
