//! Sans-IO handshakes: the client's checks and the server's hello-first, version and deadline.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
#![allow(
    clippy::disallowed_methods,
    reason = "tests need some base instant; the machines only ever add to it"
)]

use std::time::{Duration, Instant};

use baton_protocol::handshake::{ClientHandshake, HandshakeError, ServerHandshake, ServerStep};
use baton_protocol::{
    ClientMessage, ErrorCode, HelloVersion, Id, Request, ServerId, ServerMessage, Target, Value,
    WireError,
};

fn sid(last: char) -> ServerId {
    ServerId::parse(&format!("00000000-0000-4000-8000-00000000000{last}")).unwrap()
}

fn request() -> ClientMessage {
    ClientMessage::Request(Request {
        id: Id::new("request-1").unwrap(),
        target: Target::Server(sid('1')),
        call: Value::Null,
    })
}

#[test]
fn client_accepts_the_expected_server() {
    let mut hs = ClientHandshake::new(Some(sid('1')));
    assert_eq!(hs.start(), ClientMessage::hello());
    assert_eq!(
        hs.handle_message(&ServerMessage::Hello {
            server_id: sid('1')
        }),
        Ok(Some(sid('1')))
    );
    assert_eq!(hs.server_id(), Some(&sid('1')));
    assert_eq!(
        hs.handle_message(&ServerMessage::Attachment(None)),
        Ok(None)
    );
}

#[test]
fn client_rejects_a_different_server_with_upstream_wording() {
    let mut hs = ClientHandshake::new(Some(sid('1')));
    let _ = hs.start();
    let err = hs
        .handle_message(&ServerMessage::Hello {
            server_id: sid('2'),
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Connected server \"00000000-0000-4000-8000-000000000002\" does not match \"00000000-0000-4000-8000-000000000001\""
    );
}

#[test]
fn client_maps_hello_error_to_a_typed_server_error() {
    let mut hs = ClientHandshake::new(None);
    let _ = hs.start();
    let e = WireError::new("version", "Unsupported protocol version 8; expected 9");
    assert_eq!(
        hs.handle_message(&ServerMessage::HelloError(e.clone())),
        Err(HandshakeError::Server(e))
    );
}

#[test]
fn client_refuses_data_before_hello_and_a_second_hello() {
    let mut hs = ClientHandshake::new(None);
    assert_eq!(
        hs.handle_message(&ServerMessage::Hello {
            server_id: sid('1')
        }),
        Err(HandshakeError::DataBeforeHello)
    );
    let mut hs = ClientHandshake::new(None);
    let _ = hs.start();
    assert_eq!(
        hs.handle_message(&ServerMessage::Attachment(None)),
        Err(HandshakeError::ExpectedHello)
    );
    let mut hs = ClientHandshake::new(None);
    let _ = hs.start();
    hs.handle_message(&ServerMessage::Hello {
        server_id: sid('1'),
    })
    .unwrap();
    assert_eq!(
        hs.handle_message(&ServerMessage::Hello {
            server_id: sid('1')
        })
        .unwrap_err()
        .to_string(),
        "Unexpected handshake message"
    );
}

#[test]
fn server_requires_hello_first() {
    let mut hs = ServerHandshake::new(Instant::now(), Duration::from_secs(5));
    assert_eq!(
        hs.handle_message(&request()),
        ServerStep::Fail(WireError::new(
            "invalid_request",
            "The first client message must be hello"
        ))
    );
}

#[test]
fn server_refuses_other_versions_with_the_upstream_message() {
    let mut hs = ServerHandshake::new(Instant::now(), Duration::from_secs(5));
    assert_eq!(
        hs.handle_message(&ClientMessage::Hello {
            version: 9u32.into()
        }),
        ServerStep::Fail(WireError::new(
            "version",
            "Unsupported protocol version 9; expected 8"
        ))
    );
}

#[test]
fn server_queues_messages_behind_the_handshake_then_processes_them() {
    let mut hs = ServerHandshake::new(Instant::now(), Duration::from_secs(5));
    assert_eq!(
        hs.handle_message(&ClientMessage::hello()),
        ServerStep::Accept
    );
    assert_eq!(hs.handle_message(&request()), ServerStep::Queue);
    hs.complete();
    assert!(hs.is_ready());
    assert_eq!(hs.deadline(), None);
    assert_eq!(hs.handle_message(&request()), ServerStep::Process);
    assert_eq!(
        hs.handle_message(&ClientMessage::hello()),
        ServerStep::Fail(WireError::new(
            "invalid_request",
            "hello may only be sent as the first message"
        ))
    );
}

#[test]
fn server_times_out_only_once_the_deadline_has_passed() {
    let t0 = Instant::now();
    let mut hs = ServerHandshake::new(t0, Duration::from_millis(100));
    assert_eq!(hs.handle_timeout(t0 + Duration::from_millis(99)), None);
    assert_eq!(
        hs.handle_timeout(t0 + Duration::from_millis(100)),
        Some(WireError::new("invalid_request", "Handshake timeout"))
    );
    assert_eq!(hs.deadline(), None);
}

#[test]
fn server_deadline_still_applies_while_the_host_completes_the_handshake() {
    let t0 = Instant::now();
    let mut hs = ServerHandshake::new(t0, Duration::from_millis(100));
    assert_eq!(
        hs.handle_message(&ClientMessage::hello()),
        ServerStep::Accept
    );
    assert!(hs.handle_timeout(t0 + Duration::from_secs(1)).is_some());
}

#[test]
fn a_negative_zero_version_is_refused_like_version_zero() {
    // Upstream: `${-0}` renders as "0", and `-0 === 8` is false.
    let mut hs = ServerHandshake::new(Instant::now(), Duration::from_secs(5));
    assert_eq!(
        hs.handle_message(&ClientMessage::Hello {
            version: HelloVersion::NEGATIVE_ZERO
        }),
        ServerStep::Fail(WireError::from_code(
            ErrorCode::Version,
            "Unsupported protocol version 0; expected 8"
        ))
    );
}
