//! OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp server, Ollama, gateways),
//! over `https://` or `http://`.
//!
//! One request per model call: `POST {base_url}/chat/completions` with `stream: true` and
//! `stream_options.include_usage`; the response is read as server-sent events (`decode.rs`)
//! until `[DONE]`. The key (if a variable is configured) travels as `Authorization: Bearer`;
//! without one no credentials are sent, which is what local model servers expect.

mod decode;
mod request;

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::config::{ModelSpec, ProviderConfig};
use super::cost::ModelCost;
use super::remote::{Auth, Remote, Wire, remote_builders};
use super::retry::RetryPolicy;
use super::transport::{CONNECT_TIMEOUT, Timeouts};
use super::{ModelRequest, Provider, ProviderStream};

/// Provider id of the provider `--model openai:…` configures.
pub const PROVIDER_ID: &str = "openai";
/// The API family recorded on its assistant messages.
pub const API: &str = request::API;

/// The older, OpenAI-only configuration (base URL and key variable); kept so callers that
/// predate [`ProviderConfig`] still build. Converts into a provider with id `openai`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// E.g. `https://api.openai.com/v1` (the `/chat/completions` suffix is added).
    pub base_url: String,
    /// Name of the environment variable holding the API key, if any.
    pub api_key_env: Option<String>,
    /// Bound on establishing the connection.
    pub connect_timeout: Duration,
}

impl OpenAiConfig {
    /// A configuration for `base_url` with no key and the default connect timeout.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key_env: None,
            connect_timeout: CONNECT_TIMEOUT,
        }
    }
}

impl From<OpenAiConfig> for ProviderConfig {
    fn from(c: OpenAiConfig) -> Self {
        let mut p = ProviderConfig::openai(c.base_url);
        p.api_key_env = c.api_key_env;
        p
    }
}

/// The provider.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    remote: Remote,
}

impl OpenAiProvider {
    /// A provider for `config`. Set-up failures (bad URL, CA file, header) are reported by
    /// every stream as its error event (and by [`ProviderConfig::validate`] at start-up).
    pub fn new(config: impl Into<ProviderConfig>) -> Self {
        Self {
            remote: Remote::new(config.into(), Self::SUFFIX),
        }
    }

    remote_builders!();
}

impl Wire for OpenAiProvider {
    type Decoder = decode::ChunkDecoder;
    const SUFFIX: &'static str = "/chat/completions";
    const AUTH: Auth = Auth::Bearer;

    fn body(request: &ModelRequest, provider: &str, spec: Option<&ModelSpec>) -> Vec<u8> {
        request::request_body(request, provider, spec)
            .to_string()
            .into_bytes()
    }

    fn decoder(endpoint: String, cost: Option<ModelCost>) -> Self::Decoder {
        decode::ChunkDecoder::new(endpoint, cost)
    }
}

impl Provider for OpenAiProvider {
    fn id(&self) -> &str {
        &self.remote.config.id
    }

    fn api(&self) -> &str {
        API
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> Box<dyn ProviderStream> {
        self.remote.stream::<Self>(&request, cancel)
    }
}
