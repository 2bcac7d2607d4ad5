//! Differential tests: the in-place envelope decoder must agree exactly (message or error
//! text) with the reference path that decodes a `Value` first and then parses the envelope;
//! so must the client's frame decoder, which leaves updates encoded, and `cbor::validate`,
//! which reads past items without building them.

#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use baton_protocol::cbor::{decode_value, to_vec, validate};
use baton_protocol::codec::{WireMessage, decode_payload_via_value};
use baton_protocol::limits::CborLimits;
use baton_protocol::{
    ClientMessage, Map, ServerMessage, Value, decode_payload, decode_server_frame,
};
use bytes::Bytes;
use proptest::prelude::*;

fn agree<M: WireMessage + PartialEq + std::fmt::Debug>(bytes: &[u8], max: u32) {
    let fast = decode_payload::<M>(bytes, max).map_err(|e| e.to_string());
    let slow = decode_payload_via_value::<M>(bytes, max).map_err(|e| e.to_string());
    assert_eq!(fast, slow, "payload {bytes:02x?}");
}

/// The client's frame decoder against the reference, and `validate` against `decode_value`.
fn frame_and_validate_agree(bytes: &[u8], max: u32) {
    let framed = decode_server_frame(Bytes::copy_from_slice(bytes), max)
        .map(|frame| frame.into_message().unwrap())
        .map_err(|e| e.to_string());
    let reference =
        decode_payload_via_value::<ServerMessage>(bytes, max).map_err(|e| e.to_string());
    assert_eq!(framed, reference, "payload {bytes:02x?}");
    let limits = CborLimits::for_frame_length(max);
    assert_eq!(
        validate(bytes, &limits).map_err(|e| e.to_string()),
        decode_value(bytes, &limits)
            .map(drop)
            .map_err(|e| e.to_string()),
        "payload {bytes:02x?}"
    );
}

fn both(bytes: &[u8]) {
    agree::<ClientMessage>(bytes, u32::MAX);
    agree::<ServerMessage>(bytes, u32::MAX);
    frame_and_validate_agree(bytes, u32::MAX);
    // A tight limit exercises the length checks on both paths.
    agree::<ClientMessage>(bytes, 16);
    agree::<ServerMessage>(bytes, 16);
    frame_and_validate_agree(bytes, 16);
}

const UUID: &str = "00000000-0000-4000-8000-000000000001";

fn pick(options: Vec<Value>) -> impl Strategy<Value = Value> {
    prop::sample::select(options)
}

fn json(s: &str) -> Value {
    Value::from_json(s).unwrap()
}

/// Values an envelope field might (wrongly or rightly) hold.
fn field_value() -> impl Strategy<Value = Value> {
    pick(vec![
        Value::Null,
        Value::Bool(true),
        Value::Bool(false),
        Value::from(0u8),
        Value::from(8u8),
        Value::from(7u8),
        json("-1"),
        json("8.5"),
        Value::from(""),
        Value::from("request-1"),
        Value::from("8"),
        Value::from(UUID),
        Value::from("00000000-0000-4000-8000-00000000000A"),
        json(&format!(r#"{{"serverId":"{UUID}"}}"#)),
        json(&format!(
            r#"{{"serverId":"{UUID}","sessionId":"s","attachmentId":"a"}}"#
        )),
        json(&format!(r#"{{"serverId":"{UUID}","sessionId":"s"}}"#)),
        json(&format!(
            r#"{{"serverId":"{UUID}","sessionId":"","attachmentId":"a"}}"#
        )),
        json(&format!(r#"{{"serverId":"{UUID}","extra":1}}"#)),
        json(r#"{"code":"busy","message":"m"}"#),
        json(r#"{"code":"","message":"m"}"#),
        json(r#"{"code":"busy"}"#),
        json(r#"{"serviceId":"pi.models","member":"list","args":[]}"#),
        json("[]"),
        json("{}"),
    ])
}

fn type_value() -> impl Strategy<Value = Value> {
    pick(
        [
            "hello",
            "request",
            "cancel",
            "hello_error",
            "response",
            "service_update",
            "attachment",
            "goodbye",
        ]
        .into_iter()
        .map(Value::from)
        .collect(),
    )
}

const KEYS: &[&str] = &[
    "version",
    "id",
    "target",
    "call",
    "serverId",
    "error",
    "ok",
    "result",
    "subscriptionId",
    "update",
    "attachment",
    "extra",
];

/// Envelope-shaped maps: a type (usually first) plus a random subset of known keys.
fn envelope() -> impl Strategy<Value = Value> {
    (
        prop::option::of(type_value()),
        any::<bool>(),
        prop::collection::vec((prop::sample::select(KEYS), field_value()), 0..6),
    )
        .prop_map(|(ty, type_last, fields)| {
            let mut m = Map::new();
            if let (Some(t), false) = (&ty, type_last) {
                m.insert("type", t.clone());
            }
            for (k, v) in fields {
                m.insert(k, v);
            }
            if let (Some(t), true) = (ty, type_last) {
                m.insert("type", t);
            }
            Value::Map(m)
        })
}

/// Every accepted upstream message, as a starting point for near-valid edits.
fn templates() -> Vec<Value> {
    let text = std::fs::read_to_string(format!(
        "{}/tests/data/accepted.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let doc = Value::from_json(&text).unwrap();
    doc.as_map()
        .unwrap()
        .iter()
        .flat_map(|(_, list)| list.as_array().unwrap().clone())
        .map(|t| t.as_array().unwrap()[1].clone())
        .collect()
}

#[derive(Debug, Clone)]
enum Edit {
    Remove(prop::sample::Index),
    Add(&'static str, Value),
    Replace(prop::sample::Index, Value),
}

fn edit() -> impl Strategy<Value = Edit> {
    let keys: Vec<&'static str> = KEYS.iter().copied().chain(["type"]).collect();
    prop_oneof![
        any::<prop::sample::Index>().prop_map(Edit::Remove),
        (
            prop::sample::select(keys),
            prop_oneof![field_value(), type_value()]
        )
            .prop_map(|(k, v)| Edit::Add(k, v)),
        (
            any::<prop::sample::Index>(),
            prop_oneof![field_value(), type_value()]
        )
            .prop_map(|(i, v)| Edit::Replace(i, v)),
    ]
}

/// A valid message with a few structural edits: most results sit right at the edge of
/// validity, where the two decoders could disagree.
fn near_valid() -> impl Strategy<Value = Value> {
    let templates = templates();
    (
        prop::sample::select(templates),
        prop::collection::vec(edit(), 0..3),
    )
        .prop_map(|(mut v, edits)| {
            let Value::Map(m) = &mut v else { return v };
            for e in edits {
                let keys: Vec<String> = m.keys().map(str::to_owned).collect();
                match e {
                    Edit::Remove(i) if !keys.is_empty() => {
                        m.remove(&keys[i.index(keys.len())]);
                    }
                    Edit::Add(k, val) => {
                        m.insert(k, val);
                    }
                    Edit::Replace(i, val) if !keys.is_empty() => {
                        m.insert(keys[i.index(keys.len())].clone(), val);
                    }
                    Edit::Remove(_) | Edit::Replace(..) => {}
                }
            }
            v
        })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
    Insert(prop::sample::Index, u8),
}

fn mutate(mut bytes: Vec<u8>, m: &Mutation) -> Vec<u8> {
    match m {
        Mutation::Flip(at, x) if !bytes.is_empty() => {
            let i = at.index(bytes.len());
            bytes[i] ^= x | 1;
        }
        Mutation::Truncate(at) => bytes.truncate(at.index(bytes.len() + 1)),
        Mutation::Insert(at, b) => bytes.insert(at.index(bytes.len() + 1), *b),
        Mutation::Flip(..) => {}
    }
    bytes
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, x)| Mutation::Flip(i, x)),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn both_decoders_agree_on_envelope_shaped_maps(v in envelope()) {
        both(&to_vec(&v, &CborLimits::default()).unwrap());
    }

    #[test]
    fn both_decoders_agree_on_near_valid_messages(v in near_valid()) {
        both(&to_vec(&v, &CborLimits::default()).unwrap());
    }

    #[test]
    fn both_decoders_agree_on_mutated_messages(v in near_valid(), ms in prop::collection::vec(mutation(), 1..3)) {
        let mut bytes = to_vec(&v, &CborLimits::default()).unwrap();
        for m in &ms {
            bytes = mutate(bytes, m);
        }
        both(&bytes);
    }

    #[test]
    fn both_decoders_agree_on_mutated_envelopes(v in envelope(), ms in prop::collection::vec(mutation(), 1..4)) {
        let mut bytes = to_vec(&v, &CborLimits::default()).unwrap();
        for m in &ms {
            bytes = mutate(bytes, m);
        }
        both(&bytes);
    }

    #[test]
    fn both_decoders_agree_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
        both(&bytes);
    }
}

#[test]
fn both_decoders_agree_on_every_vector_and_reject() {
    for file in ["accepted.json", "rejects.json"] {
        let text =
            std::fs::read_to_string(format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR")))
                .unwrap();
        let doc = Value::from_json(&text).unwrap();
        let mut n = 0;
        for (_, list) in doc.as_map().unwrap().iter() {
            for t in list.as_array().unwrap() {
                let hex = t.as_array().unwrap()[2].as_str().unwrap();
                let bytes: Vec<u8> = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect();
                both(&bytes[4..]);
                n += 1;
            }
        }
        assert!(n >= 29);
    }
}

#[test]
fn duplicate_envelope_keys_are_cbor_errors_on_both_paths() {
    // {"type":"hello","type":"hello"} and {"x":1,"x":1}: duplicates win over schema errors.
    for hex in [
        "a2647479706565686c6c6f647479706565686c6c6f",
        "a2617801617801",
    ] {
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        both(&bytes);
    }
}

#[test]
fn integers_at_the_edge_of_the_safe_range_are_judged_alike_by_every_reader() {
    let edges: [&[u8]; 6] = [
        &[0x1b, 0x00, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // 2^53 − 1
        &[0x1b, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00], // 2^53
        &[0x3b, 0x00, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe], // −(2^53 − 1)
        &[0x3b, 0x00, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // −2^53
        &[0x3b, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00], // −2^53 − 1
        &[0x81, 0x3b, 0x00, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], // [−2^53]
    ];
    for bytes in edges {
        both(bytes);
    }
    let limits = CborLimits::default();
    assert!(validate(edges[0], &limits).is_ok());
    assert!(validate(edges[3], &limits).is_err());
}

/// CBOR text head (short form) followed by `bytes`.
fn text(bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![0x60 | u8::try_from(bytes.len()).unwrap()];
    out.extend_from_slice(bytes);
    out
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

#[test]
fn invalid_utf8_where_the_envelope_matches_names_by_bytes_is_a_cbor_error_that_wins() {
    // Envelope keys, `type` tags and server ids are matched as raw bytes; anything that is not
    // one of the known names must still be checked as UTF-8 right there, before a later error.
    let ty = text(b"type");
    let bad_key = text(b"typ\xff");
    let bad_tag = text(b"hell\xff");
    let mut bad_uuid = b"00000000-0000-4000-8000-000000000001".to_vec();
    bad_uuid[35] = 0xff;
    let bad_uuid = [&[0x78, 36][..], &bad_uuid].concat();
    let target_bad_uuid = cat(&[&[0xa1], &text(b"serverId"), &bad_uuid]);
    let cases: Vec<Vec<u8>> = vec![
        // {"typ\xff": "hello"} and the same with a second entry cut off.
        cat(&[&[0xa1], &bad_key, &text(b"hello")]),
        cat(&[&[0xa2], &bad_key, &text(b"hello")]),
        // {"type": "hell\xff"}, whole and followed by a truncated entry.
        cat(&[&[0xa1], &ty, &bad_tag]),
        cat(&[&[0xa2], &ty, &bad_tag, &[0x62, b'i']]),
        // A request whose target's serverId has a bad last byte; then a server hello's.
        cat(&[
            &[0xa4],
            &ty,
            &text(b"request"),
            &text(b"id"),
            &text(b"r"),
            &text(b"target"),
            &target_bad_uuid,
            &text(b"call"),
        ]),
        cat(&[
            &[0xa3],
            &ty,
            &text(b"hello"),
            &text(b"version"),
            &[0x08],
            &text(b"serverId"),
            &bad_uuid,
        ]),
    ];
    for bytes in &cases {
        both(bytes);
        for err in [
            decode_payload::<ClientMessage>(bytes, u32::MAX).unwrap_err(),
            decode_payload::<ServerMessage>(bytes, u32::MAX).unwrap_err(),
        ] {
            assert!(
                err.to_string()
                    .ends_with("CBOR text string contains invalid UTF-8"),
                "{bytes:02x?}: {err}"
            );
        }
    }
}

#[test]
fn a_server_id_that_is_text_but_not_canonical_makes_the_message_invalid_on_both_paths() {
    let upper = r#"{"type":"request","id":"r","target":{"serverId":"0A000000-0000-4000-8000-000000000001"},"call":{}}"#;
    let hello = r#"{"type":"hello","version":8,"serverId":"00000000-0000-4000-8000-00000000000"}"#;
    for text in [upper, hello] {
        let bytes = to_vec(&json(text), &CborLimits::default()).unwrap();
        both(&bytes);
        let side = if text.contains("request") {
            decode_payload::<ClientMessage>(&bytes, u32::MAX).unwrap_err()
        } else {
            decode_payload::<ServerMessage>(&bytes, u32::MAX).unwrap_err()
        };
        assert!(side.to_string().ends_with("protocol message"), "{side}");
    }
}
