//! Sans-IO assembly of a streamed assistant response.
//!
//! [`AssistantBuilder`] folds [`ProviderEvent`]s into ordered content blocks and reports each
//! change as a [`StreamUpdate`] (append deltas, never whole-value replacement), so the service
//! layer can publish text as appends. [`AssistantBuilder::finish`] produces the settled
//! message.

use crate::message::{
    AssistantContent, AssistantMessage, StopReason, TextContent, ThinkingContent, Usage,
};

use super::ProviderEvent;

/// A change to the streaming assistant message.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamUpdate {
    /// A block was added at `index` (text/thinking blocks start empty and grow by appends).
    BlockStart {
        /// Position in `content`.
        index: usize,
        /// The new block.
        block: AssistantContent,
    },
    /// Text appended to the text block at `index`.
    TextAppend {
        /// Position in `content`.
        index: usize,
        /// Appended text.
        delta: String,
    },
    /// Reasoning appended to the thinking block at `index`.
    ThinkingAppend {
        /// Position in `content`.
        index: usize,
        /// Appended reasoning.
        delta: String,
    },
}

/// How the stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    Open,
    Done {
        stop: StopReason,
        raw: Option<String>,
    },
    Error(String),
}

/// Folds provider events into an [`AssistantMessage`].
#[derive(Debug)]
pub struct AssistantBuilder {
    message: AssistantMessage,
    end: End,
    /// The last block was closed by [`ProviderEvent::BlockEnd`] (or is a redacted one).
    closed: bool,
    raw_stop_reason: Option<String>,
}

impl AssistantBuilder {
    /// An empty response from `provider`/`api` for `model`, stamped `timestamp`.
    pub fn new(api: &str, provider: &str, model: &str, timestamp: u64) -> Self {
        Self {
            message: AssistantMessage {
                content: Vec::new(),
                api: api.to_owned(),
                provider: provider.to_owned(),
                model: model.to_owned(),
                response_model: None,
                response_id: None,
                usage: Usage::default(),
                stop_reason: StopReason::Stop,
                error_message: None,
                raw_stop_reason: None,
                timestamp,
            },
            end: End::Open,
            closed: false,
            raw_stop_reason: None,
        }
    }

    /// The partial message so far.
    pub fn partial(&self) -> &AssistantMessage {
        &self.message
    }

    /// True once `Done` or `Error` was applied.
    pub fn is_finished(&self) -> bool {
        self.end != End::Open
    }

    /// Applies one event; returns the visible changes. Events after the end are ignored.
    pub fn apply(&mut self, event: ProviderEvent) -> Vec<StreamUpdate> {
        if self.is_finished() {
            return Vec::new();
        }
        let content = &mut self.message.content;
        let mut updates = Vec::new();
        let closed = std::mem::replace(&mut self.closed, false);
        match event {
            ProviderEvent::TextDelta(delta) => {
                if closed || !matches!(content.last(), Some(AssistantContent::Text(_))) {
                    content.push(AssistantContent::Text(TextContent::new("")));
                    updates.push(StreamUpdate::BlockStart {
                        index: content.len() - 1,
                        block: AssistantContent::Text(TextContent::new("")),
                    });
                }
                let index = content.len() - 1;
                if let Some(AssistantContent::Text(t)) = content.last_mut() {
                    t.text.push_str(&delta);
                }
                if !delta.is_empty() {
                    updates.push(StreamUpdate::TextAppend { index, delta });
                }
            }
            ProviderEvent::ThinkingDelta(delta) => {
                if closed || !matches!(content.last(), Some(AssistantContent::Thinking(_))) {
                    content.push(AssistantContent::Thinking(ThinkingContent::new("")));
                    updates.push(StreamUpdate::BlockStart {
                        index: content.len() - 1,
                        block: AssistantContent::Thinking(ThinkingContent::new("")),
                    });
                }
                let index = content.len() - 1;
                if let Some(AssistantContent::Thinking(t)) = content.last_mut() {
                    t.thinking.push_str(&delta);
                }
                if !delta.is_empty() {
                    updates.push(StreamUpdate::ThinkingAppend { index, delta });
                }
            }
            ProviderEvent::ThinkingSignature(sig) => {
                if let Some(AssistantContent::Thinking(t)) = content.last_mut() {
                    t.thinking_signature = Some(sig);
                }
                self.closed = closed;
            }
            ProviderEvent::TextSignature(sig) => {
                if let Some(AssistantContent::Text(t)) = content.last_mut() {
                    t.text_signature = Some(sig);
                }
                self.closed = closed;
            }
            ProviderEvent::RedactedThinking(data) => {
                let mut block = ThinkingContent::new("");
                block.thinking_signature = Some(data);
                block.redacted = Some(true);
                let block = AssistantContent::Thinking(block);
                content.push(block.clone());
                updates.push(StreamUpdate::BlockStart {
                    index: content.len() - 1,
                    block,
                });
                // Nothing may be appended to a redacted block.
                self.closed = true;
            }
            ProviderEvent::BlockEnd => self.closed = true,
            ProviderEvent::RawStopReason(raw) => {
                self.raw_stop_reason = Some(raw);
                self.closed = closed;
            }
            ProviderEvent::ToolCall(call) => {
                let block = AssistantContent::ToolCall(call);
                content.push(block.clone());
                updates.push(StreamUpdate::BlockStart {
                    index: content.len() - 1,
                    block,
                });
            }
            ProviderEvent::Usage(usage) => {
                self.message.usage = usage;
                self.closed = closed;
            }
            ProviderEvent::Metadata {
                response_id,
                response_model,
            } => {
                if response_id.is_some() {
                    self.message.response_id = response_id;
                }
                if response_model.is_some() {
                    self.message.response_model = response_model;
                }
                self.closed = closed;
            }
            ProviderEvent::Done {
                stop_reason,
                raw_stop_reason,
            } => {
                self.end = End::Done {
                    stop: stop_reason,
                    raw: raw_stop_reason,
                };
            }
            ProviderEvent::Error(message) => self.end = End::Error(message),
        }
        updates
    }

    /// The settled message. `aborted` wins over everything; a stream that ended without
    /// `Done` is an error.
    pub fn finish(self, aborted: bool) -> AssistantMessage {
        let mut m = self.message;
        let has_calls = m.tool_calls().next().is_some();
        match (aborted, self.end) {
            (true, _) => {
                m.stop_reason = StopReason::Aborted;
                m.error_message = Some("Request was aborted".into());
            }
            (false, End::Open) => {
                m.stop_reason = StopReason::Error;
                m.error_message = Some("provider stream ended without a stop reason".into());
            }
            (false, End::Error(message)) => {
                m.stop_reason = StopReason::Error;
                m.error_message = Some(message);
                m.raw_stop_reason = self.raw_stop_reason;
            }
            (false, End::Done { stop, raw }) => {
                // Some servers say `stop` while returning tool calls.
                m.stop_reason = if stop == StopReason::Stop && has_calls {
                    StopReason::ToolUse
                } else {
                    stop
                };
                m.raw_stop_reason = raw;
            }
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use baton_protocol::{Map, Value};

    use super::*;
    use crate::message::ToolCall;

    fn done(stop: StopReason) -> ProviderEvent {
        ProviderEvent::Done {
            stop_reason: stop,
            raw_stop_reason: None,
        }
    }

    #[test]
    fn deltas_grow_blocks_and_kind_changes_start_new_blocks() {
        let mut b = AssistantBuilder::new("a", "p", "m", 1);
        let mut all = Vec::new();
        for ev in [
            ProviderEvent::ThinkingDelta("hm".into()),
            ProviderEvent::TextDelta("He".into()),
            ProviderEvent::TextDelta("llo".into()),
            ProviderEvent::ToolCall(ToolCall::new("c", "bash", Value::Map(Map::new()))),
            done(StopReason::ToolUse),
        ] {
            all.extend(b.apply(ev));
        }
        assert_eq!(all.len(), 6);
        assert_eq!(
            all[3],
            StreamUpdate::TextAppend {
                index: 1,
                delta: "He".into()
            }
        );
        let m = b.finish(false);
        assert_eq!(m.text(), "Hello");
        assert_eq!(m.content.len(), 3);
        assert_eq!(m.stop_reason, StopReason::ToolUse);
    }

    #[test]
    fn stream_without_done_settles_as_error() {
        let mut b = AssistantBuilder::new("a", "p", "m", 1);
        b.apply(ProviderEvent::TextDelta("partial".into()));
        let m = b.finish(false);
        assert_eq!(m.stop_reason, StopReason::Error);
        assert_eq!(m.text(), "partial");
    }

    #[test]
    fn abort_wins_and_keeps_partial_content() {
        let mut b = AssistantBuilder::new("a", "p", "m", 1);
        b.apply(ProviderEvent::TextDelta("partial".into()));
        b.apply(done(StopReason::Stop));
        let m = b.finish(true);
        assert_eq!(m.stop_reason, StopReason::Aborted);
        assert_eq!(m.text(), "partial");
    }

    #[test]
    fn stop_with_tool_calls_is_normalised_to_tool_use() {
        let mut b = AssistantBuilder::new("a", "p", "m", 1);
        b.apply(ProviderEvent::ToolCall(ToolCall::new(
            "c",
            "bash",
            Value::Map(Map::new()),
        )));
        b.apply(done(StopReason::Stop));
        assert_eq!(b.finish(false).stop_reason, StopReason::ToolUse);
    }

    #[test]
    fn block_end_separates_blocks_of_the_same_kind_and_redacted_blocks_stay_empty() {
        let mut b = AssistantBuilder::new("a", "p", "m", 1);
        for ev in [
            ProviderEvent::ThinkingDelta("one".into()),
            ProviderEvent::ThinkingSignature("s1".into()),
            ProviderEvent::BlockEnd,
            ProviderEvent::RedactedThinking("opaque".into()),
            ProviderEvent::ThinkingDelta("two".into()),
            ProviderEvent::BlockEnd,
            ProviderEvent::TextDelta("a".into()),
            ProviderEvent::TextSignature("ts".into()),
            ProviderEvent::BlockEnd,
            ProviderEvent::TextDelta("b".into()),
            done(StopReason::Stop),
        ] {
            b.apply(ev);
        }
        let m = b.finish(false);
        let AssistantContent::Thinking(first) = &m.content[0] else {
            panic!("{m:?}")
        };
        assert_eq!(
            (first.thinking.as_str(), first.thinking_signature.as_deref()),
            ("one", Some("s1"))
        );
        let AssistantContent::Thinking(redacted) = &m.content[1] else {
            panic!("{m:?}")
        };
        assert_eq!(redacted.redacted, Some(true));
        assert_eq!(redacted.thinking, "");
        assert_eq!(redacted.thinking_signature.as_deref(), Some("opaque"));
        assert!(matches!(&m.content[2], AssistantContent::Thinking(t) if t.thinking == "two"));
        assert!(matches!(&m.content[3], AssistantContent::Text(t)
            if t.text == "a" && t.text_signature.as_deref() == Some("ts")));
        assert!(matches!(&m.content[4], AssistantContent::Text(t) if t.text == "b"));
    }

    #[test]
    fn an_error_keeps_the_raw_stop_reason_it_was_given() {
        let mut b = AssistantBuilder::new("a", "p", "m", 1);
        b.apply(ProviderEvent::RawStopReason("refusal".into()));
        b.apply(ProviderEvent::Error("declined".into()));
        let m = b.finish(false);
        assert_eq!(m.stop_reason, StopReason::Error);
        assert_eq!(m.raw_stop_reason.as_deref(), Some("refusal"));
    }

    #[test]
    fn error_event_settles_with_its_message() {
        let mut b = AssistantBuilder::new("a", "p", "m", 1);
        b.apply(ProviderEvent::Error("HTTP 500".into()));
        b.apply(ProviderEvent::TextDelta("ignored".into()));
        let m = b.finish(false);
        assert_eq!(m.stop_reason, StopReason::Error);
        assert_eq!(m.error_message.as_deref(), Some("HTTP 500"));
        assert!(m.content.is_empty());
    }
}
