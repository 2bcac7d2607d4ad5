//! Durable sessions: the JSONL entry tree, rebuilding on open, and the live runtime.

mod activity;
mod commands;
mod compaction;
mod complete;
mod dir;
mod entry;
mod error;
mod events;
mod file;
mod followup;
mod limits;
mod manager;
mod runtime;
mod transcript;
mod tree;
mod turn;
mod view;

pub use activity::{
    AttachedClient, CompactionStatus, FollowUp, MAX_IDENTITY_BYTES, MAX_LISTED_CLIENTS,
    MAX_QUEUED_FOLLOW_UPS,
};
// The activity state, for the service's mapping tests.
#[cfg(test)]
pub(crate) use activity::Activity;
pub use commands::BashOutcome;
pub use compaction::{
    CHARS_PER_TOKEN, CompactionOutcome, CompactionSettings, DEFAULT_CONTEXT_WINDOW,
    DEFAULT_KEEP_RECENT_TOKENS, DEFAULT_RESERVE_TOKENS, MAX_COMPACT_INSTRUCTIONS_BYTES,
    MAX_SERIALIZED_OUTPUT_CHARS, MAX_SUMMARY_BYTES, SUMMARIZATION_SYSTEM_PROMPT,
    SUMMARY_REQUEST_OPENING, context_tokens, cut_point, estimate_tokens, summarise, summary_prompt,
    summary_request,
};
pub use complete::{
    Completions, MAX_COMPLETION_PREFIX_BYTES, MAX_COMPLETIONS, MAX_SCANNED_ENTRIES, PathCompletion,
};
pub use dir::{DIR_MODE, DurableHandle, FILE_MODE, FsyncPolicy, LOCK_FILE, SessionsDir};
pub use entry::{EntryKind, FORMAT_VERSION, SessionEntry, SessionHeader};
pub use error::{SessionError, StoreError};
pub use events::{Change, ObserverId, SessionObserver};
pub use file::{Loaded, SessionFile};
pub use followup::FollowUpOutcome;
// The pure reader behind `SessionFile::open`, for `crate::fuzzing`.
pub(crate) use file::parse as parse_file;
pub use limits::{
    DEFAULT_TRANSCRIPT_WINDOW, MAX_PAGE_ITEMS, MAX_PROMPT_BYTES, MAX_PUBLISHED_ITEM_BYTES,
    MAX_READ_BYTES,
};
pub use manager::{CreateOptions, HostConfig, SessionManager};
pub use runtime::{
    DEFAULT_EVENT_CAPACITY, MAX_QUEUED_STEER, MAX_RUNNING_COMMANDS, SessionConfig, SessionMeta,
    SessionRuntime,
};
pub use transcript::TranscriptView;
// The transcript itself, for the service's mapping tests.
#[cfg(test)]
pub(crate) use transcript::Transcript;
pub use tree::{Rebuilt, active_path, rebuild};
pub use turn::{PromptOutcome, RunHandle};
pub use view::{
    AssistantStatus, BodyRef, ItemBody, ItemRef, Phase, SessionEvent, SessionEventKind,
    SessionState, Snapshot, ToolConfinement, ToolStatus, TranscriptItem,
};
