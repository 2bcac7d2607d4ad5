//! CBOR profile violations, worded exactly as upstream's `CborError` messages.

/// Which kind of string a length error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringKind {
    /// Major type 2.
    Bytes,
    /// Major type 3.
    Text,
}

impl StringKind {
    fn name(self) -> &'static str {
        match self {
            Self::Bytes => "byte string",
            Self::Text => "text string",
        }
    }
}

/// Which container a length error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerKind {
    /// Major type 4.
    Array,
    /// Major type 5.
    Map,
}

impl ContainerKind {
    fn name(self) -> &'static str {
        match self {
            Self::Array => "array",
            Self::Map => "map",
        }
    }
}

/// Indefinite-length item kinds, for the matching rejection message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndefiniteKind {
    /// Major 2.
    ByteStrings,
    /// Major 3.
    TextStrings,
    /// Major 4.
    Arrays,
    /// Major 5.
    Maps,
    /// Majors 0 and 1.
    Items,
}

impl IndefiniteKind {
    fn name(self) -> &'static str {
        match self {
            Self::ByteStrings => "byte strings",
            Self::TextStrings => "text strings",
            Self::Arrays => "arrays",
            Self::Maps => "maps",
            Self::Items => "items",
        }
    }
}

/// A CBOR encode or decode failure. `Display` is upstream's exact message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CborError {
    /// Input or output longer than `maxByteLength`.
    #[error("CBOR byte length exceeds configured limit of {limit}")]
    ByteLengthExceeded {
        /// The configured limit.
        limit: u32,
    },
    /// A string longer than `maxByteLength`.
    #[error("CBOR {} length exceeds configured limit of {limit}", kind.name())]
    StringLengthExceeded {
        /// Byte or text string.
        kind: StringKind,
        /// The configured limit.
        limit: u32,
    },
    /// A container with more than `maxContainerLength` entries.
    #[error("CBOR {} length exceeds configured limit of {limit}", kind.name())]
    ContainerLengthExceeded {
        /// Array or map.
        kind: ContainerKind,
        /// The configured limit.
        limit: u32,
    },
    /// More items in one payload than `max_total_items` (baton's limit, not upstream's).
    #[error("CBOR item count exceeds configured limit of {limit}")]
    TooManyItems {
        /// The configured limit.
        limit: u32,
    },
    /// Nesting beyond `maxDepth`.
    #[error("CBOR nesting depth exceeds configured limit of {limit}")]
    DepthExceeded {
        /// The configured limit.
        limit: u32,
    },
    /// The input ended inside an item.
    #[error("Truncated CBOR payload")]
    Truncated,
    /// Bytes after the one item.
    #[error("CBOR payload contains trailing data")]
    TrailingData,
    /// Additional information 28..=30.
    #[error("Malformed CBOR additional information")]
    MalformedAdditionalInformation,
    /// Additional information 31 (indefinite length).
    #[error("Indefinite-length CBOR {} are not supported", kind.name())]
    Indefinite {
        /// What was indefinite.
        kind: IndefiniteKind,
    },
    /// An 8-byte argument above 2^53 − 1.
    #[error("Decoded CBOR integer or length is outside the safe range")]
    ArgumentOutOfSafeRange,
    /// A negative integer or integral float outside ±(2^53 − 1).
    #[error("Decoded CBOR integer is outside the safe range")]
    IntegerOutOfSafeRange,
    /// Major type 6.
    #[error("CBOR tags are not supported")]
    Tag,
    /// Undefined, simple values, half and single floats.
    #[error("Unsupported CBOR simple value or floating-point width")]
    UnsupportedSimple,
    /// A float64 NaN or infinity.
    #[error("Decoded CBOR number must be finite")]
    NonFiniteFloat,
    /// `0xff` outside an indefinite item.
    #[error("CBOR break marker is not supported")]
    Break,
    /// Invalid UTF-8 in a text string.
    #[error("CBOR text string contains invalid UTF-8")]
    InvalidUtf8,
    /// A map key that is not a text string.
    #[error("CBOR map keys must be strings")]
    NonStringKey,
    /// The same key twice in one map.
    #[error("CBOR map contains a duplicate key")]
    DuplicateKey,
}
