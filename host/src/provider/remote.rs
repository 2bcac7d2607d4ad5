//! What the network providers share: a [`ProviderConfig`] resolved into a client, an
//! endpoint and headers; the credentials rule; the models' limits and prices; opening a call
//! ([`Remote::stream`]) from what an API says differently ([`Wire`]); and the builder methods
//! ([`remote_builders!`]) each provider exposes.
//!
//! Resolution happens once, when the provider is built; a failure there (bad URL, unreadable
//! CA file, bad header) is kept and reported by every stream as its error, so a
//! misconfigured provider still enters the loop as an `error` message. The key is read from
//! its variable at every call and refused over plain `http://` to a non-loopback host unless
//! `allow_insecure_key` is set.

use std::collections::BTreeMap;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::config::{ModelSpec, ProviderConfig};
use super::cost::ModelCost;
use super::retry::RetryPolicy;
use super::stream::{Call, Decoder, HttpStream};
use super::transport::{ProviderUrl, Timeouts, build_client};
use super::{ModelRequest, ProviderStream};

/// What one network API does differently: its path, how the key travels, the request body,
/// headers of its own, and the decoder of its stream.
pub(crate) trait Wire {
    /// The decoder of its server-sent events.
    type Decoder: Decoder + 'static;
    /// Appended to the base URL (e.g. `/chat/completions`).
    const SUFFIX: &'static str;
    /// How the key travels.
    const AUTH: Auth;
    /// The JSON body of `request` for `provider` (its id), with `spec`'s limits if known.
    fn body(request: &ModelRequest, provider: &str, spec: Option<&ModelSpec>) -> Vec<u8>;
    /// A decoder naming `endpoint` in its errors and pricing usage by `cost`.
    fn decoder(endpoint: String, cost: Option<ModelCost>) -> Self::Decoder;
    /// Headers the API needs besides the configured ones (added unless configured).
    fn headers(_headers: &mut HeaderMap) {}
}

/// The builder methods both network providers expose, delegating to their `remote` field.
macro_rules! remote_builders {
    () => {
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
    };
}
pub(crate) use remote_builders;

/// How the key travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Auth {
    /// `Authorization: Bearer <key>` (OpenAI-compatible).
    Bearer,
    /// `x-api-key: <key>` (Anthropic).
    XApiKey,
}

/// The resolved transport of one provider.
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    pub config: ProviderConfig,
    suffix: &'static str,
    timeouts: Timeouts,
    setup: Result<(reqwest::Client, ProviderUrl, HeaderMap), String>,
    pub retry: RetryPolicy,
    models: BTreeMap<String, ModelSpec>,
}

impl Remote {
    /// Resolves `config`; requests go to `base_url` + `suffix`.
    pub(crate) fn new(config: ProviderConfig, suffix: &'static str) -> Self {
        let timeouts = Timeouts::default();
        let setup = resolve(&config, suffix, &timeouts);
        Self {
            config,
            suffix,
            timeouts,
            setup,
            retry: RetryPolicy::default(),
            models: BTreeMap::new(),
        }
    }

    /// A stream for `request` spoken the `W` way (set-up failures become its error event).
    pub(crate) fn stream<W: Wire>(
        &self,
        request: &ModelRequest,
        cancel: CancellationToken,
    ) -> Box<dyn ProviderStream> {
        let spec = self.spec(&request.model);
        let body = W::body(request, &self.config.id, spec);
        let call = self.prepare(body, W::AUTH, &process_env).map(|mut call| {
            W::headers(&mut call.headers);
            call
        });
        let decoder = W::decoder(self.endpoint_text(), spec.and_then(|s| s.cost));
        Box::new(HttpStream::new(call, decoder, self.retry.clone(), cancel))
    }

    /// Rebuilds the client with `timeouts`.
    pub(crate) fn set_timeouts(&mut self, timeouts: &Timeouts) {
        self.timeouts = *timeouts;
        self.setup = resolve(&self.config, self.suffix, timeouts);
    }

    /// Registers what is known about the models this provider serves.
    pub(crate) fn set_models(&mut self, models: Vec<ModelSpec>) {
        self.models = models.into_iter().map(|m| (m.id.clone(), m)).collect();
    }

    /// The spec of `model`, if the models file listed it.
    pub(crate) fn spec(&self, model: &str) -> Option<&ModelSpec> {
        self.models.get(model)
    }

    /// The endpoint text for messages (`scheme://host:port/path`), or the base URL's error.
    pub(crate) fn endpoint_text(&self) -> String {
        match &self.setup {
            Ok((_, e, _)) => e.to_string(),
            Err(_) => self.config.base_url.clone(),
        }
    }

    /// A request carrying `body`, with credentials from the environment (`env`).
    ///
    /// # Errors
    /// The set-up failure, an unset key variable, or a key that would travel in clear.
    pub(crate) fn prepare(
        &self,
        body: Vec<u8>,
        auth: Auth,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Call, String> {
        let (client, endpoint, headers) = self.setup.as_ref().map_err(Clone::clone)?;
        let mut headers = headers.clone();
        let mut secret = None;
        if let Some(name) = &self.config.api_key_env {
            let Some(key) = env(name).filter(|k| !k.is_empty()) else {
                return Err(format!(
                    "API key variable {name} is not set (needed for {endpoint})"
                ));
            };
            if !endpoint.is_https() && !endpoint.is_loopback() && !self.config.allow_insecure_key {
                return Err(format!(
                    "refusing to send the API key from {name} in clear to {endpoint}: use an https:// base URL (or allow the key over plain http explicitly)"
                ));
            }
            let (header, text) = match auth {
                Auth::Bearer => ("authorization", format!("Bearer {key}")),
                Auth::XApiKey => ("x-api-key", key.clone()),
            };
            let mut value = HeaderValue::from_str(&text)
                .map_err(|_| format!("the API key in {name} is not a valid header value"))?;
            value.set_sensitive(true);
            headers.insert(HeaderName::from_static(header), value);
            secret = Some(key);
        }
        Ok(Call {
            client: client.clone(),
            endpoint: endpoint.clone(),
            headers,
            body,
            secret,
            read_timeout: self.timeouts.read,
        })
    }
}

/// Reads the key variables of the process environment.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn resolve(
    config: &ProviderConfig,
    suffix: &str,
    timeouts: &Timeouts,
) -> Result<(reqwest::Client, ProviderUrl, HeaderMap), String> {
    let who = |e: String| format!("provider {}: {e}", config.id);
    let endpoint = ProviderUrl::parse(&config.base_url, suffix).map_err(|e| who(e.to_string()))?;
    let client =
        build_client(config.ca_file.as_deref(), timeouts).map_err(|e| who(e.to_string()))?;
    let mut headers = HeaderMap::new();
    headers.insert(
        reqwest::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        reqwest::header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    );
    for (name, value) in &config.headers {
        let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) else {
            return Err(who(format!("invalid extra header {name:?}")));
        };
        headers.insert(n, v);
    }
    Ok((client, endpoint, headers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::config::ProviderKind;

    fn remote(url: &str, key_env: Option<&str>) -> Remote {
        let mut c = ProviderConfig::new("p", ProviderKind::OpenAi, url);
        c.api_key_env = key_env.map(str::to_owned);
        Remote::new(c, "/chat/completions")
    }

    fn key_env(name: &str) -> Option<String> {
        (name == "K").then(|| "sk-secret".to_owned())
    }

    #[test]
    fn an_unset_key_variable_is_a_set_up_error_naming_it() {
        let err = remote("https://api.example.test/v1", Some("UNSET"))
            .prepare(Vec::new(), Auth::Bearer, &key_env)
            .unwrap_err();
        assert_eq!(
            err,
            "API key variable UNSET is not set (needed for https://api.example.test:443/v1/chat/completions)"
        );
    }

    #[test]
    fn a_key_is_never_sent_in_clear_to_a_remote_host_unless_allowed() {
        let r = remote("http://gpu-box.example.test:8000/v1", Some("K"));
        let err = r.prepare(Vec::new(), Auth::Bearer, &key_env).unwrap_err();
        assert!(
            err.contains("refusing to send the API key from K in clear"),
            "{err}"
        );
        assert!(!err.contains("sk-secret"));
        let mut allowed = r.config;
        allowed.allow_insecure_key = true;
        let call = Remote::new(allowed, "/chat/completions")
            .prepare(Vec::new(), Auth::Bearer, &key_env)
            .unwrap();
        assert!(call.headers["authorization"].is_sensitive());
        // Loopback is fine without the option.
        assert!(
            remote("http://127.0.0.1:9/v1", Some("K"))
                .prepare(Vec::new(), Auth::Bearer, &key_env)
                .is_ok()
        );
    }

    #[test]
    fn keys_travel_as_bearer_or_x_api_key_and_are_hidden_from_debug() {
        let call = remote("https://api.example.test/v1", Some("K"))
            .prepare(Vec::new(), Auth::XApiKey, &key_env)
            .unwrap();
        assert_eq!(call.headers["x-api-key"], "sk-secret");
        assert!(!format!("{call:?}").contains("sk-secret"));
        let call = remote("https://api.example.test/v1", Some("K"))
            .prepare(Vec::new(), Auth::Bearer, &key_env)
            .unwrap();
        assert_eq!(call.headers["authorization"], "Bearer sk-secret");
    }

    #[test]
    fn no_key_variable_sends_no_credentials() {
        let call = remote("http://127.0.0.1:9/v1", None)
            .prepare(Vec::new(), Auth::Bearer, &key_env)
            .unwrap();
        assert!(!call.headers.contains_key("authorization"));
    }

    #[test]
    fn a_bad_base_url_is_kept_as_every_call_s_error() {
        let err = remote("ftp://h/v1", None)
            .prepare(Vec::new(), Auth::Bearer, &key_env)
            .unwrap_err();
        assert!(
            err.starts_with("provider p: unsupported URL scheme"),
            "{err}"
        );
    }
}
