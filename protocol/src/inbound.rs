//! What a client reads, with `service_update` payloads left encoded.
//!
//! A streaming session sends far more `service_update` frames than anything else, and the
//! client turns each one into replica ops with a [`StateDecoder`](crate::chord::StateDecoder).
//! Decoding the update into a [`Value`](crate::Value) first only to take it apart again costs a
//! dozen small allocations per frame. [`ServerFrameDecoder`](crate::ServerFrameDecoder) (the one
//! in-place [`MessageDecoder`](crate::MessageDecoder) yielding [`ServerFrame`]s) validates every
//! frame exactly as [`ServerMessageDecoder`](crate::ServerMessageDecoder) does (same checks, same
//! errors, same sticky failure) but hands an update over as the bytes of its CBOR item, a
//! zero-copy slice of the read buffer, which
//! [`StateDecoder::decode_update_cbor`](crate::chord::StateDecoder::decode_update_cbor) reads in
//! place.

use bytes::Bytes;

use crate::cbor::{self, ValueDecodeError};
use crate::error::{DecodeError, Side, payload_error};
use crate::ids::Id;
use crate::limits::{CborLimits, MAX_CONFIGURABLE_CBOR_DEPTH};
use crate::message::{ServerMessage, ServerPayload, ServiceUpdate, UpdateForm, decode_server_as};

/// One server message as a client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerFrame {
    /// Any message but a `service_update`.
    Message(ServerMessage),
    /// A `service_update`, its update still encoded.
    Update(EncodedServiceUpdate),
}

impl ServerFrame {
    /// The message with any update decoded into a [`Value`](crate::Value), as
    /// [`ClientCodec`](crate::ClientCodec) gives it.
    ///
    /// # Errors
    /// As [`EncodedServiceUpdate::update_value`].
    pub fn into_message(self) -> Result<ServerMessage, ValueDecodeError> {
        match self {
            Self::Message(m) => Ok(m),
            Self::Update(u) => u.into_message(),
        }
    }
}

/// A `service_update` whose `update` is the encoded CBOR item, already validated against the
/// profile and the frame's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedServiceUpdate {
    /// The client-chosen subscription id.
    pub subscription_id: Id,
    /// The update's CBOR bytes (a slice of the frame, not a copy).
    pub update: Bytes,
}

impl EncodedServiceUpdate {
    /// The update as a [`Value`](crate::Value).
    ///
    /// # Errors
    /// Only for bytes that did not come from [`ServerFrameDecoder`](crate::ServerFrameDecoder)
    /// or [`decode_server_frame`].
    pub fn update_value(&self) -> Result<crate::Value, ValueDecodeError> {
        cbor::decode_value(&self.update, &VALIDATED)
    }

    /// The message with its update decoded, as [`ClientCodec`](crate::ClientCodec) gives it.
    ///
    /// # Errors
    /// As [`update_value`](Self::update_value).
    pub fn into_message(self) -> Result<ServerMessage, ValueDecodeError> {
        Ok(ServerMessage::ServiceUpdate(ServiceUpdate {
            update: self.update_value()?,
            subscription_id: self.subscription_id,
        }))
    }
}

/// Limits for re-reading bytes that already passed a frame's limits: none can trip again.
pub(crate) const VALIDATED: CborLimits = CborLimits {
    max_byte_length: u32::MAX,
    max_container_length: u32::MAX,
    max_depth: MAX_CONFIGURABLE_CBOR_DEPTH,
    max_total_items: u32::MAX,
};

/// Decodes one unframed server payload, leaving a `service_update`'s update encoded.
///
/// Accepts and refuses exactly what [`decode_payload`](crate::decode_payload) does for
/// [`ServerMessage`], with the same errors.
///
/// # Errors
/// [`DecodeError::Cbor`] or [`DecodeError::InvalidMessage`].
pub fn decode_server_frame(
    payload: Bytes,
    max_frame_length: u32,
) -> Result<ServerFrame, DecodeError> {
    decode_server_frame_with(payload, &CborLimits::for_frame_length(max_frame_length))
}

pub(crate) fn decode_server_frame_with(
    payload: Bytes,
    limits: &CborLimits,
) -> Result<ServerFrame, DecodeError> {
    match decode_server_as(&payload, limits, UpdateForm::Encoded) {
        Ok(ServerPayload::Message(m)) => Ok(ServerFrame::Message(m)),
        Ok(ServerPayload::EncodedUpdate {
            subscription_id,
            update,
        }) => Ok(ServerFrame::Update(EncodedServiceUpdate {
            subscription_id,
            update: payload.slice(update),
        })),
        Err(e) => Err(payload_error(Side::Server, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{ClientCodec, decode_payload};
    use crate::encode_frame;
    use crate::limits::DEFAULT_MAX_FRAME_LENGTH;
    use bytes::BytesMut;
    use tokio_util::codec::Decoder;

    fn update_frame(sequence: u64) -> Bytes {
        let wire = crate::Value::from_json(&format!(
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
        let mut codec = crate::ServerFrameDecoder::default();
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
        let mut codec = crate::ServerFrameDecoder::default();
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
        let mut ours = crate::ServerFrameDecoder::default();
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
}
