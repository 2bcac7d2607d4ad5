//! Session routing: attach/detach, attachment frames, fences, shared handles, opens,
//! termination, removal and disconnect (spec §5.4; upstream conformance.test.ts).

use baton_protocol::{Outcome, ServerMessage, SessionTarget, Target, Value};
use baton_tests::guard;
use baton_tests::host::{TestHost, gates};
use baton_tests::peer::{RawPeer, call, error, id};
use baton_tests::server::{TestServer, config};

fn echo(v: i32) -> Value {
    call("test", "echo", vec![Value::from(v)])
}

fn attach_call(session: &str) -> Value {
    call(
        "pi.session-management",
        "attach",
        vec![Value::from(session)],
    )
}

#[tokio::test]
async fn attachment_frame_precedes_the_attach_response() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let mut p = s.ready_peer().await;
    let rid = p.request(p.server_target(), attach_call("s1")).await;
    let route = match p.recv().await {
        ServerMessage::Attachment(Some(route)) => route,
        other => panic!("expected the attachment first, got {other:?}"),
    };
    assert_eq!(route.server_id, baton_tests::server_id());
    assert_eq!(route.session_id, id("s1"));
    assert!(baton_protocol::ids::is_canonical_uuid_v4(
        route.attachment_id.as_str()
    ));
    assert_eq!(p.expect_response(&rid).await, Outcome::Value(Value::Null));
    // The route reaches the session's services.
    assert_eq!(
        p.call(Target::Session(route), echo(5)).await,
        Outcome::Value(Value::from(5))
    );
    assert_eq!(s.host.count("session call test.echo"), 1);
}

#[tokio::test]
async fn repeated_attach_to_the_same_session_is_idempotent() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let mut p = s.ready_peer().await;
    let route = p.attach("s1").await;
    // No attachment frame this time: the response comes next.
    assert_eq!(
        p.call(p.server_target(), attach_call("s1")).await,
        Outcome::Value(Value::Null)
    );
    assert_eq!(s.host.lock().session_attaches["s1"], 1);
    assert_eq!(
        p.call(Target::Session(route), echo(1)).await,
        Outcome::Value(Value::from(1))
    );
}

#[tokio::test]
async fn two_connections_share_one_session_handle() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let mut a = s.ready_peer().await;
    let mut b = s.ready_peer().await;
    let ra = a.attach("s1").await;
    let rb = b.attach("s1").await;
    assert_ne!(ra.attachment_id, rb.attachment_id);
    let i = s.host.lock();
    assert_eq!(i.opens["s1"], 1);
    assert_eq!(i.session_attaches["s1"], 2);
}

#[tokio::test]
async fn session_call_without_attachment_is_rejected() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let mut p = s.ready_peer().await;
    let route = SessionTarget {
        server_id: baton_tests::server_id(),
        session_id: id("s1"),
        attachment_id: id("missing-attachment"),
    };
    assert_eq!(
        p.call(Target::Session(route), echo(1)).await,
        error(
            "session_not_attached",
            "Session is not attached to this client"
        )
    );
}

#[tokio::test]
async fn stale_attachment_after_switching_sessions_is_rejected() {
    let s = TestServer::unix(TestHost::new(&["s1", "s2"]), config()).await;
    let mut p = s.ready_peer().await;
    let first = p.attach("s1").await;
    let second = p.attach("s2").await;
    assert_eq!(
        p.call(Target::Session(first), echo(1)).await,
        error(
            "session_not_attached",
            "Session is not attached to this client"
        )
    );
    assert_eq!(s.host.count("session call test.echo"), 0);
    assert_eq!(
        p.call(Target::Session(second), echo(2)).await,
        Outcome::Value(Value::from(2))
    );
    // Switching released the first lease without an attachment:null.
    assert_eq!(s.host.lock().lease_releases["s1"], 1);
}

#[tokio::test]
async fn another_connections_attachment_is_foreign() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let mut a = s.ready_peer().await;
    let mut b = s.ready_peer().await;
    let ra = a.attach("s1").await;
    let _rb = b.attach("s1").await;
    assert_eq!(
        b.call(Target::Session(ra), echo(1)).await,
        error(
            "session_not_attached",
            "Session is not attached to this client"
        )
    );
}

#[tokio::test]
async fn detach_publishes_null_before_its_response() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let mut p = s.ready_peer().await;
    let route = p.attach("s1").await;
    let rid = p
        .request(
            p.server_target(),
            call("pi.session-management", "detach", vec![]),
        )
        .await;
    assert_eq!(p.expect_attachment().await, None);
    assert_eq!(p.expect_response(&rid).await, Outcome::Value(Value::Null));
    assert_eq!(s.host.lock().lease_releases["s1"], 1);
    assert_eq!(
        p.call(Target::Session(route), echo(1)).await,
        error(
            "session_not_attached",
            "Session is not attached to this client"
        )
    );
    // Detaching again: no frame, ok.
    assert_eq!(
        p.call(
            p.server_target(),
            call("pi.session-management", "detach", vec![])
        )
        .await,
        Outcome::Value(Value::Null)
    );
}

#[tokio::test]
async fn unknown_and_ambiguous_sessions_do_not_open_anything() {
    let s = TestServer::unix(TestHost::new(&["abc1", "abc2"]), config()).await;
    let mut p = s.ready_peer().await;
    assert_eq!(
        p.call(p.server_target(), attach_call("zzz")).await,
        error("session_not_found", "Session was not found")
    );
    assert_eq!(
        p.call(p.server_target(), attach_call("abc")).await,
        error(
            "session_ambiguous",
            "Session ID matches more than one session"
        )
    );
    assert!(s.host.lock().opens.is_empty());
}

#[tokio::test]
async fn attachment_route_carries_the_canonical_session_id_the_host_resolved() {
    let s = TestServer::unix(TestHost::new(&["abc1", "xyz"]), config()).await;
    let mut p = s.ready_peer().await;
    let route = p.attach("abc").await;
    assert_eq!(
        route.session_id,
        id("abc1"),
        "the id the host resolved, not the prefix"
    );
    assert_eq!(s.host.lock().opens["abc1"], 1);
    // Attaching again by the full id is the same attachment (no frame), and the route works.
    assert_eq!(
        p.call(p.server_target(), attach_call("abc1")).await,
        Outcome::Value(Value::Null)
    );
    assert_eq!(
        p.call(Target::Session(route), echo(7)).await,
        Outcome::Value(Value::from(7))
    );
}

#[tokio::test]
async fn concurrent_opens_share_one_failure_and_a_later_attach_retries() {
    let host = TestHost::new(&["s1"]);
    host.close_gate(gates::OPEN);
    host.with(|i| i.fail_open = true);
    let s = TestServer::unix(host.clone(), config()).await;
    let mut a = s.ready_peer().await;
    let mut b = s.ready_peer().await;
    let ra = a.request(a.server_target(), attach_call("s1")).await;
    host.until("first open waiting", |i| {
        i.events.iter().any(|e| e == "waiting open")
    })
    .await;
    let rb = b.request(b.server_target(), attach_call("s1")).await;
    // The second attach joins the open in progress (resolve is synchronous in the test host,
    // so once its call is logged it is waiting on the shared open).
    host.until("second attach running", |i| {
        i.events
            .iter()
            .filter(|e| *e == "call pi.session-management.attach")
            .count()
            == 2
    })
    .await;
    host.open_gate(gates::OPEN);
    assert_eq!(
        a.expect_response(&ra).await,
        error("internal_error", "Internal server error")
    );
    assert_eq!(
        b.expect_response(&rb).await,
        error("internal_error", "Internal server error")
    );
    assert_eq!(host.lock().opens["s1"], 1);
    host.with(|i| i.fail_open = false);
    let route = a.attach("s1").await;
    assert_eq!(host.lock().opens["s1"], 2);
    assert_eq!(
        a.call(Target::Session(route), echo(1)).await,
        Outcome::Value(Value::from(1))
    );
}

#[tokio::test]
async fn terminated_session_invalidates_attachments_and_allows_a_fresh_attach() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let mut a = s.ready_peer().await;
    let mut b = s.ready_peer().await;
    let ra = a.attach("s1").await;
    let _rb = b.attach("s1").await;
    s.host.terminate("s1");
    assert_eq!(a.expect_attachment().await, None);
    assert_eq!(b.expect_attachment().await, None);
    assert_eq!(
        a.call(Target::Session(ra), echo(1)).await,
        error(
            "session_not_attached",
            "Session is not attached to this client"
        )
    );
    let fresh = a.attach("s1").await;
    assert_eq!(s.host.lock().opens["s1"], 2);
    assert_eq!(
        a.call(Target::Session(fresh), echo(2)).await,
        Outcome::Value(Value::from(2))
    );
}

#[tokio::test]
async fn disconnect_releases_the_attachment_but_shutdown_closes_the_handle() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let mut a = s.ready_peer().await;
    a.attach("s1").await;
    drop(a);
    s.host
        .until("lease released", |i| i.lease_releases.get("s1") == Some(&1))
        .await;
    assert!(s.host.lock().closes.is_empty());
    guard("close", s.server.close()).await.unwrap();
    assert_eq!(s.host.lock().closes["s1"], 1);
}

#[tokio::test]
async fn session_removal_releases_every_attachment_and_closes_the_handle() {
    let s = TestServer::unix(TestHost::new(&["s1"]), config()).await;
    let mut a = s.ready_peer().await;
    let mut b = s.ready_peer().await;
    a.attach("s1").await;
    b.attach("s1").await;
    let rid = a
        .request(
            a.server_target(),
            call("pi.session-management", "remove", vec![Value::from("s1")]),
        )
        .await;
    assert_eq!(a.expect_attachment().await, None);
    assert_eq!(a.expect_response(&rid).await, Outcome::Void);
    assert_eq!(b.expect_attachment().await, None);
    assert_eq!(s.host.lock().closes["s1"], 1);
    assert_eq!(s.host.lock().lease_releases["s1"], 2);
}

#[tokio::test]
async fn admitted_session_calls_finish_before_the_lease_is_released() {
    let host = TestHost::new(&["s1"]);
    host.close_gate("g");
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    let route = p.attach("s1").await;
    let rid = p
        .request(
            Target::Session(route),
            call(
                "test",
                "wait",
                vec![Value::from("g"), Value::from("observe")],
            ),
        )
        .await;
    host.until("call waiting", |i| {
        i.events.iter().any(|e| e == "waiting g")
    })
    .await;
    drop(p);
    // Disconnected (the call saw its context cancelled), but it still holds the lease.
    host.until("cancel observed", |i| {
        i.events.iter().any(|e| e == "cancel observed")
    })
    .await;
    assert!(host.lock().lease_releases.is_empty());
    host.open_gate("g");
    host.until("lease released", |i| i.lease_releases.get("s1") == Some(&1))
        .await;
    let _ = rid;
}

#[tokio::test]
async fn attach_over_tcp_works_the_same() {
    let s = TestServer::tcp(TestHost::new(&["s1"]), config()).await;
    let mut p: RawPeer = s.ready_peer().await;
    let route = p.attach("s1").await;
    assert_eq!(
        p.call(Target::Session(route), echo(3)).await,
        Outcome::Value(Value::from(3))
    );
}
