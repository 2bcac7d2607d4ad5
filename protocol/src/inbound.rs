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
use crate::limits::{CborLimits, VALIDATED};
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
