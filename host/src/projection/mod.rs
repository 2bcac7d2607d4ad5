//! The model projection: rich [`AgentMessage`](crate::message::AgentMessage)s → model
//! [`Message`](crate::message::Message)s, immediately before each model call.
//!
//! ```text
//! runtime transcript ─▶ ContextTransform (optional, rich → rich, falls back on error)
//!                    ─▶ convert (per-role rules) ─▶ repair (tool call/result pairing)
//!                    ─▶ ModelContext for the provider
//! ```
//!
//! Without a transform nothing of this runs per model call: the session keeps the projected
//! context up to date as it appends messages ([`ContextProjector`], O(1) per message, exactly
//! equal to [`project`] of the whole list) and a call takes a shared [`ModelContext`] (one
//! reference count). A configured [`ContextTransform`] works on the whole list, so with one
//! every call copies and projects the whole context (O(n) in the transcript length).
//!
//! Rules (design text, Coding Agent converter):
//! * `user`, `assistant`, `toolResult` pass through.
//! * `bashExecution` becomes user text ([`bash_execution_to_text`]), or nothing when
//!   `excludeFromContext`.
//! * `custom` becomes a user message with its content.
//! * `branchSummary` / `compactionSummary` become user text wrapped in a prefix and suffix.
//!
//! Then [`repair`] makes the sequence a valid conversation, deterministically:
//! * assistant messages that ended in `error` or `aborted` are incomplete turns and are not
//!   replayed (their tool calls were never executed);
//! * every tool call is immediately followed by its result, in the assistant's call order:
//!   a result found later (before the next assistant message) is moved up, and a call
//!   without a result gets a synthetic `isError` result ("No result provided");
//! * a tool result that answers no open call is dropped.
//!
//! The projection never changes the stored records, and it cannot fail.

mod context;
mod incremental;
mod rules;

pub use context::{Iter, ModelContext};
pub use incremental::ContextProjector;
pub use rules::{
    BRANCH_SUMMARY_PREFIX, BRANCH_SUMMARY_SUFFIX, COMPACTION_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_SUFFIX, ContextTransform, MISSING_RESULT_TEXT, TransformError,
    bash_execution_to_text, convert, is_well_paired, prepare_context, project, repair,
};
