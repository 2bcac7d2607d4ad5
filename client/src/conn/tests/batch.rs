//! Specifications of how the core hands a batch of frames (one read) to replica readers:
//! every update is applied in place, the updates of one subscription in a row are queued as
//! one [`SubscriptionEvent::Updates`] batch, and readers are woken once per read and see the
//! state after the last update.

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
fn updates_read_together_are_applied_and_queued_as_one_batch_and_the_readers_wake_once() {
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
    let Some(SubscriptionEvent::Updates(updates)) = pair.next_sub_event(1) else {
        panic!("expected one batch of updates");
    };
    assert_eq!(updates.len(), 3);
    assert_eq!(
        updates.sequences().collect::<Vec<_>>(),
        [Some(1), Some(2), Some(3)]
    );
    assert_eq!(updates.last_sequence(), Some(3));
    assert_eq!(updates.encoded().len(), 3);
    assert!(
        updates.encoded().all(|bytes| bytes.first() == Some(&0xa4)),
        "each update's own bytes, a four-key map"
    );
    // Decoded on demand, from the decoder state before the batch: what the replica got.
    let decoded: Vec<ProviderUpdate> = updates.iter().collect();
    assert_eq!(decoded.len(), 3);
    for (n, update) in (1..).zip(&decoded) {
        assert!(
            matches!(update, ProviderUpdate::State { sequence, .. } if *sequence == n),
            "{update:?}"
        );
    }
    assert_eq!(
        updates.iter().collect::<Vec<_>>(),
        decoded,
        "decoding is repeatable"
    );
    assert!(pair.next_sub_event(1).is_none(), "one event per read");

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
    assert!(
        matches!(
            pair.next_sub_event(1),
            Some(SubscriptionEvent::Updates(b)) if b.sequences().collect::<Vec<_>>() == [Some(1)]
        ),
        "the update applied before the gap, alone"
    );
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
fn a_read_of_many_updates_is_one_batch_event_and_wakes_readers_once() {
    let (mut pair, wire) = subscribed();
    let woken = pair.wakes(1);
    let total = 5 * EVENT_BATCH as u64;
    let mut buf = BytesMut::new();
    for n in 1..=total {
        pair.codec.encode(revision(&wire, n), &mut buf).unwrap();
    }
    pair.conn.read_buffer(buf.len()).extend_from_slice(&buf);
    pair.conn.handle_read(pair.now, &mut pair.replicas);
    let queued = pair.pump();
    assert!(queued <= 2, "{queued} events queued for one read");
    assert!(!pair.conn.has_unread_frames(), "one call handles the read");
    assert_eq!(
        pair.wakes(1),
        woken + 1,
        "readers are woken once for the whole read"
    );
    let Some(SubscriptionEvent::Updates(updates)) = pair.next_sub_event(1) else {
        panic!("expected one batch of updates");
    };
    assert!(pair.next_sub_event(1).is_none(), "one event for the read");
    assert_eq!(
        updates.sequences().collect::<Vec<_>>(),
        (1..=total).map(Some).collect::<Vec<_>>()
    );
    for (n, update) in (1..).zip(&updates) {
        assert!(matches!(update, ProviderUpdate::State { sequence, .. } if sequence == n));
    }
    assert_eq!(
        pair.state_of(1),
        Some(json(&format!(r#"{{"revision":{total}}}"#)))
    );
}

#[test]
fn interleaved_subscriptions_batch_apart_in_order_and_a_busy_read_is_handled_in_batches_of_events()
{
    let (mut pair, wire) = subscribed();
    let (r, other) = pair.subscribe(2, TargetSpec::Explicit(Target::Server(server_id())));
    pair.respond(&r.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    assert_eq!(pair.answered(2), Some(Ok(())));
    assert!(matches!(
        pair.next_sub_event(2),
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    let other = Id::new(other).unwrap();
    // Alternating frames: every update ends the other subscription's batch, so the read
    // makes one event per frame and the core sets the rest aside every `EVENT_BATCH`.
    let total = 2 * EVENT_BATCH as u64;
    let mut buf = BytesMut::new();
    for n in 1..=total {
        pair.codec.encode(revision(&wire, n), &mut buf).unwrap();
        pair.codec.encode(revision(&other, n), &mut buf).unwrap();
    }
    pair.conn.read_buffer(buf.len()).extend_from_slice(&buf);
    let mut calls = 0;
    loop {
        pair.conn.handle_read(pair.now, &mut pair.replicas);
        calls += 1;
        let queued = pair.pump();
        assert!(
            queued <= EVENT_BATCH + 2,
            "{queued} events queued by one call"
        );
        if !pair.conn.has_unread_frames() {
            break;
        }
    }
    assert!(calls >= 4, "{calls} calls");
    for key in [1, 2] {
        let mut sequences = Vec::new();
        while let Some(event) = pair.next_sub_event(key) {
            let SubscriptionEvent::Updates(updates) = event else {
                panic!("expected updates, got {event:?}");
            };
            assert_eq!(
                updates.len(),
                1,
                "an update of the other subscription ends a batch"
            );
            sequences.extend(updates.sequences());
        }
        assert_eq!(sequences, (1..=total).map(Some).collect::<Vec<_>>());
        assert_eq!(
            pair.state_of(key),
            Some(json(&format!(r#"{{"revision":{total}}}"#)))
        );
    }
}
