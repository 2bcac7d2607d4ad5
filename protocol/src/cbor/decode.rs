//! The strict CBOR decoder: one definite-length item, upstream's checks in upstream's order.
//!
//! Hostile lengths never drive allocation: every declared length is checked against the
//! configured limit and against the bytes actually present before anything is reserved, and
//! recursion is bounded by the depth limit (at most 512).

use std::collections::HashSet;

use crate::cbor::error::{CborError, ContainerKind, IndefiniteKind, StringKind};
use crate::limits::CborLimits;
use crate::value::{Map, Number, Value};

/// Why a CBOR payload did not yield a strict JSON value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueDecodeError {
    /// The bytes break the CBOR profile.
    #[error(transparent)]
    Cbor(#[from] CborError),
    /// Well-formed CBOR that holds a byte string, which JSON cannot carry.
    #[error("CBOR payload is not a JSON value")]
    NotJson,
}

/// Decodes exactly one item from `bytes` into a [`Value`].
///
/// # Errors
/// [`ValueDecodeError::Cbor`] for any profile violation, with upstream's message;
/// [`ValueDecodeError::NotJson`] for a valid item containing a byte string.
pub fn decode_value(bytes: &[u8], limits: &CborLimits) -> Result<Value, ValueDecodeError> {
    let mut d = Reader::new(bytes, limits)?;
    let value = d.item(0)?;
    d.finish()?;
    Ok(value)
}

/// Checks that `bytes` is exactly one valid item under the profile, without building it
/// (nothing is allocated except a key set for maps of more than 16 entries).
///
/// # Errors
/// As [`decode_value`].
pub fn validate(bytes: &[u8], limits: &CborLimits) -> Result<(), ValueDecodeError> {
    let mut d = Reader::new(bytes, limits)?;
    d.skip(0)?;
    d.finish()
}

const SAFE_HIGH_WORD_MAX: u64 = 0x1f_ffff;

/// Maps up to this many entries check duplicate keys by scanning; larger ones hash.
const SMALL_MAP: usize = 16;

/// `bytes` as text, or the profile's UTF-8 error.
fn utf8(bytes: &[u8]) -> Result<&str, CborError> {
    std::str::from_utf8(bytes).map_err(|_| CborError::InvalidUtf8)
}

/// A cursor over one CBOR payload. The envelope decoder drives it directly so envelope keys
/// and short strings are read in place instead of being allocated. Cloning it saves a
/// position to come back to.
#[derive(Clone)]
pub(crate) struct Reader<'a, 'l> {
    buf: &'a [u8],
    pos: usize,
    limits: &'l CborLimits,
    saw_bytes: bool,
    /// Items started so far, against `max_total_items`.
    items: u32,
}

impl<'a, 'l> Reader<'a, 'l> {
    /// Starts reading `bytes`, refusing input longer than the byte limit up front.
    pub(crate) fn new(bytes: &'a [u8], limits: &'l CborLimits) -> Result<Self, CborError> {
        if bytes.len() > limits.max_byte_length as usize {
            return Err(CborError::ByteLengthExceeded {
                limit: limits.max_byte_length,
            });
        }
        Ok(Self {
            buf: bytes,
            pos: 0,
            limits,
            saw_bytes: false,
            items: 0,
        })
    }

    /// Ends the payload: no trailing bytes, and (as a JSON value) no byte strings.
    pub(crate) fn finish(&self) -> Result<(), ValueDecodeError> {
        if self.pos != self.buf.len() {
            return Err(CborError::TrailingData.into());
        }
        if self.saw_bytes {
            return Err(ValueDecodeError::NotJson);
        }
        Ok(())
    }

    fn check_depth(&self, depth: u32) -> Result<(), CborError> {
        if depth > self.limits.max_depth {
            return Err(CborError::DepthExceeded {
                limit: self.limits.max_depth,
            });
        }
        Ok(())
    }

    /// Counts one item (map keys included) against the payload's item budget. Every item is
    /// counted exactly once, when its head is consumed.
    fn count(&mut self) -> Result<(), CborError> {
        self.items += 1;
        if self.items > self.limits.max_total_items {
            return Err(CborError::TooManyItems {
                limit: self.limits.max_total_items,
            });
        }
        Ok(())
    }

    /// Bytes consumed so far.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn peek_major(&self) -> Result<u8, CborError> {
        self.buf
            .get(self.pos)
            .map(|h| h >> 5)
            .ok_or(CborError::Truncated)
    }

    /// If the next item is a map, consumes its head and returns its length; otherwise
    /// consumes nothing.
    pub(crate) fn map_len(&mut self, depth: u32) -> Result<Option<usize>, CborError> {
        match self.head_if(depth, 5)? {
            Some(len) => self.container_len(len, ContainerKind::Map).map(Some),
            None => Ok(None),
        }
    }

    /// If the next item has major type `major`, consumes its head (counting the item) and
    /// returns its argument; otherwise consumes nothing.
    fn head_if(&mut self, depth: u32, major: u8) -> Result<Option<u64>, CborError> {
        self.check_depth(depth)?;
        if self.peek_major()? != major {
            return Ok(None);
        }
        self.count()?;
        let head = self.byte()?;
        self.argument(head & 0x1f, major).map(Some)
    }

    /// The next item as a borrowed string if it is text; any other item is fully decoded
    /// (so its own errors surface) and yields `None`.
    pub(crate) fn text_or_skip(&mut self, depth: u32) -> Result<Option<&'a str>, CborError> {
        match self.head_if(depth, 3)? {
            Some(len) => self.text(len).map(Some),
            None => {
                self.item(depth)?;
                Ok(None)
            }
        }
    }

    /// As [`text_or_skip`](Self::text_or_skip), but text equal to one of `known` (ASCII
    /// names the caller matches on, such as envelope `type` tags) is returned as that name
    /// without a UTF-8 pass: equal bytes are valid UTF-8. Any other text is checked as usual,
    /// at the same point, so errors and their order do not change.
    pub(crate) fn text_or_skip_among(
        &mut self,
        depth: u32,
        known: &[&'static str],
    ) -> Result<Option<&'a str>, CborError> {
        match self.head_if(depth, 3)? {
            Some(len) => self.text_among(len, known).map(Some),
            None => {
                self.item(depth)?;
                Ok(None)
            }
        }
    }

    /// The next item, if it is text, handed to `parse` as raw bytes. `parse` must accept only
    /// valid UTF-8 (every caller accepts ASCII of a fixed form); when it returns `None` the
    /// text is checked as UTF-8 as usual, so an invalid string still fails with
    /// [`CborError::InvalidUtf8`] here. Yields `None` for a non-text item (decoded whole, as
    /// [`text_or_skip`](Self::text_or_skip) does), `Some(None)` for text `parse` refused.
    pub(crate) fn text_parsed_or_skip<T>(
        &mut self,
        depth: u32,
        parse: impl FnOnce(&[u8]) -> Option<T>,
    ) -> Result<Option<Option<T>>, CborError> {
        match self.head_if(depth, 3)? {
            Some(len) => {
                let raw = self.string_bytes(len, StringKind::Text)?;
                if let Some(t) = parse(raw) {
                    return Ok(Some(Some(t)));
                }
                utf8(raw)?;
                Ok(Some(None))
            }
            None => {
                self.item(depth)?;
                Ok(None)
            }
        }
    }

    /// If the next item is an array, consumes its head and returns its length; otherwise
    /// consumes nothing.
    pub(crate) fn array_len(&mut self, depth: u32) -> Result<Option<usize>, CborError> {
        match self.head_if(depth, 4)? {
            Some(len) => self.container_len(len, ContainerKind::Array).map(Some),
            None => Ok(None),
        }
    }

    /// If the next item is an unsigned integer, consumes it and returns it (at most
    /// 2^53 − 1, as the profile requires); otherwise consumes nothing.
    pub(crate) fn unsigned(&mut self, depth: u32) -> Result<Option<u64>, CborError> {
        // `argument` bounds a major-0 value to the safe range.
        self.head_if(depth, 0)
    }

    /// The next item as a boolean if it is one; any other item is decoded and yields `None`.
    pub(crate) fn bool_or_skip(&mut self, depth: u32) -> Result<Option<bool>, CborError> {
        self.check_depth(depth)?;
        match self.buf.get(self.pos) {
            Some(0xf4) => {
                self.count()?;
                self.pos += 1;
                Ok(Some(false))
            }
            Some(0xf5) => {
                self.count()?;
                self.pos += 1;
                Ok(Some(true))
            }
            _ => self.item(depth).map(|_| None),
        }
    }

    fn byte(&mut self) -> Result<u8, CborError> {
        let b = *self.buf.get(self.pos).ok_or(CborError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], CborError> {
        let end = self.pos.checked_add(n).ok_or(CborError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(CborError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn be(&mut self, n: usize) -> Result<u64, CborError> {
        let s = self.take(n)?;
        Ok(s.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    /// Reads the argument for additional information `ai` (0..=27) of a major 0..=5 head.
    fn argument(&mut self, ai: u8, major: u8) -> Result<u64, CborError> {
        match ai {
            0..=23 => Ok(u64::from(ai)),
            24 => self.be(1),
            25 => self.be(2),
            26 => self.be(4),
            27 => {
                let v = self.be(8)?;
                if v >> 32 > SAFE_HIGH_WORD_MAX {
                    return Err(CborError::ArgumentOutOfSafeRange);
                }
                Ok(v)
            }
            28..=30 => Err(CborError::MalformedAdditionalInformation),
            _ => Err(CborError::Indefinite {
                kind: match major {
                    2 => IndefiniteKind::ByteStrings,
                    3 => IndefiniteKind::TextStrings,
                    4 => IndefiniteKind::Arrays,
                    5 => IndefiniteKind::Maps,
                    _ => IndefiniteKind::Items,
                },
            }),
        }
    }

    fn string_bytes(&mut self, len: u64, kind: StringKind) -> Result<&'a [u8], CborError> {
        if len > u64::from(self.limits.max_byte_length) {
            return Err(CborError::StringLengthExceeded {
                kind,
                limit: self.limits.max_byte_length,
            });
        }
        // Within the limit, so it fits usize on every supported target.
        let len = usize::try_from(len).map_err(|_| CborError::Truncated)?;
        self.take(len)
    }

    fn text(&mut self, len: u64) -> Result<&'a str, CborError> {
        let raw = self.string_bytes(len, StringKind::Text)?;
        utf8(raw)
    }

    /// [`text`](Self::text), returning a name of `known` without a UTF-8 pass when the bytes
    /// are that name.
    fn text_among(&mut self, len: u64, known: &[&'static str]) -> Result<&'a str, CborError> {
        let raw = self.string_bytes(len, StringKind::Text)?;
        match known.iter().find(|k| k.as_bytes() == raw) {
            Some(name) => Ok(name),
            None => utf8(raw),
        }
    }

    fn container_len(&self, len: u64, kind: ContainerKind) -> Result<usize, CborError> {
        if len > u64::from(self.limits.max_container_length) {
            return Err(CborError::ContainerLengthExceeded {
                kind,
                limit: self.limits.max_container_length,
            });
        }
        usize::try_from(len).map_err(|_| CborError::Truncated)
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The integer of a major 0 (unsigned) or 1 (negative) head, within the safe range.
    fn integer(&mut self, major: u8, ai: u8) -> Result<Number, CborError> {
        let arg = self.argument(ai, major)?;
        let n = if major == 0 {
            // ≤ 2^53 − 1 after the 8-byte check, so the conversion is exact.
            i64::try_from(arg).map_err(|_| CborError::ArgumentOutOfSafeRange)?
        } else {
            -1 - i64::try_from(arg).map_err(|_| CborError::IntegerOutOfSafeRange)?
        };
        Number::from_i64(n).map_err(|_| CborError::IntegerOutOfSafeRange)
    }

    /// Consumes the next item's head byte (counting the item): its major type and additional
    /// information.
    fn next_head(&mut self, depth: u32) -> Result<(u8, u8), CborError> {
        self.check_depth(depth)?;
        let head = self.byte()?;
        self.count()?;
        Ok((head >> 5, head & 0x1f))
    }

    /// Reads past a byte string (valid CBOR, but it makes the payload not JSON).
    fn byte_string(&mut self, ai: u8) -> Result<(), CborError> {
        let len = self.argument(ai, 2)?;
        self.string_bytes(len, StringKind::Bytes)?;
        self.saw_bytes = true;
        Ok(())
    }

    /// Decodes the next item (any type) into a [`Value`].
    pub(crate) fn item(&mut self, depth: u32) -> Result<Value, CborError> {
        let (major, ai) = self.next_head(depth)?;
        match major {
            0 | 1 => self.integer(major, ai).map(Value::Number),
            2 => self.byte_string(ai).map(|()| Value::Null),
            3 => {
                let len = self.argument(ai, major)?;
                Ok(Value::String(self.text(len)?.to_owned()))
            }
            4 => {
                let len = self.argument(ai, major)?;
                let len = self.container_len(len, ContainerKind::Array)?;
                // Every element takes at least one byte: never reserve more than is present.
                let mut items = Vec::with_capacity(len.min(self.remaining()));
                for _ in 0..len {
                    items.push(self.item(depth + 1)?);
                }
                Ok(Value::Array(items))
            }
            5 => {
                let len = self.argument(ai, major)?;
                let len = self.container_len(len, ContainerKind::Map)?;
                self.map(len, depth)
            }
            6 => Err(CborError::Tag),
            _ => self.simple(ai),
        }
    }

    /// Reads past the next item exactly as [`item`](Self::item) would (same checks, same
    /// errors, same item count) without building a [`Value`].
    pub(crate) fn skip(&mut self, depth: u32) -> Result<(), CborError> {
        let (major, ai) = self.next_head(depth)?;
        match major {
            0 | 1 => self.integer(major, ai).map(drop),
            2 => self.byte_string(ai),
            3 => {
                let len = self.argument(ai, major)?;
                self.text(len).map(drop)
            }
            4 => {
                let len = self.argument(ai, major)?;
                let len = self.container_len(len, ContainerKind::Array)?;
                for _ in 0..len {
                    self.skip(depth + 1)?;
                }
                Ok(())
            }
            5 => {
                let len = self.argument(ai, major)?;
                let len = self.container_len(len, ContainerKind::Map)?;
                self.skip_map(len, depth)
            }
            6 => Err(CborError::Tag),
            _ => self.simple(ai).map(drop),
        }
    }

    fn skip_map(&mut self, len: usize, depth: u32) -> Result<(), CborError> {
        // As in `map`: small maps scan the keys seen so far (here on the stack), large ones
        // hash them.
        let mut small: [&'a str; SMALL_MAP] = [""; SMALL_MAP];
        let mut seen: Option<HashSet<&'a str>> = (len > SMALL_MAP).then(HashSet::new);
        for i in 0..len {
            let key = self.key(depth + 1)?;
            let duplicate = match &mut seen {
                Some(set) => !set.insert(key),
                None => {
                    let earlier = small.get(..i).unwrap_or_default();
                    let duplicate = earlier.contains(&key);
                    if let Some(slot) = small.get_mut(i) {
                        *slot = key;
                    }
                    duplicate
                }
            };
            if duplicate {
                return Err(CborError::DuplicateKey);
            }
            self.skip(depth + 1)?;
        }
        Ok(())
    }

    fn map(&mut self, len: usize, depth: u32) -> Result<Value, CborError> {
        // Each entry takes at least two bytes.
        let mut map = Map::with_capacity(len.min(self.remaining() / 2));
        // Small maps (every envelope) check duplicates by scanning; large ones hash.
        let mut seen: Option<HashSet<&'a str>> = (len > SMALL_MAP).then(HashSet::new);
        for _ in 0..len {
            let key = self.key(depth + 1)?;
            let duplicate = match &mut seen {
                Some(set) => !set.insert(key),
                None => map.contains_key(key),
            };
            if duplicate {
                return Err(CborError::DuplicateKey);
            }
            let value = self.item(depth + 1)?;
            map.push_unique(key, value);
        }
        Ok(Value::Map(map))
    }

    /// A map key: text read in place; anything else is decoded (so its own errors win)
    /// and then refused.
    pub(crate) fn key(&mut self, depth: u32) -> Result<&'a str, CborError> {
        self.key_among(depth, &[])
    }

    /// [`key`](Self::key), with the keys of `known` (the envelope's field names) returned
    /// without a UTF-8 pass, as [`text_or_skip_among`](Self::text_or_skip_among).
    pub(crate) fn key_among(
        &mut self,
        depth: u32,
        known: &[&'static str],
    ) -> Result<&'a str, CborError> {
        self.check_depth(depth)?;
        let head = *self.buf.get(self.pos).ok_or(CborError::Truncated)?;
        if head >> 5 == 3 {
            self.pos += 1;
            self.count()?;
            let len = self.argument(head & 0x1f, 3)?;
            return self.text_among(len, known);
        }
        self.item(depth)?;
        Err(CborError::NonStringKey)
    }

    fn simple(&mut self, ai: u8) -> Result<Value, CborError> {
        match ai {
            20 => Ok(Value::Bool(false)),
            21 => Ok(Value::Bool(true)),
            22 => Ok(Value::Null),
            27 => {
                let f = f64::from_bits(self.be(8)?);
                if !f.is_finite() {
                    return Err(CborError::NonFiniteFloat);
                }
                Number::from_f64(f)
                    .map(Value::Number)
                    .map_err(|_| CborError::IntegerOutOfSafeRange)
            }
            // Upstream's `readSimple` treats additional information 28–30 (`fc`–`fe`) like
            // any other unsupported simple value; only majors 0–5 call them malformed.
            31 => Err(CborError::Break),
            _ => Err(CborError::UnsupportedSimple),
        }
    }
}
