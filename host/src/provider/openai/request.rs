//! The chat-completions request body for a [`ModelRequest`].
//!
//! Reasoning is replayed the way it arrived: a thinking block produced by this provider with
//! the chat-completions API carries, as its `thinkingSignature`, the name of the delta field
//! the server streamed it in (`reasoning_content`, `reasoning`, `reasoning_text`), and is sent
//! back in that field of the assistant message (llama.cpp, vLLM and DeepSeek-style servers
//! read it; others ignore it). Reasoning from another provider or API is not sent.

use baton_protocol::Value;
use serde_json::{Value as Json, json};

use crate::message::{AssistantContent, AssistantMessage, MessageRef, UserContent, joined_text};
use crate::model_ref::ThinkingLevel;
use crate::provider::ModelRequest;
use crate::provider::config::ModelSpec;

/// The API family this provider records and replays.
pub(crate) const API: &str = "openai-completions";
/// Delta fields reasoning arrives in, in the order they are preferred.
pub(crate) const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "reasoning", "reasoning_text"];

/// The JSON body for a streaming chat-completions request from provider `provider_id`.
pub(crate) fn request_body(
    req: &ModelRequest,
    provider_id: &str,
    spec: Option<&ModelSpec>,
) -> Json {
    let mut messages = Vec::new();
    if !req.system_prompt.is_empty() {
        messages.push(json!({"role": "system", "content": req.system_prompt}));
    }
    for m in &req.messages {
        match m {
            MessageRef::User(u) => {
                messages.push(json!({"role": "user", "content": user_content(&u.content)}));
            }
            MessageRef::Assistant(a) => {
                if let Some(msg) = assistant(a, provider_id) {
                    messages.push(msg);
                }
            }
            MessageRef::ToolResult(r) => messages.push(json!({
                "role": "tool",
                "tool_call_id": r.tool_call_id,
                "content": joined_text(&r.content),
            })),
        }
    }
    let mut body = json!({
        "model": req.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if !req.tools.is_empty() {
        let tools: Vec<Json> = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": serde_json::to_value(&t.parameters).unwrap_or(Json::Null),
                    },
                })
            })
            .collect();
        body["tools"] = Json::Array(tools);
    }
    let reasons = spec.and_then(|s| s.reasoning) != Some(false);
    if let Some(effort) = reasoning_effort(req.thinking).filter(|_| reasons) {
        body["reasoning_effort"] = Json::String(effort.into());
    }
    body
}

/// `reasoning_effort` for a thinking level (`xhigh` is sent as `high`, the most every
/// compatible server accepts; `off` sends none).
pub(crate) fn reasoning_effort(level: ThinkingLevel) -> Option<&'static str> {
    match level {
        ThinkingLevel::Off => None,
        ThinkingLevel::Minimal => Some("minimal"),
        ThinkingLevel::Low => Some("low"),
        ThinkingLevel::Medium => Some("medium"),
        ThinkingLevel::High | ThinkingLevel::Xhigh => Some("high"),
    }
}

fn assistant(a: &AssistantMessage, provider_id: &str) -> Option<Json> {
    let text = a.text();
    let calls: Vec<Json> = a
        .tool_calls()
        .map(|c| {
            json!({
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": arguments_text(&c.arguments)},
            })
        })
        .collect();
    let mut obj = serde_json::Map::new();
    obj.insert("role".into(), "assistant".into());
    if a.api == API && a.provider == provider_id {
        for block in &a.content {
            if let AssistantContent::Thinking(t) = block
                && let Some(field) = t.thinking_signature.as_deref()
                && REASONING_FIELDS.contains(&field)
                && !t.thinking.is_empty()
            {
                match obj.get_mut(field) {
                    Some(Json::String(s)) => {
                        s.push('\n');
                        s.push_str(&t.thinking);
                    }
                    _ => {
                        obj.insert(field.into(), Json::String(t.thinking.clone()));
                    }
                }
            }
        }
    }
    if text.is_empty() && calls.is_empty() && obj.len() == 1 {
        // Servers refuse an assistant message with neither content nor tool calls.
        return None;
    }
    obj.insert(
        "content".into(),
        if text.is_empty() {
            Json::Null
        } else {
            Json::String(text)
        },
    );
    if !calls.is_empty() {
        obj.insert("tool_calls".into(), Json::Array(calls));
    }
    Some(Json::Object(obj))
}

fn user_content(content: &[UserContent]) -> Json {
    if content.iter().all(|c| c.as_text().is_some()) {
        return Json::String(joined_text(content));
    }
    Json::Array(
        content
            .iter()
            .map(|c| match c {
                UserContent::Text(t) => json!({"type": "text", "text": t.text}),
                UserContent::Image(i) => json!({
                    "type": "image_url",
                    "image_url": {"url": format!("data:{};base64,{}", i.mime_type, i.data)},
                }),
            })
            .collect(),
    )
}

/// Arguments as the wire's JSON text (unparseable text kept as a string replays verbatim).
pub(crate) fn arguments_text(args: &Value) -> String {
    match args {
        Value::String(raw) => raw.clone(),
        other => other.to_json(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{
        Message, StopReason, TextContent, ThinkingContent, ToolCall, ToolResultMessage, Usage,
        UserMessage,
    };

    fn reply(api: &str, provider: &str) -> AssistantMessage {
        let mut thinking = ThinkingContent::new("look first");
        thinking.thinking_signature = Some("reasoning_content".into());
        AssistantMessage {
            content: vec![
                AssistantContent::Thinking(thinking),
                AssistantContent::Text(TextContent::new("Listing.")),
                AssistantContent::ToolCall(ToolCall::new(
                    "call_1",
                    "bash",
                    Value::from_json(r#"{"command":"ls"}"#).unwrap(),
                )),
            ],
            api: api.into(),
            provider: provider.into(),
            model: "m".into(),
            response_model: None,
            response_id: None,
            usage: Usage::default(),
            stop_reason: StopReason::ToolUse,
            error_message: None,
            raw_stop_reason: None,
            timestamp: 2,
        }
    }

    fn request(messages: Vec<Message>, thinking: ThinkingLevel) -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            system_prompt: "sys".into(),
            messages: messages.into(),
            tools: Vec::new(),
            thinking,
        }
    }

    #[test]
    fn own_reasoning_is_replayed_in_the_field_it_arrived_in() {
        let result = ToolResultMessage {
            tool_call_id: "call_1".into(),
            tool_name: "bash".into(),
            content: vec![UserContent::text("a.txt")],
            details: None,
            is_error: false,
            timestamp: 3,
        };
        let req = request(
            vec![
                Message::User(UserMessage::text("list", 1)),
                Message::Assistant(reply(API, "local")),
                Message::ToolResult(result),
            ],
            ThinkingLevel::Off,
        );
        let body = request_body(&req, "local", None);
        let a = &body["messages"][2];
        assert_eq!(a["role"], "assistant");
        assert_eq!(a["reasoning_content"], "look first");
        assert_eq!(a["content"], "Listing.");
        assert_eq!(
            a["tool_calls"][0]["function"]["arguments"],
            r#"{"command":"ls"}"#
        );
        assert_eq!(body["messages"][3]["tool_call_id"], "call_1");
        assert!(body.get("reasoning_effort").is_none());

        let other = request_body(&req, "elsewhere", None);
        assert!(other["messages"][2].get("reasoning_content").is_none());
    }

    #[test]
    fn thinking_level_becomes_reasoning_effort_unless_the_model_does_not_reason() {
        let req = request(vec![], ThinkingLevel::Xhigh);
        assert_eq!(request_body(&req, "p", None)["reasoning_effort"], "high");
        let mut spec = ModelSpec::new("m");
        spec.reasoning = Some(false);
        assert!(
            request_body(&req, "p", Some(&spec))
                .get("reasoning_effort")
                .is_none()
        );
        let req = request(vec![], ThinkingLevel::Minimal);
        assert_eq!(request_body(&req, "p", None)["reasoning_effort"], "minimal");
    }

    #[test]
    fn an_empty_assistant_message_is_not_sent() {
        let mut empty = reply(API, "p");
        empty.content.clear();
        let req = request(
            vec![
                Message::User(UserMessage::text("hi", 1)),
                Message::Assistant(empty),
            ],
            ThinkingLevel::Off,
        );
        let body = request_body(&req, "p", None);
        assert_eq!(body["messages"].as_array().unwrap().len(), 2);
    }
}
