//! Anthropic Messages (native), over `https://` (or `http://` to a loopback test server).
//!
//! One request per model call: `POST {base_url}/messages` with `stream: true`, the key as
//! `x-api-key` and [`ANTHROPIC_VERSION`] as `anthropic-version`; the response is read as
//! server-sent events (`decode.rs`) until `message_stop`. Request building (system prompt,
//! tools, tool results, thinking budget, replayed signatures) is in `request.rs`.

mod decode;
mod request;

use reqwest::header::HeaderValue;
use tokio_util::sync::CancellationToken;

use super::config::{ModelSpec, ProviderConfig};
use super::remote::{Auth, Remote, process_env};
use super::retry::RetryPolicy;
use super::stream::HttpStream;
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
            remote: Remote::new(config, "/messages"),
        }
    }

    /// Uses the limits, prices and reasoning support of `models`.
    #[must_use]
    pub fn with_models(mut self, models: Vec<ModelSpec>) -> Self {
        self.remote.set_models(models);
        self
    }

    /// Uses `retry` instead of the default limits.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.remote.retry = retry;
        self
    }

    /// Uses `timeouts` instead of the defaults.
    #[must_use]
    pub fn with_timeouts(mut self, timeouts: Timeouts) -> Self {
        self.remote.set_timeouts(&timeouts);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &ProviderConfig {
        &self.remote.config
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
        let spec = self.remote.spec(&request.model);
        let body = request::request_body(&request, &self.remote.config.id, spec).to_string();
        let call = self
            .remote
            .prepare(body.into_bytes(), Auth::XApiKey, &process_env)
            .map(|mut call| {
                if !call.headers.contains_key("anthropic-version") {
                    call.headers.insert(
                        "anthropic-version",
                        HeaderValue::from_static(ANTHROPIC_VERSION),
                    );
                }
                call
            });
        let decoder =
            decode::MessagesDecoder::new(self.remote.endpoint_text(), spec.and_then(|s| s.cost));
        Box::new(HttpStream::new(
            call,
            decoder,
            self.remote.retry.clone(),
            cancel,
        ))
    }
}
