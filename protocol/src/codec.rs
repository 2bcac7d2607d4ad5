//! Message codecs: frames + strict CBOR + envelope validation, as one step each way.
//!
//! Inbound there is one decoder, [`MessageDecoder`] (in `decoder.rs`, re-exported here),
//! which decodes frames in place in the buffer they were read into, with upstream's
//! `ClientMessageDecoder`/`ServerMessageDecoder` rules. Outbound, [`encode_frame`] and
//! friends. [`WireCodec`] pairs the two for a tokio-util `Framed`. The errors of both
//! directions ([`DecodeError`], [`EncodeError`]) live below the decoder and are re-exported
//! here.

use std::marker::PhantomData;

use bytes::{BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::cbor::{self, CborError, ValueDecodeError, Writer};
use crate::decoder::{client_payload, server_payload};
use crate::frame::FRAME_HEADER_LENGTH;
use crate::limits::{CborLimits, DEFAULT_MAX_FRAME_LENGTH, VALIDATED};
use crate::message::{ClientMessage, Invalid, ServerMessage};

pub use crate::decoder::{
    ClientMessageDecoder, Inbound, MessageDecoder, ServerFrameDecoder, ServerMessageDecoder,
};
pub use crate::error::{DecodeError, EncodeError, IoError, Side};

/// A message that crosses the wire in one direction (its side is [`Inbound::SIDE`]).
pub trait WireMessage: Inbound + Sized + sealed::Sealed {
    #[doc(hidden)]
    fn parse_value(value: crate::Value) -> Result<Self, InvalidMessage>;
    #[doc(hidden)]
    fn write<B: BufMut>(&self, out: &mut B, limits: &CborLimits) -> Result<(), CborError>;
    #[doc(hidden)]
    fn decode_bytes(payload: &[u8], limits: &CborLimits) -> Result<Self, DecodeError>;
}

/// Opaque marker for "not a valid envelope" (public only because [`WireMessage`] names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidMessage(());

impl From<Invalid> for InvalidMessage {
    fn from(_: Invalid) -> Self {
        Self(())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::ClientMessage {}
    impl Sealed for crate::ServerMessage {}
}

impl WireMessage for ClientMessage {
    fn parse_value(value: crate::Value) -> Result<Self, InvalidMessage> {
        Ok(Self::parse(value)?)
    }
    fn write<B: BufMut>(&self, out: &mut B, limits: &CborLimits) -> Result<(), CborError> {
        let mut w = Writer::new(out, limits);
        w.client_message(self)?;
        w.finish()
    }
    fn decode_bytes(payload: &[u8], limits: &CborLimits) -> Result<Self, DecodeError> {
        client_payload(payload, limits)
    }
}

impl WireMessage for ServerMessage {
    fn parse_value(value: crate::Value) -> Result<Self, InvalidMessage> {
        Ok(Self::parse(value)?)
    }
    fn write<B: BufMut>(&self, out: &mut B, limits: &CborLimits) -> Result<(), CborError> {
        let mut w = Writer::new(out, limits);
        w.server_message(self)?;
        w.finish()
    }
    fn decode_bytes(payload: &[u8], limits: &CborLimits) -> Result<Self, DecodeError> {
        server_payload(payload, limits)
    }
}

/// Decodes one unframed payload into a message.
///
/// # Errors
/// [`DecodeError::Cbor`] or [`DecodeError::InvalidMessage`].
pub fn decode_payload<M: WireMessage>(
    payload: &[u8],
    max_frame_length: u32,
) -> Result<M, DecodeError> {
    M::decode_bytes(payload, &CborLimits::for_frame_length(max_frame_length))
}

/// [`decode_payload`] the long way: the payload into a [`Value`](crate::Value), then the
/// envelope. Same results (the differential tests hold the two together); kept as the
/// reference the fast path is checked against.
///
/// # Errors
/// As [`decode_payload`].
#[doc(hidden)]
pub fn decode_payload_via_value<M: WireMessage>(
    payload: &[u8],
    max_frame_length: u32,
) -> Result<M, DecodeError> {
    let side = M::SIDE;
    let value = cbor::decode_value(payload, &CborLimits::for_frame_length(max_frame_length))
        .map_err(|e| match e {
            ValueDecodeError::Cbor(source) => DecodeError::Cbor { side, source },
            ValueDecodeError::NotJson => DecodeError::InvalidMessage { side },
        })?;
    M::parse_value(value).map_err(|_| DecodeError::InvalidMessage { side })
}

/// Validates a [`Value`](crate::Value) as a message (what [`decode_payload`] does after CBOR).
///
/// # Errors
/// [`DecodeError::InvalidMessage`] if it is not a valid envelope.
pub fn from_value<M: WireMessage>(value: crate::Value) -> Result<M, DecodeError> {
    M::parse_value(value).map_err(|_| DecodeError::InvalidMessage { side: M::SIDE })
}

/// The message as a [`Value`](crate::Value), keys in wire order (for logs, JSON tooling and tests).
pub fn to_value<M: WireMessage>(msg: &M) -> crate::Value {
    let mut buf = Vec::new();
    // Our own messages always re-decode: they were built from valid parts.
    match msg.write(&mut buf, &VALIDATED) {
        Ok(()) => cbor::decode_value(&buf, &VALIDATED).unwrap_or(crate::Value::Null),
        Err(_) => crate::Value::Null,
    }
}

/// Appends the framed encoding of `msg` (header included) to `out`. On error `out` is left
/// as it was.
///
/// # Errors
/// [`EncodeError::Cbor`] when the message is over `max_frame_length` or another limit.
pub fn encode_frame_into<M: WireMessage>(
    msg: &M,
    max_frame_length: u32,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    let start = out.len();
    out.put_slice(&[0; FRAME_HEADER_LENGTH]);
    if let Err(source) = msg.write(out, &CborLimits::for_frame_length(max_frame_length)) {
        out.truncate(start);
        return Err(EncodeError::Cbor {
            side: M::SIDE,
            source,
        });
    }
    let len = out.len() - start - FRAME_HEADER_LENGTH;
    // The CBOR limit (a u32) already bounded `len`.
    let header = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    out[start..start + FRAME_HEADER_LENGTH].copy_from_slice(&header);
    Ok(())
}

/// Encodes `msg` as one complete frame.
///
/// # Errors
/// As [`encode_frame_into`].
pub fn encode_frame<M: WireMessage>(msg: &M, max_frame_length: u32) -> Result<Bytes, EncodeError> {
    // One allocation for every small frame; larger ones grow by doubling.
    let mut out = BytesMut::with_capacity(SMALL_FRAME_CAPACITY);
    encode_frame_into(msg, max_frame_length, &mut out)?;
    Ok(out.freeze())
}

/// Encodes a `service_update`'s update value once, so the bytes can be shared by every
/// subscriber whose delta dictionaries agree (see [`encode_service_update_frame`]).
///
/// The value is checked as it sits inside the envelope: one level below the envelope root,
/// against the same limits (so a depth error names the envelope's limit, as upstream's).
/// The envelope head it will follow is not known here, so when the update itself breaks a
/// limit the error is the one the update alone reaches first; inside a whole message
/// upstream may reach the frame length first (the exact error is [`encode_frame`]'s for the
/// whole `service_update`). An update that encodes here frames exactly as the whole message.
///
/// # Errors
/// [`EncodeError::Cbor`] when the value breaks a limit.
pub fn encode_update_payload(
    update: &crate::Value,
    max_frame_length: u32,
) -> Result<Bytes, EncodeError> {
    let limits = CborLimits::for_frame_length(max_frame_length);
    let mut out = BytesMut::new();
    let mut w = Writer::new(&mut out, &limits);
    w.value(update, 1)
        .and_then(|()| w.finish())
        .map_err(|source| EncodeError::Cbor {
            side: Side::Server,
            source,
        })?;
    Ok(out.freeze())
}

/// Appends a framed `service_update` whose update is already encoded by
/// [`encode_update_payload`]. The result is byte-identical to encoding the whole message,
/// and so is the error: the head is checked item by item and the spliced payload, which
/// already passed every other limit, can only take the frame past its length.
///
/// # Errors
/// [`EncodeError::Cbor`] when the frame would exceed `max_frame_length`.
pub fn encode_service_update_frame(
    subscription_id: &crate::Id,
    update_payload: &[u8],
    max_frame_length: u32,
    out: &mut BytesMut,
) -> Result<(), EncodeError> {
    let start = out.len();
    out.put_slice(&[0; FRAME_HEADER_LENGTH]);
    let limits = CborLimits::for_frame_length(max_frame_length);
    let mut w = Writer::new(out, &limits);
    let written = w
        .service_update_head(subscription_id.as_str())
        .map(|()| w.raw(update_payload))
        .and_then(|()| w.finish());
    if let Err(source) = written {
        out.truncate(start);
        return Err(EncodeError::Cbor {
            side: Side::Server,
            source,
        });
    }
    let len = out.len() - start - FRAME_HEADER_LENGTH;
    let header = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    out[start..start + FRAME_HEADER_LENGTH].copy_from_slice(&header);
    Ok(())
}

/// Initial buffer for [`encode_frame`]: fits hellos, requests, responses and small updates.
const SMALL_FRAME_CAPACITY: usize = 256;

/// tokio-util codec for a peer that receives `In` and sends `Out`: a [`MessageDecoder`]
/// (fed the `Framed`'s buffer) beside [`encode_frame_into`].
#[derive(Debug)]
pub struct WireCodec<In, Out> {
    decoder: MessageDecoder<In>,
    max_frame_length: u32,
    _out: PhantomData<fn(Out)>,
}

/// What a server frames: decodes client messages, encodes server messages.
pub type ServerCodec = WireCodec<ClientMessage, ServerMessage>;
/// What a client frames: decodes server messages, encodes client messages.
pub type ClientCodec = WireCodec<ServerMessage, ClientMessage>;

impl<In: Inbound, Out: WireMessage> WireCodec<In, Out> {
    /// A codec with one frame limit for both directions.
    pub fn new(max_frame_length: u32) -> Self {
        Self {
            decoder: MessageDecoder::new(max_frame_length),
            max_frame_length,
            _out: PhantomData,
        }
    }
}

impl<In: Inbound, Out: WireMessage> Default for WireCodec<In, Out> {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LENGTH)
    }
}

impl<In: Inbound, Out: WireMessage> Decoder for WireCodec<In, Out> {
    type Item = In;
    type Error = DecodeError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, DecodeError> {
        Decoder::decode(&mut self.decoder, src)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<In>, DecodeError> {
        Decoder::decode_eof(&mut self.decoder, src)
    }
}

impl<In: Inbound, Out: WireMessage> Encoder<&Out> for WireCodec<In, Out> {
    type Error = EncodeError;

    fn encode(&mut self, item: &Out, dst: &mut BytesMut) -> Result<(), EncodeError> {
        encode_frame_into(item, self.max_frame_length, dst)
    }
}

impl<In: Inbound, Out: WireMessage> Encoder<Out> for WireCodec<In, Out> {
    type Error = EncodeError;

    fn encode(&mut self, item: Out, dst: &mut BytesMut) -> Result<(), EncodeError> {
        encode_frame_into(&item, self.max_frame_length, dst)
    }
}
