//! Folding a Messages API stream into provider events (sans-IO).
//!
//! `message_start` gives the response id, model and input usage; each
//! `content_block_start` / `_delta` / `_stop` triple is one block: text, thinking (its
//! `signature_delta`s are joined and attached at the block's end), `redacted_thinking` (its
//! opaque `data` becomes the block's signature) or `tool_use` (its `input_json_delta` pieces
//! are joined and parsed at the block's end). `message_delta` carries the stop reason and the
//! final usage; `message_stop` settles. A `tool_use` block still open when the response
//! settles (cut by `max_tokens`) is emitted with its partial input as text, so the loop marks
//! the call failed.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use crate::message::{StopReason, ToolCall, Usage};
use crate::provider::ProviderEvent;
use crate::provider::cost::ModelCost;
use crate::provider::decode::{Settle, arguments, metadata};
use crate::provider::sse::SseEvent;
use crate::provider::stream::Decoder;

#[derive(Debug)]
enum Block {
    Text,
    Thinking {
        signature: String,
    },
    Redacted,
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
}

/// The Messages decoder.
#[derive(Debug, Default)]
pub(crate) struct MessagesDecoder {
    base: Settle,
    open: BTreeMap<u64, Block>,
    usage: Usage,
    stop_reason: Option<String>,
}

impl MessagesDecoder {
    /// A decoder whose errors name `endpoint` and whose usage is priced by `cost`.
    pub(crate) fn new(endpoint: String, cost: Option<ModelCost>) -> Self {
        Self {
            base: Settle::new(endpoint, cost),
            ..Self::default()
        }
    }

    /// The blocks still open (closed as they stand), the usage so far, then the error.
    fn cut_short(&mut self, message: String) -> Vec<ProviderEvent> {
        let flushed = self.flush_open();
        self.base.cut(flushed, Some(self.usage), message)
    }

    fn on_json(&mut self, kind: &str, ev: &Json) -> Vec<ProviderEvent> {
        let mut out = Vec::new();
        let index = ev.get("index").and_then(Json::as_u64).unwrap_or(0);
        match kind {
            "message_start" => {
                let m = ev.get("message").unwrap_or(&Json::Null);
                out.extend(metadata(m));
                if let Some(u) = m.get("usage") {
                    self.merge_usage(u);
                }
            }
            "content_block_start" => {
                let b = ev.get("content_block").unwrap_or(&Json::Null);
                let text = |k: &str| b.get(k).and_then(Json::as_str).unwrap_or("").to_owned();
                let block = match b.get("type").and_then(Json::as_str) {
                    Some("text") => {
                        out.push(ProviderEvent::TextDelta(text("text")));
                        Block::Text
                    }
                    Some("thinking") => {
                        out.push(ProviderEvent::ThinkingDelta(text("thinking")));
                        Block::Thinking {
                            signature: text("signature"),
                        }
                    }
                    Some("redacted_thinking") => {
                        out.push(ProviderEvent::RedactedThinking(text("data")));
                        Block::Redacted
                    }
                    Some("tool_use") => Block::ToolUse {
                        id: text("id"),
                        name: text("name"),
                        json: String::new(),
                    },
                    // Server-side tool blocks and future types: not ours to show or replay.
                    _ => return out,
                };
                self.open.insert(index, block);
            }
            "content_block_delta" => {
                let d = ev.get("delta").unwrap_or(&Json::Null);
                let text = |k: &str| d.get(k).and_then(Json::as_str).unwrap_or("");
                match (
                    d.get("type").and_then(Json::as_str),
                    self.open.get_mut(&index),
                ) {
                    (Some("text_delta"), Some(Block::Text)) => {
                        out.push(ProviderEvent::TextDelta(text("text").to_owned()));
                    }
                    (Some("thinking_delta"), Some(Block::Thinking { .. })) => {
                        out.push(ProviderEvent::ThinkingDelta(text("thinking").to_owned()));
                    }
                    (Some("signature_delta"), Some(Block::Thinking { signature })) => {
                        signature.push_str(text("signature"));
                    }
                    (Some("input_json_delta"), Some(Block::ToolUse { json, .. })) => {
                        json.push_str(text("partial_json"));
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(block) = self.open.remove(&index) {
                    out.extend(close(block, true));
                }
            }
            "message_delta" => {
                if let Some(r) = ev
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Json::as_str)
                {
                    self.stop_reason = Some(r.to_owned());
                }
                if let Some(u) = ev.get("usage") {
                    self.merge_usage(u);
                }
            }
            "message_stop" => out.extend(self.settle()),
            "error" => {
                let e = ev.get("error").unwrap_or(&Json::Null);
                let kind = e.get("type").and_then(Json::as_str).unwrap_or("error");
                let msg = e.get("message").and_then(Json::as_str).unwrap_or("");
                let flushed = self.flush_open();
                out.extend(flushed);
                let message = format!("{} reported {kind} mid-stream: {msg}", self.base.endpoint);
                out.push(self.base.fail(message));
            }
            // `ping` and future event types.
            _ => {}
        }
        out
    }

    /// Usage fields present in `u` replace the ones seen so far.
    fn merge_usage(&mut self, u: &Json) {
        let n = |k: &str| u.get(k).and_then(Json::as_u64);
        if let Some(v) = n("input_tokens") {
            self.usage.input = v;
        }
        if let Some(v) = n("output_tokens") {
            self.usage.output = v;
        }
        if let Some(v) = n("cache_read_input_tokens") {
            self.usage.cache_read = v;
        }
        if let Some(v) = n("cache_creation_input_tokens") {
            self.usage.cache_write = v;
        }
        let u = &mut self.usage;
        u.total_tokens = u.input + u.output + u.cache_read + u.cache_write;
    }

    /// Blocks still open, closed as they stand (tool inputs unparsed).
    fn flush_open(&mut self) -> Vec<ProviderEvent> {
        std::mem::take(&mut self.open)
            .into_values()
            .flat_map(|b| close(b, false))
            .collect()
    }

    fn settle(&mut self) -> Vec<ProviderEvent> {
        let mut out = self.flush_open();
        out.push(self.base.priced(self.usage));
        self.base.finish();
        let raw = self.stop_reason.clone();
        let stop = match raw.as_deref() {
            Some("max_tokens" | "model_context_window_exceeded") => StopReason::Length,
            Some("tool_use") => StopReason::ToolUse,
            Some("refusal" | "sensitive") => {
                let raw = raw.unwrap_or_default();
                out.push(ProviderEvent::RawStopReason(raw.clone()));
                out.push(ProviderEvent::Error(format!(
                    "the model declined to answer (stop reason {raw})"
                )));
                return out;
            }
            // end_turn, stop_sequence, pause_turn, and reasons added later: the raw text is
            // kept for whoever needs the difference.
            _ => StopReason::Stop,
        };
        out.push(ProviderEvent::Done {
            stop_reason: stop,
            raw_stop_reason: raw,
        });
        out
    }
}

/// The events that end `block`. A tool call's input is parsed when `complete`; partial or
/// unparseable input is kept as text.
fn close(block: Block, complete: bool) -> Vec<ProviderEvent> {
    match block {
        Block::Text | Block::Redacted => vec![ProviderEvent::BlockEnd],
        Block::Thinking { signature } => {
            let mut out = Vec::new();
            if !signature.is_empty() {
                out.push(ProviderEvent::ThinkingSignature(signature));
            }
            out.push(ProviderEvent::BlockEnd);
            out
        }
        Block::ToolUse { id, name, json } => vec![ProviderEvent::ToolCall(ToolCall::new(
            id,
            name,
            arguments(json, complete),
        ))],
    }
}

impl Decoder for MessagesDecoder {
    fn on_event(&mut self, event: &SseEvent) -> Vec<ProviderEvent> {
        if self.base.is_finished() {
            return Vec::new();
        }
        let json: Json = match serde_json::from_str(&event.data) {
            Ok(j) => j,
            Err(e) => {
                let message = format!("malformed stream event from {}: {e}", self.base.endpoint);
                let mut out = self.flush_open();
                out.push(self.base.fail(message));
                return out;
            }
        };
        // The `type` field is authoritative; the SSE `event:` name repeats it.
        let kind = json
            .get("type")
            .and_then(Json::as_str)
            .map(str::to_owned)
            .or_else(|| event.event.clone())
            .unwrap_or_default();
        self.on_json(&kind, &json)
    }

    fn on_end(&mut self) -> Vec<ProviderEvent> {
        if self.base.is_finished() {
            return Vec::new();
        }
        let message = format!(
            "{} closed the stream before message_stop",
            self.base.endpoint
        );
        self.cut_short(message)
    }

    fn on_interrupted(&mut self, message: String) -> Vec<ProviderEvent> {
        if self.base.is_finished() {
            return Vec::new();
        }
        self.cut_short(message)
    }

    fn is_finished(&self) -> bool {
        self.base.is_finished()
    }
}

#[cfg(test)]
mod tests {
    use baton_protocol::Value;

    use super::*;

    fn feed(d: &mut MessagesDecoder, events: &[&str]) -> Vec<ProviderEvent> {
        events
            .iter()
            .flat_map(|data| {
                d.on_event(&SseEvent {
                    event: None,
                    data: (*data).to_owned(),
                })
            })
            .collect()
    }

    const START: &str = r#"{"type":"message_start","message":{"id":"msg_1","model":"claude-x","usage":{"input_tokens":10,"cache_read_input_tokens":100,"cache_creation_input_tokens":20,"output_tokens":1}}}"#;

    #[test]
    fn thinking_text_and_tool_use_blocks_stream_in_order() {
        let mut d = MessagesDecoder::new("e".into(), None);
        let evs = feed(
            &mut d,
            &[
                START,
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"see."}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQB"}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"Zz=="}}"#,
                r#"{"type":"content_block_stop","index":0}"#,
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"opaque"}}"#,
                r#"{"type":"content_block_stop","index":1}"#,
                r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}"#,
                r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Reading."}}"#,
                r#"{"type":"content_block_stop","index":2}"#,
                r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_1","name":"read","input":{}}}"#,
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"pa"}}"#,
                r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"th\":\"a\"}"}}"#,
                r#"{"type":"content_block_stop","index":3}"#,
                r#"{"type":"ping"}"#,
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":42}}"#,
                r#"{"type":"message_stop"}"#,
            ],
        );
        assert_eq!(
            evs,
            vec![
                ProviderEvent::Metadata {
                    response_id: Some("msg_1".into()),
                    response_model: Some("claude-x".into())
                },
                ProviderEvent::ThinkingDelta(String::new()),
                ProviderEvent::ThinkingDelta("Let me ".into()),
                ProviderEvent::ThinkingDelta("see.".into()),
                ProviderEvent::ThinkingSignature("EqQBZz==".into()),
                ProviderEvent::BlockEnd,
                ProviderEvent::RedactedThinking("opaque".into()),
                ProviderEvent::BlockEnd,
                ProviderEvent::TextDelta(String::new()),
                ProviderEvent::TextDelta("Reading.".into()),
                ProviderEvent::BlockEnd,
                ProviderEvent::ToolCall(ToolCall::new(
                    "toolu_1",
                    "read",
                    Value::from_json(r#"{"path":"a"}"#).unwrap()
                )),
                ProviderEvent::Usage(Usage {
                    input: 10,
                    output: 42,
                    cache_read: 100,
                    cache_write: 20,
                    total_tokens: 172,
                    ..Usage::default()
                }),
                ProviderEvent::Done {
                    stop_reason: StopReason::ToolUse,
                    raw_stop_reason: Some("tool_use".into())
                },
            ]
        );
    }

    #[test]
    fn max_tokens_mid_tool_use_keeps_the_partial_input_as_text() {
        let mut d = MessagesDecoder::new("e".into(), None);
        let evs = feed(
            &mut d,
            &[
                START,
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"write","input":{}}}"#,
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"path\":\"a\",\"content\":\"hel"}}"#,
                r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":8}}"#,
                r#"{"type":"message_stop"}"#,
            ],
        );
        assert!(evs.iter().any(|e| matches!(e, ProviderEvent::ToolCall(c)
            if c.arguments == Value::String(r#"{"path":"a","content":"hel"#.into()))));
        assert_eq!(
            evs.last(),
            Some(&ProviderEvent::Done {
                stop_reason: StopReason::Length,
                raw_stop_reason: Some("max_tokens".into())
            })
        );
    }

    #[test]
    fn stop_reasons_map_and_keep_the_raw_text() {
        for (raw, stop) in [
            ("end_turn", StopReason::Stop),
            ("stop_sequence", StopReason::Stop),
            ("pause_turn", StopReason::Stop),
            ("max_tokens", StopReason::Length),
            ("tool_use", StopReason::ToolUse),
            ("something_new", StopReason::Stop),
        ] {
            let mut d = MessagesDecoder::new("e".into(), None);
            let delta = format!(
                r#"{{"type":"message_delta","delta":{{"stop_reason":"{raw}"}},"usage":{{"output_tokens":1}}}}"#
            );
            let evs = feed(&mut d, &[START, &delta, r#"{"type":"message_stop"}"#]);
            assert_eq!(
                evs.last(),
                Some(&ProviderEvent::Done {
                    stop_reason: stop,
                    raw_stop_reason: Some(raw.into())
                }),
                "{raw}"
            );
        }
        let mut d = MessagesDecoder::new("e".into(), None);
        let evs = feed(
            &mut d,
            &[
                START,
                r#"{"type":"message_delta","delta":{"stop_reason":"refusal"}}"#,
                r#"{"type":"message_stop"}"#,
            ],
        );
        assert!(evs.contains(&ProviderEvent::RawStopReason("refusal".into())));
        assert!(matches!(evs.last(), Some(ProviderEvent::Error(m)) if m.contains("declined")));
    }

    #[test]
    fn an_error_event_mid_stream_ends_it_naming_the_endpoint() {
        let mut d = MessagesDecoder::new("https://x:443/v1/messages".into(), None);
        let evs = feed(
            &mut d,
            &[
                START,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ],
        );
        assert_eq!(
            evs.last(),
            Some(&ProviderEvent::Error(
                "https://x:443/v1/messages reported overloaded_error mid-stream: Overloaded".into()
            ))
        );
        assert!(d.is_finished());
    }

    #[test]
    fn eof_before_message_stop_is_an_error_and_malformed_json_too() {
        let mut d = MessagesDecoder::new("e".into(), None);
        feed(&mut d, &[START]);
        assert!(
            matches!(d.on_end().last(), Some(ProviderEvent::Error(m)) if m.contains("before message_stop"))
        );
        let mut d = MessagesDecoder::new("e".into(), None);
        assert!(matches!(feed(&mut d, &["{oops"]).last(),
            Some(ProviderEvent::Error(m)) if m.starts_with("malformed stream event from e")));
    }

    #[test]
    fn usage_is_priced_from_the_model_cost() {
        let cost = ModelCost {
            input: 3.0,
            output: 15.0,
            cache_read: 0.3,
            cache_write: 3.75,
        };
        let mut d = MessagesDecoder::new("e".into(), Some(cost));
        let evs = feed(
            &mut d,
            &[
                r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":1000000,"output_tokens":0}}}"#,
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1000000}}"#,
                r#"{"type":"message_stop"}"#,
            ],
        );
        let Some(ProviderEvent::Usage(u)) =
            evs.iter().find(|e| matches!(e, ProviderEvent::Usage(_)))
        else {
            panic!("{evs:?}");
        };
        assert!((u.cost.total - 18.0).abs() < 1e-9, "{u:?}");
    }
}
