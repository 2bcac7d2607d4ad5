//! The journal: a host's sessions directory and each session's append-only JSONL file of
//! entries, and the rule that rebuilds a session's state from them.
//!
//! * [`SessionsDir`] (`dir`): the directory a host locks, its modes, its durability thread.
//! * [`SessionFile`] (`file`): one session's file, its only writer; reading it back.
//! * [`SessionEntry`] (`entry`): the record types, one JSON line each.
//! * [`rebuild`] (`tree`): the active path through the entry tree and what a session resumes
//!   with.
//!
//! The journal knows messages ([`crate::message`]) and model choices
//! ([`crate::ModelRef`], [`crate::ThinkingLevel`]), which entries record, and nothing of the
//! live session, the agent loop or the providers above it.

mod dir;
mod entry;
mod error;
mod file;
mod tree;

pub use dir::{DIR_MODE, DurableHandle, FILE_MODE, FsyncPolicy, LOCK_FILE, SessionsDir};
pub use entry::{EntryKind, FORMAT_VERSION, SessionEntry, SessionHeader};
pub use error::StoreError;
pub use file::{Loaded, SessionFile};
// The pure reader behind `SessionFile::open`, for `crate::fuzzing`.
pub(crate) use file::parse;
pub use tree::{Rebuilt, active_path, rebuild};
