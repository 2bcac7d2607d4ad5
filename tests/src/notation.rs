//! A small text notation for writing (possibly invalid) CBOR by hand, so hostile inputs can
//! be kept as readable data.
//!
//! * JSON-like values: `{"k": 1, "k": 2}` (duplicate and non-text keys are written as given),
//!   `[1, -2, 1.5, "text", true, false, null]`. Integers use the shortest head whatever their
//!   size (so `9007199254740992` writes an unsafe integer); other numbers are float64.
//! * Raw bytes in angle brackets, `<f9 3c00>`, with repetition `<81*65 f6>`; whitespace inside
//!   is ignored. Raw bytes directly followed by a value (no comma) form **one** element with
//!   it, so `[<d820>"x"]` is a one-element array holding a tagged string.
//! * `$SID` is replaced by the test server id, `$OTHER` by another valid server id.
//! * A whole input may hold several values; their encodings are concatenated.

use crate::{OTHER_SERVER_ID, SERVER_ID};

/// Encodes `text` (see the module docs) into bytes.
///
/// # Panics
/// On a syntax error in `text` (the catalogue is test data; a typo is a test bug).
pub fn encode(text: &str) -> Vec<u8> {
    let text = text
        .replace("$SID", SERVER_ID)
        .replace("$OTHER", OTHER_SERVER_ID);
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    let mut out = Vec::new();
    loop {
        p.ws();
        if p.i >= p.s.len() {
            return out;
        }
        out.extend(p.element());
    }
}

/// `bytes` prefixed with their big-endian u32 length: one frame.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("payload under 4 GiB");
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// A CBOR head with major type `major` and argument `n`, shortest form.
pub fn head(major: u8, n: u64) -> Vec<u8> {
    let m = major << 5;
    if n < 24 {
        vec![m | u8::try_from(n).expect("small")]
    } else if let Ok(b) = u8::try_from(n) {
        vec![m | 24, b]
    } else if let Ok(h) = u16::try_from(n) {
        let mut v = vec![m | 25];
        v.extend(h.to_be_bytes());
        v
    } else if let Ok(w) = u32::try_from(n) {
        let mut v = vec![m | 26];
        v.extend(w.to_be_bytes());
        v
    } else {
        let mut v = vec![m | 27];
        v.extend(n.to_be_bytes());
        v
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) {
        assert_eq!(
            self.peek(),
            Some(c),
            "notation: expected {:?} at {}",
            c as char,
            self.i
        );
        self.i += 1;
    }

    /// One element: raw bytes optionally glued to the value that follows them.
    fn element(&mut self) -> Vec<u8> {
        if self.peek() == Some(b'<') {
            let mut out = self.raw();
            match self.peek() {
                None | Some(b',' | b']' | b'}' | b':') => {}
                Some(_) => out.extend(self.element()),
            }
            out
        } else {
            self.value()
        }
    }

    fn raw(&mut self) -> Vec<u8> {
        self.expect(b'<');
        let end = self.i
            + self.s[self.i..]
                .iter()
                .position(|&c| c == b'>')
                .expect("notation: unterminated <raw>");
        let body = std::str::from_utf8(&self.s[self.i..end]).expect("ascii");
        self.i = end + 1;
        let mut out = Vec::new();
        for chunk in body.split_whitespace() {
            let (hex, times) = match chunk.split_once('*') {
                Some((h, n)) => (h, n.parse::<usize>().expect("notation: repeat count")),
                None => (chunk, 1),
            };
            assert!(hex.len() % 2 == 0, "notation: odd hex {hex}");
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|k| u8::from_str_radix(&hex[k..k + 2], 16).expect("notation: hex"))
                .collect();
            for _ in 0..times {
                out.extend_from_slice(&bytes);
            }
        }
        out
    }

    fn value(&mut self) -> Vec<u8> {
        match self.peek().expect("notation: value expected") {
            b'{' => {
                self.i += 1;
                let mut body = Vec::new();
                let mut n = 0u64;
                if self.peek() == Some(b'}') {
                    self.i += 1;
                } else {
                    loop {
                        body.extend(self.element());
                        self.expect(b':');
                        body.extend(self.element());
                        n += 1;
                        match self.peek() {
                            Some(b',') => self.i += 1,
                            _ => {
                                self.expect(b'}');
                                break;
                            }
                        }
                    }
                }
                let mut out = head(5, n);
                out.extend(body);
                out
            }
            b'[' => {
                self.i += 1;
                let mut body = Vec::new();
                let mut n = 0u64;
                if self.peek() == Some(b']') {
                    self.i += 1;
                } else {
                    loop {
                        body.extend(self.element());
                        n += 1;
                        match self.peek() {
                            Some(b',') => self.i += 1,
                            _ => {
                                self.expect(b']');
                                break;
                            }
                        }
                    }
                }
                let mut out = head(4, n);
                out.extend(body);
                out
            }
            b'"' => {
                let s = self.string();
                let mut out = head(3, s.len() as u64);
                out.extend(s.as_bytes());
                out
            }
            b't' => self.word("true", 0xf5),
            b'f' => self.word("false", 0xf4),
            b'n' => self.word("null", 0xf6),
            _ => self.number(),
        }
    }

    fn word(&mut self, w: &str, byte: u8) -> Vec<u8> {
        assert!(
            self.s[self.i..].starts_with(w.as_bytes()),
            "notation: bad word at {}",
            self.i
        );
        self.i += w.len();
        vec![byte]
    }

    fn string(&mut self) -> String {
        self.expect(b'"');
        let mut out = String::new();
        loop {
            let c = self.s[self.i];
            self.i += 1;
            match c {
                b'"' => return out,
                b'\\' => {
                    let e = self.s[self.i];
                    self.i += 1;
                    match e {
                        b'n' => out.push('\n'),
                        b'u' => {
                            let hex =
                                std::str::from_utf8(&self.s[self.i..self.i + 4]).expect("hex");
                            self.i += 4;
                            let cp = u32::from_str_radix(hex, 16).expect("notation: \\u");
                            out.push(char::from_u32(cp).expect("notation: scalar value"));
                        }
                        other => out.push(other as char),
                    }
                }
                _ => {
                    // Copy one UTF-8 sequence.
                    let start = self.i - 1;
                    let mut end = self.i;
                    while end < self.s.len() && (self.s[end] & 0xc0) == 0x80 {
                        end += 1;
                    }
                    out.push_str(std::str::from_utf8(&self.s[start..end]).expect("utf-8"));
                    self.i = end;
                }
            }
        }
    }

    fn number(&mut self) -> Vec<u8> {
        let start = self.i;
        while self.i < self.s.len()
            && matches!(
                self.s[self.i],
                b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'
            )
        {
            self.i += 1;
        }
        let t = std::str::from_utf8(&self.s[start..self.i]).expect("ascii");
        if let Ok(n) = t.parse::<i128>() {
            if n >= 0 {
                head(0, u64::try_from(n).expect("notation: integer too large"))
            } else {
                head(
                    1,
                    u64::try_from(-1 - n).expect("notation: integer too small"),
                )
            }
        } else {
            let f: f64 = t
                .parse()
                .unwrap_or_else(|_| panic!("notation: bad number {t:?}"));
            let mut out = vec![0xfb];
            out.extend(f.to_be_bytes());
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn encodes_values_raw_bytes_and_glue() {
        assert_eq!(
            encode(r#"{"type":"hello","version":8}"#),
            [
                &[0xa2, 0x64][..],
                b"type",
                &[0x65],
                b"hello",
                &[0x67],
                b"version",
                &[0x08]
            ]
            .concat()
        );
        assert_eq!(encode("<81*3 f6>"), [0x81, 0x81, 0x81, 0xf6]);
        assert_eq!(
            encode(r#"[<d820>"x", 1]"#),
            [0x82, 0xd8, 0x20, 0x61, b'x', 0x01]
        );
        assert_eq!(encode("-1 1.5"), [0x20, 0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
        assert_eq!(encode("{1:2}"), [0xa1, 0x01, 0x02]);
    }
}
