//! Message codecs: upstream "validated framed protocol APIs" behaviour.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use baton_protocol::codec::{ClientMessageDecoder, ServerMessageDecoder};
use baton_protocol::{
    ClientCodec, ClientMessage, Id, Request, ServerCodec, ServerId, ServerMessage, Target, Value,
    encode_frame,
};
use bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

fn server_id() -> ServerId {
    ServerId::parse("00000000-0000-4000-8000-000000000001").unwrap()
}

fn request(id: &str) -> ClientMessage {
    ClientMessage::Request(Request {
        id: Id::new(id).unwrap(),
        target: Target::Server(server_id()),
        call: Value::from_json(r#"{"serviceId":"pi.models","member":"list","args":[]}"#).unwrap(),
    })
}

#[test]
fn outbound_frames_over_the_limit_are_refused_before_writing() {
    let err = encode_frame(&ClientMessage::hello(), 8).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Unable to encode client protocol message: CBOR byte length exceeds configured limit of 8"
    );
    let mut codec = ClientCodec::new(8);
    let mut out = BytesMut::from(&b"keep"[..]);
    assert!(codec.encode(&ClientMessage::hello(), &mut out).is_err());
    assert_eq!(
        &out[..],
        b"keep",
        "a failed encode leaves the buffer as it was"
    );
}

#[test]
fn fragmented_and_coalesced_client_messages_decode_at_every_split() {
    let mut stream = encode_frame(&ClientMessage::hello(), u32::MAX)
        .unwrap()
        .to_vec();
    stream.extend_from_slice(&encode_frame(&request("request-1"), u32::MAX).unwrap());
    for split in 0..=stream.len() {
        let mut d = ClientMessageDecoder::default();
        let mut msgs = d.push(&stream[..split]).unwrap();
        msgs.extend(d.push(&stream[split..]).unwrap());
        assert_eq!(
            msgs,
            vec![ClientMessage::hello(), request("request-1")],
            "split {split}"
        );
        d.end().unwrap();
    }
}

#[test]
fn fragmented_server_messages_decode_byte_at_a_time() {
    let hello = ServerMessage::Hello {
        server_id: server_id(),
    };
    let stream = encode_frame(&hello, u32::MAX).unwrap();
    let mut d = ServerMessageDecoder::default();
    let mut got = Vec::new();
    for b in stream.iter() {
        got.extend(d.push(&[*b]).unwrap());
    }
    assert_eq!(got, vec![hello]);
}

#[test]
fn invalid_framed_input_fails_the_decoder_for_good() {
    let cases: [(&[u8], &str); 4] = [
        (
            &[0, 0, 0, 0],
            "Invalid client protocol frame: Truncated CBOR payload",
        ),
        (
            &[0, 0, 0, 1, 0xff],
            "Invalid client protocol frame: CBOR break marker is not supported",
        ),
        (
            &[0, 0, 0, 2, 0xc0, 0x00],
            "Invalid client protocol frame: CBOR tags are not supported",
        ),
        (&[0, 0, 0, 1, 0xa0], "Invalid client protocol message"),
    ];
    for (bytes, msg) in cases {
        let mut d = ClientMessageDecoder::default();
        assert_eq!(d.push(bytes).unwrap_err().to_string(), msg);
        assert_eq!(
            d.push(&[]).unwrap_err().to_string(),
            "client message decoder has failed"
        );
        assert_eq!(
            d.end().unwrap_err().to_string(),
            "client message decoder has failed"
        );
    }
}

#[test]
fn oversized_header_is_refused_with_the_upstream_server_message() {
    let mut d = ClientMessageDecoder::default();
    assert_eq!(
        d.push(&[0x01, 0x00, 0x00, 0x01]).unwrap_err().to_string(),
        "Invalid client protocol frame: Frame length 16777217 exceeds configured limit of 16777216"
    );
}

#[test]
fn a_chunk_with_a_good_frame_then_a_bad_one_yields_nothing() {
    let mut chunk = encode_frame(&ClientMessage::hello(), u32::MAX)
        .unwrap()
        .to_vec();
    chunk.extend_from_slice(&[0, 0, 0, 1, 0xff]);
    let mut d = ClientMessageDecoder::default();
    assert!(d.push(&chunk).is_err());
}

#[test]
fn truncated_final_frame_is_reported_at_end() {
    let mut d = ClientMessageDecoder::default();
    assert!(d.push(&[0, 0, 0, 2, 1]).unwrap().is_empty());
    assert_eq!(
        d.end().unwrap_err().to_string(),
        "Invalid client protocol framing: Truncated frame at end of stream"
    );
}

#[test]
fn tokio_codecs_pair_up_and_report_truncation_at_eof() {
    let mut server = ServerCodec::default();
    let mut client = ClientCodec::default();
    let mut wire = BytesMut::new();
    client.encode(request("request-9"), &mut wire).unwrap();
    assert_eq!(
        server.decode(&mut wire).unwrap(),
        Some(request("request-9"))
    );
    server
        .encode(&ServerMessage::Attachment(None), &mut wire)
        .unwrap();
    assert_eq!(
        client.decode(&mut wire).unwrap(),
        Some(ServerMessage::Attachment(None))
    );
    assert_eq!(client.decode_eof(&mut wire).unwrap(), None);

    let mut partial = BytesMut::from(&[0u8, 0, 0, 9, 1][..]);
    let mut fresh = ServerCodec::default();
    assert_eq!(fresh.decode(&mut partial).unwrap(), None);
    assert_eq!(
        fresh.decode_eof(&mut partial).unwrap_err().to_string(),
        "Invalid client protocol framing: Truncated frame at end of stream"
    );
}

#[test]
fn void_response_and_null_result_are_distinct_on_the_wire() {
    use baton_protocol::{Outcome, Response};
    let void = ServerMessage::Response(Response {
        id: Id::new("r").unwrap(),
        outcome: Outcome::Void,
    });
    let null = ServerMessage::Response(Response {
        id: Id::new("r").unwrap(),
        outcome: Outcome::Value(Value::Null),
    });
    let (a, b) = (
        encode_frame(&void, u32::MAX).unwrap(),
        encode_frame(&null, u32::MAX).unwrap(),
    );
    assert_ne!(a, b);
    assert!(b.ends_with(&[0xf6]));
    let mut d = ServerMessageDecoder::default();
    assert_eq!(d.push(&a).unwrap(), vec![void]);
    assert_eq!(d.push(&b).unwrap(), vec![null]);
}

#[test]
fn a_pre_encoded_update_frames_byte_identically_to_the_whole_message() {
    use baton_protocol::{ServiceUpdate, encode_service_update_frame, encode_update_payload};
    let update =
        Value::from_json(r#"{"type":"state","member":"state","sequence":3,"ops":[["s",0,3]]}"#)
            .unwrap();
    let sub = Id::new("service-1").unwrap();
    let whole = encode_frame(
        &ServerMessage::ServiceUpdate(ServiceUpdate {
            subscription_id: sub.clone(),
            update: update.clone(),
        }),
        u32::MAX,
    )
    .unwrap();
    let payload = encode_update_payload(&update, u32::MAX).unwrap();
    let mut shared = BytesMut::new();
    encode_service_update_frame(&sub, &payload, u32::MAX, &mut shared).unwrap();
    assert_eq!(&shared[..], &whole[..]);
    // The frame limit still applies to the assembled frame.
    let mut small = BytesMut::new();
    assert!(encode_service_update_frame(&sub, &payload, 16, &mut small).is_err());
    assert!(small.is_empty());
}

#[test]
fn a_pre_encoded_update_is_depth_checked_as_it_sits_inside_the_envelope() {
    use baton_protocol::encode_update_payload;
    // The root of the update is at depth 1 of the envelope: 63 more levels fit, 64 do not,
    // and the error names the envelope's limit, as upstream encoding the whole message.
    let nested = |levels: usize| {
        let mut v = Value::Null;
        for _ in 0..levels {
            v = Value::Array(vec![v]);
        }
        v
    };
    assert!(encode_update_payload(&nested(63), u32::MAX).is_ok());
    let err = encode_update_payload(&nested(64), u32::MAX).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("CBOR nesting depth exceeds configured limit of 64"),
        "{err}"
    );
    // The same value inside a whole message is refused at the envelope's limit too.
    let msg = ServerMessage::ServiceUpdate(baton_protocol::ServiceUpdate {
        subscription_id: Id::new("s").unwrap(),
        update: nested(64),
    });
    assert!(encode_frame(&msg, u32::MAX).is_err());
}

/// Upstream `ValidatedMessageDecoder.push`: the chunk's `FrameDecoder.push` splits (and
/// checks the header of) every frame before any payload is decoded.
const CBOR_ERROR_THEN_OVERSIZE_HEADER: [u8; 9] = [0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff];

#[test]
fn an_oversize_header_later_in_a_chunk_wins_over_a_cbor_error_earlier_in_it() {
    let mut d = ClientMessageDecoder::default();
    assert_eq!(
        d.push(&CBOR_ERROR_THEN_OVERSIZE_HEADER)
            .unwrap_err()
            .to_string(),
        "Invalid client protocol frame: Frame length 4294967295 exceeds configured limit of 16777216"
    );
    assert_eq!(
        d.push(&[]).unwrap_err().to_string(),
        "client message decoder has failed"
    );
    let mut d = ServerMessageDecoder::default();
    assert_eq!(
        d.push(&CBOR_ERROR_THEN_OVERSIZE_HEADER)
            .unwrap_err()
            .to_string(),
        "Invalid server protocol frame: Frame length 4294967295 exceeds configured limit of 16777216"
    );
}

#[test]
fn the_same_bytes_in_two_chunks_report_the_cbor_error_of_the_first() {
    let mut d = ClientMessageDecoder::default();
    assert_eq!(
        d.push(&CBOR_ERROR_THEN_OVERSIZE_HEADER[..5])
            .unwrap_err()
            .to_string(),
        "Invalid client protocol frame: CBOR break marker is not supported"
    );
    assert_eq!(
        d.push(&CBOR_ERROR_THEN_OVERSIZE_HEADER[5..])
            .unwrap_err()
            .to_string(),
        "client message decoder has failed"
    );
}

#[test]
fn an_oversize_header_in_a_chunk_yields_none_of_the_chunks_good_messages() {
    let mut chunk = encode_frame(&ClientMessage::hello(), u32::MAX)
        .unwrap()
        .to_vec();
    chunk.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    let mut d = ClientMessageDecoder::default();
    assert!(matches!(
        d.push(&chunk),
        Err(baton_protocol::DecodeError::Frame { .. })
    ));
}

#[test]
fn the_first_bad_payload_of_a_chunk_wins_over_later_ones() {
    // A break marker, then a tag: the break marker is reported.
    let chunk = [0, 0, 0, 1, 0xff, 0, 0, 0, 2, 0xc0, 0x00];
    let mut d = ClientMessageDecoder::default();
    assert_eq!(
        d.push(&chunk).unwrap_err().to_string(),
        "Invalid client protocol frame: CBOR break marker is not supported"
    );
}

#[test]
fn a_good_chunk_is_delivered_even_when_the_next_chunk_fails() {
    let hello = encode_frame(&ClientMessage::hello(), u32::MAX).unwrap();
    let mut d = ClientMessageDecoder::default();
    assert_eq!(d.push(&hello).unwrap(), vec![ClientMessage::hello()]);
    assert!(d.push(&CBOR_ERROR_THEN_OVERSIZE_HEADER).is_err());
}

#[test]
fn the_tokio_codecs_read_a_buffer_as_one_chunk() {
    // Nothing of the buffer is delivered: the oversize header wins.
    let mut wire = BytesMut::from(&CBOR_ERROR_THEN_OVERSIZE_HEADER[..]);
    let mut server = ServerCodec::default();
    assert_eq!(
        server.decode(&mut wire).unwrap_err().to_string(),
        "Invalid client protocol frame: Frame length 4294967295 exceeds configured limit of 16777216"
    );
    assert_eq!(
        server.decode(&mut wire).unwrap_err().to_string(),
        "client message decoder has failed"
    );

    // A good frame before a bad one in the same buffer is not delivered either.
    let mut wire = BytesMut::new();
    ServerCodec::default()
        .encode(&ServerMessage::Attachment(None), &mut wire)
        .unwrap();
    wire.extend_from_slice(&[0, 0, 0, 1, 0xff]);
    let mut client = ClientCodec::default();
    assert_eq!(
        client.decode(&mut wire).unwrap_err().to_string(),
        "Invalid server protocol frame: CBOR break marker is not supported"
    );

    // A good buffer is handed out frame by frame, then the next read is a new chunk.
    let mut wire = BytesMut::new();
    let mut encoder = ServerCodec::default();
    encoder
        .encode(&ServerMessage::Attachment(None), &mut wire)
        .unwrap();
    encoder
        .encode(&ServerMessage::Attachment(None), &mut wire)
        .unwrap();
    let mut client = ClientCodec::default();
    assert_eq!(
        client.decode(&mut wire).unwrap(),
        Some(ServerMessage::Attachment(None))
    );
    wire.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    assert_eq!(
        client.decode(&mut wire).unwrap(),
        Some(ServerMessage::Attachment(None)),
        "the rest of the earlier chunk is still delivered"
    );
    assert!(client.decode(&mut wire).is_err());
}

/// `{"type":"hello","version":-0}` as upstream's `encodeClientMessage` writes it.
const NEGATIVE_ZERO_HELLO: &str =
    "0000001da264747970656568656c6c6f6776657273696f6efb8000000000000000";

#[test]
fn a_hello_offering_negative_zero_is_valid_and_re_encodes_byte_identically() {
    let frame: Vec<u8> = (0..NEGATIVE_ZERO_HELLO.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&NEGATIVE_ZERO_HELLO[i..i + 2], 16).unwrap())
        .collect();
    let mut d = ClientMessageDecoder::default();
    let msgs = d.push(&frame).unwrap();
    let expected = ClientMessage::Hello {
        version: baton_protocol::HelloVersion::NEGATIVE_ZERO,
    };
    assert_eq!(msgs, vec![expected.clone()]);
    assert_eq!(&encode_frame(&expected, u32::MAX).unwrap()[..], &frame[..]);
    // The JSON path: `-0` is a float in JSON text and stays one.
    let built: ClientMessage =
        baton_protocol::from_value(Value::from_json(r#"{"type":"hello","version":-0}"#).unwrap())
            .unwrap();
    assert_eq!(built, expected);
    assert_eq!(
        baton_protocol::HelloVersion::NEGATIVE_ZERO.to_string(),
        "0",
        "displays as JavaScript renders -0"
    );
}

/// Outbound limit order, upstream `encoder.ts`: `CborWriter.ensureCapacity` refuses the
/// write that takes the running length past `maxByteLength`; before any write `encodeValue`
/// checks depth, then `encodeText` a string's own length (or a container its length). So the
/// first limit reached in write order is the one reported.
mod outbound_limit_order {
    use super::*;
    use baton_protocol::{ServiceUpdate, encode_service_update_frame, encode_update_payload};

    const SERVER_ID: &str = "00000000-0000-4000-8000-000000000001";

    fn client(json: &str) -> ClientMessage {
        baton_protocol::from_value(Value::from_json(json).unwrap()).unwrap()
    }

    fn server(json: &str) -> ServerMessage {
        baton_protocol::from_value(Value::from_json(json).unwrap()).unwrap()
    }

    fn request_json(id: &str, call: &str) -> String {
        format!(
            r#"{{"type":"request","id":"{id}","target":{{"serverId":"{SERVER_ID}"}},"call":{call}}}"#
        )
    }

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    fn client_error(msg: &ClientMessage, limit: u32) -> String {
        encode_frame(msg, limit).unwrap_err().to_string()
    }

    fn server_error(msg: &ServerMessage, limit: u32) -> String {
        encode_frame(msg, limit).unwrap_err().to_string()
    }

    const CLIENT_LENGTH_96: &str =
        "Unable to encode client protocol message: CBOR byte length exceeds configured limit of 96";

    #[test]
    fn the_frame_length_reached_before_a_string_longer_than_the_limit_is_reported() {
        // 96 bytes end at the serverId key; its value is the first write that does not fit.
        let call = format!("\"{}\"", "y".repeat(100));
        let msg = client(&request_json(&"x".repeat(60), &call));
        assert_eq!(client_error(&msg, 96), CLIENT_LENGTH_96);
    }

    #[test]
    fn a_string_longer_than_the_limit_reached_before_the_frame_length_is_reported() {
        let call = format!("\"{}\"", "y".repeat(100));
        let msg = client(&request_json("x", &call));
        assert_eq!(
            client_error(&msg, 96),
            "Unable to encode client protocol message: CBOR text string length exceeds configured limit of 96"
        );
    }

    #[test]
    fn the_frame_length_reached_before_a_payload_nested_too_deep_is_reported() {
        let msg = client(&request_json(&"x".repeat(60), &nested(70)));
        assert_eq!(client_error(&msg, 96), CLIENT_LENGTH_96);
    }

    #[test]
    fn a_payload_nested_too_deep_before_the_frame_length_is_reached_reports_the_depth() {
        let msg = client(&request_json("x", &nested(70)));
        assert_eq!(
            client_error(&msg, 100_000),
            "Unable to encode client protocol message: CBOR nesting depth exceeds configured limit of 64"
        );
    }

    #[test]
    fn an_envelope_key_longer_than_a_tiny_limit_is_a_string_error_as_upstream_writes_it() {
        // `"type"` is 4 bytes: the map head fits in 3, the key's own length check fails.
        assert_eq!(
            client_error(&ClientMessage::hello(), 3),
            "Unable to encode client protocol message: CBOR text string length exceeds configured limit of 3"
        );
        assert_eq!(
            client_error(&ClientMessage::hello(), 6),
            "Unable to encode client protocol message: CBOR byte length exceeds configured limit of 6"
        );
        // `"service_update"` is 14 bytes, after 6 that fit in 13.
        let update = server(r#"{"type":"service_update","subscriptionId":"s","update":null}"#);
        assert_eq!(
            server_error(&update, 13),
            "Unable to encode server protocol message: CBOR text string length exceeds configured limit of 13"
        );
        let sub = Id::new("s").unwrap();
        let payload = encode_update_payload(&Value::Null, 13).unwrap();
        let mut out = BytesMut::new();
        let spliced = encode_service_update_frame(&sub, &payload, 13, &mut out).unwrap_err();
        assert_eq!(spliced.to_string(), server_error(&update, 13));
        assert!(out.is_empty());
    }

    #[test]
    fn a_spliced_update_reports_what_the_whole_message_reports() {
        let update = Value::from_json(&format!(r#"["{}",{}]"#, "a".repeat(10), nested(3))).unwrap();
        let payload = encode_update_payload(&update, 96).unwrap();
        for sid_len in [1, 40, 50, 60, 94, 96, 100] {
            let sub = Id::new("s".repeat(sid_len)).unwrap();
            let whole = encode_frame(
                &ServerMessage::ServiceUpdate(ServiceUpdate {
                    subscription_id: sub.clone(),
                    update: update.clone(),
                }),
                96,
            );
            let mut out = BytesMut::new();
            let spliced = encode_service_update_frame(&sub, &payload, 96, &mut out);
            match whole {
                Ok(frame) => assert_eq!(&out[..], &frame[..], "sid of {sid_len}"),
                Err(e) => assert_eq!(spliced.unwrap_err(), e, "sid of {sid_len}"),
            }
        }
    }

    #[test]
    fn a_failed_encode_never_writes_past_the_limit() {
        let call = format!("\"{}\"", "y".repeat(50));
        let msg = Value::from_json(&request_json(&"x".repeat(60), &call)).unwrap();
        let limits = baton_protocol::limits::CborLimits::for_frame_length(96);
        let mut out = Vec::new();
        let err = baton_protocol::cbor::encode_value(&msg, &mut out, &limits).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CBOR byte length exceeds configured limit of 96"
        );
        assert!(out.len() <= 96, "{} bytes written", out.len());
    }
}

/// An error a transport wraps in its `io::Error` (as tokio-rustls wraps a TLS alert).
#[derive(Debug, thiserror::Error)]
#[error("peer sent a fatal alert")]
struct TransportFault;

/// `error`, made from a [`TransportFault`], kept its kind, its source and their text.
fn assert_keeps_the_transport_fault(io: &baton_protocol::IoError, error: &dyn std::error::Error) {
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
    assert!(io.get_ref().unwrap().is::<TransportFault>());
    assert_eq!(error.to_string(), "peer sent a fatal alert");
}

#[test]
fn a_transport_error_keeps_its_io_error_kind_and_source() {
    let io = || std::io::Error::new(std::io::ErrorKind::ConnectionReset, TransportFault);

    let decode = baton_protocol::DecodeError::from(io());
    let baton_protocol::DecodeError::Io(e) = &decode else {
        panic!("not an I/O error: {decode:?}");
    };
    assert_keeps_the_transport_fault(e, &decode);
    assert_eq!(decode, baton_protocol::DecodeError::from(io()));
    assert_ne!(
        decode,
        baton_protocol::DecodeError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset
        ))
    );

    let encode = baton_protocol::EncodeError::from(io());
    let baton_protocol::EncodeError::Io(e) = &encode else {
        panic!("not an I/O error: {encode:?}");
    };
    assert_keeps_the_transport_fault(e, &encode);
    assert_eq!(encode.clone(), encode);
    assert_ne!(
        encode,
        baton_protocol::EncodeError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset
        ))
    );
}
