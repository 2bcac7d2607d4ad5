//! Content blocks: the ordered parts of a message (`text`, `thinking`, `image`, `toolCall`).
//!
//! The discriminants and field names are exactly the design's (`type: "toolCall"`, camelCase
//! fields). Opaque provider continuity values (`textSignature`, `thinkingSignature`,
//! `thoughtSignature`) are stored as given and never interpreted.

use std::fmt;

use baton_protocol::{Map, Value};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

/// Plain text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextContent {
    /// The text.
    pub text: String,
    /// Opaque provider signature, replayed untouched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_signature: Option<String>,
}

impl TextContent {
    /// Text without a signature.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            text_signature: None,
        }
    }
}

/// Model reasoning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThinkingContent {
    /// The reasoning text (may be empty when redacted).
    pub thinking: String,
    /// Opaque provider signature, replayed untouched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_signature: Option<String>,
    /// True when the provider redacted the reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<bool>,
}

impl ThinkingContent {
    /// Reasoning text without a signature.
    pub fn new(thinking: impl Into<String>) -> Self {
        Self {
            thinking: thinking.into(),
            thinking_signature: None,
            redacted: None,
        }
    }
}

/// An inline image (base64 data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageContent {
    /// Base64-encoded bytes.
    pub data: String,
    /// MIME type, e.g. `image/png`.
    pub mime_type: String,
}

/// A model's request to run a tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// Call id; the matching tool result carries it as `toolCallId`.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as the model produced them. Normally an object; a provider that received
    /// unparseable argument text keeps it here as a string so it replays unchanged (and fails
    /// validation, producing an error result).
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// Opaque provider signature, replayed untouched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thought_signature: Option<String>,
    /// Opaque provider namespace, replayed untouched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl ToolCall {
    /// A call with object arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
            thought_signature: None,
            namespace: None,
        }
    }
}

fn empty_object() -> Value {
    Value::Map(Map::new())
}

/// What a user message, a tool result or a custom message may contain: text and images.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum UserContent {
    /// Text.
    Text(TextContent),
    /// An image.
    Image(ImageContent),
}

impl UserContent {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text(TextContent::new(text))
    }

    /// The text, if this is a text block.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Self::Text(t) => Some(&t.text),
            Self::Image(_) => None,
        }
    }
}

/// What an assistant message may contain: text, thinking and tool calls, in model order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum AssistantContent {
    /// Text.
    Text(TextContent),
    /// Reasoning.
    Thinking(ThinkingContent),
    /// A tool call.
    ToolCall(ToolCall),
}

/// Concatenates the text blocks of `content`, separated by newlines.
pub fn joined_text(content: &[UserContent]) -> String {
    let mut out = String::new();
    for t in content.iter().filter_map(UserContent::as_text) {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(t);
    }
    out
}

/// Serde helper: user content may be stored as a string (the short form) or as an array.
pub(crate) fn de_user_content<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<UserContent>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<UserContent>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string or an array of text/image blocks")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(vec![UserContent::text(v)])
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(vec![UserContent::text(v)])
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            // Old or hand-edited records may lack content: normalise to empty.
            Ok(Vec::new())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(block) = seq.next_element()? {
                out.push(block);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_block_uses_the_tool_call_discriminant() {
        let block = AssistantContent::ToolCall(ToolCall::new(
            "call_1",
            "read",
            Value::from_json(r#"{"path":"a.rs"}"#).unwrap(),
        ));
        let json = serde_json::to_string(&block).unwrap();
        assert_eq!(
            json,
            r#"{"type":"toolCall","id":"call_1","name":"read","arguments":{"path":"a.rs"}}"#
        );
    }

    #[test]
    fn signatures_survive_a_round_trip_untouched() {
        let text = r#"{"type":"thinking","thinking":"hm","thinkingSignature":"c2lnbmF0dXJl/+=","redacted":false}"#;
        let block: AssistantContent = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&block).unwrap(), text);
    }

    #[test]
    fn argument_key_order_is_preserved() {
        let text = r#"{"type":"toolCall","id":"c","name":"n","arguments":{"z":1,"a":2,"m":[3]}}"#;
        let block: AssistantContent = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&block).unwrap(), text);
    }
}
