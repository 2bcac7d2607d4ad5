//! Specifications of how the core hands a batch of frames (one read) to replica readers:
//! every update is applied in place and queued as its own event, and readers are woken once
//! per read and see the state after the last update.

use baton_protocol::chord::ProviderUpdate;

use super::*;

/// A live core with subscription 1 to `pi.models` at revision 0; returns its wire id.
fn subscribed() -> (Pair, Id) {
    let mut pair = Pair::live(None);
    let (r, wire_id) = pair.subscribe(1, TargetSpec::Explicit(Target::Server(server_id())));
    pair.respond(&r.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    assert_eq!(pair.answered(1), Some(Ok(())));
    assert!(matches!(
        pair.next_sub_event(1),
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    (pair, Id::new(wire_id).unwrap())
}

/// Sets `revision` to `n` at sequence `n`.
fn revision(wire_id: &Id, n: u64) -> ServerMessage {
    ServerMessage::ServiceUpdate(ServiceUpdate {
        subscription_id: wire_id.clone(),
        update: json(&format!(
            r#"{{"type":"state","member":"state","sequence":{n},"ops":[["s",["revision"],{n}]]}}"#
        )),
    })
}

/// The server sends `msgs`, all in one read.
fn send_together(pair: &mut Pair, msgs: &[ServerMessage]) {
    let mut buf = BytesMut::new();
    for msg in msgs {
        pair.codec.encode(msg.clone(), &mut buf).unwrap();
    }
    pair.feed(&buf);
}

#[test]
fn updates_read_together_are_each_applied_and_queued_and_the_readers_wake_once_for_the_last() {
    let (mut pair, wire) = subscribed();
    let woken = pair.wakes(1);
    let batch = [revision(&wire, 1), revision(&wire, 2), revision(&wire, 3)];
    send_together(&mut pair, &batch);
    assert_eq!(
        pair.wakes(1),
        woken + 1,
        "readers are woken once for the read"
    );
    assert_eq!(pair.state_of(1), Some(json(r#"{"revision":3}"#)));
    for n in 1..=3 {
        match pair.next_sub_event(1) {
            Some(SubscriptionEvent::Update(u)) => {
                assert!(
                    matches!(&*u, ProviderUpdate::State { sequence, .. } if *sequence == n),
                    "{u:?}"
                );
            }
            other => panic!("expected update {n}, got {other:?}"),
        }
    }
    assert!(pair.next_sub_event(1).is_none(), "one event per update");

    // The next read wakes them again.
    send_together(&mut pair, &[revision(&wire, 4)]);
    assert_eq!(pair.wakes(1), woken + 2);
    assert_eq!(pair.state_of(1), Some(json(r#"{"revision":4}"#)));
}

#[test]
fn a_gap_inside_a_batch_clears_the_member_wakes_the_readers_and_re_subscribes() {
    let (mut pair, wire) = subscribed();
    let woken = pair.wakes(1);
    // Sequence 3 skips 2: the replica clears the member (as the gap rule says) and the client
    // re-subscribes; readers must learn of the cleared state although it came mid-batch.
    send_together(&mut pair, &[revision(&wire, 1), revision(&wire, 3)]);
    assert_eq!(pair.wakes(1), woken + 1);
    assert!(pair.replicas.0.contains_key(&1), "the replica stays");
    assert_eq!(pair.state_of(1), None, "its member is cleared");
    assert!(matches!(
        pair.next_sub_event(1),
        Some(SubscriptionEvent::Update(_))
    ));
    assert!(matches!(
        pair.next_sub_event(1),
        Some(SubscriptionEvent::Resyncing { .. })
    ));
    let unsub = pair.recv_request();
    assert!(matches!(
        ControlCall::decode(&ServiceCall::parse(&unsub.call).unwrap()),
        Some(ControlCall::Unsubscribe { .. })
    ));
}

#[test]
fn a_read_of_more_updates_than_one_batch_of_events_is_handled_in_batches_and_wakes_readers_once() {
    let (mut pair, wire) = subscribed();
    let woken = pair.wakes(1);
    let total = 5 * EVENT_BATCH as u64;
    let mut buf = BytesMut::new();
    for n in 1..=total {
        pair.codec.encode(revision(&wire, n), &mut buf).unwrap();
    }
    pair.conn.read_buffer(buf.len()).extend_from_slice(&buf);
    let mut calls = 0;
    loop {
        pair.conn.handle_read(pair.now, &mut pair.replicas);
        calls += 1;
        let queued = pair.pump();
        assert!(queued <= EVENT_BATCH, "{queued} events queued by one call");
        if !pair.conn.has_unread_frames() {
            break;
        }
    }
    assert!(calls >= 5, "{calls} calls");
    assert_eq!(
        pair.wakes(1),
        woken + 1,
        "readers are woken once for the whole read"
    );
    for n in 1..=total {
        match pair.next_sub_event(1) {
            Some(SubscriptionEvent::Update(u)) => {
                assert!(matches!(&*u, ProviderUpdate::State { sequence, .. } if *sequence == n));
            }
            other => panic!("expected update {n}, got {other:?}"),
        }
    }
    assert_eq!(
        pair.state_of(1),
        Some(json(&format!(r#"{{"revision":{total}}}"#)))
    );
}
