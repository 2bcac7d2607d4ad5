//! Prints successive `pi.session` states as a live transcript (for `demo`).
//!
//! It works from whole states, not from individual ops, so it stays exact whatever the
//! updates looked like: it remembers how much of each block it printed and prints the rest.

use std::collections::HashMap;
use std::io::{self, Write};

use baton_protocol::{Map, Value};

#[derive(Default)]
struct Progress {
    /// Characters printed per content block.
    printed: Vec<usize>,
    /// Tool calls announced, per content block.
    announced: Vec<bool>,
    done: bool,
}

/// Remembers what was printed.
pub(crate) struct Renderer {
    items: HashMap<String, Progress>,
    /// The (item, block) whose text is being streamed, to know when a new line is needed.
    streaming: Option<(String, usize)>,
    at_line_start: bool,
}

impl Default for Renderer {
    fn default() -> Self {
        Self {
            items: HashMap::new(),
            streaming: None,
            at_line_start: true,
        }
    }
}

fn str_of<'a>(m: &'a Map, k: &str) -> &'a str {
    m.get(k).and_then(Value::as_str).unwrap_or("")
}

fn text_of(content: Option<&Value>) -> String {
    content
        .and_then(Value::as_array)
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(Value::as_map)
                .filter(|b| str_of(b, "type") == "text")
                .map(|b| str_of(b, "text"))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

impl Renderer {
    fn line(&mut self, out: &mut impl Write, text: &str) -> io::Result<()> {
        if !self.at_line_start {
            writeln!(out)?;
        }
        writeln!(out, "{text}")?;
        self.at_line_start = true;
        self.streaming = None;
        Ok(())
    }

    fn stream(
        &mut self,
        out: &mut impl Write,
        key: (String, usize),
        prefix: &str,
        delta: &str,
    ) -> io::Result<()> {
        if self.streaming.as_ref() != Some(&key) {
            if !self.at_line_start {
                writeln!(out)?;
            }
            write!(out, "{prefix}")?;
            self.streaming = Some(key);
        }
        write!(out, "{delta}")?;
        self.at_line_start = delta.ends_with('\n');
        Ok(())
    }

    /// Prints what is new in `state`.
    pub(crate) fn render(&mut self, state: &Value, out: &mut impl Write) -> io::Result<()> {
        let items = state
            .as_map()
            .and_then(|m| m.get("transcript"))
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        for item in items {
            let Some(m) = item.as_map() else { continue };
            let id = str_of(m, "id").to_owned();
            let mut p = self.items.remove(&id).unwrap_or_default();
            if !p.done {
                self.item(m, &id, &mut p, out)?;
            }
            self.items.insert(id, p);
        }
        out.flush()
    }

    fn item(
        &mut self,
        m: &Map,
        id: &str,
        p: &mut Progress,
        out: &mut impl Write,
    ) -> io::Result<()> {
        match str_of(m, "role") {
            "user" => {
                self.line(out, &format!("> {}", text_of(m.get("content"))))?;
                p.done = true;
            }
            "assistant" => {
                let blocks = m
                    .get("content")
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice);
                p.printed.resize(blocks.len(), 0);
                p.announced.resize(blocks.len(), false);
                for (i, block) in blocks.iter().enumerate() {
                    let Some(b) = block.as_map() else { continue };
                    match str_of(b, "type") {
                        kind @ ("text" | "thinking") => {
                            let text = str_of(b, kind);
                            let chars = text.chars().count();
                            if chars > p.printed[i] {
                                let delta: String = text.chars().skip(p.printed[i]).collect();
                                p.printed[i] = chars;
                                let prefix = if kind == "thinking" {
                                    "(thinking) "
                                } else {
                                    ""
                                };
                                self.stream(out, (id.to_owned(), i), prefix, &delta)?;
                            }
                        }
                        "toolCall" if !p.announced[i] => {
                            p.announced[i] = true;
                            let args = b.get("arguments").map(Value::to_json).unwrap_or_default();
                            self.line(out, &format!("→ {} {args}", str_of(b, "name")))?;
                        }
                        _ => {}
                    }
                }
                match str_of(m, "status") {
                    "streaming" | "" => {}
                    status => {
                        p.done = true;
                        match status {
                            "error" => {
                                self.line(out, &format!("[error: {}]", str_of(m, "errorMessage")))?
                            }
                            "aborted" => self.line(out, "[aborted]")?,
                            _ if !self.at_line_start => {
                                writeln!(out)?;
                                self.at_line_start = true;
                                self.streaming = None;
                            }
                            _ => {}
                        }
                    }
                }
            }
            "tool" => {
                let status = str_of(m, "status");
                if status != "running" && !status.is_empty() {
                    p.done = true;
                    let mark = if status == "error" { "✗" } else { "✓" };
                    self.line(out, &format!("{mark} {}", str_of(m, "toolName")))?;
                    for l in text_of(m.get("content")).lines() {
                        self.line(out, &format!("  │ {l}"))?;
                    }
                }
            }
            "bashExecution" => {
                p.done = true;
                self.line(out, &format!("$ {}", str_of(m, "command")))?;
                for l in str_of(m, "output").lines() {
                    self.line(out, &format!("  │ {l}"))?;
                }
            }
            _ => p.done = true,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    #[test]
    fn streamed_text_prints_once_and_results_are_indented() {
        let mut r = Renderer::default();
        let mut out = Vec::new();
        r.render(&v(r#"{"transcript":[{"id":"u","role":"user","content":[{"type":"text","text":"hi"}]},{"id":"a","role":"assistant","status":"streaming","content":[{"type":"text","text":"Hel"}]}]}"#), &mut out).unwrap();
        r.render(&v(r#"{"transcript":[{"id":"u","role":"user","content":[{"type":"text","text":"hi"}]},{"id":"a","role":"assistant","status":"complete","content":[{"type":"text","text":"Hello"},{"type":"toolCall","id":"c","name":"bash","arguments":{"command":"ls"}}]},{"id":"t","role":"tool","status":"complete","toolName":"bash","content":[{"type":"text","text":"a\nb"}]}]}"#), &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "> hi\nHello\n→ bash {\"command\":\"ls\"}\n✓ bash\n  │ a\n  │ b\n"
        );
    }
}
