//! `write`: create or overwrite a file (parent directories are created).
//!
//! The path is confined to the workspace (see [`FileAccess`]); the file is replaced atomically
//! (temporary file + rename, keeping an existing file's permission bits) under the file's lock.

use std::path::{Path, PathBuf};

use baton_protocol::Value;

use super::path::FileAccess;
use super::{
    ObjectSchema, Schema, Tool, ToolContext, ToolError, ToolOutput, path_arg_touched, str_arg,
};
use crate::BoxFuture;

/// The `write` tool.
#[derive(Debug)]
pub struct WriteTool {
    schema: ObjectSchema,
    access: FileAccess,
}

impl WriteTool {
    /// The tool with its schema, confined by `access` (shared with the session's other file
    /// tools so they lock the same files).
    pub fn new(access: FileAccess) -> Self {
        Self {
            access,
            schema: ObjectSchema::new()
                .required(
                    "path",
                    Schema::String,
                    "Path of the file, relative to the workspace (the session's working directory)",
                )
                .required("content", Schema::String, "The complete new file content"),
        }
    }
}

impl Default for WriteTool {
    fn default() -> Self {
        Self::new(FileAccess::default())
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

    fn touched_paths<'a>(
        &'a self,
        arguments: &'a Value,
        cwd: &'a Path,
    ) -> BoxFuture<'a, Option<Vec<PathBuf>>> {
        path_arg_touched(&self.access, arguments, cwd)
    }

    fn execute<'a>(
        &'a self,
        arguments: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let path = str_arg(arguments, "path")?;
            let content = str_arg(arguments, "content")?;
            let key = self.access.order_key(&ctx.cwd, path).await;
            let _lock = self.access.locks().lock(&key).await;
            let (placed, mode) = self.access.place_new(&ctx.cwd, path).await?;
            placed.replace(content.as_bytes().to_vec(), mode).await?;
            Ok(ToolOutput::text(format!(
                "Successfully wrote {} bytes to {path}",
                content.len()
            )))
        })
    }
}
