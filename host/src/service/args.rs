//! Argument parsing of service calls: the shapes method arguments must have, each refused
//! with `invalid_request` `Expected arguments <usage>` (or the limit it is over).

use baton_protocol::chord::{Path, PathSegment};
use baton_protocol::{Map, Value};
use baton_server::ServiceError;

use super::errors::invalid;
use crate::model_ref::ModelRef;
use crate::session::MAX_PROMPT_BYTES;

/// Checks that `args` has exactly `n` elements.
pub(crate) fn arity(args: &[Value], n: usize, usage: &str) -> Result<(), ServiceError> {
    if args.len() == n {
        Ok(())
    } else {
        Err(invalid(format!("Expected arguments {usage}")))
    }
}

/// `args[i]` as a string.
pub(crate) fn string_arg<'a>(
    args: &'a [Value],
    i: usize,
    usage: &str,
) -> Result<&'a str, ServiceError> {
    args.get(i)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("Expected arguments {usage}")))
}

/// `args[0]` as prompt, steering or follow-up text within [`MAX_PROMPT_BYTES`].
pub(crate) fn text_arg<'a>(args: &'a [Value], what: &str) -> Result<&'a str, ServiceError> {
    let text = string_arg(args, 0, "[text]")?;
    check_text_len(text, what)?;
    Ok(text)
}

/// Refuses `text` longer than [`MAX_PROMPT_BYTES`].
pub(crate) fn check_text_len(text: &str, what: &str) -> Result<(), ServiceError> {
    if text.len() > MAX_PROMPT_BYTES {
        return Err(invalid(format!(
            "{what} text is {} bytes; the limit is {MAX_PROMPT_BYTES} bytes",
            text.len()
        )));
    }
    Ok(())
}

/// A non-negative integer argument.
pub(crate) fn index_arg(value: &Value, usage: &str) -> Result<usize, ServiceError> {
    value
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| invalid(format!("Expected arguments {usage}")))
}

/// A path argument: an array of keys and indexes, as listed under an item's `clipped`.
pub(crate) fn path_arg(value: &Value, usage: &str) -> Result<Path, ServiceError> {
    let bad = || invalid(format!("Expected arguments {usage}"));
    value
        .as_array()
        .ok_or_else(bad)?
        .iter()
        .map(|s| match s {
            Value::String(k) => Ok(PathSegment::Key(k.clone())),
            other => other.as_u64().map(PathSegment::Index).ok_or_else(bad),
        })
        .collect()
}

/// `{"provider", "id"}`.
pub(crate) fn model_arg(value: &Value) -> Result<ModelRef, ServiceError> {
    let field = |k: &str| {
        value
            .as_map()
            .and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    match (field("provider"), field("id"), value.as_map().map(Map::len)) {
        (Some(provider), Some(id), Some(2)) => Ok(ModelRef::new(provider, id)),
        _ => Err(invalid(r#"Expected arguments [{"provider", "id"}]"#)),
    }
}

#[cfg(test)]
mod tests {
    use baton_protocol::ErrorCode;

    use super::*;

    #[test]
    fn argument_errors_are_invalid_requests() {
        let args = [Value::from(1u32)];
        let e = string_arg(&args, 0, "[text]").unwrap_err();
        assert!(e.is(ErrorCode::InvalidRequest));
        assert_eq!(e.to_wire().message, "Expected arguments [text]");
        assert!(
            arity(&args, 2, "[a, b]")
                .unwrap_err()
                .is(ErrorCode::InvalidRequest)
        );
    }
}
