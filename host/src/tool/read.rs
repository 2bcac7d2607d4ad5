//! `read`: read a text file, optionally a window of lines.

use baton_protocol::Value;

use super::{ObjectSchema, Schema, Tool, ToolContext, ToolError, ToolOutput, opt_u64_arg, str_arg};
use crate::BoxFuture;

/// Most lines one call returns.
pub(crate) const DEFAULT_MAX_LINES: usize = 2000;
/// Most bytes one call returns.
pub(crate) const DEFAULT_MAX_BYTES: usize = 50 * 1024;

/// The `read` tool.
#[derive(Debug)]
pub struct ReadTool {
    schema: ObjectSchema,
}

impl ReadTool {
    /// The tool with its schema.
    pub fn new() -> Self {
        Self {
            schema: ObjectSchema::new()
                .required(
                    "path",
                    Schema::String,
                    "Path of the file, relative to the working directory",
                )
                .optional(
                    "offset",
                    Schema::integer_min(1),
                    "First line to read (1-based)",
                )
                .optional(
                    "limit",
                    Schema::integer_min(1),
                    "Maximum number of lines to read",
                ),
        }
    }
}

impl Default for ReadTool {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for ReadTool {
    fn name(&self) -> &str {
        "read"
    }

    fn description(&self) -> &str {
        "Read a text file. Output is limited to 2000 lines or 50 KB; use offset and limit to page through larger files."
    }

    fn parameters(&self) -> &ObjectSchema {
        &self.schema
    }

    fn execute<'a>(
        &'a self,
        arguments: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let path = str_arg(arguments, "path")?;
            let full = ctx.resolve(path);
            let bytes = tokio::fs::read(&full)
                .await
                .map_err(|e| ToolError::io(&full, &e))?;
            if bytes.iter().take(8192).any(|b| *b == 0) {
                return Err(ToolError::new(format!(
                    "{path} appears to be a binary file"
                )));
            }
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            let total = lines.len();
            let offset = opt_u64_arg(arguments, "offset")
                .and_then(|o| usize::try_from(o).ok())
                .unwrap_or(1)
                .max(1);
            if offset > total.max(1) {
                return Err(ToolError::new(format!(
                    "offset {offset} is beyond the end of {path} ({total} lines)"
                )));
            }
            let limit = opt_u64_arg(arguments, "limit")
                .and_then(|l| usize::try_from(l).ok())
                .unwrap_or(DEFAULT_MAX_LINES)
                .min(DEFAULT_MAX_LINES);
            let mut out = String::new();
            let mut shown = 0;
            for line in lines.iter().skip(offset - 1).take(limit) {
                if out.len() + line.len() + 1 > DEFAULT_MAX_BYTES && shown > 0 {
                    break;
                }
                out.push_str(line);
                out.push('\n');
                shown += 1;
            }
            let last = offset - 1 + shown;
            if last < total {
                out.push_str(&format!(
                    "\n[Showing lines {offset}-{last} of {total}. Use offset={} to continue.]",
                    last + 1
                ));
            } else if out.ends_with('\n') && !text.ends_with('\n') {
                out.pop();
            }
            Ok(ToolOutput::text(out))
        })
    }
}
