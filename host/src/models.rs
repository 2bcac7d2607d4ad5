//! The models a host offers (`pi.models`): model references mapped to providers.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::provider::scripted::{MODEL_ID, PROVIDER_ID, ScriptedConfig, ScriptedProvider};
use crate::provider::{ModelRef, Provider};

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

/// Registered models, in registration order.
#[derive(Debug, Clone, Default)]
pub struct ModelRegistry {
    entries: Vec<(ModelInfo, Arc<dyn Provider>)>,
}

impl ModelRegistry {
    /// No models.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only the embedded scripted model.
    pub fn scripted(config: ScriptedConfig) -> Self {
        let mut r = Self::new();
        r.register(
            ModelInfo {
                provider: PROVIDER_ID.into(),
                id: MODEL_ID.into(),
                name: "Scripted (offline demo)".into(),
            },
            Arc::new(ScriptedProvider::new(config)),
        );
        r
    }

    /// Adds a model served by `provider` (a later registration of the same reference is
    /// ignored).
    pub fn register(&mut self, info: ModelInfo, provider: Arc<dyn Provider>) {
        if self.resolve(&info.model_ref()).is_none() {
            self.entries.push((info, provider));
        }
    }

    /// The provider for `model`.
    pub fn resolve(&self, model: &ModelRef) -> Option<Arc<dyn Provider>> {
        self.entries
            .iter()
            .find(|(info, _)| info.provider == model.provider && info.id == model.id)
            .map(|(_, p)| Arc::clone(p))
    }

    /// Every model.
    pub fn list(&self) -> Vec<ModelInfo> {
        self.entries.iter().map(|(info, _)| info.clone()).collect()
    }

    /// The first registered model (the host default).
    pub fn first(&self) -> Option<ModelRef> {
        self.entries.first().map(|(info, _)| info.model_ref())
    }
}
