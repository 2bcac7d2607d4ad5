//! Plain-text tables (`sessions`, `models`): a header, columns two spaces apart, and long
//! values cut with `…` so every line fits the width.

use std::io::IsTerminal as _;

/// Width used when stdout is not a terminal (pipes, files, tests).
pub(crate) const DEFAULT_WIDTH: usize = 100;
/// A column is never cut narrower than this (or its header, if shorter).
pub(crate) const MIN_COLUMN: usize = 6;
/// Space between columns.
const GAP: &str = "  ";

/// Which end of a too-long value is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Keep the start (`long-name…`).
    Start,
    /// Keep the end (`…/deep/dir`), for paths.
    End,
}

/// One column: header, whether it may be cut, and which end is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Column {
    /// The header text.
    header: &'static str,
    /// Whether long values may be cut to fit (fixed-width columns are not).
    flexible: bool,
    /// What a cut keeps.
    keep: Keep,
}

impl Column {
    /// A column shown whole (ids, short labels).
    pub(crate) const fn fixed(header: &'static str) -> Self {
        Self {
            header,
            flexible: false,
            keep: Keep::Start,
        }
    }

    /// A column cut to fit, keeping the start.
    pub(crate) const fn flexible(header: &'static str) -> Self {
        Self {
            header,
            flexible: true,
            keep: Keep::Start,
        }
    }

    /// A column of paths, cut to fit keeping the end.
    pub(crate) const fn path(header: &'static str) -> Self {
        Self {
            header,
            flexible: true,
            keep: Keep::End,
        }
    }
}

/// The width to fit: the terminal's when stdout is one, else [`DEFAULT_WIDTH`].
pub(crate) fn output_width() -> usize {
    let stdout = std::io::stdout();
    if !stdout.is_terminal() {
        return DEFAULT_WIDTH;
    }
    terminal_size::terminal_size_of(&stdout).map_or(DEFAULT_WIDTH, |(w, _)| usize::from(w.0))
}

fn len(s: &str) -> usize {
    s.chars().count()
}

/// `s` cut to `width` characters with `…` on the cut side.
fn truncate(s: &str, width: usize, keep: Keep) -> String {
    let n = len(s);
    if n <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    match keep {
        Keep::Start => s.chars().take(width - 1).chain(['…']).collect(),
        Keep::End => std::iter::once('…')
            .chain(s.chars().skip(n - (width - 1)))
            .collect(),
    }
}

/// Renders `rows` under `columns`' headers within `width` characters per line (when the
/// fixed columns alone are wider, lines are as narrow as the minimums allow).
pub(crate) fn render(columns: &[Column], rows: &[Vec<String>], width: usize) -> String {
    let mut widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|v| len(v))
                .chain([len(c.header)])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let gaps = GAP.len() * columns.len().saturating_sub(1);
    // Shrink the widest flexible column, one character at a time, until the line fits.
    while widths.iter().sum::<usize>() + gaps > width {
        let widest = columns
            .iter()
            .enumerate()
            .filter(|(i, c)| c.flexible && widths[*i] > MIN_COLUMN.max(len(c.header)))
            .max_by_key(|(i, _)| widths[*i])
            .map(|(i, _)| i);
        let Some(i) = widest else { break };
        widths[i] -= 1;
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, (cell, c)) in cells.zip(columns).enumerate() {
            let cell = truncate(cell, widths[i], c.keep);
            if i + 1 == columns.len() {
                text.push_str(&cell);
            } else {
                text.push_str(&cell);
                text.extend(std::iter::repeat_n(' ', widths[i] - len(&cell)));
                text.push_str(GAP);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut columns.iter().map(|c| c.header));
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: [Column; 3] = [
        Column::fixed("ID"),
        Column::flexible("NAME"),
        Column::path("CWD"),
    ];

    fn row(a: &str, b: &str, c: &str) -> Vec<String> {
        vec![a.into(), b.into(), c.into()]
    }

    #[test]
    fn columns_line_up_under_a_header() {
        let t = render(&COLUMNS, &[row("0a1b2c3d", "demo", "/w")], 80);
        assert_eq!(t, "ID        NAME  CWD\n0a1b2c3d  demo  /w\n");
    }

    #[test]
    fn long_values_are_cut_with_an_ellipsis_to_fit_the_width() {
        let name = "a-really-long-session-name-that-goes-on";
        let cwd = "/home/someone/projects/deeply/nested/checkout";
        let t = render(&COLUMNS, &[row("0a1b2c3d", name, cwd)], 40);
        for l in t.lines() {
            assert!(l.chars().count() <= 40, "{l:?} is wider than 40");
        }
        let body = t.lines().nth(1).unwrap();
        assert!(body.starts_with("0a1b2c3d  a-really"), "{body}");
        assert!(body.contains('…'), "{body}");
        assert!(body.ends_with("d/checkout"), "paths keep their end: {body}");
    }

    #[test]
    fn fixed_columns_are_never_cut() {
        let t = render(&COLUMNS, &[row("0a1b2c3d", "n", "c")], 5);
        assert!(t.lines().nth(1).unwrap().starts_with("0a1b2c3d"), "{t}");
    }

    #[test]
    fn truncation_keeps_the_requested_end() {
        assert_eq!(truncate("abcdef", 4, Keep::Start), "abc…");
        assert_eq!(truncate("abcdef", 4, Keep::End), "…def");
        assert_eq!(truncate("abc", 4, Keep::Start), "abc");
        assert_eq!(truncate("abc", 0, Keep::Start), "");
    }
}
