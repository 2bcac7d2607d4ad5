//! Reconnecting stops at once when no retry can help, and only then: another server id
//! answers at the same address, or the server refuses this client's identity (its access
//! policy's `forbidden` at hello, or a TLS handshake that refuses the client certificate).
//! A busy server is retried, after exactly the delay the status announced.
//!
//! Scripted servers: Unix ones in paused time (so "never tried again" is a long virtual
//! wait, not a real one), a TLS one on 127.0.0.1 in real time.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

/// The test PKI the workspace suites use (a CA, server and client certificates).
#[allow(
    dead_code,
    unreachable_pub,
    reason = "shared with the workspace suites: not every certificate kind is used here"
)]
#[path = "../../tests/src/certs.rs"]
mod certs;

use std::sync::Arc;
use std::time::Duration;

use baton_client::{
    Client, ClientConfig, CloseReason, ConnectError, Endpoint, ReconnectPolicy, ReconnectRefusal,
    RequestError, Status, TlsOptions,
};
use baton_protocol::{
    ClientMessage, ErrorCode, Id, Outcome, ServerMessage, SessionTarget, Value, WireError,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use support::{HANG_GUARD, Listener, Peer, other_server_id, server_id};
use tokio::net::TcpListener;
use tokio::time::Instant;

/// Longer than the policy's whole backoff: a client that would retry does so well within it.
const NEVER_AGAIN: Duration = Duration::from_secs(600);

/// 100 ms doubling to 800 ms, no jitter.
fn policy() -> ReconnectPolicy {
    ReconnectPolicy {
        initial_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(800),
        multiplier: 2.0,
        jitter: 0.0,
        healthy_after: Duration::from_secs(10),
        max_attempts: None,
    }
}

/// A reconnecting client attached to `session-1` on `listener`'s first connection.
async fn attached(listener: &Listener) -> (Client, Peer) {
    let mut config = listener.config();
    config.reconnect = Some(policy());
    let (client, mut peer) = tokio::join!(Client::connect(config), listener.accept_ready());
    let client = client.unwrap();
    let answer = async {
        let r = peer.recv_request().await;
        peer.send(ServerMessage::Attachment(Some(SessionTarget {
            server_id: server_id(),
            session_id: Id::new("session-1").unwrap(),
            attachment_id: Id::new("attachment-1").unwrap(),
        })))
        .await;
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (session, ()) = tokio::join!(client.attach("session-1"), answer);
    session.unwrap();
    (client, peer)
}

/// Waits for the client to finish; why.
async fn closed(client: &Client) -> CloseReason {
    let mut status = client.watch_status();
    let status = tokio::time::timeout(
        HANG_GUARD,
        status.wait_for(|s| matches!(s, Status::Closed { .. })),
    )
    .await
    .expect("the client finishes")
    .unwrap()
    .clone();
    match status {
        Status::Closed { reason } => reason,
        other => unreachable!("waited for closed, got {other:?}"),
    }
}

/// Answers the client's hello with `hello_error` `code`, then waits for the client to close.
async fn refuse(peer: &mut Peer, code: ErrorCode, message: &str) {
    assert_eq!(peer.recv().await, ClientMessage::hello());
    peer.send(ServerMessage::HelloError(WireError::from_code(
        code, message,
    )))
    .await;
    peer.expect_eof().await;
}

/// After a refusal the client is finished for callers too.
async fn assert_finished(client: &Client) {
    let err = client
        .request(client.server_target(), Value::Null)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RequestError::Closed | RequestError::NotSent(_)),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_server_with_another_id_at_the_same_address_ends_the_client_at_once() {
    let listener = Listener::bind();
    let (client, peer) = attached(&listener).await;

    // The host restarts as another server at the same socket.
    drop(peer);
    let mut next = listener.accept().await;
    next.handshake(other_server_id()).await;

    let expected = ReconnectRefusal::ServerChanged {
        expected: server_id().to_string(),
        got: other_server_id().to_string(),
    };
    assert_eq!(closed(&client).await, CloseReason::Refused(expected));
    assert!(client.attachment().is_none());
    assert!(
        listener.accept_within(NEVER_AGAIN).await.is_none(),
        "the client never tried again"
    );
    assert_finished(&client).await;
}

#[tokio::test(start_paused = true)]
async fn a_server_that_refuses_this_identity_on_reconnect_ends_the_client_at_once() {
    let listener = Listener::bind();
    let (client, peer) = attached(&listener).await;

    // The host restarted with an access policy that no longer admits this client: the
    // listener's refusal is the connection's only frame, and it lingers until the client
    // has closed (as the real server does, so no reset overtakes the refusal).
    drop(peer);
    let mut next = listener.accept().await;
    let message = "Identity tls:sha256=ab12 is not admitted by the access policy";
    refuse(&mut next, ErrorCode::Forbidden, message).await;

    assert_eq!(
        closed(&client).await,
        CloseReason::Refused(ReconnectRefusal::IdentityRefused {
            reason: message.to_owned()
        })
    );
    assert!(listener.accept_within(NEVER_AGAIN).await.is_none());
    assert_finished(&client).await;
}

#[tokio::test(start_paused = true)]
async fn a_busy_server_on_reconnect_is_retried_after_the_announced_delay() {
    let listener = Listener::bind();
    let (client, peer) = attached(&listener).await;
    let mut status = client.watch_status();
    drop(peer);
    let mut next = listener.accept().await;
    refuse(&mut next, ErrorCode::Busy, "too many connections").await;

    let announced = tokio::time::timeout(
        HANG_GUARD,
        status.wait_for(|s| matches!(s, Status::Reconnecting { attempt: 2, .. })),
    )
    .await
    .unwrap()
    .unwrap()
    .clone();
    let Status::Reconnecting {
        reason,
        retry_in,
        retry_at,
        ..
    } = announced
    else {
        unreachable!()
    };
    assert!(reason.contains("too many connections"), "{reason}");
    assert_eq!(retry_in, Duration::from_millis(200));
    let mut again = listener.accept().await;
    assert_eq!(
        Instant::now(),
        Instant::from_std(retry_at),
        "the attempt came when the status said"
    );
    again.handshake(server_id()).await;
    tokio::time::timeout(
        HANG_GUARD,
        status.wait_for(|s| matches!(s, Status::Connected)),
    )
    .await
    .unwrap()
    .unwrap();
}

// ---- TLS ----------------------------------------------------------------------------------

/// A rustls server configuration with `server`'s certificate that requires client
/// certificates signed by `clients_ca`.
fn tls_server(server: &certs::Identity, clients_ca: &certs::TestCa) -> tokio_rustls::TlsAcceptor {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(clients_ca.cert_pem().as_bytes()).unwrap())
        .unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::clone(&provider),
    )
    .build()
    .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from(server.cert_der.clone())],
            PrivateKeyDer::from_pem_slice(server.key_pem.as_bytes()).unwrap(),
        )
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

#[tokio::test]
async fn a_tls_server_that_refuses_the_client_certificate_on_reconnect_ends_the_client_at_once() {
    let ca = certs::TestCa::new("Baton Test CA");
    let alice = ca.client("alice");
    let server = ca.server();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, pem: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    let mut config = ClientConfig::new(Endpoint::Tls {
        host: "localhost".into(),
        port,
    });
    config.tls = TlsOptions {
        ca_file: Some(write("ca.pem", ca.cert_pem())),
        client_cert: Some(write("alice.pem", &alice.cert_pem)),
        client_key: Some(write("alice.key", &alice.key_pem)),
        server_name: None,
    };
    config.reconnect = Some(ReconnectPolicy {
        initial_delay: Duration::from_millis(10),
        ..policy()
    });

    let accept = |acceptor: tokio_rustls::TlsAcceptor| {
        let tcp = &tcp;
        async move {
            let (stream, _) = tokio::time::timeout(HANG_GUARD, tcp.accept())
                .await
                .expect("the client connects")
                .unwrap();
            acceptor.accept(stream).into_fallible().await
        }
    };
    let trusting = tls_server(&server, &ca);
    let (client, first) = tokio::join!(Client::connect(config), async {
        let tls = accept(trusting).await.unwrap();
        let mut peer = Peer::new(tls);
        peer.handshake(server_id()).await;
        peer
    });
    let client = client.unwrap();

    // The host restarts trusting another CA for clients: alice's certificate is refused.
    drop(first);
    let other_ca = certs::TestCa::new("Another CA");
    let refusing = tls_server(&server, &other_ca);
    let refused = accept(refusing).await;
    let Err((error, mut tcp_stream)) = refused else {
        panic!("the server accepted a certificate of an unknown CA");
    };
    assert!(error.to_string().contains("certificate"), "{error}");
    // Linger as the real server does, so the alert is read before the socket closes.
    let mut discard = Vec::new();
    let _ = tokio::time::timeout(
        HANG_GUARD,
        tokio::io::AsyncReadExt::read_to_end(&mut tcp_stream, &mut discard),
    )
    .await;

    let reason = closed(&client).await;
    match &reason {
        CloseReason::Refused(ReconnectRefusal::IdentityRefused { reason }) => {
            assert!(reason.contains("TLS"), "{reason}");
        }
        other => panic!("expected the identity refused, got {other:?}"),
    }
    // Closed, so never again (the paused-time tests above watch the listener for that).
    assert_finished(&client).await;
}

#[tokio::test]
async fn a_first_connect_to_another_server_id_is_a_refusal_too() {
    let listener = Listener::bind();
    let mut config = listener.config();
    config.expected_server_id = Some(other_server_id());
    let (client, _peer) = tokio::join!(Client::connect(config), listener.accept_ready());
    let err = client.unwrap_err();
    assert!(matches!(err, ConnectError::Handshake { .. }), "{err}");
    assert!(
        matches!(err.refusal(), Some(ReconnectRefusal::ServerChanged { .. })),
        "{err}"
    );
}
