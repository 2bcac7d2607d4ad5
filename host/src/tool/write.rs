//! `write`: create or overwrite a file (parent directories are created).
//!
//! The path is confined to the workspace (see [`FileAccess`]); the file is replaced atomically
//! (temporary file + rename, keeping an existing file's permission bits) under the file's lock.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use baton_protocol::Value;

use super::path::{FileAccess, not_regular, replace_file};
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
            let resolved = self.access.creatable(&ctx.cwd, path).await?;
            if let Some(parent) = resolved.real.parent() {
                tokio::fs::create_dir_all(parent)
                    .await
                    .map_err(|e| ToolError::io(parent, &e))?;
            }
            // The directories may have been created through a symlink planted meanwhile.
            let resolved = self.access.creatable(&ctx.cwd, path).await?;
            let _lock = self.access.locks().lock(&resolved.real).await;
            let mode = match tokio::fs::symlink_metadata(&resolved.real).await {
                Ok(meta) if meta.is_file() => Some(meta.permissions().mode() & 0o7777),
                Ok(meta) => return Err(not_regular(path, &meta)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(ToolError::io(&resolved.real, &e)),
            };
            replace_file(&self.access, path, &resolved, content.as_bytes(), mode).await?;
            Ok(ToolOutput::text(format!(
                "Successfully wrote {} bytes to {path}",
                content.len()
            )))
        })
    }
}
