//! Graceful close: stop accepting, `server_draining`, in-flight completion, deadline,
//! release and close, socket removal, idempotence.

use std::time::Duration;

use baton_protocol::{Outcome, Target, Value};
use baton_tests::guard;
use baton_tests::host::TestHost;
use baton_tests::peer::{call, error};
use baton_tests::server::{TestServer, config};

#[tokio::test]
async fn close_drains_in_flight_requests_and_refuses_new_ones() {
    let host = TestHost::new(&["s1"]);
    host.close_gate("g");
    let s = TestServer::unix(host.clone(), config()).await;
    let path = s.socket_path();
    let mut p = s.ready_peer().await;
    let route = p.attach("s1").await;
    let inflight = p
        .request(
            p.server_target(),
            call(
                "test",
                "wait",
                vec![Value::from("g"), Value::from("ignore")],
            ),
        )
        .await;
    host.until("call waiting", |i| {
        i.events.iter().any(|e| e == "waiting g")
    })
    .await;

    let server = &s.server;
    let client = async {
        // New requests are refused once draining starts (the socket file is gone by then).
        loop {
            let out = p
                .call(p.server_target(), call("test", "echo", vec![]))
                .await;
            if out == error("server_draining", "Server is draining") {
                break;
            }
            assert_eq!(out, Outcome::Value(Value::Null));
        }
        assert!(!path.exists(), "socket removed when accepting stopped");
        assert_eq!(
            p.call(Target::Session(route), call("test", "echo", vec![]))
                .await,
            error("server_draining", "Server is draining")
        );
        host.open_gate("g");
        assert_eq!(
            p.expect_response(&inflight).await,
            Outcome::Value(Value::from("g"))
        );
        p.expect_closed().await;
    };
    let (closed, ()) = guard("close", async { tokio::join!(server.close(), client) }).await;
    closed.unwrap();
    {
        let i = host.lock();
        assert_eq!(i.lease_releases["s1"], 1);
        assert_eq!(i.closes["s1"], 1);
        assert_eq!(i.services_released, 1);
    }
    // Idempotent.
    guard("second close", server.close()).await.unwrap();
}

#[tokio::test]
async fn drain_deadline_abandons_requests_that_do_not_finish() {
    let host = TestHost::new(&[]);
    host.close_gate("never");
    let mut c = config();
    c.drain_timeout = Duration::from_millis(100);
    let s = TestServer::unix(host.clone(), c).await;
    let mut p = s.ready_peer().await;
    let rid = p
        .request(
            p.server_target(),
            call(
                "test",
                "wait",
                vec![Value::from("never"), Value::from("ignore")],
            ),
        )
        .await;
    host.until("call waiting", |i| {
        i.events.iter().any(|e| e == "waiting never")
    })
    .await;
    guard("close", s.server.close()).await.unwrap();
    assert_eq!(
        p.expect_response(&rid).await,
        error("server_draining", "Server is draining")
    );
    p.expect_closed().await;
}

#[tokio::test]
async fn close_with_no_connections_removes_the_socket_and_refuses_connects() {
    let s = TestServer::unix(TestHost::new(&[]), config()).await;
    let path = s.socket_path();
    assert!(path.exists());
    guard("close", s.server.close()).await.unwrap();
    assert!(!path.exists());
    let refused = tokio::net::UnixStream::connect(&path).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::NotFound, "{refused}");
}

#[tokio::test]
async fn a_session_opened_while_closing_is_closed_and_the_attach_refused() {
    let host = TestHost::new(&["s1"]);
    host.close_gate(baton_tests::host::gates::OPEN);
    let s = TestServer::unix(host.clone(), config()).await;
    let mut p = s.ready_peer().await;
    let rid = p
        .request(
            p.server_target(),
            call("pi.session-management", "attach", vec![Value::from("s1")]),
        )
        .await;
    host.until("open waiting", |i| {
        i.events.iter().any(|e| e == "waiting open")
    })
    .await;
    let client = async {
        // Draining has begun once a new request is refused; then let the open finish.
        loop {
            let out = p
                .call(p.server_target(), call("test", "echo", vec![]))
                .await;
            if out == error("server_draining", "Server is draining") {
                break;
            }
        }
        host.open_gate(baton_tests::host::gates::OPEN);
        assert_eq!(
            p.expect_response(&rid).await,
            error("server_draining", "Server is draining")
        );
        p.expect_closed().await;
    };
    let (closed, ()) = guard("close", async { tokio::join!(s.server.close(), client) }).await;
    closed.unwrap();
    assert_eq!(host.lock().closes["s1"], 1);
    assert!(host.lock().session_attaches.is_empty());
}
