//! Property tests: encode→decode identity, split-point independence, canonical fixpoints,
//! and agreement with an independent CBOR decoder (ciborium) on everything we accept.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use baton_protocol::cbor::{decode_value, to_vec};
use baton_protocol::codec::{ClientMessageDecoder, ServerMessageDecoder};
use baton_protocol::limits::CborLimits;
use baton_protocol::{
    Cancel, ClientMessage, HelloVersion, Id, Map, Number, Outcome, Request, Response, ServerId,
    ServerMessage, ServiceUpdate, SessionTarget, Target, Value, WireError, encode_frame,
};
use proptest::prelude::*;

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(|i| Value::Number(Number::from_i64(i).unwrap())),
        any::<f64>()
            .prop_filter_map("finite and safe", |f| Number::from_f64(f).ok())
            .prop_map(Value::Number),
        ".{0,12}".prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-z]{0,4}", inner), 0..6)
                .prop_map(|kv| Value::Map(kv.into_iter().collect::<Map>())),
        ]
    })
}

fn id() -> impl Strategy<Value = Id> {
    ".{1,10}".prop_map(|s| Id::new(s).unwrap())
}

fn server_id() -> impl Strategy<Value = ServerId> {
    any::<[u8; 16]>().prop_map(ServerId::from_random_bytes)
}

fn session_target() -> impl Strategy<Value = SessionTarget> {
    (server_id(), id(), id()).prop_map(|(server_id, session_id, attachment_id)| SessionTarget {
        server_id,
        session_id,
        attachment_id,
    })
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![
        server_id().prop_map(Target::Server),
        session_target().prop_map(Target::Session)
    ]
}

fn client_message() -> impl Strategy<Value = ClientMessage> {
    prop_oneof![
        prop_oneof![
            (0u64..(1 << 53)).prop_map(|v| HelloVersion::new(v).unwrap()),
            Just(HelloVersion::NEGATIVE_ZERO),
        ]
        .prop_map(|version| ClientMessage::Hello { version }),
        (id(), target(), value()).prop_map(|(id, target, call)| ClientMessage::Request(Request {
            id,
            target,
            call
        })),
        (id(), target()).prop_map(|(id, target)| ClientMessage::Cancel(Cancel { id, target })),
    ]
}

fn wire_error() -> impl Strategy<Value = WireError> {
    (id(), ".{0,20}").prop_map(|(code, message)| WireError { code, message })
}

fn server_message() -> impl Strategy<Value = ServerMessage> {
    let outcome = prop_oneof![
        Just(Outcome::Void),
        value().prop_map(Outcome::Value),
        wire_error().prop_map(Outcome::Error),
    ];
    prop_oneof![
        server_id().prop_map(|server_id| ServerMessage::Hello { server_id }),
        wire_error().prop_map(ServerMessage::HelloError),
        (id(), outcome).prop_map(|(id, outcome)| ServerMessage::Response(Response { id, outcome })),
        (id(), value()).prop_map(|(subscription_id, update)| {
            ServerMessage::ServiceUpdate(ServiceUpdate {
                subscription_id,
                update,
            })
        }),
        prop::option::of(session_target()).prop_map(ServerMessage::Attachment),
    ]
}

/// Maps a ciborium value onto ours, or None where the profile and generic CBOR disagree.
fn from_ciborium(v: &ciborium::Value) -> Option<Value> {
    Some(match v {
        ciborium::Value::Null => Value::Null,
        ciborium::Value::Bool(b) => Value::Bool(*b),
        ciborium::Value::Integer(i) => Value::try_from(i64::try_from(i128::from(*i)).ok()?).ok()?,
        ciborium::Value::Float(f) => Value::try_from(*f).ok()?,
        ciborium::Value::Text(s) => Value::String(s.clone()),
        ciborium::Value::Array(a) => {
            Value::Array(a.iter().map(from_ciborium).collect::<Option<_>>()?)
        }
        ciborium::Value::Map(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                out.insert(k.as_text()?.to_owned(), from_ciborium(v)?);
            }
            Value::Map(out)
        }
        _ => return None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn client_messages_survive_encode_then_decode(msg in client_message()) {
        let frame = encode_frame(&msg, u32::MAX).unwrap();
        let mut d = ClientMessageDecoder::default();
        prop_assert_eq!(d.push(&frame).unwrap(), vec![msg]);
    }

    #[test]
    fn server_messages_survive_encode_then_decode(msg in server_message()) {
        let frame = encode_frame(&msg, u32::MAX).unwrap();
        let mut d = ServerMessageDecoder::default();
        prop_assert_eq!(d.push(&frame).unwrap(), vec![msg]);
    }

    #[test]
    fn any_split_of_a_two_frame_stream_decodes_the_same(
        a in server_message(), b in server_message(), split in any::<prop::sample::Index>()
    ) {
        let mut stream = encode_frame(&a, u32::MAX).unwrap().to_vec();
        stream.extend_from_slice(&encode_frame(&b, u32::MAX).unwrap());
        let at = split.index(stream.len() + 1);
        let mut d = ServerMessageDecoder::default();
        let mut got = d.push(&stream[..at]).unwrap();
        got.extend(d.push(&stream[at..]).unwrap());
        prop_assert_eq!(got, vec![a, b]);
        d.end().unwrap();
    }

    #[test]
    fn encoding_is_a_canonical_fixpoint(v in value()) {
        let limits = CborLimits::default();
        let bytes = to_vec(&v, &limits).unwrap();
        let back = decode_value(&bytes, &limits).unwrap();
        prop_assert_eq!(&back, &v);
        prop_assert_eq!(to_vec(&back, &limits).unwrap(), bytes);
    }

    #[test]
    fn an_independent_decoder_reads_our_bytes_as_the_same_value(v in value()) {
        let bytes = to_vec(&v, &CborLimits::default()).unwrap();
        let theirs: ciborium::Value = ciborium::from_reader(&bytes[..]).unwrap();
        prop_assert_eq!(from_ciborium(&theirs), Some(v));
    }

    #[test]
    fn whatever_we_accept_an_independent_decoder_reads_the_same(bytes in prop::collection::vec(any::<u8>(), 0..24)) {
        if let Ok(ours) = decode_value(&bytes, &CborLimits::default()) {
            let theirs: ciborium::Value = ciborium::from_reader(&bytes[..]).unwrap();
            prop_assert_eq!(from_ciborium(&theirs), Some(ours));
        }
    }

    #[test]
    fn json_text_round_trips_with_key_order(v in value()) {
        prop_assert_eq!(Value::from_json(&v.to_json()).unwrap(), v);
    }
}
