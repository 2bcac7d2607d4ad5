//! The Messages API request body for a [`ModelRequest`].
//!
//! * System prompt and the last user turn carry `cache_control` (prompt caching: the
//!   conversation prefix is read from the cache on the next call).
//! * Tool results become `tool_result` blocks; consecutive results share one user message.
//! * Thinking produced by this provider with this API is replayed literally: a signed block
//!   as `thinking` with its `signature`, a redacted one as `redacted_thinking` with its
//!   opaque `data` (kept in `thinkingSignature`). Unsigned or foreign reasoning is sent as
//!   plain text, which the API accepts from any source.
//! * The thinking level becomes a `budget_tokens` below `max_tokens` (the model's
//!   `max_output`, else [`DEFAULT_MAX_TOKENS`]).

use baton_protocol::Value;
use serde_json::{Value as Json, json};

use crate::message::{AssistantContent, AssistantMessage, MessageRef, UserContent};
use crate::model_ref::ThinkingLevel;
use crate::provider::ModelRequest;
use crate::provider::config::ModelSpec;

/// The API family this provider records and replays.
pub(crate) const API: &str = "anthropic-messages";
/// `max_tokens` when the models file gives no `max_output` (every current model allows it).
pub const DEFAULT_MAX_TOKENS: u64 = 8192;
/// Tokens always left for the answer when thinking shares `max_tokens`.
pub const MIN_ANSWER_TOKENS: u64 = 1024;
/// The smallest thinking budget the API accepts.
pub const MIN_THINKING_BUDGET: u64 = 1024;

/// Thinking budget per level (`xhigh` as `high`).
pub fn thinking_budget(level: ThinkingLevel) -> Option<u64> {
    match level {
        ThinkingLevel::Off => None,
        ThinkingLevel::Minimal => Some(1024),
        ThinkingLevel::Low => Some(2048),
        ThinkingLevel::Medium => Some(8192),
        ThinkingLevel::High | ThinkingLevel::Xhigh => Some(16384),
    }
}

/// The JSON body for a streaming Messages request from provider `provider_id`.
pub(crate) fn request_body(
    req: &ModelRequest,
    provider_id: &str,
    spec: Option<&ModelSpec>,
) -> Json {
    let mut messages: Vec<Json> = Vec::new();
    for m in &req.messages {
        match m {
            MessageRef::User(u) => {
                let blocks = user_blocks(&u.content);
                if !blocks.is_empty() {
                    messages.push(json!({"role": "user", "content": blocks}));
                }
            }
            MessageRef::Assistant(a) => {
                let blocks = assistant_blocks(a, provider_id);
                if !blocks.is_empty() {
                    messages.push(json!({"role": "assistant", "content": blocks}));
                }
            }
            MessageRef::ToolResult(r) => {
                let mut content = user_blocks(&r.content);
                if content.is_empty() {
                    content.push(json!({"type": "text", "text": "(no output)"}));
                }
                let block = json!({
                    "type": "tool_result",
                    "tool_use_id": tool_id(&r.tool_call_id),
                    "content": content,
                    "is_error": r.is_error,
                });
                let merged = messages.last_mut().and_then(|last| {
                    let is_results = last["role"] == "user"
                        && last["content"]
                            .as_array()
                            .is_some_and(|c| c.iter().all(|b| b["type"] == "tool_result"));
                    is_results.then(|| last["content"].as_array_mut()).flatten()
                });
                match merged {
                    Some(blocks) => blocks.push(block),
                    None => messages.push(json!({"role": "user", "content": [block]})),
                }
            }
        }
    }
    // Cache the prefix up to the last user turn.
    if let Some(last_user) = messages.iter_mut().rev().find(|m| m["role"] == "user")
        && let Some(block) = last_user["content"]
            .as_array_mut()
            .and_then(|b| b.last_mut())
    {
        block["cache_control"] = json!({"type": "ephemeral"});
    }
    let mut max_tokens = spec
        .and_then(|s| s.max_output)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    let mut body = json!({
        "model": req.model,
        "messages": messages,
        "stream": true,
    });
    if !req.system_prompt.is_empty() {
        body["system"] = json!([{
            "type": "text",
            "text": req.system_prompt,
            "cache_control": {"type": "ephemeral"},
        }]);
    }
    if !req.tools.is_empty() {
        body["tools"] = Json::Array(
            req.tools
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "description": t.description,
                        "input_schema": serde_json::to_value(&t.parameters).unwrap_or(Json::Null),
                    })
                })
                .collect(),
        );
    }
    let reasons = spec.and_then(|s| s.reasoning) != Some(false);
    if let Some(budget) = thinking_budget(req.thinking).filter(|_| reasons) {
        let room = max_tokens.saturating_sub(MIN_ANSWER_TOKENS);
        let budget = budget.min(room);
        if budget >= MIN_THINKING_BUDGET {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
    }
    max_tokens = max_tokens.max(1);
    body["max_tokens"] = json!(max_tokens);
    body
}

fn user_blocks(content: &[UserContent]) -> Vec<Json> {
    content
        .iter()
        .filter_map(|c| match c {
            // The API refuses empty text blocks.
            UserContent::Text(t) if t.text.is_empty() => None,
            UserContent::Text(t) => Some(json!({"type": "text", "text": t.text})),
            UserContent::Image(i) => Some(json!({
                "type": "image",
                "source": {"type": "base64", "media_type": i.mime_type, "data": i.data},
            })),
        })
        .collect()
}

fn assistant_blocks(a: &AssistantMessage, provider_id: &str) -> Vec<Json> {
    let own = a.api == API && a.provider == provider_id;
    a.content
        .iter()
        .filter_map(|block| match block {
            AssistantContent::Text(t) if t.text.is_empty() => None,
            AssistantContent::Text(t) => Some(json!({"type": "text", "text": t.text})),
            AssistantContent::Thinking(t) => match (&t.thinking_signature, t.redacted) {
                (Some(data), Some(true)) if own => {
                    Some(json!({"type": "redacted_thinking", "data": data}))
                }
                (Some(sig), _) if own && !sig.is_empty() => Some(json!({
                    "type": "thinking",
                    "thinking": t.thinking,
                    "signature": sig,
                })),
                _ if t.thinking.is_empty() || t.redacted == Some(true) => None,
                _ => Some(json!({"type": "text", "text": t.thinking})),
            },
            AssistantContent::ToolCall(c) => Some(json!({
                "type": "tool_use",
                "id": tool_id(&c.id),
                "name": c.name,
                "input": match &c.arguments {
                    args @ Value::Map(_) => serde_json::from_str::<Json>(&args.to_json())
                        .unwrap_or_else(|_| json!({})),
                    // Unparseable arguments: the API needs an object.
                    _ => json!({}),
                },
            })),
        })
        .collect()
}

/// Tool-use ids must match `^[a-zA-Z0-9_-]+$` (ids from other providers may not); the same
/// mapping is applied to a call and its result, so they still pair.
fn tool_id(id: &str) -> String {
    let mapped: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if mapped.is_empty() {
        "toolu_".into()
    } else {
        mapped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{
        Message, StopReason, TextContent, ThinkingContent, ToolCall, ToolResultMessage, Usage,
        UserMessage,
    };
    use crate::tool::ToolSpec;

    fn reply(provider: &str) -> AssistantMessage {
        let mut signed = ThinkingContent::new("plan");
        signed.thinking_signature = Some("sig-1".into());
        let mut redacted = ThinkingContent::new("");
        redacted.thinking_signature = Some("opaque".into());
        redacted.redacted = Some(true);
        AssistantMessage {
            content: vec![
                AssistantContent::Thinking(signed),
                AssistantContent::Thinking(redacted),
                AssistantContent::Text(TextContent::new("Reading.")),
                AssistantContent::ToolCall(ToolCall::new(
                    "call|1",
                    "read",
                    Value::from_json(r#"{"path":"a"}"#).unwrap(),
                )),
                AssistantContent::ToolCall(ToolCall::new(
                    "call|2",
                    "read",
                    Value::from_json(r#"{"path":"b"}"#).unwrap(),
                )),
            ],
            api: API.into(),
            provider: provider.into(),
            model: "claude".into(),
            response_model: None,
            response_id: None,
            usage: Usage::default(),
            stop_reason: StopReason::ToolUse,
            error_message: None,
            raw_stop_reason: None,
            timestamp: 2,
        }
    }

    fn result(id: &str, text: &str) -> Message {
        Message::ToolResult(ToolResultMessage {
            tool_call_id: id.into(),
            tool_name: "read".into(),
            content: vec![UserContent::text(text)],
            details: None,
            is_error: id.ends_with('2'),
            timestamp: 3,
        })
    }

    fn request(provider_reply: &str, thinking: ThinkingLevel) -> ModelRequest {
        ModelRequest {
            model: "claude".into(),
            system_prompt: "be brief".into(),
            messages: vec![
                Message::User(UserMessage::text("read a and b", 1)),
                Message::Assistant(reply(provider_reply)),
                result("call|1", "A"),
                result("call|2", "no such file"),
            ]
            .into(),
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "read a file".into(),
                parameters: Value::from_json(r#"{"type":"object"}"#).unwrap(),
            }],
            thinking,
        }
    }

    #[test]
    fn signatures_and_redacted_thinking_are_replayed_literally() {
        let body = request_body(&request("anthropic", ThinkingLevel::Off), "anthropic", None);
        let a = &body["messages"][1]["content"];
        assert_eq!(
            a[0],
            json!({"type": "thinking", "thinking": "plan", "signature": "sig-1"})
        );
        assert_eq!(a[1], json!({"type": "redacted_thinking", "data": "opaque"}));
        assert_eq!(a[2], json!({"type": "text", "text": "Reading."}));
        assert_eq!(a[3]["type"], "tool_use");
        assert_eq!(a[3]["id"], "call_1");
        assert_eq!(a[3]["input"], json!({"path": "a"}));
    }

    #[test]
    fn tool_results_share_one_user_message_and_pair_by_mapped_id() {
        let body = request_body(&request("anthropic", ThinkingLevel::Off), "anthropic", None);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        let results = messages[2]["content"].as_array().unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0]["tool_use_id"], "call_1");
        assert_eq!(results[1]["tool_use_id"], "call_2");
        assert_eq!(results[1]["is_error"], true);
        assert_eq!(results[0]["content"][0]["text"], "A");
        assert_eq!(
            results[1]["cache_control"],
            json!({"type": "ephemeral"}),
            "the last user turn is cached"
        );
        assert_eq!(body["system"][0]["text"], "be brief");
        assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
        assert!(body.get("thinking").is_none());
    }

    #[test]
    fn foreign_thinking_is_sent_as_text_and_redacted_foreign_thinking_is_dropped() {
        let body = request_body(&request("other", ThinkingLevel::Off), "anthropic", None);
        let a = body["messages"][1]["content"].as_array().unwrap();
        assert_eq!(a[0], json!({"type": "text", "text": "plan"}));
        assert_eq!(a[1], json!({"type": "text", "text": "Reading."}));
    }

    #[test]
    fn the_thinking_budget_fits_below_max_tokens() {
        let body = request_body(
            &request("anthropic", ThinkingLevel::Medium),
            "anthropic",
            None,
        );
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": DEFAULT_MAX_TOKENS - MIN_ANSWER_TOKENS})
        );
        let mut spec = ModelSpec::new("claude");
        spec.max_output = Some(64_000);
        let body = request_body(
            &request("anthropic", ThinkingLevel::High),
            "anthropic",
            Some(&spec),
        );
        assert_eq!(body["thinking"]["budget_tokens"], 16384);
        assert_eq!(body["max_tokens"], 64_000);
        spec.max_output = Some(1500);
        let body = request_body(
            &request("anthropic", ThinkingLevel::Low),
            "anthropic",
            Some(&spec),
        );
        assert!(
            body.get("thinking").is_none(),
            "no room for the minimum budget"
        );
        spec.max_output = None;
        spec.reasoning = Some(false);
        let body = request_body(
            &request("anthropic", ThinkingLevel::High),
            "anthropic",
            Some(&spec),
        );
        assert!(body.get("thinking").is_none());
    }
}
