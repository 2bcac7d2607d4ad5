//! Message codecs: frames + strict CBOR + envelope validation, as one step each way.
//!
//! Two forms of the same logic: a plain incremental [`MessageDecoder`] (upstream
//! `ClientMessageDecoder`/`ServerMessageDecoder` semantics: every header of a chunk is
//! checked before any of its payloads is decoded, and a chunk with a bad frame yields none of
//! its messages) and tokio-util [`Decoder`]/[`Encoder`] pairs for `Framed`.

use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;

use bytes::{BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::cbor::{self, CborError, ValueDecodeError, Writer};
use crate::frame::{FRAME_HEADER_LENGTH, FrameDecoder, FrameError};
use crate::limits::{CborLimits, DEFAULT_MAX_FRAME_LENGTH};
use crate::message::{
    ClientMessage, Invalid, PayloadError, ServerMessage, decode_client, decode_server,
};

/// Which side's messages an error is about (upstream's `client`/`server` wording).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Messages a client sends.
    Client,
    /// Messages a server sends.
    Server,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Client => "client",
            Self::Server => "server",
        })
    }
}

/// A message that crosses the wire in one direction.
pub trait WireMessage: Sized + sealed::Sealed {
    /// Whose messages these are.
    const SIDE: Side;
    #[doc(hidden)]
    fn parse_value(value: crate::Value) -> Result<Self, InvalidMessage>;
    #[doc(hidden)]
    fn write<B: BufMut>(&self, out: &mut B, limits: &CborLimits) -> Result<(), CborError>;
    #[doc(hidden)]
    fn decode_bytes(payload: &[u8], limits: &CborLimits) -> Result<Self, DecodeError>;
}

pub(crate) fn payload_error(side: Side, e: PayloadError) -> DecodeError {
    match e {
        PayloadError::Cbor(source) => DecodeError::Cbor { side, source },
        PayloadError::Invalid => DecodeError::InvalidMessage { side },
    }
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
    const SIDE: Side = Side::Client;
    fn parse_value(value: crate::Value) -> Result<Self, InvalidMessage> {
        Ok(Self::parse(value)?)
    }
    fn write<B: BufMut>(&self, out: &mut B, limits: &CborLimits) -> Result<(), CborError> {
        let mut w = Writer::new(out, limits);
        w.client_message(self)?;
        w.finish()
    }
    fn decode_bytes(payload: &[u8], limits: &CborLimits) -> Result<Self, DecodeError> {
        decode_client(payload, limits).map_err(|e| payload_error(Side::Client, e))
    }
}

impl WireMessage for ServerMessage {
    const SIDE: Side = Side::Server;
    fn parse_value(value: crate::Value) -> Result<Self, InvalidMessage> {
        Ok(Self::parse(value)?)
    }
    fn write<B: BufMut>(&self, out: &mut B, limits: &CborLimits) -> Result<(), CborError> {
        let mut w = Writer::new(out, limits);
        w.server_message(self)?;
        w.finish()
    }
    fn decode_bytes(payload: &[u8], limits: &CborLimits) -> Result<Self, DecodeError> {
        decode_server(payload, limits).map_err(|e| payload_error(Side::Server, e))
    }
}

/// Why inbound bytes did not yield a message. `Display` is upstream's exact wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Framing failed (oversized length).
    #[error("Invalid {side} protocol frame: {source}")]
    Frame {
        /// Whose messages.
        side: Side,
        /// The framing error.
        source: FrameError,
    },
    /// The payload broke the CBOR profile.
    #[error("Invalid {side} protocol frame: {source}")]
    Cbor {
        /// Whose messages.
        side: Side,
        /// The CBOR error.
        source: CborError,
    },
    /// Valid CBOR, but not a valid envelope (or not strict JSON).
    #[error("Invalid {side} protocol message")]
    InvalidMessage {
        /// Whose messages.
        side: Side,
    },
    /// The stream ended inside a frame.
    #[error("Invalid {side} protocol framing: {source}")]
    Framing {
        /// Whose messages.
        side: Side,
        /// Always [`FrameError::Truncated`].
        source: FrameError,
    },
    /// Used after an earlier failure: the decoder is sticky.
    #[error("{side} message decoder has failed")]
    Failed {
        /// Whose messages.
        side: Side,
    },
    /// Used after a clean end of stream.
    #[error("{side} message decoder has ended")]
    Ended {
        /// Whose messages.
        side: Side,
    },
    /// I/O error from the transport under a tokio `Framed`.
    #[error("{0}")]
    Io(String),
}

impl From<std::io::Error> for DecodeError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e.to_string())
    }
}

/// Why an outbound message could not be framed. `Display` is upstream's wording:
/// `Unable to encode {side} protocol message: …`, cut to 500 characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The message exceeds a limit (most often the frame length).
    #[error("Unable to encode {side} protocol message: {}", truncate_500(&source.to_string()))]
    Cbor {
        /// Whose messages.
        side: Side,
        /// The encoder error.
        source: CborError,
    },
    /// I/O error from the transport under a tokio `Framed`.
    #[error("{0}")]
    Io(String),
}

impl From<std::io::Error> for EncodeError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e.to_string())
    }
}

fn truncate_500(s: &str) -> String {
    // Upstream counts UTF-16 units; our messages are ASCII, where units and chars agree.
    if s.chars().count() <= 500 {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(497).collect();
        out.push_str("...");
        out
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
    let limits = CborLimits {
        max_byte_length: u32::MAX,
        max_container_length: u32::MAX,
        max_depth: crate::limits::MAX_CONFIGURABLE_CBOR_DEPTH,
        max_total_items: u32::MAX,
    };
    let mut buf = Vec::new();
    // Our own messages always re-decode: they were built from valid parts.
    match msg.write(&mut buf, &limits) {
        Ok(()) => cbor::decode_value(&buf, &limits).unwrap_or(crate::Value::Null),
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

/// Framing whose first error is final, shared by every decoder that turns frames into
/// messages (this module's and the client's [`ServerFrameCodec`](crate::ServerFrameCodec)).
///
/// It reads the way upstream's `ValidatedMessageDecoder.push` reads one received chunk: its
/// `FrameDecoder` first splits *every* complete frame in the chunk (checking each header),
/// and only then is each payload decoded, in order. So an oversize length header later in a
/// chunk wins over a bad payload earlier in it, the first bad payload wins over later ones,
/// and a chunk with any failure yields none of its messages. "The chunk" here is every
/// complete frame buffered when the previous batch has been handed out: what one read added
/// (plus the cut frame an earlier read left).
#[derive(Debug)]
pub(crate) struct StickyFrames<T> {
    frames: FrameDecoder,
    failed: bool,
    /// The decoded rest of the current chunk. At most one chunk's messages: it is refilled
    /// only once empty, so it never outgrows what one read brought in.
    ready: VecDeque<T>,
}

impl<T> StickyFrames<T> {
    pub(crate) fn new(max_frame_length: u32) -> Self {
        Self {
            frames: FrameDecoder::new(max_frame_length),
            failed: false,
            ready: VecDeque::new(),
        }
    }

    /// The next message: the rest of the current chunk, or else the first of the next chunk,
    /// taken from every complete frame in `buf` through `decode` (given the payload and the
    /// frame limit). Any error, framing or decoding, fails the decoder for good.
    pub(crate) fn next(
        &mut self,
        buf: &mut BytesMut,
        side: Side,
        decode: impl FnMut(Bytes, u32) -> Result<T, DecodeError>,
    ) -> Result<Option<T>, DecodeError> {
        if let Some(t) = self.ready.pop_front() {
            return Ok(Some(t));
        }
        self.ready = self.chunk(buf, side, decode)?.into();
        Ok(self.ready.pop_front())
    }

    /// Every message the complete frames in `buf` hold, after whatever is left of the
    /// current chunk, or the chunk's first failure and nothing.
    pub(crate) fn drain(
        &mut self,
        buf: &mut BytesMut,
        side: Side,
        decode: impl FnMut(Bytes, u32) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let chunk = self.chunk(buf, side, decode)?;
        let mut out: Vec<T> = self.ready.drain(..).collect();
        out.extend(chunk);
        Ok(out)
    }

    /// Splits every complete frame out of `buf`, then decodes them in order.
    fn chunk(
        &mut self,
        buf: &mut BytesMut,
        side: Side,
        mut decode: impl FnMut(Bytes, u32) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        if self.failed {
            return Err(DecodeError::Failed { side });
        }
        // Payloads are slices of `buf`, not copies; their count is bounded by `buf`'s length
        // (each frame takes at least its 4-byte header).
        let mut payloads = Vec::new();
        loop {
            match self.frames.decode(buf) {
                Ok(Some(p)) => payloads.push(p),
                Ok(None) => break,
                Err(source) => {
                    self.fail();
                    return Err(DecodeError::Frame { side, source });
                }
            }
        }
        let max = self.frames.max_frame_length();
        let mut out = Vec::with_capacity(payloads.len());
        for payload in payloads {
            match decode(payload, max) {
                Ok(t) => out.push(t),
                Err(e) => {
                    self.fail();
                    return Err(e);
                }
            }
        }
        Ok(out)
    }

    fn fail(&mut self) {
        self.failed = true;
        self.ready = VecDeque::new();
    }

    pub(crate) fn is_failed(&self) -> bool {
        self.failed
    }

    /// End of stream declared by the caller: a cut frame is an error, and so is a second end.
    fn end(&mut self, buf: &BytesMut, side: Side) -> Result<(), DecodeError> {
        if self.failed {
            return Err(DecodeError::Failed { side });
        }
        self.frames.end(buf).map_err(|source| match source {
            FrameError::Ended => DecodeError::Ended { side },
            FrameError::Failed => DecodeError::Failed { side },
            source => {
                self.failed = true;
                DecodeError::Framing { side, source }
            }
        })
    }

    /// End of stream as a tokio codec sees it (possibly more than once): only a cut frame is
    /// an error.
    pub(crate) fn end_of_stream(&mut self, buf: &BytesMut, side: Side) -> Result<(), DecodeError> {
        match self.frames.end(buf) {
            Ok(()) | Err(FrameError::Ended) => Ok(()),
            Err(source) => {
                self.failed = true;
                Err(DecodeError::Framing { side, source })
            }
        }
    }
}

/// Incremental, sticky message decoder for one direction of one connection.
#[derive(Debug)]
pub struct MessageDecoder<M> {
    frames: StickyFrames<M>,
    buf: BytesMut,
}

/// Decodes what a client sends (used by servers).
pub type ClientMessageDecoder = MessageDecoder<ClientMessage>;
/// Decodes what a server sends (used by clients).
pub type ServerMessageDecoder = MessageDecoder<ServerMessage>;

impl<M: WireMessage> Default for MessageDecoder<M> {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LENGTH)
    }
}

fn decode_owned<M: WireMessage>(payload: Bytes, max: u32) -> Result<M, DecodeError> {
    decode_payload(&payload, max)
}

impl<M: WireMessage> MessageDecoder<M> {
    /// A decoder with the given frame limit.
    pub fn new(max_frame_length: u32) -> Self {
        Self {
            frames: StickyFrames::new(max_frame_length),
            buf: BytesMut::new(),
        }
    }

    /// Bytes buffered toward an incomplete frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Feeds a chunk and returns every message it completes, in order, as upstream's
    /// `push(chunk)`: every frame header in the chunk is checked before any payload is
    /// decoded, and if any frame in the chunk is bad, nothing from the chunk is returned and
    /// the decoder fails for good.
    ///
    /// # Errors
    /// A framing error anywhere in the chunk, else the first bad payload; afterwards
    /// [`DecodeError::Failed`].
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<M>, DecodeError> {
        if self.frames.is_failed() {
            return Err(DecodeError::Failed { side: M::SIDE });
        }
        self.buf.extend_from_slice(chunk);
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.frames.drain(&mut buf, M::SIDE, decode_owned::<M>);
        self.buf = buf;
        r
    }

    /// Takes the next complete message from already-pushed bytes.
    ///
    /// # Errors
    /// As [`push`](Self::push).
    pub fn next_message(&mut self) -> Result<Option<M>, DecodeError> {
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.decode_from(&mut buf);
        self.buf = buf;
        r
    }

    fn decode_from(&mut self, buf: &mut BytesMut) -> Result<Option<M>, DecodeError> {
        self.frames.next(buf, M::SIDE, decode_owned::<M>)
    }

    /// Declares end of stream.
    ///
    /// # Errors
    /// [`DecodeError::Framing`] if a frame was cut short.
    pub fn end(&mut self) -> Result<(), DecodeError> {
        self.frames.end(&self.buf, M::SIDE)
    }
}

/// tokio-util codec for a peer that receives `In` and sends `Out`.
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

impl<In: WireMessage, Out: WireMessage> WireCodec<In, Out> {
    /// A codec with one frame limit for both directions.
    pub fn new(max_frame_length: u32) -> Self {
        Self {
            decoder: MessageDecoder::new(max_frame_length),
            max_frame_length,
            _out: PhantomData,
        }
    }
}

impl<In: WireMessage, Out: WireMessage> Default for WireCodec<In, Out> {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LENGTH)
    }
}

impl<In: WireMessage, Out: WireMessage> Decoder for WireCodec<In, Out> {
    type Item = In;
    type Error = DecodeError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, DecodeError> {
        self.decoder.decode_from(src)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<In>, DecodeError> {
        if let Some(m) = self.decoder.decode_from(src)? {
            return Ok(Some(m));
        }
        self.decoder
            .frames
            .end_of_stream(src, In::SIDE)
            .map(|()| None)
    }
}

impl<In: WireMessage, Out: WireMessage> Encoder<&Out> for WireCodec<In, Out> {
    type Error = EncodeError;

    fn encode(&mut self, item: &Out, dst: &mut BytesMut) -> Result<(), EncodeError> {
        encode_frame_into(item, self.max_frame_length, dst)
    }
}

impl<In: WireMessage, Out: WireMessage> Encoder<Out> for WireCodec<In, Out> {
    type Error = EncodeError;

    fn encode(&mut self, item: Out, dst: &mut BytesMut) -> Result<(), EncodeError> {
        encode_frame_into(&item, self.max_frame_length, dst)
    }
}
