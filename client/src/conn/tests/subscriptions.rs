//! Specifications of what the core tells a subscription's handle ([`SubscriptionChange`]):
//! in which order, why it ends, and that nothing follows its end.

use super::*;

fn server() -> TargetSpec {
    TargetSpec::Explicit(Target::Server(server_id()))
}

fn session() -> TargetSpec {
    TargetSpec::Session(Id::new("session-1").unwrap())
}

/// Subscription `key` at `target`, answered with its snapshot at revision 0; returns its
/// wire id.
fn live_subscription(pair: &mut Pair, key: u64, target: TargetSpec) -> Id {
    let (r, wire_id) = pair.subscribe(key, target);
    pair.respond(&r.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    assert_eq!(pair.answered(key), Some(Ok(())));
    Id::new(wire_id).unwrap()
}

fn state_update(wire_id: &Id, sequence: u64) -> ServerMessage {
    ServerMessage::ServiceUpdate(ServiceUpdate {
        subscription_id: wire_id.clone(),
        update: json(&format!(
            r#"{{"type":"state","member":"state","sequence":{sequence},"ops":[["s",["revision"],{sequence}]]}}"#
        )),
    })
}

#[test]
fn the_first_snapshot_is_queued_then_answered_then_its_readers_are_woken() {
    let mut pair = Pair::live(None);
    let (r, wire_id) = pair.subscribe(1, server());
    pair.send(state_update(&Id::new(wire_id).unwrap(), 1));
    assert!(
        pair.kinds(1).is_empty(),
        "an early update waits for the snapshot"
    );
    pair.respond(&r.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    assert_eq!(
        pair.kinds(1),
        ["snapshot", "updates", "answered", "changed"],
        "the caller learns of the snapshot after its events, and readers once"
    );
    assert_eq!(pair.state_of(1), Some(json(r#"{"revision":1}"#)));
}

#[test]
fn the_server_releasing_the_attachment_ends_its_session_subscriptions_only() {
    let mut pair = Pair::live(None);
    pair.attach("attachment-1");
    live_subscription(&mut pair, 1, session());
    live_subscription(&mut pair, 2, server());
    pair.send(ServerMessage::Attachment(None));
    assert_eq!(pair.ended(1), Some(EndReason::Released));
    assert_eq!(
        pair.ended(2),
        None,
        "a server-scope subscription is not the attachment's"
    );
    assert_eq!(pair.kinds(2), ["snapshot", "answered", "changed"]);
    // The server dropped it with the attachment: nothing to unsubscribe.
    assert_eq!(pair.try_recv(), None);
    assert_eq!(pair.conn.subscriptions(), 1);
}

#[test]
fn attaching_elsewhere_ends_the_old_sessions_subscriptions_naming_the_new_one() {
    let mut pair = Pair::live(None);
    pair.attach("attachment-1");
    live_subscription(&mut pair, 1, session());
    let other = SessionTarget {
        session_id: Id::new("session-2").unwrap(),
        ..route("attachment-2")
    };
    pair.send(ServerMessage::Attachment(Some(other)));
    assert_eq!(
        pair.ended(1),
        Some(EndReason::AttachedElsewhere {
            session_id: "session-2".to_owned()
        })
    );
    assert_eq!(pair.try_recv(), None);
}

#[test]
fn a_failed_re_subscribe_ends_a_live_subscription_with_the_servers_error() {
    let mut pair = Pair::live(None);
    let wire_id = live_subscription(&mut pair, 1, server());
    // A gap: the client re-subscribes under a fresh id.
    pair.send(state_update(&wire_id, 5));
    let _unsubscribe = pair.recv_request();
    let again = pair.recv_request();
    let gone = WireError::new("service_not_found", "no such service");
    pair.respond(&again.id, Outcome::Error(gone.clone()));
    assert_eq!(
        pair.ended(1),
        Some(EndReason::ResubscribeFailed(RequestError::Server(gone)))
    );
    assert_eq!(
        pair.kinds(1),
        [
            "snapshot",
            "answered",
            "changed",
            "resyncing",
            "changed",
            "ended"
        ]
    );
    assert_eq!(pair.conn.subscriptions(), 0);
}

#[test]
fn too_many_updates_before_the_snapshot_re_subscribe_under_a_fresh_id() {
    let mut pair = Pair::live(None);
    let (first, wire_id) = pair.subscribe(1, server());
    let wire_id = Id::new(wire_id).unwrap();
    for sequence in 1..=crate::config::DEFAULT_EARLY_UPDATE_BUFFER as u64 {
        pair.send(state_update(&wire_id, sequence));
    }
    assert!(pair.kinds(1).is_empty(), "the buffer holds them all");
    assert_eq!(pair.try_recv(), None);
    pair.send(state_update(&wire_id, 2000));
    assert!(matches!(
        pair.next_sub_event(1),
        Some(SubscriptionEvent::Resyncing { reason }) if reason.contains("before the snapshot")
    ));
    let unsub = pair.recv_request();
    assert!(matches!(
        ControlCall::decode(&ServiceCall::parse(&unsub.call).unwrap()),
        Some(ControlCall::Unsubscribe { subscription_id }) if subscription_id == wire_id.as_str()
    ));
    let again = pair.recv_request();
    assert_ne!(subscribe_id(&again), wire_id.as_str());
    // The first subscribe's late answer settles nothing; the second's installs the snapshot.
    pair.respond(&first.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    assert_eq!(pair.answered(1), None);
    pair.respond(&again.id, Outcome::Value(snapshot(7, r#"{"revision":7}"#)));
    assert_eq!(pair.answered(1), Some(Ok(())));
    assert_eq!(pair.state_of(1), Some(json(r#"{"revision":7}"#)));
}

#[test]
fn a_dropped_subscription_is_unsubscribed_and_its_handle_hears_nothing_more() {
    let mut pair = Pair::live(None);
    let wire_id = live_subscription(&mut pair, 1, server());
    let before = pair.kinds(1);
    pair.command(Command::Unsubscribe(1));
    let unsub = pair.recv_request();
    assert!(matches!(
        ControlCall::decode(&ServiceCall::parse(&unsub.call).unwrap()),
        Some(ControlCall::Unsubscribe { subscription_id }) if subscription_id == wire_id.as_str()
    ));
    // Updates still in flight are ignored.
    pair.send(state_update(&wire_id, 1));
    pair.conn.close("client closed");
    assert_eq!(pair.kinds(1), before, "no change after the handle let go");
    assert_eq!(pair.conn.subscriptions(), 0);
}

#[test]
fn a_subscription_dropped_while_no_transport_is_live_is_never_sent() {
    let mut pair = Pair::live(Some(policy()));
    pair.conn.handle_lost(pair.now, "gone".to_owned());
    pair.command(Command::Subscribe(Subscribe {
        key: 1,
        target: server(),
        service_id: "pi.models".to_owned(),
        mode: ServiceMode::Singleton,
    }));
    pair.command(Command::Unsubscribe(1));
    pair.advance(Duration::from_millis(100));
    pair.open_and_greet();
    assert_eq!(pair.try_recv(), None);
    assert!(pair.kinds(1).is_empty());
}

#[test]
fn closing_ends_every_live_subscription_and_fails_every_waiting_one() {
    let mut pair = Pair::live(None);
    live_subscription(&mut pair, 1, server());
    let _waiting = pair.subscribe(2, server());
    pair.conn.close("client closed");
    let reason = CloseReason::Requested("client closed".to_owned());
    assert_eq!(pair.ended(1), Some(EndReason::Closed(reason.clone())));
    assert_eq!(
        pair.answered(2),
        Some(Err(RequestError::OutcomeUnknown(reason.to_string())))
    );
    assert_eq!(pair.ended(2), None, "one that never began does not end");
    // A subscribe after the close is refused as never sent.
    pair.command(Command::Subscribe(Subscribe {
        key: 3,
        target: server(),
        service_id: "pi.models".to_owned(),
        mode: ServiceMode::Singleton,
    }));
    assert_eq!(
        pair.answered(3),
        Some(Err(RequestError::NotSent(reason.to_string())))
    );
    assert_eq!(pair.try_recv(), None);
}

#[test]
fn a_lost_connection_makes_live_subscriptions_resync_and_ends_none() {
    let mut pair = Pair::live(Some(policy()));
    live_subscription(&mut pair, 1, server());
    let _waiting = pair.subscribe(2, server());
    pair.conn.handle_lost(pair.now, "reset by peer".to_owned());
    assert_eq!(
        pair.kinds(1),
        ["snapshot", "answered", "changed", "resyncing"]
    );
    assert!(
        pair.kinds(2).is_empty(),
        "one still waiting keeps waiting, silently"
    );
    pair.advance(Duration::from_millis(100));
    pair.open_and_greet();
    // Both are subscribed again, in key order, under fresh ids.
    let one = pair.recv_request();
    let two = pair.recv_request();
    pair.respond(&two.id, Outcome::Value(snapshot(2, r#"{"revision":2}"#)));
    pair.respond(&one.id, Outcome::Value(snapshot(1, r#"{"revision":1}"#)));
    assert_eq!(pair.answered(2), Some(Ok(())));
    assert!(matches!(
        pair.subs[&1].events.back(),
        Some(SubscriptionEvent::Snapshot { resynced: true })
    ));
    assert_eq!(pair.state_of(1), Some(json(r#"{"revision":1}"#)));
    assert_eq!(pair.state_of(2), Some(json(r#"{"revision":2}"#)));
}
