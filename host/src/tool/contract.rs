//! What a tool is: the [`Tool`] trait, the [`ToolContext`] a call gets, the [`ToolOutput`] it
//! returns, and the [`ToolSpec`] a provider is shown.

use std::fmt;
use std::path::{Path, PathBuf};

use baton_protocol::Value;
use tokio_util::sync::CancellationToken;

use super::error::ToolError;
use super::schema::ObjectSchema;
use crate::BoxFuture;
use crate::message::UserContent;

/// What a tool call may use besides its arguments.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The session working directory; relative paths resolve against it.
    pub cwd: PathBuf,
    /// A per-session directory for artefacts such as full bash output.
    pub artifacts_dir: PathBuf,
    /// Cancelled when the run is aborted; tools stop promptly.
    pub cancel: CancellationToken,
    /// The id of the call being executed.
    pub tool_call_id: String,
}

impl ToolContext {
    /// `path` resolved against the session's workspace (absolute paths are kept as given).
    pub fn resolve(&self, path: &str) -> PathBuf {
        resolve_path(&self.cwd, path)
    }
}

/// `path` resolved against `cwd` (absolute paths are kept).
pub fn resolve_path(cwd: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// A tool's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// Model-visible content.
    pub content: Vec<UserContent>,
    /// Runtime/UI details, not sent to the model.
    pub details: Option<Value>,
    /// The call failed (still a result the model sees).
    pub is_error: bool,
    /// Asks the loop to stop after this batch; honoured only when every result in the batch
    /// asks.
    pub terminate: bool,
}

impl ToolOutput {
    /// A successful text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![UserContent::text(text)],
            details: None,
            is_error: false,
            terminate: false,
        }
    }

    /// An error text result.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            is_error: true,
            ..Self::text(text)
        }
    }

    /// Attaches details.
    #[must_use]
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Marks the result as asking the run to stop.
    #[must_use]
    pub fn terminating(mut self) -> Self {
        self.terminate = true;
        self
    }
}

/// A callable tool.
pub trait Tool: Send + Sync + fmt::Debug {
    /// Name the model uses.
    fn name(&self) -> &str;
    /// Shown to the model.
    fn description(&self) -> &str;
    /// Argument schema.
    fn parameters(&self) -> &ObjectSchema;
    /// Runs the call. `arguments` already matched [`Tool::parameters`].
    fn execute<'a>(
        &'a self,
        arguments: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>>;

    /// The files a call with `arguments` (already matched to [`Tool::parameters`]) will touch,
    /// as canonical paths, resolved against `cwd`. The loop runs the calls of one parallel
    /// batch that share a path one after another, in call order; calls on different paths,
    /// and calls returning `None` (the default: unknown or none), run at once.
    fn touched_paths<'a>(
        &'a self,
        arguments: &'a Value,
        cwd: &'a Path,
    ) -> BoxFuture<'a, Option<Vec<PathBuf>>> {
        let _ = (arguments, cwd);
        Box::pin(std::future::ready(None))
    }
}

/// A tool as declared to a provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
}
