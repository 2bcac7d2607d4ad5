//! Assistant replies as Markdown: headings, emphasis, inline code, lists and quotes styled;
//! code blocks kept verbatim (never re-wrapped or re-flowed), each line indented.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

/// Style of code (inline and blocks).
pub(crate) const CODE: Style = Style::new().fg(Color::Yellow);

#[derive(Debug)]
struct Builder {
    lines: Vec<Line<'static>>,
    current: Vec<Span<'static>>,
    styles: Vec<Style>,
    /// Prefix for each new line (quotes, list indentation).
    prefix: Vec<String>,
    /// Per open list: next number (`None`: bullets).
    lists: Vec<Option<u64>>,
    in_code: bool,
}

impl Builder {
    fn style(&self) -> Style {
        self.styles.last().copied().unwrap_or_default()
    }

    fn push(&mut self, text: &str, style: Style) {
        if self.current.is_empty() && !self.prefix.is_empty() {
            let p: String = self.prefix.concat();
            self.current
                .push(Span::styled(p, Style::new().fg(Color::DarkGray)));
        }
        self.current.push(Span::styled(text.to_owned(), style));
    }

    fn flush(&mut self) {
        if !self.current.is_empty() {
            self.lines
                .push(Line::from(std::mem::take(&mut self.current)));
        }
    }

    fn blank(&mut self) {
        self.flush();
        if self.lines.last().is_some_and(|l| !l.spans.is_empty()) {
            self.lines.push(Line::default());
        }
    }
}

/// Renders `text` as lines.
pub(crate) fn render(text: &str) -> Vec<Line<'static>> {
    let mut b = Builder {
        lines: Vec::new(),
        current: Vec::new(),
        styles: Vec::new(),
        prefix: Vec::new(),
        lists: Vec::new(),
        in_code: false,
    };
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(text, options) {
        match event {
            Event::Start(tag) => match tag {
                Tag::Heading { level, .. } => {
                    b.blank();
                    let hashes = match level {
                        HeadingLevel::H1 => "# ",
                        HeadingLevel::H2 => "## ",
                        _ => "### ",
                    };
                    let style = Style::new().add_modifier(Modifier::BOLD).fg(Color::Cyan);
                    b.push(hashes, style);
                    b.styles.push(style);
                }
                Tag::Paragraph if b.lists.is_empty() => b.blank(),
                Tag::BlockQuote(_) => {
                    b.blank();
                    b.prefix.push("│ ".to_owned());
                }
                Tag::CodeBlock(kind) => {
                    b.blank();
                    b.in_code = true;
                    if let CodeBlockKind::Fenced(lang) = kind
                        && !lang.is_empty()
                    {
                        b.push(&format!("  ```{lang}"), Style::new().fg(Color::DarkGray));
                        b.flush();
                    }
                }
                Tag::List(start) => {
                    if b.lists.is_empty() {
                        b.blank();
                    } else {
                        b.flush();
                    }
                    b.lists.push(start);
                }
                Tag::Item => {
                    b.flush();
                    let depth = b.lists.len().saturating_sub(1);
                    let marker = match b.lists.last_mut() {
                        Some(Some(n)) => {
                            let m = format!("{n}. ");
                            *n += 1;
                            m
                        }
                        _ => "• ".to_owned(),
                    };
                    let indent = "  ".repeat(depth);
                    b.push(&format!("{indent}{marker}"), Style::new().fg(Color::Cyan));
                }
                Tag::Emphasis => {
                    let s = b.style().add_modifier(Modifier::ITALIC);
                    b.styles.push(s);
                }
                Tag::Strong => {
                    let s = b.style().add_modifier(Modifier::BOLD);
                    b.styles.push(s);
                }
                Tag::Strikethrough => {
                    let s = b.style().add_modifier(Modifier::CROSSED_OUT);
                    b.styles.push(s);
                }
                Tag::Link { .. } => {
                    let s = b.style().add_modifier(Modifier::UNDERLINED);
                    b.styles.push(s);
                }
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Heading(_) => {
                    b.styles.pop();
                    b.flush();
                }
                TagEnd::Paragraph => b.flush(),
                TagEnd::BlockQuote(_) => {
                    b.flush();
                    b.prefix.pop();
                }
                TagEnd::CodeBlock => {
                    b.flush();
                    b.in_code = false;
                }
                TagEnd::List(_) => {
                    b.flush();
                    b.lists.pop();
                }
                TagEnd::Item => b.flush(),
                TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough | TagEnd::Link => {
                    b.styles.pop();
                }
                _ => {}
            },
            Event::Text(t) => {
                if b.in_code {
                    // Verbatim: one output line per source line.
                    for line in t.split_inclusive('\n') {
                        b.push(&format!("  {}", line.trim_end_matches('\n')), CODE);
                        if line.ends_with('\n') {
                            b.flush();
                        }
                    }
                } else {
                    let style = b.style();
                    b.push(&t, style);
                }
            }
            Event::Code(t) => b.push(&t, CODE),
            Event::SoftBreak => {
                let style = b.style();
                b.push(" ", style);
            }
            Event::HardBreak => b.flush(),
            Event::Rule => {
                b.blank();
                b.push("────────", Style::new().fg(Color::DarkGray));
                b.flush();
            }
            Event::TaskListMarker(done) => {
                let style = b.style();
                b.push(if done { "[x] " } else { "[ ] " }, style);
            }
            Event::Html(t) | Event::InlineHtml(t) => {
                let style = b.style();
                b.push(&t, style);
            }
            _ => {}
        }
    }
    b.flush();
    while b.lines.first().is_some_and(|l| l.spans.is_empty()) {
        b.lines.remove(0);
    }
    b.lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(lines: &[Line<'_>]) -> Vec<String> {
        lines.iter().map(|l| l.to_string()).collect()
    }

    #[test]
    fn code_blocks_are_kept_verbatim_line_by_line() {
        let lines = render("Here:\n```\nfn  main() {\n    x  *  y\n}\n```\ndone");
        assert_eq!(
            plain(&lines),
            [
                "Here:",
                "",
                "  fn  main() {",
                "      x  *  y",
                "  }",
                "",
                "done"
            ]
        );
        assert_eq!(lines[2].spans[0].style, CODE);
    }

    #[test]
    fn emphasis_and_inline_code_are_styled_not_printed_as_markup() {
        let lines = render("a **bold** and *it* and `code`");
        assert_eq!(plain(&lines), ["a bold and it and code"]);
        let bold = lines[0].spans.iter().find(|s| s.content == "bold").unwrap();
        assert!(bold.style.add_modifier.contains(Modifier::BOLD));
        let code = lines[0].spans.iter().find(|s| s.content == "code").unwrap();
        assert_eq!(code.style, CODE);
    }

    #[test]
    fn lists_and_headings_get_markers() {
        let lines = render("# Title\n\n- one\n- two\n\n1. first\n2. second");
        assert_eq!(
            plain(&lines),
            ["# Title", "", "• one", "• two", "", "1. first", "2. second"]
        );
    }

    #[test]
    fn an_unclosed_fence_while_streaming_still_renders() {
        let lines = render("start\n```rust\nlet x = 1;");
        assert_eq!(plain(&lines), ["start", "", "  ```rust", "  let x = 1;"]);
    }
}
