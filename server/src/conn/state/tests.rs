use std::time::Duration;

use baton_protocol::chord::{
    InstanceAddress, InstanceSnapshot, MemberSnapshot, Op, ProviderUpdate, ServiceMode,
};
use baton_protocol::{Map, decode_payload};

use super::*;
use crate::config::ResyncDialect;

const SERVER: &str = "00000000-0000-4000-8000-000000000001";

fn limits() -> ConnLimits {
    ConnLimits {
        max_frame_length: 1 << 20,
        max_pending_bytes: 4 << 20,
        max_active_requests: 2,
        max_subscriptions: 4,
        subscriber_queue_length: 3,
        resync: ResyncDialect::Lifecycle,
    }
}

fn ready(limits: ConnLimits) -> ConnState {
    let mut s = ConnState::new(
        tokio::time::Instant::now().into_std(),
        Duration::from_secs(5),
        ServerId::parse(SERVER).unwrap(),
        limits,
    );
    assert!(matches!(
        s.handle_message(ClientMessage::hello()),
        Step::Attach
    ));
    assert!(s.handshake_complete().is_empty());
    assert!(matches!(drain(&mut s)[..], [ServerMessage::Hello { .. }]));
    s
}

/// Takes every frame queued.
fn drain(s: &mut ConnState) -> Vec<ServerMessage> {
    drain_some(s, usize::MAX)
}

/// Takes at most `chunks` writes' worth of frames.
fn drain_some(s: &mut ConnState, chunks: usize) -> Vec<ServerMessage> {
    let mut out = Vec::new();
    for _ in 0..chunks {
        let Some(chunk) = s.poll_transmit() else {
            break;
        };
        s.transmitted(chunk.len());
        // A chunk is one frame or a run of update frames.
        let mut rest = &chunk[..];
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            out.push(decode_payload::<ServerMessage>(&rest[4..4 + len], u32::MAX).unwrap());
            rest = &rest[4 + len..];
        }
    }
    out
}

fn call(service: &str, member: &str, args: Vec<Value>) -> Value {
    ServiceCall::new(service, member, args).into_value()
}

/// The `$chord.service` subscribe call for `sid` to the service `svc` in `mode`.
fn subscribe_call(sid: &str, mode: &str) -> Value {
    call(
        "$chord.service",
        "subscribe",
        vec![Value::from(sid), Value::from("svc"), Value::from(mode)],
    )
}

/// Feeds the request `id` and returns its dispatch (the call reaches the host).
fn dispatch(s: &mut ConnState, id: &str, call: Value) -> Dispatch {
    match s.handle_message(request(id, call)) {
        Step::Dispatch(d) => d,
        _ => panic!("{id}: dispatch expected"),
    }
}

fn request(id: &str, call: Value) -> ClientMessage {
    ClientMessage::Request(Request {
        id: Id::new(id).unwrap(),
        target: Target::Server(ServerId::parse(SERVER).unwrap()),
        call,
    })
}

fn error_of(m: &ServerMessage) -> (ErrorCode, &str) {
    match m {
        ServerMessage::Response(Response {
            outcome: Outcome::Error(e),
            ..
        }) => (e.kind().expect("a code baton produces"), e.message.as_str()),
        other => panic!("not an error response: {other:?}"),
    }
}

/// An instance (at `address`, or the singleton) whose one `state` member is
/// `{"value": value}` at `sequence`.
fn instance(address: Option<InstanceAddress>, sequence: u64, value: i32) -> InstanceSnapshot {
    let mut m = Map::new();
    m.insert("value", Value::from(value));
    InstanceSnapshot::new(
        address,
        vec![MemberSnapshot::state("state", sequence, Value::Map(m))],
    )
}

/// The `state` update of the instance at `address` to `{"value": value}` at `sequence`.
fn state_update(address: Option<InstanceAddress>, sequence: u64, value: i32) -> SharedUpdate {
    SharedUpdate::new(ProviderUpdate::State {
        instance: address,
        member: "state".into(),
        sequence,
        ops: vec![Op::Set {
            path: baton_protocol::chord::parse_path(&Value::Array(vec![Value::from("value")]))
                .unwrap(),
            value: Value::from(value),
        }],
    })
}

fn snapshot(sequence: u64, value: i32) -> SubscriptionSnapshot {
    SubscriptionSnapshot::new(
        "svc",
        ServiceMode::Singleton,
        vec![instance(None, sequence, value)],
    )
}

fn set(sequence: u64, value: i32) -> SharedUpdate {
    state_update(None, sequence, value)
}

#[test]
fn duplicate_id_is_checked_before_the_active_limit() {
    let mut s = ready(limits());
    let echo = || call("t", "echo", vec![]);
    assert!(matches!(
        s.handle_message(request("a", echo())),
        Step::Dispatch(_)
    ));
    assert!(matches!(
        s.handle_message(request("b", echo())),
        Step::Dispatch(_)
    ));
    assert!(matches!(
        s.handle_message(request("a", echo())),
        Step::Nothing
    ));
    assert!(matches!(
        s.handle_message(request("c", echo())),
        Step::Nothing
    ));
    let out = drain(&mut s);
    assert_eq!(
        error_of(&out[0]),
        (ErrorCode::InvalidRequest, "Request ID is already active")
    );
    assert_eq!(
        error_of(&out[1]),
        (
            ErrorCode::Busy,
            "Too many active requests on this connection (limit 2)"
        )
    );
    assert_eq!(s.active_requests(), 2);
}

#[test]
fn draining_refuses_after_the_wrong_server_check() {
    let mut s = ready(limits());
    s.set_draining();
    let mut other = request("x", call("t", "echo", vec![]));
    if let ClientMessage::Request(r) = &mut other {
        r.target = Target::Server(ServerId::parse("00000000-0000-4000-8000-000000000002").unwrap());
    }
    assert!(matches!(s.handle_message(other), Step::Nothing));
    assert!(matches!(
        s.handle_message(request("y", call("t", "echo", vec![]))),
        Step::Nothing
    ));
    let out = drain(&mut s);
    assert_eq!(error_of(&out[0]).0, ErrorCode::WrongServer);
    assert_eq!(
        error_of(&out[1]),
        (ErrorCode::ServerDraining, "Server is draining")
    );
}

#[test]
fn updates_published_during_subscribe_follow_its_response_minus_covered_ones() {
    let mut s = ready(limits());
    let d = dispatch(&mut s, "r", subscribe_call("sub", "singleton"));
    assert_eq!(
        s.publish("sub", &set(1, 1), || snapshot(1, 1)),
        Published::Queued
    );
    assert_eq!(
        s.publish("sub", &set(2, 2), || snapshot(2, 2)),
        Published::Queued
    );
    assert!(drain(&mut s).is_empty(), "nothing before the response");
    s.finish_request(&d.id, Ok(Some(snapshot(1, 1).to_value())));
    let out = drain(&mut s);
    assert!(
        matches!(&out[0], ServerMessage::Response(r) if matches!(r.outcome, Outcome::Value(_)))
    );
    assert_eq!(
        out.len(),
        2,
        "the covered update (sequence 1) is dropped: {out:?}"
    );
    assert!(
        matches!(&out[1], ServerMessage::ServiceUpdate(u) if u.update.to_json().contains("\"sequence\":2"))
    );
}

#[test]
fn a_full_singleton_queue_collapses_into_one_replaced_carrying_the_current_instance() {
    let mut s = ready(limits());
    let d = dispatch(&mut s, "r", subscribe_call("sub", "singleton"));
    s.finish_request(&d.id, Ok(Some(snapshot(0, 0).to_value())));
    assert_eq!(drain(&mut s).len(), 1);
    for i in 1..=3 {
        assert_eq!(
            s.publish("sub", &set(i, i as i32), || snapshot(i, i as i32)),
            Published::Queued
        );
    }
    assert_eq!(
        s.publish("sub", &set(4, 4), || snapshot(4, 4)),
        Published::Reset
    );
    assert_eq!(
        s.publish("sub", &set(5, 5), || snapshot(5, 5)),
        Published::Queued
    );
    let out = drain(&mut s);
    assert_eq!(out.len(), 2);
    let ServerMessage::ServiceUpdate(resync) = &out[0] else {
        panic!("not an update: {:?}", out[0]);
    };
    assert_eq!(
        resync.update.to_json(),
        r#"{"type":"replaced","snapshot":{"members":[{"name":"state","kind":"state","sequence":4,"ops":[["r",{"value":4}]]}]}}"#,
        "one chord 0.85.1 update: the instance at the snapshot's sequence"
    );
    assert!(
        matches!(&out[1], ServerMessage::ServiceUpdate(u) if u.update.to_json().contains("\"sequence\":5"))
    );
}

/// Subscribes `sid` in `mode`, answering with `snapshot`; returns the response, the only
/// frame the subscribe produces.
fn subscribe(
    s: &mut ConnState,
    sid: &str,
    mode: &str,
    snapshot: &SubscriptionSnapshot,
) -> ServerMessage {
    let d = dispatch(s, &format!("r-{sid}"), subscribe_call(sid, mode));
    s.finish_request(&d.id, Ok(Some(snapshot.to_value())));
    let mut out = drain(s);
    assert_eq!(out.len(), 1, "{sid}: the response alone: {out:?}");
    out.remove(0)
}

fn subscribed(limits: ConnLimits, sids: &[&str]) -> ConnState {
    let mut s = ready(limits);
    for sid in sids {
        subscribe(&mut s, sid, "singleton", &snapshot(0, 0));
    }
    s
}

fn sequences(out: &[ServerMessage]) -> Vec<(String, String)> {
    out.iter()
        .map(|m| match m {
            ServerMessage::ServiceUpdate(u) => {
                let json = u.update.to_json();
                let what = if json.starts_with("{\"type\":\"reset\"") {
                    "reset".to_owned()
                } else if json.starts_with("{\"type\":\"replaced\"") {
                    "replaced".to_owned()
                } else {
                    json.split("\"sequence\":")
                        .nth(1)
                        .and_then(|rest| rest.split([',', '}']).next())
                        .unwrap_or_default()
                        .to_owned()
                };
                (u.subscription_id.to_string(), what)
            }
            other => panic!("not an update: {other:?}"),
        })
        .collect()
}

#[test]
fn batches_to_several_subscriptions_leave_in_publish_order() {
    let mut s = subscribed(limits(), &["a", "b"]);
    let batch = [set(1, 1), set(2, 2)];
    assert_eq!(
        s.publish_many("a", &batch, || snapshot(2, 2)),
        Published::Queued
    );
    assert_eq!(
        s.publish_many("b", &batch, || snapshot(2, 2)),
        Published::Queued
    );
    assert_eq!(
        s.publish_many("a", &[set(3, 3)], || snapshot(3, 3)),
        Published::Queued
    );
    let out = drain(&mut s);
    let expected = [("a", "1"), ("a", "2"), ("b", "1"), ("b", "2"), ("a", "3")]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(sequences(&out), expected);
    assert_eq!(
        batch[0].encode_count(),
        1,
        "both subscribers shared one encoding"
    );
}

#[test]
fn a_batch_that_overflows_the_queue_ends_in_one_resync_covering_the_rest() {
    let mut s = subscribed(limits(), &["a", "b"]);
    assert_eq!(
        s.publish_many("b", &[set(1, 1)], || snapshot(1, 1)),
        Published::Queued
    );
    let batch: Vec<_> = (1..=5).map(|i| set(i, i as i32)).collect();
    assert_eq!(
        s.publish_many("a", &batch, || snapshot(5, 5)),
        Published::Reset
    );
    assert_eq!(
        s.publish_many("a", &[set(6, 6)], || snapshot(6, 6)),
        Published::Queued
    );
    let out = drain(&mut s);
    let expected =
        [("b", "1"), ("a", "replaced"), ("a", "6")].map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(sequences(&out), expected);
    assert!(
        matches!(&out[1], ServerMessage::ServiceUpdate(u) if u.update.to_json().contains("\"sequence\":5")),
        "the resync carries the state after the whole batch"
    );
    assert_eq!(s.pending_bytes(), 0);
}

#[test]
fn a_batch_published_during_subscribe_is_held_and_a_full_hold_becomes_one_resync() {
    let mut s = ready(limits());
    let d = dispatch(&mut s, "r", subscribe_call("a", "singleton"));
    let batch: Vec<_> = (1..=4).map(|i| set(i, i as i32)).collect();
    assert_eq!(
        s.publish_many("a", &batch, || snapshot(4, 4)),
        Published::Reset
    );
    assert_eq!(
        s.publish_many("a", &[set(5, 5)], || snapshot(5, 5)),
        Published::Queued
    );
    s.finish_request(&d.id, Ok(Some(snapshot(0, 0).to_value())));
    let out = drain(&mut s);
    assert!(matches!(&out[0], ServerMessage::Response(_)));
    let expected = [("a", "replaced"), ("a", "5")].map(|(a, b)| (a.to_owned(), b.to_owned()));
    assert_eq!(sequences(&out[1..]), expected);
}

#[test]
fn unsubscribing_drops_queued_updates_and_a_new_subscription_starts_clean() {
    let mut s = subscribed(limits(), &["a"]);
    assert_eq!(
        s.publish_many("a", &[set(1, 1), set(2, 2)], || snapshot(2, 2)),
        Published::Queued
    );
    let unsub = call("$chord.service", "unsubscribe", vec![Value::from("a")]);
    let d = dispatch(&mut s, "u", unsub);
    s.finish_request(&d.id, Ok(None));
    assert_eq!(
        s.publish("a", &set(3, 3), || snapshot(3, 3)),
        Published::Dropped
    );
    let out = drain(&mut s);
    assert_eq!(out.len(), 1, "only the unsubscribe response: {out:?}");
    let mut s2 = s;
    let d = dispatch(&mut s2, "r2", subscribe_call("b", "singleton"));
    s2.finish_request(&d.id, Ok(Some(snapshot(0, 0).to_value())));
    for i in 1..=3 {
        assert_eq!(
            s2.publish("b", &set(i, i as i32), || snapshot(i, i as i32)),
            Published::Queued,
            "the reused queue slot starts empty"
        );
    }
}

#[test]
fn fatal_error_is_queued_behind_pending_output_and_is_last() {
    let mut s = ready(limits());
    let d = dispatch(&mut s, "r", call("t", "echo", vec![]));
    s.finish_request(&d.id, Ok(None));
    s.handle_message(ClientMessage::hello());
    assert_eq!(s.closing(), Some(Closing::Flush));
    assert!(!s.is_finished());
    let out = drain(&mut s);
    assert!(matches!(&out[0], ServerMessage::Response(_)));
    assert!(
        matches!(&out[1], ServerMessage::HelloError(e) if e.message == "hello may only be sent as the first message")
    );
    assert!(s.is_finished());
    assert_eq!(
        s.publish("sub", &set(1, 1), || snapshot(1, 1)),
        Published::Closed
    );
}

#[test]
fn exceeding_the_pending_byte_limit_aborts() {
    let mut l = limits();
    l.max_pending_bytes = 200;
    let mut s = ready(l);
    for i in 0..2 {
        let d = dispatch(&mut s, &format!("r{i}"), call("t", "echo", vec![]));
        s.finish_request(&d.id, Ok(Some(Value::from("x".repeat(120)))));
    }
    assert_eq!(s.closing(), Some(Closing::Abort));
    assert!(s.is_finished());
    assert_eq!(s.pending_bytes(), 0);
}

/// A keyed provider for tests: each live instance has one `state` member `{"value":n}`.
#[derive(Debug, Default)]
struct Keyed {
    /// key → (generation, sequence, value)
    live: std::collections::BTreeMap<String, (u64, u64, i32)>,
    generations: HashMap<String, u64>,
}

fn keyed_instance(key: &str, generation: u64, sequence: u64, value: i32) -> InstanceSnapshot {
    instance(Some(InstanceAddress::new(key, generation)), sequence, value)
}

impl Keyed {
    fn snapshot(&self) -> SubscriptionSnapshot {
        SubscriptionSnapshot::new(
            "svc",
            ServiceMode::Keyed,
            self.live
                .iter()
                .map(|(k, (g, seq, v))| keyed_instance(k, *g, *seq, *v))
                .collect(),
        )
    }

    fn spawn(&mut self, key: &str) -> Option<SharedUpdate> {
        if self.live.contains_key(key) {
            return None;
        }
        let generation = self.generations.entry(key.to_owned()).or_default();
        *generation += 1;
        self.live.insert(key.to_owned(), (*generation, 0, 0));
        Some(SharedUpdate::new(ProviderUpdate::Spawned {
            instance: keyed_instance(key, *generation, 0, 0),
        }))
    }

    fn close(&mut self, key: &str) -> Option<SharedUpdate> {
        let (generation, ..) = self.live.remove(key)?;
        Some(SharedUpdate::new(ProviderUpdate::Closed {
            instance: InstanceAddress::new(key, generation),
        }))
    }

    fn bump(&mut self, key: &str) -> Option<SharedUpdate> {
        let (generation, sequence, value) = self.live.get_mut(key)?;
        *sequence += 1;
        *value += 1;
        Some(state_update(
            Some(InstanceAddress::new(key, *generation)),
            *sequence,
            *value,
        ))
    }
}

/// What a chord consumer does with the frames: upstream's state decoder (which refuses a
/// `spawned` for an address it still has codecs for) and replica rules.
struct Client {
    decoder: baton_protocol::chord::StateDecoder,
    replica: baton_protocol::chord::Replica,
}

impl Client {
    fn new(response: &ServerMessage, mode: ServiceMode) -> Self {
        let ServerMessage::Response(Response {
            outcome: Outcome::Value(wire),
            ..
        }) = response
        else {
            panic!("not a subscribe response: {response:?}");
        };
        let mut decoder = baton_protocol::chord::StateDecoder::new();
        let mut replica = baton_protocol::chord::Replica::new("svc", mode);
        replica
            .apply_snapshot(decoder.decode_snapshot(wire).unwrap())
            .unwrap();
        Self { decoder, replica }
    }

    fn apply(&mut self, messages: &[ServerMessage]) -> Vec<String> {
        let mut types = Vec::new();
        for m in messages {
            let ServerMessage::ServiceUpdate(u) = m else {
                panic!("not an update: {m:?}");
            };
            let update = self.decoder.decode_update(&u.update).unwrap();
            types.push(match &update {
                ProviderUpdate::Spawned { instance } => {
                    let a = instance.instance.as_ref().unwrap();
                    format!("spawned {}@{}", a.key, a.generation)
                }
                ProviderUpdate::Closed { instance } => {
                    format!("closed {}@{}", instance.key, instance.generation)
                }
                other => other.type_name().to_owned(),
            });
            self.replica.apply_update(update).unwrap();
        }
        types
    }

    fn view(&self) -> View {
        view(&self.replica)
    }
}

/// Each instance of a replica with its value and sequence, by address.
type View = Vec<(Option<InstanceAddress>, Option<Value>, Option<u64>)>;

fn view(replica: &baton_protocol::chord::Replica) -> View {
    let mut v: View = replica
        .instances()
        .iter()
        .map(|i| {
            (
                i.address().cloned(),
                i.value("state").cloned(),
                i.sequence("state"),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The view of a client that applied `snapshot` and nothing else.
fn expected_view(snapshot: &SubscriptionSnapshot) -> View {
    let mut replica = baton_protocol::chord::Replica::new("svc", snapshot.mode);
    replica.apply_snapshot(snapshot.clone()).unwrap();
    view(&replica)
}

fn subscribe_keyed(s: &mut ConnState, sid: &str, snapshot: &SubscriptionSnapshot) -> Client {
    Client::new(&subscribe(s, sid, "keyed", snapshot), ServiceMode::Keyed)
}

#[test]
fn a_keyed_resync_closes_what_the_client_holds_then_spawns_every_current_instance() {
    let mut s = ready(limits());
    let mut p = Keyed::default();
    p.spawn("a");
    p.spawn("b");
    let mut client = subscribe_keyed(&mut s, "k", &p.snapshot());
    // The client gets the close of `a`.
    let closed = p.close("a").unwrap();
    assert_eq!(s.publish("k", &closed, || p.snapshot()), Published::Queued);
    assert_eq!(client.apply(&drain_some(&mut s, 1)), ["closed a@1"]);
    // Then it stops reading: three updates fill its queue, the fourth overflows.
    for update in [p.spawn("c"), p.bump("b"), p.spawn("d")] {
        let update = update.unwrap();
        assert_eq!(s.publish("k", &update, || p.snapshot()), Published::Queued);
    }
    let bump = p.bump("c").unwrap();
    assert_eq!(s.publish("k", &bump, || p.snapshot()), Published::Reset);
    let types = client.apply(&drain(&mut s));
    assert_eq!(
        types,
        ["closed b@1", "spawned b@1", "spawned c@1", "spawned d@1"],
        "only what the client holds is closed (`a` went out before, `c` and `d` never did)"
    );
    assert_eq!(client.view(), expected_view(&p.snapshot()));
    // Updates continue from the snapshot's sequences.
    let bump = p.bump("c").unwrap();
    assert_eq!(s.publish("k", &bump, || p.snapshot()), Published::Queued);
    assert_eq!(client.apply(&drain(&mut s)), ["state"]);
    assert_eq!(client.view(), expected_view(&p.snapshot()));
}

#[test]
fn a_keyed_resync_during_subscribe_closes_the_response_instances() {
    let mut s = ready(limits());
    let mut p = Keyed::default();
    p.spawn("a");
    let response = p.snapshot();
    let d = dispatch(&mut s, "r", subscribe_call("k", "keyed"));
    let batch: Vec<_> = [p.close("a"), p.spawn("a"), p.spawn("b"), p.bump("b")]
        .into_iter()
        .map(Option::unwrap)
        .collect();
    assert_eq!(
        s.publish_many("k", &batch, || p.snapshot()),
        Published::Reset
    );
    s.finish_request(&d.id, Ok(Some(response.to_value())));
    let out = drain(&mut s);
    let mut client = Client::new(&out[0], ServiceMode::Keyed);
    assert_eq!(
        client.apply(&out[1..]),
        ["closed a@1", "spawned a@2", "spawned b@1"]
    );
    assert_eq!(client.view(), expected_view(&p.snapshot()));
}

#[test]
fn keyed_subscribers_converge_through_any_interleaving_of_resyncs_and_writes() {
    // A small deterministic generator: the same run every time.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let keys = ["a", "b", "c", "d", "e"];
    for round in 0..20 {
        let mut s = ready(limits());
        let mut p = Keyed::default();
        p.spawn("a");
        p.spawn("b");
        let mut client = subscribe_keyed(&mut s, "k", &p.snapshot());
        let mut resyncs = 0;
        for _ in 0..400 {
            let key = keys[next(keys.len() as u64) as usize];
            let batch: Vec<_> = (0..1 + next(3))
                .filter_map(|_| match next(4) {
                    0 => p.spawn(key),
                    1 => p.close(key),
                    _ => p.bump(key),
                })
                .collect();
            if !batch.is_empty() {
                match s.publish_many("k", &batch, || p.snapshot()) {
                    Published::Queued => {}
                    Published::Reset => resyncs += 1,
                    other => panic!("round {round}: {other:?}"),
                }
            }
            if next(3) == 0 {
                let chunks = next(3) as usize;
                client.apply(&drain_some(&mut s, chunks));
            }
            let pending = s
                .subscriptions
                .pending_view_changes("k")
                .expect("keyed subscription open");
            assert!(
                pending <= s.limits.subscriber_queue_length,
                "round {round}: {pending} pending changes"
            );
        }
        client.apply(&drain(&mut s));
        assert!(resyncs > 0, "round {round} never overflowed");
        assert_eq!(client.view(), expected_view(&p.snapshot()), "round {round}");
    }
}

#[test]
fn the_reset_dialect_sends_one_reset_for_pi_1_clients() {
    let mut s = subscribed(
        ConnLimits {
            resync: ResyncDialect::Reset,
            ..limits()
        },
        &["a"],
    );
    let batch: Vec<_> = (1..=5).map(|i| set(i, i as i32)).collect();
    assert_eq!(
        s.publish_many("a", &batch, || snapshot(5, 5)),
        Published::Reset
    );
    let out = drain(&mut s);
    assert_eq!(sequences(&out), [("a".to_owned(), "reset".to_owned())]);
}
