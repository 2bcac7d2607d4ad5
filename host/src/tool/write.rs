//! `write`: create or overwrite a file (parent directories are created).

use baton_protocol::Value;

use super::{ObjectSchema, Schema, Tool, ToolContext, ToolError, ToolOutput, str_arg};
use crate::BoxFuture;

/// The `write` tool.
#[derive(Debug)]
pub struct WriteTool {
    schema: ObjectSchema,
}

impl WriteTool {
    /// The tool with its schema.
    pub fn new() -> Self {
        Self {
            schema: ObjectSchema::new()
                .required(
                    "path",
                    Schema::String,
                    "Path of the file, relative to the working directory",
                )
                .required("content", Schema::String, "The complete new file content"),
        }
    }
}

impl Default for WriteTool {
    fn default() -> Self {
        Self::new()
    }
}

impl Tool for WriteTool {
    fn name(&self) -> &str {
        "write"
    }

    fn description(&self) -> &str {
        "Write content to a file, creating it and its parent directories if needed and overwriting it otherwise."
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
            let content = str_arg(arguments, "content")?;
            let full = ctx.resolve(path);
            if let Some(parent) = full.parent() {
                tokio::fs::create_dir_all(parent)
                    .await
                    .map_err(|e| ToolError::io(parent, &e))?;
            }
            tokio::fs::write(&full, content.as_bytes())
                .await
                .map_err(|e| ToolError::io(&full, &e))?;
            Ok(ToolOutput::text(format!(
                "Successfully wrote {} bytes to {path}",
                content.len()
            )))
        })
    }
}
