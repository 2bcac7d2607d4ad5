//! Fuzz target bodies, replayable from `cargo test` (not a stable API).
//!
//! Each `pub fn` here is the whole body of the cargo-fuzz target of the same name in
//! `fuzz/fuzz_targets/`; the target files only forward their input. Keeping the bodies in the
//! library lets `protocol/tests/fuzz_seeds.rs` replay every committed seed
//! (`fuzz/seeds/<target>/*`) on stable `cargo test`, and lets a crash found by a campaign be
//! pinned as a seed without any nightly tooling.
//!
//! Every body must accept any input without panicking unless an invariant is broken; a panic
//! here is a bug report.

use bytes::{Bytes, BytesMut};

use crate::cbor::{self, ValueDecodeError};
use crate::chord::{self, Op, OpDecoder, OpEncoder};
use crate::codec::{
    Inbound, MessageDecoder, WireMessage, decode_payload, encode_frame, from_value, to_value,
};
use crate::frame::{FRAME_HEADER_LENGTH, FrameDecoder, FrameError};
use crate::limits::{CborLimits, DEFAULT_MAX_FRAME_LENGTH};
use crate::{ClientMessage, DecodeError, ServerMessage, Value};

/// Frame limits `frame_decode` picks from with the low bits of its first input byte.
///
/// Small limits make the "declared length over the limit" path reachable; the largest is the
/// default (a limit near `u32::MAX` would let one header reserve gigabytes, which the fuzzer's
/// memory limit would report as an out-of-memory crash).
pub const FRAME_LIMITS: [u32; 8] = [DEFAULT_MAX_FRAME_LENGTH, 0, 1, 4, 16, 64, 300, 4096];

/// A tiny deterministic generator (xorshift32) for chunk sizes.
#[derive(Debug, Clone)]
struct Splitter {
    state: u32,
}

impl Splitter {
    fn new(seed: u8) -> Self {
        // xorshift must not start at zero.
        Self {
            state: 0x9e37_79b9 ^ u32::from(seed).wrapping_mul(0x0101_0101),
        }
    }

    fn next(&mut self) -> u32 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.state = x;
        x
    }

    /// Cuts `data` into non-empty chunks: mostly small, sometimes single bytes, sometimes the
    /// whole rest at once (coalesced).
    fn chunks<'a>(&mut self, mut data: &'a [u8]) -> Vec<&'a [u8]> {
        let mut out = Vec::new();
        while !data.is_empty() {
            let r = self.next();
            let n = match r % 4 {
                0 => data.len(),
                1 => 1,
                _ => 1 + (r >> 8) as usize % 24,
            }
            .min(data.len());
            let (head, tail) = data.split_at(n);
            out.push(head);
            data = tail;
        }
        out
    }
}

/// How a whole stream ends, as the one-shot model sees it.
#[derive(Debug, PartialEq, Eq)]
enum StreamEnd {
    Clean,
    TooLong { length: u32 },
    Truncated,
}

/// The reference model: reads `stream` front to back in one piece.
fn frame_model(mut stream: &[u8], limit: u32) -> (Vec<&[u8]>, StreamEnd) {
    let mut payloads = Vec::new();
    loop {
        if stream.is_empty() {
            return (payloads, StreamEnd::Clean);
        }
        let Some((header, rest)) = stream.split_first_chunk::<FRAME_HEADER_LENGTH>() else {
            return (payloads, StreamEnd::Truncated);
        };
        let length = u32::from_be_bytes(*header);
        if length > limit {
            return (payloads, StreamEnd::TooLong { length });
        }
        let Some((payload, rest)) = rest.split_at_checked(length as usize) else {
            return (payloads, StreamEnd::Truncated);
        };
        payloads.push(payload);
        stream = rest;
    }
}

/// Target `frame_decode`: arbitrary bytes, split into arbitrary chunks, into [`FrameDecoder`].
///
/// Input layout: byte 0 picks the limit from [`FRAME_LIMITS`], byte 1 seeds the chunking, the
/// rest is the stream. Checks: no panic; every payload is within the limit; the chunked decoder
/// yields exactly the payloads and the ending (clean, over-limit header, truncated) of a
/// one-shot reference reading; after an error or end the decoder stays failed/ended.
pub fn frame_decode(data: &[u8]) {
    let [limit_sel, seed, stream @ ..] = data else {
        return;
    };
    let limit = FRAME_LIMITS[usize::from(limit_sel & 7)];
    let (expected, expected_end) = frame_model(stream, limit);

    let mut decoder = FrameDecoder::new(limit);
    let mut buf = BytesMut::new();
    let mut got: Vec<Bytes> = Vec::new();
    let mut error = None;
    'feed: for chunk in Splitter::new(*seed).chunks(stream) {
        buf.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(payload)) => {
                    assert!(payload.len() <= limit as usize, "payload over the limit");
                    got.push(payload);
                }
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break 'feed;
                }
            }
        }
    }
    let end = match error {
        Some(e) => e,
        None => match decoder.end(&buf) {
            Ok(()) => {
                assert_eq!(decoder.decode(&mut buf), Err(FrameError::Ended));
                assert_eq!(decoder.end(&buf), Err(FrameError::Ended));
                FrameError::Ended
            }
            Err(e) => e,
        },
    };
    let got_end = match end {
        FrameError::Ended => StreamEnd::Clean,
        FrameError::TooLong { length, limit: l } => {
            assert_eq!(l, limit);
            StreamEnd::TooLong { length }
        }
        FrameError::Truncated => StreamEnd::Truncated,
        other => panic!("unexpected frame error {other:?}"),
    };
    if got_end != StreamEnd::Clean {
        assert!(
            decoder.is_failed(),
            "an error must leave the decoder failed"
        );
        assert_eq!(decoder.decode(&mut buf), Err(FrameError::Failed));
        assert_eq!(decoder.end(&buf), Err(FrameError::Failed));
    }
    // Display never panics.
    let _ = end.to_string();
    assert_eq!(
        got_end, expected_end,
        "chunked ending differs from one-shot"
    );
    assert_eq!(got.len(), expected.len(), "chunked frame count differs");
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(&g[..], *e, "chunked payload differs from one-shot");
    }
}

/// Target `client_message_decode`: bytes into [`crate::ClientMessageDecoder`]; see
/// [`message_decode`].
pub fn client_message_decode(data: &[u8]) {
    message_decode::<ClientMessage>(data);
}

/// Target `server_message_decode`: bytes into [`crate::ServerMessageDecoder`]; see
/// [`message_decode`].
pub fn server_message_decode(data: &[u8]) {
    message_decode::<ServerMessage>(data);
    // The client's frame decoder leaves updates encoded: it must accept and refuse alike.
    if let Some(payload) = data.get(FRAME_HEADER_LENGTH..) {
        let limit = DEFAULT_MAX_FRAME_LENGTH;
        let framed = crate::decode_server_frame(Bytes::copy_from_slice(payload), limit)
            .map(|frame| frame.into_message().expect("a validated update decodes"));
        assert_eq!(
            framed,
            decode_payload::<ServerMessage>(payload, limit),
            "decode_server_frame and decode_payload disagree"
        );
    }
    // And the client's in-place decoder reads the stream as the value decoder does.
    let step = 1 + data.len() % 11;
    let limit = DEFAULT_MAX_FRAME_LENGTH;
    let (frames, frames_err) = read_in_place::<crate::ServerFrame>(data, step, limit);
    let frames: Vec<ServerMessage> = frames
        .into_iter()
        .map(|f| f.into_message().expect("a validated update decodes"))
        .collect();
    assert_eq!(
        (frames, frames_err),
        read_in_place::<ServerMessage>(data, step, limit),
        "the client's frame decoder differs from the value decoder"
    );
}

/// Feeds `data` to a decoder `step` bytes a read through
/// [`read_buffer`](MessageDecoder::read_buffer), taking every message after each read, then
/// ends the stream: what a connection's read loop sees.
fn read_in_place<M: Inbound>(
    data: &[u8],
    step: usize,
    limit: u32,
) -> (Vec<M>, Option<DecodeError>) {
    let mut d = MessageDecoder::<M>::new(limit);
    let mut got = Vec::new();
    for chunk in data.chunks(step) {
        d.read_buffer(chunk.len()).extend_from_slice(chunk);
        loop {
            match d.next_message() {
                Ok(Some(m)) => got.push(m),
                Ok(None) => break,
                Err(e) => return (got, Some(e)),
            }
        }
    }
    let end = d.end().err();
    (got, end)
}

/// Shared body of the message targets.
///
/// `data` is used twice: as a framed stream pushed whole (then again in small chunks, which
/// must agree, up to which error a stream with several comes first), and with its first four bytes skipped as one unframed payload (so mutations
/// that change the payload length still reach the envelope parser). Every decoded message must
/// re-encode within the same limit, decode to an equal message, re-encode to the same bytes,
/// and survive the [`to_value`]/[`from_value`] round trip.
pub fn message_decode<M>(data: &[u8])
where
    M: WireMessage + PartialEq + std::fmt::Debug,
{
    let limit = DEFAULT_MAX_FRAME_LENGTH;

    // One push with everything, then end of stream.
    let mut whole = MessageDecoder::<M>::new(limit);
    let whole_result = whole.push(data).and_then(|msgs| whole.end().map(|()| msgs));
    match &whole_result {
        Ok(msgs) => {
            for m in msgs {
                check_message_roundtrip(m, limit);
            }
        }
        Err(e) => {
            let _ = e.to_string();
            assert!(
                matches!(whole.push(&[]), Err(DecodeError::Failed { .. })),
                "a failed decoder must stay failed"
            );
        }
    }

    // The same stream in chunks: the same messages, and an error exactly when one-shot errs.
    // The same error too, except that one push checks every header before any payload (as
    // upstream does with one chunk): a framing error there may be a bad payload, earlier in
    // the stream, for the chunked decoder.
    let mut chunked = MessageDecoder::<M>::new(limit);
    let mut chunked_msgs = Vec::new();
    let mut chunked_err = None;
    let step = 1 + data.len() % 11;
    for chunk in data.chunks(step) {
        match chunked.push(chunk) {
            Ok(msgs) => chunked_msgs.extend(msgs),
            Err(e) => {
                chunked_err = Some(e);
                break;
            }
        }
    }
    if chunked_err.is_none() {
        chunked_err = chunked.end().err();
    }
    match (&whole_result, chunked_err.clone()) {
        (Ok(msgs), None) => assert_eq!(msgs, &chunked_msgs, "chunked messages differ"),
        (Err(e @ DecodeError::Frame { .. }), Some(c)) => assert!(
            &c == e
                || matches!(
                    c,
                    DecodeError::Cbor { .. } | DecodeError::InvalidMessage { .. }
                ),
            "chunked error {c:?} for one-shot {e:?}"
        ),
        (Err(e), Some(c)) => assert_eq!(e, &c, "chunked error differs"),
        (w, c) => panic!("one-shot {w:?} but chunked error {c:?}"),
    }

    // Read in place (the connections' loop) in the same chunks: exactly what pushing gives.
    let (in_place_msgs, in_place_err) = read_in_place::<M>(data, step, limit);
    assert_eq!(
        (&in_place_msgs, &in_place_err),
        (&chunked_msgs, &chunked_err),
        "reading in place differs from pushing the same chunks"
    );

    // The bytes after a (presumed) header as one payload.
    if let Some(payload) = data.get(FRAME_HEADER_LENGTH..) {
        match decode_payload::<M>(payload, limit) {
            Ok(m) => {
                assert!(
                    cbor::decode_value(payload, &CborLimits::for_frame_length(limit)).is_ok(),
                    "a message payload must be a valid CBOR value"
                );
                check_message_roundtrip(&m, limit);
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
}

fn check_message_roundtrip<M>(m: &M, limit: u32)
where
    M: WireMessage + PartialEq + std::fmt::Debug,
{
    // Canonical re-encoding is never longer than the accepted input, so it fits the limit.
    let frame = encode_frame(m, limit).expect("a decoded message re-encodes within its limit");
    let again: M =
        decode_payload(&frame[FRAME_HEADER_LENGTH..], limit).expect("a re-encoded message decodes");
    assert_eq!(&again, m, "encode/decode changed the message");
    let frame2 = encode_frame(&again, limit).expect("re-encodes");
    assert_eq!(frame, frame2, "encoding is not a fixpoint");
    let via_value: M = from_value(to_value(m)).expect("to_value output parses");
    assert_eq!(&via_value, m, "to_value/from_value changed the message");
}

/// Target `cbor_value`: bytes into [`cbor::decode_value`] under the default limits.
///
/// If accepted: the value re-encodes; that encoding decodes to an equal value and re-encodes
/// to itself (canonical fixpoint); the re-encoding equals the input exactly when an
/// independent checker ([`is_canonical`]) says the input was canonical. Tight limits may only
/// reject more, never accept something else. Rejections never panic.
pub fn cbor_value(data: &[u8]) {
    let limits = CborLimits::default();
    let tight = CborLimits {
        max_byte_length: 64,
        max_container_length: 4,
        max_depth: 3,
        max_total_items: 16,
    };
    let tight_result = cbor::decode_value(data, &tight);
    // `validate` reads past items without building them: it must judge exactly alike.
    assert_eq!(
        cbor::validate(data, &tight),
        tight_result.as_ref().map(drop).map_err(Clone::clone),
        "validate and decode_value disagree (tight limits)"
    );
    let whole_result = cbor::decode_value(data, &limits);
    assert_eq!(
        cbor::validate(data, &limits),
        whole_result.as_ref().map(drop).map_err(Clone::clone),
        "validate and decode_value disagree"
    );
    match whole_result {
        Ok(value) => {
            let bytes = cbor::to_vec(&value, &limits).expect("an accepted value re-encodes");
            assert!(bytes.len() <= data.len(), "re-encoding grew");
            let again = cbor::decode_value(&bytes, &limits).expect("re-encoding decodes");
            assert_eq!(again, value, "re-encoding decodes to a different value");
            let bytes2 = cbor::to_vec(&again, &limits).expect("re-encodes");
            assert_eq!(bytes2, bytes, "encoding is not a fixpoint");
            assert_eq!(
                is_canonical(data),
                bytes == data,
                "canonical checker and encoder disagree"
            );
            if let Ok(t) = tight_result {
                assert_eq!(t, value, "tight limits decoded a different value");
            }
        }
        Err(e) => {
            let _ = e.to_string();
            assert!(
                tight_result.is_err(),
                "tight limits accepted what the defaults reject"
            );
            if let ValueDecodeError::Cbor(c) = e {
                let _ = c.to_string();
            }
        }
    }
}

/// True when `bytes` (already accepted by the decoder) is in the form our encoder writes:
/// every head uses its shortest argument, and every float64 is non-integral or negative zero.
///
/// Written independently of the encoder, without recursion, so the `cbor_value` target can
/// compare the two. Returns `false` for anything outside the profile.
pub fn is_canonical(bytes: &[u8]) -> bool {
    let mut pos = 0usize;
    let mut pending: u64 = 1;
    while pending > 0 {
        pending -= 1;
        let Some(&head) = bytes.get(pos) else {
            return false;
        };
        pos += 1;
        let (major, ai) = (head >> 5, head & 0x1f);
        if major == 7 {
            match ai {
                20..=22 => continue,
                27 => {
                    let Some(raw) = bytes.get(pos..pos + 8) else {
                        return false;
                    };
                    let mut b = [0u8; 8];
                    b.copy_from_slice(raw);
                    let f = f64::from_be_bytes(b);
                    pos += 8;
                    let negative_zero = f == 0.0 && f.is_sign_negative();
                    if f.fract() == 0.0 && !negative_zero {
                        return false;
                    }
                    continue;
                }
                _ => return false,
            }
        }
        let width = match ai {
            0..=23 => 0,
            24 => 1,
            25 => 2,
            26 => 4,
            27 => 8,
            _ => return false,
        };
        let Some(raw) = bytes.get(pos..pos + width) else {
            return false;
        };
        pos += width;
        let arg = if width == 0 {
            u64::from(ai)
        } else {
            raw.iter().fold(0u64, |acc, b| acc << 8 | u64::from(*b))
        };
        let minimal = match width {
            0 => true,
            1 => arg >= 24,
            2 => arg > 0xff,
            4 => arg > 0xffff,
            _ => arg > 0xffff_ffff,
        };
        if !minimal {
            return false;
        }
        match major {
            0 | 1 => {}
            3 => {
                let Ok(n) = usize::try_from(arg) else {
                    return false;
                };
                pos = match pos.checked_add(n) {
                    Some(p) if p <= bytes.len() => p,
                    _ => return false,
                };
            }
            4 => pending = pending.saturating_add(arg),
            5 => pending = pending.saturating_add(arg.saturating_mul(2)),
            _ => return false,
        }
    }
    pos == bytes.len()
}

// ---------------------------------------------------------------------------------------------
// Chord: wire ops and the tracker.

/// Target `wire_ops`: a stream of wire-op batches through [`OpDecoder`], each decoded batch
/// applied to a state.
///
/// Input: if byte 0 is even, the rest is CBOR for `[initial, batch, batch, …]` (each batch an
/// array of wire ops); if odd, the rest drives a small generator ([`ValueSource`]) that builds
/// an initial state and batches of plausible and broken wire ops. Checks, batch by batch until
/// the first decode or apply error: no panic; every decoded op re-parses from its tuple form;
/// a lockstep [`OpEncoder`]/[`OpDecoder`] pair round-trips the decoded batch; [`apply`](crate::chord::apply) and
/// [`apply_owned`] agree on the result and the error.
///
/// [`apply_owned`]: crate::chord::apply_owned
pub fn wire_ops(data: &[u8]) {
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    let (initial, batches) = if mode & 1 == 0 {
        let Ok(Value::Array(mut items)) = cbor::decode_value(rest, &CborLimits::default()) else {
            return;
        };
        if items.is_empty() {
            return;
        }
        let initial = items.remove(0);
        (initial, items)
    } else {
        let mut src = ValueSource::new(rest);
        let initial = src.value(0);
        let mut batches = Vec::new();
        while !src.is_empty() && batches.len() < 8 {
            let n = src.below(6);
            batches.push(Value::Array((0..n).map(|_| src.wire_op()).collect()));
        }
        (initial, batches)
    };

    let mut decoder = OpDecoder::new();
    let mut encoder = OpEncoder::new();
    let mut redecoder = OpDecoder::new();
    let mut by_value = hydrated_state_decoder();
    let mut by_bytes = by_value.clone();
    let mut state = initial.clone();
    let mut state_owned = initial;
    for batch in &batches {
        update_bytes_agree(&mut by_value, &mut by_bytes, batch);
        let Value::Array(wire) = batch else {
            return;
        };
        let ops = match decoder.decode(wire) {
            Ok(ops) => ops,
            Err(e) => {
                let _ = e.to_string();
                return;
            }
        };
        for op in &ops {
            assert_eq!(
                Op::parse(&op.to_value()).as_ref(),
                Ok(op),
                "decoded op does not re-parse from its tuple"
            );
        }
        let rewire = encoder.encode(&ops).expect("decoded ops re-encode");
        let back = redecoder
            .decode(&rewire)
            .expect("re-encoded wire ops decode");
        assert_eq!(back, ops, "encode/decode changed the batch");
        let borrowed = chord::apply(&mut state, &ops);
        let owned = chord::apply_owned(&mut state_owned, ops);
        assert_eq!(borrowed, owned, "apply and apply_owned disagree");
        assert_eq!(
            state, state_owned,
            "apply and apply_owned built different values"
        );
        if let Err(e) = borrowed {
            let _ = e.to_string();
            return;
        }
    }
}

/// A client-side decoder hydrated with one singleton state `m` (value `null`).
fn hydrated_state_decoder() -> chord::StateDecoder {
    let mut decoder = chord::StateDecoder::new();
    let snapshot = Value::from_json(
        r#"{"serviceId":"f","mode":"singleton","instances":[{"members":[{"name":"m","kind":"state","sequence":0,"ops":[["r",null]]}]}]}"#,
    )
    .expect("literal");
    decoder
        .decode_snapshot(&snapshot)
        .expect("a valid wire snapshot decodes");
    decoder
}

/// `batch` as the ops of a `state` update, decoded from its `Value` and from its bytes: the
/// results (error text included) and the decoders afterwards must be the same.
fn update_bytes_agree(
    by_value: &mut chord::StateDecoder,
    by_bytes: &mut chord::StateDecoder,
    batch: &Value,
) {
    let mut update = crate::Map::new();
    update.insert("type", Value::from("state"));
    update.insert("member", Value::from("m"));
    update.insert("sequence", Value::from(1u8));
    update.insert("ops", batch.clone());
    let update = Value::Map(update);
    let Ok(bytes) = cbor::to_vec(&update, &CborLimits::default()) else {
        return;
    };
    let expected = by_value.decode_update(&update).map_err(|e| e.to_string());
    let got = by_bytes
        .decode_update_cbor(&bytes)
        .map_err(|e| e.to_string());
    assert_eq!(
        got, expected,
        "decode_update_cbor and decode_update disagree"
    );
    assert_eq!(by_bytes, by_value, "the two decoders' states differ");
}

/// Target `tracker`: the diff/apply law on two related values.
///
/// Input: if byte 0 is even, the rest is CBOR for `[old, new]`; if odd, the rest drives a
/// generator that builds `old` and then `new` as a mutation of it (appends, front trims, array
/// growth and splices, key insertions, deletions and reorders, type changes). Checks:
/// `apply(old, diff(old, new)) == new` (key order included); `diff(v, v)` is empty; the batch
/// survives the wire (an [`OpEncoder`]/[`OpDecoder`] pair returns it unchanged), and so does
/// the way back (`diff(new, old)` through the same pair, applied, gives `old`).
pub fn tracker(data: &[u8]) {
    let Some((mode, rest)) = data.split_first() else {
        return;
    };
    let (old, new) = if mode & 1 == 0 {
        let Ok(Value::Array(items)) = cbor::decode_value(rest, &CborLimits::default()) else {
            return;
        };
        let [old, new] = <[Value; 2]>::try_from(items).unwrap_or([Value::Null, Value::Null]);
        (old, new)
    } else {
        let mut src = ValueSource::new(rest);
        let old = src.value(0);
        let new = src.mutate(&old, 0);
        (old, new)
    };

    // Equal values produce nothing, maps with reserved keys included (seed
    // `tracker/reserved-key`).
    for v in [&old, &new] {
        assert!(chord::diff(v, v).is_empty(), "diff(v, v) is not empty");
    }
    let mut encoder = OpEncoder::new();
    let mut decoder = OpDecoder::new();
    let mut value = old.clone();
    for target in [&new, &old] {
        let ops = chord::diff(&value, target);
        let mut applied = value.clone();
        chord::apply(&mut applied, &ops).expect("diff output applies");
        assert_eq!(&applied, target, "apply(a, diff(a, b)) != b");
        let wire = encoder.encode(&ops).expect("diff output encodes");
        let back = decoder.decode(&wire).expect("encoded diff decodes");
        assert_eq!(back, ops, "diff batch changed on the wire");
        chord::apply_owned(&mut value, back).expect("decoded diff applies");
        assert_eq!(&value, target, "decoded diff led elsewhere");
    }
}

/// Bytes-driven builder of values and wire ops for the chord targets. Reads past the end as
/// zeros, so every input yields something; sizes and depth are kept small.
#[derive(Debug)]
pub struct ValueSource<'a> {
    data: &'a [u8],
    budget: u32,
}

const KEYS: &[&str] = &[
    "a",
    "b",
    "c",
    "text",
    "xs",
    "0",
    "1",
    "",
    "__proto__",
    "constructor",
    "prototype",
    "é",
];
const PIECES: &[&str] = &[
    "", "a", "b", "ab", "hello ", "world", "é", "😀", "\u{0}", "abcdefgh", "defghxyz", "x",
];

impl<'a> ValueSource<'a> {
    /// A source over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, budget: 48 }
    }

    /// True once every byte has been used.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte (0 past the end).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    /// A number in `0..n` (`n` ≥ 1).
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }

    fn pick<'s>(&mut self, list: &[&'s str]) -> &'s str {
        list[self.below(list.len())]
    }

    fn text(&mut self) -> String {
        (0..self.below(4)).map(|_| self.pick(PIECES)).collect()
    }

    fn small_int(&mut self) -> Value {
        Value::from(i32::from(self.byte()) - 64)
    }

    /// A value of bounded depth and size.
    pub fn value(&mut self, depth: u32) -> Value {
        if self.is_empty() || self.budget == 0 {
            return Value::Null;
        }
        self.budget -= 1;
        let containers = depth < 5;
        match self.below(10) {
            0 => Value::Null,
            1 => Value::Bool(self.byte() & 1 == 1),
            2 => self.small_int(),
            3 => {
                let f = [0.5, -0.0, 1e300, -2.25, 0.1][self.below(5)];
                Value::Number(crate::Number::from_f64(f).unwrap_or(crate::Number::from(0u8)))
            }
            4 | 5 => Value::String(self.text()),
            6 | 7 if containers => {
                let n = self.below(5);
                Value::Array((0..n).map(|_| self.value(depth + 1)).collect())
            }
            8 | 9 if containers => {
                let n = self.below(5);
                let mut map = crate::Map::new();
                for _ in 0..n {
                    let k = self.pick(KEYS);
                    let v = self.value(depth + 1);
                    map.insert(k, v);
                }
                Value::Map(map)
            }
            _ => Value::String(self.text()),
        }
    }

    /// A value derived from `v` by a few typical edits.
    pub fn mutate(&mut self, v: &Value, depth: u32) -> Value {
        let choice = self.below(8);
        match (choice, v) {
            (0, _) => v.clone(),
            (1, _) => self.value(depth),
            (2, Value::String(s)) => Value::String(format!("{s}{}", self.text())),
            (3, Value::String(s)) => {
                let skip = self.below(s.chars().count() + 1);
                let kept: String = s.chars().skip(skip).collect();
                Value::String(format!("{kept}{}", self.text()))
            }
            (4, Value::String(s)) => {
                let keep = self.below(s.chars().count() + 1);
                let kept: String = s.chars().take(keep).collect();
                Value::String(format!("{kept}{}", self.text()))
            }
            (2, Value::Array(a)) => {
                let mut a = a.clone();
                for _ in 0..=self.below(3) {
                    a.push(self.value(depth + 1));
                }
                Value::Array(a)
            }
            (3, Value::Array(a)) if !a.is_empty() => {
                let mut a = a.clone();
                let i = self.below(a.len());
                let n = self.below(a.len() - i + 1);
                let insert: Vec<Value> =
                    (0..self.below(3)).map(|_| self.value(depth + 1)).collect();
                a.splice(i..i + n, insert);
                Value::Array(a)
            }
            (4, Value::Array(a)) if !a.is_empty() => {
                let mut a = a.clone();
                let k = self.below(a.len());
                if self.byte() & 1 == 0 {
                    a.rotate_left(k);
                } else {
                    a.reverse();
                }
                Value::Array(a)
            }
            (2, Value::Map(m)) => {
                let mut m = m.clone();
                let k = self.pick(KEYS);
                let v = self.value(depth + 1);
                m.insert(k, v);
                Value::Map(m)
            }
            (3, Value::Map(m)) if !m.is_empty() => {
                let mut m = m.clone();
                let k = m.keys().nth(self.below(m.len())).map(str::to_owned);
                if let Some(k) = k {
                    let moved = m.remove(&k);
                    // Sometimes re-add the key at the end: a reorder.
                    if let Some(v) = moved.filter(|_| self.byte() & 1 == 1) {
                        m.insert(k, v);
                    }
                }
                Value::Map(m)
            }
            (_, Value::Array(a)) => {
                Value::Array(a.iter().map(|x| self.mutate(x, depth + 1)).collect())
            }
            (_, Value::Map(m)) => Value::Map(
                m.iter()
                    .map(|(k, x)| (k.to_owned(), self.mutate(x, depth + 1)))
                    .collect(),
            ),
            _ => v.clone(),
        }
    }

    fn path(&mut self) -> Value {
        let n = self.below(4);
        Value::Array(
            (0..n)
                .map(|_| {
                    if self.byte() & 1 == 0 {
                        Value::from(self.pick(KEYS))
                    } else {
                        Value::from(self.byte() % 4)
                    }
                })
                .collect(),
        )
    }

    /// A wire-op tuple: mostly well-formed (inline path, `#` id, id reference or short form),
    /// sometimes with the wrong arity or operand types.
    pub fn wire_op(&mut self) -> Value {
        let verb = ["r", "s", "d", "a", "t", "p", "m", "#", "x"][self.below(9)];
        let mut tuple = vec![Value::from(verb)];
        if verb == "#" {
            tuple.push(Value::from(self.byte() % 4));
            tuple.push(self.path());
            return Value::Array(tuple);
        }
        if verb != "r" {
            match self.below(4) {
                0 | 1 => tuple.push(self.path()),
                2 => tuple.push(Value::from(self.byte() % 4)),
                _ => {} // short form
            }
        }
        match verb {
            "r" | "s" => tuple.push(self.value(1)),
            "a" => tuple.push(Value::String(self.text())),
            "t" => tuple.push(self.small_int()),
            "p" => {
                tuple.push(Value::from(self.byte() % 6));
                tuple.push(Value::from(self.byte() % 4));
                let n = self.below(3);
                tuple.push(Value::Array((0..n).map(|_| self.value(2)).collect()));
            }
            "m" => {
                let n = self.below(5);
                let mut perm: Vec<Value> = (0..n).map(|i| Value::from(i as u32)).collect();
                if n > 0 {
                    let k = self.below(n);
                    perm.rotate_left(k);
                }
                if self.byte().is_multiple_of(8) {
                    perm.push(Value::from(0u8));
                }
                tuple.push(Value::Array(perm));
            }
            _ => {}
        }
        // Occasionally an extra operand (wrong arity).
        if self.byte().is_multiple_of(16) {
            tuple.push(Value::Null);
        }
        Value::Array(tuple)
    }
}

/// A target's committed seed directory and the generator that produces its seeds: hand-made
/// inputs plus deterministic pseudo-random ones. Replay tests in every crate use it, so seeds
/// are replayed on stable `cargo test` the same way everywhere.
#[derive(Debug, Clone, Copy)]
pub struct SeedSet {
    /// The target's name (its directory under `fuzz/seeds/`).
    pub target: &'static str,
    /// Hand-made seeds, written as `hand-<name>`.
    pub hand: &'static [(&'static str, &'static [u8])],
    /// How many pseudo-random seeds (`random-NN`).
    pub random_count: usize,
    /// Length of the first random seed (each next one is 7 bytes longer).
    pub random_len: usize,
    /// Distinguishes one target's random seeds from another's.
    pub salt: u64,
}

impl SeedSet {
    /// `fuzz/seeds/<target>` relative to a crate's manifest directory.
    pub fn dir(&self, manifest_dir: &str) -> std::path::PathBuf {
        std::path::Path::new(manifest_dir)
            .join("../fuzz/seeds")
            .join(self.target)
    }

    /// Every generated seed, by file name (xorshift, so no randomness crate is needed).
    pub fn generate(&self) -> Vec<(String, Vec<u8>)> {
        let mut seeds: Vec<(String, Vec<u8>)> = self
            .hand
            .iter()
            .map(|(name, bytes)| (format!("hand-{name}"), bytes.to_vec()))
            .collect();
        let mut x = 0x9e37_79b9_7f4a_7c15_u64 ^ self.salt;
        for i in 0..self.random_count {
            let bytes = (0..self.random_len + i * 7)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x.to_be_bytes()[4]
                })
                .collect();
            seeds.push((format!("random-{i:02}"), bytes));
        }
        seeds
    }

    /// Runs `body` on every committed seed; returns how many there were.
    ///
    /// # Panics
    /// When the directory is missing or unreadable (a test harness helper).
    pub fn replay(&self, manifest_dir: &str, body: impl Fn(&[u8])) -> usize {
        let mut n = 0;
        let entries = std::fs::read_dir(self.dir(manifest_dir)).expect("the seed directory exists");
        for entry in entries {
            let path = entry.expect("readable seed directory").path();
            let bytes = std::fs::read(&path).expect("readable seed");
            body(&bytes);
            n += 1;
        }
        n
    }

    /// Runs `body` on every generated seed and checks each is committed unchanged.
    ///
    /// # Panics
    /// On a missing or stale seed (regenerate with [`SeedSet::write`]).
    pub fn check_committed(&self, manifest_dir: &str, body: impl Fn(&[u8])) {
        for (name, bytes) in self.generate() {
            body(&bytes);
            let committed = std::fs::read(self.dir(manifest_dir).join(&name))
                .unwrap_or_else(|_| panic!("seed {name} is not committed; regenerate the seeds"));
            assert_eq!(
                committed, bytes,
                "seed {name} is stale; regenerate the seeds"
            );
        }
    }

    /// Writes every generated seed (never deletes files).
    ///
    /// # Panics
    /// When the directory cannot be written.
    pub fn write(&self, manifest_dir: &str) {
        let dir = self.dir(manifest_dir);
        std::fs::create_dir_all(&dir).expect("create the seed directory");
        for (name, bytes) in self.generate() {
            std::fs::write(dir.join(name), bytes).expect("write a seed");
        }
    }
}
