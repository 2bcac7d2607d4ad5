//! The secrets of links and browser tokens: drawn from the operating system's random source,
//! written as lowercase hex, kept only as SHA-256 digests, and compared in constant time.

use ring::rand::{SecureRandom, SystemRandom};
use subtle::ConstantTimeEq;

/// Bytes of a pairing code (128 bits).
pub(crate) const CODE_BYTES: usize = 16;
/// Bytes of a browser token's secret (256 bits).
pub(crate) const SECRET_BYTES: usize = 32;
/// Bytes of a public token id (8 hex digits; ids are checked for uniqueness when drawn).
pub(crate) const ID_BYTES: usize = 4;

/// A SHA-256 digest.
pub(crate) type Digest = [u8; 32];

/// `n` bytes from the operating system's random source, as lowercase hex.
///
/// # Errors
/// The random source failed (one line).
pub(crate) fn random_hex(n: usize) -> Result<String, String> {
    let mut bytes = vec![0u8; n];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "the system random source failed".to_owned())?;
    Ok(hex(&bytes))
}

/// `bytes` as lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// The bytes written as hex (any case), or `None`.
pub(crate) fn parse_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.as_bytes()
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

/// The digest written as 64 hex digits (any case), or `None`.
pub(crate) fn parse_digest(text: &str) -> Option<Digest> {
    parse_hex(text)?.try_into().ok()
}

/// The SHA-256 digest of `text`.
pub(crate) fn digest(text: &str) -> Digest {
    let d = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Whether two digests are equal, in time that does not depend on where they differ.
pub(crate) fn same(a: &Digest, b: &Digest) -> bool {
    bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_os_random_hex_of_the_documented_strength() {
        let a = random_hex(SECRET_BYTES).unwrap();
        let b = random_hex(SECRET_BYTES).unwrap();
        assert_eq!(a.len(), 64);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(a, b, "two draws of 256 bits never collide");
        assert_eq!(random_hex(CODE_BYTES).unwrap().len(), 32);
    }

    #[test]
    fn digests_round_trip_through_hex_and_compare_by_value() {
        let d = digest("abc");
        assert_eq!(
            hex(&d),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(parse_digest(&hex(&d)), Some(d));
        assert_eq!(parse_digest("zz"), None);
        assert!(same(&d, &digest("abc")));
        assert!(!same(&d, &digest("abd")));
    }
}
