//! Specifications of how the core hands a batch of frames (one read) to replica watchers:
//! every update is applied and queued as its own event, and a watcher wakes once per read
//! and sees the state after the last update.

use std::sync::Arc;
use std::time::Instant;

use baton_protocol::chord::{ControlCall, ProviderUpdate, Replica, ServiceCall, ServiceMode};
use baton_protocol::{
    ClientMessage, Id, Outcome, Response, ServerCodec, ServerId, ServerMessage, ServiceUpdate,
    Target, Value,
};
use bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

use super::*;
use crate::subscription::{SubscriptionEvent, SubscriptionParts};

const MAX_FRAME: u32 = 1 << 20;

fn server_id() -> ServerId {
    "00000000-0000-4000-8000-000000000001".parse().unwrap()
}

fn json(s: &str) -> Value {
    Value::from_json(s).unwrap()
}

#[expect(
    clippy::disallowed_methods,
    reason = "one fixed origin for virtual time"
)]
fn origin() -> Instant {
    Instant::now()
}

/// A handshaken core, the server's codec, and one live subscription to `pi.models`.
struct Subscribed {
    conn: ClientConn<u32>,
    codec: ServerCodec,
    wire: BytesMut,
    now: Instant,
    parts: SubscriptionParts,
    wire_id: Id,
}

impl Subscribed {
    fn new() -> Self {
        let config = ConnConfig {
            max_frame_length: MAX_FRAME,
            expected_server_id: None,
            reconnect: None,
            jitter_seed: 7,
        };
        let mut s = Self {
            conn: ClientConn::new(config, RequestNumbers::default()),
            codec: ServerCodec::new(MAX_FRAME),
            wire: BytesMut::new(),
            now: origin(),
            parts: SubscribeCmd::new(
                1,
                TargetSpec::Explicit(Target::Server(server_id())),
                "pi.models".to_owned(),
                ServiceMode::Singleton,
            )
            .1,
            wire_id: Id::new("unset").unwrap(),
        };
        s.conn.handle_open(s.now);
        assert_eq!(s.recv(), ClientMessage::hello());
        s.feed(&[ServerMessage::Hello {
            server_id: server_id(),
        }]);
        assert!(s.conn.is_live());
        let (cmd, parts) = SubscribeCmd::new(
            1,
            TargetSpec::Explicit(Target::Server(server_id())),
            "pi.models".to_owned(),
            ServiceMode::Singleton,
        );
        s.parts = parts;
        s.conn.handle_command(s.now, Command::Subscribe(cmd));
        let ClientMessage::Request(r) = s.recv() else {
            panic!("expected the subscribe request")
        };
        let Some(ControlCall::Subscribe {
            subscription_id, ..
        }) = ControlCall::decode(&ServiceCall::parse(&r.call).unwrap())
        else {
            panic!("expected subscribe")
        };
        s.wire_id = Id::new(subscription_id).unwrap();
        let snapshot = json(
            r#"{"serviceId":"pi.models","mode":"singleton","instances":[{"members":[{"name":"state","kind":"state","sequence":0,"ops":[["r",{"revision":0}]]}]}]}"#,
        );
        s.feed(&[ServerMessage::Response(Response {
            id: r.id,
            outcome: Outcome::Value(snapshot),
        })]);
        assert!(matches!(s.parts.ready.try_recv(), Ok(Ok(()))));
        assert!(matches!(
            s.parts.events.try_recv(),
            Ok(SubscriptionEvent::Snapshot { resynced: false })
        ));
        s
    }

    fn recv(&mut self) -> ClientMessage {
        let _ = self.conn.poll_transmit(&mut self.wire);
        self.codec.decode(&mut self.wire).unwrap().unwrap()
    }

    /// The server's `msgs`, delivered in one read.
    fn feed(&mut self, msgs: &[ServerMessage]) {
        let mut buf = BytesMut::new();
        for msg in msgs {
            self.codec.encode(msg.clone(), &mut buf).unwrap();
        }
        self.conn.read_buffer(buf.len()).extend_from_slice(&buf);
        self.conn.handle_read(self.now);
    }

    /// Sets `revision` to `n` at sequence `n`.
    fn revision(&self, n: u64) -> ServerMessage {
        ServerMessage::ServiceUpdate(ServiceUpdate {
            subscription_id: self.wire_id.clone(),
            update: json(&format!(
                r#"{{"type":"state","member":"state","sequence":{n},"ops":[["s",["revision"],{n}]]}}"#
            )),
        })
    }

    fn revision_seen(&self, watch: &mut tokio::sync::watch::Receiver<Arc<Replica>>) -> Value {
        watch
            .borrow_and_update()
            .value(None, "state")
            .cloned()
            .unwrap()
    }
}

#[test]
fn updates_read_together_are_each_applied_and_queued_and_the_watcher_sees_the_last() {
    let mut s = Subscribed::new();
    let mut watch = s.parts.state.clone();
    watch.mark_unchanged();
    let batch = [s.revision(1), s.revision(2), s.revision(3)];
    s.feed(&batch);
    assert!(watch.has_changed().unwrap(), "the watcher is woken");
    assert_eq!(s.revision_seen(&mut watch), json(r#"{"revision":3}"#));
    assert!(!watch.has_changed().unwrap());
    for n in 1..=3 {
        match s.parts.events.try_recv() {
            Ok(SubscriptionEvent::Update(u)) => {
                assert!(
                    matches!(&*u, ProviderUpdate::State { sequence, .. } if *sequence == n),
                    "{u:?}"
                );
            }
            other => panic!("expected update {n}, got {other:?}"),
        }
    }
    assert!(s.parts.events.try_recv().is_err(), "one event per update");

    // The next read wakes it again.
    let next = s.revision(4);
    s.feed(&[next]);
    assert!(watch.has_changed().unwrap());
    assert_eq!(s.revision_seen(&mut watch), json(r#"{"revision":4}"#));
}

#[test]
fn a_gap_inside_a_batch_clears_the_member_wakes_the_watcher_and_re_subscribes() {
    let mut s = Subscribed::new();
    let mut watch = s.parts.state.clone();
    watch.mark_unchanged();
    // Sequence 3 skips 2: the replica clears the member (as the gap rule says) and the client
    // re-subscribes; a watcher must learn of the cleared state although it came mid-batch.
    let batch = [s.revision(1), s.revision(3)];
    s.feed(&batch);
    assert!(watch.has_changed().unwrap());
    assert_eq!(watch.borrow_and_update().value(None, "state"), None);
    assert!(matches!(
        s.parts.events.try_recv(),
        Ok(SubscriptionEvent::Update(_))
    ));
    assert!(matches!(
        s.parts.events.try_recv(),
        Ok(SubscriptionEvent::Resyncing { .. })
    ));
    let ClientMessage::Request(unsub) = s.recv() else {
        panic!("expected the unsubscribe")
    };
    assert!(matches!(
        ControlCall::decode(&ServiceCall::parse(&unsub.call).unwrap()),
        Some(ControlCall::Unsubscribe { .. })
    ));
}
