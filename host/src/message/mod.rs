//! Messages at the model boundary ([`Message`]) and in the application ([`AgentMessage`]).

mod agent;
mod content;
mod model;

pub use agent::{
    AgentMessage, BashExecutionMessage, BranchSummaryMessage, CompactionSummaryMessage,
    CustomMessage,
};
pub use content::{
    AssistantContent, ImageContent, TextContent, ThinkingContent, ToolCall, UserContent,
    joined_text,
};
pub use model::{
    AssistantMessage, Cost, Message, MessageRef, StopReason, ToolResultMessage, Usage, UserMessage,
};
