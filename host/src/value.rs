//! Conversion of runtime types to the protocol's [`baton_protocol::Value`] (what the service
//! layer publishes).
//!
//! Goes through JSON text, which keeps key order: structs serialise their fields in
//! declaration order and opaque values (tool arguments, details) are already order-keeping
//! [`baton_protocol::Value`]s.

use baton_protocol::Value;
use serde::Serialize;

/// A value the wire cannot carry (an integer beyond ±(2^53−1), say).
#[derive(Debug, thiserror::Error)]
#[error("value cannot be represented as a protocol value")]
pub struct ValueError(#[source] serde_json::Error);

/// `value` as a protocol [`Value`].
///
/// # Errors
/// [`ValueError`] if it holds something strict JSON cannot carry.
pub fn to_protocol_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, ValueError> {
    let text = serde_json::to_string(value).map_err(ValueError)?;
    Value::from_json(&text).map_err(ValueError)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{AgentMessage, UserMessage};

    #[test]
    fn messages_convert_with_key_order_kept() {
        let v = to_protocol_value(&AgentMessage::User(UserMessage::text("hi", 3))).unwrap();
        assert_eq!(
            v.to_json(),
            r#"{"role":"user","content":[{"type":"text","text":"hi"}],"timestamp":3}"#
        );
    }
}
