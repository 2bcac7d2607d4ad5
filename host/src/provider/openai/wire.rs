//! Chat-completions JSON: the request body from a [`ModelRequest`], and the folding of
//! streamed chunks into [`ProviderEvent`]s.

use std::collections::BTreeMap;

use baton_protocol::{Map, Value};
use serde_json::{Value as Json, json};

use crate::message::{MessageRef, StopReason, ToolCall, Usage, UserContent, joined_text};
use crate::provider::{ModelRequest, ProviderEvent};

/// The JSON body for a streaming chat-completions request.
///
/// Thinking blocks are not replayed (chat completions has no field for them), tool results
/// carry their text only, and `usage` is requested in the final chunk.
pub(crate) fn request_body(req: &ModelRequest) -> Json {
    let mut messages = Vec::new();
    if !req.system_prompt.is_empty() {
        messages.push(json!({"role": "system", "content": req.system_prompt}));
    }
    for m in &req.messages {
        messages.push(match m {
            MessageRef::User(u) => json!({"role": "user", "content": user_content(&u.content)}),
            MessageRef::Assistant(a) => {
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
                obj.insert(
                    "content".into(),
                    if text.is_empty() && !calls.is_empty() {
                        Json::Null
                    } else {
                        Json::String(text)
                    },
                );
                if !calls.is_empty() {
                    obj.insert("tool_calls".into(), Json::Array(calls));
                }
                Json::Object(obj)
            }
            MessageRef::ToolResult(r) => json!({
                "role": "tool",
                "tool_call_id": r.tool_call_id,
                "content": joined_text(&r.content),
            }),
        });
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
    body
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
fn arguments_text(args: &Value) -> String {
    match args {
        Value::String(raw) => raw.clone(),
        other => other.to_json(),
    }
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Folds `data:` payloads of the stream into provider events.
#[derive(Debug, Default)]
pub(crate) struct ChunkAccumulator {
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    meta_sent: bool,
    finished: bool,
}

impl ChunkAccumulator {
    /// True once the stream is complete (`[DONE]`, an error, or [`Self::finish`]).
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// One SSE `data:` payload.
    pub(crate) fn on_data(&mut self, data: &str) -> Vec<ProviderEvent> {
        if self.finished {
            return Vec::new();
        }
        if data.trim() == "[DONE]" {
            return self.finish(true);
        }
        let chunk: Json = match serde_json::from_str(data) {
            Ok(c) => c,
            Err(e) => return self.fail(format!("malformed stream chunk: {e}")),
        };
        if let Some(err) = chunk.get("error") {
            let msg = err
                .get("message")
                .and_then(Json::as_str)
                .map_or_else(|| err.to_string(), str::to_owned);
            return self.fail(format!("model server error: {msg}"));
        }
        let mut out = Vec::new();
        if !self.meta_sent {
            self.meta_sent = true;
            let response_id = chunk.get("id").and_then(Json::as_str).map(str::to_owned);
            let response_model = chunk.get("model").and_then(Json::as_str).map(str::to_owned);
            if response_id.is_some() || response_model.is_some() {
                out.push(ProviderEvent::Metadata {
                    response_id,
                    response_model,
                });
            }
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            let n = |k: &str| u.get(k).and_then(Json::as_u64).unwrap_or(0);
            let cached = u
                .get("prompt_tokens_details")
                .and_then(|d| d.get("cached_tokens"))
                .and_then(Json::as_u64)
                .unwrap_or(0);
            self.usage = Some(Usage {
                input: n("prompt_tokens").saturating_sub(cached),
                output: n("completion_tokens"),
                cache_read: cached,
                cache_write: 0,
                total_tokens: n("total_tokens"),
                ..Usage::default()
            });
        }
        let choices = chunk
            .get("choices")
            .and_then(Json::as_array)
            .cloned()
            .unwrap_or_default();
        for choice in &choices {
            if let Some(delta) = choice.get("delta") {
                for key in ["reasoning_content", "reasoning"] {
                    if let Some(t) = delta
                        .get(key)
                        .and_then(Json::as_str)
                        .filter(|t| !t.is_empty())
                    {
                        out.push(ProviderEvent::ThinkingDelta(t.to_owned()));
                    }
                }
                if let Some(t) = delta
                    .get("content")
                    .and_then(Json::as_str)
                    .filter(|t| !t.is_empty())
                {
                    out.push(ProviderEvent::TextDelta(t.to_owned()));
                }
                for tc in delta
                    .get("tool_calls")
                    .and_then(Json::as_array)
                    .into_iter()
                    .flatten()
                {
                    let index = tc.get("index").and_then(Json::as_u64).unwrap_or(0);
                    let call = self.calls.entry(index).or_default();
                    if let Some(id) = tc.get("id").and_then(Json::as_str) {
                        call.id.push_str(id);
                    }
                    if let Some(f) = tc.get("function") {
                        if let Some(name) = f.get("name").and_then(Json::as_str) {
                            call.name.push_str(name);
                        }
                        if let Some(args) = f.get("arguments").and_then(Json::as_str) {
                            call.arguments.push_str(args);
                        }
                    }
                }
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Json::as_str) {
                self.finish_reason = Some(reason.to_owned());
            }
        }
        out
    }

    /// Ends the stream. `clean` is true for `[DONE]`; at EOF without it, a finish reason must
    /// have been seen or the response counts as cut off.
    pub(crate) fn finish(&mut self, clean: bool) -> Vec<ProviderEvent> {
        if self.finished {
            return Vec::new();
        }
        if !clean && self.finish_reason.is_none() {
            return self.fail("the model server closed the stream before finishing".into());
        }
        self.finished = true;
        let mut out = Vec::new();
        for (i, call) in std::mem::take(&mut self.calls) {
            let arguments = if call.arguments.trim().is_empty() {
                Value::Map(Map::new())
            } else {
                Value::from_json(&call.arguments).unwrap_or(Value::String(call.arguments))
            };
            let id = if call.id.is_empty() {
                format!("call_{i}")
            } else {
                call.id
            };
            out.push(ProviderEvent::ToolCall(ToolCall::new(
                id, call.name, arguments,
            )));
        }
        if let Some(u) = self.usage {
            out.push(ProviderEvent::Usage(u));
        }
        let raw = self.finish_reason.clone();
        let stop = match raw.as_deref() {
            Some("length") => StopReason::Length,
            Some("tool_calls" | "function_call") => StopReason::ToolUse,
            Some("content_filter") => {
                out.push(ProviderEvent::Error(
                    "the response was blocked by a content filter".into(),
                ));
                return out;
            }
            _ => StopReason::Stop,
        };
        out.push(ProviderEvent::Done {
            stop_reason: stop,
            raw_stop_reason: raw,
        });
        out
    }

    fn fail(&mut self, message: String) -> Vec<ProviderEvent> {
        self.finished = true;
        vec![ProviderEvent::Error(message)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_deltas_accumulate_by_index() {
        let mut acc = ChunkAccumulator::default();
        let mut evs = Vec::new();
        for data in [
            r#"{"id":"r1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"bash","arguments":"{\"comm"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"read","arguments":"{\"path\":\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"and\":\"ls\"}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}"#,
            "[DONE]",
        ] {
            evs.extend(acc.on_data(data));
        }
        assert_eq!(
            evs[0],
            ProviderEvent::Metadata {
                response_id: Some("r1".into()),
                response_model: Some("m".into())
            }
        );
        assert_eq!(evs[1], ProviderEvent::TextDelta("Hi".into()));
        let calls: Vec<_> = evs
            .iter()
            .filter_map(|e| match e {
                ProviderEvent::ToolCall(c) => {
                    Some((c.id.as_str(), c.name.as_str(), c.arguments.to_json()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            calls,
            vec![
                ("call_a", "bash", r#"{"command":"ls"}"#.to_owned()),
                ("call_b", "read", r#"{"path":"x"}"#.to_owned()),
            ]
        );
        assert!(matches!(
            evs.last(),
            Some(ProviderEvent::Done {
                stop_reason: StopReason::ToolUse,
                ..
            })
        ));
        assert!(
            evs.iter()
                .any(|e| matches!(e, ProviderEvent::Usage(u) if u.total_tokens == 15))
        );
    }

    #[test]
    fn unparseable_arguments_are_kept_verbatim_as_a_string() {
        let mut acc = ChunkAccumulator::default();
        acc.on_data(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"bash","arguments":"{oops"}}]},"finish_reason":"length"}]}"#);
        let evs = acc.on_data("[DONE]");
        assert!(
            matches!(&evs[0], ProviderEvent::ToolCall(c) if c.arguments == Value::String("{oops".into()))
        );
        assert!(matches!(
            evs.last(),
            Some(ProviderEvent::Done {
                stop_reason: StopReason::Length,
                ..
            })
        ));
        assert_eq!(arguments_text(&Value::String("{oops".into())), "{oops");
    }

    #[test]
    fn eof_without_finish_reason_is_an_error() {
        let mut acc = ChunkAccumulator::default();
        acc.on_data(r#"{"choices":[{"delta":{"content":"par"}}]}"#);
        assert!(matches!(
            acc.finish(false).as_slice(),
            [ProviderEvent::Error(_)]
        ));
    }

    #[test]
    fn error_payload_becomes_an_error_event() {
        let mut acc = ChunkAccumulator::default();
        assert_eq!(
            acc.on_data(r#"{"error":{"message":"overloaded"}}"#),
            vec![ProviderEvent::Error(
                "model server error: overloaded".into()
            )]
        );
    }
}
