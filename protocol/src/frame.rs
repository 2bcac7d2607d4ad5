//! Length-prefixed framing: a 4-byte big-endian payload length, then the payload.
//!
//! The declared length is checked the moment the header is complete, before any payload byte
//! is buffered, so a peer cannot make us reserve more than the configured limit. After any
//! error the decoder is failed for good and says so on every later call.

use bytes::{Buf, Bytes, BytesMut};

use crate::limits::{DEFAULT_MAX_FRAME_LENGTH, LimitError};

/// Length of the frame header.
pub const FRAME_HEADER_LENGTH: usize = 4;

/// Most the decoder reserves ahead of payload bytes actually arriving: a header alone must
/// not make a connection hold a whole frame's worth of memory (upstream assembles payloads
/// in 64 KiB blocks for the same reason).
pub const PAYLOAD_RESERVE_STEP: usize = 64 * 1024;

/// A framing failure. `Display` is upstream's exact message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The declared payload length exceeds the limit.
    #[error("Frame length {length} exceeds configured limit of {limit}")]
    TooLong {
        /// Declared payload length.
        length: u32,
        /// Configured limit.
        limit: u32,
    },
    /// The stream ended inside a header or payload.
    #[error("Truncated frame at end of stream")]
    Truncated,
    /// Used after an earlier error.
    #[error("Frame decoder has failed")]
    Failed,
    /// Used after [`FrameDecoder::end`].
    #[error("Frame decoder has ended")]
    Ended,
    /// An outbound payload longer than `u32::MAX`.
    #[error("Frame payload exceeds the unsigned 32-bit length limit")]
    PayloadTooLong,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for (the rest of) a header.
    Header,
    /// Header read; waiting for this many payload bytes.
    Payload(usize),
    Failed,
    Ended,
}

/// Incremental frame decoder over a caller-owned buffer.
///
/// Calling contract: append received bytes to a [`BytesMut`], then call [`decode`] until it
/// returns `Ok(None)`; at end of stream call [`end`]. Works with any split or coalescing of
/// the input.
///
/// [`decode`]: FrameDecoder::decode
/// [`end`]: FrameDecoder::end
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max_frame_length: u32,
    state: State,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME_LENGTH)
    }
}

impl FrameDecoder {
    /// A decoder accepting payloads up to `max_frame_length` bytes (inclusive).
    pub fn new(max_frame_length: u32) -> Self {
        Self {
            max_frame_length,
            state: State::Header,
        }
    }

    /// A decoder for a limit that must be at least 1, as the server and client require.
    ///
    /// # Errors
    /// [`LimitError::ZeroFrameLength`] for 0.
    pub fn with_nonzero_limit(max_frame_length: u32) -> Result<Self, LimitError> {
        if max_frame_length == 0 {
            return Err(LimitError::ZeroFrameLength);
        }
        Ok(Self::new(max_frame_length))
    }

    /// The configured limit.
    pub fn max_frame_length(&self) -> u32 {
        self.max_frame_length
    }

    /// True once an error has been returned.
    pub fn is_failed(&self) -> bool {
        self.state == State::Failed
    }

    /// Takes the next complete payload from the front of `buf`.
    ///
    /// # Errors
    /// [`FrameError::TooLong`] as soon as a header declares too much; afterwards
    /// [`FrameError::Failed`] (or [`FrameError::Ended`] after [`end`](Self::end)).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        Ok(self
            .next_payload(buf)?
            .map(|length| buf.split_to(length).freeze()))
    }

    /// [`decode`](Self::decode) without taking the payload: `Ok(Some(n))` means the next
    /// payload is `buf[..n]`, and the caller must remove exactly those bytes before the next
    /// call. This lets a decoder read a payload where it lies instead of splitting it off.
    pub(crate) fn next_payload(&mut self, buf: &mut BytesMut) -> Result<Option<usize>, FrameError> {
        loop {
            match self.state {
                State::Failed => return Err(FrameError::Failed),
                State::Ended => return Err(FrameError::Ended),
                State::Header => {
                    let Some(header) = buf.get(..FRAME_HEADER_LENGTH) else {
                        return Ok(None);
                    };
                    let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
                    if length > self.max_frame_length {
                        self.state = State::Failed;
                        return Err(FrameError::TooLong {
                            length,
                            limit: self.max_frame_length,
                        });
                    }
                    buf.advance(FRAME_HEADER_LENGTH);
                    // u32 always fits usize on the 32/64-bit targets tokio supports.
                    let length = length as usize;
                    // Reserve in steps: the rest grows only as bytes arrive.
                    buf.reserve(length.min(PAYLOAD_RESERVE_STEP).saturating_sub(buf.len()));
                    self.state = State::Payload(length);
                }
                State::Payload(length) => {
                    if buf.len() < length {
                        return Ok(None);
                    }
                    self.state = State::Header;
                    return Ok(Some(length));
                }
            }
        }
    }

    /// How many complete frames [`decode`](Self::decode) would take from `buf`, without
    /// taking any: every header whose four bytes are in `buf` is checked against the limit,
    /// including one after the last complete frame. This is how a message decoder checks a
    /// whole chunk's headers before decoding any payload, in place.
    ///
    /// # Errors
    /// As [`decode`](Self::decode): [`FrameError::TooLong`] for the first oversize header
    /// (the decoder is then failed), [`FrameError::Failed`] or [`FrameError::Ended`].
    pub fn complete_frames(&mut self, buf: &[u8]) -> Result<usize, FrameError> {
        // Where the next header starts, and the frames before it.
        let (mut at, mut frames) = match self.state {
            State::Failed => return Err(FrameError::Failed),
            State::Ended => return Err(FrameError::Ended),
            State::Header => (0, 0),
            State::Payload(length) if buf.len() < length => return Ok(0),
            State::Payload(length) => (length, 1),
        };
        while let Some(header) = buf.get(at..at + FRAME_HEADER_LENGTH) {
            let length = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
            if length > self.max_frame_length {
                self.state = State::Failed;
                return Err(FrameError::TooLong {
                    length,
                    limit: self.max_frame_length,
                });
            }
            let end = at + FRAME_HEADER_LENGTH + length as usize;
            if buf.len() < end {
                break;
            }
            at = end;
            frames += 1;
        }
        Ok(frames)
    }

    /// Declares end of stream. Leftover bytes mean a truncated frame.
    ///
    /// # Errors
    /// [`FrameError::Truncated`] if `buf` holds part of a frame; [`FrameError::Failed`] or
    /// [`FrameError::Ended`] if the decoder was already finished.
    pub fn end(&mut self, buf: &BytesMut) -> Result<(), FrameError> {
        match self.state {
            State::Failed => Err(FrameError::Failed),
            State::Ended => Err(FrameError::Ended),
            State::Header if buf.is_empty() => {
                self.state = State::Ended;
                Ok(())
            }
            State::Header | State::Payload(_) => {
                self.state = State::Failed;
                Err(FrameError::Truncated)
            }
        }
    }
}

/// Writes the 4-byte header for a payload of `len` bytes.
///
/// # Errors
/// [`FrameError::PayloadTooLong`] above `u32::MAX`.
pub fn frame_header(len: usize) -> Result<[u8; FRAME_HEADER_LENGTH], FrameError> {
    let len = u32::try_from(len).map_err(|_| FrameError::PayloadTooLong)?;
    Ok(len.to_be_bytes())
}

/// Returns `payload` framed: header then payload.
///
/// # Errors
/// [`FrameError::PayloadTooLong`] above `u32::MAX`.
pub fn encode_frame(payload: &[u8]) -> Result<Vec<u8>, FrameError> {
    let mut out = Vec::with_capacity(FRAME_HEADER_LENGTH + payload.len());
    out.extend_from_slice(&frame_header(payload.len())?);
    out.extend_from_slice(payload);
    Ok(out)
}
