//! Tools the model can call, and the coding set: `read`, `write`, `edit`, `bash`.
//!
//! A [`Tool`] declares a name, a description and an [`ObjectSchema`] for its arguments. The
//! agent loop validates arguments against the schema *before* calling
//! [`Tool::execute`], so a tool only sees arguments of the declared shape. A tool reports
//! failure either as `Err(ToolError)` ("the tool threw") or as an [`ToolOutput`] with
//! `is_error`; both reach the model as an `isError: true` result.
//!
//! Tools operate relative to the session's working directory ([`ToolContext::cwd`]) and must
//! observe [`ToolContext::cancel`].
//!
//! # Confinement
//!
//! By default ([`BashConfig::confine`]) the coding tools stay in the working directory:
//! `read`, `write` and `edit` resolve every path beneath a descriptor of it and refuse one that
//! leads out (`..`, absolute paths, symlinks, a directory swapped for a symlink while the call
//! runs), `read` reads only regular files and at most [`MAX_READ_BYTES`] at a time,
//! and `bash` runs with a scrubbed environment under Landlock where the kernel has it
//! ([`confinement_status`]). Calls of one session that touch the same file take that file's
//! lock ([`FileAccess`]), so they do not interleave, and within one batch they run in call order
//! ([`Tool::touched_paths`]).

mod bash;
mod beneath;
mod confine;
mod edit;
mod path;
mod read;
mod schema;
mod write;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton_protocol::Value;
use tokio_util::sync::CancellationToken;

use crate::BoxFuture;
use crate::message::UserContent;

pub use bash::{BashConfig, BashRun, BashTool, DEFAULT_MAX_FILE_BYTES, OutputLimits, run_bash};
pub use confine::{Confinement, PASSED_ENV, ParentEnv, confinement_status};
pub use edit::{EditTool, MAX_EDIT_BYTES};
pub use path::FileAccess;
pub use read::{MAX_COUNT_BYTES, MAX_READ_BYTES, ReadTool};
pub use schema::{ObjectSchema, Property, Schema, SchemaViolation};
pub use write::WriteTool;

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

/// The tools of a session, in declaration order.
#[derive(Debug, Clone, Default)]
pub struct ToolSet {
    tools: Vec<Arc<dyn Tool>>,
}

impl ToolSet {
    /// No tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// `read`, `write`, `edit` and `bash`, for one session: the file tools share one
    /// [`FileAccess`] (confined to the working directory unless `bash.confine` is off).
    pub fn coding(bash: BashConfig) -> Self {
        let access = if bash.confine {
            FileAccess::confined()
        } else {
            FileAccess::unconfined()
        };
        Self::new()
            .with(Arc::new(ReadTool::new(access.clone())))
            .with(Arc::new(WriteTool::new(access.clone())))
            .with(Arc::new(EditTool::new(access)))
            .with(Arc::new(BashTool::new(bash)))
    }

    /// Adds a tool (a later tool with the same name shadows nothing: the first wins).
    #[must_use]
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// Declarations for providers.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.parameters().to_json_schema(),
            })
            .collect()
    }

    /// True when there are no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

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
