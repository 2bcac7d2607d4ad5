//! Provider configuration: how to reach one API ([`ProviderConfig`]: kind, base URL, key
//! variable, extra headers, CA file) and what is known about one model it serves
//! ([`ModelSpec`]: window, output limit, prices, reasoning). The models file that lists both
//! is [`super::models_file`].
//!
//! What may be fixed outside the configuration (an unset key variable, a bad URL, a missing
//! CA file) is a [`ConfigWarning`] returned to the caller, which decides how to show it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use reqwest::header::{HeaderName, HeaderValue};
use serde::Deserialize;

use super::cost::ModelCost;
use super::registry::{ModelInfo, ModelMeta};
use super::transport::ProviderUrl;

/// Base URL of a `kind = "anthropic"` provider that names none (the public Messages API).
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";
/// Key variable of a `kind = "anthropic"` provider that names none.
pub const DEFAULT_ANTHROPIC_KEY_ENV: &str = "ANTHROPIC_API_KEY";
/// Base URL of a `kind = "openai"` provider that names none (the public OpenAI API).
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Key variable of a `kind = "openai"` provider that names neither a base URL nor a key
/// variable (one with its own base URL, e.g. a local server, needs no key).
pub const DEFAULT_OPENAI_KEY_ENV: &str = "OPENAI_API_KEY";
/// Provider ids a models file may not use (built in).
const RESERVED_PROVIDER_IDS: &[&str] = &[super::scripted::PROVIDER_ID];

/// The API family a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI-compatible Chat Completions (OpenAI, vLLM, llama.cpp server, Ollama, …).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl ProviderKind {
    /// The `kind` text (`openai`, `anthropic`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
        }
    }

    /// The `api` recorded on assistant messages.
    pub fn api(self) -> &'static str {
        match self {
            Self::OpenAi => "openai-completions",
            Self::Anthropic => "anthropic-messages",
        }
    }
}

/// How to reach one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// Provider id: the `provider` of its [`ModelRef`](crate::ModelRef)s.
    pub id: String,
    /// API family.
    pub kind: ProviderKind,
    /// E.g. `https://api.anthropic.com/v1` (the API path, e.g. `/messages`, is appended).
    pub base_url: String,
    /// Environment variable holding the API key (read at every call, so rotating it needs no
    /// restart). `None`: no credentials are sent (local model servers).
    pub api_key_env: Option<String>,
    /// Extra request headers (e.g. an organisation or a gateway's routing header).
    pub headers: BTreeMap<String, String>,
    /// Extra trusted CA certificates (PEM), besides the platform's roots.
    pub ca_file: Option<PathBuf>,
    /// Send the key over plain `http://` to a non-loopback host (refused otherwise).
    pub allow_insecure_key: bool,
}

impl ProviderConfig {
    /// A provider `id` of `kind` at `base_url`, with no key, headers or CA file.
    pub fn new(id: impl Into<String>, kind: ProviderKind, base_url: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            kind,
            base_url: base_url.into(),
            api_key_env: None,
            headers: BTreeMap::new(),
            ca_file: None,
            allow_insecure_key: false,
        }
    }

    /// An OpenAI-compatible provider with id `openai` at `base_url`.
    pub fn openai(base_url: impl Into<String>) -> Self {
        Self::new("openai", ProviderKind::OpenAi, base_url)
    }

    /// The Anthropic provider (id `anthropic`, the public API, `ANTHROPIC_API_KEY`).
    pub fn anthropic() -> Self {
        let mut c = Self::new(
            "anthropic",
            ProviderKind::Anthropic,
            DEFAULT_ANTHROPIC_BASE_URL,
        );
        c.api_key_env = Some(DEFAULT_ANTHROPIC_KEY_ENV.into());
        c
    }

    /// What may stop this provider from working, checked without any network access:
    /// the base URL, the key variable (looked up through `env`), the CA file, the headers.
    pub fn validate(&self, env: &dyn Fn(&str) -> Option<String>) -> Vec<ConfigWarning> {
        let mut out = Vec::new();
        let warn = |message: String| ConfigWarning {
            provider: self.id.clone(),
            message,
        };
        let endpoint = match ProviderUrl::parse(&self.base_url, "") {
            Ok(e) => Some(e),
            Err(e) => {
                out.push(warn(e.to_string()));
                None
            }
        };
        let key_set = match &self.api_key_env {
            Some(name) if env(name).is_none_or(|v| v.is_empty()) => {
                out.push(warn(format!("API key variable {name} is not set")));
                false
            }
            Some(_) => true,
            None => false,
        };
        if let Some(e) = &endpoint
            && key_set
            && !e.is_https()
            && !e.is_loopback()
            && !self.allow_insecure_key
        {
            out.push(warn(format!(
                "the API key would be sent in clear to {e}; calls are refused unless the base URL is https:// or the key is explicitly allowed over http"
            )));
        }
        if let Some(path) = &self.ca_file
            && let Err(e) = std::fs::metadata(path)
        {
            out.push(warn(format!("CA file {}: {e}", path.display())));
        }
        out
    }

    /// Checks what no environment can fix (the id and the headers).
    pub(super) fn check(&self) -> Result<(), String> {
        if self.id.is_empty()
            || self
                .id
                .chars()
                .any(|c| c.is_whitespace() || c == ':' || c == '/')
        {
            return Err(format!(
                "provider id {:?} must be non-empty without spaces, ':' or '/'",
                self.id
            ));
        }
        if RESERVED_PROVIDER_IDS.contains(&self.id.as_str()) {
            return Err(format!("provider id {:?} is built in", self.id));
        }
        for (name, value) in &self.headers {
            if HeaderName::from_bytes(name.as_bytes()).is_err()
                || HeaderValue::from_str(value).is_err()
            {
                return Err(format!("invalid header {name:?}"));
            }
            let lower = name.to_ascii_lowercase();
            if self.api_key_env.is_some() && (lower == "authorization" || lower == "x-api-key") {
                return Err(format!(
                    "header {name:?} contradicts api_key_env (the key is sent from the variable)"
                ));
            }
        }
        Ok(())
    }
}

/// One model a provider serves.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Model id as the API knows it.
    pub id: String,
    /// Display name (default: the id).
    #[serde(default)]
    pub name: Option<String>,
    /// Context window in tokens.
    #[serde(default)]
    pub context_window: Option<u64>,
    /// Most output tokens per response (Anthropic's `max_tokens`).
    #[serde(default)]
    pub max_output: Option<u64>,
    /// Whether the model reasons (a thinking level is sent only to reasoning models; unknown
    /// counts as yes).
    #[serde(default)]
    pub reasoning: Option<bool>,
    /// Prices per million tokens (absent: cost is reported as zero).
    #[serde(default)]
    pub cost: Option<ModelCost>,
}

impl ModelSpec {
    /// A model known only by id.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            ..Self::default()
        }
    }

    /// The registry entry for this model of `provider`: what `pi.models` lists.
    pub fn info(&self, provider: &ProviderConfig) -> (ModelInfo, ModelMeta) {
        (
            ModelInfo {
                provider: provider.id.clone(),
                id: self.id.clone(),
                name: self.name.clone().unwrap_or_else(|| self.id.clone()),
            },
            ModelMeta {
                api: Some(provider.kind.api().to_owned()),
                context_window: self.context_window,
                max_output: self.max_output,
                reasoning: self.reasoning,
                cost: self.cost,
            },
        )
    }

    pub(super) fn check(&self) -> Result<(), String> {
        if self.id.trim().is_empty() {
            return Err("a model has an empty id".into());
        }
        let m = &self.id;
        if self.context_window == Some(0) || self.max_output == Some(0) {
            return Err(format!("model {m:?}: limits must be positive"));
        }
        if let (Some(window), Some(out)) = (self.context_window, self.max_output)
            && out > window
        {
            return Err(format!(
                "model {m:?}: max_output {out} exceeds context_window {window}"
            ));
        }
        if let Some(c) = &self.cost {
            c.check().map_err(|e| format!("model {m:?}: {e}"))?;
        }
        Ok(())
    }
}

/// Something that may keep a configured provider from working (not fatal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The provider id.
    pub provider: String,
    /// What is wrong, naming the variable, URL or file.
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "provider {}: {}", self.provider, self.message)
    }
}

/// An environment holding only `vars`, for the tests of what validates against one
/// ([`ProviderConfig::validate`], the models file's).
#[cfg(test)]
pub(crate) fn env_with(
    vars: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> Option<String> {
    move |name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_bound_for_a_remote_plain_http_server_is_warned_about() {
        let mut c = ProviderConfig::openai("http://gpu-box.example.test:8000/v1");
        c.api_key_env = Some("K".into());
        let w = c.validate(&env_with(&[("K", "secret")]));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].message.contains("in clear"), "{w:?}");
        assert!(!w[0].message.contains("secret"));
        c.allow_insecure_key = true;
        assert!(c.validate(&env_with(&[("K", "secret")])).is_empty());
    }
}
