//! Client state rebuild: ops applied per second, and wire bytes of a 2,000-token streamed
//! reply as `a` appends versus resending the whole state every token.

use std::time::Instant;

use baton_protocol::chord::{Op, ProviderUpdate, Replica, ServiceMode, StateDecoder, StateEncoder};
use baton_protocol::{
    Id, Map, ServerFrame, ServerMessage, ServiceUpdate, Value, decode_payload, decode_server_frame,
    encode_frame,
};

use crate::ours::{append_update, reply_snapshot};
use crate::util::Plan;

const MAX_FRAME: u32 = 16 << 20;

/// Rebuild figures.
#[derive(Debug, Clone, Default)]
pub struct RebuildResult {
    /// `Replica::apply_update` of one-op append updates, ops/s.
    pub apply_ops_per_sec: f64,
    /// Frame → `decode_payload` → `StateDecoder::decode_update` → `apply_update`, ops/s.
    pub frame_ops_per_sec: f64,
    /// Frame → `decode_server_frame` → `StateDecoder::apply_update_cbor` (the update's
    /// bytes applied to the replica in place, then kept in the read's batch: what
    /// `baton_client` does), ops/s.
    pub client_ops_per_sec: f64,
    /// Tokens in the streamed reply.
    pub tokens: usize,
    /// Bytes of the append frames.
    pub append_bytes: u64,
    /// Bytes when every token resends the whole state (`["r", value]`).
    pub snapshot_bytes: u64,
}

fn fresh_replica() -> Replica {
    let mut r = Replica::new("bench.stream.r", ServiceMode::Singleton);
    r.apply_snapshot(reply_snapshot("bench.stream.r", 0, ""))
        .expect("snapshot");
    r
}

fn service_update_frame(update: Value) -> bytes::Bytes {
    let msg = ServerMessage::ServiceUpdate(ServiceUpdate {
        subscription_id: Id::new("sub-1").expect("id"),
        update,
    });
    encode_frame(&msg, MAX_FRAME).expect("encode")
}

/// Token `i` of a deterministic, English-like reply (1–8 byte tokens, ~4.5 on average).
fn token(i: usize) -> &'static str {
    const WORDS: [&str; 16] = [
        " the",
        " model",
        " streams",
        " a",
        " reply",
        ",",
        " token",
        " by",
        " token",
        " to",
        " every",
        " watching",
        " client",
        ".",
        " It",
        " works",
    ];
    WORDS[(i * 7 + i / 16) % WORDS.len()]
}

/// A client decoder and replica that have taken the wire snapshot.
fn hydrated(wire_snap: &Value) -> (StateDecoder, Replica) {
    let mut dec = StateDecoder::new();
    let mut replica = Replica::new("bench.stream.r", ServiceMode::Singleton);
    replica
        .apply_snapshot(dec.decode_snapshot(wire_snap).expect("decode snapshot"))
        .expect("apply snapshot");
    (dec, replica)
}

/// Runs the rebuild and wire-bytes measurements.
pub fn run(plan: &Plan) -> RebuildResult {
    let n = plan.replica_ops;
    let mut r = RebuildResult::default();

    // 1. apply only (already-decoded updates; building them is outside the timed loop).
    let updates: Vec<ProviderUpdate> = (1..=n as u64).map(|s| append_update(s, "tok ")).collect();
    let mut replica = fresh_replica();
    let t = Instant::now();
    for u in updates {
        replica.apply_update(u).expect("apply");
    }
    r.apply_ops_per_sec = n as f64 / t.elapsed().as_secs_f64();

    // 2. from wire frames, as the client does.
    let frames_n = n.min(500_000);
    let mut enc = StateEncoder::new();
    let snap = reply_snapshot("bench.stream.r", 0, "");
    let wire_snap = enc.encode_snapshot(&snap).expect("encode snapshot");
    let frames: Vec<bytes::Bytes> = (1..=frames_n as u64)
        .map(|s| service_update_frame(enc.encode_update(&append_update(s, "tok ")).expect("enc")))
        .collect();
    let (mut dec, mut replica) = hydrated(&wire_snap);
    let t = Instant::now();
    for f in &frames {
        let msg: ServerMessage = decode_payload(&f[4..], MAX_FRAME).expect("decode");
        let ServerMessage::ServiceUpdate(u) = msg else {
            panic!("not an update")
        };
        let update = dec.decode_update(&u.update).expect("decode update");
        replica.apply_update(update).expect("apply");
    }
    r.frame_ops_per_sec = frames_n as f64 / t.elapsed().as_secs_f64();

    // 2b. the client's path: the update stays encoded; the state decoder applies it to the
    // replica straight from its bytes, and the bytes (a slice of the frame) join the read's
    // batch of updates, as `baton_client` hands them on (64 to a batch, as a read holds
    // at least).
    let (mut dec, mut replica) = hydrated(&wire_snap);
    let mut batch: Vec<(bytes::Bytes, Option<u64>)> = Vec::new();
    let t = Instant::now();
    for f in &frames {
        let frame = decode_server_frame(f.slice(4..), MAX_FRAME).expect("decode");
        let ServerFrame::Update(u) = frame else {
            panic!("not an update")
        };
        let sequence = dec
            .apply_update_cbor(&u.update, &mut replica)
            .expect("apply");
        if batch.len() == 64 {
            batch = Vec::new();
        }
        batch.push((u.update, sequence));
    }
    drop(batch);
    r.client_ops_per_sec = frames_n as f64 / t.elapsed().as_secs_f64();

    // 3. wire bytes for a 2,000-token reply.
    r.tokens = 2_000;
    let mut enc_a = StateEncoder::new();
    let mut enc_s = StateEncoder::new();
    enc_a.encode_snapshot(&snap).expect("snapshot");
    enc_s.encode_snapshot(&snap).expect("snapshot");
    let mut text = String::new();
    for i in 0..r.tokens {
        let tok = token(i);
        text.push_str(tok);
        let seq = i as u64 + 1;
        let a = enc_a
            .encode_update(&append_update(seq, tok))
            .expect("append");
        r.append_bytes += service_update_frame(a).len() as u64;
        let mut m = Map::new();
        m.insert("text", Value::from(text.as_str()));
        let whole = ProviderUpdate::State {
            instance: None,
            member: "reply".into(),
            sequence: seq,
            ops: vec![Op::Replace(Value::Map(m))],
        };
        let s = enc_s.encode_update(&whole).expect("replace");
        r.snapshot_bytes += service_update_frame(s).len() as u64;
    }
    r
}
