//! The CBOR encoder: preferred (shortest) heads, definite lengths, float64 only for
//! non-integral numbers, map keys in the order given.

use bytes::BufMut;

use crate::cbor::error::{CborError, ContainerKind, StringKind};
use crate::limits::CborLimits;
use crate::value::{Map, Value};

/// Appends the CBOR encoding of `value` to `out`.
///
/// On error `out` may hold a partial item; callers that reuse the buffer truncate it.
///
/// # Errors
/// A string, container, depth or total length beyond `limits`, with upstream's message.
pub fn encode_value<B: BufMut>(
    value: &Value,
    out: &mut B,
    limits: &CborLimits,
) -> Result<(), CborError> {
    let mut w = Writer::new(out, limits);
    w.value(value, 0)?;
    w.finish()
}

/// Encodes `value` into a fresh vector.
///
/// # Errors
/// As [`encode_value`].
pub fn to_vec(value: &Value, limits: &CborLimits) -> Result<Vec<u8>, CborError> {
    let mut out = Vec::new();
    encode_value(value, &mut out, limits)?;
    Ok(out)
}

/// A byte-counting CBOR writer. The envelope encoder drives it directly so typed messages
/// are written without building an intermediate [`Value`].
#[derive(Debug)]
pub(crate) struct Writer<'b, 'l, B: BufMut> {
    out: &'b mut B,
    written: usize,
    limits: &'l CborLimits,
}

impl<'b, 'l, B: BufMut> Writer<'b, 'l, B> {
    pub(crate) fn new(out: &'b mut B, limits: &'l CborLimits) -> Self {
        Self {
            out,
            written: 0,
            limits,
        }
    }

    /// Checks the total length; call once after the last item.
    pub(crate) fn finish(self) -> Result<(), CborError> {
        if self.written > self.limits.max_byte_length as usize {
            return Err(CborError::ByteLengthExceeded {
                limit: self.limits.max_byte_length,
            });
        }
        Ok(())
    }

    pub(crate) fn head(&mut self, major: u8, n: u64) {
        let m = major << 5;
        if n < 24 {
            // n < 24 fits the low five bits.
            self.out.put_u8(m | n as u8);
            self.written += 1;
        } else if let Ok(b) = u8::try_from(n) {
            self.out.put_slice(&[m | 24, b]);
            self.written += 2;
        } else if let Ok(h) = u16::try_from(n) {
            self.out.put_u8(m | 25);
            self.out.put_u16(h);
            self.written += 3;
        } else if let Ok(w) = u32::try_from(n) {
            self.out.put_u8(m | 26);
            self.out.put_u32(w);
            self.written += 5;
        } else {
            self.out.put_u8(m | 27);
            self.out.put_u64(n);
            self.written += 9;
        }
    }

    pub(crate) fn text(&mut self, s: &str) -> Result<(), CborError> {
        if s.len() > self.limits.max_byte_length as usize {
            return Err(CborError::StringLengthExceeded {
                kind: StringKind::Text,
                limit: self.limits.max_byte_length,
            });
        }
        self.head(3, s.len() as u64);
        self.out.put_slice(s.as_bytes());
        self.written += s.len();
        Ok(())
    }

    /// Copies an already-encoded item verbatim (used for shared, pre-encoded payloads).
    pub(crate) fn raw(&mut self, bytes: &[u8]) {
        self.out.put_slice(bytes);
        self.written += bytes.len();
    }

    pub(crate) fn bool(&mut self, b: bool) {
        self.out.put_u8(if b { 0xf5 } else { 0xf4 });
        self.written += 1;
    }

    pub(crate) fn null(&mut self) {
        self.out.put_u8(0xf6);
        self.written += 1;
    }

    pub(crate) fn uint(&mut self, n: u64) {
        self.head(0, n);
    }

    pub(crate) fn map_head(&mut self, len: usize) -> Result<(), CborError> {
        self.container_head(5, len, ContainerKind::Map)
    }

    pub(crate) fn array_head(&mut self, len: usize) -> Result<(), CborError> {
        self.container_head(4, len, ContainerKind::Array)
    }

    fn container_head(
        &mut self,
        major: u8,
        len: usize,
        kind: ContainerKind,
    ) -> Result<(), CborError> {
        if len > self.limits.max_container_length as usize {
            return Err(CborError::ContainerLengthExceeded {
                kind,
                limit: self.limits.max_container_length,
            });
        }
        self.head(major, len as u64);
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

    pub(crate) fn value(&mut self, value: &Value, depth: u32) -> Result<(), CborError> {
        self.check_depth(depth)?;
        match value {
            Value::Null => self.null(),
            Value::Bool(b) => self.bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) if i >= 0 => self.head(0, i.unsigned_abs()),
                Some(i) => self.head(1, (-1 - i).unsigned_abs()),
                None => {
                    self.out.put_u8(0xfb);
                    self.out.put_f64(n.as_f64());
                    self.written += 9;
                }
            },
            Value::String(s) => self.text(s)?,
            Value::Array(items) => {
                self.array_head(items.len())?;
                for item in items {
                    self.value(item, depth + 1)?;
                }
            }
            Value::Map(map) => self.map(map, depth)?,
        }
        Ok(())
    }

    /// Map keys are not depth-checked, as upstream (they go straight to the text writer).
    pub(crate) fn map(&mut self, map: &Map, depth: u32) -> Result<(), CborError> {
        self.map_head(map.len())?;
        for (k, v) in map.iter() {
            self.text(k)?;
            self.value(v, depth + 1)?;
        }
        Ok(())
    }
}
