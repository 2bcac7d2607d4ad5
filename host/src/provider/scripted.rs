//! The embedded default model: deterministic, offline, and good enough to demo the protocol.
//!
//! Given the projected conversation it decides a reply from the *last* message:
//! * a user message containing ``run `CMD` `` → calls `bash` with `CMD`;
//! * a user message containing `read PATH` → calls `read` with `PATH`;
//! * other user text → a short direct answer;
//! * tool results → an answer quoting the result;
//! * a summarisation request (a user message starting with
//!   [`ScriptedConfig::summary_request_opening`]) → a summary listing what the user asked.
//!
//! Every reply starts with a `thinking` block, then streams its text token by token (one
//! word plus the whitespace after it per delta) with [`ScriptedConfig::token_delay`] between
//! deltas so streaming is visible; tests use a zero delay. The same request always yields the
//! same events ([`script`] is a pure function).

use std::collections::VecDeque;
use std::time::Duration;

use baton_protocol::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::{ModelRequest, Provider, ProviderEvent, ProviderStream};
use crate::BoxFuture;
use crate::message::{MessageRef, StopReason, ToolCall, Usage, joined_text};
use crate::model_ref::ModelRef;
use crate::projection::ModelContext;

/// Provider id of the scripted model.
pub const PROVIDER_ID: &str = "scripted";
/// Model id of the scripted model (listed as `scripted/default`).
pub const MODEL_ID: &str = "default";
/// Longest tool output quoted back.
const QUOTE_LIMIT: usize = 2000;

/// The pause between streamed tokens unless configured otherwise.
pub const DEFAULT_TOKEN_DELAY: Duration = Duration::from_millis(15);

/// Scripted model settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScriptedConfig {
    /// Pause between streamed tokens.
    pub token_delay: Duration,
    /// How a summarisation request's text starts: a last user message that starts with it is
    /// answered with a summary. A host passes its compaction's opening
    /// (`session::SUMMARY_REQUEST_OPENING`); `None` treats no request as one.
    pub summary_request_opening: Option<&'static str>,
}

impl ScriptedConfig {
    /// `token_delay` between tokens, answering requests that start with
    /// `summary_request_opening` with a summary.
    pub fn new(token_delay: Duration, summary_request_opening: &'static str) -> Self {
        Self {
            token_delay,
            summary_request_opening: Some(summary_request_opening),
        }
    }
}

impl Default for ScriptedConfig {
    /// [`DEFAULT_TOKEN_DELAY`], recognising no summarisation request.
    fn default() -> Self {
        Self {
            token_delay: DEFAULT_TOKEN_DELAY,
            summary_request_opening: None,
        }
    }
}

impl ModelRef {
    /// The embedded scripted model.
    pub fn scripted() -> Self {
        Self::new(PROVIDER_ID, MODEL_ID)
    }
}

/// The scripted provider.
#[derive(Debug, Clone, Default)]
pub struct ScriptedProvider {
    config: ScriptedConfig,
}

impl ScriptedProvider {
    /// A provider with `config`.
    pub fn new(config: ScriptedConfig) -> Self {
        Self { config }
    }
}

impl Provider for ScriptedProvider {
    fn id(&self) -> &str {
        PROVIDER_ID
    }

    fn api(&self) -> &str {
        "scripted"
    }

    fn stream(&self, request: ModelRequest, _cancel: CancellationToken) -> Box<dyn ProviderStream> {
        Box::new(ScriptedStream {
            events: script(&self.config, &request).into(),
            delay: self.config.token_delay,
            started: false,
        })
    }
}

#[derive(Debug)]
struct ScriptedStream {
    events: VecDeque<ProviderEvent>,
    delay: Duration,
    started: bool,
}

impl ProviderStream for ScriptedStream {
    fn next(&mut self) -> BoxFuture<'_, Option<ProviderEvent>> {
        Box::pin(async move {
            let ev = self.events.front()?;
            let is_token = matches!(
                ev,
                ProviderEvent::TextDelta(_) | ProviderEvent::ThinkingDelta(_)
            );
            if is_token && self.started && !self.delay.is_zero() {
                // Sleep before taking the event so a cancelled `next` loses nothing.
                tokio::time::sleep(self.delay).await;
            }
            self.started = true;
            self.events.pop_front()
        })
    }
}

/// What the model decided to do.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Plan {
    Call {
        thinking: String,
        text: String,
        tool: &'static str,
        key: &'static str,
        value: String,
    },
    Answer {
        thinking: String,
        text: String,
    },
}

/// The complete, deterministic event list for `request`.
pub fn script(config: &ScriptedConfig, request: &ModelRequest) -> Vec<ProviderEvent> {
    let plan = plan(&request.messages, config.summary_request_opening);
    let mut events = Vec::new();
    let (thinking, text) = match &plan {
        Plan::Call { thinking, text, .. } | Plan::Answer { thinking, text } => (thinking, text),
    };
    events.extend(tokens(thinking).map(ProviderEvent::ThinkingDelta));
    events.extend(tokens(text).map(ProviderEvent::TextDelta));
    let stop = match &plan {
        Plan::Call {
            tool, key, value, ..
        } => {
            let mut args = Map::new();
            args.insert(*key, value.as_str().into());
            events.push(ProviderEvent::ToolCall(ToolCall::new(
                format!("call_{}_0", request.messages.len()),
                *tool,
                Value::Map(args),
            )));
            StopReason::ToolUse
        }
        Plan::Answer { .. } => StopReason::Stop,
    };
    let input: usize =
        request.messages.iter().map(message_chars).sum::<usize>() + request.system_prompt.len();
    let output = thinking.len() + text.len();
    let usage = Usage {
        input: (input / 4) as u64,
        output: (output / 4) as u64,
        total_tokens: ((input + output) / 4) as u64,
        ..Usage::default()
    };
    events.push(ProviderEvent::Usage(usage));
    events.push(ProviderEvent::Done {
        stop_reason: stop,
        raw_stop_reason: None,
    });
    events
}

fn plan(messages: &ModelContext, summary_request_opening: Option<&str>) -> Plan {
    let results: Vec<_> = messages
        .iter()
        .rev()
        .map_while(|m| match m {
            MessageRef::ToolResult(r) => Some(r),
            MessageRef::User(_) | MessageRef::Assistant(_) => None,
        })
        .collect();
    if !results.is_empty() {
        let mut text = String::new();
        for r in results.iter().rev() {
            let body = joined_text(&r.content);
            let body = quote(&body);
            if r.is_error {
                text.push_str(&format!(
                    "The `{}` call failed:\n```\n{body}\n```\n",
                    r.tool_name
                ));
            } else {
                text.push_str(&format!(
                    "Here is the result of `{}`:\n```\n{body}\n```\n",
                    r.tool_name
                ));
            }
        }
        return Plan::Answer {
            thinking: format!(
                "The tool returned {} result(s); I will report them.",
                results.len()
            ),
            text: text.trim_end().to_owned(),
        };
    }
    let Some(MessageRef::User(user)) = messages.last() else {
        return Plan::Answer {
            thinking: "There is no new user message.".into(),
            text: "Nothing to answer.".into(),
        };
    };
    let prompt = joined_text(&user.content);
    if let Some(summary) = summary_request_opening.and_then(|opening| summary_of(opening, &prompt))
    {
        return Plan::Answer {
            thinking: "This is a summarisation request; I will list what the user asked.".into(),
            text: summary,
        };
    }
    if let Some(cmd) = run_command(&prompt) {
        return Plan::Call {
            thinking: format!("The user asked me to run `{cmd}`, so I will call the bash tool."),
            text: format!("Running `{cmd}`."),
            tool: "bash",
            key: "command",
            value: cmd,
        };
    }
    if let Some(path) = read_path(&prompt) {
        return Plan::Call {
            thinking: format!("The user asked me to read {path}, so I will call the read tool."),
            text: format!("Reading {path}."),
            tool: "read",
            key: "path",
            value: path,
        };
    }
    Plan::Answer {
        thinking: "No tool is needed; I will answer directly.".into(),
        text: format!(
            "You said: {}. I am the scripted model: ask me to run `a command` or to read a file.",
            prompt.trim()
        ),
    }
}

/// A summarisation request (a compaction's: `opening`, the conversation as `User: …` and
/// other lines, then `</conversation>`) → a deterministic summary: how many messages it
/// covers and every user line, in order.
fn summary_of(opening: &str, prompt: &str) -> Option<String> {
    let body = prompt.strip_prefix(opening)?;
    let body = body.split("\n</conversation>").next().unwrap_or(body);
    let asked: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("User: "))
        .map(str::trim)
        .collect();
    let blocks = body.split("\n\n").filter(|b| !b.trim().is_empty()).count();
    Some(format!(
        "Summary of {blocks} earlier message(s). The user asked: {}.",
        if asked.is_empty() {
            "nothing".to_owned()
        } else {
            asked.join(" / ")
        }
    ))
}

/// ``run `CMD` `` → `CMD`.
fn run_command(prompt: &str) -> Option<String> {
    let lower = prompt.to_lowercase();
    let at = lower.find("run `")?;
    let rest = prompt.get(at + 5..)?;
    let end = rest.find('`')?;
    let cmd = rest[..end].trim();
    (!cmd.is_empty()).then(|| cmd.to_owned())
}

/// `read PATH` → `PATH` (surrounding quotes/backticks and trailing punctuation removed).
fn read_path(prompt: &str) -> Option<String> {
    let words: Vec<&str> = prompt.split_whitespace().collect();
    let i = words.iter().position(|w| w.eq_ignore_ascii_case("read"))?;
    let raw = words.get(i + 1)?;
    let path = raw
        .trim_matches(|c| matches!(c, '`' | '"' | '\''))
        .trim_end_matches(['.', ',', ';', ':', '!', '?'])
        .trim_matches(|c| matches!(c, '`' | '"' | '\''));
    (!path.is_empty()).then(|| path.to_owned())
}

fn quote(body: &str) -> String {
    if body.len() <= QUOTE_LIMIT {
        return body.to_owned();
    }
    format!("{}\n…", &body[..body.floor_char_boundary(QUOTE_LIMIT)])
}

fn message_chars(m: MessageRef<'_>) -> usize {
    match m {
        MessageRef::User(u) => joined_text(&u.content).len(),
        MessageRef::Assistant(a) => a.text().len(),
        MessageRef::ToolResult(r) => joined_text(&r.content).len(),
    }
}

/// Splits `text` into tokens of one word plus the whitespace that follows it.
fn tokens(text: &str) -> impl Iterator<Item = String> + '_ {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let ws_end = rest[word_end..]
            .find(|c: char| !c.is_whitespace())
            .map_or(rest.len(), |i| word_end + i);
        let (tok, tail) = rest.split_at(ws_end);
        rest = tail;
        Some(tok.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, ToolResultMessage, UserContent, UserMessage};
    use crate::model_ref::ThinkingLevel;

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: MODEL_ID.into(),
            system_prompt: String::new(),
            messages: messages.into(),
            tools: Vec::new(),
            thinking: ThinkingLevel::Off,
        }
    }

    fn user(text: &str) -> Message {
        Message::User(UserMessage::text(text, 0))
    }

    fn call_of(events: &[ProviderEvent]) -> Option<&ToolCall> {
        events.iter().find_map(|e| match e {
            ProviderEvent::ToolCall(c) => Some(c),
            _ => None,
        })
    }

    #[test]
    fn same_request_yields_identical_events() {
        let r = request(vec![user("please run `echo hi` now")]);
        assert_eq!(
            script(&ScriptedConfig::default(), &r),
            script(&ScriptedConfig::default(), &r)
        );
    }

    #[test]
    fn run_request_becomes_a_bash_call_after_thinking_and_text() {
        let events = script(
            &ScriptedConfig::default(),
            &request(vec![user("please run `ls -la` now")]),
        );
        assert!(matches!(events[0], ProviderEvent::ThinkingDelta(_)));
        let call = call_of(&events).unwrap();
        assert_eq!(call.name, "bash");
        assert_eq!(call.arguments.to_json(), r#"{"command":"ls -la"}"#);
        assert!(matches!(
            events.last(),
            Some(ProviderEvent::Done {
                stop_reason: StopReason::ToolUse,
                ..
            })
        ));
    }

    #[test]
    fn read_request_becomes_a_read_call() {
        let events = script(
            &ScriptedConfig::default(),
            &request(vec![user("Please read src/main.rs.")]),
        );
        let call = call_of(&events).unwrap();
        assert_eq!(call.name, "read");
        assert_eq!(call.arguments.to_json(), r#"{"path":"src/main.rs"}"#);
    }

    #[test]
    fn tool_result_is_answered_by_quoting_it() {
        let events = script(
            &ScriptedConfig::default(),
            &request(vec![
                user("run `echo hi`"),
                Message::ToolResult(ToolResultMessage {
                    tool_call_id: "c".into(),
                    tool_name: "bash".into(),
                    content: vec![UserContent::text("hi")],
                    details: None,
                    is_error: false,
                    timestamp: 0,
                }),
            ]),
        );
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                ProviderEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "Here is the result of `bash`:\n```\nhi\n```");
        assert!(call_of(&events).is_none());
    }

    fn text_of(events: &[ProviderEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                ProviderEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_summarisation_request_is_recognised_by_the_configured_opening_only() {
        let prompt =
            "<<summarise>>\nUser: fix the bug\n\nAssistant: done\n</conversation>\n\nWrite it.";
        let r = request(vec![user(prompt)]);
        let summarising = ScriptedConfig::new(Duration::ZERO, "<<summarise>>\n");
        assert_eq!(
            text_of(&script(&summarising, &r)),
            "Summary of 2 earlier message(s). The user asked: fix the bug."
        );
        // Without an opening, or with another one, it is an ordinary prompt.
        let other = ScriptedConfig::new(Duration::ZERO, "<conversation>\n");
        for config in [ScriptedConfig::default(), other] {
            assert!(
                text_of(&script(&config, &r)).starts_with("You said: <<summarise>>"),
                "{config:?}"
            );
        }
    }

    #[test]
    fn text_streams_word_by_word_and_reassembles_exactly() {
        let toks: Vec<String> = tokens("a  bc\nd ").collect();
        assert_eq!(toks, vec!["a  ", "bc\n", "d "]);
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_paced_by_the_configured_delay() {
        let p = ScriptedProvider::new(ScriptedConfig {
            token_delay: Duration::from_millis(10),
            ..ScriptedConfig::default()
        });
        let start = tokio::time::Instant::now();
        let mut s = p.stream(request(vec![user("hello there")]), CancellationToken::new());
        let mut n = 0u32;
        let mut tokens_seen = 0u32;
        while let Some(ev) = s.next().await {
            n += 1;
            if matches!(
                ev,
                ProviderEvent::TextDelta(_) | ProviderEvent::ThinkingDelta(_)
            ) {
                tokens_seen += 1;
            }
        }
        assert!(n > 3);
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(10) * (tokens_seen - 1)
        );
    }
}
