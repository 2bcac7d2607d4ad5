//! Connecting over each transport, and cancellation as the host sees it.

use baton_client::{Client, ClientConfig, Endpoint, RequestError, TlsOptions};
use baton_protocol::{Value, chord::ServiceCall};
use baton_server::{ClientAuth, PeerIdentity};
use baton_tests::certs::TestCa;
use baton_tests::host::TestHost;
use baton_tests::server::{TestServer, config};
use baton_tests::{TempDir, guard, server_id};

fn echo(v: Value) -> Value {
    ServiceCall::new("test", "echo", vec![v]).into_value()
}

async fn echo_round_trip(client: &Client) {
    let reply = client
        .request(client.server_target(), echo(Value::from("hi")))
        .await
        .unwrap();
    assert_eq!(reply.into_value(), Value::from("hi"));
}

#[tokio::test]
async fn connects_over_a_unix_socket() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut c = ClientConfig::new(Endpoint::Unix(s.socket_path()));
    c.expected_server_id = Some(server_id());
    let client = Client::connect(c).await.unwrap();
    echo_round_trip(&client).await;
    assert!(matches!(
        s.host.lock().peers[0],
        Some(PeerIdentity::Unix { .. })
    ));
}

#[tokio::test]
async fn connects_over_tcp() {
    let s = TestServer::tcp(TestHost::new(&[]), config()).await;
    let addr = s.addr();
    let client = Client::connect(ClientConfig::new(Endpoint::Tcp {
        host: addr.ip().to_string(),
        port: addr.port(),
    }))
    .await
    .unwrap();
    echo_round_trip(&client).await;
}

#[tokio::test]
async fn connects_over_mutual_tls_and_the_host_sees_the_certificate() {
    let ca = TestCa::new("Baton Test CA");
    let alice = ca.client("alice");
    let s = TestServer::tls(
        TestHost::new(&[]),
        config(),
        &ca.server(),
        Some((&ca, ClientAuth::Required)),
    )
    .await;
    let dir = TempDir::new();
    let write = |name: &str, pem: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, pem).unwrap();
        p
    };
    let mut c = ClientConfig::new(Endpoint::Tls {
        host: "localhost".into(),
        port: s.addr().port(),
    });
    c.tls = TlsOptions {
        ca_file: Some(write("ca.pem", ca.cert_pem())),
        client_cert: Some(write("alice.pem", &alice.cert_pem)),
        client_key: Some(write("alice.key", &alice.key_pem)),
        server_name: None,
    };
    let client = Client::connect(c.clone()).await.unwrap();
    echo_round_trip(&client).await;
    match &s.host.lock().peers[0] {
        Some(PeerIdentity::Tls {
            client_certificate: cert,
            ..
        }) => {
            assert_eq!(cert.common_name(), Some("alice"));
        }
        other => panic!("expected a verified client certificate, got {other:?}"),
    }
    // Without the client certificate the server refuses the TLS handshake.
    c.tls.client_cert = None;
    c.tls.client_key = None;
    let err = Client::connect(c).await.unwrap_err();
    assert!(
        err.to_string().contains("TLS") || err.to_string().contains("closed"),
        "a clear TLS failure, got: {err}"
    );
}

#[tokio::test]
async fn an_untrusted_server_certificate_is_a_tls_error() {
    let ca = TestCa::new("Baton Test CA");
    let other = TestCa::new("Someone Else");
    let s = TestServer::tls(TestHost::new(&[]), config(), &ca.server(), None).await;
    let dir = TempDir::new();
    let ca_file = dir.path().join("other.pem");
    std::fs::write(&ca_file, other.cert_pem()).unwrap();
    let mut c = ClientConfig::new(Endpoint::Tls {
        host: "localhost".into(),
        port: s.addr().port(),
    });
    c.tls.ca_file = Some(ca_file);
    let err = Client::connect(c).await.unwrap_err();
    assert!(
        matches!(err, baton_client::ConnectError::Tls { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn dropping_a_request_cancels_it_at_the_host() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let client = Client::connect(ClientConfig::new(Endpoint::Unix(s.socket_path())))
        .await
        .unwrap();
    let call = ServiceCall::new(
        "test",
        "wait",
        vec![Value::from("never"), Value::from("cancellable")],
    )
    .into_value();
    s.host.close_gate("never");
    let request = client.request(client.server_target(), call);
    // Drop the request once the host is running it.
    tokio::select! {
        _ = request => panic!("the gate is closed"),
        () = s.host.until("the call to start", |i| i.events.iter().any(|e| e == "call test.wait")) => {}
    }
    guard(
        "the host to observe cancellation",
        s.host.until("cancel", |i| i.cancelled_calls == 1),
    )
    .await;
    // The connection is still good.
    echo_round_trip(&client).await;
}

#[tokio::test]
async fn session_errors_keep_the_server_code() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let client = Client::connect(ClientConfig::new(Endpoint::Unix(s.socket_path())))
        .await
        .unwrap();
    let err = client.attach("nope").await.unwrap_err();
    assert_eq!(err.code(), Some("session_not_found"));
    let session = client.attach("s1").await.unwrap();
    let reply = session.request(echo(Value::from(7u8))).await.unwrap();
    assert_eq!(reply.into_value(), Value::from(7u8));
    client.detach().await.unwrap();
    assert_eq!(
        session.request(echo(Value::Null)).await.unwrap_err(),
        RequestError::NotAttached("s1".to_owned())
    );
}
