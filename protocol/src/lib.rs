//! # baton-protocol
//!
//! The wire format of **Pi protocol v8 with the chord service layer**, byte-exact with the
//! upstream TypeScript implementation (pi 1.0.x). Pure: no sockets, no clocks, no tasks.
//!
//! ```text
//!  bytes ─▶ frame (4-byte BE length) ─▶ strict CBOR item ─▶ Value ─▶ envelope
//!                                                                   │
//!                      chord: ServiceCall, snapshots, updates, ops ◀┘
//! ```
//!
//! * [`frame`]: length-prefixed framing with the limit checked at the header.
//! * [`cbor`]: the strict CBOR profile, upstream error messages.
//! * [`Value`]: the opaque payload type (strict JSON, key order kept).
//! * [`ErrorCode`]: every wire error code baton produces, typed.
//! * [`message`]: `hello`, `request`, `cancel`, `hello_error`, `response`,
//!   `service_update`, `attachment`.
//! * [`decoder`]: the one inbound [`MessageDecoder`], which decodes frames in place in the
//!   buffer they were read into (servers and clients alike).
//! * [`codec`]: frame + CBOR + envelope in one step each way (the decoder re-exported, the
//!   encoders, tokio-util codecs).
//! * [`inbound`]: what a client reads, with `service_update` payloads left encoded for
//!   [`chord::StateDecoder::decode_update_cbor`] ([`ServerFrameDecoder`]).
//! * [`handshake`]: sans-IO handshake machines for both ends.
//! * [`chord`]: the service layer riding in `call`/`result`/`update`.
//! * [`unix`]: where Unix sockets live by convention.
//!
//! Every limit has a named default in [`limits`]. The normative description is
//! `docs/protocol.md` in the repository.
//!
//! ## Modules, bottom up
//! Each layer uses only the layers below it (and, within a layer, those named before):
//!
//! 1. Leaves: [`ids`], [`limits`], [`version`], [`keepalive`], [`unix`], the [`Value`] data
//!    types (then their JSON text and serde impls), [`frame`] and [`cbor`].
//! 2. [`chord`]: its data types, then the delta and state codecs and the replica above them.
//! 3. [`ErrorCode`] (which names chord's service codes), then [`message`], the envelopes.
//! 4. The codecs: their errors ([`DecodeError`], [`EncodeError`], [`Side`]), then [`inbound`],
//!    [`decoder`], and [`codec`] on top; [`handshake`] beside them.

pub mod cbor;
pub mod chord;
pub mod codec;
pub mod decoder;
mod error;
mod error_code;
pub mod frame;
pub mod handshake;
pub mod ids;
pub mod inbound;
pub mod keepalive;
pub mod limits;
pub mod message;
pub mod unix;
mod value;
mod value_serde;
pub mod version;

#[doc(hidden)]
pub mod fuzzing;

pub use codec::{
    ClientCodec, ClientMessageDecoder, DecodeError, EncodeError, IoError, MessageDecoder,
    ServerCodec, ServerFrameDecoder, ServerMessageDecoder, Side, decode_payload, encode_frame,
    encode_frame_into, encode_service_update_frame, encode_update_payload, from_value, to_value,
};
pub use error_code::ErrorCode;
pub use ids::{Id, ServerId};
pub use inbound::{EncodedServiceUpdate, ServerFrame, decode_server_frame};
pub use message::{
    Cancel, ClientMessage, HelloVersion, Outcome, Request, Response, ServerMessage, ServiceUpdate,
    SessionTarget, Target, WireError,
};
pub use value::{MAX_SAFE_INTEGER, Map, Number, NumberError, Value};
pub use version::PROTOCOL_VERSION;
