//! Subscriptions against a scripted server: buffering, gaps, slow consumers, reconnects.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod support;

use baton_client::{
    Client, EndReason, ReconnectPolicy, RequestError, Session, Subscription, SubscriptionEvent,
};
use baton_protocol::chord::{
    ControlCall, InstanceAddress, ProviderUpdate, ServiceCall, ServiceMode,
};
use baton_protocol::{
    ClientMessage, ErrorCode, Id, Outcome, ServerMessage, ServiceUpdate, SessionTarget, Value,
    WireError,
};
use std::time::Duration;
use support::{HANG_GUARD, Listener, Peer};

fn json(s: &str) -> Value {
    Value::from_json(s).unwrap()
}

fn snapshot(sequence: u64, value: &str) -> Value {
    json(&format!(
        r#"{{"serviceId":"pi.models","mode":"singleton","instances":[{{"members":[{{"name":"select","kind":"method"}},{{"name":"state","kind":"state","sequence":{sequence},"ops":[["r",{value}]]}}]}}]}}"#
    ))
}

fn update(sub: &str, body: &str) -> ServerMessage {
    ServerMessage::ServiceUpdate(ServiceUpdate {
        subscription_id: Id::new(sub).unwrap(),
        update: json(body),
    })
}

/// Receives a subscribe control call to `pi.models`; returns (request id, subscription id).
async fn recv_subscribe(peer: &mut Peer) -> (Id, String) {
    recv_subscribe_to(peer, "pi.models", ServiceMode::Singleton).await
}

/// Receives a subscribe control call to `service`; returns (request id, subscription id).
async fn recv_subscribe_to(peer: &mut Peer, service: &str, expected: ServiceMode) -> (Id, String) {
    let r = peer.recv_request().await;
    let call = ServiceCall::parse(&r.call).unwrap();
    match ControlCall::decode(&call) {
        Some(ControlCall::Subscribe {
            subscription_id,
            service_id,
            mode,
        }) => {
            assert_eq!(service_id, service);
            assert_eq!(mode, expected);
            (r.id, subscription_id)
        }
        other => panic!("expected subscribe, got {other:?}"),
    }
}

async fn recv_unsubscribe(peer: &mut Peer) -> (Id, String) {
    let r = peer.recv_request().await;
    match ControlCall::decode(&ServiceCall::parse(&r.call).unwrap()) {
        Some(ControlCall::Unsubscribe { subscription_id }) => (r.id, subscription_id),
        other => panic!("expected unsubscribe, got {other:?}"),
    }
}

/// A client connected to the scripted server, and the server's end.
async fn connected(listener: &Listener) -> (Client, Peer) {
    let (client, peer) = tokio::join!(Client::connect(listener.config()), listener.accept_ready());
    (client.unwrap(), peer)
}

/// Connects, subscribes to `pi.models` and answers with a snapshot whose state is
/// `{"text":""}`. Returns the client (dropping it closes the connection), the scripted
/// server's end, the subscription and its wire id.
async fn subscribed_to_text(listener: &Listener) -> (Client, Peer, Subscription, String) {
    let (client, mut peer) = connected(listener).await;
    let subscribe = client.subscribe("pi.models", ServiceMode::Singleton);
    let server = async {
        let (id, sub) = recv_subscribe(&mut peer).await;
        peer.respond(&id, Outcome::Value(snapshot(0, r#"{"text":""}"#)))
            .await;
        sub
    };
    let (sub, wire_id) = tokio::join!(subscribe, server);
    (client, peer, sub.unwrap(), wire_id)
}

fn revision(sub: &Subscription) -> Option<Value> {
    sub.state().value(None, "state").cloned()
}

#[tokio::test]
async fn updates_that_beat_the_snapshot_are_buffered_and_applied_after_it() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let subscribe = client.subscribe("pi.models", ServiceMode::Singleton);
    let server = async {
        let (id, sub) = recv_subscribe(&mut peer).await;
        assert_eq!(sub, "service-1");
        // Seq 1 arrives before the snapshot response; an unknown subscription is ignored.
        peer.send(update(
            &sub,
            r#"{"type":"state","member":"state","sequence":1,"ops":[["s",["revision"],1]]}"#,
        ))
        .await;
        peer.send(update("service-99", r#"{"type":"unavailable"}"#))
            .await;
        peer.respond(&id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)))
            .await;
        peer.send(update(&sub, r##"{"type":"state","member":"state","sequence":2,"ops":[["#",0,["revision"]],["s",0,2]]}"##)).await;
        peer.send(update(
            &sub,
            r#"{"type":"state","member":"state","sequence":3,"ops":[["s",0,3]]}"#,
        ))
        .await;
    };
    let (sub, ()) = tokio::join!(subscribe, server);
    let mut sub = sub.unwrap();
    let mut watch = sub.watch();
    tokio::time::timeout(
        HANG_GUARD,
        watch.wait_for(|r| r.value(None, "state") == Some(&json(r#"{"revision":3}"#))),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(matches!(
        sub.next_event().await,
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    let updates = next_updates(&mut sub, 3).await;
    for (expected, u) in (1..=3u32).zip(&updates) {
        assert_eq!(
            u.to_value().as_map().unwrap().get("sequence"),
            Some(&Value::from(expected))
        );
    }
    // Dropping the subscription unsubscribes with its id.
    drop(sub);
    let (uid, unsub) = recv_unsubscribe(&mut peer).await;
    assert_eq!(unsub, "service-1");
    peer.respond(&uid, Outcome::Void).await;
}

#[tokio::test]
async fn a_sequence_gap_resubscribes_under_a_fresh_id_and_converges() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let subscribe = client.subscribe("pi.models", ServiceMode::Singleton);
    let server = async {
        let (id, sub) = recv_subscribe(&mut peer).await;
        peer.respond(&id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)))
            .await;
        sub
    };
    let (sub, first_id) = tokio::join!(subscribe, server);
    let mut sub = sub.unwrap();
    assert!(matches!(
        sub.next_event().await,
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));

    // Sequence 2 after 0: a gap.
    peer.send(update(
        &first_id,
        r#"{"type":"state","member":"state","sequence":2,"ops":[["s",["revision"],2]]}"#,
    ))
    .await;
    let (uid, unsub) = recv_unsubscribe(&mut peer).await;
    assert_eq!(unsub, first_id);
    peer.respond(&uid, Outcome::Void).await;
    let (id, second_id) = recv_subscribe(&mut peer).await;
    assert_ne!(second_id, first_id);
    // Late updates for the abandoned id are ignored.
    peer.send(update(
        &first_id,
        r#"{"type":"state","member":"state","sequence":3,"ops":[["s",["revision"],3]]}"#,
    ))
    .await;
    peer.respond(&id, Outcome::Value(snapshot(7, r#"{"revision":7}"#)))
        .await;

    match sub.next_event().await {
        Some(SubscriptionEvent::Resyncing { reason }) => {
            assert!(reason.contains("sequence has a gap"), "{reason}")
        }
        other => panic!("expected resyncing, got {other:?}"),
    }
    assert!(matches!(
        sub.next_event().await,
        Some(SubscriptionEvent::Snapshot { resynced: true })
    ));
    assert_eq!(revision(&sub), Some(json(r#"{"revision":7}"#)));
    assert_eq!(sub.state().sequence(None, "state"), Some(7));
}

#[tokio::test]
async fn a_slow_consumer_loses_no_state_and_sees_lag_in_order() {
    let listener = Listener::bind();
    let (_client, mut peer, mut sub, wire_id) = subscribed_to_text(&listener).await;
    // Far more reads than the event queue holds events, while nobody reads events: each
    // update is sent once the last one is applied, so each is a read (one event) of its own.
    let total = baton_client::DEFAULT_SUBSCRIPTION_EVENTS as u64 * 2;
    let mut watch = sub.watch();
    for seq in 1..=total {
        let body = if seq == 1 {
            r#"{"type":"state","member":"state","sequence":1,"ops":[["a",["text"],"x"]]}"#
                .to_owned()
        } else if seq == 2 {
            r##"{"type":"state","member":"state","sequence":2,"ops":[["#",0,["text"]],["a",0,"x"]]}"##.to_owned()
        } else {
            format!(r#"{{"type":"state","member":"state","sequence":{seq},"ops":[["a",0,"x"]]}}"#)
        };
        peer.send(update(&wire_id, &body)).await;
        tokio::time::timeout(
            HANG_GUARD,
            watch.wait_for(|r| r.sequence(None, "state") == Some(seq)),
        )
        .await
        .unwrap()
        .unwrap();
    }
    let expected = json(&format!(r#"{{"text":"{}"}}"#, "x".repeat(total as usize)));
    tokio::time::timeout(
        HANG_GUARD,
        watch.wait_for(|r| r.value(None, "state") == Some(&expected)),
    )
    .await
    .unwrap()
    .unwrap();
    // Events arrive in order, with the overflow marked as one Lagged.
    let mut last_seq = 0;
    let mut lagged = 0;
    let mut snapshot_seen = false;
    // Every event was emitted before we started reading: drain what is queued.
    while let Some(event) = sub.try_next_event() {
        match event {
            SubscriptionEvent::Snapshot { .. } => snapshot_seen = true,
            SubscriptionEvent::Updates(updates) => {
                for seq in updates.sequences() {
                    let seq = seq.expect("state updates");
                    assert!(
                        seq > last_seq,
                        "events out of order: {seq} after {last_seq}"
                    );
                    last_seq = seq;
                }
            }
            SubscriptionEvent::Lagged => lagged += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(snapshot_seen);
    assert!(lagged >= 1, "the overflow is reported");
    assert_eq!(sub.state().sequence(None, "state"), Some(total));
}

#[tokio::test]
async fn reconnecting_re_attaches_re_subscribes_and_reports_unknown_outcomes() {
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
        server_id: support::server_id(),
        session_id: Id::new("session-1").unwrap(),
        attachment_id: Id::new(attachment).unwrap(),
    };
    // Attach, then subscribe at the session.
    let attach = client.attach("session-1");
    let server = async {
        let r = peer.recv_request().await;
        peer.send(ServerMessage::Attachment(Some(route("attachment-1"))))
            .await;
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (session, ()) = tokio::join!(attach, server);
    let session = session.unwrap();
    let subscribe = session.subscribe("pi.models", ServiceMode::Singleton);
    let server = async {
        let (id, _) = recv_subscribe(&mut peer).await;
        peer.respond(&id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)))
            .await;
    };
    let (sub, ()) = tokio::join!(subscribe, server);
    let mut sub = sub.unwrap();
    assert!(matches!(
        sub.next_event().await,
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));

    // A request is in flight when the connection drops.
    let in_flight = session.request(json(
        r#"{"serviceId":"pi.session","member":"prompt","args":["hi"]}"#,
    ));
    let drop_server = async {
        peer.recv_request().await;
        drop(peer);
    };
    let (result, ()) = tokio::join!(in_flight, drop_server);
    assert!(matches!(
        result.unwrap_err(),
        RequestError::OutcomeUnknown(_)
    ));

    // The client comes back: re-attach first, then re-subscribe at the new route.
    let mut peer = listener.accept_ready().await;
    let r = peer.recv_request().await;
    assert_eq!(
        r.call,
        json(r#"{"serviceId":"pi.session-management","member":"attach","args":["session-1"]}"#)
    );
    peer.send(ServerMessage::Attachment(Some(route("attachment-2"))))
        .await;
    peer.respond(&r.id, Outcome::Void).await;
    let sr = peer.recv_request().await;
    assert_eq!(
        sr.target,
        baton_protocol::Target::Session(route("attachment-2"))
    );
    let call = ServiceCall::parse(&sr.call).unwrap();
    assert!(matches!(
        ControlCall::decode(&call),
        Some(ControlCall::Subscribe { .. })
    ));
    peer.respond(&sr.id, Outcome::Value(snapshot(5, r#"{"revision":5}"#)))
        .await;

    match sub.next_event().await {
        Some(SubscriptionEvent::Resyncing { reason }) => {
            assert!(reason.starts_with("connection lost"), "{reason}")
        }
        other => panic!("expected resyncing, got {other:?}"),
    }
    assert!(matches!(
        sub.next_event().await,
        Some(SubscriptionEvent::Snapshot { resynced: true })
    ));
    assert_eq!(revision(&sub), Some(json(r#"{"revision":5}"#)));

    // The session handle follows the new attachment.
    let req = session.request(json(
        r#"{"serviceId":"pi.session","member":"abort","args":[]}"#,
    ));
    let server = async {
        let r = peer.recv_request().await;
        assert_eq!(
            r.target,
            baton_protocol::Target::Session(route("attachment-2"))
        );
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (result, ()) = tokio::join!(req, server);
    result.unwrap();
    assert!(matches!(client.status(), baton_client::Status::Connected));
    let _ = ClientMessage::hello();
}

/// Subscribes, lets the scripted server send the snapshot and then `body` as an update, and
/// returns the reasons of the events up to the subscription's end.
async fn reasons_after_update(body: &str) -> Vec<String> {
    let listener = Listener::bind();
    let (_client, mut peer, mut sub, wire_id) = subscribed_to_text(&listener).await;
    assert!(matches!(
        sub.next_event().await,
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    peer.send(update(&wire_id, body)).await;
    let mut reasons = Vec::new();
    loop {
        let event = tokio::time::timeout(HANG_GUARD, sub.next_event())
            .await
            .unwrap();
        match event {
            Some(SubscriptionEvent::Resyncing { reason }) => reasons.push(reason),
            Some(SubscriptionEvent::Ended { reason }) => {
                assert_eq!(
                    sub.end_reason().map(|r| r.to_string()).as_ref(),
                    Some(&reason)
                );
                reasons.push(reason);
                return reasons;
            }
            other => panic!("expected the subscription to end, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_update_the_client_cannot_decode_fails_the_connection_with_the_decoder_error() {
    // Read in place (an `a` op by path id) and through a `Value` (an unknown verb): both
    // paths end the stream with the chord layer's own message.
    let cases = [
        (
            r#"{"type":"state","member":"state","sequence":1,"ops":[["a",7,"x"]]}"#,
            "invalid service update for service-1: unresolvable path: 7",
        ),
        (
            r#"{"type":"state","member":"state","sequence":1,"ops":[["zz"]]}"#,
            "invalid service update for service-1: unknown op verb: zz",
        ),
        (
            r#"{"type":"state","member":"nope","sequence":1,"ops":[["a",["text"],"x"]]}"#,
            "invalid service update for service-1: Unknown service state nope",
        ),
        // A `spawned` may replace an instance the client holds, but not repeat a state.
        (
            r#"{"type":"spawned","instance":{"instance":{"key":"k","generation":1},"members":[{"name":"x","kind":"state","sequence":0,"ops":[["r",1]]},{"name":"x","kind":"state","sequence":0,"ops":[["r",2]]}]}}"#,
            "invalid service update for service-1: Duplicate service state k@1.x",
        ),
    ];
    for (body, expected) in cases {
        // The connection is lost (no reconnect policy here), so the subscription first
        // learns it is out of sync and then ends, both with the decoder's message.
        assert_eq!(
            reasons_after_update(body).await,
            [format!("connection lost: {expected}"), expected.to_owned()],
            "update {body}"
        );
    }
}

fn route(attachment: &str) -> SessionTarget {
    SessionTarget {
        server_id: support::server_id(),
        session_id: Id::new("session-1").unwrap(),
        attachment_id: Id::new(attachment).unwrap(),
    }
}

/// Attaches `client` to `session-1` (as `attachment-1`) and subscribes to `pi.models` at the
/// session, answering with a snapshot of `{"revision":0}`.
async fn attached_and_subscribed(client: &Client, peer: &mut Peer) -> (Session, Subscription) {
    let attach = client.attach("session-1");
    let server = async {
        let r = peer.recv_request().await;
        peer.send(ServerMessage::Attachment(Some(route("attachment-1"))))
            .await;
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (session, ()) = tokio::join!(attach, server);
    let session = session.unwrap();
    let subscribe = session.subscribe("pi.models", ServiceMode::Singleton);
    let server = async {
        let (id, _) = recv_subscribe(peer).await;
        peer.respond(&id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)))
            .await;
    };
    let (sub, ()) = tokio::join!(subscribe, server);
    let mut sub = sub.unwrap();
    assert!(matches!(
        sub.next_event().await,
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    (session, sub)
}

/// The next event, within the hang guard.
async fn next(sub: &mut Subscription) -> Option<SubscriptionEvent> {
    tokio::time::timeout(HANG_GUARD, sub.next_event())
        .await
        .expect("an event arrives")
}

/// The next `n` updates, however the reads batched them: nothing but updates may come, and
/// the last batch must end with the `n`th.
async fn next_updates(sub: &mut Subscription, n: usize) -> Vec<ProviderUpdate> {
    let mut updates = Vec::with_capacity(n);
    while updates.len() < n {
        match next(sub).await {
            Some(SubscriptionEvent::Updates(batch)) => updates.extend(&batch),
            other => panic!("expected updates, got {other:?} after {updates:?}"),
        }
    }
    assert_eq!(updates.len(), n, "more updates than expected: {updates:?}");
    updates
}

/// Asserts that `sub` ended for `expected`: the event, the typed reason, an empty replica and
/// a closed event stream.
async fn assert_ended(sub: &mut Subscription, expected: &EndReason) {
    match next(sub).await {
        Some(SubscriptionEvent::Ended { reason }) => assert_eq!(reason, expected.to_string()),
        other => panic!("expected the subscription to end, got {other:?}"),
    }
    assert_eq!(sub.end_reason().as_ref(), Some(expected));
    assert!(!sub.is_live());
    assert!(
        !sub.state().is_hydrated(),
        "no stale state is shown as live"
    );
    assert_eq!(revision(sub), None);
    assert!(next(sub).await.is_none(), "nothing follows the end");
}

/// Proves the client sent nothing for `sub`'s end (no `unsubscribe` on a stale route): the
/// next frame after dropping it is this server-target request.
async fn assert_nothing_sent(client: &Client, peer: &mut Peer, sub: Subscription) {
    drop(sub);
    let probe = json(r#"{"serviceId":"probe","member":"next","args":[]}"#);
    let req = client.request(client.server_target(), probe.clone());
    let server = async {
        let r = peer.recv_request().await;
        assert_eq!(r.call, probe);
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (result, ()) = tokio::join!(req, server);
    result.unwrap();
}

#[tokio::test]
async fn a_session_subscription_ends_as_released_when_the_server_publishes_attachment_null() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let (_session, mut sub) = attached_and_subscribed(&client, &mut peer).await;
    // A server-scope subscription on the same connection is not the attachment's.
    let server_sub = client.subscribe("pi.models", ServiceMode::Singleton);
    let server = async {
        let (id, _) = recv_subscribe(&mut peer).await;
        peer.respond(&id, Outcome::Value(snapshot(3, r#"{"revision":3}"#)))
            .await;
    };
    let (server_sub, ()) = tokio::join!(server_sub, server);
    let mut server_sub = server_sub.unwrap();

    // The session terminates (or is removed by someone else): the server releases us.
    peer.send(ServerMessage::Attachment(None)).await;
    assert_ended(&mut sub, &EndReason::Released).await;
    assert_nothing_sent(&client, &mut peer, sub).await;

    assert!(matches!(
        server_sub.next_event().await,
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    assert!(server_sub.try_next_event().is_none());
    assert!(server_sub.is_live());
    assert_eq!(revision(&server_sub), Some(json(r#"{"revision":3}"#)));
}

#[tokio::test]
async fn detaching_ends_the_sessions_subscriptions_as_detached() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let (_session, mut sub) = attached_and_subscribed(&client, &mut peer).await;
    let detach = client.detach();
    let server = async {
        let r = peer.recv_request().await;
        assert_eq!(
            r.call,
            json(r#"{"serviceId":"pi.session-management","member":"detach","args":[]}"#)
        );
        // The attachment frame precedes the response (docs/protocol.md §6).
        peer.send(ServerMessage::Attachment(None)).await;
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (result, ()) = tokio::join!(detach, server);
    result.unwrap();
    assert_ended(&mut sub, &EndReason::Detached).await;
    assert_nothing_sent(&client, &mut peer, sub).await;
}

#[tokio::test]
async fn attaching_elsewhere_ends_the_old_sessions_subscriptions() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let (_session, mut sub) = attached_and_subscribed(&client, &mut peer).await;
    let attach = client.attach("session-2");
    let server = async {
        let r = peer.recv_request().await;
        // Attaching elsewhere releases the old attachment without an `attachment: null`.
        peer.send(ServerMessage::Attachment(Some(SessionTarget {
            server_id: support::server_id(),
            session_id: Id::new("session-2").unwrap(),
            attachment_id: Id::new("attachment-2").unwrap(),
        })))
        .await;
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (session, ()) = tokio::join!(attach, server);
    session.unwrap();
    assert_ended(
        &mut sub,
        &EndReason::AttachedElsewhere {
            session_id: "session-2".to_owned(),
        },
    )
    .await;
    assert_nothing_sent(&client, &mut peer, sub).await;
}

#[tokio::test]
async fn a_failed_re_attach_after_a_reconnect_ends_the_sessions_subscriptions() {
    let listener = Listener::bind();
    let mut config = listener.config();
    config.reconnect = Some(ReconnectPolicy {
        initial_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(20),
        ..ReconnectPolicy::default()
    });
    let (client, mut peer) = tokio::join!(Client::connect(config), listener.accept_ready());
    let client = client.unwrap();
    let (_session, mut sub) = attached_and_subscribed(&client, &mut peer).await;

    drop(peer);
    // A dropped connection alone does not end the subscription.
    match next(&mut sub).await {
        Some(SubscriptionEvent::Resyncing { reason }) => {
            assert!(reason.starts_with("connection lost"), "{reason}")
        }
        other => panic!("expected resyncing, got {other:?}"),
    }
    assert!(sub.is_live());

    // The session was removed meanwhile: the re-attach fails.
    let mut peer = listener.accept_ready().await;
    let r = peer.recv_request().await;
    assert_eq!(
        r.call,
        json(r#"{"serviceId":"pi.session-management","member":"attach","args":["session-1"]}"#)
    );
    let not_found = WireError::from_code(ErrorCode::SessionNotFound, "Session not found");
    peer.respond(&r.id, Outcome::Error(not_found.clone())).await;
    assert_ended(
        &mut sub,
        &EndReason::ReattachFailed(RequestError::Server(not_found)),
    )
    .await;
    match sub.end_reason() {
        Some(EndReason::ReattachFailed(e)) => {
            assert_eq!(e.kind(), Some(ErrorCode::SessionNotFound));
        }
        other => panic!("expected a failed re-attach, got {other:?}"),
    }
    assert_nothing_sent(&client, &mut peer, sub).await;
}

#[tokio::test]
async fn a_reconnect_that_re_attaches_keeps_the_session_subscription_live() {
    let listener = Listener::bind();
    let mut config = listener.config();
    config.reconnect = Some(ReconnectPolicy {
        initial_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(20),
        ..ReconnectPolicy::default()
    });
    let (client, mut peer) = tokio::join!(Client::connect(config), listener.accept_ready());
    let client = client.unwrap();
    let (_session, mut sub) = attached_and_subscribed(&client, &mut peer).await;
    drop(peer);

    // The new connection's attachment frame (a new attachment id) arrives while the
    // subscription waits for the re-attach: it must not end it.
    let mut peer = listener.accept_ready().await;
    let r = peer.recv_request().await;
    peer.send(ServerMessage::Attachment(Some(route("attachment-2"))))
        .await;
    peer.respond(&r.id, Outcome::Void).await;
    let (id, _) = recv_subscribe(&mut peer).await;
    peer.respond(&id, Outcome::Value(snapshot(4, r#"{"revision":4}"#)))
        .await;
    assert!(matches!(
        next(&mut sub).await,
        Some(SubscriptionEvent::Resyncing { .. })
    ));
    assert!(matches!(
        next(&mut sub).await,
        Some(SubscriptionEvent::Snapshot { resynced: true })
    ));
    assert!(sub.is_live());
    assert_eq!(revision(&sub), Some(json(r#"{"revision":4}"#)));

    // And the re-made subscription ends with the new attachment.
    peer.send(ServerMessage::Attachment(None)).await;
    assert_ended(&mut sub, &EndReason::Released).await;
}

#[tokio::test]
async fn a_singleton_replaced_update_rebaselines_the_replica_and_its_sequences() {
    let listener = Listener::bind();
    let (_client, mut peer, mut sub, wire_id) = subscribed_to_text(&listener).await;
    assert!(matches!(
        next(&mut sub).await,
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    // Path id 0 is defined before the server drops this subscriber's backlog.
    peer.send(update(
        &wire_id,
        r##"{"type":"state","member":"state","sequence":1,"ops":[["#",0,["text"]],["a",0,"x"]]}"##,
    ))
    .await;
    // The backlog (sequences 2..=150) is replaced by the current snapshot.
    peer.send(update(
        &wire_id,
        r#"{"type":"replaced","snapshot":{"members":[{"name":"select","kind":"method"},{"name":"state","kind":"state","sequence":150,"ops":[["r",{"text":"fresh"}]]}]}}"#,
    ))
    .await;
    // `replaced` cleared the path dictionary: id 0 is defined afresh.
    peer.send(update(&wire_id, r##"{"type":"state","member":"state","sequence":151,"ops":[["#",0,["text"]],["a",0,"!"]]}"##)).await;

    let types: Vec<&str> = next_updates(&mut sub, 3)
        .await
        .iter()
        .map(ProviderUpdate::type_name)
        .collect();
    assert_eq!(types, ["state", "replaced", "state"]);
    assert_eq!(revision(&sub), Some(json(r#"{"text":"fresh!"}"#)));
    assert_eq!(sub.state().sequence(None, "state"), Some(151));
    assert!(sub.try_next_event().is_none(), "no resync was needed");
}

#[tokio::test]
async fn a_reset_update_still_rebaselines_the_replica() {
    let listener = Listener::bind();
    let (_client, mut peer, mut sub, wire_id) = subscribed_to_text(&listener).await;
    assert!(matches!(
        next(&mut sub).await,
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    peer.send(update(
        &wire_id,
        &format!(
            r#"{{"type":"reset","snapshot":{}}}"#,
            snapshot(101, r#"{"text":"reset"}"#).to_json()
        ),
    ))
    .await;
    peer.send(update(
        &wire_id,
        r#"{"type":"state","member":"state","sequence":102,"ops":[["a",["text"],"!"]]}"#,
    ))
    .await;
    let types: Vec<&str> = next_updates(&mut sub, 2)
        .await
        .iter()
        .map(ProviderUpdate::type_name)
        .collect();
    assert_eq!(types, ["reset", "state"]);
    assert_eq!(revision(&sub), Some(json(r#"{"text":"reset!"}"#)));
    assert_eq!(sub.state().sequence(None, "state"), Some(102));
}

fn dialog(key: &str, generation: u64, sequence: u64, value: &str) -> String {
    format!(
        r#"{{"instance":{{"key":"{key}","generation":{generation}}},"members":[{{"name":"request","kind":"state","sequence":{sequence},"ops":[["r",{value}]]}}]}}"#
    )
}

#[tokio::test]
async fn a_keyed_resync_closes_stale_instances_and_respawns_the_live_ones() {
    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    let subscribe = client.subscribe("pi.dialogs", ServiceMode::Keyed);
    let server = async {
        let (id, sub) = recv_subscribe_to(&mut peer, "pi.dialogs", ServiceMode::Keyed).await;
        let snapshot = format!(
            r#"{{"serviceId":"pi.dialogs","mode":"keyed","instances":[{},{},{}]}}"#,
            dialog("a", 1, 0, r#"{"n":0}"#),
            dialog("b", 1, 0, r#"{"n":0}"#),
            dialog("c", 1, 0, r#"{"n":0}"#),
        );
        peer.respond(&id, Outcome::Value(json(&snapshot))).await;
        sub
    };
    let (sub, wire_id) = tokio::join!(subscribe, server);
    let mut sub = sub.unwrap();
    assert!(matches!(
        next(&mut sub).await,
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    // `a@1` defines path id 0 before the server drops this subscriber's backlog.
    peer.send(update(&wire_id, r##"{"type":"state","instance":{"key":"a","generation":1},"member":"request","sequence":1,"ops":[["#",0,["n"]],["s",0,1]]}"##)).await;

    // The resync: the dropped backlog's `closed` updates (one for a generation the client
    // never saw, which is ignored), then `spawned` for every live instance, including the
    // ones the client already holds and one whose key came back under a new generation.
    let resync = [
        r#"{"type":"closed","instance":{"key":"b","generation":7}}"#.to_owned(),
        r#"{"type":"closed","instance":{"key":"b","generation":1}}"#.to_owned(),
        format!(
            r#"{{"type":"spawned","instance":{}}}"#,
            dialog("a", 1, 120, r#"{"n":120}"#)
        ),
        format!(
            r#"{{"type":"spawned","instance":{}}}"#,
            dialog("c", 2, 5, r#"{"n":5}"#)
        ),
        format!(
            r#"{{"type":"spawned","instance":{}}}"#,
            dialog("d", 1, 0, r#"{"n":0}"#)
        ),
    ];
    for body in &resync {
        peer.send(update(&wire_id, body)).await;
    }
    // The re-spawned `a@1` has a fresh dictionary: id 0 is defined again.
    peer.send(update(&wire_id, r##"{"type":"state","instance":{"key":"a","generation":1},"member":"request","sequence":121,"ops":[["#",0,["n"]],["s",0,121]]}"##)).await;
    // An update for the replaced generation of `c` is ignored.
    peer.send(update(&wire_id, r#"{"type":"state","instance":{"key":"c","generation":1},"member":"request","sequence":1,"ops":[["s",["n"],1]]}"#)).await;
    peer.send(update(&wire_id, r#"{"type":"state","instance":{"key":"c","generation":2},"member":"request","sequence":6,"ops":[["s",["n"],6]]}"#)).await;

    let types: Vec<&str> = next_updates(&mut sub, 9)
        .await
        .iter()
        .map(ProviderUpdate::type_name)
        .collect();
    assert_eq!(
        types,
        [
            "state", "closed", "closed", "spawned", "spawned", "spawned", "state", "state", "state"
        ]
    );
    let state = sub.state();
    let live: Vec<String> = state
        .instances()
        .iter()
        .map(|i| i.address().unwrap().to_string())
        .collect();
    assert_eq!(live, ["a@1", "c@2", "d@1"]);
    let at = |key: &str, generation| InstanceAddress::new(key, generation);
    assert_eq!(
        state.value(Some(&at("a", 1)), "request"),
        Some(&json(r#"{"n":121}"#))
    );
    assert_eq!(state.sequence(Some(&at("a", 1)), "request"), Some(121));
    assert_eq!(
        state.value(Some(&at("c", 2)), "request"),
        Some(&json(r#"{"n":6}"#))
    );
    assert!(sub.try_next_event().is_none(), "no resync was needed");
    assert!(matches!(client.status(), baton_client::Status::Connected));
}

#[tokio::test]
async fn a_detach_cut_short_by_a_dropped_connection_still_ends_the_sessions_subscriptions() {
    let listener = Listener::bind();
    let mut config = listener.config();
    config.reconnect = Some(ReconnectPolicy {
        initial_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(20),
        ..ReconnectPolicy::default()
    });
    let (client, mut peer) = tokio::join!(Client::connect(config), listener.accept_ready());
    let client = client.unwrap();
    let (_session, mut sub) = attached_and_subscribed(&client, &mut peer).await;
    // The connection drops after the detach was sent and before its answer.
    let detach = client.detach();
    let server = async {
        peer.recv_request().await;
        drop(peer);
    };
    let (result, ()) = tokio::join!(detach, server);
    assert!(matches!(
        result.unwrap_err(),
        RequestError::OutcomeUnknown(_)
    ));
    match next(&mut sub).await {
        Some(SubscriptionEvent::Resyncing { reason }) => {
            assert!(reason.starts_with("connection lost"), "{reason}")
        }
        other => panic!("expected resyncing, got {other:?}"),
    }
    // The client does not re-attach a session it asked to leave; the subscription ends.
    let mut peer = listener.accept_ready().await;
    assert_ended(&mut sub, &EndReason::Detached).await;
    assert_nothing_sent(&client, &mut peer, sub).await;
}

#[tokio::test]
async fn a_subscribe_given_up_before_the_connection_task_took_it_is_never_sent() {
    use futures::FutureExt;

    let listener = Listener::bind();
    let (client, mut peer) = connected(&listener).await;
    // Queued, then dropped before the connection task ran: nothing may keep subscribing
    // for a handle that is gone.
    assert!(
        client
            .subscribe("pi.models", ServiceMode::Singleton)
            .now_or_never()
            .is_none()
    );
    let probe = json(r#"{"serviceId":"test.echo","member":"probe","args":[]}"#);
    let request = client.request(client.server_target(), probe.clone());
    let server = async {
        let r = peer.recv_request().await;
        assert_eq!(
            r.call, probe,
            "the first request is the probe, not a subscribe"
        );
        peer.respond(&r.id, Outcome::Void).await;
    };
    let (reply, ()) = tokio::join!(request, server);
    reply.unwrap();
}
