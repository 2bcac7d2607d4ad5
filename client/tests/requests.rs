//! Client connection, requests, cancellation and disconnects against a scripted server.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use std::time::Duration;

use baton_client::{
    Client, CloseReason, ConnectError, ReconnectPolicy, Reply, RequestError, RequestOptions, Status,
};
use baton_protocol::{
    ClientMessage, ErrorCode, Id, Outcome, ServerMessage, SessionTarget, Target, Value, WireError,
};
use support::{HANG_GUARD, Listener, other_server_id, server_id};
use tokio_util::sync::CancellationToken;

fn call(member: &str) -> Value {
    Value::from_json(&format!(
        r#"{{"serviceId":"test.echo","member":"{member}","args":[]}}"#
    ))
    .unwrap()
}

async fn connected(listener: &Listener) -> (Client, support::Peer) {
    let (client, peer) = tokio::join!(Client::connect(listener.config()), listener.accept_ready());
    (client.unwrap(), peer)
}

#[tokio::test]
async fn connects_and_learns_the_server_id() {
    let listener = Listener::bind();
    let (client, _peer) = connected(&listener).await;
    assert_eq!(client.server_id(), &server_id());
    assert_eq!(client.status(), Status::Connected);
}

#[tokio::test]
async fn a_different_server_id_is_a_typed_handshake_error() {
    let listener = Listener::bind();
    let mut config = listener.config();
    config.expected_server_id = Some(server_id());
    let server = async {
        let mut peer = listener.accept().await;
        peer.handshake(other_server_id()).await;
        peer
    };
    let (result, _peer) = tokio::join!(Client::connect(config), server);
    let err = result.unwrap_err();
    assert!(matches!(err, ConnectError::Handshake { .. }), "{err}");
    assert!(err.to_string().contains("does not match"), "{err}");
}

#[tokio::test]
async fn hello_error_keeps_the_server_code() {
    let listener = Listener::bind();
    let server = async {
        let mut peer = listener.accept().await;
        assert_eq!(peer.recv().await, ClientMessage::hello());
        peer.send(ServerMessage::HelloError(WireError::from_code(
            ErrorCode::Version,
            "Unsupported protocol version 8; expected 9",
        )))
        .await;
        peer
    };
    let (result, _peer) = tokio::join!(Client::connect(listener.config()), server);
    let err = result.unwrap_err();
    assert_eq!(err.server_code(), Some("version"));
    assert_eq!(err.server_kind(), Some(ErrorCode::Version));
    assert!(
        err.to_string()
            .contains("Unsupported protocol version 8; expected 9")
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_connect_error() {
    let listener = Listener::bind();
    let mut config = listener.config();
    config.endpoint = baton_client::Endpoint::Unix(listener.path.with_file_name("missing.sock"));
    let err = Client::connect(config).await.unwrap_err();
    assert!(matches!(err, ConnectError::Io { .. }));
    assert!(
        err.to_string().starts_with("cannot connect to unix://"),
        "{err}"
    );
}

#[tokio::test]
async fn responses_reach_their_callers_in_any_order() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let target = client.server_target();
    let a = client.request(target.clone(), call("a"));
    let b = client.request(target.clone(), call("b"));
    let server = async {
        let ra = peer.recv_request().await;
        let rb = peer.recv_request().await;
        assert_eq!(ra.target, target);
        // Answer the second first, with a void and a null result.
        peer.respond(&rb.id, Outcome::Value(Value::Null)).await;
        peer.respond(&ra.id, Outcome::Void).await;
        (ra, rb)
    };
    let (ra, rb, (req_a, req_b)) = tokio::join!(a, b, server);
    assert_eq!(req_a.call, call("a"));
    assert_eq!(req_b.call, call("b"));
    assert_eq!(ra.unwrap(), Reply::Void);
    assert_eq!(rb.unwrap(), Reply::Value(Value::Null));
}

#[tokio::test]
async fn server_errors_keep_their_code_and_message() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let req = client.request(client.server_target(), call("x"));
    let server = async {
        let r = peer.recv_request().await;
        peer.respond(
            &r.id,
            Outcome::Error(WireError::from_code(
                ErrorCode::SessionNotFound,
                "Session was not found",
            )),
        )
        .await;
    };
    let (result, ()) = tokio::join!(req, server);
    let err = result.unwrap_err();
    assert_eq!(err.code(), Some("session_not_found"));
    assert_eq!(err.kind(), Some(ErrorCode::SessionNotFound));
    assert!(err.is(ErrorCode::SessionNotFound));
    assert!(!err.is(ErrorCode::SessionNotAttached));
    assert_eq!(err.to_string(), "session_not_found: Session was not found");
}

#[tokio::test]
async fn a_server_code_baton_does_not_know_keeps_its_text_and_has_no_kind() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let req = client.request(client.server_target(), call("x"));
    let server = async {
        let r = peer.recv_request().await;
        // Codes are opaque to a client: an application's own code must still arrive.
        peer.respond(
            &r.id,
            Outcome::Error(WireError::new("application_error", "boom")),
        )
        .await;
    };
    let (result, ()) = tokio::join!(req, server);
    let err = result.unwrap_err();
    assert_eq!(err.code(), Some("application_error"));
    assert_eq!(err.kind(), None);
    assert!(!err.is(ErrorCode::InternalError));
    // Local errors carry no server code.
    assert_eq!(RequestError::Closed.kind(), None);
}

#[tokio::test]
async fn dropping_a_request_sends_cancel_and_ignores_the_late_answer() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let target = client.server_target();
    let fut = client.request(target.clone(), call("slow"));
    // Run the request until the server has it, then drop the future.
    let r = {
        tokio::pin!(fut);
        tokio::select! {
            _ = &mut fut => panic!("not answered yet"),
            r = peer.recv_request() => r,
        }
    };
    match peer.recv().await {
        ClientMessage::Cancel(c) => {
            assert_eq!(c.id, r.id);
            assert_eq!(c.target, target);
        }
        other => panic!("expected cancel, got {other:?}"),
    }
    // The late answer is ignored and the connection stays usable.
    peer.respond(
        &r.id,
        Outcome::Error(WireError::new("cancelled", "RPC request cancelled")),
    )
    .await;
    let next = client.request(target, call("after"));
    let server = async {
        let r2 = peer.recv_request().await;
        peer.respond(&r2.id, Outcome::Value(Value::from("ok")))
            .await;
    };
    let (result, ()) = tokio::join!(next, server);
    assert_eq!(result.unwrap(), Reply::Value(Value::from("ok")));
}

#[tokio::test]
async fn a_cancelled_token_before_sending_sends_nothing() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let token = CancellationToken::new();
    token.cancel();
    let options = RequestOptions {
        cancel: Some(token),
        timeout: None,
    };
    let err = client
        .request_with_options(client.server_target(), call("never"), options)
        .await
        .unwrap_err();
    assert_eq!(err, RequestError::Cancelled);
    // The next frame the server sees is the next real request.
    let next = client.request(client.server_target(), call("next"));
    let server = async {
        let r = peer.recv_request().await;
        assert_eq!(r.call, call("next"));
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (result, ()) = tokio::join!(next, server);
    result.unwrap();
}

#[tokio::test]
async fn cancelling_a_token_after_sending_sends_cancel() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let token = CancellationToken::new();
    let options = RequestOptions {
        cancel: Some(token.clone()),
        timeout: None,
    };
    let req = client.request_with_options(client.server_target(), call("slow"), options);
    let server = async {
        let r = peer.recv_request().await;
        token.cancel();
        match peer.recv().await {
            ClientMessage::Cancel(c) => assert_eq!(c.id, r.id),
            other => panic!("expected cancel, got {other:?}"),
        }
    };
    let (result, ()) = tokio::join!(req, server);
    assert_eq!(result.unwrap_err(), RequestError::Cancelled);
}

#[tokio::test]
async fn a_request_timeout_cancels_the_request_if_it_was_sent() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let options = RequestOptions {
        cancel: None,
        timeout: Some(Duration::from_millis(300)),
    };
    let err = client
        .request_with_options(client.server_target(), call("slow"), options)
        .await
        .unwrap_err();
    assert_eq!(err, RequestError::TimedOut);
    // Under load the timeout may fire before the request leaves: then nothing is sent.
    // Either way, a request that was sent is followed by its cancel before the probe.
    let probe = client.request(client.server_target(), call("probe"));
    let server = async {
        let mut slow: Option<Id> = None;
        loop {
            match peer.recv().await {
                ClientMessage::Request(r) if r.call == call("slow") => slow = Some(r.id),
                ClientMessage::Cancel(c) => {
                    assert_eq!(Some(&c.id), slow.as_ref());
                    slow = None;
                }
                ClientMessage::Request(r) => {
                    assert_eq!(r.call, call("probe"));
                    assert!(slow.is_none(), "a sent request timed out without a cancel");
                    peer.respond(&r.id, Outcome::Void).await;
                    return;
                }
                other @ ClientMessage::Hello { .. } => panic!("unexpected {other:?}"),
            }
        }
    };
    let (result, ()) = tokio::join!(probe, server);
    result.unwrap();
}

#[tokio::test]
async fn a_response_to_no_request_ends_the_connection() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let mut status = client.watch_status();
    peer.respond(&Id::new("request-999").unwrap(), Outcome::Void)
        .await;
    let closed = tokio::time::timeout(
        HANG_GUARD,
        status.wait_for(|s| matches!(s, Status::Closed { .. })),
    )
    .await
    .unwrap()
    .unwrap()
    .clone();
    assert_eq!(
        closed,
        Status::Closed {
            reason: CloseReason::Lost("Response has no matching request".to_owned())
        }
    );
}

#[tokio::test]
async fn a_sent_request_has_an_unknown_outcome_when_the_connection_drops() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let req = client.request(client.server_target(), call("slow"));
    let server = async move {
        peer.recv_request().await;
        drop(peer);
    };
    let (result, ()) = tokio::join!(req, server);
    assert!(matches!(
        result.unwrap_err(),
        RequestError::OutcomeUnknown(_)
    ));
    // Nothing can be sent any more.
    let after = client.request(client.server_target(), call("after")).await;
    assert!(matches!(
        after.unwrap_err(),
        RequestError::Closed | RequestError::NotSent(_)
    ));
}

#[tokio::test]
async fn session_calls_use_the_current_attachment_and_never_a_stale_one() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let route = SessionTarget {
        server_id: server_id(),
        session_id: Id::new("session-1").unwrap(),
        attachment_id: Id::new("attachment-1").unwrap(),
    };
    let attach = client.attach("session-1");
    let server = async {
        let r = peer.recv_request().await;
        assert_eq!(r.target, Target::Server(server_id()));
        assert_eq!(
            r.call,
            Value::from_json(
                r#"{"serviceId":"pi.session-management","member":"attach","args":["session-1"]}"#
            )
            .unwrap()
        );
        // The attachment frame precedes the response.
        peer.send(ServerMessage::Attachment(Some(route.clone())))
            .await;
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (session, ()) = tokio::join!(attach, server);
    let session = session.unwrap();
    assert_eq!(client.attachment(), Some(route.clone()));

    let req = session.request(call("state"));
    let server = async {
        let r = peer.recv_request().await;
        assert_eq!(r.target, Target::Session(route.clone()));
        peer.respond(&r.id, Outcome::Value(Value::from(1u8))).await;
    };
    let (result, ()) = tokio::join!(req, server);
    assert_eq!(result.unwrap(), Reply::Value(Value::from(1u8)));

    // The server ends the attachment: later session calls fail locally, unsent.
    peer.send(ServerMessage::Attachment(None)).await;
    let mut watch = client.watch_attachment();
    tokio::time::timeout(HANG_GUARD, watch.wait_for(Option::is_none))
        .await
        .unwrap()
        .unwrap();
    let err = session.request(call("state")).await.unwrap_err();
    assert_eq!(err, RequestError::NotAttached("session-1".to_owned()));
    // Proof that nothing was sent: the next frame is this server-target request.
    let next = client.request(client.server_target(), call("next"));
    let server = async {
        let r = peer.recv_request().await;
        assert_eq!(r.call, call("next"));
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (result, ()) = tokio::join!(next, server);
    result.unwrap();
}

#[tokio::test]
async fn an_attachment_for_another_server_ends_the_connection() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let mut status = client.watch_status();
    peer.send(ServerMessage::Attachment(Some(SessionTarget {
        server_id: other_server_id(),
        session_id: Id::new("s").unwrap(),
        attachment_id: Id::new("a").unwrap(),
    })))
    .await;
    let s = tokio::time::timeout(
        HANG_GUARD,
        status.wait_for(|s| matches!(s, Status::Closed { .. })),
    )
    .await
    .unwrap()
    .unwrap()
    .clone();
    assert_eq!(
        s,
        Status::Closed {
            reason: CloseReason::Lost("Attachment update belongs to another server".into())
        }
    );
}

#[tokio::test]
async fn close_rejects_pending_requests_and_is_idempotent() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let req = client.request(client.server_target(), call("slow"));
    let closer = async {
        peer.recv_request().await;
        client.close().await;
        client.close().await;
    };
    let (result, ()) = tokio::join!(req, closer);
    assert!(matches!(
        result.unwrap_err(),
        RequestError::OutcomeUnknown(_) | RequestError::Closed
    ));
    peer.expect_eof().await;
}

#[tokio::test]
async fn a_request_made_while_reconnecting_is_sent_on_the_new_connection() {
    // While connected, requests skip the driver; while reconnecting they wait for it.
    let listener = Listener::bind();
    let mut config = listener.config();
    config.reconnect = Some(ReconnectPolicy {
        initial_delay: Duration::from_millis(50),
        max_delay: Duration::from_millis(50),
        ..ReconnectPolicy::default()
    });
    let (client, peer) = tokio::join!(Client::connect(config), listener.accept_ready());
    let client = client.unwrap();
    let mut status = client.watch_status();
    drop(peer);
    tokio::time::timeout(
        HANG_GUARD,
        status.wait_for(|s| matches!(s, Status::Reconnecting { .. })),
    )
    .await
    .unwrap()
    .unwrap();
    let req = client.request(client.server_target(), call("later"));
    let server = async {
        let mut peer = listener.accept_ready().await;
        let r = peer.recv_request().await;
        assert_eq!(r.call, call("later"));
        peer.respond(&r.id, Outcome::Value(Value::from("ok"))).await;
        peer
    };
    let (result, _peer) = tokio::join!(req, server);
    assert_eq!(result.unwrap(), Reply::Value(Value::from("ok")));
}

#[tokio::test]
async fn attaching_by_a_prefix_follows_the_session_id_the_server_announces() {
    // A host may resolve a prefix or alias; the attachment frame carries the canonical id.
    let listener = Listener::bind();
    let mut config = listener.config();
    config.reconnect = Some(ReconnectPolicy {
        initial_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(20),
        ..ReconnectPolicy::default()
    });
    let (client, mut peer) = tokio::join!(Client::connect(config), listener.accept_ready());
    let client = client.unwrap();
    let route = |attachment: &str| SessionTarget {
        server_id: server_id(),
        session_id: Id::new("session-1").unwrap(),
        attachment_id: Id::new(attachment).unwrap(),
    };
    let attach = client.attach("sess");
    let server = async {
        let r = peer.recv_request().await;
        assert_eq!(
            r.call,
            Value::from_json(
                r#"{"serviceId":"pi.session-management","member":"attach","args":["sess"]}"#
            )
            .unwrap()
        );
        peer.send(ServerMessage::Attachment(Some(route("attachment-1"))))
            .await;
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (session, ()) = tokio::join!(attach, server);
    let session = session.unwrap();
    assert_eq!(session.id(), "session-1");
    assert_eq!(session.initial_target(), &route("attachment-1"));
    let req = session.request(call("state"));
    let server = async {
        let r = peer.recv_request().await;
        assert_eq!(r.target, Target::Session(route("attachment-1")));
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (result, ()) = tokio::join!(req, server);
    result.unwrap();

    // After a reconnect the client re-attaches by the canonical id.
    drop(peer);
    let mut peer = listener.accept_ready().await;
    let r = peer.recv_request().await;
    assert_eq!(
        r.call,
        Value::from_json(
            r#"{"serviceId":"pi.session-management","member":"attach","args":["session-1"]}"#
        )
        .unwrap()
    );
    peer.send(ServerMessage::Attachment(Some(route("attachment-2"))))
        .await;
    peer.respond(&r.id, Outcome::Void).await;
    let mut watch = client.watch_attachment();
    tokio::time::timeout(
        HANG_GUARD,
        watch.wait_for(|a| a.as_ref() == Some(&route("attachment-2"))),
    )
    .await
    .unwrap()
    .unwrap();
    let req = session.request(call("state"));
    let server = async {
        let r = peer.recv_request().await;
        assert_eq!(r.target, Target::Session(route("attachment-2")));
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (result, ()) = tokio::join!(req, server);
    result.unwrap();
}

#[tokio::test]
async fn requests_beyond_max_in_flight_wait_in_order_while_other_commands_go_ahead() {
    let listener = Listener::bind();
    let mut config = listener.config();
    config.max_in_flight = 2;
    let (client, peer) = tokio::join!(Client::connect(config), listener.accept_ready());
    let (client, mut peer) = (client.unwrap(), peer);
    let target = client.server_target();
    let r1 = client.request(target.clone(), call("r1"));
    let r2 = client.request(target.clone(), call("r2"));
    let r3 = client.request(target.clone(), call("r3"));
    // Asked for after the third request, and not counted against the limit.
    let detach = client.detach();
    let server = async {
        let first = peer.recv_request().await;
        let second = peer.recv_request().await;
        let detaching = peer.recv_request().await;
        assert_eq!(
            (&first.call, &second.call, &detaching.call),
            (
                &call("r1"),
                &call("r2"),
                &Value::from_json(
                    r#"{"serviceId":"pi.session-management","member":"detach","args":[]}"#
                )
                .unwrap()
            ),
            "the third request waits for a slot"
        );
        peer.respond(&detaching.id, Outcome::Void).await;
        peer.respond(&second.id, Outcome::Value(Value::from("two")))
            .await;
        // The answer freed a slot: only now does the third go out.
        let third = peer.recv_request().await;
        assert_eq!(third.call, call("r3"));
        peer.respond(&third.id, Outcome::Value(Value::from("three")))
            .await;
        peer.respond(&first.id, Outcome::Value(Value::from("one")))
            .await;
    };
    let (a, b, c, d, ()) = tokio::join!(r1, r2, r3, detach, server);
    assert_eq!(a.unwrap(), Reply::Value(Value::from("one")));
    assert_eq!(b.unwrap(), Reply::Value(Value::from("two")));
    assert_eq!(c.unwrap(), Reply::Value(Value::from("three")));
    d.unwrap();
}

/// Polls `fut` once, so a request's order is queued before the next one's.
async fn poll_once<F: Future + Unpin>(fut: &mut F) {
    tokio::select! {
        biased;
        _ = fut => panic!("answered by a server that has answered nothing"),
        () = std::future::ready(()) => {}
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_fires_while_the_request_waits_in_the_queue_behind_a_full_in_flight_limit() {
    let listener = Listener::bind();
    let mut config = listener.config();
    config.max_in_flight = 1;
    let (client, peer) = tokio::join!(Client::connect(config), listener.accept_ready());
    let (client, mut peer) = (client.unwrap(), peer);
    let target = client.server_target();
    // One request in flight and one waiting for its slot: the limit admits no more, so the
    // connection task takes no further order.
    let mut r1 = Box::pin(client.request(target.clone(), call("r1")));
    let mut r2 = Box::pin(client.request(target.clone(), call("r2")));
    poll_once(&mut r1).await;
    poll_once(&mut r2).await;
    let first = peer.recv_request().await;
    assert_eq!(first.call, call("r1"));

    let options = RequestOptions {
        cancel: None,
        timeout: Some(Duration::from_secs(1)),
    };
    let started = tokio::time::Instant::now();
    let r3 = client.request_with_options(target.clone(), call("r3"), options);
    let err = tokio::time::timeout(HANG_GUARD, r3)
        .await
        .expect("the timeout fires while the request waits")
        .unwrap_err();
    assert_eq!(err, RequestError::TimedOut);
    assert_eq!(started.elapsed(), Duration::from_secs(1), "at its deadline");

    // The timed-out request never leaves: after the waiting one, the next is the probe.
    let probe = client.request(target.clone(), call("probe"));
    let server = async {
        peer.respond(&first.id, Outcome::Void).await;
        let second = peer.recv_request().await;
        assert_eq!(second.call, call("r2"));
        peer.respond(&second.id, Outcome::Void).await;
        let next = peer.recv_request().await;
        assert_eq!(next.call, call("probe"), "the timed-out request was sent");
        peer.respond(&next.id, Outcome::Void).await;
    };
    let (a, b, c, ()) = tokio::join!(r1, r2, probe, server);
    a.unwrap();
    b.unwrap();
    c.unwrap();
}
