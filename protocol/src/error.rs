//! The codecs' errors: [`DecodeError`] (inbound bytes that yield no message), [`EncodeError`]
//! (a message that cannot be framed), the [`Side`] whose messages they are about, and the
//! [`IoError`] both carry from a transport. Below the decoder and the encoders alike.

use std::fmt;
use std::io;
use std::ops::Deref;
use std::sync::Arc;

use crate::cbor::CborError;
use crate::frame::FrameError;
use crate::message::PayloadError;

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

/// An I/O error from the transport under a tokio `Framed`, kept whole (kind, source) and
/// shared so the codec errors stay `Clone`. It reads as the [`io::Error`] it holds.
///
/// Two are equal when they are of the same kind with the same text (an [`io::Error`] has no
/// equality of its own), which is what makes [`DecodeError`] and [`EncodeError`] comparable.
#[derive(Debug, Clone)]
pub struct IoError(Arc<io::Error>);

impl From<io::Error> for IoError {
    fn from(e: io::Error) -> Self {
        Self(Arc::new(e))
    }
}

impl Deref for IoError {
    type Target = io::Error;

    fn deref(&self) -> &io::Error {
        &self.0
    }
}

impl PartialEq for IoError {
    fn eq(&self, other: &Self) -> bool {
        self.kind() == other.kind() && self.to_string() == other.to_string()
    }
}

impl Eq for IoError {}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl std::error::Error for IoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Why inbound bytes did not yield a message. `Display` is upstream's exact wording.
///
/// Equality is variant by variant; two [`Io`](Self::Io) errors are equal as [`IoError`]s
/// are.
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
    #[error(transparent)]
    Io(IoError),
}

impl From<io::Error> for DecodeError {
    fn from(e: io::Error) -> Self {
        Self::Io(e.into())
    }
}

/// The error of a payload that broke the CBOR profile or is not a valid envelope.
pub(crate) fn payload_error(side: Side, e: PayloadError) -> DecodeError {
    match e {
        PayloadError::Cbor(source) => DecodeError::Cbor { side, source },
        PayloadError::Invalid => DecodeError::InvalidMessage { side },
    }
}

/// Why an outbound message could not be framed. `Display` is upstream's wording:
/// `Unable to encode {side} protocol message: …`, cut to 500 characters.
///
/// Equality is as for [`DecodeError`].
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
    #[error(transparent)]
    Io(IoError),
}

impl From<io::Error> for EncodeError {
    fn from(e: io::Error) -> Self {
        Self::Io(e.into())
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
