//! The input area's editor: a multi-line buffer with a cursor, readline-style editing, and
//! large pastes held aside behind a one-line marker (expanded again when the text is sent).

/// A paste with more lines than this collapses to a marker.
pub(crate) const PASTE_COLLAPSE_LINES: usize = 5;
/// A paste with more characters than this collapses to a marker.
pub(crate) const PASTE_COLLAPSE_CHARS: usize = 500;
/// Largest input the editor holds (characters, pastes included): a prompt's own limit on
/// the host is 1 MiB, so anything larger could never be sent.
pub(crate) const MAX_INPUT_CHARS: usize = 1 << 20;

/// The editor's buffer and cursor (a byte offset, always on a character boundary).
#[derive(Debug, Default, Clone)]
pub(crate) struct Editor {
    text: String,
    cursor: usize,
    /// Collapsed pastes: (marker, content).
    pastes: Vec<(String, String)>,
    /// Characters held in pastes.
    pasted_chars: usize,
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

impl Editor {
    /// The buffer as shown (markers, not paste contents).
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Whether nothing is typed.
    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The cursor's byte offset.
    pub(crate) fn cursor(&self) -> usize {
        self.cursor
    }

    /// Replaces the buffer (history recall, `$EDITOR`), cursor at the end.
    pub(crate) fn set(&mut self, text: &str) {
        self.text = text.chars().take(MAX_INPUT_CHARS).collect();
        self.cursor = self.text.len();
        self.pastes.clear();
        self.pasted_chars = 0;
    }

    /// Empties the buffer.
    pub(crate) fn clear(&mut self) {
        self.set("");
    }

    /// The text to send, pastes expanded; the buffer is emptied.
    pub(crate) fn take(&mut self) -> String {
        let mut out = std::mem::take(&mut self.text);
        for (marker, content) in self.pastes.drain(..) {
            out = out.replacen(&marker, &content, 1);
        }
        self.cursor = 0;
        self.pasted_chars = 0;
        out
    }

    /// The text with pastes expanded, without taking it (for `$EDITOR`).
    pub(crate) fn expanded(&self) -> String {
        let mut out = self.text.clone();
        for (marker, content) in &self.pastes {
            out = out.replacen(marker, content, 1);
        }
        out
    }

    fn room(&self) -> usize {
        MAX_INPUT_CHARS.saturating_sub(self.text.chars().count() + self.pasted_chars)
    }

    /// Types `c` at the cursor.
    pub(crate) fn insert(&mut self, c: char) {
        if self.room() == 0 {
            return;
        }
        self.text.insert(self.cursor, c);
        self.cursor += c.len_utf8();
    }

    /// Inserts `s` at the cursor (cut to the room left).
    pub(crate) fn insert_str(&mut self, s: &str) {
        let s: String = s.chars().take(self.room()).collect();
        self.text.insert_str(self.cursor, &s);
        self.cursor += s.len();
    }

    /// A bracketed paste: small ones are typed in, large ones become a marker.
    pub(crate) fn paste(&mut self, content: &str) {
        // Terminals send pasted newlines as CR.
        let content = content.replace("\r\n", "\n").replace('\r', "\n");
        let lines = content.lines().count();
        let chars = content.chars().count();
        if lines <= PASTE_COLLAPSE_LINES && chars <= PASTE_COLLAPSE_CHARS {
            self.insert_str(&content);
            return;
        }
        if chars > self.room() {
            return;
        }
        let marker = format!("[paste #{} +{lines} lines]", self.pastes.len() + 1);
        self.insert_str(&marker);
        self.pasted_chars += chars;
        self.pastes.push((marker, content));
    }

    /// The start of the character before the cursor.
    fn prev_boundary(&self) -> Option<usize> {
        (self.cursor > 0).then(|| self.text.floor_char_boundary(self.cursor - 1))
    }

    /// The end of the character under the cursor.
    fn next_boundary(&self) -> Option<usize> {
        (self.cursor < self.text.len()).then(|| self.text.ceil_char_boundary(self.cursor + 1))
    }

    /// Backspace: the character before the cursor, or a whole paste marker.
    pub(crate) fn backspace(&mut self) {
        let before = &self.text[..self.cursor];
        if let Some(i) = self
            .pastes
            .iter()
            .position(|(m, _)| before.ends_with(m.as_str()))
        {
            let (marker, content) = self.pastes.remove(i);
            let start = self.cursor - marker.len();
            self.text.replace_range(start..self.cursor, "");
            self.cursor = start;
            self.pasted_chars -= content.chars().count();
            return;
        }
        if let Some(p) = self.prev_boundary() {
            self.text.replace_range(p..self.cursor, "");
            self.cursor = p;
        }
    }

    /// Delete: the character under the cursor.
    pub(crate) fn delete(&mut self) {
        if let Some(n) = self.next_boundary() {
            self.text.replace_range(self.cursor..n, "");
        }
    }

    /// Cursor one character left.
    pub(crate) fn left(&mut self) {
        if let Some(p) = self.prev_boundary() {
            self.cursor = p;
        }
    }

    /// Cursor one character right.
    pub(crate) fn right(&mut self) {
        if let Some(n) = self.next_boundary() {
            self.cursor = n;
        }
    }

    fn line_start(&self) -> usize {
        self.text[..self.cursor].rfind('\n').map_or(0, |i| i + 1)
    }

    fn line_end(&self) -> usize {
        self.text[self.cursor..]
            .find('\n')
            .map_or(self.text.len(), |i| self.cursor + i)
    }

    /// Cursor to the start of its line.
    pub(crate) fn home(&mut self) {
        self.cursor = self.line_start();
    }

    /// Cursor to the end of its line.
    pub(crate) fn end(&mut self) {
        self.cursor = self.line_end();
    }

    fn word_left_pos(&self) -> usize {
        let before: Vec<(usize, char)> = self.text[..self.cursor].char_indices().collect();
        let mut i = before.len();
        while i > 0 && !is_word(before[i - 1].1) {
            i -= 1;
        }
        while i > 0 && is_word(before[i - 1].1) {
            i -= 1;
        }
        before.get(i).map_or(self.cursor, |(b, _)| *b)
    }

    /// Cursor to the start of the previous word.
    pub(crate) fn word_left(&mut self) {
        self.cursor = self.word_left_pos();
    }

    /// Cursor past the end of the next word.
    pub(crate) fn word_right(&mut self) {
        let rest = &self.text[self.cursor..];
        let mut it = rest.char_indices().peekable();
        while it.peek().is_some_and(|(_, c)| !is_word(*c)) {
            it.next();
        }
        while it.peek().is_some_and(|(_, c)| is_word(*c)) {
            it.next();
        }
        self.cursor += it.peek().map_or(rest.len(), |(i, _)| *i);
    }

    /// Ctrl-W: deletes the word before the cursor.
    pub(crate) fn delete_word_left(&mut self) {
        let start = self.word_left_pos();
        self.text.replace_range(start..self.cursor, "");
        self.cursor = start;
    }

    /// Ctrl-U: deletes to the start of the line.
    pub(crate) fn kill_to_start(&mut self) {
        let start = self.line_start();
        self.text.replace_range(start..self.cursor, "");
        self.cursor = start;
    }

    /// Ctrl-K: deletes to the end of the line.
    pub(crate) fn kill_to_end(&mut self) {
        let end = self.line_end();
        self.text.replace_range(self.cursor..end, "");
    }

    /// Cursor one line up, keeping the column; false on the first line.
    pub(crate) fn up(&mut self) -> bool {
        let start = self.line_start();
        if start == 0 {
            return false;
        }
        let col = self.text[start..self.cursor].chars().count();
        let prev_start = self.text[..start - 1].rfind('\n').map_or(0, |i| i + 1);
        self.cursor = Self::column(&self.text, prev_start, start - 1, col);
        true
    }

    /// Cursor one line down, keeping the column; false on the last line.
    pub(crate) fn down(&mut self) -> bool {
        let end = self.line_end();
        if end == self.text.len() {
            return false;
        }
        let col = self.text[self.line_start()..self.cursor].chars().count();
        let next_start = end + 1;
        let next_end = self.text[next_start..]
            .find('\n')
            .map_or(self.text.len(), |i| next_start + i);
        self.cursor = Self::column(&self.text, next_start, next_end, col);
        true
    }

    fn column(text: &str, start: usize, end: usize, col: usize) -> usize {
        text[start..end]
            .char_indices()
            .nth(col)
            .map_or(end, |(i, _)| start + i)
    }

    /// The word being typed at the cursor, when it starts with `sigil` (for completion):
    /// (byte offset of the sigil, the word after it).
    pub(crate) fn token_at_cursor(&self, sigil: char) -> Option<(usize, &str)> {
        let before = &self.text[..self.cursor];
        let start = before
            .rfind(char::is_whitespace)
            .map_or(0, |i| before.ceil_char_boundary(i + 1));
        let word = &before[start..];
        word.strip_prefix(sigil).map(|rest| (start, rest))
    }

    /// Replaces the text from `start` to the cursor with `with`.
    pub(crate) fn replace_before_cursor(&mut self, start: usize, with: &str) {
        if start > self.cursor || !self.text.is_char_boundary(start) {
            return;
        }
        self.text.replace_range(start..self.cursor, with);
        self.cursor = start + with.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(s: &str) -> Editor {
        let mut e = Editor::default();
        s.chars().for_each(|c| e.insert(c));
        e
    }

    #[test]
    fn typing_moving_and_deleting_edit_at_the_cursor() {
        let mut e = typed("helo wrld");
        e.home();
        e.right();
        e.right();
        e.right();
        e.insert('l');
        assert_eq!(e.text(), "hello wrld");
        e.end();
        e.word_left();
        e.right();
        e.insert('o');
        assert_eq!(e.text(), "hello world");
        e.end();
        e.delete_word_left();
        assert_eq!(e.text(), "hello ");
        e.backspace();
        assert_eq!(e.text(), "hello");
        e.home();
        e.delete();
        assert_eq!(e.text(), "ello");
        e.kill_to_end();
        assert_eq!(e.text(), "");
    }

    #[test]
    fn multi_byte_characters_never_split() {
        let mut e = typed("né👍x");
        e.left();
        e.left();
        e.backspace();
        assert_eq!(e.text(), "n👍x");
        e.word_right();
        assert_eq!(e.cursor(), e.text().len());
        e.home();
        e.right();
        e.delete();
        assert_eq!(e.text(), "nx");
        // An ideographic space is three bytes: the token starts after all of them.
        let e = typed("a\u{3000}@é");
        assert_eq!(e.token_at_cursor('@'), Some((4, "é")));
    }

    #[test]
    fn up_and_down_move_between_lines_and_report_the_edges() {
        let mut e = typed("first line");
        e.insert('\n');
        e.insert_str("second");
        assert!(e.up());
        assert_eq!(&e.text()[..e.cursor()], "first ");
        assert!(!e.up());
        assert!(e.down());
        assert_eq!(e.cursor(), e.text().len());
        assert!(!e.down());
    }

    #[test]
    fn a_large_paste_collapses_to_a_marker_and_expands_when_sent() {
        let mut e = typed("see ");
        let big: String = (0..20).map(|i| format!("line {i}\n")).collect();
        e.paste(&big);
        assert_eq!(e.text(), "see [paste #1 +20 lines]");
        e.insert_str(" thanks");
        let sent = e.take();
        assert!(sent.starts_with("see line 0\n"));
        assert!(sent.ends_with("line 19\n thanks"));
        assert!(e.is_empty());
    }

    #[test]
    fn backspace_after_a_marker_removes_the_whole_paste() {
        let mut e = Editor::default();
        e.paste(&"x\n".repeat(10));
        e.backspace();
        assert!(e.is_empty());
        assert_eq!(e.take(), "");
    }

    #[test]
    fn a_small_paste_is_typed_in_with_its_newlines() {
        let mut e = Editor::default();
        e.paste("a\r\nb");
        assert_eq!(e.text(), "a\nb");
    }

    #[test]
    fn the_token_at_the_cursor_is_found_by_its_sigil() {
        let e = typed("look at @src/ma");
        assert_eq!(e.token_at_cursor('@'), Some((8, "src/ma")));
        assert_eq!(typed("/mo").token_at_cursor('/'), Some((0, "mo")));
        assert_eq!(typed("plain").token_at_cursor('@'), None);
        let mut e = typed("look at @src/ma");
        e.replace_before_cursor(8, "@src/main.rs ");
        assert_eq!(e.text(), "look at @src/main.rs ");
    }

    #[test]
    fn input_is_bounded() {
        let mut e = Editor::default();
        e.insert_str(&"x".repeat(MAX_INPUT_CHARS + 10));
        assert_eq!(e.text().len(), MAX_INPUT_CHARS);
        e.insert('y');
        assert_eq!(e.text().len(), MAX_INPUT_CHARS);
    }
}
