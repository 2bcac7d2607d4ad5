//! Connection lifecycle and handshake (spec §5.1; upstream protocol.test.ts, server.test.ts).

use std::time::Duration;

use baton_protocol::{ClientMessage, Outcome, ServerMessage, Value};
use baton_tests::host::{TestHost, gates};
use baton_tests::peer::{RawPeer, call};
use baton_tests::server::{TestServer, config};

fn hello_frame(version: u32) -> Vec<u8> {
    RawPeer::frame(&ClientMessage::Hello {
        version: version.into(),
    })
}

#[tokio::test]
async fn fragmented_hello_is_accepted_byte_by_byte() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.connect().await;
    for b in hello_frame(8) {
        p.send_bytes(&[b]).await;
    }
    assert_eq!(
        p.recv().await,
        ServerMessage::Hello {
            server_id: baton_tests::server_id()
        }
    );
    // A request split across writes still routes.
    let rid = p.next_id();
    let frame = RawPeer::frame(&ClientMessage::Request(baton_protocol::Request {
        id: rid.clone(),
        target: p.server_target(),
        call: call("test", "echo", vec![Value::from("hi")]),
    }));
    let (a, b) = frame.split_at(7);
    p.send_bytes(a).await;
    p.send_bytes(b).await;
    assert_eq!(
        p.expect_response(&rid).await,
        Outcome::Value(Value::from("hi"))
    );
}

#[tokio::test]
async fn unsupported_version_gets_version_error_and_close() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.connect().await;
    p.send_bytes(&hello_frame(9)).await;
    p.expect_hello_error("version", "Unsupported protocol version 9; expected 8")
        .await;
    assert_eq!(s.host.count("connect_services"), 0);
}

#[tokio::test]
async fn a_hello_offering_negative_zero_is_answered_like_version_zero() {
    // Upstream's schema (an integer >= 0) admits -0; `${-0}` renders as "0".
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.connect().await;
    p.send_bytes(&RawPeer::frame(&ClientMessage::Hello {
        version: baton_protocol::HelloVersion::NEGATIVE_ZERO,
    }))
    .await;
    p.expect_hello_error("version", "Unsupported protocol version 0; expected 8")
        .await;
    assert_eq!(s.host.count("connect_services"), 0);
}

#[tokio::test]
async fn request_before_hello_is_fatal() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.connect().await;
    p.request(p.server_target(), call("test", "echo", vec![]))
        .await;
    p.expect_hello_error("invalid_request", "The first client message must be hello")
        .await;
}

#[tokio::test]
async fn second_hello_is_fatal() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.ready_peer().await;
    p.send_bytes(&hello_frame(8)).await;
    p.expect_hello_error(
        "invalid_request",
        "hello may only be sent as the first message",
    )
    .await;
}

#[tokio::test]
async fn hello_and_request_coalesced_in_one_chunk_are_processed_in_order() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.connect().await;
    let rid = p.next_id();
    let mut bytes = hello_frame(8);
    bytes.extend(RawPeer::frame(&ClientMessage::Request(
        baton_protocol::Request {
            id: rid.clone(),
            target: p.server_target(),
            call: call("test", "echo", vec![Value::from(1)]),
        },
    )));
    p.send_bytes(&bytes).await;
    assert!(matches!(p.recv().await, ServerMessage::Hello { .. }));
    assert_eq!(
        p.expect_response(&rid).await,
        Outcome::Value(Value::from(1))
    );
}

#[tokio::test]
async fn handshake_timeout_sends_final_hello_error_and_closes() {
    let mut c = config();
    c.handshake_timeout = Duration::from_millis(100);
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let mut p = s.connect().await;
    p.expect_hello_error("invalid_request", "Handshake timeout")
        .await;
}

#[tokio::test]
async fn handshake_timeout_fires_while_the_host_blocks_attach() {
    let host = TestHost::new(&[]);
    host.close_gate(gates::CONNECT_SERVICES);
    let mut c = config();
    c.handshake_timeout = Duration::from_millis(150);
    let s = TestServer::unix(host.clone(), c).await;
    let mut p = s.connect().await;
    p.send_bytes(&hello_frame(8)).await;
    p.expect_hello_error("invalid_request", "Handshake timeout")
        .await;
    // The late services are released once the host finishes.
    host.open_gate(gates::CONNECT_SERVICES);
    host.until("late services released", |i| i.services_released == 1)
        .await;
}

#[tokio::test]
async fn invalid_cbor_payload_is_fatal_with_the_decoder_message() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.connect().await;
    p.send_bytes(&[0, 0, 0, 1, 0xff]).await;
    p.expect_hello_error(
        "invalid_request",
        "Invalid client protocol frame: CBOR break marker is not supported",
    )
    .await;
}

#[tokio::test]
async fn schema_invalid_message_after_handshake_is_fatal() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.ready_peer().await;
    // {"type":"steer"}
    let payload = [
        0xa1, 0x64, b't', b'y', b'p', b'e', 0x65, b's', b't', b'e', b'e', b'r',
    ];
    let mut frame = vec![0, 0, 0, u8::try_from(payload.len()).unwrap()];
    frame.extend(payload);
    p.send_bytes(&frame).await;
    p.expect_hello_error("invalid_request", "Invalid client protocol message")
        .await;
}

#[tokio::test]
async fn oversized_frame_header_is_rejected_before_the_payload() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.connect().await;
    p.send_bytes(&[0x01, 0x00, 0x00, 0x01]).await;
    p.expect_hello_error(
        "invalid_request",
        "Invalid client protocol frame: Frame length 16777217 exceeds configured limit of 16777216",
    )
    .await;
}

#[tokio::test]
async fn an_oversize_header_later_in_one_read_wins_over_a_cbor_error_earlier_in_it() {
    // Upstream splits a whole received chunk into frames before decoding any of them.
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.connect().await;
    p.send_bytes(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff])
        .await;
    p.expect_hello_error(
        "invalid_request",
        "Invalid client protocol frame: Frame length 4294967295 exceeds configured limit of 16777216",
    )
    .await;
}

#[tokio::test]
async fn configured_frame_limit_applies_to_inbound_frames() {
    let mut c = config();
    c.max_frame_length = 200;
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let mut p = s.connect().await;
    p.send_bytes(&[0, 0, 0, 201]).await;
    p.expect_hello_error(
        "invalid_request",
        "Invalid client protocol frame: Frame length 201 exceeds configured limit of 200",
    )
    .await;
}

#[tokio::test]
async fn a_final_frame_too_large_for_the_limit_closes_without_any_message() {
    // Upstream: an outbound message over the frame limit is never sent.
    let mut c = config();
    c.max_frame_length = 64;
    let s = TestServer::unix(TestHost::new(&[]), c).await;
    let mut p = s.connect().await;
    p.send_bytes(&[0, 0, 0, 65]).await;
    p.expect_closed().await;
}

#[tokio::test]
async fn truncated_final_frame_closes_without_a_message() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.ready_peer().await;
    p.send_bytes(&[0, 0, 0, 10, 0xa1]).await;
    p.shutdown().await;
    p.expect_closed().await;
    s.host
        .until("services released", |i| i.services_released == 1)
        .await;
}

#[tokio::test]
async fn handshake_identifies_the_server_without_touching_sessions() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let _p = s.ready_peer().await;
    assert_eq!(s.host.count("connect_services"), 1);
    assert!(s.host.lock().opens.is_empty());
}
