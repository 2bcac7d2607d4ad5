//! `Server::adopt`: a connection whose transport the embedder opened and authenticated (the
//! host's web listener hands over upgraded WebSockets this way) goes through the same core as
//! a listener's: slot limit, handshake timeout, frame limit, routing, drain.

use std::net::SocketAddr;
use std::time::Duration;

use baton_protocol::{Outcome, Value};
use baton_server::{AdoptError, PeerIdentity, Server};
use baton_tests::host::TestHost;
use baton_tests::peer::{RawPeer, call};
use baton_tests::server::{TestServer, config};
use baton_tests::{guard, server_id};

/// A browser identity, as the web listener would give it.
fn web(token: &str) -> PeerIdentity {
    PeerIdentity::Web {
        token_id: token.into(),
        addr: SocketAddr::from(([127, 0, 0, 1], 40_000)),
    }
}

/// Adopts one end of an in-memory pipe and returns a raw peer on the other.
fn adopt(server: &Server<TestHost>, identity: PeerIdentity) -> RawPeer {
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    server.adopt(ours, identity).expect("adopted");
    RawPeer::new(theirs, server_id())
}

#[tokio::test]
async fn an_adopted_stream_is_served_with_the_identity_the_embedder_gives() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = adopt(&s.server, web("t1"));
    p.handshake().await;
    assert_eq!(
        p.call(
            p.server_target(),
            call("test", "echo", vec![Value::from("hi")])
        )
        .await,
        Outcome::Value(Value::from("hi"))
    );
    assert_eq!(s.server.connection_count(), 1);
    assert_eq!(s.host.lock().peers, vec![Some(web("t1"))]);
}

#[tokio::test]
async fn an_adopted_stream_over_the_connection_limit_gets_busy() {
    let mut c = config();
    c.max_connections = 1;
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let _first = s.ready_peer().await;
    let mut p = adopt(&s.server, web("t1"));
    p.expect_hello_error("busy", "Server connection limit of 1 reached")
        .await;
    assert_eq!(s.host.count("connect_services"), 1);
}

#[tokio::test]
async fn an_adopted_stream_holds_a_slot_that_listeners_then_lack() {
    let mut c = config();
    c.max_connections = 1;
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let mut p = adopt(&s.server, web("t1"));
    p.handshake().await;
    let mut second = s.connect().await;
    second
        .expect_hello_error("busy", "Server connection limit of 1 reached")
        .await;
}

#[tokio::test]
async fn an_adopted_stream_gets_the_handshake_timeout() {
    let mut c = config();
    c.handshake_timeout = Duration::from_millis(100);
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let mut p = adopt(&s.server, web("t1"));
    p.expect_hello_error("invalid_request", "Handshake timeout")
        .await;
}

#[tokio::test]
async fn an_adopted_stream_gets_the_frame_limit() {
    let mut c = config();
    c.max_frame_length = 200;
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let mut p = adopt(&s.server, web("t1"));
    p.send_bytes(&[0, 0, 0, 201]).await;
    p.expect_hello_error(
        "invalid_request",
        "Invalid client protocol frame: Frame length 201 exceeds configured limit of 200",
    )
    .await;
}

#[tokio::test]
async fn close_drains_adopted_connections_and_then_refuses_adoption() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = adopt(&s.server, web("t1"));
    p.handshake().await;
    let client = async { p.expect_closed().await };
    let (closed, ()) = guard("close", async { tokio::join!(s.server.close(), client) }).await;
    closed.unwrap();
    assert_eq!(s.server.connection_count(), 0);
    assert_eq!(s.host.lock().services_released, 1);
    let (ours, _theirs) = tokio::io::duplex(1024);
    assert_eq!(s.server.adopt(ours, web("t2")), Err(AdoptError::Closing));
}

#[tokio::test]
async fn close_connections_reaches_adopted_connections_by_their_identity() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut keep = adopt(&s.server, web("keep"));
    keep.handshake().await;
    let mut gone = adopt(&s.server, web("gone"));
    gone.handshake().await;
    let closed = s
        .server
        .close_connections(|p| p.web_token_id() == Some("gone"));
    assert_eq!(closed, 1);
    gone.expect_closed().await;
    assert_eq!(
        keep.call(
            keep.server_target(),
            call("test", "echo", vec![Value::from(1)])
        )
        .await,
        Outcome::Value(Value::from(1))
    );
}

#[tokio::test]
async fn an_adopted_transport_that_buffers_is_flushed_when_the_writer_idles() {
    // A WebSocket (or any buffered writer) holds what it was given until flushed.
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    s.server
        .adopt(
            tokio::io::BufWriter::with_capacity(64 * 1024, ours),
            web("t1"),
        )
        .expect("adopted");
    let mut p = RawPeer::new(theirs, server_id());
    p.handshake().await;
    assert_eq!(
        p.call(
            p.server_target(),
            call("test", "echo", vec![Value::from(2)])
        )
        .await,
        Outcome::Value(Value::from(2))
    );
}
