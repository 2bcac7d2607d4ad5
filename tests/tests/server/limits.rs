//! Limits: active requests (`busy`), subscriptions, connections, pending outbound bytes.

use baton_protocol::{Outcome, ServerMessage, Value, WireError};
use baton_server::{ConfigError, Server, StartError};
use baton_tests::host::TestHost;
use baton_tests::peer::{Event, call, error};
use baton_tests::server::{TestServer, config};

fn wait(gate: &str) -> Value {
    call(
        "test",
        "wait",
        vec![Value::from(gate), Value::from("ignore")],
    )
}

#[tokio::test]
async fn excess_active_requests_get_busy_and_the_connection_stays() {
    let host = TestHost::new(&[]);
    host.close_gate("g");
    let mut c = config();
    c.max_active_requests = 2;
    let s = TestServer::unix(host.clone(), c).await;
    let mut p = s.ready_peer().await;
    let a = p.request(p.server_target(), wait("g")).await;
    let b = p.request(p.server_target(), wait("g")).await;
    assert_eq!(
        p.call(p.server_target(), call("test", "echo", vec![]))
            .await,
        error(
            "busy",
            "Too many active requests on this connection (limit 2)"
        )
    );
    host.open_gate("g");
    assert_eq!(
        p.expect_response(&a).await,
        Outcome::Value(Value::from("g"))
    );
    assert_eq!(
        p.expect_response(&b).await,
        Outcome::Value(Value::from("g"))
    );
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
async fn excess_subscriptions_get_busy() {
    let mut c = config();
    c.max_subscriptions = 1;
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let mut p = s.ready_peer().await;
    let sub = |sid: &str| {
        call(
            "$chord.service",
            "subscribe",
            vec![
                Value::from(sid),
                Value::from("test.counter"),
                Value::from("singleton"),
            ],
        )
    };
    assert!(matches!(
        p.call(p.server_target(), sub("service-1")).await,
        Outcome::Value(_)
    ));
    assert_eq!(
        p.call(p.server_target(), sub("service-2")).await,
        error(
            "busy",
            "Too many subscriptions on this connection (limit 1)"
        )
    );
}

#[tokio::test]
async fn connections_over_the_limit_are_told_busy_and_closed() {
    let mut c = config();
    c.max_connections = 1;
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let _first = s.ready_peer().await;
    let mut second = s.connect().await;
    second.send(&baton_protocol::ClientMessage::hello()).await;
    second
        .expect_hello_error("busy", "Server connection limit of 1 reached")
        .await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_past_the_pending_byte_limit() {
    let host = TestHost::new(&[]);
    let mut c = config();
    c.max_frame_length = 64 * 1024;
    c.max_pending_bytes = Some(128 * 1024);
    let s = TestServer::unix(host.clone(), c).await;
    let mut p = s.ready_peer().await;
    // Large responses the client never reads: the socket buffer fills, then the queue.
    let big = call("test", "big", vec![Value::from(60_000)]);
    let mut sent = 0;
    loop {
        let rid = p.next_id();
        let frame = baton_tests::peer::RawPeer::frame(&baton_protocol::ClientMessage::Request(
            baton_protocol::Request {
                id: rid,
                target: p.server_target(),
                call: big.clone(),
            },
        ));
        if p.try_send_bytes(&frame).await.is_err() {
            break;
        }
        sent += 1;
        if sent % 16 == 0 && s.server.connection_count() == 0 {
            break;
        }
        assert!(sent < 10_000, "never disconnected");
    }
    // Reading now yields some responses, then the end of the stream (no hello_error).
    loop {
        match p.next_event().await {
            Event::Message(ServerMessage::Response(_)) => {}
            Event::Message(other) => panic!("unexpected {other:?}"),
            Event::Closed => break,
        }
    }
}

#[tokio::test]
async fn invalid_limits_are_rejected_at_start() {
    let mut c = config();
    c.max_frame_length = 128;
    c.max_pending_bytes = Some(131);
    let err = Server::start(
        c,
        TestHost::new(&[]),
        vec![baton_server::Listener::tcp("127.0.0.1:0".parse().unwrap())],
    )
    .await
    .unwrap_err();
    assert!(matches!(
        err,
        StartError::Config(ConfigError::MaxPendingBytes { minimum: 132 })
    ));
    assert!(err.to_string().contains("maxPendingBytes"));

    let mut c = config();
    c.max_frame_length = 0;
    let err = Server::start(c, TestHost::new(&[]), vec![])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Server maxFrameLength must be an integer between 1 and 4294967295"
    );

    let mut c = config();
    c.handshake_timeout = std::time::Duration::from_millis(2_147_483_648);
    let err = Server::start(c, TestHost::new(&[]), vec![])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Server handshakeTimeoutMs must be an integer between 1 and 2147483647"
    );

    let err = Server::start(config(), TestHost::new(&[]), vec![])
        .await
        .unwrap_err();
    assert!(matches!(err, StartError::NoListeners));
}

#[test]
fn busy_error_is_a_wire_error() {
    // The code is opaque on the wire; keep it stable.
    assert_eq!(WireError::new("busy", "x").code.as_str(), "busy");
}
