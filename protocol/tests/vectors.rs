//! Upstream byte vectors: accepted frames round-trip byte-exact, rejected frames are refused.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use baton_protocol::codec::{MessageDecoder, WireMessage};
use baton_protocol::{ClientMessage, ServerMessage, Value, encode_frame, from_value, to_value};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// `[name, value, hex]` triples of one list in a vector file.
/// Parsed with our own order-keeping [`Value`] so map key order survives.
fn vectors(file: &str, list: &str) -> Vec<(String, Value, String)> {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    let doc = Value::from_json(&text).unwrap();
    doc.as_map()
        .unwrap()
        .get(list)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let t = t.as_array().unwrap();
            (
                t[0].as_str().unwrap().to_owned(),
                t[1].clone(),
                t[2].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn value_of(json: &Value) -> Value {
    json.clone()
}

fn decode_one<M: WireMessage>(frame: &[u8]) -> Result<M, String> {
    let mut d = MessageDecoder::<M>::default();
    let mut msgs = d.push(frame).map_err(|e| e.to_string())?;
    d.end().map_err(|e| e.to_string())?;
    assert_eq!(msgs.len(), 1, "exactly one message per vector frame");
    Ok(msgs.remove(0))
}

fn check_accepted<M: WireMessage + std::fmt::Debug + PartialEq>(list: &str) -> usize {
    let vs = vectors("accepted.json", list);
    for (name, json, hexed) in &vs {
        let frame = unhex(hexed);
        let decoded: M = decode_one(&frame).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Decode → value equals the upstream value, key order included.
        assert_eq!(to_value(&decoded), value_of(json), "{name}: decoded value");
        // Decode → encode reproduces the bytes.
        assert_eq!(
            hex(&encode_frame(&decoded, u32::MAX).unwrap()),
            *hexed,
            "{name}: re-encode"
        );
        // Value → message → encode reproduces the bytes too.
        let built: M = from_value(value_of(json)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(built, decoded, "{name}: built from value");
        assert_eq!(
            hex(&encode_frame(&built, u32::MAX).unwrap()),
            *hexed,
            "{name}: encode"
        );
    }
    vs.len()
}

fn check_rejected<M: WireMessage + std::fmt::Debug>(list: &str, side: &str) -> usize {
    let vs = vectors("rejects.json", list);
    for (name, _, hexed) in &vs {
        let frame = unhex(hexed);
        let mut d = MessageDecoder::<M>::default();
        let err = d.push(&frame).expect_err(&name.clone()).to_string();
        assert_eq!(err, format!("Invalid {side} protocol message"), "{name}");
        // Sticky afterwards.
        let again = d.push(&[]).unwrap_err().to_string();
        assert_eq!(
            again,
            format!("{side} message decoder has failed"),
            "{name}"
        );
    }
    vs.len()
}

#[test]
fn every_accepted_client_frame_round_trips_byte_exact() {
    assert_eq!(check_accepted::<ClientMessage>("client"), 13);
}

#[test]
fn every_accepted_server_frame_round_trips_byte_exact() {
    assert_eq!(check_accepted::<ServerMessage>("server"), 17);
}

#[test]
fn every_rejected_client_frame_is_refused_as_invalid_message() {
    assert_eq!(
        check_rejected::<ClientMessage>("clientRejects", "client"),
        23
    );
}

#[test]
fn every_rejected_server_frame_is_refused_as_invalid_message() {
    assert_eq!(
        check_rejected::<ServerMessage>("serverRejects", "server"),
        24
    );
}

#[test]
fn derived_flow_decodes_and_re_encodes_frame_by_frame() {
    let path = format!("{}/tests/data/derived.txt", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    let mut count = 0;
    for block in text.split("### ").skip(1) {
        let mut lines = block.lines();
        let title = lines.next().unwrap();
        let json = lines.next().unwrap();
        let hexed = lines.next().unwrap().trim();
        let frame = unhex(hexed);
        let value = Value::from_json(json).unwrap();
        let reencoded = if title.starts_with("C ") {
            let m: ClientMessage = decode_one(&frame).unwrap_or_else(|e| panic!("{title}: {e}"));
            assert_eq!(to_value(&m), value, "{title}");
            encode_frame(&m, u32::MAX).unwrap()
        } else {
            let m: ServerMessage = decode_one(&frame).unwrap_or_else(|e| panic!("{title}: {e}"));
            assert_eq!(to_value(&m), value, "{title}");
            encode_frame(&m, u32::MAX).unwrap()
        };
        assert_eq!(hex(&reencoded), hexed, "{title}");
        count += 1;
    }
    assert_eq!(count, 26);
}
