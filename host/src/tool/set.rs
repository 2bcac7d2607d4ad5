//! The tools of a session.

use std::sync::Arc;

use super::bash::{BashConfig, BashTool};
use super::contract::{Tool, ToolSpec};
use super::edit::EditTool;
use super::path::FileAccess;
use super::read::ReadTool;
use super::write::WriteTool;

/// The tools of a session, in declaration order.
#[derive(Debug, Clone, Default)]
pub struct ToolSet {
    tools: Vec<Arc<dyn Tool>>,
}

impl ToolSet {
    /// No tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// `read`, `write`, `edit` and `bash`, for one session: the file tools share one
    /// [`FileAccess`] (confined to the working directory unless `bash.confine` is off).
    pub fn coding(bash: BashConfig) -> Self {
        let access = if bash.confine {
            FileAccess::confined()
        } else {
            FileAccess::unconfined()
        };
        Self::new()
            .with(Arc::new(ReadTool::new(access.clone())))
            .with(Arc::new(WriteTool::new(access.clone())))
            .with(Arc::new(EditTool::new(access)))
            .with(Arc::new(BashTool::new(bash)))
    }

    /// Adds a tool (a later tool with the same name shadows nothing: the first wins).
    #[must_use]
    pub fn with(mut self, tool: Arc<dyn Tool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.name() == name)
    }

    /// Declarations for providers.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name().to_owned(),
                description: t.description().to_owned(),
                parameters: t.parameters().to_json_schema(),
            })
            .collect()
    }

    /// True when there are no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}
