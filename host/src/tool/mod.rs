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

mod args;
mod bash;
mod beneath;
mod confine;
mod contract;
mod edit;
mod error;
mod path;
mod read;
mod schema;
mod set;
#[cfg(test)]
mod walk_tests;
mod write;

pub(crate) use args::{opt_u64_arg, path_arg_touched, str_arg};
pub use bash::{
    BashConfig, BashRun, BashTool, DEFAULT_MAX_FILE_BYTES, OutputLimits, confinement_status,
    run_bash,
};
pub use confine::{Confinement, PASSED_ENV, ParentEnv};
pub use contract::{Tool, ToolContext, ToolOutput, ToolSpec, resolve_path};
pub use edit::{EditTool, MAX_EDIT_BYTES};
pub use error::ToolError;
pub use path::FileAccess;
pub use read::{MAX_COUNT_BYTES, MAX_READ_BYTES, ReadTool};
pub use schema::{ObjectSchema, Property, Schema, SchemaViolation};
pub use set::ToolSet;
pub use write::WriteTool;
