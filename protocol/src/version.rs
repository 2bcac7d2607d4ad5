//! Protocol version negotiation. v8 is the only version this implementation speaks.

/// The protocol version this crate implements.
pub const PROTOCOL_VERSION: u64 = 8;

/// True only for version 8 (upstream `isSupportedProtocolVersion`).
pub fn is_supported_protocol_version(version: u64) -> bool {
    version == PROTOCOL_VERSION
}
