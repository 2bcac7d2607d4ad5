//! Transcript items as styled lines: user, assistant text (Markdown), thinking, tool calls,
//! tool results, `!command` runs and errors each look different; long outputs are cut to a
//! preview unless expanded. Also the wrapping of lines to the terminal width.

use baton_protocol::{Map, Value};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

use super::markdown;
use crate::item::{content_text, str_of};

/// Lines of a tool result or command output shown before it is cut (Ctrl-O expands).
pub(crate) const TOOL_PREVIEW_LINES: usize = 8;
/// Lines of thinking shown before it is cut (Ctrl-O expands).
pub(crate) const THINKING_PREVIEW_LINES: usize = 4;

pub(crate) const USER: Style = Style::new().fg(Color::Green).add_modifier(Modifier::BOLD);
pub(crate) const THINKING: Style = Style::new()
    .fg(Color::DarkGray)
    .add_modifier(Modifier::ITALIC);
pub(crate) const TOOL_CALL: Style = Style::new().fg(Color::Magenta);
pub(crate) const TOOL_OK: Style = Style::new().fg(Color::Green);
pub(crate) const ERROR: Style = Style::new().fg(Color::Red);
pub(crate) const DIM: Style = Style::new().fg(Color::DarkGray);
pub(crate) const WARN: Style = Style::new().fg(Color::Yellow);

/// `text`'s lines with `prefix`, cut to `limit` lines unless `expanded`.
fn preview(
    out: &mut Vec<Line<'static>>,
    text: &str,
    prefix: &str,
    style: Style,
    limit: usize,
    expanded: bool,
) {
    let lines: Vec<&str> = text.trim_end_matches('\n').lines().collect();
    let shown = if expanded {
        lines.len()
    } else {
        lines.len().min(limit)
    };
    for l in &lines[..shown] {
        out.push(Line::from(vec![
            Span::styled(prefix.to_owned(), DIM),
            Span::styled((*l).to_owned(), style),
        ]));
    }
    if shown < lines.len() {
        out.push(Line::from(Span::styled(
            format!(
                "{prefix}… {} more lines (Ctrl-O expands)",
                lines.len() - shown
            ),
            DIM,
        )));
    }
}

fn compact_json(v: &Value) -> String {
    let s = v.to_json();
    const MAX: usize = 200;
    if s.chars().count() <= MAX {
        return s;
    }
    let cut: String = s.chars().take(MAX).collect();
    format!("{cut}…")
}

/// The lines of one transcript item (`expanded`: show long outputs whole).
pub(crate) fn item_lines(item: &Value, expanded: bool) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    let Some(m) = item.as_map() else {
        return out;
    };
    match str_of(m, "role") {
        "user" => {
            for (i, l) in content_text(m.get("content")).lines().enumerate() {
                let mark = if i == 0 { "> " } else { "  " };
                out.push(Line::from(Span::styled(format!("{mark}{l}"), USER)));
            }
        }
        "assistant" => assistant(&mut out, m, expanded),
        "tool" => {
            let name = str_of(m, "toolName");
            match str_of(m, "status") {
                "running" => out.push(Line::from(Span::styled(format!("⋯ {name} running"), DIM))),
                _ => {
                    let failed = m.get("isError").and_then(Value::as_bool) == Some(true)
                        || str_of(m, "status") == "error";
                    let (mark, style) = if failed {
                        ("✗", ERROR)
                    } else {
                        ("✓", TOOL_OK)
                    };
                    out.push(Line::from(Span::styled(format!("{mark} {name}"), style)));
                    let body = content_text(m.get("content"));
                    let body_style = if failed { ERROR } else { Style::new() };
                    preview(
                        &mut out,
                        &body,
                        "  │ ",
                        body_style,
                        TOOL_PREVIEW_LINES,
                        expanded,
                    );
                }
            }
        }
        "bashExecution" => {
            let excluded = m.get("excludeFromContext").and_then(Value::as_bool) == Some(true);
            let mut head = vec![Span::styled(
                format!("$ {}", str_of(m, "command")),
                Style::new().fg(Color::Blue).add_modifier(Modifier::BOLD),
            )];
            if excluded {
                head.push(Span::styled("  (not in the model's context)", DIM));
            }
            out.push(Line::from(head));
            preview(
                &mut out,
                str_of(m, "output"),
                "  │ ",
                Style::new(),
                TOOL_PREVIEW_LINES,
                expanded,
            );
            if m.get("cancelled").and_then(Value::as_bool) == Some(true) {
                out.push(Line::from(Span::styled("  cancelled", WARN)));
            } else {
                match m.get("exitCode").and_then(Value::as_i64) {
                    Some(0) => {}
                    Some(code) => {
                        out.push(Line::from(Span::styled(format!("  exit {code}"), ERROR)));
                    }
                    None => out.push(Line::from(Span::styled("  killed", ERROR))),
                }
            }
        }
        "compactionSummary" | "branchSummary" => {
            let what = if str_of(m, "role") == "compactionSummary" {
                "context compacted"
            } else {
                "branch summary"
            };
            out.push(Line::from(Span::styled(format!("── {what} ──"), DIM)));
            preview(
                &mut out,
                str_of(m, "summary"),
                "  ",
                DIM,
                THINKING_PREVIEW_LINES,
                expanded,
            );
        }
        "custom" if m.get("display").and_then(Value::as_bool) != Some(false) => {
            let body = match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                other => content_text(other),
            };
            preview(&mut out, &body, "  ", DIM, TOOL_PREVIEW_LINES, expanded);
        }
        _ => {}
    }
    out
}

fn assistant(out: &mut Vec<Line<'static>>, m: &Map, expanded: bool) {
    let blocks = m
        .get("content")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for block in blocks {
        let Some(b) = block.as_map() else { continue };
        match str_of(b, "type") {
            "thinking" => {
                let t = str_of(b, "thinking");
                if !t.trim().is_empty() {
                    preview(out, t, "  ", THINKING, THINKING_PREVIEW_LINES, expanded);
                }
            }
            "text" => out.extend(markdown::render(str_of(b, "text"))),
            "toolCall" => {
                let args = b.get("arguments").map(compact_json).unwrap_or_default();
                out.push(Line::from(vec![
                    Span::styled(
                        format!("→ {} ", str_of(b, "name")),
                        TOOL_CALL.add_modifier(Modifier::BOLD),
                    ),
                    Span::styled(args, TOOL_CALL),
                ]));
            }
            _ => {}
        }
    }
    match str_of(m, "status") {
        "error" => out.push(Line::from(Span::styled(
            format!("✗ error: {}", str_of(m, "errorMessage")),
            ERROR,
        ))),
        "aborted" => out.push(Line::from(Span::styled("■ aborted", WARN))),
        _ => {}
    }
}

/// Wraps `line` to `width` columns, at spaces where it can (a word longer than the width
/// is cut). Styles are kept per character.
pub(crate) fn wrap(line: &Line<'static>, width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width.max(1));
    let chars: Vec<(char, Style)> = line
        .spans
        .iter()
        .flat_map(|s| {
            let style = line.style.patch(s.style);
            s.content.chars().map(move |c| (c, style))
        })
        .map(|(c, s)| (if c == '\t' { ' ' } else { c }, s))
        .collect();
    if chars.is_empty() {
        return vec![Line::default()];
    }
    let mut rows: Vec<Vec<(char, Style)>> = Vec::new();
    let mut row: Vec<(char, Style)> = Vec::new();
    let mut row_width = 0;
    let mut last_space: Option<usize> = None;
    for (c, style) in chars {
        let w = c.width().unwrap_or(0);
        if row_width + w > width && !row.is_empty() {
            match last_space.filter(|&i| i > 0) {
                Some(i) => {
                    let rest = row.split_off(i + 1);
                    row.pop();
                    rows.push(std::mem::replace(&mut row, rest));
                }
                None => rows.push(std::mem::take(&mut row)),
            }
            row_width = row.iter().map(|(c, _)| c.width().unwrap_or(0)).sum();
            last_space = row.iter().rposition(|(c, _)| *c == ' ');
        }
        if c == ' ' {
            last_space = Some(row.len());
        }
        row.push((c, style));
        row_width += w;
    }
    rows.push(row);
    rows.into_iter().map(spans_of).collect()
}

fn spans_of(row: Vec<(char, Style)>) -> Line<'static> {
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut text = String::new();
    let mut style: Option<Style> = None;
    for (c, s) in row {
        if style.is_some_and(|st| st != s) {
            spans.push(Span::styled(
                std::mem::take(&mut text),
                style.unwrap_or_default(),
            ));
        }
        style = Some(s);
        text.push(c);
    }
    if !text.is_empty() {
        spans.push(Span::styled(text, style.unwrap_or_default()));
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    fn item(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    #[test]
    fn long_tool_output_is_cut_to_a_preview_unless_expanded() {
        let output: String = (1..=20).map(|i| format!("row {i}\n")).collect();
        let v = item(&format!(
            r#"{{"role":"tool","status":"complete","toolName":"bash","content":[{{"type":"text","text":{}}}]}}"#,
            Value::from(output.as_str()).to_json()
        ));
        let short = plain(&item_lines(&v, false));
        assert_eq!(short[0], "✓ bash");
        assert_eq!(short.len(), 1 + TOOL_PREVIEW_LINES + 1);
        assert_eq!(
            short.last().unwrap(),
            "  │ … 12 more lines (Ctrl-O expands)"
        );
        let long = plain(&item_lines(&v, true));
        assert_eq!(long.len(), 21);
        assert_eq!(long[20], "  │ row 20");
    }

    #[test]
    fn a_failed_turn_and_a_failed_tool_are_red() {
        let v = item(r#"{"role":"assistant","status":"error","errorMessage":"boom","content":[]}"#);
        let lines = item_lines(&v, false);
        assert_eq!(plain(&lines), ["✗ error: boom"]);
        assert_eq!(lines[0].spans[0].style, ERROR);
        let t = item(
            r#"{"role":"tool","status":"error","toolName":"read","isError":true,"content":[{"type":"text","text":"no such file"}]}"#,
        );
        assert_eq!(
            plain(&item_lines(&t, false)),
            ["✗ read", "  │ no such file"]
        );
    }

    #[test]
    fn a_bang_bang_command_says_it_stays_out_of_the_context() {
        let v = item(
            r#"{"role":"bashExecution","command":"ls","output":"a\n","exitCode":2,"excludeFromContext":true,"status":"complete"}"#,
        );
        assert_eq!(
            plain(&item_lines(&v, false)),
            ["$ ls  (not in the model's context)", "  │ a", "  exit 2"]
        );
    }

    #[test]
    fn wrapping_breaks_at_spaces_and_cuts_long_words() {
        let l = Line::from("the quick brown fox");
        assert_eq!(plain(&wrap(&l, 10)), ["the quick", "brown fox"]);
        let l = Line::from("abcdefghij");
        assert_eq!(plain(&wrap(&l, 4)), ["abcd", "efgh", "ij"]);
        assert_eq!(plain(&wrap(&Line::default(), 4)), [""]);
        // Wide characters count two columns.
        assert_eq!(plain(&wrap(&Line::from("日本語"), 4)), ["日本", "語"]);
    }
}
