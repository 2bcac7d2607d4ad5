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
///
/// Limit order is upstream's (`packages/protocol/src/cbor/encoder.ts`): its `CborWriter`
/// refuses any write that would take the running length past `maxByteLength`, so a message
/// fails with whichever limit it reaches first *in write order*, and the checks made before a
/// write (depth on entering an item, then a string's own length or a container's length) run
/// only if every earlier write fitted. Here writes are infallible: a write that does not fit
/// is counted but not copied (so `out` never gets more than `max_byte_length` bytes), and every
/// check that can fail, as well as [`finish`](Self::finish), first reports an overrun. The
/// first error is therefore the one upstream throws, for one compare per write.
#[derive(Debug)]
pub(crate) struct Writer<'b, 'l, B: BufMut> {
    out: &'b mut B,
    /// Bytes written or, past `max`, that would have been.
    written: usize,
    /// `limits.max_byte_length`.
    max: usize,
    limits: &'l CborLimits,
    /// What upstream would have thrown inside a [`raw`](Self::raw) run that went past `max`
    /// (set only then, so only while `written > max`).
    refused: Option<CborError>,
}

impl<'b, 'l, B: BufMut> Writer<'b, 'l, B> {
    pub(crate) fn new(out: &'b mut B, limits: &'l CborLimits) -> Self {
        Self {
            out,
            written: 0,
            max: limits.max_byte_length as usize,
            limits,
            refused: None,
        }
    }

    /// Checks the total length; call once after the last item.
    pub(crate) fn finish(self) -> Result<(), CborError> {
        self.overrun()
    }

    /// Upstream's `ensureCapacity` failure, reported at the first check after the write that
    /// went past the limit (no other check runs in between, so nothing can pre-empt it).
    #[inline]
    fn overrun(&self) -> Result<(), CborError> {
        if self.written > self.max {
            return Err(self
                .refused
                .clone()
                .unwrap_or(CborError::ByteLengthExceeded {
                    limit: self.limits.max_byte_length,
                }));
        }
        Ok(())
    }

    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = self.written + bytes.len();
        if end <= self.max {
            self.out.put_slice(bytes);
        }
        self.written = end;
    }

    #[inline]
    fn put_u8(&mut self, b: u8) {
        if self.written < self.max {
            self.out.put_u8(b);
        }
        self.written += 1;
    }

    pub(crate) fn head(&mut self, major: u8, n: u64) {
        let m = major << 5;
        if n < 24 {
            // n < 24 fits the low five bits.
            self.put_u8(m | n as u8);
        } else if let Ok(b) = u8::try_from(n) {
            self.put(&[m | 24, b]);
        } else if let Ok(h) = u16::try_from(n) {
            let [a, b] = h.to_be_bytes();
            self.put(&[m | 25, a, b]);
        } else if let Ok(w) = u32::try_from(n) {
            let [a, b, c, d] = w.to_be_bytes();
            self.put(&[m | 26, a, b, c, d]);
        } else {
            let mut buf = [m | 27; 9];
            buf[1..].copy_from_slice(&n.to_be_bytes());
            self.put(&buf);
        }
    }

    /// Upstream's `encodeText`: the string's own length is checked (once every earlier write
    /// fitted), then its head and bytes are written.
    pub(crate) fn text(&mut self, s: &str) -> Result<(), CborError> {
        self.overrun()?;
        if s.len() > self.max {
            return Err(CborError::StringLengthExceeded {
                kind: StringKind::Text,
                limit: self.limits.max_byte_length,
            });
        }
        self.head(3, s.len() as u64);
        self.put(s.as_bytes());
        Ok(())
    }

    /// Copies already-encoded items verbatim (constant envelope runs and shared, pre-encoded
    /// payloads). Upstream writes the same items one at a time, checking each string's and
    /// container's own length first; so when a run does not fit (the cold path), the run is
    /// walked to find which of those checks, or which write, upstream refuses first. With a
    /// frame limit below ~15 that is a key or type name longer than the limit.
    pub(crate) fn raw(&mut self, bytes: &[u8]) {
        if self.written <= self.max && self.written + bytes.len() > self.max {
            self.refused = Some(self.first_refusal(bytes));
        }
        self.put(bytes);
    }

    /// The error upstream throws writing `run` item by item from `self.written`, given that
    /// the whole run does not fit. Heads are read leniently: the run is our own output, and
    /// anything unreadable counts as a write past the limit.
    #[cold]
    fn first_refusal(&self, run: &[u8]) -> CborError {
        let too_long = CborError::ByteLengthExceeded {
            limit: self.limits.max_byte_length,
        };
        let mut pos = 0usize;
        while let Some(&initial) = run.get(pos) {
            let (major, info) = (initial >> 5, initial & 0x1f);
            let arg_len = match info {
                0..=23 => 0,
                24 => 1,
                25 => 2,
                26 => 4,
                27 => 8,
                _ => return too_long,
            };
            let Some(arg_bytes) = run.get(pos + 1..pos + 1 + arg_len) else {
                return too_long;
            };
            let arg = if arg_len == 0 {
                u64::from(info)
            } else {
                arg_bytes.iter().fold(0u64, |n, &b| n << 8 | u64::from(b))
            };
            // A float's 8 bytes are its head's argument; a string's bytes follow its head.
            let mut end = pos + 1 + arg_len;
            match major {
                2 | 3 => {
                    if arg > self.limits.max_byte_length.into() {
                        let kind = if major == 2 {
                            StringKind::Bytes
                        } else {
                            StringKind::Text
                        };
                        return CborError::StringLengthExceeded {
                            kind,
                            limit: self.limits.max_byte_length,
                        };
                    }
                    // `arg` is at most a u32 here.
                    end += arg as usize;
                }
                4 | 5 if arg > self.limits.max_container_length.into() => {
                    let kind = if major == 4 {
                        ContainerKind::Array
                    } else {
                        ContainerKind::Map
                    };
                    return CborError::ContainerLengthExceeded {
                        kind,
                        limit: self.limits.max_container_length,
                    };
                }
                _ => {}
            }
            if self.written + end > self.max {
                return too_long;
            }
            pos = end;
        }
        too_long
    }

    pub(crate) fn bool(&mut self, b: bool) {
        self.put_u8(if b { 0xf5 } else { 0xf4 });
    }

    pub(crate) fn null(&mut self) {
        self.put_u8(0xf6);
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
        self.overrun()?;
        if len > self.limits.max_container_length as usize {
            return Err(CborError::ContainerLengthExceeded {
                kind,
                limit: self.limits.max_container_length,
            });
        }
        self.head(major, len as u64);
        Ok(())
    }

    /// Upstream's first check on entering any item (after an overrun, which it would have
    /// thrown at the write itself).
    fn check_depth(&self, depth: u32) -> Result<(), CborError> {
        self.overrun()?;
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
                    let mut buf = [0xfb; 9];
                    buf[1..].copy_from_slice(&n.as_f64().to_be_bytes());
                    self.put(&buf);
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
