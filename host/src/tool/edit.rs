//! `edit`: replace one exact occurrence of a text in a file.
//!
//! The path is confined to the workspace (see [`FileAccess`]). The read, the replacement and
//! the atomic write-back (temporary file + rename, keeping the permission bits) happen under
//! the file's lock, so edits of one file in one parallel batch apply one after the other.

use std::path::{Path, PathBuf};

use baton_protocol::Value;
use tokio::io::AsyncReadExt;

use super::path::FileAccess;
use super::{
    ObjectSchema, Schema, Tool, ToolContext, ToolError, ToolOutput, path_arg_touched, str_arg,
};
use crate::BoxFuture;

/// Largest file `edit` loads (it must hold the whole file to replace a text in it).
pub const MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;

/// The `edit` tool: `oldText` must occur exactly once.
#[derive(Debug)]
pub struct EditTool {
    schema: ObjectSchema,
    access: FileAccess,
}

impl EditTool {
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
                .required(
                    "oldText",
                    Schema::String,
                    "Exact text to replace (must occur exactly once)",
                )
                .required("newText", Schema::String, "Replacement text"),
        }
    }
}

impl Default for EditTool {
    fn default() -> Self {
        Self::new(FileAccess::default())
    }
}

impl Tool for EditTool {
    fn name(&self) -> &str {
        "edit"
    }

    fn description(&self) -> &str {
        "Edit a file by replacing an exact text. The old text must match exactly (including whitespace) and occur exactly once."
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
            let old = str_arg(arguments, "oldText")?;
            let new = str_arg(arguments, "newText")?;
            if old.is_empty() {
                return Err(ToolError::new("oldText must not be empty"));
            }
            let key = self.access.order_key(&ctx.cwd, path).await;
            let _lock = self.access.locks().lock(&key).await;
            let opened = self.access.open_existing(&ctx.cwd, path).await?;
            let mut bytes = Vec::new();
            opened
                .file
                .take(MAX_EDIT_BYTES + 1)
                .read_to_end(&mut bytes)
                .await
                .map_err(|e| ToolError::io(&ctx.resolve(path), &e))?;
            if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_EDIT_BYTES {
                return Err(ToolError::new(format!(
                    "{path} is larger than {MAX_EDIT_BYTES} bytes; edit it with bash instead"
                )));
            }
            let text = String::from_utf8(bytes)
                .map_err(|_| ToolError::new(format!("{path} is not valid UTF-8 text")))?;
            match text.matches(old).count() {
                0 => Err(ToolError::new(format!(
                    "Could not find the exact text in {path}. The old text must match exactly, including all whitespace and newlines."
                ))),
                1 => {
                    let line = text
                        .find(old)
                        .map_or(1, |at| text[..at].matches('\n').count() + 1);
                    let updated = text.replacen(old, new, 1);
                    opened
                        .placed
                        .replace(updated.into_bytes(), Some(opened.mode))
                        .await?;
                    let mut details = baton_protocol::Map::new();
                    if let Ok(v) = Value::try_from(line) {
                        details.insert("firstChangedLine", v);
                    }
                    Ok(
                        ToolOutput::text(format!("Successfully replaced text in {path}."))
                            .with_details(Value::Map(details)),
                    )
                }
                n => Err(ToolError::new(format!(
                    "Found {n} occurrences of the text in {path}. The text must be unique: add surrounding context."
                ))),
            }
        })
    }
}
