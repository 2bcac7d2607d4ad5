//! What a client reads: [`ServerFrame`]s, `service_update` payloads left encoded, decoded by
//! [`decode_server_frame`] and [`ServerFrameDecoder`] with the same results and errors as the
//! value codec.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use baton_protocol::codec::{ClientCodec, ServerFrameDecoder, decode_payload};
use baton_protocol::limits::DEFAULT_MAX_FRAME_LENGTH;
use baton_protocol::{
    DecodeError, Id, ServerFrame, ServerMessage, ServiceUpdate, Side, Value, decode_server_frame,
    encode_frame,
};
use bytes::{Bytes, BytesMut};
use tokio_util::codec::Decoder;

fn update_frame(sequence: u64) -> Bytes {
    let wire = Value::from_json(&format!(
        r#"{{"type":"state","member":"reply","sequence":{sequence},"ops":[["a",["text"],"tok"]]}}"#
    ))
    .unwrap();
    let msg = ServerMessage::ServiceUpdate(ServiceUpdate {
        subscription_id: Id::new("service-1").unwrap(),
        update: wire,
    });
    encode_frame(&msg, DEFAULT_MAX_FRAME_LENGTH).unwrap()
}

#[test]
fn an_update_is_handed_over_encoded_and_decodes_to_what_the_value_codec_gives() {
    let frame = update_frame(3);
    let payload = frame.slice(4..);
    let expected: ServerMessage = decode_payload(&payload, DEFAULT_MAX_FRAME_LENGTH).unwrap();
    let ServerFrame::Update(update) =
        decode_server_frame(payload, DEFAULT_MAX_FRAME_LENGTH).unwrap()
    else {
        panic!("not an update")
    };
    assert_eq!(update.subscription_id.as_str(), "service-1");
    assert_eq!(update.into_message().unwrap(), expected);
}

#[test]
fn an_oversize_header_later_in_a_read_wins_over_a_cbor_error_earlier_in_it() {
    let mut bytes = BytesMut::from(&[0u8, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff][..]);
    let mut codec = ServerFrameDecoder::default();
    assert_eq!(
        codec.decode(&mut bytes).unwrap_err().to_string(),
        "Invalid server protocol frame: Frame length 4294967295 exceeds configured limit of 16777216"
    );
    assert_eq!(
        codec.decode(&mut bytes).unwrap_err(),
        DecodeError::Failed { side: Side::Server }
    );
}

#[test]
fn a_read_with_a_bad_frame_yields_none_of_its_good_frames() {
    let mut bytes = BytesMut::new();
    bytes.extend_from_slice(&update_frame(1));
    bytes.extend_from_slice(&[0, 0, 0, 1, 0xff]);
    let mut codec = ServerFrameDecoder::default();
    assert_eq!(
        codec.decode(&mut bytes).unwrap_err().to_string(),
        "Invalid server protocol frame: CBOR break marker is not supported"
    );
}

#[test]
fn the_stream_codec_agrees_with_the_value_codec_frame_by_frame_and_fails_the_same_way() {
    let mut bytes = BytesMut::new();
    bytes.extend_from_slice(&update_frame(1));
    bytes.extend_from_slice(
        &encode_frame(&ServerMessage::Attachment(None), DEFAULT_MAX_FRAME_LENGTH).unwrap(),
    );
    // A frame whose payload breaks the profile (a tag): both codecs refuse it alike.
    bytes.extend_from_slice(&[0, 0, 0, 2, 0xc0, 0x00]);
    let mut ours = ServerFrameDecoder::default();
    let mut reference = ClientCodec::default();
    // The bad frame arrives in a later read than the good ones.
    let bad = bytes.split_off(bytes.len() - 6);
    let (mut a, mut b) = (bytes.clone(), bytes);
    for _ in 0..2 {
        let frame = ours.decode(&mut a).unwrap().unwrap();
        let message = reference.decode(&mut b).unwrap().unwrap();
        let frame = match frame {
            ServerFrame::Message(m) => m,
            ServerFrame::Update(u) => u.into_message().unwrap(),
        };
        assert_eq!(frame, message);
    }
    a.extend_from_slice(&bad);
    b.extend_from_slice(&bad);
    let ours_err = ours.decode(&mut a).unwrap_err();
    assert_eq!(ours_err, reference.decode(&mut b).unwrap_err());
    assert_eq!(
        ours.decode(&mut a).unwrap_err(),
        DecodeError::Failed { side: Side::Server }
    );
}
