//! The error a tool call fails with.

use std::path::Path;

/// A tool failed ("threw"); the message becomes the text of an `isError` result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolError {
    /// Model-visible explanation.
    pub message: String,
}

impl ToolError {
    /// A failure with a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// An I/O failure on `path`.
    pub fn io(path: &Path, error: &std::io::Error) -> Self {
        Self::new(format!("{}: {error}", path.display()))
    }
}
