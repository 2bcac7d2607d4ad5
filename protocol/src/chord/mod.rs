//! The chord service layer: what rides inside `call`, `result` and `service_update`.
//!
//! ```text
//!  request.call ──▶ ServiceCall ──▶ ControlCall (catalogue / subscribe / unsubscribe)
//!  response.result (subscribe) ◀── StateEncoder::encode_snapshot ◀── SubscriptionSnapshot
//!  service_update.update       ◀── StateEncoder::encode_update   ◀── ProviderUpdate ◀── diff
//!  client: StateDecoder::{decode_snapshot, decode_update} ──▶ Replica (apply, sequences)
//!          StateDecoder::apply_update_cbor: frame bytes ──▶ Replica, no decoded update between
//! ```
//!
//! * Service values: [`ServiceCall`], [`InstanceAddress`], [`ControlCall`],
//!   [`CatalogueEntry`], [`SubscriptionSnapshot`], [`ProviderUpdate`], with upstream's strict
//!   parsers and key orders.
//! * Deltas: decoded [`Op`]s (`r s d a t p m`) and [`apply`]; wire ops are [`Value`] arrays
//!   checked by [`validate_wire_op`]; [`OpEncoder`]/[`OpDecoder`] do path interning and short
//!   forms for one state stream.
//! * Per subscription: [`StateEncoder`] (server) and [`StateDecoder`] (client) keep one delta
//!   codec per (instance, state member) through the subscription's lifecycle.
//! * [`Replica`] applies decoded snapshots and updates with the sequence rules.
//! * [`diff`] produces small batches from two revisions of a state.
//!
//! Every error's `Display` is upstream's message verbatim ([`ChordError`]); service errors that
//! cross the wire are [`RemoteServiceError`]. Nothing here does IO or panics on any input.
//!
//! [`Value`]: crate::Value

mod address;
mod apply;
mod call;
mod catalogue;
mod control;
mod delta_codec;
mod error;
mod fields;
mod js;
mod mode;
mod op;
mod path;
mod raw;
mod remote_error;
mod replica;
mod snapshot;
mod state_codec;
mod tracker;
mod update;
mod update_cbor;
mod utf16;
mod wire_op;

pub use address::InstanceAddress;
pub use apply::{apply, apply_owned};
pub use call::ServiceCall;
pub use catalogue::{CatalogueEntry, catalogue_to_value, parse_catalogue};
pub use control::{
    CATALOGUE_MEMBER, ControlCall, SERVICE_CONTROL_ID, SUBSCRIBE_MEMBER, UNSUBSCRIBE_MEMBER,
};
pub use delta_codec::{OpDecoder, OpEncoder};
pub use error::{ChordError, OpError, Subject, UpdateRefused};
pub use mode::ServiceMode;
pub use op::{Op, is_base};
pub use path::{Path, PathSegment, RESERVED_SEGMENTS, is_reserved, parse_path, path_to_value};
pub use remote_error::{RemoteServiceError, RemoteServiceErrorCode};
pub use replica::{InstanceReplica, Replica, StateReplica};
pub use snapshot::{InstanceSnapshot, MemberKind, MemberSnapshot, SubscriptionSnapshot};
pub use state_codec::{StateDecoder, StateEncoder};
pub use tracker::{MAX_OVERLAP_SCAN, diff};
pub use update::ProviderUpdate;
pub use wire_op::validate_wire_op;
