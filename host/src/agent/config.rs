//! What a run is configured with: the model, its prompt and reasoning effort, the tools and
//! how a batch of them runs.

use std::path::PathBuf;
use std::sync::Arc;

use crate::model_ref::ThinkingLevel;
use crate::projection::ContextTransform;
use crate::provider::Provider;
use crate::tool::ToolSet;

/// Everything a run needs besides its context.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The model provider.
    pub provider: Arc<dyn Provider>,
    /// Model id within the provider.
    pub model: String,
    /// System prompt.
    pub system_prompt: String,
    /// Reasoning effort.
    pub thinking: ThinkingLevel,
    /// Callable tools.
    pub tools: ToolSet,
    /// Optional rich → rich transform before each projection. With one, every model call
    /// copies and projects the whole context (O(n)); without, it takes the session's
    /// incrementally projected context (O(1)).
    pub transform: Option<Arc<dyn ContextTransform>>,
    /// Parallel or sequential batches.
    pub tool_execution: ToolExecution,
    /// Working directory for tools.
    pub cwd: PathBuf,
    /// Where tools keep artefacts (full bash output).
    pub artifacts_dir: PathBuf,
}

/// How a batch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ToolExecution {
    /// All calls at once.
    #[default]
    Parallel,
    /// One after another; an abort skips the calls not yet started.
    Sequential,
}
