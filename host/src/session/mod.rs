//! Durable sessions: the JSONL entry tree, rebuilding on open, and the live runtime.

mod dir;
mod entry;
mod error;
mod file;
mod manager;
mod runtime;
mod tree;
mod view;

pub use dir::{DIR_MODE, DurableHandle, FILE_MODE, FsyncPolicy, LOCK_FILE, SessionsDir};
pub use entry::{EntryKind, FORMAT_VERSION, SessionEntry, SessionHeader};
pub use error::{SessionError, StoreError};
pub use file::{Loaded, SessionFile};
// The pure reader behind `SessionFile::open`, for `crate::fuzzing`.
pub(crate) use file::parse as parse_file;
pub use manager::{CreateOptions, HostConfig, SessionManager};
pub use runtime::{
    BashOutcome, DEFAULT_EVENT_CAPACITY, MAX_QUEUED_STEER, MAX_RUNNING_COMMANDS, PromptOutcome,
    RunHandle, Session, SessionConfig, SessionMeta,
};
pub use tree::{Rebuilt, active_path, rebuild};
pub use view::{
    AssistantStatus, ItemBody, Phase, SessionEvent, SessionEventKind, SessionState, Snapshot,
    ToolStatus, TranscriptItem,
};
