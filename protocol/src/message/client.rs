//! Client → server envelopes: `hello`, `request`, `cancel`.

use std::fmt;

use crate::ids::Id;
use crate::message::parse::{Fields, Invalid, type_of};
use crate::message::target::Target;
use crate::value::{MAX_SAFE_INTEGER, Number, Value};

/// The version a client's hello offers.
///
/// Upstream's schema is `Type.Integer({ minimum: 0 })`, which JavaScript's `-0` passes
/// (`Number.isInteger(-0)` and `-0 >= 0` both hold). So a valid hello carries a
/// non-negative safe integer **or `-0`**, which upstream's encoder writes as the float64
/// `fb8000000000000000`. A `-0` offer is kept as such (it re-encodes byte-identically) and
/// is otherwise version 0: it displays as `0`, as JavaScript's `${-0}` does, and is not
/// version 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HelloVersion {
    value: u64,
    negative_zero: bool,
}

impl HelloVersion {
    /// The version this crate speaks (8).
    pub const CURRENT: Self = Self {
        value: crate::version::PROTOCOL_VERSION,
        negative_zero: false,
    };

    /// `-0`, as a JavaScript client may send it.
    pub const NEGATIVE_ZERO: Self = Self {
        value: 0,
        negative_zero: true,
    };

    /// A version; `None` above 2^53 − 1, which no valid frame carries.
    pub fn new(value: u64) -> Option<Self> {
        (value <= MAX_SAFE_INTEGER.unsigned_abs()).then_some(Self {
            value,
            negative_zero: false,
        })
    }

    /// The version as a number (`-0` is 0).
    pub fn get(self) -> u64 {
        self.value
    }

    /// True for a `-0` offer.
    pub fn is_negative_zero(self) -> bool {
        self.negative_zero
    }

    /// The wire number: an integer, or the float `-0`.
    pub fn to_number(self) -> Number {
        if self.negative_zero {
            Number::from_f64(-0.0).unwrap_or_else(|_| Number::from(0u8))
        } else {
            // At most 2^53 − 1 by construction.
            i64::try_from(self.value)
                .ok()
                .and_then(|v| Number::from_i64(v).ok())
                .unwrap_or_else(|| Number::from(0u8))
        }
    }

    /// The offer a valid hello's `version` holds: a non-negative integer or `-0`.
    pub(crate) fn from_value(value: &Value) -> Option<Self> {
        let Value::Number(n) = value else {
            return None;
        };
        if let Some(v) = n.as_u64() {
            return Self::new(v);
        }
        let f = n.as_f64();
        (f == 0.0 && f.is_sign_negative()).then_some(Self::NEGATIVE_ZERO)
    }
}

impl From<u32> for HelloVersion {
    fn from(value: u32) -> Self {
        Self {
            value: u64::from(value),
            negative_zero: false,
        }
    }
}

impl PartialEq<u64> for HelloVersion {
    fn eq(&self, other: &u64) -> bool {
        self.value == *other
    }
}

impl fmt::Display for HelloVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value)
    }
}

/// A routed call. `call` is opaque here; the chord layer gives it meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Request id, unique among this connection's active requests.
    pub id: Id,
    /// Where the call goes.
    pub target: Target,
    /// The opaque call payload (a chord `ServiceCall` in practice).
    pub call: Value,
}

/// Asks the server to abort an active request. Never answered itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// The request to abort.
    pub id: Id,
    /// Must equal the request's target.
    pub target: Target,
}

/// A message a client sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientMessage {
    /// `{"type":"hello","version":N}`: any non-negative safe integer (or `-0`, see
    /// [`HelloVersion`]) is a valid frame; only negotiation refuses versions other than 8.
    Hello {
        /// Offered protocol version.
        version: HelloVersion,
    },
    /// `{"type":"request","id","target","call"}`.
    Request(Request),
    /// `{"type":"cancel","id","target"}`.
    Cancel(Cancel),
}

impl ClientMessage {
    /// The hello this implementation sends.
    pub fn hello() -> Self {
        Self::Hello {
            version: HelloVersion::CURRENT,
        }
    }

    pub(crate) fn parse(value: Value) -> Result<Self, Invalid> {
        match type_of(&value)? {
            "hello" => {
                let mut f = Fields::new(value, &["type", "version"])?;
                f.tag()?;
                let version = HelloVersion::from_value(&f.req("version")?).ok_or(Invalid)?;
                Ok(Self::Hello { version })
            }
            "request" => {
                let mut f = Fields::new(value, &["type", "id", "target", "call"])?;
                f.tag()?;
                Ok(Self::Request(Request {
                    id: f.id("id")?,
                    target: Target::parse(f.req("target")?)?,
                    call: f.req("call")?,
                }))
            }
            "cancel" => {
                let mut f = Fields::new(value, &["type", "id", "target"])?;
                f.tag()?;
                Ok(Self::Cancel(Cancel {
                    id: f.id("id")?,
                    target: Target::parse(f.req("target")?)?,
                }))
            }
            _ => Err(Invalid),
        }
    }
}
