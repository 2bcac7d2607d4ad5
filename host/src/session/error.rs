//! Why a session operation was refused or failed.

use std::path::PathBuf;

use crate::journal::StoreError;

/// Why a session operation was refused or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// A turn is running; prompts (and model changes) are refused, not queued.
    #[error("session is busy with a turn")]
    Busy,
    /// No turn is running, so there is nothing to steer.
    #[error("no turn is running to steer")]
    NotRunning,
    /// Too many steering texts are already queued.
    #[error("too many steering messages are queued")]
    SteerQueueFull,
    /// The steer named a turn that is no longer running.
    #[error("turn {0} has ended")]
    TurnEnded(String),
    /// Too many follow-ups are already queued.
    #[error(
        "too many follow-ups are queued (limit {})",
        super::activity::MAX_QUEUED_FOLLOW_UPS
    )]
    FollowUpQueueFull,
    /// No queued follow-up has this id (it was sent or removed).
    #[error("no queued follow-up {0}")]
    UnknownFollowUp(String),
    /// The session's settings do not offer compaction.
    #[error("compaction is not offered by this session")]
    CompactionNotOffered,
    /// There is nothing before the kept recent tail to summarise.
    #[error("nothing to compact")]
    NothingToCompact,
    /// A compaction named a first kept entry that is not in the model context.
    #[error("entry {0} is not in the model context")]
    UnknownEntry(String),
    /// The summarisation call failed (its message says why).
    #[error("compaction failed: {0}")]
    Compaction(String),
    /// The compaction was aborted.
    #[error("compaction was aborted")]
    CompactionAborted,
    /// A path completion was refused (it would leave the workspace, or cannot be read).
    #[error("path completion refused: {0}")]
    PathRefused(String),
    /// Too many user commands are already running.
    #[error("too many user commands are running")]
    TooManyCommands,
    /// The session id is unknown (or not a valid session id).
    #[error("unknown session {0}")]
    UnknownSession(String),
    /// The model is not offered by this host.
    #[error("unknown model {0}")]
    UnknownModel(String),
    /// The working directory does not exist or is not a directory.
    #[error("working directory {0} is not a directory")]
    BadCwd(PathBuf),
    /// The session is shutting down.
    #[error("session is closed")]
    Closed,
    /// The user command could not be started.
    #[error("bash command failed to run")]
    Bash(#[source] crate::tool::ToolError),
    /// Persistence failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run stopped on a persistence failure.
    #[error(transparent)]
    Run(#[from] crate::agent::RunError),
}
