//! How long a client's connection lives, against a scripted server: while any `Client`,
//! `Session` or `Subscription` of it does. Dropping the last one, in any state, closes the
//! socket and ends the connection task (its status watch closes); no further dial is made.
//! A status or replica watch does not keep the connection alive.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use std::time::Duration;

use baton_client::{Client, CloseReason, ReconnectPolicy, Status, SubscriptionEvent};
use baton_protocol::chord::{ControlCall, ServiceCall, ServiceMode};
use baton_protocol::{
    ClientMessage, Id, Outcome, ServerMessage, ServiceUpdate, SessionTarget, Value,
};
use support::{HANG_GUARD, Listener, Peer};
use tokio::sync::watch;

/// Long enough that in paused time a client that means to dial again surely has.
const NO_DIAL_WITHIN: Duration = Duration::from_secs(3600);

fn json(s: &str) -> Value {
    Value::from_json(s).unwrap()
}

/// A call the scripted server answers with `Void`.
fn ping() -> Value {
    json(r#"{"serviceId":"test.echo","member":"ping","args":[]}"#)
}

/// Reconnects after exactly one second (no jitter), without end.
fn policy() -> ReconnectPolicy {
    ReconnectPolicy {
        initial_delay: Duration::from_secs(1),
        max_delay: Duration::from_secs(1),
        jitter: 0.0,
        ..ReconnectPolicy::default()
    }
}

async fn connected(listener: &Listener, reconnect: Option<ReconnectPolicy>) -> (Client, Peer) {
    let mut config = listener.config();
    config.reconnect = reconnect;
    // Only a drop, never a handshake deadline, may end a connection in these tests.
    config.connect_timeout = NO_DIAL_WITHIN * 2;
    let (client, peer) = tokio::join!(Client::connect(config), listener.accept_ready());
    (client.unwrap(), peer)
}

/// Waits until the connection task has ended: it owns the status sender, so the watch
/// closes exactly when the task is gone. Returns the last status it published.
async fn task_ended(mut status: watch::Receiver<Status>) -> Status {
    tokio::time::timeout(HANG_GUARD, async {
        while status.changed().await.is_ok() {}
    })
    .await
    .expect("the connection task ends");
    status.borrow().clone()
}

fn closed_by_the_last_drop(status: &Status) -> bool {
    matches!(
        status,
        Status::Closed {
            reason: CloseReason::Requested(why)
        } if why == "every client handle was dropped"
    )
}

/// Waits until the client reports it is waiting to reconnect.
async fn reconnecting(status: &mut watch::Receiver<Status>) {
    tokio::time::timeout(
        HANG_GUARD,
        status.wait_for(|s| matches!(s, Status::Reconnecting { .. })),
    )
    .await
    .expect("the client notices the loss")
    .unwrap();
}

/// Answers the next request `peer` receives with `Void`.
async fn answer_void(peer: &mut Peer) {
    let r = peer.recv_request().await;
    peer.respond(&r.id, Outcome::Void).await;
}

#[tokio::test]
async fn dropping_the_last_client_closes_the_connection_and_ends_its_task() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener, None).await;
    let status = client.watch_status();
    let clone = client.clone();
    drop(client);
    let (reply, ()) = tokio::join!(
        clone.request(clone.server_target(), ping()),
        answer_void(&mut peer),
    );
    assert!(reply.is_ok(), "a remaining clone keeps the connection");
    drop(clone);
    peer.expect_eof().await;
    let last = task_ended(status).await;
    assert!(closed_by_the_last_drop(&last), "{last:?}");
}

#[tokio::test(start_paused = true)]
async fn a_client_dropped_while_it_waits_to_reconnect_never_dials_again() {
    let listener = Listener::bind();
    let (client, peer) = connected(&listener, Some(policy())).await;
    let mut status = client.watch_status();
    drop(peer);
    reconnecting(&mut status).await;
    drop(client);
    assert!(
        listener.accept_within(NO_DIAL_WITHIN).await.is_none(),
        "a dropped client dials no more"
    );
    let last = task_ended(status).await;
    assert!(closed_by_the_last_drop(&last), "{last:?}");
}

#[tokio::test(start_paused = true)]
async fn a_client_dropped_during_a_reconnect_handshake_closes_that_socket_and_dials_no_more() {
    let listener = Listener::bind();
    let (client, peer) = connected(&listener, Some(policy())).await;
    let status = client.watch_status();
    drop(peer);
    let mut next = listener.accept().await;
    assert_eq!(next.recv().await, ClientMessage::hello());
    // The hello is never answered: the client is dropped mid-handshake.
    drop(client);
    next.expect_eof().await;
    assert!(
        listener.accept_within(NO_DIAL_WITHIN).await.is_none(),
        "a dropped client dials no more"
    );
    let last = task_ended(status).await;
    assert!(closed_by_the_last_drop(&last), "{last:?}");
}

#[tokio::test]
async fn a_client_dropped_while_a_stalled_server_reads_nothing_abandons_its_writes_and_ends() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener, None).await;
    let status = client.watch_status();
    // One frame far larger than a socket buffer, so most of it waits in the client, more than
    // `DEFAULT_WRITE_BACKLOG`: the task takes no orders while it does.
    let payload = "x".repeat(8 << 20);
    let call = json(&format!(
        r#"{{"serviceId":"test.echo","member":"big","args":["{payload}"]}}"#
    ));
    let mut request = Box::pin(client.request(client.server_target(), call));
    // The frame is being written; the server reads nothing more until the task has ended.
    tokio::select! {
        r = &mut request => panic!("answered by a server that read nothing: {r:?}"),
        _ = peer.read_raw_byte() => {}
    }
    drop(request);
    drop(client);
    let last = task_ended(status).await;
    assert!(closed_by_the_last_drop(&last), "{last:?}");
    let rest = peer.read_raw_to_eof().await;
    assert!(
        rest < payload.len(),
        "the rest of the frame was never sent ({rest} bytes after the first)"
    );
}

#[tokio::test]
async fn a_subscription_that_outlives_its_client_keeps_receiving_until_it_is_dropped() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener, None).await;
    let status = client.watch_status();
    let subscribe = client.subscribe("pi.models", ServiceMode::Singleton);
    let server = async {
        let r = peer.recv_request().await;
        let Some(ControlCall::Subscribe {
            subscription_id, ..
        }) = ControlCall::decode(&ServiceCall::parse(&r.call).unwrap())
        else {
            panic!("expected subscribe, got {r:?}");
        };
        let snapshot = json(
            r#"{"serviceId":"pi.models","mode":"singleton","instances":[{"members":[{"name":"state","kind":"state","sequence":0,"ops":[["r",{"revision":0}]]}]}]}"#,
        );
        peer.respond(&r.id, Outcome::Value(snapshot)).await;
        subscription_id
    };
    let (sub, wire_id) = tokio::join!(subscribe, server);
    let mut sub = sub.unwrap();
    assert!(matches!(
        sub.try_next_event(),
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    drop(client);

    peer.send(ServerMessage::ServiceUpdate(ServiceUpdate {
        subscription_id: Id::new(&wire_id).unwrap(),
        update: json(
            r#"{"type":"state","member":"state","sequence":1,"ops":[["s",["revision"],1]]}"#,
        ),
    }))
    .await;
    let event = tokio::time::timeout(HANG_GUARD, sub.next_event())
        .await
        .expect("the update arrives");
    assert!(
        matches!(event, Some(SubscriptionEvent::Updates(_))),
        "{event:?}"
    );
    assert_eq!(
        sub.state().value(None, "state"),
        Some(&json(r#"{"revision":1}"#))
    );
    assert!(sub.is_live());

    // On this single-threaded runtime the task runs only after the whole drop: it sees the
    // last handle gone and closes without sending the unsubscribe.
    drop(sub);
    peer.expect_eof().await;
    let last = task_ended(status).await;
    assert!(closed_by_the_last_drop(&last), "{last:?}");
}

#[tokio::test]
async fn a_session_that_outlives_its_client_keeps_calling_until_it_is_dropped() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener, None).await;
    let status = client.watch_status();
    let route = SessionTarget {
        server_id: support::server_id(),
        session_id: Id::new("session-1").unwrap(),
        attachment_id: Id::new("attachment-1").unwrap(),
    };
    let server = async {
        let r = peer.recv_request().await;
        peer.send(ServerMessage::Attachment(Some(route.clone())))
            .await;
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (session, ()) = tokio::join!(client.attach("session-1"), server);
    let session = session.unwrap();
    drop(client);

    let (reply, ()) = tokio::join!(session.request(ping()), answer_void(&mut peer),);
    assert!(reply.is_ok(), "the session keeps the connection");
    drop(session);
    peer.expect_eof().await;
    let last = task_ended(status).await;
    assert!(closed_by_the_last_drop(&last), "{last:?}");
}
