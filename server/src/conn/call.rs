//! A request's `call`, parsed by moving its parts out of the decoded request value.
//!
//! [`ServiceCall::parse`] borrows the value, so it copies `serviceId` and `member` and
//! deep-clones `args`. The connection owns the decoded request and would drop the value
//! right after, so it moves them out instead: no allocation, no copy of the arguments.
//!
//! The checks and their order are those of [`ServiceCall::parse`] (upstream
//! `parseServiceCall`): a map; exactly the keys `serviceId`, `member`, `args` and optionally
//! `instance`; non-empty `serviceId` and `member` strings and an `args` array; then the
//! instance address. The tests hold the two to the same result on every shape.

use baton_protocol::Value;
use baton_protocol::chord::{ChordError, InstanceAddress, ServiceCall, Subject};

/// Parses `value` as a [`ServiceCall`], moving its strings and arguments out.
///
/// # Errors
/// As [`ServiceCall::parse`]: `Invalid service call` for a bad shape, id, member or args;
/// `Invalid service instance address` for a bad `instance`.
pub(crate) fn parse_call(value: Value) -> Result<ServiceCall, ChordError> {
    let invalid = || ChordError::Invalid(Subject::ServiceCall);
    let Value::Map(mut map) = value else {
        return Err(invalid());
    };
    let required = ["serviceId", "member", "args"];
    let missing = required.iter().any(|key| !map.contains_key(key));
    let extra = map
        .keys()
        .any(|key| !required.contains(&key) && key != "instance");
    if missing || extra {
        return Err(invalid());
    }
    let id = |key| matches!(map.get(key), Some(Value::String(s)) if !s.is_empty());
    if !(id("serviceId") && id("member") && matches!(map.get("args"), Some(Value::Array(_)))) {
        return Err(invalid());
    }
    let instance = map
        .get("instance")
        .map(InstanceAddress::parse)
        .transpose()?;
    // Checked above: both are strings and `args` is an array; the defaults are never used.
    let mut take_string = |key| match map.get_mut(key) {
        Some(Value::String(s)) => std::mem::take(s),
        _ => String::new(),
    };
    let service_id = take_string("serviceId");
    let member = take_string("member");
    let args = match map.get_mut("args") {
        Some(Value::Array(args)) => std::mem::take(args),
        _ => Vec::new(),
    };
    Ok(ServiceCall {
        service_id,
        instance,
        member,
        args,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    /// Every shape the borrowing parse distinguishes, valid and not, including those where
    /// two checks fail at once (the first in upstream order must win).
    const SHAPES: &[&str] = &[
        r#"{"serviceId":"s","member":"m","args":[]}"#,
        r#"{"args":[{"a":[1,2,{"b":null}]},"x"],"member":"m","serviceId":"s"}"#,
        r#"{"serviceId":"s","instance":{"key":"k","generation":2},"member":"m","args":[1]}"#,
        r#"{"serviceId":"","member":"m","args":[]}"#,
        r#"{"serviceId":"s","member":"","args":[]}"#,
        r#"{"serviceId":1,"member":"m","args":[]}"#,
        r#"{"serviceId":"s","member":null,"args":[]}"#,
        r#"{"serviceId":"s","member":"m","args":{}}"#,
        r#"{"serviceId":"s","member":"m"}"#,
        r#"{"serviceId":"s","args":[]}"#,
        r#"{"serviceId":"s","member":"m","args":[],"extra":true}"#,
        r#"{"serviceId":"s","member":"m","args":[],"instance":{"key":"k","generation":1},"extra":1}"#,
        r#"{"arbitrary":"string"}"#,
        r#"{}"#,
        r#"["s","m",[]]"#,
        r#""s""#,
        r#"null"#,
        r#"{"serviceId":"s","instance":{"key":"k","generation":0},"member":"m","args":[]}"#,
        r#"{"serviceId":"s","instance":null,"member":"m","args":[]}"#,
        r#"{"serviceId":"s","instance":{"key":"","generation":1},"member":"m","args":[]}"#,
        r#"{"serviceId":"","instance":{"key":"k","generation":0},"member":"m","args":[]}"#,
        r#"{"serviceId":"s","instance":{"key":"k","generation":0},"member":"m","args":{}}"#,
        r#"{"serviceId":"s","instance":{"key":"k"},"member":"m"}"#,
    ];

    #[test]
    fn the_owned_parse_gives_what_the_borrowing_parse_gives_for_every_shape() {
        for shape in SHAPES {
            let value = v(shape);
            assert_eq!(
                parse_call(value.clone()),
                ServiceCall::parse(&value),
                "{shape}"
            );
        }
    }

    #[test]
    fn the_owned_parse_moves_the_arguments_whole() {
        let call = parse_call(v(
            r#"{"serviceId":"pi.models","member":"list","args":[{"deep":[1,{"x":"y"}]},null]}"#,
        ))
        .unwrap();
        assert_eq!(call.service_id, "pi.models");
        assert_eq!(call.member, "list");
        assert_eq!(call.instance, None);
        assert_eq!(
            Value::Array(call.args).to_json(),
            r#"[{"deep":[1,{"x":"y"}]},null]"#
        );
    }
}
