//! Live sessions: the runtime over a session's journal ([`crate::journal`]): its one
//! transcript, its turn, its changes, its commands and compaction, and the host's manager of
//! them.

mod activity;
mod commands;
mod compact;
mod compaction;
mod complete;
mod driver;
mod error;
mod events;
mod followup;
mod limits;
mod manager;
mod runtime;
mod transcript;
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
pub use error::SessionError;
pub use events::{Change, ObserverId, SessionObserver};
pub use followup::FollowUpOutcome;
pub use limits::{
    DEFAULT_TRANSCRIPT_WINDOW, MAX_PAGE_ITEMS, MAX_PROMPT_BYTES, MAX_PUBLISHED_ITEM_BYTES,
    MAX_READ_BYTES,
};
#[cfg(feature = "cluster")]
pub(crate) use manager::new_session_id;
pub use manager::{CreateOptions, HostConfig, SessionManager};
pub use runtime::{
    DEFAULT_EVENT_CAPACITY, DEFAULT_SYSTEM_PROMPT, MAX_QUEUED_STEER, MAX_RUNNING_COMMANDS,
    SessionConfig, SessionMeta, SessionRuntime,
};
pub use transcript::TranscriptView;
// The transcript itself, for the service's mapping tests.
#[cfg(test)]
pub(crate) use transcript::Transcript;
pub use turn::{PromptOutcome, RunHandle};
pub use view::{
    AssistantStatus, BodyRef, ItemBody, ItemRef, Phase, SessionEvent, SessionEventKind,
    SessionState, Snapshot, ToolConfinement, ToolStatus, TranscriptItem,
};
