//! Client → server envelopes: `hello`, `request`, `cancel`.

use crate::ids::Id;
use crate::message::parse::{Fields, Invalid, type_of};
use crate::message::target::Target;
use crate::value::Value;

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
    /// `{"type":"hello","version":N}`: any non-negative safe integer is a valid frame; only
    /// negotiation refuses versions other than 8.
    Hello {
        /// Offered protocol version.
        version: u64,
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
            version: crate::version::PROTOCOL_VERSION,
        }
    }

    pub(crate) fn parse(value: Value) -> Result<Self, Invalid> {
        match type_of(&value)? {
            "hello" => {
                let mut f = Fields::new(value, &["type", "version"])?;
                f.tag()?;
                let version = f.req("version")?.as_u64().ok_or(Invalid)?;
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
