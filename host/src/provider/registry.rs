//! The models a host offers (`pi.models`): model references mapped to providers, with what
//! is known about each model (limits, prices, reasoning) from the models file.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Provider;
use super::cost::ModelCost;
use super::scripted::{MODEL_ID, PROVIDER_ID, ScriptedConfig, ScriptedProvider};
use crate::model_ref::ModelRef;

/// A model as listed to clients.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Provider id.
    pub provider: String,
    /// Model id.
    pub id: String,
    /// Display name.
    pub name: String,
}

impl ModelInfo {
    /// The reference to this model.
    pub fn model_ref(&self) -> ModelRef {
        ModelRef::new(&self.provider, &self.id)
    }
}

/// What is known about a model beyond its name; every field may be unknown.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ModelMeta {
    /// API family (`openai-completions`, `anthropic-messages`, `scripted`).
    pub api: Option<String>,
    /// Context window in tokens.
    pub context_window: Option<u64>,
    /// Most output tokens per response.
    pub max_output: Option<u64>,
    /// Whether the model reasons.
    pub reasoning: Option<bool>,
    /// Prices per million tokens.
    pub cost: Option<ModelCost>,
}

/// Registered models, in registration order.
#[derive(Debug, Clone, Default)]
pub struct ModelRegistry {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    info: ModelInfo,
    meta: ModelMeta,
    provider: Arc<dyn Provider>,
}

impl ModelRegistry {
    /// No models.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only the embedded scripted model (listed with its name, nothing known about it).
    pub fn scripted(config: ScriptedConfig) -> Self {
        let mut r = Self::new();
        r.register_with_meta(
            ModelInfo {
                provider: PROVIDER_ID.into(),
                id: MODEL_ID.into(),
                name: "Scripted (offline demo)".into(),
            },
            ModelMeta::default(),
            Arc::new(ScriptedProvider::new(config)),
        );
        r
    }

    /// Adds a model served by `provider`, with nothing known about it (a later registration
    /// of the same reference is ignored).
    pub fn register(&mut self, info: ModelInfo, provider: Arc<dyn Provider>) {
        self.register_with_meta(info, ModelMeta::default(), provider);
    }

    /// Adds a model with its metadata (a later registration of the same reference is
    /// ignored).
    pub fn register_with_meta(
        &mut self,
        info: ModelInfo,
        meta: ModelMeta,
        provider: Arc<dyn Provider>,
    ) {
        if self.resolve(&info.model_ref()).is_none() {
            self.entries.push(Entry {
                info,
                meta,
                provider,
            });
        }
    }

    fn entry(&self, model: &ModelRef) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.info.provider == model.provider && e.info.id == model.id)
    }

    /// The provider for `model`.
    pub fn resolve(&self, model: &ModelRef) -> Option<Arc<dyn Provider>> {
        self.entry(model).map(|e| Arc::clone(&e.provider))
    }

    /// What is known about `model`.
    pub fn meta(&self, model: &ModelRef) -> Option<&ModelMeta> {
        self.entry(model).map(|e| &e.meta)
    }

    /// Every model.
    pub fn list(&self) -> Vec<ModelInfo> {
        self.entries.iter().map(|e| e.info.clone()).collect()
    }

    /// The first registered model (the host default).
    pub fn first(&self) -> Option<ModelRef> {
        self.entries.first().map(|e| e.info.model_ref())
    }
}
