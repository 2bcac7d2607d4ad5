//! Server → client envelopes: `hello`, `hello_error`, `response`, `service_update`,
//! `attachment`.

use crate::error_code::ErrorCode;
use crate::ids::{Id, ServerId};
use crate::message::parse::{Fields, Invalid, type_of};
use crate::message::target::SessionTarget;
use crate::value::Value;

/// A protocol error body: `{code, message}`. Codes are opaque non-empty strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    /// Machine-readable code, e.g. `invalid_request`.
    pub code: Id,
    /// Human-readable message (may be empty).
    pub message: String,
}

impl WireError {
    /// Builds an error body. An empty `code` becomes `internal_error`, so a bug can never
    /// produce an invalid frame.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        let code =
            Id::new(code).unwrap_or_else(|_| Id::from_trusted(ErrorCode::InternalError.as_str()));
        Self {
            code,
            message: message.into(),
        }
    }

    /// Builds an error body with one of baton's typed codes.
    pub fn from_code(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code: Id::from_trusted(code.as_str()),
            message: message.into(),
        }
    }

    /// The code as one baton knows, or `None` for any other (still valid) code.
    pub fn kind(&self) -> Option<ErrorCode> {
        ErrorCode::parse(self.code.as_str())
    }

    /// Whether the code is `code`.
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code.as_str() == code.as_str()
    }

    pub(crate) fn parse(value: Value) -> Result<Self, Invalid> {
        let mut f = Fields::new(value, &["code", "message"])?;
        Ok(Self {
            code: f.id("code")?,
            message: f.string("message")?,
        })
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `ok:true` with no `result` key: the handler returned nothing.
    Void,
    /// `ok:true` with `result` (which may be `null`, distinct from [`Outcome::Void`]).
    Value(Value),
    /// `ok:false` with `error`.
    Error(WireError),
}

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The request's id.
    pub id: Id,
    /// Result or error.
    pub outcome: Outcome,
}

/// A provider update for one subscription. `update` is opaque here (chord gives it form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceUpdate {
    /// The client-chosen subscription id.
    pub subscription_id: Id,
    /// The wire update.
    pub update: Value,
}

/// A message a server sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMessage {
    /// `{"type":"hello","version":8,"serverId"}`.
    Hello {
        /// The logical server's identity.
        server_id: ServerId,
    },
    /// `{"type":"hello_error","error"}`: terminal, the last frame before close.
    HelloError(WireError),
    /// `{"type":"response","id","ok",("result"|"error")?}`.
    Response(Response),
    /// `{"type":"service_update","subscriptionId","update"}`.
    ServiceUpdate(ServiceUpdate),
    /// `{"type":"attachment","attachment":SessionTarget|null}`, out of band.
    Attachment(Option<SessionTarget>),
}

impl ServerMessage {
    pub(crate) fn parse(value: Value) -> Result<Self, Invalid> {
        match type_of(&value)? {
            "hello" => {
                let mut f = Fields::new(value, &["type", "version", "serverId"])?;
                f.tag()?;
                if f.req("version")?.as_u64() != Some(crate::version::PROTOCOL_VERSION) {
                    return Err(Invalid);
                }
                Ok(Self::Hello {
                    server_id: f.server_id("serverId")?,
                })
            }
            "hello_error" => {
                let mut f = Fields::new(value, &["type", "error"])?;
                f.tag()?;
                Ok(Self::HelloError(WireError::parse(f.req("error")?)?))
            }
            "response" => {
                let mut f = Fields::new(value, &["type", "id", "ok", "result", "error"])?;
                f.tag()?;
                let id = f.id("id")?;
                let ok = f.req("ok")?.as_bool().ok_or(Invalid)?;
                let result = f.take("result");
                let error = f.take("error");
                let outcome = match (ok, result, error) {
                    (true, None, None) => Outcome::Void,
                    (true, Some(v), None) => Outcome::Value(v),
                    (false, None, Some(e)) => Outcome::Error(WireError::parse(e)?),
                    _ => return Err(Invalid),
                };
                Ok(Self::Response(Response { id, outcome }))
            }
            "service_update" => {
                let mut f = Fields::new(value, &["type", "subscriptionId", "update"])?;
                f.tag()?;
                Ok(Self::ServiceUpdate(ServiceUpdate {
                    subscription_id: f.id("subscriptionId")?,
                    update: f.req("update")?,
                }))
            }
            "attachment" => {
                let mut f = Fields::new(value, &["type", "attachment"])?;
                f.tag()?;
                let attachment = match f.req("attachment")? {
                    Value::Null => None,
                    v => Some(SessionTarget::parse(v)?),
                };
                Ok(Self::Attachment(attachment))
            }
            _ => Err(Invalid),
        }
    }
}
