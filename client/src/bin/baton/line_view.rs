//! The line view of a `pi.session` transcript (see `docs/services.md`) that `prompt`, `watch`
//! and `attach` without a terminal print: [`TranscriptProgress`] turns successive states into
//! [`Piece`]s, [`Printer`] writes them for a person, [`piece_json`] for a machine.
//!
//! It works from whole states, not from individual ops, so it is exact after a lag or a
//! resubscribe: it remembers how much of each item it has shown and shows the rest.

use std::collections::HashMap;
use std::io::Write;

use baton_protocol::{Map, Value};

use crate::item::{content_text, str_of};

/// One thing that changed, in the order it should be shown.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    /// A user message.
    User(String),
    /// More thinking text of an assistant item.
    Thinking {
        /// The transcript item id.
        item: String,
        /// The new text.
        delta: String,
    },
    /// More reply text of an assistant item.
    Text {
        /// The transcript item id.
        item: String,
        /// The new text.
        delta: String,
    },
    /// The assistant called a tool.
    ToolCall {
        /// The transcript item id.
        item: String,
        /// The tool.
        name: String,
        /// Its arguments.
        arguments: Value,
    },
    /// A tool finished.
    ToolResult {
        /// The tool.
        name: String,
        /// Its text output.
        text: String,
        /// True when the tool failed.
        is_error: bool,
    },
    /// A user's `!command` finished.
    Bash {
        /// The command line.
        command: String,
        /// Its (possibly truncated) output.
        output: String,
        /// Its exit code (none when killed).
        exit_code: Option<i64>,
    },
    /// An assistant item settled.
    Settled {
        /// The transcript item id.
        item: String,
        /// `complete`, `error` or `aborted`.
        status: String,
        /// The error message for `error`.
        error: Option<String>,
    },
}

#[derive(Debug, Default)]
struct ItemProgress {
    /// Characters printed per content block.
    printed: Vec<usize>,
    /// Tool calls announced, by block index.
    calls: Vec<bool>,
    settled: bool,
}

/// How much of a transcript has been shown.
#[derive(Debug, Default)]
pub(crate) struct TranscriptProgress {
    items: HashMap<String, ItemProgress>,
    /// Items present before we started: not shown.
    skip: HashMap<String, ()>,
}

/// The transcript array of a `pi.session` state.
fn transcript(state: &Value) -> &[Value] {
    state
        .as_map()
        .and_then(|m| m.get("transcript"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The `phase` of a `pi.session` state.
pub(crate) fn phase(state: &Value) -> &str {
    state.as_map().map(|m| str_of(m, "phase")).unwrap_or("")
}

impl TranscriptProgress {
    /// Marks everything in `state` as already shown.
    pub(crate) fn skip_existing(&mut self, state: &Value) {
        for item in transcript(state) {
            if let Some(id) = item.as_map().map(|m| str_of(m, "id")) {
                self.skip.insert(id.to_owned(), ());
            }
        }
    }

    /// What is new in `state` since the last call.
    pub(crate) fn advance(&mut self, state: &Value) -> Vec<Piece> {
        let mut out = Vec::new();
        for item in transcript(state) {
            let Some(m) = item.as_map() else { continue };
            let id = str_of(m, "id").to_owned();
            if self.skip.contains_key(&id) {
                continue;
            }
            let fresh = !self.items.contains_key(&id);
            let p = self.items.entry(id.clone()).or_default();
            if p.settled {
                continue;
            }
            match str_of(m, "role") {
                "user" => {
                    if fresh {
                        out.push(Piece::User(content_text(m.get("content"))));
                    }
                    p.settled = true;
                }
                "assistant" => {
                    let blocks = m
                        .get("content")
                        .and_then(Value::as_array)
                        .map_or(&[][..], Vec::as_slice);
                    p.printed.resize(blocks.len(), 0);
                    p.calls.resize(blocks.len(), false);
                    for (i, block) in blocks.iter().enumerate() {
                        let Some(b) = block.as_map() else { continue };
                        match str_of(b, "type") {
                            kind @ ("text" | "thinking") => {
                                let field = if kind == "text" { "text" } else { "thinking" };
                                let text = str_of(b, field);
                                let done = p.printed[i];
                                let chars = text.chars().count();
                                if chars > done {
                                    let delta: String = text.chars().skip(done).collect();
                                    p.printed[i] = chars;
                                    out.push(if kind == "text" {
                                        Piece::Text {
                                            item: id.clone(),
                                            delta,
                                        }
                                    } else {
                                        Piece::Thinking {
                                            item: id.clone(),
                                            delta,
                                        }
                                    });
                                }
                            }
                            "toolCall" if !p.calls[i] => {
                                p.calls[i] = true;
                                out.push(Piece::ToolCall {
                                    item: id.clone(),
                                    name: str_of(b, "name").to_owned(),
                                    arguments: b.get("arguments").cloned().unwrap_or(Value::Null),
                                });
                            }
                            _ => {}
                        }
                    }
                    let status = str_of(m, "status");
                    if status != "streaming" && !status.is_empty() {
                        p.settled = true;
                        out.push(Piece::Settled {
                            item: id.clone(),
                            status: status.to_owned(),
                            error: m
                                .get("errorMessage")
                                .and_then(Value::as_str)
                                .map(str::to_owned),
                        });
                    }
                }
                "tool" => {
                    let status = str_of(m, "status");
                    if status != "running" && !status.is_empty() {
                        p.settled = true;
                        out.push(Piece::ToolResult {
                            name: str_of(m, "toolName").to_owned(),
                            text: content_text(m.get("content")),
                            is_error: m.get("isError").and_then(Value::as_bool).unwrap_or(false),
                        });
                    }
                }
                "bashExecution" => {
                    if str_of(m, "status") == "complete" {
                        p.settled = true;
                        out.push(Piece::Bash {
                            command: str_of(m, "command").to_owned(),
                            output: str_of(m, "output").to_owned(),
                            exit_code: m.get("exitCode").and_then(Value::as_i64),
                        });
                    }
                }
                _ => p.settled = true,
            }
        }
        out
    }
}

/// Writes pieces for a person: streamed text inline, tools and results indented.
#[derive(Debug)]
pub(crate) struct Printer {
    /// The (item, kind) currently streaming, to know when a new line is needed.
    streaming: Option<(String, &'static str)>,
    at_line_start: bool,
}

impl Default for Printer {
    fn default() -> Self {
        Self {
            streaming: None,
            at_line_start: true,
        }
    }
}

const MAX_RESULT_LINES: usize = 12;

impl Printer {
    fn ensure_newline(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if !self.at_line_start {
            writeln!(out)?;
            self.at_line_start = true;
        }
        Ok(())
    }

    fn stream(
        &mut self,
        out: &mut impl Write,
        item: &str,
        kind: &'static str,
        delta: &str,
    ) -> std::io::Result<()> {
        let same = self
            .streaming
            .as_ref()
            .is_some_and(|(i, k)| i == item && *k == kind);
        if !same {
            self.ensure_newline(out)?;
            if kind == "thinking" {
                write!(out, "(thinking) ")?;
            }
            self.streaming = Some((item.to_owned(), kind));
        }
        write!(out, "{delta}")?;
        if !delta.is_empty() {
            self.at_line_start = delta.ends_with('\n');
        }
        Ok(())
    }

    /// Writes one piece and flushes.
    ///
    /// # Errors
    /// The writer's.
    pub(crate) fn print(&mut self, out: &mut impl Write, piece: &Piece) -> std::io::Result<()> {
        match piece {
            Piece::User(text) => {
                self.ensure_newline(out)?;
                self.streaming = None;
                writeln!(out, "> {text}")?;
            }
            Piece::Thinking { item, delta } => self.stream(out, item, "thinking", delta)?,
            Piece::Text { item, delta } => self.stream(out, item, "text", delta)?,
            Piece::ToolCall {
                name, arguments, ..
            } => {
                self.ensure_newline(out)?;
                self.streaming = None;
                writeln!(out, "→ {name} {arguments}")?;
            }
            Piece::ToolResult {
                name,
                text,
                is_error,
            } => {
                self.ensure_newline(out)?;
                self.streaming = None;
                let mark = if *is_error { "✗" } else { "✓" };
                writeln!(out, "{mark} {name}")?;
                let lines: Vec<&str> = text.lines().collect();
                for line in lines.iter().take(MAX_RESULT_LINES) {
                    writeln!(out, "  │ {line}")?;
                }
                if lines.len() > MAX_RESULT_LINES {
                    writeln!(out, "  │ … {} more lines", lines.len() - MAX_RESULT_LINES)?;
                }
            }
            Piece::Bash {
                command,
                output,
                exit_code,
            } => {
                self.ensure_newline(out)?;
                self.streaming = None;
                writeln!(out, "$ {command}")?;
                for line in output.lines() {
                    writeln!(out, "  │ {line}")?;
                }
                if let Some(code) = exit_code.filter(|c| *c != 0) {
                    writeln!(out, "  exit code {code}")?;
                }
            }
            Piece::Settled { status, error, .. } => {
                self.ensure_newline(out)?;
                self.streaming = None;
                match (status.as_str(), error) {
                    ("error", Some(e)) => writeln!(out, "[error: {e}]")?,
                    ("error", None) => writeln!(out, "[error]")?,
                    ("aborted", _) => writeln!(out, "[aborted]")?,
                    _ => {}
                }
            }
        }
        out.flush()
    }
}

/// The JSON-lines form of a piece, for `--json`.
pub(crate) fn piece_json(piece: &Piece) -> Value {
    let mut m = Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k, v);
    };
    match piece {
        Piece::User(text) => {
            put("type", "user".into());
            put("text", text.as_str().into());
        }
        Piece::Thinking { item, delta } => {
            put("type", "thinking".into());
            put("item", item.as_str().into());
            put("delta", delta.as_str().into());
        }
        Piece::Text { item, delta } => {
            put("type", "text".into());
            put("item", item.as_str().into());
            put("delta", delta.as_str().into());
        }
        Piece::ToolCall {
            item,
            name,
            arguments,
        } => {
            put("type", "toolCall".into());
            put("item", item.as_str().into());
            put("name", name.as_str().into());
            put("arguments", arguments.clone());
        }
        Piece::ToolResult {
            name,
            text,
            is_error,
        } => {
            put("type", "toolResult".into());
            put("name", name.as_str().into());
            put("text", text.as_str().into());
            put("isError", (*is_error).into());
        }
        Piece::Bash {
            command,
            output,
            exit_code,
        } => {
            put("type", "bash".into());
            put("command", command.as_str().into());
            put("output", output.as_str().into());
            put(
                "exitCode",
                exit_code
                    .and_then(|c| Value::try_from(c).ok())
                    .unwrap_or(Value::Null),
            );
        }
        Piece::Settled {
            item,
            status,
            error,
        } => {
            put("type", "settled".into());
            put("item", item.as_str().into());
            put("status", status.as_str().into());
            if let Some(e) = error {
                put("error", e.as_str().into());
            }
        }
    }
    Value::Map(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    #[test]
    fn streamed_text_is_shown_once_as_deltas() {
        let mut t = TranscriptProgress::default();
        let s1 = state(
            r#"{"phase":"turn","transcript":[{"id":"a","role":"assistant","status":"streaming","content":[{"type":"text","text":"Hel"}]}]}"#,
        );
        let s2 = state(
            r#"{"phase":"turn","transcript":[{"id":"a","role":"assistant","status":"complete","content":[{"type":"text","text":"Hello"}]}]}"#,
        );
        assert_eq!(
            t.advance(&s1),
            vec![Piece::Text {
                item: "a".into(),
                delta: "Hel".into()
            }]
        );
        assert_eq!(
            t.advance(&s2),
            vec![
                Piece::Text {
                    item: "a".into(),
                    delta: "lo".into()
                },
                Piece::Settled {
                    item: "a".into(),
                    status: "complete".into(),
                    error: None
                }
            ]
        );
        assert!(t.advance(&s2).is_empty(), "nothing twice");
    }

    #[test]
    fn existing_items_are_skipped_and_tools_reported_once() {
        let mut t = TranscriptProgress::default();
        let before = state(
            r#"{"transcript":[{"id":"old","role":"user","content":[{"type":"text","text":"x"}]}]}"#,
        );
        t.skip_existing(&before);
        let s = state(
            r#"{"transcript":[
            {"id":"old","role":"user","content":[{"type":"text","text":"x"}]},
            {"id":"b","role":"assistant","status":"complete","stopReason":"toolUse","content":[{"type":"toolCall","id":"c1","name":"bash","arguments":{"command":"ls"}}]},
            {"id":"c","role":"tool","toolName":"bash","status":"complete","isError":false,"content":[{"type":"text","text":"a\nb"}]}]}"#,
        );
        let pieces = t.advance(&s);
        assert_eq!(pieces.len(), 3);
        assert!(matches!(&pieces[0], Piece::ToolCall { name, .. } if name == "bash"));
        assert!(
            matches!(&pieces[2], Piece::ToolResult { text, is_error: false, .. } if text == "a\nb")
        );
        assert!(t.advance(&s).is_empty());
    }

    #[test]
    fn printer_separates_thinking_from_text() {
        let mut out = Vec::new();
        let mut p = Printer {
            at_line_start: true,
            ..Printer::default()
        };
        p.print(
            &mut out,
            &Piece::Thinking {
                item: "a".into(),
                delta: "hmm".into(),
            },
        )
        .unwrap();
        p.print(
            &mut out,
            &Piece::Text {
                item: "a".into(),
                delta: "Hi".into(),
            },
        )
        .unwrap();
        p.print(
            &mut out,
            &Piece::Settled {
                item: "a".into(),
                status: "complete".into(),
                error: None,
            },
        )
        .unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "(thinking) hmm\nHi\n");
    }
}
