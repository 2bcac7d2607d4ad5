//! `read`: read a text file, optionally a window of lines.
//!
//! The path is confined to the workspace (see [`FileAccess`]); only regular files are read
//! (a FIFO or a device is refused without blocking), and at most [`MAX_READ_BYTES`] of the
//! file, starting at the first line asked for, are held in memory. Lines before `offset` are
//! skipped in chunks, and lines after the window are counted for at most [`MAX_COUNT_BYTES`].

use std::path::{Path, PathBuf};

use baton_protocol::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

use super::path::FileAccess;
use super::{
    ObjectSchema, Schema, Tool, ToolContext, ToolError, ToolOutput, opt_u64_arg, path_arg_touched,
    str_arg,
};
use crate::BoxFuture;

/// Most lines one call returns.
pub(crate) const DEFAULT_MAX_LINES: usize = 2000;
/// Most bytes one call returns (a single longer line is shown up to [`MAX_READ_BYTES`]).
pub(crate) const DEFAULT_MAX_BYTES: usize = 50 * 1024;
/// Most bytes of the file one call holds in memory, from the first line shown.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// Most bytes past the window scanned to count the file's lines; beyond it the total is given
/// as a lower bound.
pub const MAX_COUNT_BYTES: u64 = 16 * 1024 * 1024;
/// Bytes examined for a NUL to call a file binary.
const BINARY_PROBE_BYTES: usize = 8192;
/// Read buffer while skipping and counting.
const CHUNK_BYTES: usize = 64 * 1024;

/// The `read` tool.
#[derive(Debug)]
pub struct ReadTool {
    schema: ObjectSchema,
    access: FileAccess,
}

impl ReadTool {
    /// The tool with its schema, confined by `access` (shared with the session's other file
    /// tools so they lock the same files).
    pub fn new(access: FileAccess) -> Self {
        Self {
            access,
            schema: ObjectSchema::new()
                .required(
                    "path",
                    Schema::String,
                    "Path of the file, relative to the workspace (the session's working directory)",
                )
                .optional(
                    "offset",
                    Schema::integer_min(1),
                    "First line to read (1-based)",
                )
                .optional(
                    "limit",
                    Schema::integer_min(1),
                    "Maximum number of lines to read",
                ),
        }
    }
}

impl Default for ReadTool {
    fn default() -> Self {
        Self::new(FileAccess::default())
    }
}

impl Tool for ReadTool {
    fn name(&self) -> &str {
        "read"
    }

    fn description(&self) -> &str {
        "Read a text file. Output is limited to 2000 lines or 50 KB; use offset and limit to page through larger files."
    }

    fn parameters(&self) -> &ObjectSchema {
        &self.schema
    }

    fn touched_paths<'a>(
        &'a self,
        arguments: &'a Value,
        cwd: &'a Path,
    ) -> BoxFuture<'a, Option<Vec<PathBuf>>> {
        path_arg_touched(&self.access, arguments, cwd)
    }

    fn execute<'a>(
        &'a self,
        arguments: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let path = str_arg(arguments, "path")?;
            let offset = opt_u64_arg(arguments, "offset")
                .and_then(|o| usize::try_from(o).ok())
                .unwrap_or(1)
                .max(1);
            let limit = opt_u64_arg(arguments, "limit")
                .and_then(|l| usize::try_from(l).ok())
                .unwrap_or(DEFAULT_MAX_LINES)
                .min(DEFAULT_MAX_LINES);
            let key = self.access.order_key(&ctx.cwd, path).await;
            let _lock = self.access.locks().lock(&key).await;
            let opened = self.access.open_existing(&ctx.cwd, path).await?;
            let window = tokio::select! {
                w = Window::read(opened.file, offset) => w.map_err(|e| ToolError::io(&ctx.resolve(path), &e))?,
                () = ctx.cancel.cancelled() => return Err(ToolError::new("read aborted")),
            };
            if window.binary {
                return Err(ToolError::new(format!(
                    "{path} appears to be a binary file"
                )));
            }
            window.render(path, offset, limit).map(ToolOutput::text)
        })
    }
}

/// The part of a file one call looks at.
#[derive(Debug)]
struct Window {
    /// A NUL in the file's first bytes.
    binary: bool,
    /// Lines before `offset` (fewer than `offset - 1` when the file ended first).
    before: usize,
    /// At most [`MAX_READ_BYTES`] from the start of line `offset`.
    bytes: Vec<u8>,
    /// The file goes on past `bytes`.
    cut: bool,
    /// Lines from `offset` to the end (a lower bound unless `counted`).
    after: usize,
    /// `after` is exact: the scan reached the end of the file.
    counted: bool,
}

impl Window {
    async fn read<R: AsyncRead + Unpin>(file: R, offset: usize) -> std::io::Result<Self> {
        let mut reader = BufReader::with_capacity(CHUNK_BYTES, file);
        let head = reader.fill_buf().await?;
        let binary = head.iter().take(BINARY_PROBE_BYTES).any(|b| *b == 0);
        let mut window = Self {
            binary,
            before: 0,
            bytes: Vec::new(),
            cut: false,
            after: 0,
            counted: true,
        };
        if binary {
            return Ok(window);
        }
        // Skip `offset - 1` lines without keeping them.
        let mut partial = false;
        while window.before < offset - 1 {
            let buf = reader.fill_buf().await?;
            if buf.is_empty() {
                window.before += usize::from(partial);
                return Ok(window);
            }
            let mut used = buf.len();
            for (i, b) in buf.iter().enumerate() {
                if *b == b'\n' {
                    window.before += 1;
                    if window.before == offset - 1 {
                        used = i + 1;
                        break;
                    }
                }
            }
            partial = buf[used - 1] != b'\n';
            reader.consume(used);
        }
        let cap = u64::try_from(MAX_READ_BYTES).unwrap_or(u64::MAX);
        (&mut reader)
            .take(cap + 1)
            .read_to_end(&mut window.bytes)
            .await?;
        window.cut = window.bytes.len() > MAX_READ_BYTES;
        window.bytes.truncate(MAX_READ_BYTES);
        let mut newlines = window.bytes.iter().filter(|b| **b == b'\n').count();
        let mut last = window.bytes.last().copied();
        if window.cut {
            let mut scanned = 0u64;
            loop {
                let buf = reader.fill_buf().await?;
                if buf.is_empty() {
                    break;
                }
                if scanned >= MAX_COUNT_BYTES {
                    window.counted = false;
                    break;
                }
                newlines += buf.iter().filter(|b| **b == b'\n').count();
                last = buf.last().copied();
                let n = buf.len();
                scanned += u64::try_from(n).unwrap_or(u64::MAX);
                reader.consume(n);
            }
        }
        window.after = newlines + usize::from(last.is_some_and(|b| b != b'\n'));
        Ok(window)
    }

    /// The text the model sees, with the continuation marker.
    fn render(&self, path: &str, offset: usize, limit: usize) -> Result<String, ToolError> {
        let total = self.before + self.after;
        if offset > total.max(1) {
            return Err(ToolError::new(format!(
                "offset {offset} is beyond the end of {path} ({total} lines)"
            )));
        }
        // A cut window ends inside a line: drop it, unless it is the only one.
        let (shown_bytes, line_cut) = if self.cut {
            match self.bytes.iter().rposition(|b| *b == b'\n') {
                Some(i) => (&self.bytes[..=i], false),
                None => (&self.bytes[..], true),
            }
        } else {
            (&self.bytes[..], false)
        };
        let text = String::from_utf8_lossy(shown_bytes);
        let mut out = String::new();
        let mut shown = 0;
        for line in text.lines().take(limit) {
            if out.len() + line.len() + 1 > DEFAULT_MAX_BYTES && shown > 0 {
                break;
            }
            out.push_str(line);
            out.push('\n');
            shown += 1;
        }
        let last = offset - 1 + shown;
        let of = if self.counted {
            total.to_string()
        } else {
            format!("more than {total}")
        };
        if line_cut {
            out.push_str(&format!(
                "\n[Line {offset} is longer than {MAX_READ_BYTES} bytes and was cut there. Showing lines {offset}-{last} of {of}. Use offset={} to continue.]",
                last + 1
            ));
        } else if last < total || !self.counted {
            out.push_str(&format!(
                "\n[Showing lines {offset}-{last} of {of}. Use offset={} to continue.]",
                last + 1
            ));
        } else if out.ends_with('\n') && !text.ends_with('\n') {
            out.pop();
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn render(bytes: &[u8], offset: usize, limit: usize) -> Result<String, ToolError> {
        Window::read(bytes, offset)
            .await
            .unwrap()
            .render("f", offset, limit)
    }

    #[tokio::test]
    async fn a_small_file_reads_whole_and_keeps_its_last_line_ending() {
        assert_eq!(render(b"a\nb\n", 1, 10).await.unwrap(), "a\nb\n");
        assert_eq!(render(b"a\nb", 1, 10).await.unwrap(), "a\nb");
        assert_eq!(render(b"", 1, 10).await.unwrap(), "");
    }

    #[tokio::test]
    async fn offset_and_limit_page_through_lines() {
        let text = b"1\n2\n3\n4\n5\n";
        assert_eq!(
            render(text, 2, 2).await.unwrap(),
            "2\n3\n\n[Showing lines 2-3 of 5. Use offset=4 to continue.]"
        );
        assert_eq!(render(text, 5, 10).await.unwrap(), "5\n");
        assert_eq!(
            render(text, 6, 10).await.unwrap_err().message,
            "offset 6 is beyond the end of f (5 lines)"
        );
        assert_eq!(
            render(b"a\nb", 3, 10).await.unwrap_err().message,
            "offset 3 is beyond the end of f (2 lines)"
        );
    }

    #[tokio::test]
    async fn a_big_file_is_read_only_up_to_the_window_and_counted() {
        let line = "x".repeat(99);
        let text: String = (0..100_000).map(|_| format!("{line}\n")).collect();
        let w = Window::read(text.as_bytes(), 9_000).await.unwrap();
        assert!(w.cut);
        assert_eq!(w.bytes.len(), MAX_READ_BYTES);
        assert_eq!((w.before, w.before + w.after), (8_999, 100_000));
        let out = w.render("f", 9_000, 3).unwrap();
        assert!(
            out.ends_with("[Showing lines 9000-9002 of 100000. Use offset=9003 to continue.]"),
            "{out}"
        );
    }

    #[tokio::test]
    async fn one_line_longer_than_the_window_is_cut_with_a_marker() {
        let text = "y".repeat(MAX_READ_BYTES * 2);
        let out = render(text.as_bytes(), 1, 10).await.unwrap();
        assert!(
            out.starts_with(&"y".repeat(MAX_READ_BYTES)),
            "not the first bytes"
        );
        assert!(
            out.ends_with(&format!(
                "[Line 1 is longer than {MAX_READ_BYTES} bytes and was cut there. Showing lines 1-1 of 1. Use offset=2 to continue.]"
            )),
            "{}",
            &out[out.len() - 200..]
        );
    }

    #[tokio::test]
    async fn a_nul_in_the_head_means_binary() {
        let w = Window::read(&b"ab\0cd"[..], 1).await.unwrap();
        assert!(w.binary);
    }
}
