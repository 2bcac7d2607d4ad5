//! A successful answer.

use baton_protocol::Value;

/// A successful answer: void is distinct from `null`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The handler returned nothing (`ok:true` without `result`).
    Void,
    /// The handler returned a value (possibly `null`).
    Value(Value),
}

impl Reply {
    /// The value, treating void as `null`.
    pub fn into_value(self) -> Value {
        match self {
            Self::Void => Value::Null,
            Self::Value(v) => v,
        }
    }
}
