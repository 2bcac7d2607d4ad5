//! Which model a session talks to ([`ModelRef`]) and how hard it reasons
//! ([`ThinkingLevel`]): recorded in the journal, shown in a session's state, sent with each
//! model call.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which model a session uses: provider id plus model id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelRef {
    /// Provider id (`scripted`, `openai`).
    pub provider: String,
    /// Model id within the provider.
    pub id: String,
}

impl ModelRef {
    /// A reference.
    pub fn new(provider: impl Into<String>, id: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            id: id.into(),
        }
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.id)
    }
}

/// How much the model should reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingLevel {
    /// No reasoning.
    #[default]
    Off,
    /// Minimal.
    Minimal,
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
    /// Extra high.
    Xhigh,
}

impl ThinkingLevel {
    /// The wire text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Xhigh => "xhigh",
        }
    }

    /// Parses the wire text.
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Off,
            Self::Minimal,
            Self::Low,
            Self::Medium,
            Self::High,
            Self::Xhigh,
        ]
        .into_iter()
        .find(|l| l.as_str() == text)
    }
}
