//! The models file: the providers a host offers and the models each serves (TOML, default
//! [`default_models_path`]), registered into a [`ModelRegistry`]:
//!
//! ```toml
//! [providers.local]
//! kind = "openai"                       # or "anthropic"
//! base_url = "http://127.0.0.1:8080/v1"
//!
//! [[providers.local.models]]
//! id = "qwen3-coder"
//! name = "Qwen3 Coder (llama.cpp)"
//! context_window = 131072
//! max_output = 8192
//!
//! [providers.anthropic]
//! kind = "anthropic"                    # base_url and api_key_env have defaults
//!
//! [[providers.anthropic.models]]
//! id = "claude-sonnet-4-5"
//! context_window = 200000
//! max_output = 64000
//! reasoning = true
//! cost = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }
//! ```
//!
//! Parsing fails only on what cannot be meant (unknown keys, duplicate or contradictory
//! entries); what may be fixed outside the file is a [`ConfigWarning`] (see
//! [`ModelsFile::validate`]).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton_protocol::unix::BaseDir;
use serde::Deserialize;

use super::Provider;
use super::anthropic::AnthropicProvider;
use super::config::{
    ConfigWarning, DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_KEY_ENV, DEFAULT_OPENAI_BASE_URL,
    DEFAULT_OPENAI_KEY_ENV, ModelSpec, ProviderConfig, ProviderKind,
};
use super::openai::OpenAiProvider;
use super::registry::ModelRegistry;

/// Largest models file read.
pub const MAX_MODELS_FILE_BYTES: u64 = 1024 * 1024;

/// A models file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelsFileError {
    /// The file cannot be read.
    #[error("cannot read models file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The file is too large.
    #[error("models file {} is larger than {MAX_MODELS_FILE_BYTES} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// Not TOML of the expected shape.
    #[error("models file {}: {message}", path.display())]
    Syntax {
        /// The file (empty when parsed from text).
        path: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// Contradictory or impossible entries.
    #[error("models file {}: provider {provider}: {message}", path.display())]
    Invalid {
        /// The file (empty when parsed from text).
        path: PathBuf,
        /// The provider id.
        provider: String,
        /// What is wrong.
        message: String,
    },
}

/// One provider of a models file with its models.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderEntry {
    /// How to reach it.
    pub config: ProviderConfig,
    /// What it serves, in file order.
    pub models: Vec<ModelSpec>,
}

impl ProviderEntry {
    /// The provider object for this entry.
    pub fn provider(&self) -> Arc<dyn Provider> {
        build_provider(&self.config, &self.models)
    }
}

/// A parsed models file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelsFile {
    /// Providers, sorted by id.
    pub providers: Vec<ProviderEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    providers: BTreeMap<String, RawProvider>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    kind: ProviderKind,
    #[serde(default)]
    base_url: Option<String>,
    #[serde(default)]
    api_key_env: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    ca_file: Option<PathBuf>,
    #[serde(default)]
    allow_insecure_key: bool,
    #[serde(default)]
    models: Vec<ModelSpec>,
}

impl ModelsFile {
    /// Reads and parses `path` (relative CA files are relative to its directory).
    ///
    /// # Errors
    /// [`ModelsFileError`] naming the file.
    pub fn load(path: &Path) -> Result<Self, ModelsFileError> {
        let read_err = |source| ModelsFileError::Read {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_err)?;
        let mut text = String::new();
        file.take(MAX_MODELS_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(read_err)?;
        if text.len() as u64 > MAX_MODELS_FILE_BYTES {
            return Err(ModelsFileError::TooLarge {
                path: path.to_owned(),
            });
        }
        Self::parse(&text, path)
    }

    /// Parses models-file text; `path` names it in errors and anchors relative CA files.
    ///
    /// # Errors
    /// [`ModelsFileError::Syntax`] or [`ModelsFileError::Invalid`].
    pub fn parse(text: &str, path: &Path) -> Result<Self, ModelsFileError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| ModelsFileError::Syntax {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let dir = path.parent().unwrap_or(Path::new(""));
        let mut providers = Vec::new();
        for (id, p) in raw.providers {
            let invalid = |message: String| ModelsFileError::Invalid {
                path: path.to_owned(),
                provider: id.clone(),
                message,
            };
            let (default_url, default_key) = match p.kind {
                ProviderKind::Anthropic => {
                    (DEFAULT_ANTHROPIC_BASE_URL, Some(DEFAULT_ANTHROPIC_KEY_ENV))
                }
                ProviderKind::OpenAi => (
                    DEFAULT_OPENAI_BASE_URL,
                    p.base_url.is_none().then_some(DEFAULT_OPENAI_KEY_ENV),
                ),
            };
            let config = ProviderConfig {
                id: id.clone(),
                kind: p.kind,
                base_url: p.base_url.unwrap_or_else(|| default_url.to_owned()),
                api_key_env: p
                    .api_key_env
                    .filter(|v| !v.is_empty())
                    .or_else(|| default_key.map(str::to_owned)),
                headers: p.headers,
                ca_file: p
                    .ca_file
                    .map(|f| if f.is_relative() { dir.join(f) } else { f }),
                allow_insecure_key: p.allow_insecure_key,
            };
            config.check().map_err(invalid)?;
            let mut seen = BTreeSet::new();
            for m in &p.models {
                m.check().map_err(invalid)?;
                if !seen.insert(m.id.as_str()) {
                    return Err(invalid(format!("model {:?} is listed twice", m.id)));
                }
            }
            providers.push(ProviderEntry {
                config,
                models: p.models,
            });
        }
        Ok(Self { providers })
    }

    /// Every provider's warnings (see [`ProviderConfig::validate`]), plus providers that list
    /// no model.
    pub fn validate(&self, env: &dyn Fn(&str) -> Option<String>) -> Vec<ConfigWarning> {
        let mut out = Vec::new();
        for p in &self.providers {
            if p.models.is_empty() {
                out.push(ConfigWarning {
                    provider: p.config.id.clone(),
                    message: "lists no models, so none can be chosen".into(),
                });
            }
            out.extend(p.config.validate(env));
        }
        out
    }

    /// Registers every model with its provider (one provider object per entry).
    pub fn register(&self, registry: &mut ModelRegistry) {
        for p in &self.providers {
            let provider = p.provider();
            for m in &p.models {
                let (info, meta) = m.info(&p.config);
                registry.register_with_meta(info, meta, Arc::clone(&provider));
            }
        }
    }
}

/// The provider object for `config` serving `models` (their limits and prices apply).
pub fn build_provider(config: &ProviderConfig, models: &[ModelSpec]) -> Arc<dyn Provider> {
    match config.kind {
        ProviderKind::OpenAi => {
            Arc::new(OpenAiProvider::new(config.clone()).with_models(models.to_vec()))
        }
        ProviderKind::Anthropic => {
            Arc::new(AnthropicProvider::new(config.clone()).with_models(models.to_vec()))
        }
    }
}

/// The default models file: `baton/models.toml` under the XDG config directory
/// (`$XDG_CONFIG_HOME` when absolute, else `~/.config`); `None` without either variable.
pub fn default_models_path() -> Option<PathBuf> {
    models_path_from(
        std::env::var_os(BaseDir::Config.variable()),
        std::env::var_os("HOME"),
    )
}

/// [`default_models_path`] from given variable values (a relative `XDG_CONFIG_HOME` is
/// ignored, as the XDG specification says).
pub fn models_path_from(
    xdg_config_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    let base = BaseDir::Config.resolve(xdg_config_home.as_deref(), home.as_deref())?;
    Some(base.join("baton").join("models.toml"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::config::env_with;

    const EXAMPLE: &str = r#"
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8080/v1"

[[providers.local.models]]
id = "qwen3-coder"
name = "Qwen3 Coder"
context_window = 131072
max_output = 8192

[providers.claude]
kind = "anthropic"
ca_file = "corp-ca.pem"
headers = { "anthropic-beta" = "interleaved-thinking-2025-05-14" }

[[providers.claude.models]]
id = "claude-sonnet-4-5"
reasoning = true
cost = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }
"#;

    #[test]
    fn the_example_file_parses_with_defaults_filled_in() {
        let f = ModelsFile::parse(EXAMPLE, Path::new("/etc/baton/models.toml")).unwrap();
        assert_eq!(f.providers.len(), 2);
        let claude = &f.providers[0];
        assert_eq!(claude.config.id, "claude");
        assert_eq!(claude.config.base_url, DEFAULT_ANTHROPIC_BASE_URL);
        assert_eq!(
            claude.config.api_key_env.as_deref(),
            Some(DEFAULT_ANTHROPIC_KEY_ENV)
        );
        assert_eq!(
            claude.config.ca_file.as_deref(),
            Some(Path::new("/etc/baton/corp-ca.pem"))
        );
        assert_eq!(claude.models[0].cost.unwrap().output, 15.0);
        let local = &f.providers[1];
        assert_eq!(
            local.config.api_key_env, None,
            "an own base URL needs no key"
        );
        let (info, meta) = local.models[0].info(&local.config);
        assert_eq!(info.name, "Qwen3 Coder");
        assert_eq!(meta.api.as_deref(), Some("openai-completions"));
    }

    #[test]
    fn warnings_name_the_missing_key_variable_bad_url_and_missing_ca_file() {
        let f = ModelsFile::parse(EXAMPLE, Path::new("/nonexistent-dir/models.toml")).unwrap();
        let warnings = f.validate(&env_with(&[]));
        let text: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|w| w == "provider claude: API key variable ANTHROPIC_API_KEY is not set"),
            "{text:?}"
        );
        assert!(text.iter().any(|w| w.contains("corp-ca.pem")), "{text:?}");
        assert!(
            !text.iter().any(|w| w.starts_with("provider local")),
            "{text:?}"
        );

        let bad = ModelsFile::parse(
            "[providers.x]\nkind = \"openai\"\nbase_url = \"htp:/nope\"\n[[providers.x.models]]\nid = \"m\"\n",
            Path::new("m.toml"),
        )
        .unwrap();
        let w = bad.validate(&env_with(&[]));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].message.contains("scheme"), "{w:?}");
    }

    #[test]
    fn contradictory_entries_are_errors_naming_the_provider() {
        let cases = [
            (
                "[providers.a]\nkind = \"openai\"\n[[providers.a.models]]\nid = \"m\"\n[[providers.a.models]]\nid = \"m\"\n",
                "listed twice",
            ),
            (
                "[providers.a]\nkind = \"openai\"\n[[providers.a.models]]\nid = \"m\"\ncontext_window = 1000\nmax_output = 2000\n",
                "exceeds context_window",
            ),
            (
                "[providers.a]\nkind = \"openai\"\n[[providers.a.models]]\nid = \"m\"\ncost = { input = -1.0 }\n",
                "non-negative",
            ),
            ("[providers.scripted]\nkind = \"openai\"\n", "built in"),
            (
                "[providers.a]\nkind = \"anthropic\"\nheaders = { \"x-api-key\" = \"k\" }\n",
                "contradicts api_key_env",
            ),
        ];
        for (text, needle) in cases {
            let err = ModelsFile::parse(text, Path::new("models.toml")).unwrap_err();
            assert!(matches!(err, ModelsFileError::Invalid { .. }), "{err}");
            assert!(err.to_string().contains(needle), "{err}");
        }
    }

    #[test]
    fn unknown_keys_and_kinds_are_syntax_errors_with_a_position() {
        for text in [
            "[providers.a]\nkind = \"gemini\"\n",
            "[providers.a]\nkind = \"openai\"\nbase_ulr = \"x\"\n",
            "[provider.a]\nkind = \"openai\"\n",
        ] {
            let err = ModelsFile::parse(text, Path::new("models.toml")).unwrap_err();
            assert!(matches!(err, ModelsFileError::Syntax { .. }), "{err}");
            assert!(err.to_string().contains("line"), "{err}");
        }
    }

    #[test]
    fn registered_models_carry_their_metadata() {
        let f = ModelsFile::parse(EXAMPLE, Path::new("models.toml")).unwrap();
        let mut r = ModelRegistry::new();
        f.register(&mut r);
        let list = r.list();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].provider, "claude");
        assert_eq!(r.meta(&list[0].model_ref()).unwrap().reasoning, Some(true));
        assert_eq!(
            r.meta(&list[1].model_ref()).unwrap().context_window,
            Some(131_072)
        );
        assert!(r.resolve(&list[1].model_ref()).is_some());
        assert_eq!(
            r.resolve(&list[0].model_ref()).unwrap().api(),
            "anthropic-messages"
        );
    }

    #[test]
    fn the_default_path_follows_xdg_then_home() {
        assert_eq!(
            models_path_from(Some("/x".into()), Some("/home/u".into())),
            Some(PathBuf::from("/x/baton/models.toml"))
        );
        assert_eq!(
            models_path_from(Some("relative".into()), Some("/home/u".into())),
            Some(PathBuf::from("/home/u/.config/baton/models.toml"))
        );
        assert_eq!(models_path_from(None, None), None);
    }
}
