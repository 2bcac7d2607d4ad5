//! Validated identifiers: parse, don't validate.

use std::fmt;

use compact_str::CompactString;

/// Length of a canonical UUID's text form.
const UUID_TEXT_LENGTH: usize = uuid::fmt::Hyphenated::LENGTH;

/// A canonical lowercase UUIDv4 naming a logical server
/// (`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).
///
/// Held as its 36 ASCII bytes, so parsing one from a frame allocates nothing. Parsing is
/// upstream's strict check, not [`uuid::Uuid::parse_str`], which also accepts uppercase hex
/// and the braced, URN and unhyphenated forms.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerId([u8; UUID_TEXT_LENGTH]);

/// A string that is not a valid identifier of the required kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// Not a canonical lowercase UUIDv4.
    #[error("server id must be a canonical lowercase UUIDv4")]
    NotServerId,
    /// Empty where at least one character is required.
    #[error("identifier must not be empty")]
    Empty,
}

impl ServerId {
    /// Validates `s`.
    ///
    /// # Errors
    /// [`IdError::NotServerId`] unless `s` is a canonical lowercase UUIDv4.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        Self::from_ascii(s.as_bytes()).ok_or(IdError::NotServerId)
    }

    /// [`parse`](Self::parse) from raw bytes: the canonical form is ASCII, so bytes that pass
    /// are valid UTF-8 and a decoder need not check them as text first.
    pub(crate) fn from_ascii(b: &[u8]) -> Option<Self> {
        let bytes = <[u8; UUID_TEXT_LENGTH]>::try_from(b).ok()?;
        is_canonical_uuid_v4_bytes(&bytes).then_some(Self(bytes))
    }

    /// Builds a UUIDv4 from 16 random bytes (the caller supplies randomness: this crate is pure).
    pub fn from_random_bytes(b: [u8; 16]) -> Self {
        let uuid = uuid::Builder::from_random_bytes(b).into_uuid();
        let mut bytes = [0; UUID_TEXT_LENGTH];
        uuid.hyphenated().encode_lower(&mut bytes);
        Self(bytes)
    }

    /// The text form.
    pub fn as_str(&self) -> &str {
        // Only canonical UUID text (ASCII) is ever stored.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// True for a canonical lowercase UUIDv4 string.
pub fn is_canonical_uuid_v4(s: &str) -> bool {
    <&[u8; UUID_TEXT_LENGTH]>::try_from(s.as_bytes()).is_ok_and(is_canonical_uuid_v4_bytes)
}

/// The check of [`is_canonical_uuid_v4`] on the 36 bytes: the fixed positions, then every
/// other byte lowercase hex (one pass with no per-position branch, which a decoder pays for
/// every frame that names a server).
fn is_canonical_uuid_v4_bytes(b: &[u8; UUID_TEXT_LENGTH]) -> bool {
    const HEX_RUNS: [(usize, usize); 5] = [(0, 8), (9, 13), (14, 18), (19, 23), (24, 36)];
    let fixed = b[8] == b'-'
        && b[13] == b'-'
        && b[18] == b'-'
        && b[23] == b'-'
        && b[14] == b'4'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b');
    fixed
        && HEX_RUNS.iter().all(|&(start, end)| {
            b[start..end]
                .iter()
                .all(|&c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        })
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerId({})", self.as_str())
    }
}

impl std::str::FromStr for ServerId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        Self::parse(s)
    }
}

/// A non-empty string identifier (request, subscription, session and attachment ids,
/// error codes).
///
/// Up to 24 bytes (every id baton makes, and most peers') are stored inline, so decoding one
/// allocates nothing.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(CompactString);

impl Id {
    /// Validates `s` is non-empty.
    ///
    /// # Errors
    /// [`IdError::Empty`] for `""`.
    pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
        let s = s.into();
        if s.is_empty() {
            Err(IdError::Empty)
        } else {
            Ok(Self(CompactString::from(s)))
        }
    }

    /// [`new`](Self::new) from borrowed text, without an intermediate `String`.
    ///
    /// # Errors
    /// [`IdError::Empty`] for `""`.
    pub fn from_text(s: &str) -> Result<Self, IdError> {
        if s.is_empty() {
            Err(IdError::Empty)
        } else {
            Ok(Self(CompactString::new(s)))
        }
    }

    /// For constants known to be non-empty.
    pub(crate) fn from_trusted(s: &str) -> Self {
        debug_assert!(!s.is_empty());
        Self(CompactString::new(s))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// The owned text.
    pub fn into_string(self) -> String {
        self.0.into_string()
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl AsRef<str> for Id {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

// `Hash` hashes the text as `str` does (compact_str's `Hash` is the `str`'s), so
// `Borrow<str>` keeps map lookups by `&str` sound.
impl std::borrow::Borrow<str> for Id {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The pattern written out position by position, as the regex in [`ServerId`]'s docs.
    fn reference(s: &str) -> bool {
        let b = s.as_bytes();
        b.len() == 36
            && b.iter().enumerate().all(|(i, &c)| match i {
                8 | 13 | 18 | 23 => c == b'-',
                14 => c == b'4',
                19 => matches!(c, b'8' | b'9' | b'a' | b'b'),
                _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
            })
    }

    /// A valid id with up to three bytes replaced by characters near the edges of each class.
    fn near_uuid() -> impl Strategy<Value = Vec<u8>> {
        let edge = prop::sample::select(b"0489abfgAF-/:`z\xc3\xff".to_vec());
        (
            prop::collection::vec((0usize..38, edge), 0..4),
            prop::option::of(0usize..38),
        )
            .prop_map(|(edits, cut)| {
                let mut b = b"0a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d".to_vec();
                for (i, c) in edits {
                    match b.get_mut(i) {
                        Some(slot) => *slot = c,
                        None => b.push(c),
                    }
                }
                if let Some(n) = cut {
                    b.truncate(n);
                }
                b
            })
    }

    proptest! {
        #[test]
        fn the_byte_check_accepts_exactly_the_canonical_pattern(b in near_uuid()) {
            let expected = std::str::from_utf8(&b).is_ok_and(reference);
            prop_assert_eq!(ServerId::from_ascii(&b).is_some(), expected);
            if let Ok(s) = std::str::from_utf8(&b) {
                prop_assert_eq!(is_canonical_uuid_v4(s), expected);
                prop_assert_eq!(ServerId::parse(s).is_ok(), expected);
            }
            if expected {
                // What the check accepts, the uuid crate reads as an RFC 9562 version 4 UUID
                // that formats back to the same text.
                let parsed = uuid::Uuid::try_parse_ascii(&b).unwrap();
                prop_assert_eq!(parsed.get_version(), Some(uuid::Version::Random));
                prop_assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
                let text = parsed.hyphenated().to_string();
                prop_assert_eq!(text.as_bytes(), &b[..]);
            }
        }

        #[test]
        fn random_bytes_make_a_canonical_v4_server_id(b in any::<[u8; 16]>()) {
            let id = ServerId::from_random_bytes(b);
            prop_assert!(reference(id.as_str()), "{}", id);
            prop_assert_eq!(&ServerId::parse(id.as_str()).unwrap(), &id);
            // Only the version and variant bits are set; every other bit is the caller's.
            let uuid = uuid::Uuid::parse_str(id.as_str()).unwrap();
            let mut expected = b;
            expected[6] = (expected[6] & 0x0f) | 0x40;
            expected[8] = (expected[8] & 0x3f) | 0x80;
            prop_assert_eq!(uuid.into_bytes(), expected);
        }
    }

    #[test]
    fn forms_the_uuid_crate_parses_but_upstream_refuses_are_refused() {
        let canonical = "0a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d";
        assert!(ServerId::parse(canonical).is_ok());
        for other in [
            "0A1B2C3D-4E5F-4A6B-9C7D-8E9F0A1B2C3D",
            "{0a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d}",
            "urn:uuid:0a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d",
            "0a1b2c3d4e5f4a6b9c7d8e9f0a1b2c3d",
        ] {
            assert!(uuid::Uuid::parse_str(other).is_ok(), "{other}");
            assert_eq!(ServerId::parse(other), Err(IdError::NotServerId), "{other}");
            assert!(!is_canonical_uuid_v4(other), "{other}");
        }
    }

    #[test]
    fn a_server_id_from_bytes_is_the_one_parsed_from_text() {
        let text = "00000000-0000-4000-8000-000000000001";
        let id = ServerId::from_ascii(text.as_bytes()).unwrap();
        assert_eq!(id, ServerId::parse(text).unwrap());
        assert_eq!(id.as_str(), text);
        // Uppercase hex, a wrong version nibble and a wrong variant are refused.
        for bad in [
            "00000000-0000-4000-8000-00000000000A",
            "00000000-0000-5000-8000-000000000001",
            "00000000-0000-4000-c000-000000000001",
        ] {
            assert!(ServerId::from_ascii(bad.as_bytes()).is_none(), "{bad}");
        }
    }
}
