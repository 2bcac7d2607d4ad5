//! The WebSocket endpoint carries the protocol into the server's connection core: routing,
//! limits, slow-consumer resync, revocation, and many browsers at once.

use baton_protocol::codec::encode_frame;
use baton_protocol::{ClientMessage, Outcome, ServerMessage, ServiceUpdate, Value};
use baton_server::{Published, ServerConfig};
use baton_tests::host::TestHost;
use baton_tests::mirror::Mirror;
use baton_tests::peer::{RawPeer, call, id};
use baton_tests::{guard, server_id};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use std::time::Duration;

use baton_host::web::HeartbeatConfig;

use crate::support::{Web, cookie_of};

fn subscribe(sid: &str) -> Value {
    call(
        "$chord.service",
        "subscribe",
        vec![
            Value::from(sid),
            Value::from("test.counter"),
            Value::from("singleton"),
        ],
    )
}

async fn subscribe_server(p: &mut RawPeer, sid: &str) -> Mirror {
    match p.call(p.server_target(), subscribe(sid)).await {
        Outcome::Value(snapshot) => Mirror::new(&snapshot),
        other => panic!("subscribe failed: {other:?}"),
    }
}

fn echo(v: i32) -> Value {
    call("test", "echo", vec![Value::from(v)])
}

#[tokio::test]
async fn a_browser_is_the_web_identity_of_its_token_and_its_calls_route() {
    let w = Web::start().await;
    let mut p = w.ready_peer("t1").await;
    assert_eq!(
        p.call(p.server_target(), echo(7)).await,
        Outcome::Value(Value::from(7))
    );
    let peers = w.host.lock().peers.clone();
    assert_eq!(peers.len(), 1);
    let peer = peers[0].as_ref().unwrap();
    assert_eq!(peer.web_token_id(), Some("t1"));
    assert!(peer.is_authenticated());
}

#[tokio::test]
async fn a_revoked_token_closes_its_live_sockets_at_once() {
    let w = Web::start().await;
    let mut gone_a = w.ready_peer("gone").await;
    let mut gone_b = w.peer(&cookie_of("gone")).await;
    gone_b.handshake().await;
    let mut kept = w.ready_peer("kept").await;
    w.gate.revoke("gone");
    gone_a.expect_closed().await;
    gone_b.expect_closed().await;
    assert_eq!(
        kept.call(kept.server_target(), echo(1)).await,
        Outcome::Value(Value::from(1))
    );
    let refused = w
        .ws(&[
            ("Origin", &w.origin()),
            ("Cookie", &format!("baton_web={}", cookie_of("gone"))),
        ])
        .await;
    assert!(refused.is_err(), "a revoked cookie opens no socket");
}

#[tokio::test]
async fn a_revoked_token_closes_its_socket_with_1008_browser_token_revoked() {
    let w = Web::start().await;
    w.gate.add("gone");
    let cookie = format!("baton_web={}", cookie_of("gone"));
    let mut ws = w
        .ws(&[("Origin", &w.origin()), ("Cookie", &cookie)])
        .await
        .unwrap();
    let hello = encode_frame(&ClientMessage::hello(), u32::MAX).unwrap();
    ws.send(Message::Binary(hello)).await.unwrap();
    assert!(
        matches!(
            guard("hello answer", ws.next()).await,
            Some(Ok(Message::Binary(_)))
        ),
        "the server answers hello: the socket is its connection"
    );
    w.gate.revoke("gone");
    let frame = loop {
        match guard("close frame", ws.next()).await {
            Some(Ok(Message::Close(frame))) => break frame,
            Some(Ok(_)) => {}
            other => panic!("socket ended without a close frame: {other:?}"),
        }
    };
    let frame = frame.expect("a close frame with a code, not 1005");
    assert_eq!(frame.code, CloseCode::Policy);
    assert_eq!(frame.reason.as_str(), "browser token revoked");
}

/// The frames a server sent, as (opcode, payload): unmasked, short ones only.
fn server_frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    while let [b0, b1, rest @ ..] = bytes {
        let len = usize::from(b1 & 0x7f);
        assert!(len < 126 && b1 & 0x80 == 0, "a short unmasked frame");
        frames.push((b0 & 0x0f, rest[..len].to_vec()));
        bytes = &rest[len..];
    }
    frames
}

#[tokio::test]
async fn a_browser_that_answers_no_ping_is_closed_1001_after_the_deadline() {
    let mut c = ServerConfig::new(server_id());
    // Only the heartbeat may end this socket: the handshake never completes.
    c.handshake_timeout = Duration::from_secs(600);
    let w = Web::with(TestHost::new(&[]), c, |web| {
        web.heartbeat = Some(HeartbeatConfig::new(
            Duration::from_millis(20),
            Duration::from_millis(100),
        ));
    })
    .await;
    w.gate.add("t1");
    // A raw client: it reads, but never answers a ping (a vanished phone).
    let mut tcp = raw_upgrade(&w, &cookie_of("t1")).await;
    let mut bytes = Vec::new();
    guard(
        "the server closes the silent socket",
        tcp.read_to_end(&mut bytes),
    )
    .await
    .unwrap();
    let frames = server_frames(&bytes);
    assert!(
        frames.iter().any(|(op, _)| *op == 0x9),
        "pinged first: {frames:?}"
    );
    let (op, payload) = frames.last().unwrap();
    assert_eq!(*op, 0x8, "ends with a close frame: {frames:?}");
    assert_eq!(payload[..2], 1001u16.to_be_bytes(), "going away");
    assert_eq!(&payload[2..], b"no answer to ping");
}

#[tokio::test]
async fn a_frame_over_the_limit_gets_hello_error_and_a_close() {
    let mut c = ServerConfig::new(server_id());
    c.max_frame_length = 200;
    let w = Web::with(TestHost::new(&[]), c, |_| {}).await;
    w.gate.add("t1");
    let mut p = w.peer(&cookie_of("t1")).await;
    p.send_bytes(&[0, 0, 0, 201]).await;
    p.expect_hello_error(
        "invalid_request",
        "Invalid client protocol frame: Frame length 201 exceeds configured limit of 200",
    )
    .await;
}

/// The close frame the server ends a raw socket with.
async fn close_code(ws: &mut tokio_tungstenite::WebSocketStream<TcpStream>) -> Option<CloseCode> {
    loop {
        match guard("close frame", ws.next()).await {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| f.code),
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("socket failed before the close frame: {e}"),
            None => return None,
        }
    }
}

#[tokio::test]
async fn a_message_over_the_frame_limit_plus_prefix_is_closed_as_too_big() {
    let mut c = ServerConfig::new(server_id());
    c.max_frame_length = 200;
    let w = Web::with(TestHost::new(&[]), c, |_| {}).await;
    w.gate.add("t1");
    let cookie = format!("baton_web={}", cookie_of("t1"));
    let headers = [("Origin", w.origin()), ("Cookie", cookie)];
    let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();

    // A whole frame at the limit, with its prefix, fits in one message: it reaches the
    // protocol (whose decoder refuses the garbage with `hello_error`).
    let mut ws = w.ws(&headers).await.unwrap();
    let mut at_limit = vec![0u8, 0, 0, 200];
    at_limit.extend([b'x'; 200]);
    ws.send(Message::Binary(at_limit.into())).await.unwrap();
    assert!(
        matches!(
            guard("answer", ws.next()).await,
            Some(Ok(Message::Binary(_)))
        ),
        "a message of the frame limit plus 4 is the protocol's to judge"
    );
    // One byte more is the WebSocket layer's: closed as too big.
    let mut ws = w.ws(&headers).await.unwrap();
    ws.send(Message::Binary(vec![0u8; 205].into()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Size));
}

/// Upgrades `/ws` over a raw TCP socket (the frames are the test's own to write), with the
/// page's Origin and `cookie`.
async fn raw_upgrade(w: &Web, cookie: &str) -> TcpStream {
    let mut tcp = TcpStream::connect(w.addr()).await.unwrap();
    let request = format!(
        "GET /ws HTTP/1.1\r\nHost: {}\r\nOrigin: {}\r\nCookie: baton_web={cookie}\r\n\
         Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        w.host_header(),
        w.origin()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    // Byte by byte up to the blank line: nothing of what follows is read here.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(guard("upgrade answer", tcp.read_u8()).await.unwrap());
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    tcp
}

/// What a client reads that writes `first`, then a binary frame announcing 64 MiB with the
/// first 32 KiB of its payload (more than the server reads before refusing, so it has unread
/// input when it does), and then, having read the server's answer to the end, writes the
/// rest of the payload on and on (as a browser sending a huge message does): returns the
/// close code, after checking the close frame came first and then the end of stream, not a
/// reset, and that the server stopped taking input long before the message ended.
async fn refused_while_writing(w: &Web, first: &[u8]) -> u16 {
    const ANNOUNCED: u64 = 64 * 1024 * 1024;
    const FIRST: u64 = 32 * 1024;
    let tcp = raw_upgrade(w, &cookie_of("t1")).await;
    let (mut rx, mut tx) = tcp.into_split();
    let mut start = first.to_vec();
    // FIN, binary; masked (with a zero key), 64-bit length.
    start.extend([0x82, 0x80 | 127]);
    start.extend(ANNOUNCED.to_be_bytes());
    start.extend([0u8; 4]);
    start.extend([0u8; FIRST as usize]);
    tx.write_all(&start).await.unwrap();
    // Everything the server sends until its end of stream. Nothing is written meanwhile, so
    // a reset is what this read reports (a later write would take the error instead).
    let mut got = Vec::new();
    let read = guard("the server's close", rx.read_to_end(&mut got)).await;
    assert!(
        read.is_ok(),
        "the close frame and then the end of stream, not a reset: {read:?} after {got:?}"
    );
    assert!(got.len() >= 4, "no close frame before the end: {got:?}");
    assert_eq!(got[0], 0x88, "a close frame first: {got:?}");
    let sent = guard("the server to stop taking input", async {
        let chunk = vec![0u8; 64 * 1024];
        let mut sent = FIRST;
        while sent < ANNOUNCED && tx.write_all(&chunk).await.is_ok() {
            sent += chunk.len() as u64;
        }
        sent
    })
    .await;
    assert!(
        sent < ANNOUNCED,
        "the server stopped taking input long before the message ended"
    );
    u16::from_be_bytes([got[2], got[3]])
}

#[tokio::test]
async fn a_sender_still_writing_a_message_far_over_the_cap_reads_close_1009_not_a_reset() {
    let mut c = ServerConfig::new(server_id());
    c.max_frame_length = 200;
    let w = Web::with(TestHost::new(&[]), c, |_| {}).await;
    w.gate.add("t1");
    assert_eq!(refused_while_writing(&w, &[]).await, 1009);
    guard("the connection to end", async {
        while w.server.connection_count() != 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_sender_still_writing_after_a_text_message_reads_close_1003_not_a_reset() {
    let w = Web::start().await;
    w.gate.add("t1");
    // FIN, text, masked with a zero key: "hi".
    assert_eq!(
        refused_while_writing(&w, &[0x81, 0x82, 0, 0, 0, 0, b'h', b'i']).await,
        1003
    );
}

#[tokio::test]
async fn a_text_message_is_a_protocol_error_that_closes_the_socket() {
    let w = Web::start().await;
    w.gate.add("t1");
    let cookie = format!("baton_web={}", cookie_of("t1"));
    let mut ws = w
        .ws(&[("Origin", &w.origin()), ("Cookie", &cookie)])
        .await
        .unwrap();
    ws.send(Message::text("{\"type\":\"hello\"}"))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Unsupported));
    guard("the connection to end", async {
        while w.server.connection_count() != 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_browser_over_the_connection_limit_gets_busy() {
    let mut c = ServerConfig::new(server_id());
    c.max_connections = 1;
    let w = Web::with(TestHost::new(&[]), c, |_| {}).await;
    let _first = w.ready_peer("t1").await;
    w.gate.add("t2");
    let mut second = w.peer(&cookie_of("t2")).await;
    second
        .expect_hello_error("busy", "Server connection limit of 1 reached")
        .await;
}

#[tokio::test]
async fn a_slow_browser_gets_a_resync_and_converges() {
    let host = TestHost::new(&[]);
    host.with(|i| i.blob_len = 64 * 1024);
    let mut c = ServerConfig::new(server_id());
    c.subscriber_queue_length = 8;
    let w = Web::with(host.clone(), c, |_| {}).await;
    let mut p = w.ready_peer("t1").await;
    let mut mirror = subscribe_server(&mut p, "service-1").await;
    // The browser stops reading: the socket and the WebSocket's buffer fill, the writer
    // waits on the sink, the queue fills, then a resync replaces the backlog.
    let mut bumps = 0;
    while !host.lock().published.contains(&Published::Reset) {
        host.bump();
        bumps += 1;
        assert!(bumps < 5_000, "no resync after {bumps} updates");
    }
    for _ in 0..3 {
        host.bump();
    }
    let ping = p.request(p.server_target(), echo(0)).await;
    loop {
        match p.recv().await {
            ServerMessage::ServiceUpdate(ServiceUpdate {
                subscription_id,
                update,
            }) => {
                assert_eq!(subscription_id, id("service-1"));
                mirror.apply(&update);
            }
            ServerMessage::Response(r) if r.id == ping => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(mirror.resets >= 1, "expected a resync");
    assert!(mirror.types.get("replaced").is_some_and(|n| *n >= 1));
    assert!(
        mirror.updates < bumps + 3,
        "some updates must have been coalesced"
    );
    assert_eq!(mirror.sequence(), Some(host.counter_sequence()));
    assert_eq!(mirror.value(), Some(&host.counter_value()));
}

/// Reads `p`'s updates into `mirror` until it shows `sequence`.
async fn converge(p: &mut RawPeer, mirror: &mut Mirror, sequence: u64) {
    while mirror.sequence() != Some(sequence) {
        match p.recv().await {
            ServerMessage::ServiceUpdate(u) => mirror.apply(&u.update),
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_browsers_at_once_converge_on_the_same_state() {
    const BROWSERS: usize = 1_000;
    let host = TestHost::new(&[]);
    let w = Web::start_with_host(host.clone()).await;
    // All connected and subscribed at once (connecting a bounded number at a time).
    let peers: Vec<(RawPeer, Mirror)> = futures::stream::iter(0..BROWSERS)
        .map(|i| {
            let w = &w;
            async move {
                let mut p = w.ready_peer(&format!("t{i}")).await;
                let m = subscribe_server(&mut p, "service-1").await;
                (p, m)
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert_eq!(w.server.connection_count(), BROWSERS);
    for _ in 0..20 {
        host.bump();
    }
    let sequence = host.counter_sequence();
    let value = host.counter_value();
    let converged: Vec<Mirror> = futures::stream::iter(peers)
        .map(|(mut p, mut m)| async move {
            converge(&mut p, &mut m, sequence).await;
            m
        })
        .buffer_unordered(BROWSERS)
        .collect()
        .await;
    assert_eq!(converged.len(), BROWSERS);
    for m in &converged {
        assert_eq!(m.value(), Some(&value));
    }
}
