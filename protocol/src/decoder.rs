//! The one inbound decoder: frames are decoded where they were read.
//!
//! [`MessageDecoder`] owns the read buffer. A connection reads straight into it
//! ([`read_buffer`](MessageDecoder::read_buffer)) and takes messages one at a time
//! ([`next_message`](MessageDecoder::next_message)); each payload is decoded where it lies at
//! the front of that buffer and then dropped from it (a message that keeps part of its frame,
//! a client's `service_update`, splits it off as a zero-copy [`Bytes`](bytes::Bytes)), so
//! nothing is copied into a second buffer and no `Vec` of payloads is built. A caller that owns
//! its buffer (a tokio-util `FramedRead`) passes it to [`decode`](MessageDecoder::decode)
//! instead. Servers decode [`ClientMessage`]s, clients [`ServerMessage`]s or, with
//! `service_update` payloads left encoded, [`ServerFrame`]s: one type, one
//! set of rules.
//!
//! The rules are upstream `ValidatedMessageDecoder.push`'s, applied to "the chunk": every
//! complete frame buffered when the previous chunk has been handed out (what one read added,
//! plus the cut frame an earlier read left).
//!
//! * Every header of the chunk is checked, against the frame limit, before any payload is
//!   decoded; a header's length is checked the moment its four bytes are complete, before any
//!   payload byte is buffered. So an oversize header later in the chunk wins over a bad
//!   payload earlier in it.
//! * The first bad payload wins over later ones, and a chunk with any bad frame yields none
//!   of its messages. A chunk of one frame (the common case on a request/response connection)
//!   is decoded and returned directly; a chunk of several is decoded whole into a queue the
//!   decoder reuses (its messages, never their bytes), because the last frame can still veto
//!   the first.
//! * The first error is final: every later call fails with [`DecodeError::Failed`].
//! * At end of stream, [`end`](MessageDecoder::end) reports a cut frame.

use std::collections::VecDeque;

use bytes::{Buf, BytesMut};

use crate::error::{DecodeError, Side, payload_error};
use crate::frame::{FrameDecoder, FrameError};
use crate::inbound::{ServerFrame, decode_server_frame_with};
use crate::limits::{CborLimits, DEFAULT_MAX_FRAME_LENGTH};
use crate::message::{ClientMessage, ServerMessage, decode_client, decode_server};

/// What a [`MessageDecoder`] can produce from one frame's payload: [`ClientMessage`],
/// [`ServerMessage`] and [`ServerFrame`].
pub trait Inbound: Sized + sealed::Sealed {
    /// Whose messages these are (for error texts).
    const SIDE: Side;
    /// Decodes the payload `buf[..len]` and removes it from `buf`: read where it lies, or
    /// split off as a zero-copy [`Bytes`] by a type that keeps part of it.
    #[doc(hidden)]
    fn from_payload(
        buf: &mut BytesMut,
        len: usize,
        limits: &CborLimits,
    ) -> Result<Self, DecodeError>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::ClientMessage {}
    impl Sealed for super::ServerMessage {}
    impl Sealed for super::ServerFrame {}
}

impl Inbound for ClientMessage {
    const SIDE: Side = Side::Client;
    fn from_payload(
        buf: &mut BytesMut,
        len: usize,
        limits: &CborLimits,
    ) -> Result<Self, DecodeError> {
        read_where_it_lies(buf, len, |payload| client_payload(payload, limits))
    }
}

impl Inbound for ServerMessage {
    const SIDE: Side = Side::Server;
    fn from_payload(
        buf: &mut BytesMut,
        len: usize,
        limits: &CborLimits,
    ) -> Result<Self, DecodeError> {
        read_where_it_lies(buf, len, |payload| server_payload(payload, limits))
    }
}

impl Inbound for ServerFrame {
    const SIDE: Side = Side::Server;
    fn from_payload(
        buf: &mut BytesMut,
        len: usize,
        limits: &CborLimits,
    ) -> Result<Self, DecodeError> {
        // An update outlives the read buffer: its payload is split off, not copied.
        decode_server_frame_with(buf.split_to(len.min(buf.len())).freeze(), limits)
    }
}

/// Decodes one unframed client payload where it lies.
pub(crate) fn client_payload(
    payload: &[u8],
    limits: &CborLimits,
) -> Result<ClientMessage, DecodeError> {
    decode_client(payload, limits).map_err(|e| payload_error(Side::Client, e))
}

/// Decodes one unframed server payload where it lies, updates into [`Value`](crate::Value)s.
pub(crate) fn server_payload(
    payload: &[u8],
    limits: &CborLimits,
) -> Result<ServerMessage, DecodeError> {
    decode_server(payload, limits).map_err(|e| payload_error(Side::Server, e))
}

/// Decodes `buf[..len]` in place, then drops it from the front of `buf`. Nothing of it is
/// kept, so there is no split and no reference count to touch.
fn read_where_it_lies<M: Inbound>(
    buf: &mut BytesMut,
    len: usize,
    decode: impl FnOnce(&[u8]) -> Result<M, DecodeError>,
) -> Result<M, DecodeError> {
    let r = buf.get(..len).map(decode);
    buf.advance(len.min(buf.len()));
    // `len` came from a complete frame of this buffer.
    r.unwrap_or(Err(DecodeError::Framing {
        side: M::SIDE,
        source: FrameError::Truncated,
    }))
}

/// Decodes what a client sends (used by servers).
pub type ClientMessageDecoder = MessageDecoder<ClientMessage>;
/// Decodes what a server sends, updates decoded into [`Value`](crate::Value)s.
pub type ServerMessageDecoder = MessageDecoder<ServerMessage>;
/// Decodes what a server sends as a client reads it: `service_update` payloads stay encoded
/// for [`StateDecoder::decode_update_cbor`](crate::chord::StateDecoder::decode_update_cbor).
pub type ServerFrameDecoder = MessageDecoder<ServerFrame>;

/// Incremental, sticky, in-place decoder for one direction of one connection (see the
/// [module docs](self) for the rules).
///
/// The read loop of a connection (`read_buf` stands for tokio's
/// `AsyncReadExt::read_buf(&mut socket, buf).await`, which reads into a `BytesMut`'s spare
/// capacity):
///
/// ```
/// use baton_protocol::codec::{ClientMessageDecoder, DecodeError};
/// use baton_protocol::{ClientMessage, encode_frame};
/// use bytes::BytesMut;
///
/// fn read_loop(
///     mut read_buf: impl FnMut(&mut BytesMut) -> std::io::Result<usize>,
///     mut handle: impl FnMut(ClientMessage),
/// ) -> Result<(), DecodeError> {
///     let mut decoder = ClientMessageDecoder::new(16 * 1024 * 1024);
///     loop {
///         // Read straight into the decoder's buffer: no copy, no second buffer.
///         let n = read_buf(decoder.read_buffer(64 * 1024)).map_err(DecodeError::from)?;
///         if n == 0 {
///             return decoder.end(); // a frame cut by the end of stream is an error
///         }
///         // Take every message the read completed, one at a time, before reading again.
///         // After an error the connection answers and closes; the decoder keeps failing.
///         while let Some(message) = decoder.next_message()? {
///             handle(message);
///         }
///     }
/// }
///
/// let mut wire = encode_frame(&ClientMessage::hello(), 1024).unwrap().to_vec();
/// let mut got = Vec::new();
/// read_loop(
///     |buf| {
///         let n = wire.len().min(7); // the socket delivers any split
///         buf.extend_from_slice(&wire[..n]);
///         wire.drain(..n);
///         Ok(n)
///     },
///     |m| got.push(m),
/// )
/// .unwrap();
/// assert_eq!(got, vec![ClientMessage::hello()]);
/// ```
#[derive(Debug)]
pub struct MessageDecoder<M> {
    frames: FrameDecoder,
    limits: CborLimits,
    failed: bool,
    /// The decoded rest of a chunk of several frames. Refilled only once empty, so it never
    /// holds more than one chunk's messages; its capacity is kept for the next chunk.
    ready: VecDeque<M>,
    /// The read buffer of [`read_buffer`](Self::read_buffer) and [`push`](Self::push).
    buf: BytesMut,
}

impl<M: Inbound> Default for MessageDecoder<M> {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LENGTH)
    }
}

impl<M: Inbound> MessageDecoder<M> {
    /// A decoder with the given frame limit.
    pub fn new(max_frame_length: u32) -> Self {
        Self {
            frames: FrameDecoder::new(max_frame_length),
            limits: CborLimits::for_frame_length(max_frame_length),
            failed: false,
            ready: VecDeque::new(),
            buf: BytesMut::new(),
        }
    }

    /// The configured frame limit.
    pub fn max_frame_length(&self) -> u32 {
        self.frames.max_frame_length()
    }

    /// The decoder's read buffer with room for at least `spare` more bytes: read into it, then
    /// call [`next_message`](Self::next_message) until it returns `Ok(None)`. Only append to
    /// it. Once the payloads split off earlier are dropped, the room is reclaimed in place.
    pub fn read_buffer(&mut self, spare: usize) -> &mut BytesMut {
        self.buf.reserve(spare);
        &mut self.buf
    }

    /// Bytes buffered toward an incomplete frame (or not yet handed out).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Bytes the read buffer holds allocated (buffered plus spare room).
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Frees the read buffer (and the capacity kept for decoding a chunk of several frames)
    /// when nothing is buffered, so an idle connection holds no read memory; the next
    /// [`read_buffer`](Self::read_buffer) allocates again. Only spare room is ever freed,
    /// never a buffered byte.
    pub fn release_buffer(&mut self) {
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
        if self.ready.is_empty() {
            self.ready = VecDeque::new();
        }
    }

    /// True once an error has been returned.
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    /// The next message from the decoder's own buffer ([`read_buffer`](Self::read_buffer)),
    /// `Ok(None)` when it holds no complete frame.
    ///
    /// # Errors
    /// A framing error anywhere in the chunk, else the chunk's first bad payload; afterwards
    /// [`DecodeError::Failed`].
    pub fn next_message(&mut self) -> Result<Option<M>, DecodeError> {
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.decode(&mut buf);
        self.buf = buf;
        r
    }

    /// The next message from a buffer the caller owns and appends to (what a tokio-util
    /// `FramedRead` hands its decoder). Use either this or the decoder's own buffer, not both.
    ///
    /// # Errors
    /// As [`next_message`](Self::next_message).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<M>, DecodeError> {
        if self.failed {
            return Err(DecodeError::Failed { side: M::SIDE });
        }
        if let Some(m) = self.ready.pop_front() {
            return Ok(Some(m));
        }
        match self.complete_frames(buf)? {
            0 => {
                self.take_frame(buf)?;
                Ok(None)
            }
            1 => {
                let Some(len) = self.take_frame(buf)? else {
                    return Ok(None);
                };
                let m = self.decode_payload(buf, len)?;
                // Consume (and reserve for) a header that follows, as every chunk does.
                self.take_frame(buf)?;
                Ok(Some(m))
            }
            n => {
                self.decode_chunk(buf, n)?;
                Ok(self.ready.pop_front())
            }
        }
    }

    /// Feeds a chunk and returns every message it completes, in order, as upstream's
    /// `push(chunk)`. For tests and tools holding bytes in hand: it copies `chunk` into the
    /// decoder's buffer, where a connection would have read it.
    ///
    /// # Errors
    /// As [`next_message`](Self::next_message).
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<M>, DecodeError> {
        if self.failed {
            return Err(DecodeError::Failed { side: M::SIDE });
        }
        self.buf.extend_from_slice(chunk);
        let mut buf = std::mem::take(&mut self.buf);
        let r = self.complete_frames(&buf).and_then(|n| {
            // Whatever was left of an earlier chunk comes first.
            self.decode_chunk(&mut buf, n)
        });
        self.buf = buf;
        r.map(|()| self.ready.drain(..).collect())
    }

    /// Declares end of stream on the decoder's own buffer.
    ///
    /// # Errors
    /// [`DecodeError::Framing`] if a frame was cut short; [`DecodeError::Failed`] or
    /// [`DecodeError::Ended`] if the decoder was already finished.
    pub fn end(&mut self) -> Result<(), DecodeError> {
        let buf = std::mem::take(&mut self.buf);
        let r = self.end_of(&buf);
        self.buf = buf;
        r
    }

    /// [`end`](Self::end) for a caller-owned buffer ([`decode`](Self::decode)).
    ///
    /// # Errors
    /// As [`end`](Self::end).
    pub fn end_of(&mut self, buf: &BytesMut) -> Result<(), DecodeError> {
        let side = M::SIDE;
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
    pub(crate) fn end_of_stream(&mut self, buf: &BytesMut) -> Result<(), DecodeError> {
        match self.frames.end(buf) {
            Ok(()) | Err(FrameError::Ended) => Ok(()),
            Err(source) => {
                self.failed = true;
                Err(DecodeError::Framing {
                    side: M::SIDE,
                    source,
                })
            }
        }
    }

    /// How many complete frames `buf` holds, every complete header checked first.
    fn complete_frames(&mut self, buf: &[u8]) -> Result<usize, DecodeError> {
        self.frames.complete_frames(buf).map_err(|source| {
            self.fail();
            DecodeError::Frame {
                side: M::SIDE,
                source,
            }
        })
    }

    /// The next payload off the front of `buf` (headers were checked by
    /// [`complete_frames`](Self::complete_frames), so this cannot fail unless the caller
    /// mixed buffers).
    fn take_frame(&mut self, buf: &mut BytesMut) -> Result<Option<usize>, DecodeError> {
        self.frames.next_payload(buf).map_err(|source| {
            self.fail();
            DecodeError::Frame {
                side: M::SIDE,
                source,
            }
        })
    }

    /// Decodes the chunk's `n` frames onto the back of `ready`, or fails with the first bad
    /// one and keeps nothing.
    fn decode_chunk(&mut self, buf: &mut BytesMut, n: usize) -> Result<(), DecodeError> {
        self.ready.reserve(n);
        for _ in 0..n {
            if let Some(len) = self.take_frame(buf)? {
                let m = self.decode_payload(buf, len)?;
                self.ready.push_back(m);
            }
        }
        self.take_frame(buf)?;
        Ok(())
    }

    fn decode_payload(&mut self, buf: &mut BytesMut, len: usize) -> Result<M, DecodeError> {
        M::from_payload(buf, len, &self.limits).inspect_err(|_| self.fail())
    }

    fn fail(&mut self) {
        self.failed = true;
        self.ready = VecDeque::new();
    }
}

/// For a tokio-util `FramedRead`, which owns the buffer: the same decoder fed through
/// [`decode`](MessageDecoder::decode); the buffer is one chunk per call once the previous
/// chunk is handed out.
impl<M: Inbound> tokio_util::codec::Decoder for MessageDecoder<M> {
    type Item = M;
    type Error = DecodeError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<M>, DecodeError> {
        MessageDecoder::decode(self, src)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<M>, DecodeError> {
        if let Some(m) = MessageDecoder::decode(self, src)? {
            return Ok(Some(m));
        }
        self.end_of_stream(src).map(|()| None)
    }
}
