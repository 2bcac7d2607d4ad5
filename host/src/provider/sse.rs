//! Incremental, sans-IO server-sent-events parsing (what model APIs stream).
//!
//! Lines end in `\n` or `\r\n`; `data:` lines accumulate (joined by `\n`), `event:` names the
//! event, `:` lines are comments, and a blank line dispatches. Lines and events are bounded.
//!
//! Kept in-tree rather than `eventsource-stream`: that crate works on a `futures` stream (this
//! one is fed byte slices by the pull-based provider stream), buffers without a bound, and
//! pulls in `nom`; this parser is ~100 lines, bounded, and tested at every split point.

/// Longest line accepted.
pub(crate) const MAX_LINE: usize = 4 * 1024 * 1024;
/// Largest event (all its `data:` lines) accepted.
pub(crate) const MAX_EVENT: usize = 8 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// `event:` field, if any.
    pub event: Option<String>,
    /// `data:` lines joined by `\n`.
    pub data: String,
}

/// A line exceeded [`MAX_LINE`] or an event [`MAX_EVENT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("server-sent event larger than {MAX_LINE} bytes per line or {MAX_EVENT} per event")]
pub(crate) struct LineTooLong;

/// The parser.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds bytes; returns the events they completed.
    pub(crate) fn push(&mut self, mut input: &[u8]) -> Result<Vec<SseEvent>, LineTooLong> {
        let mut out = Vec::new();
        while let Some(nl) = input.iter().position(|b| *b == b'\n') {
            self.line.extend_from_slice(&input[..nl]);
            input = &input[nl + 1..];
            let line = std::mem::take(&mut self.line);
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            self.line_done(&String::from_utf8_lossy(line), &mut out);
            if self.data.as_ref().is_some_and(|d| d.len() > MAX_EVENT) {
                return Err(LineTooLong);
            }
        }
        self.line.extend_from_slice(input);
        if self.line.len() > MAX_LINE {
            return Err(LineTooLong);
        }
        Ok(out)
    }

    /// Dispatches a pending event at end of stream (some servers omit the final blank line).
    pub(crate) fn finish(&mut self) -> Option<SseEvent> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            let mut sink = Vec::new();
            self.line_done(&String::from_utf8_lossy(&line), &mut sink);
        }
        self.data.take().map(|data| SseEvent {
            event: self.event.take(),
            data,
        })
    }

    fn line_done(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(SseEvent {
                    event: self.event.take(),
                    data,
                });
            }
            self.event = None;
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_parse_identically_at_every_split_point() {
        let wire = b": keep-alive\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: one\ndata:two\n\ndata: [DONE]\n\n";
        for split in 0..=wire.len() {
            let mut p = SseParser::default();
            let mut evs = p.push(&wire[..split]).unwrap();
            evs.extend(p.push(&wire[split..]).unwrap());
            assert_eq!(
                evs,
                vec![
                    SseEvent {
                        event: None,
                        data: "{\"a\":1}".into()
                    },
                    SseEvent {
                        event: Some("x".into()),
                        data: "one\ntwo".into()
                    },
                    SseEvent {
                        event: None,
                        data: "[DONE]".into()
                    },
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn oversized_lines_and_events_are_refused() {
        let mut p = SseParser::default();
        assert_eq!(p.push(&vec![b'x'; MAX_LINE + 1]), Err(LineTooLong));
        let mut p = SseParser::default();
        let line = format!("data: {}\n", "y".repeat(MAX_LINE - 16));
        let mut result = Ok(Vec::new());
        for _ in 0..(MAX_EVENT / MAX_LINE + 1) {
            result = p.push(line.as_bytes());
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(LineTooLong));
    }

    #[test]
    fn final_event_without_blank_line_is_dispatched_at_finish() {
        let mut p = SseParser::default();
        assert!(p.push(b"data: last").unwrap().is_empty());
        assert_eq!(
            p.finish(),
            Some(SseEvent {
                event: None,
                data: "last".into()
            })
        );
    }
}
