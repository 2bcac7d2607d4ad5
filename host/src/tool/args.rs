//! Reading the arguments a tool's schema already validated.

use std::path::{Path, PathBuf};

use baton_protocol::Value;

use super::error::ToolError;
use super::path::FileAccess;
use crate::BoxFuture;

/// The one file a file tool's call touches: its `path` argument, resolved by `access`.
pub(crate) fn path_arg_touched<'a>(
    access: &'a FileAccess,
    arguments: &'a Value,
    cwd: &'a Path,
) -> BoxFuture<'a, Option<Vec<PathBuf>>> {
    Box::pin(async move {
        let path = str_arg(arguments, "path").ok()?;
        Some(vec![access.order_key(cwd, path).await])
    })
}

/// A string argument that validation guaranteed (or an error naming it).
pub(crate) fn str_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    args.as_map()
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::new(format!("missing string argument `{key}`")))
}

/// An optional non-negative integer argument.
pub(crate) fn opt_u64_arg(args: &Value, key: &str) -> Option<u64> {
    args.as_map()
        .and_then(|m| m.get(key))
        .and_then(Value::as_u64)
}
