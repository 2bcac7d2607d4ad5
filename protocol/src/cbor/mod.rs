//! The strict CBOR profile of Pi v8 (upstream `packages/protocol/src/cbor`).
//!
//! Definite lengths only, no tags, no half or single floats, integers within ±(2^53−1),
//! float64 only for non-integral numbers, text keys, no duplicates, valid UTF-8, one item
//! with no trailing bytes, bounded depth and container sizes.

mod decode;
mod encode;
mod error;

pub(crate) use decode::Reader;
pub use decode::{ValueDecodeError, decode_value, validate};
pub(crate) use encode::Writer;
pub use encode::{encode_value, to_vec};
pub use error::{CborError, ContainerKind, IndefiniteKind, StringKind};
