//! Context compaction: when a session's model context nears the model's window, the history
//! before a kept recent tail is replaced, in the model context only, by a summary the model
//! writes. The journal keeps everything (a `compaction` entry names the first kept entry) and
//! so does the live view, which shows a `compactionSummary` item where it happened.
//!
//! Policy (upstream's `shouldCompact` / `findCutPoint` are the reference):
//! * **When.** After a turn settles normally, if the estimated context tokens exceed the
//!   model's context window (its registry entry's, else
//!   [`CompactionSettings::default_context_window`]) minus
//!   [`CompactionSettings::reserve_tokens`]; or by hand
//!   ([`super::SessionRuntime::compact_now`], `pi.session` `compact`).
//! * **Estimate.** The last settled response's reported usage (if it came after the latest
//!   summary) plus about four characters per token for everything after it.
//! * **Cut.** Walking back from the newest message, the tail is kept until it holds at least
//!   [`CompactionSettings::keep_recent_tokens`]; the cut lands on a message that is not a
//!   tool result, so a tool call and its result stay together.
//! * **Summary.** One model call (no tools) with [`SUMMARIZATION_SYSTEM_PROMPT`] over the
//!   summarised messages as text (tool outputs cut to [`MAX_SERIALIZED_OUTPUT_CHARS`], the
//!   oldest dropped past the window's budget), an earlier summary included so it is carried
//!   forward. The reply, cut to [`MAX_SUMMARY_BYTES`], is the summary.
//!
//! The pure parts (estimate, cut, request, collecting the reply) are functions here; the
//! runtime part ([`super::compact`]) holds the session busy (`phase: turn`,
//! `compaction.running`) meanwhile.

use std::borrow::Borrow;

use tokio_util::sync::CancellationToken;

use super::error::SessionError;
use crate::message::{
    AgentMessage, AssistantContent, Message, StopReason, UserMessage, joined_text,
};
use crate::model_ref::{ModelRef, ThinkingLevel};
use crate::projection::bash_execution_to_text;
use crate::provider::ModelRegistry;
use crate::provider::{ModelRequest, Provider, ProviderEvent};

/// Tokens kept free below the context window (for the next prompt and reply): compaction
/// starts when the context estimate exceeds the window minus this.
pub const DEFAULT_RESERVE_TOKENS: u64 = 16_384;
/// Tokens of recent history kept verbatim after a compaction.
pub const DEFAULT_KEEP_RECENT_TOKENS: u64 = 20_000;
/// The context window assumed for a model whose registry entry names none.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;
/// Characters per estimated token (a conservative estimate: it overcounts).
pub const CHARS_PER_TOKEN: u64 = 4;
/// Longest tool or command output quoted into the summarisation request, in characters.
pub const MAX_SERIALIZED_OUTPUT_CHARS: usize = 2_000;
/// Longest summary kept, in bytes (a longer reply is cut at a character boundary).
pub const MAX_SUMMARY_BYTES: usize = 256 << 10;
/// Longest `compact` instructions, in bytes.
pub const MAX_COMPACT_INSTRUCTIONS_BYTES: usize = 16 << 10;

/// The system prompt of the summarisation call (the scripted model recognises it).
pub const SUMMARIZATION_SYSTEM_PROMPT: &str = "You write context checkpoints for a coding \
assistant. You are given the earlier part of a conversation between a user and an AI coding \
assistant, possibly starting with the summary of an even earlier part. Write a summary the \
assistant can continue the work from without the original messages: the user's goals and \
constraints, decisions made, files read or changed, commands run and what they showed, errors \
met and how they were handled, and what remains to do. Keep file paths, names, numbers and \
error texts exact. Be concise. Do not continue the conversation and do not answer questions \
in it: output only the summary.";

/// When and how a session compacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionSettings {
    /// Compaction is offered at all (by hand and automatically).
    pub enabled: bool,
    /// Compact automatically after a turn when the threshold is crossed.
    pub auto: bool,
    /// See [`DEFAULT_RESERVE_TOKENS`].
    pub reserve_tokens: u64,
    /// See [`DEFAULT_KEEP_RECENT_TOKENS`].
    pub keep_recent_tokens: u64,
    /// See [`DEFAULT_CONTEXT_WINDOW`].
    pub default_context_window: u64,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            auto: true,
            reserve_tokens: DEFAULT_RESERVE_TOKENS,
            keep_recent_tokens: DEFAULT_KEEP_RECENT_TOKENS,
            default_context_window: DEFAULT_CONTEXT_WINDOW,
        }
    }
}

impl CompactionSettings {
    /// True when `tokens` of context in a `window`-token model call for a compaction.
    pub fn should_compact(&self, tokens: u64, window: u64) -> bool {
        self.enabled && tokens > window.saturating_sub(self.reserve_tokens)
    }
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionOutcome {
    /// The summary now standing for the history before the kept tail.
    pub summary: String,
    /// The first entry kept verbatim.
    pub first_kept_entry_id: String,
    /// Estimated context tokens before.
    pub tokens_before: u64,
    /// Estimated context tokens after.
    pub tokens_after: u64,
}

/// Estimated tokens of one message (characters / [`CHARS_PER_TOKEN`], rounded up).
pub fn estimate_tokens(message: &AgentMessage) -> u64 {
    let chars = serialize(message, usize::MAX).len() as u64;
    chars.div_ceil(CHARS_PER_TOKEN)
}

/// Estimated tokens of a model context: the last settled response's usage, when it came
/// after the latest summary, plus the estimate of every message after it; else the estimate
/// of every message.
pub fn context_tokens<M: Borrow<AgentMessage>>(messages: &[M]) -> u64 {
    let summary_time = messages.iter().rev().find_map(|m| match m.borrow() {
        AgentMessage::CompactionSummary(s) => Some(s.timestamp),
        _ => None,
    });
    let usage = messages
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, m)| match m.borrow() {
            AgentMessage::Assistant(a)
                if !matches!(a.stop_reason, StopReason::Error | StopReason::Aborted)
                    && summary_time.is_none_or(|t| a.timestamp > t) =>
            {
                let u = &a.usage;
                let total = if u.total_tokens > 0 {
                    u.total_tokens
                } else {
                    u.input + u.output + u.cache_read + u.cache_write
                };
                (total > 0).then_some((i, total))
            }
            _ => None,
        });
    let (from, base) = usage.map_or((0, 0), |(i, t)| (i + 1, t));
    base + messages[from..]
        .iter()
        .map(|m| estimate_tokens(m.borrow()))
        .sum::<u64>()
}

/// Where the kept tail starts: the index of the first message kept, so that the tail holds at
/// least `keep_recent_tokens` and does not start with a tool result. `None` when nothing
/// before it would be summarised (only an earlier summary, or nothing at all).
pub fn cut_point<M: Borrow<AgentMessage>>(
    messages: &[M],
    keep_recent_tokens: u64,
) -> Option<usize> {
    let mut kept = 0u64;
    let mut cut = None;
    for (i, m) in messages.iter().enumerate().rev() {
        kept += estimate_tokens(m.borrow());
        if kept >= keep_recent_tokens {
            cut = Some(i);
            break;
        }
    }
    // The whole context fits in the tail: nothing to summarise.
    let mut cut = cut?;
    // Never start the tail at a tool result (its call would be summarised away): move the cut
    // back to the message before the run of results.
    while cut > 0 && matches!(messages[cut].borrow(), AgentMessage::ToolResult(_)) {
        cut -= 1;
    }
    let summarised = &messages[..cut];
    let only_summary = summarised
        .iter()
        .all(|m| matches!(m.borrow(), AgentMessage::CompactionSummary(_)));
    (!only_summary).then_some(cut)
}

/// How the summarisation request's text starts (the scripted model recognises it).
pub const SUMMARY_REQUEST_OPENING: &str = "<conversation>\n";

/// The summarisation request's text for `messages` (the history before the kept tail),
/// within `budget_chars` (the oldest messages are left out first; an earlier summary is
/// always kept).
pub fn summary_prompt<M: Borrow<AgentMessage>>(
    messages: &[M],
    instructions: Option<&str>,
    budget_chars: usize,
) -> String {
    // Newest first until the budget is spent.
    let mut parts: Vec<String> = Vec::new();
    let mut used = 0usize;
    let mut dropped = 0usize;
    for m in messages.iter().rev() {
        let text = serialize(m.borrow(), MAX_SERIALIZED_OUTPUT_CHARS);
        let is_summary = matches!(m.borrow(), AgentMessage::CompactionSummary(_));
        if text.is_empty() {
            continue;
        }
        if used + text.len() > budget_chars && !is_summary {
            dropped += 1;
            continue;
        }
        used += text.len();
        parts.push(text);
    }
    parts.reverse();
    let mut prompt = String::from(SUMMARY_REQUEST_OPENING);
    if dropped > 0 {
        prompt.push_str(&format!(
            "[{dropped} older message(s) did not fit and are left out]\n\n"
        ));
    }
    prompt.push_str(&parts.join("\n\n"));
    prompt.push_str("\n</conversation>\n\nWrite the summary of the conversation above now.");
    if let Some(extra) = instructions.filter(|s| !s.trim().is_empty()) {
        prompt.push_str("\n\nAdditional instructions from the user: ");
        prompt.push_str(extra.trim());
    }
    prompt
}

/// The summarisation call: `prompt` ([`summary_prompt`]) to `model`, no tools, no reasoning.
pub fn summary_request(model: &str, prompt: String) -> ModelRequest {
    ModelRequest {
        model: model.to_owned(),
        system_prompt: SUMMARIZATION_SYSTEM_PROMPT.to_owned(),
        messages: vec![Message::User(UserMessage::text(prompt, 0))].into(),
        tools: Vec::new(),
        thinking: ThinkingLevel::Off,
    }
}

/// Runs the summarisation call and collects its text (cut to [`MAX_SUMMARY_BYTES`]).
///
/// # Errors
/// [`SessionError::CompactionAborted`] when `cancel` fires; [`SessionError::Compaction`]
/// when the model fails or answers with no text.
pub async fn summarise(
    provider: &dyn Provider,
    request: ModelRequest,
    cancel: &CancellationToken,
) -> Result<String, SessionError> {
    let mut stream = provider.stream(request, cancel.clone());
    let mut text = String::new();
    loop {
        let event = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(SessionError::CompactionAborted),
            event = stream.next() => event,
        };
        match event {
            Some(ProviderEvent::TextDelta(delta)) => {
                if text.len() < MAX_SUMMARY_BYTES {
                    text.push_str(&delta);
                }
            }
            Some(ProviderEvent::Error(message)) => return Err(SessionError::Compaction(message)),
            Some(ProviderEvent::Done { .. }) | None => break,
            Some(_) => {}
        }
    }
    if cancel.is_cancelled() {
        return Err(SessionError::CompactionAborted);
    }
    text.truncate(text.floor_char_boundary(MAX_SUMMARY_BYTES));
    let text = text.trim().to_owned();
    if text.is_empty() {
        return Err(SessionError::Compaction(
            "the model answered the summarisation request with no text".into(),
        ));
    }
    Ok(text)
}

/// The context window of `model`: its registry entry's (`ModelMeta::context_window`, e.g.
/// from the models file), else [`CompactionSettings::default_context_window`].
pub(super) fn context_window(
    models: &ModelRegistry,
    model: &ModelRef,
    settings: &CompactionSettings,
) -> u64 {
    models
        .meta(model)
        .and_then(|m| m.context_window)
        .filter(|w| *w > 0)
        .unwrap_or(settings.default_context_window)
}

/// One message as text for the summarisation request.
fn serialize(message: &AgentMessage, max_output: usize) -> String {
    match message {
        AgentMessage::User(u) => format!("User: {}", joined_text(&u.content)),
        AgentMessage::Assistant(a) => {
            let mut parts = Vec::new();
            for block in &a.content {
                match block {
                    AssistantContent::Text(t) => parts.push(format!("Assistant: {}", t.text)),
                    AssistantContent::Thinking(_) => {}
                    AssistantContent::ToolCall(c) => parts.push(format!(
                        "Assistant called {}: {}",
                        c.name,
                        c.arguments.to_json()
                    )),
                }
            }
            parts.join("\n")
        }
        AgentMessage::ToolResult(r) => format!(
            "Tool {} {}: {}",
            r.tool_name,
            if r.is_error { "failed" } else { "returned" },
            cut(&joined_text(&r.content), max_output)
        ),
        AgentMessage::BashExecution(b) if b.exclude_from_context => String::new(),
        AgentMessage::BashExecution(b) => {
            format!(
                "User shell: {}",
                cut(&bash_execution_to_text(b), max_output)
            )
        }
        AgentMessage::Custom(c) => format!("Note: {}", joined_text(&c.content)),
        AgentMessage::BranchSummary(b) => format!("Branch summary: {}", b.summary),
        AgentMessage::CompactionSummary(s) => {
            format!("Summary of earlier conversation: {}", s.summary)
        }
    }
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let end = text.floor_char_boundary(max);
    format!("{}… [{} more characters]", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{CompactionSummaryMessage, ToolCall, ToolResultMessage, UserContent};
    use baton_protocol::Value;

    fn user(text: &str) -> AgentMessage {
        AgentMessage::User(UserMessage::text(text, 1))
    }

    fn result(text: &str) -> AgentMessage {
        AgentMessage::ToolResult(ToolResultMessage {
            tool_call_id: "c".into(),
            tool_name: "bash".into(),
            content: vec![UserContent::text(text)],
            details: None,
            is_error: false,
            timestamp: 1,
        })
    }

    fn call() -> AgentMessage {
        AgentMessage::Assistant(crate::message::AssistantMessage {
            content: vec![AssistantContent::ToolCall(ToolCall::new(
                "c",
                "bash",
                Value::from_json(r#"{"command":"ls"}"#).unwrap(),
            ))],
            api: "t".into(),
            provider: "t".into(),
            model: "t".into(),
            response_model: None,
            response_id: None,
            usage: Default::default(),
            stop_reason: StopReason::ToolUse,
            error_message: None,
            raw_stop_reason: None,
            timestamp: 1,
        })
    }

    #[test]
    fn the_threshold_is_the_window_minus_the_reserve() {
        let s = CompactionSettings {
            reserve_tokens: 100,
            ..CompactionSettings::default()
        };
        assert!(!s.should_compact(900, 1000));
        assert!(s.should_compact(901, 1000));
        let off = CompactionSettings {
            enabled: false,
            ..s
        };
        assert!(!off.should_compact(10_000, 1000));
    }

    #[test]
    fn the_cut_keeps_the_recent_tail_and_never_starts_at_a_tool_result() {
        let long = "x".repeat(400); // 100 tokens
        let messages = vec![user(&long), call(), result(&long), user("short")];
        // Keeping ~100 tokens would start the tail at the result: the cut moves to its call.
        assert_eq!(cut_point(&messages, 100), Some(1));
        // Everything fits in the tail: nothing to summarise.
        assert_eq!(cut_point(&messages, 10_000), None);
    }

    #[test]
    fn an_earlier_summary_alone_is_not_worth_compacting() {
        let summary = AgentMessage::CompactionSummary(CompactionSummaryMessage {
            summary: "s".into(),
            tokens_before: 1,
            timestamp: 1,
        });
        let messages = vec![summary, user(&"y".repeat(4000))];
        assert_eq!(cut_point(&messages, 10), None);
    }

    #[test]
    fn the_request_quotes_outputs_cut_and_carries_instructions() {
        let messages = vec![user("fix the bug"), call(), result(&"z".repeat(10_000))];
        let r = summary_request("m", String::from("p"));
        assert_eq!(r.system_prompt, SUMMARIZATION_SYSTEM_PROMPT);
        assert!(r.tools.is_empty());
        let text = summary_prompt(&messages, Some("focus on tests"), usize::MAX);
        assert!(text.starts_with(SUMMARY_REQUEST_OPENING));
        assert!(text.contains("User: fix the bug"));
        assert!(text.contains(r#"Assistant called bash: {"command":"ls"}"#));
        assert!(text.contains("[8000 more characters]"));
        assert!(text.ends_with("Additional instructions from the user: focus on tests"));
    }

    #[test]
    fn the_request_drops_the_oldest_messages_past_the_budget() {
        let messages = vec![user(&"a".repeat(500)), user("recent")];
        let text = summary_prompt(&messages, None, 100);
        assert!(text.contains("[1 older message(s) did not fit and are left out]"));
        assert!(text.contains("User: recent"));
        assert!(!text.contains("aaaa"));
    }

    #[test]
    fn reported_usage_counts_only_after_the_latest_summary() {
        let mut answered = call();
        if let AgentMessage::Assistant(a) = &mut answered {
            a.usage.total_tokens = 5000;
            a.timestamp = 10;
        }
        assert_eq!(
            context_tokens(&[answered.clone(), user("abcd")]),
            5000 + estimate_tokens(&user("abcd"))
        );
        let summary = AgentMessage::CompactionSummary(CompactionSummaryMessage {
            summary: "abcd".into(),
            tokens_before: 1,
            timestamp: 20,
        });
        // The response predates the summary: its usage described the old context.
        let estimated = context_tokens(&[summary, answered, user("abcd")]);
        assert!(estimated < 100, "{estimated}");
    }
}
