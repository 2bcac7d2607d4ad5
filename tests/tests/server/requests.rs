//! Request handling order, responses, errors and cancel (spec §5.2, §5.3).

use baton_protocol::{
    ClientMessage, Map, Outcome, Request, ServerId, ServerMessage, Target, Value,
};
use baton_tests::host::TestHost;
use baton_tests::peer::{RawPeer, call, error, id};
use baton_tests::server::{TestServer, config};
use baton_tests::{OTHER_SERVER_ID, guard};

fn wait(gate: &str, mode: &str) -> Value {
    call("test", "wait", vec![Value::from(gate), Value::from(mode)])
}

#[tokio::test]
async fn void_and_null_results_are_distinct() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.ready_peer().await;
    assert_eq!(
        p.call(p.server_target(), call("test", "void", vec![]))
            .await,
        Outcome::Void
    );
    assert_eq!(
        p.call(p.server_target(), call("test", "echo", vec![Value::Null]))
            .await,
        Outcome::Value(Value::Null)
    );
}

#[tokio::test]
async fn calls_done_on_their_first_poll_are_answered_exactly_once_even_in_one_read() {
    // Echo-like calls (and a panicking one) finish on their first poll, which the server
    // does in the connection's reader; a batch of them arriving in one read must still get
    // one response each, and a panic must still answer `internal_error`.
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.ready_peer().await;
    let mut bytes = Vec::new();
    let mut expected = std::collections::HashMap::new();
    for i in 0..40_i32 {
        let rid = p.next_id();
        let (c, outcome) = if i % 10 == 3 {
            (
                call("test", "panic", vec![Value::from("inline")]),
                error("internal_error", "Internal server error"),
            )
        } else {
            (
                call("test", "echo", vec![Value::from(i)]),
                Outcome::Value(Value::from(i)),
            )
        };
        bytes.extend(RawPeer::frame(&ClientMessage::Request(Request {
            id: rid.clone(),
            target: p.server_target(),
            call: c,
        })));
        expected.insert(rid, outcome);
    }
    p.send_bytes(&bytes).await;
    while !expected.is_empty() {
        match p.recv().await {
            ServerMessage::Response(r) => {
                let want = expected.remove(&r.id).expect("one response per request");
                assert_eq!(r.outcome, want);
            }
            other => panic!("expected a response, got {other:?}"),
        }
    }
    // No duplicate follows: the next message answers a fresh call.
    assert_eq!(
        p.call(p.server_target(), call("test", "void", vec![]))
            .await,
        Outcome::Void
    );
}

#[tokio::test]
async fn answers_written_by_the_reader_stay_whole_and_in_order_when_the_socket_fills() {
    // The reader writes a read batch's answers itself while the writer is idle; 24 answers
    // of ~40 KB are more than a socket buffer takes at once, so the rest must go to the
    // writer behind what was written, over TCP and Unix alike.
    for tcp in [false, true] {
        let s = if tcp {
            TestServer::tcp(TestHost::new(&[]), config()).await
        } else {
            TestServer::unix(TestHost::new(&[]), config()).await
        };
        let mut p = s.ready_peer().await;
        let mut bytes = Vec::new();
        let mut ids = Vec::new();
        for i in 0..24_u32 {
            let rid = p.next_id();
            let n = 40_000 + i;
            bytes.extend(RawPeer::frame(&ClientMessage::Request(Request {
                id: rid.clone(),
                target: p.server_target(),
                call: call("test", "big", vec![Value::from(n)]),
            })));
            ids.push((rid, n));
        }
        p.send_bytes(&bytes).await;
        for (rid, n) in ids {
            assert_eq!(
                p.expect_response(&rid).await,
                Outcome::Value(Value::from("x".repeat(n as usize)))
            );
        }
    }
}

#[tokio::test]
async fn responses_come_back_out_of_request_order() {
    let host = TestHost::new(&[]);
    host.close_gate("slow");
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    let slow = p.request(p.server_target(), wait("slow", "ignore")).await;
    host.until("slow call waiting", |i| {
        i.events.iter().any(|e| e == "waiting slow")
    })
    .await;
    let fast = p
        .request(
            p.server_target(),
            call("test", "echo", vec![Value::from("fast")]),
        )
        .await;
    assert_eq!(
        p.expect_response(&fast).await,
        Outcome::Value(Value::from("fast"))
    );
    host.open_gate("slow");
    assert_eq!(
        p.expect_response(&slow).await,
        Outcome::Value(Value::from("slow"))
    );
}

#[tokio::test]
async fn duplicate_active_request_id_is_rejected_and_the_original_still_answers() {
    let host = TestHost::new(&[]);
    host.close_gate("g");
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    let rid = id("dup");
    p.request_with_id(&rid, p.server_target(), wait("g", "ignore"))
        .await;
    p.request_with_id(&rid, p.server_target(), call("test", "echo", vec![]))
        .await;
    assert_eq!(
        p.expect_response(&rid).await,
        error("invalid_request", "Request ID is already active")
    );
    host.open_gate("g");
    assert_eq!(
        p.expect_response(&rid).await,
        Outcome::Value(Value::from("g"))
    );
    // Only the original reached the host.
    assert_eq!(host.count("call test.echo"), 0);
}

#[tokio::test]
async fn semantically_invalid_service_call_is_rejected() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.ready_peer().await;
    let mut m = Map::new();
    m.insert("arbitrary", Value::Bool(true));
    assert_eq!(
        p.call(p.server_target(), Value::Map(m)).await,
        error("invalid_request", "Invalid service call")
    );
    assert_eq!(
        p.call(p.server_target(), Value::Null).await,
        error("invalid_request", "Invalid service call")
    );
}

#[tokio::test]
async fn request_for_another_server_is_rejected_before_the_host_sees_it() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let mut p = s.ready_peer().await;
    let other = Target::Server(ServerId::parse(OTHER_SERVER_ID).unwrap());
    assert_eq!(
        p.call(
            other,
            call("pi.session-management", "attach", vec![Value::from("s1")])
        )
        .await,
        error("wrong_server", "Request was addressed to another server")
    );
    assert!(s.host.lock().events.iter().all(|e| !e.contains("call")));
}

#[tokio::test]
async fn internal_errors_are_sanitised() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.ready_peer().await;
    let out = p
        .call(p.server_target(), call("test", "fail", vec![]))
        .await;
    assert_eq!(out, error("internal_error", "Internal server error"));
    assert!(!format!("{out:?}").contains("private"));
}

#[tokio::test]
async fn host_errors_with_codes_pass_through_verbatim() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut p = s.ready_peer().await;
    assert_eq!(
        p.call(
            p.server_target(),
            call(
                "test",
                "error",
                vec![Value::from("application_error"), Value::from("safe")]
            )
        )
        .await,
        error("application_error", "safe")
    );
    assert_eq!(
        p.call(p.server_target(), call("nope", "x", vec![])).await,
        error("service_not_found", "Unknown remote service nope")
    );
}

#[tokio::test]
async fn cancel_of_a_cooperating_request_answers_cancelled_once() {
    let host = TestHost::new(&[]);
    host.close_gate("never");
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    let rid = p
        .request(p.server_target(), wait("never", "cancellable"))
        .await;
    host.until("call waiting", |i| {
        i.events.iter().any(|e| e == "waiting never")
    })
    .await;
    p.cancel(&rid, p.server_target()).await;
    assert_eq!(
        p.expect_response(&rid).await,
        error("cancelled", "RPC request cancelled")
    );
    // The host can tell an explicit cancel from a disconnect.
    assert_eq!(host.lock().explicit_cancels, 1);
    // Exactly one response: the next message answers the next request.
    let next = p
        .request(
            p.server_target(),
            call("test", "echo", vec![Value::from(2)]),
        )
        .await;
    assert_eq!(
        p.expect_response(&next).await,
        Outcome::Value(Value::from(2))
    );
}

#[tokio::test]
async fn cancel_of_a_request_that_ignores_it_gets_the_normal_result() {
    let host = TestHost::new(&[]);
    host.close_gate("g");
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    let rid = p.request(p.server_target(), wait("g", "ignore")).await;
    host.until("call waiting", |i| {
        i.events.iter().any(|e| e == "waiting g")
    })
    .await;
    p.cancel(&rid, p.server_target()).await;
    // The cancel itself is never answered; prove it was processed with a ping round trip.
    let ping = p
        .request(p.server_target(), call("test", "echo", vec![]))
        .await;
    assert_eq!(p.expect_response(&ping).await, Outcome::Value(Value::Null));
    host.open_gate("g");
    assert_eq!(
        p.expect_response(&rid).await,
        Outcome::Value(Value::from("g"))
    );
    assert_eq!(host.lock().cancelled_calls, 1);
}

#[tokio::test]
async fn cancel_with_another_target_or_unknown_id_is_ignored() {
    let host = TestHost::new(&[]);
    host.close_gate("g");
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    let rid = p.request(p.server_target(), wait("g", "cancellable")).await;
    host.until("call waiting", |i| {
        i.events.iter().any(|e| e == "waiting g")
    })
    .await;
    let session_target = Target::Session(baton_protocol::SessionTarget {
        server_id: baton_tests::server_id(),
        session_id: id("s1"),
        attachment_id: id("a1"),
    });
    p.cancel(&rid, session_target).await;
    p.cancel(
        &rid,
        Target::Server(ServerId::parse(OTHER_SERVER_ID).unwrap()),
    )
    .await;
    p.cancel(&id("unknown"), p.server_target()).await;
    let ping = p
        .request(p.server_target(), call("test", "echo", vec![]))
        .await;
    assert_eq!(p.expect_response(&ping).await, Outcome::Value(Value::Null));
    host.open_gate("g");
    assert_eq!(
        p.expect_response(&rid).await,
        Outcome::Value(Value::from("g"))
    );
    assert_eq!(host.lock().cancelled_calls, 0);
}

#[tokio::test]
async fn disconnect_cancels_active_requests() {
    let host = TestHost::new(&[]);
    host.close_gate("never");
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    p.request(p.server_target(), wait("never", "cancellable"))
        .await;
    host.until("call waiting", |i| {
        i.events.iter().any(|e| e == "waiting never")
    })
    .await;
    drop(p);
    host.until("call cancelled", |i| i.cancelled_calls == 1)
        .await;
    // Cancelled by the disconnect, not by the client: hosts may let such work run on.
    assert_eq!(host.lock().explicit_cancels, 0);
    host.until("services released", |i| i.services_released == 1)
        .await;
    guard("close", s.server.close()).await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_connection_with_a_huge_read_batch_cannot_starve_another_connection() {
    // One thread runs the server and both peers, so the order in which the host sees the
    // calls is the order in which the server's connections got their turns. The lone peer
    // sends its one call only once the host has seen the first of the busy peer's burst,
    // which is by then all in the busy connection's socket: had that connection's reader
    // answered the whole burst in its turn (reads of bytes already waiting take no budget),
    // neither this task nor the lone connection would run before its last answer.
    const BURST: usize = 600;
    let small = |i: usize| i32::try_from(i).expect("a small index");
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let mut busy = s.ready_peer().await;
    let mut lone = s.ready_peer().await;
    let mut burst = Vec::new();
    let mut last = None;
    for i in 0..BURST {
        let rid = busy.next_id();
        burst.extend(RawPeer::frame(&ClientMessage::Request(Request {
            id: rid.clone(),
            target: busy.server_target(),
            call: call("test", "echo", vec![Value::from(small(i))]),
        })));
        last = Some(rid);
    }
    busy.send_bytes(&burst).await;
    s.host
        .until("the burst is being answered", |i| {
            i.events.iter().any(|e| e == "call test.echo")
        })
        .await;
    let rid = lone
        .request(lone.server_target(), call("test", "void", vec![]))
        .await;
    assert_eq!(lone.expect_response(&rid).await, Outcome::Void);

    let calls: Vec<String> = s
        .host
        .lock()
        .events
        .iter()
        .filter(|e| e.starts_with("call test."))
        .cloned()
        .collect();
    let lone_at = calls
        .iter()
        .position(|e| e == "call test.void")
        .expect("the lone call reached the host");
    assert!(
        lone_at < BURST,
        "the lone call waited for the whole burst: answered after {lone_at} of {BURST}"
    );
    // The burst is still answered in full, in order.
    let last = last.expect("a burst");
    for i in 0..BURST {
        let m = busy.recv().await;
        let ServerMessage::Response(r) = m else {
            panic!("expected a response, got {m:?}");
        };
        assert_eq!(r.outcome, Outcome::Value(Value::from(small(i))));
        if i + 1 == BURST {
            assert_eq!(r.id, last);
        }
    }
}
