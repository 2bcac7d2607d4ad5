//! The v8 envelopes: what a client sends, what a server sends.
//!
//! Field order on the wire is upstream's object-literal order (see `docs/protocol.md`);
//! every envelope is strict (an unknown field is an invalid message).

mod client;
mod decode;
mod encode;
mod parse;
mod server;
mod target;

pub use client::{Cancel, ClientMessage, HelloVersion, Request};
pub use server::{Outcome, Response, ServerMessage, ServiceUpdate, WireError};
pub use target::{SessionTarget, Target};

pub(crate) use decode::{
    PayloadError, ServerPayload, UpdateForm, decode_client, decode_server, decode_server_as,
};
pub(crate) use parse::Invalid;
