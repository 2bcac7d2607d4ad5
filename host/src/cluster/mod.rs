//! The fleet on etcd (feature `cluster`; docs/cluster.md): a host joins by owning its server
//! id under a lease, publishes a member record beside it, keeps the lease alive and stops
//! taking new work before it could expire unrenewed.
//!
//! * [`config`]: what joining takes ([`ClusterConfig`]) and its one-line errors.
//! * [`keys`]: the key layout in etcd, in one place.
//! * [`record`]: the JSON values under those keys (holder, member record, load).
//! * [`liveness`]: the pure state machine of the lease (renew schedule, safety margin,
//!   pause, resume, lost).
//! * [`load`]: the pure coalescing of load updates (at most one write a second).
//! * [`membership`]: the tokio glue: connect, claim, keep alive, register, leave.
//! * [`sessions`]: the session directory in etcd (records, name claims, reconcile, reads),
//!   the service layer's `SessionDirectoryStore`.
//! * [`error`]: why joining or staying in the fleet failed ([`ClusterError`]).

pub mod config;
pub mod error;
pub mod keys;
pub mod liveness;
pub mod load;
pub mod membership;
pub mod record;
pub mod sessions;

pub use config::{ClusterConfig, ClusterTls, ConfigError, DEFAULT_LEASE_TTL};
pub use error::ClusterError;
pub use liveness::Health;
pub use membership::Membership;
pub use record::{HolderRecord, Load, MemberRecord, SessionRecord};
pub use sessions::EtcdSessions;
