//! Anthropic Messages (native), over `https://` (or `http://` to a loopback test server).
//!
//! One request per model call: `POST {base_url}/messages` with `stream: true`, the key as
//! `x-api-key` and [`ANTHROPIC_VERSION`] as `anthropic-version`; the response is read as
//! server-sent events (`decode.rs`) until `message_stop`. Request building (system prompt,
//! tools, tool results, thinking budget, replayed signatures) is in `request.rs`.

mod decode;
mod request;

use reqwest::header::{HeaderMap, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::config::{ModelSpec, ProviderConfig};
use super::cost::ModelCost;
use super::remote::{Auth, Remote, Wire, remote_builders};
use super::retry::RetryPolicy;
use super::transport::Timeouts;
use super::{ModelRequest, Provider, ProviderStream};

pub use request::{DEFAULT_MAX_TOKENS, MIN_ANSWER_TOKENS, MIN_THINKING_BUDGET, thinking_budget};

/// Provider id of the provider `--model anthropic:…` configures.
pub const PROVIDER_ID: &str = "anthropic";
/// The API family recorded on its assistant messages.
pub const API: &str = request::API;
/// The `anthropic-version` header sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The provider.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    remote: Remote,
}

impl AnthropicProvider {
    /// A provider for `config` (see [`ProviderConfig::anthropic`] for the defaults).
    /// Set-up failures are reported by every stream as its error event.
    pub fn new(config: ProviderConfig) -> Self {
        Self {
            remote: Remote::new(config, Self::SUFFIX),
        }
    }

    remote_builders!();
}

impl Wire for AnthropicProvider {
    type Decoder = decode::MessagesDecoder;
    const SUFFIX: &'static str = "/messages";
    const AUTH: Auth = Auth::XApiKey;

    fn body(request: &ModelRequest, provider: &str, spec: Option<&ModelSpec>) -> Vec<u8> {
        request::request_body(request, provider, spec)
            .to_string()
            .into_bytes()
    }

    fn decoder(endpoint: String, cost: Option<ModelCost>) -> Self::Decoder {
        decode::MessagesDecoder::new(endpoint, cost)
    }

    fn headers(headers: &mut HeaderMap) {
        if !headers.contains_key("anthropic-version") {
            headers.insert(
                "anthropic-version",
                HeaderValue::from_static(ANTHROPIC_VERSION),
            );
        }
    }
}

impl Provider for AnthropicProvider {
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
