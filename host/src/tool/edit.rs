//! `edit`: replace one exact occurrence of a text in a file.

use baton_protocol::Value;

use super::{ObjectSchema, Schema, Tool, ToolContext, ToolError, ToolOutput, str_arg};
use crate::BoxFuture;

/// The `edit` tool: `oldText` must occur exactly once.
#[derive(Debug)]
pub struct EditTool {
    schema: ObjectSchema,
}

impl EditTool {
    /// The tool with its schema.
    pub fn new() -> Self {
        Self {
            schema: ObjectSchema::new()
                .required(
                    "path",
                    Schema::String,
                    "Path of the file, relative to the working directory",
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
        Self::new()
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
            let full = ctx.resolve(path);
            let text = tokio::fs::read_to_string(&full)
                .await
                .map_err(|e| ToolError::io(&full, &e))?;
            match text.matches(old).count() {
                0 => Err(ToolError::new(format!(
                    "Could not find the exact text in {path}. The old text must match exactly, including all whitespace and newlines."
                ))),
                1 => {
                    let line = text
                        .find(old)
                        .map_or(1, |at| text[..at].matches('\n').count() + 1);
                    let updated = text.replacen(old, new, 1);
                    tokio::fs::write(&full, updated.as_bytes())
                        .await
                        .map_err(|e| ToolError::io(&full, &e))?;
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
