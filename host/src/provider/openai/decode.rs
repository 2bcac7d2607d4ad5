//! Folding a chat-completions stream into provider events (sans-IO).
//!
//! Text and reasoning are passed on as they arrive; tool calls are accumulated by `index`
//! (their id, name and argument pieces may come in any number of chunks, interleaved between
//! parallel calls) and emitted when the response settles. `finish_reason` maps to the stop
//! reason; usage (requested with `stream_options.include_usage`) arrives in the last chunk.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use super::request::REASONING_FIELDS;
use crate::message::{StopReason, ToolCall, Usage};
use crate::provider::ProviderEvent;
use crate::provider::cost::ModelCost;
use crate::provider::decode::{Settle, arguments, metadata};
use crate::provider::sse::SseEvent;
use crate::provider::stream::Decoder;

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// The chat-completions decoder.
#[derive(Debug, Default)]
pub(crate) struct ChunkDecoder {
    base: Settle,
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    meta_sent: bool,
    /// The reasoning field of the open thinking block (its signature), if one is open.
    thinking_field: Option<String>,
}

impl ChunkDecoder {
    /// A decoder whose errors name `endpoint` and whose usage is priced by `cost`.
    pub(crate) fn new(endpoint: String, cost: Option<ModelCost>) -> Self {
        Self {
            base: Settle::new(endpoint, cost),
            ..Self::default()
        }
    }

    /// One SSE `data:` payload.
    pub(crate) fn on_data(&mut self, data: &str) -> Vec<ProviderEvent> {
        if self.base.is_finished() {
            return Vec::new();
        }
        if data.trim() == "[DONE]" {
            return self.settle(true);
        }
        let chunk: Json = match serde_json::from_str(data) {
            Ok(c) => c,
            Err(e) => {
                let message = format!("malformed stream chunk from {}: {e}", self.base.endpoint);
                return vec![self.base.fail(message)];
            }
        };
        if let Some(err) = chunk.get("error") {
            let msg = err
                .get("message")
                .and_then(Json::as_str)
                .map_or_else(|| err.to_string(), str::to_owned);
            let message = format!("{} reported an error: {msg}", self.base.endpoint);
            return vec![self.base.fail(message)];
        }
        let mut out = Vec::new();
        if !self.meta_sent {
            self.meta_sent = true;
            out.extend(metadata(&chunk));
        }
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage(u));
        }
        for choice in chunk
            .get("choices")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(delta) = choice.get("delta") {
                self.delta(delta, &mut out);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Json::as_str) {
                self.finish_reason = Some(reason.to_owned());
            }
        }
        out
    }

    fn delta(&mut self, delta: &Json, out: &mut Vec<ProviderEvent>) {
        // Reasoning before text (a proxy may put both in one delta); only the first non-empty
        // field, since some servers send the same text in two of them.
        let reasoning = REASONING_FIELDS.iter().find_map(|field| {
            delta
                .get(*field)
                .and_then(Json::as_str)
                .filter(|t| !t.is_empty())
                .map(|t| (*field, t))
        });
        if let Some((field, text)) = reasoning {
            if self.thinking_field.as_deref() != Some(field) {
                if self.thinking_field.is_some() {
                    out.push(ProviderEvent::BlockEnd);
                }
                out.push(ProviderEvent::ThinkingDelta(text.to_owned()));
                out.push(ProviderEvent::ThinkingSignature(field.to_owned()));
                self.thinking_field = Some(field.to_owned());
            } else {
                out.push(ProviderEvent::ThinkingDelta(text.to_owned()));
            }
        }
        if let Some(t) = delta
            .get("content")
            .and_then(Json::as_str)
            .filter(|t| !t.is_empty())
        {
            self.thinking_field = None;
            out.push(ProviderEvent::TextDelta(t.to_owned()));
        }
        for tc in delta
            .get("tool_calls")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            let id = tc
                .get("id")
                .and_then(Json::as_str)
                .filter(|s| !s.is_empty());
            let key = match tc.get("index").and_then(Json::as_u64) {
                Some(i) => i,
                // No index (some servers send whole calls): match by id, else a new call.
                None => id
                    .and_then(|id| self.calls.iter().find(|(_, c)| c.id == id).map(|(k, _)| *k))
                    .unwrap_or_else(|| self.calls.keys().next_back().map_or(0, |k| k + 1)),
            };
            let call = self.calls.entry(key).or_default();
            if let Some(id) = id
                && call.id.is_empty()
            {
                id.clone_into(&mut call.id);
            }
            if let Some(f) = tc.get("function") {
                if let Some(name) = f.get("name").and_then(Json::as_str)
                    && call.name.is_empty()
                {
                    name.clone_into(&mut call.name);
                }
                if let Some(args) = f.get("arguments").and_then(Json::as_str) {
                    call.arguments.push_str(args);
                }
            }
        }
    }

    /// The accumulated calls, in index order (arguments that do not parse kept as text).
    fn take_calls(&mut self) -> Vec<ProviderEvent> {
        std::mem::take(&mut self.calls)
            .into_iter()
            .map(|(i, call)| {
                let arguments = arguments(call.arguments, true);
                let id = if call.id.is_empty() {
                    format!("call_{i}")
                } else {
                    call.id
                };
                ProviderEvent::ToolCall(ToolCall::new(id, call.name, arguments))
            })
            .collect()
    }

    /// Ends the stream. `clean` is true for `[DONE]`; at EOF without it, a finish reason must
    /// have been seen or the response counts as cut off.
    fn settle(&mut self, clean: bool) -> Vec<ProviderEvent> {
        if !clean && self.finish_reason.is_none() {
            let message = format!("{} closed the stream before finishing", self.base.endpoint);
            return self.cut_short(message);
        }
        self.base.finish();
        let mut out = self.take_calls();
        out.extend(self.usage.map(|u| self.base.priced(u)));
        let raw = self.finish_reason.clone();
        let stop = match raw.as_deref() {
            Some("length") => StopReason::Length,
            Some("tool_calls" | "function_call") => StopReason::ToolUse,
            Some("content_filter") => {
                if let Some(raw) = raw {
                    out.push(ProviderEvent::RawStopReason(raw));
                }
                out.push(ProviderEvent::Error(format!(
                    "{} blocked the response with a content filter",
                    self.base.endpoint
                )));
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

    /// The calls and usage so far, then the error.
    fn cut_short(&mut self, message: String) -> Vec<ProviderEvent> {
        let calls = self.take_calls();
        self.base.cut(calls, self.usage, message)
    }
}

impl Decoder for ChunkDecoder {
    fn on_event(&mut self, event: &SseEvent) -> Vec<ProviderEvent> {
        self.on_data(&event.data)
    }

    fn on_end(&mut self) -> Vec<ProviderEvent> {
        if self.base.is_finished() {
            return Vec::new();
        }
        self.settle(false)
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

/// Chat-completions usage: `prompt_tokens` includes the cached ones, which are reported
/// separately as cache reads.
fn usage(u: &Json) -> Usage {
    let n = |k: &str| u.get(k).and_then(Json::as_u64).unwrap_or(0);
    let cached = u
        .get("prompt_tokens_details")
        .and_then(|d| d.get("cached_tokens"))
        .and_then(Json::as_u64)
        .unwrap_or(0);
    let input = n("prompt_tokens").saturating_sub(cached);
    let output = n("completion_tokens");
    let total = match n("total_tokens") {
        0 => input + output + cached,
        t => t,
    };
    Usage {
        input,
        output,
        cache_read: cached,
        cache_write: 0,
        total_tokens: total,
        ..Usage::default()
    }
}

#[cfg(test)]
mod tests {
    use baton_protocol::Value;

    use super::*;

    fn feed(d: &mut ChunkDecoder, data: &[&str]) -> Vec<ProviderEvent> {
        data.iter().flat_map(|x| d.on_data(x)).collect()
    }

    #[test]
    fn parallel_tool_calls_with_split_arguments_accumulate_by_index() {
        let mut d = ChunkDecoder::new("e".into(), None);
        let evs = feed(
            &mut d,
            &[
                r#"{"id":"r1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"bash","arguments":"{\"comm"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"read","arguments":"{\"path\":"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","function":{"arguments":"and\":\"ls\"}"}}]}}]}"#,
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"x\"}"}}]},"finish_reason":"tool_calls"}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4}}}"#,
                "[DONE]",
            ],
        );
        assert_eq!(
            evs[0],
            ProviderEvent::Metadata {
                response_id: Some("r1".into()),
                response_model: Some("m".into())
            }
        );
        let calls: Vec<_> = evs
            .iter()
            .filter_map(|e| match e {
                ProviderEvent::ToolCall(c) => {
                    Some((c.id.clone(), c.name.clone(), c.arguments.to_json()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            calls,
            vec![
                (
                    "call_a".into(),
                    "bash".into(),
                    r#"{"command":"ls"}"#.to_owned()
                ),
                ("call_b".into(), "read".into(), r#"{"path":"x"}"#.to_owned()),
            ]
        );
        assert!(evs.iter().any(|e| matches!(e, ProviderEvent::Usage(u)
            if u.input == 6 && u.cache_read == 4 && u.output == 5 && u.total_tokens == 15)));
        assert_eq!(
            evs.last(),
            Some(&ProviderEvent::Done {
                stop_reason: StopReason::ToolUse,
                raw_stop_reason: Some("tool_calls".into())
            })
        );
    }

    #[test]
    fn reasoning_deltas_carry_their_field_as_signature_once() {
        let mut d = ChunkDecoder::new("e".into(), None);
        let evs = feed(
            &mut d,
            &[
                r#"{"choices":[{"delta":{"reasoning_content":"a","reasoning":"a"}}]}"#,
                r#"{"choices":[{"delta":{"reasoning_content":"b"}}]}"#,
                r#"{"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}"#,
                "[DONE]",
            ],
        );
        assert_eq!(
            &evs[..4],
            &[
                ProviderEvent::ThinkingDelta("a".into()),
                ProviderEvent::ThinkingSignature("reasoning_content".into()),
                ProviderEvent::ThinkingDelta("b".into()),
                ProviderEvent::TextDelta("ok".into()),
            ]
        );
    }

    #[test]
    fn length_keeps_a_half_streamed_call_with_its_raw_arguments() {
        let mut d = ChunkDecoder::new("e".into(), None);
        let evs = feed(
            &mut d,
            &[
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"bash","arguments":"{\"comm"}}]},"finish_reason":"length"}]}"#,
                "[DONE]",
            ],
        );
        assert!(
            matches!(&evs[0], ProviderEvent::ToolCall(c) if c.arguments == Value::String("{\"comm".into()))
        );
        assert!(matches!(
            evs.last(),
            Some(ProviderEvent::Done {
                stop_reason: StopReason::Length,
                ..
            })
        ));
    }

    #[test]
    fn eof_without_finish_reason_is_an_error_naming_the_endpoint() {
        let mut d = ChunkDecoder::new("http://127.0.0.1:1/v1".into(), None);
        d.on_data(r#"{"choices":[{"delta":{"content":"par"}}]}"#);
        assert_eq!(
            d.on_end(),
            vec![ProviderEvent::Error(
                "http://127.0.0.1:1/v1 closed the stream before finishing".into()
            )]
        );
    }

    #[test]
    fn malformed_chunks_and_error_payloads_end_the_stream() {
        let mut d = ChunkDecoder::new("e".into(), None);
        assert!(matches!(d.on_data("{not json").as_slice(),
            [ProviderEvent::Error(m)] if m.starts_with("malformed stream chunk from e")));
        assert!(d.is_finished());
        assert!(d.on_data("[DONE]").is_empty());
        let mut d = ChunkDecoder::new("e".into(), None);
        assert_eq!(
            d.on_data(r#"{"error":{"message":"overloaded"}}"#),
            vec![ProviderEvent::Error(
                "e reported an error: overloaded".into()
            )]
        );
    }

    #[test]
    fn content_filter_is_an_error_with_the_raw_reason() {
        let mut d = ChunkDecoder::new("e".into(), None);
        let evs = feed(
            &mut d,
            &[
                r#"{"choices":[{"delta":{},"finish_reason":"content_filter"}]}"#,
                "[DONE]",
            ],
        );
        assert_eq!(
            evs,
            vec![
                ProviderEvent::RawStopReason("content_filter".into()),
                ProviderEvent::Error("e blocked the response with a content filter".into()),
            ]
        );
    }

    #[test]
    fn usage_is_priced_when_the_model_cost_is_known() {
        let cost = ModelCost {
            input: 1.0,
            output: 2.0,
            cache_read: 0.5,
            cache_write: 0.0,
        };
        let mut d = ChunkDecoder::new("e".into(), Some(cost));
        let evs = feed(
            &mut d,
            &[
                r#"{"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}"#,
                r#"{"choices":[],"usage":{"prompt_tokens":1000000,"completion_tokens":1000000}}"#,
                "[DONE]",
            ],
        );
        let Some(ProviderEvent::Usage(u)) =
            evs.iter().find(|e| matches!(e, ProviderEvent::Usage(_)))
        else {
            panic!("no usage in {evs:?}");
        };
        assert!((u.cost.total - 3.0).abs() < 1e-9, "{u:?}");
        assert_eq!(u.total_tokens, 2_000_000);
    }
}
