//! Named limits and their defaults. Every quantity a peer controls is bounded here.

/// Default maximum frame payload: 16 MiB (upstream `DEFAULT_MAX_FRAME_LENGTH`).
pub const DEFAULT_MAX_FRAME_LENGTH: u32 = 16 * 1024 * 1024;
/// Default maximum CBOR input/output and per-string length: 16 MiB.
pub const DEFAULT_MAX_CBOR_BYTE_LENGTH: u32 = 16 * 1024 * 1024;
/// Default maximum array elements or map entries: 1,000,000.
pub const DEFAULT_MAX_CBOR_CONTAINER_LENGTH: u32 = 1_000_000;
/// Default maximum nesting depth (root is depth 0): 64.
pub const DEFAULT_MAX_CBOR_DEPTH: u32 = 64;
/// Default maximum number of items (every scalar, string, container and map key) one decoded
/// payload may hold: 1,048,576 (2^20). Not an upstream limit: it bounds what a hostile frame
/// can make the decoder allocate — a 16 MiB frame of one-byte items would otherwise decode to
/// about half a GiB; with the budget a frame decodes to at most ~32 MiB of values — while a
/// single container of the maximum length (1,000,000) still fits.
pub const DEFAULT_MAX_CBOR_TOTAL_ITEMS: u32 = 1 << 20;
/// Largest depth a caller may configure: 512.
pub const MAX_CONFIGURABLE_CBOR_DEPTH: u32 = 512;

/// Bounds applied by the CBOR encoder and decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CborLimits {
    /// Whole input/output length, and the length of each byte or text string.
    pub max_byte_length: u32,
    /// Elements per array, entries per map.
    pub max_container_length: u32,
    /// Nesting depth; the root is depth 0 and scalars count.
    pub max_depth: u32,
    /// Items in one decoded payload (decoder only; baton's addition, see
    /// [`DEFAULT_MAX_CBOR_TOTAL_ITEMS`]).
    pub max_total_items: u32,
}

impl Default for CborLimits {
    fn default() -> Self {
        Self {
            max_byte_length: DEFAULT_MAX_CBOR_BYTE_LENGTH,
            max_container_length: DEFAULT_MAX_CBOR_CONTAINER_LENGTH,
            max_depth: DEFAULT_MAX_CBOR_DEPTH,
            max_total_items: DEFAULT_MAX_CBOR_TOTAL_ITEMS,
        }
    }
}

impl CborLimits {
    /// The limits the message codec uses for a given frame limit: upstream passes only
    /// `maxByteLength = maxFrameLength` and keeps the other defaults.
    pub fn for_frame_length(max_frame_length: u32) -> Self {
        Self {
            max_byte_length: max_frame_length,
            ..Self::default()
        }
    }

    /// Checks the depth bound (`0..=512`).
    ///
    /// # Errors
    /// `max_depth` above [`MAX_CONFIGURABLE_CBOR_DEPTH`].
    pub fn validated(self) -> Result<Self, LimitError> {
        if self.max_depth > MAX_CONFIGURABLE_CBOR_DEPTH {
            return Err(LimitError::OutOfRange {
                name: "maxDepth",
                maximum: u64::from(MAX_CONFIGURABLE_CBOR_DEPTH),
            });
        }
        Ok(self)
    }
}

/// Limits for re-reading bytes that already passed a frame's limits, or that baton wrote
/// from valid parts: none can trip again.
pub(crate) const VALIDATED: CborLimits = CborLimits {
    max_byte_length: u32::MAX,
    max_container_length: u32::MAX,
    max_depth: MAX_CONFIGURABLE_CBOR_DEPTH,
    max_total_items: u32::MAX,
};

/// A configured limit outside its allowed range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Upstream's `RangeError` wording.
    #[error("{name} must be an integer between 0 and {maximum}")]
    OutOfRange {
        /// Option name as upstream spells it.
        name: &'static str,
        /// Inclusive maximum.
        maximum: u64,
    },
    /// A frame limit of zero where at least one byte is required.
    #[error("maxFrameLength must be an integer between 1 and 4294967295")]
    ZeroFrameLength,
}
