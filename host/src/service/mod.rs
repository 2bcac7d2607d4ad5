//! The service adapter: a [`SessionManager`](crate::session::SessionManager)'s sessions
//! served through `baton-server` as the chord services of `docs/services.md`.
//!
//! ```text
//!  Server ─ServerHost─▶ ServiceHost ─connect_services─▶ ServerServices (one per connection)
//!                           │                          pi.session-management, pi.session-directory,
//!                           │                          pi.models, $chord.service
//!                           └─open_session─▶ HostedSession ─lease─▶ SessionLease
//!                                  │ pump: SessionEvent ─▶ ops           pi.session, $chord.service
//!                                  └────────────▶ Publisher::publish_shared (one update per batch)
//! ```
//!
//! * Sessions open lazily: `create` writes the file; the first `attach` makes the server call
//!   [`ServerHost::open_session`](baton_server::ServerHost::open_session), which opens the
//!   runtime session and starts its pump.
//! * Every `pi.session` method answers only after the updates describing its effect were
//!   published, so a client's replica already shows them when the response arrives.
//! * Runtime errors become wire errors in one place, [`service_error`].
//! * Every call is checked against the access policy (`access`, `policy`): the listener
//!   refuses identities with no rights ([`ServerHost::admit`](baton_server::ServerHost::admit)),
//!   the directory lists only what the caller may see, and mutating calls need operator rights
//!   or ownership.
//! * The host is bounded ([`ServiceLimits`]): a session with no client and nothing running
//!   closes after an idle timeout and reopens on the next attach, at most so many sessions
//!   are open at once, and one identity owns at most so many sessions (`idle`, `limits`,
//!   `owners`, `idle_clock`).
//! * Browser identities (`web:<id>`, [`crate::link`]) get their rights from their link,
//!   never more than the minter's at the time of each call; `baton.links` (`links`) mints,
//!   lists and revokes them.
//! * Whether a session is open has one owner, the `residency`; the directory, the open cap
//!   and the server's handles ask it or are told by it, and keep no copy.
//! * [`ServiceHost`] (`host`) is what the server calls; the state it and every connection's
//!   services share is one `Shared` (`shared`), whose behaviour lives with each concern
//!   (`idle`, `removal`, `server_scope`, `session_scope`).
//! * In a fleet (feature `cluster`), creates and removals also keep the session records in
//!   etcd through one hook, `fleet::SessionDirectoryStore`, and `baton.cluster` (`cluster`)
//!   locates and lists the fleet's sessions.
//!
//! # Shutdown
//! [`ServiceHost::begin_shutdown`] refuses new prompts and aborts running turns, so that
//! [`baton_server::Server::close`] drains quickly; [`ServiceHost::shutdown`] then stops the
//! pumps and the runtime.

mod access;
mod args;
#[cfg(feature = "cluster")]
mod cluster;
mod directory;
mod errors;
#[cfg(feature = "cluster")]
pub mod fleet;
mod host;
mod idle;
mod idle_clock;
mod limits;
mod links;
mod live;
mod owners;
mod policy;
mod publish;
mod removal;
mod residency;
mod server_scope;
mod session_scope;
mod shared;
#[cfg(test)]
mod test_hooks;
#[cfg(test)]
mod test_support;
mod wire;

pub use errors::service_error;
pub use host::{HostedSession, ServiceHost, SessionKey};
pub use limits::{
    DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_OPEN_SESSIONS, DEFAULT_MAX_SESSIONS_PER_OWNER, ServiceLimits,
    owner_key,
};
pub use policy::{AccessPolicy, Grant, MAX_POLICY_BYTES, Matcher, PolicyError, Role, Ungranted};
pub use server_scope::ServerServices;
pub use session_scope::SessionLease;
pub use wire::session_state_value;
