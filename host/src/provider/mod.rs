//! Model providers: a request in, a stream of [`ProviderEvent`]s out.
//!
//! A provider never fails at the call site: [`Provider::stream`] returns a stream at once and
//! every failure (connection, HTTP status, malformed data) arrives as a
//! [`ProviderEvent::Error`] inside it, so the loop turns it into an assistant message with
//! `stopReason: "error"` (design: "a StreamFunction should encode failures in its returned
//! event stream, not throw"). The stream is pulled ([`ProviderStream::next`]), which gives
//! natural backpressure and needs no background task; dropping it cancels the request.
//!
//! * [`scripted`]: the embedded, deterministic, offline default.
//! * [`openai`]: OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp, Ollama).
//! * [`anthropic`]: Anthropic Messages.
//! * [`config`]: [`config::ProviderConfig`] (how to reach an API) and [`config::ModelSpec`].
//! * [`models_file`]: the models file, registered into the [`ModelRegistry`].
//! * [`transport`]: the shared HTTPS client (reqwest + rustls), timeouts, endpoint naming.
//! * [`retry`]: 429/5xx and connection retries before the first token, capped backoff,
//!   `Retry-After`.
//! * [`probe`]: the start-up reachability check (one connection, nothing sent).
//! * `stream`, `sse`, `decode`, `remote`: the pulled HTTP stream, the SSE parser, the decode
//!   helpers, and the client set-up, credentials rule and builders both network providers
//!   share.
//! * `contract`: the [`Provider`] trait, [`ModelRequest`], [`ProviderEvent`],
//!   [`ProviderStream`].

pub mod anthropic;
mod assemble;
pub mod config;
mod contract;
mod cost;
mod decode;
pub mod models_file;
pub mod openai;
pub mod probe;
mod registry;
mod remote;
pub mod retry;
pub mod scripted;
mod sse;
mod stream;
pub mod transport;

pub use crate::message::MessageRef;
pub use crate::projection::ModelContext;
pub use assemble::{AssistantBuilder, StreamUpdate};
pub use contract::{ModelRequest, Provider, ProviderEvent, ProviderStream, VecStream};
pub use cost::ModelCost;
pub use registry::{ModelInfo, ModelMeta, ModelRegistry};
