//! # baton-host
//!
//! The agent runtime behind a baton server: sessions, the agent loop, tools, model providers
//! and durable transcripts. The server and client crates know nothing about any of this; the
//! service adapter ([`service`]) publishes a [`session::SessionRuntime`]'s state and changes
//! as chord services.
//!
//! ```text
//! SessionManager ── create / open (lazy) / list / remove ──▶ journal: <dir>/<id>.jsonl
//!      │
//!   SessionRuntime ── prompt / steer / abort / bash / setModel ── one transcript; changes to
//!      │                                                 observers (service) and events
//!      │
//!   agent::run ── ModelContext (projected as it grows) ──▶ Provider (scripted | remote)
//!      │                                              │ ProviderEvent stream
//!      └── tool batch (read / write / edit / bash) ◀──┘
//! ```
//!
//! * [`message`]: the model union ([`message::Message`]) and the application union
//!   ([`message::AgentMessage`]).
//! * [`ModelRef`], [`ThinkingLevel`]: which model a session uses and how hard it reasons.
//! * [`journal`]: durable sessions: the sessions directory, each session's append-only JSONL
//!   file of entries, and rebuilding a session's state from its entry tree.
//! * [`projection`]: rich → model messages, kept up to date as the transcript grows and
//!   shared with each call ([`projection::ModelContext`]); never fails, keeps tool
//!   call/result pairing.
//! * [`agent`]: the loop and its stop-reason semantics.
//! * [`provider`]: the provider trait, the scripted default, the OpenAI-compatible and
//!   Anthropic clients over HTTPS, provider configuration, the models file and the registry
//!   of offered models ([`provider::ModelRegistry`]).
//! * [`tool`]: the tool trait, argument schemas and the coding tools.
//! * [`session`]: the live session over its journal: its one transcript (every message held
//!   once, shared with the model context), its turn, its changes, compaction, and the named
//!   limits that keep a session of any size watchable; the host's [`session::SessionManager`].
//! * [`service`]: the `baton-server` host: `pi.session-management`, `pi.session-directory`,
//!   `pi.models` and `pi.session`, with streamed text published as `a` ops.
//! * [`link`]: browser identities and one-time links: the pairing codes `baton link`
//!   mints, the hashed browser tokens they are traded for, and their file.
//! * [`clock`]: the only wall-clock read; ISO-8601 text.
//! * `cluster` (feature `cluster`): the fleet on etcd — owning the server id under a lease,
//!   the member record, stopping new work before the lease could lapse, the session
//!   directory in etcd and `baton.cluster` (docs/cluster.md).
//! * `web` (feature `web`): the web listener — the page, one-time pairing and the WebSocket
//!   endpoint, handing each socket to the server (`Server::adopt`).
//!
//! Dependencies point down: `service` → `session` → `agent` → `provider`, `tool`,
//! `projection` → `message`; `session` and `agent` write through `journal`, which sits on
//! `message`, the model choice and `clock` only; `service` also asks `link`, which sits on
//! `clock` only. Within each module too, no file imports one
//! that imports it, and none imports the file that declares it (this one or a `mod.rs`): what
//! a module's files share has a file of its own (here [`BoxFuture`], in `future`).
//!
//! # Non-goals
//! No protocol listeners or wire code here (that is `baton-server`; [`service`] only implements
//! its host traits; the `web` feature's listener speaks HTTP and hands sockets to the server), no provider beyond OpenAI-compatible Chat Completions and Anthropic Messages
//! (both over HTTPS with rustls, see [`provider`]).
//!
//! # Cancellation
//! Dropping a [`session::RunHandle`] does not stop its turn; [`session::SessionRuntime::abort`]
//! does. Every task is spawned on a session's `TaskTracker`; [`session::SessionRuntime::close`] and
//! [`session::SessionManager::shutdown`] abort and wait for them.

pub mod agent;
pub mod clock;
#[cfg(feature = "cluster")]
pub mod cluster;
mod future;
#[doc(hidden)]
pub mod fuzzing;
#[doc(hidden)]
pub mod interop;
pub mod journal;
pub mod link;
pub mod message;
mod model_ref;
pub mod projection;
pub mod provider;
pub mod service;
pub mod session;
mod spawn;
pub mod tool;
pub mod value;
#[cfg(feature = "web")]
pub mod web;

pub use agent::{AgentConfig, LoopEvent, RunContext, RunOutcome};
pub use future::BoxFuture;
pub use message::{AgentMessage, Message};
pub use model_ref::{ModelRef, ThinkingLevel};
pub use provider::{ModelInfo, ModelRegistry, Provider};
pub use session::{
    CreateOptions, DEFAULT_SYSTEM_PROMPT, HostConfig, SessionError, SessionEvent, SessionManager,
    SessionRuntime, Snapshot,
};
pub use value::to_protocol_value;
