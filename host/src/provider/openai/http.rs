//! A deliberately small HTTP/1.1 client core (sans-IO parts plus one async `post`).
//!
//! Why not reqwest/hyper: the OpenAI-compatible provider needs exactly one thing — POST a JSON
//! body to a *plain-http* endpoint (normally a model server on localhost) and read a streamed
//! response body. reqwest would pull hyper, http, h2, tower, url, encoding crates and a TLS
//! stack into the host for that; this module is a few hundred lines over `tokio::net::
//! TcpStream`, with every parser bounded and unit-tested. `https://` is refused with a typed
//! error (put a local TLS-terminating proxy in front of a hosted API if needed).

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Largest response head accepted.
pub(crate) const MAX_HEAD_LEN: usize = 64 * 1024;
/// Largest chunk-size line accepted.
const MAX_CHUNK_LINE: usize = 1024;

/// HTTP-level failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The base URL is not `http://host[:port][/path]`.
    #[error("invalid base URL {0:?}")]
    InvalidUrl(String),
    /// Only plain `http://` is supported.
    #[error("unsupported URL scheme in {0:?} (only http:// is supported)")]
    UnsupportedScheme(String),
    /// Connecting timed out.
    #[error("connecting to {0} timed out")]
    ConnectTimeout(String),
    /// Socket failure.
    #[error("i/o error talking to the model server")]
    Io(#[from] std::io::Error),
    /// The response head is malformed.
    #[error("malformed HTTP response: {0}")]
    Malformed(&'static str),
    /// The response head exceeds 64 KiB.
    #[error("HTTP response head too large")]
    HeadTooLarge,
}

/// A parsed `http://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HttpUrl {
    /// Host as written (brackets kept for IPv6).
    pub host: String,
    /// Port (80 by default).
    pub port: u16,
    /// Path prefix without a trailing slash (may be empty).
    pub path: String,
}

impl HttpUrl {
    pub(crate) fn parse(url: &str) -> Result<Self, HttpError> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(if url.contains("://") {
                HttpError::UnsupportedScheme(url.to_owned())
            } else {
                HttpError::InvalidUrl(url.to_owned())
            });
        };
        let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let close = v6
                .find(']')
                .ok_or_else(|| HttpError::InvalidUrl(url.to_owned()))?;
            let host = format!("[{}]", &v6[..close]);
            match &v6[close + 1..] {
                "" => (host, 80),
                p => (host, parse_port(p.strip_prefix(':'), url)?),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), parse_port(Some(p), url)?),
                None => (authority.to_owned(), 80),
            }
        };
        if host.is_empty() || host == "[]" {
            return Err(HttpError::InvalidUrl(url.to_owned()));
        }
        Ok(Self {
            host,
            port,
            path: path.trim_end_matches('/').to_owned(),
        })
    }

    /// `host:port` for connecting and for the `Host` header.
    pub(crate) fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    fn connect_addr(&self) -> String {
        format!(
            "{}:{}",
            self.host.trim_start_matches('[').trim_end_matches(']'),
            self.port
        )
    }
}

fn parse_port(p: Option<&str>, url: &str) -> Result<u16, HttpError> {
    p.and_then(|p| p.parse().ok())
        .ok_or_else(|| HttpError::InvalidUrl(url.to_owned()))
}

/// The request bytes for `POST path` with a JSON body.
pub(crate) fn post_request(
    url: &HttpUrl,
    path: &str,
    bearer: Option<&str>,
    body: &[u8],
) -> Vec<u8> {
    let mut head = format!(
        "POST {}{path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        url.path,
        url.authority(),
        body.len()
    );
    if let Some(key) = bearer {
        head.push_str(&format!("Authorization: Bearer {key}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Connects (bounded by `timeout`) and sends `request`.
pub(crate) async fn send(
    url: &HttpUrl,
    request: &[u8],
    timeout: Duration,
) -> Result<TcpStream, HttpError> {
    let mut stream = tokio::time::timeout(timeout, TcpStream::connect(url.connect_addr()))
        .await
        .map_err(|_| HttpError::ConnectTimeout(url.authority()))??;
    stream.set_nodelay(true)?;
    stream.write_all(request).await?;
    Ok(stream)
}

/// How the body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// `Content-Length`.
    Length(u64),
    /// Until the connection closes.
    Close,
}

/// Status and body framing of a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResponseHead {
    pub status: u16,
    pub framing: Framing,
}

/// Parses a response head from the front of `buf`: `Ok(None)` if incomplete, otherwise the
/// head and how many bytes it used.
pub(crate) fn parse_head(buf: &[u8]) -> Result<Option<(ResponseHead, usize)>, HttpError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD_LEN {
            Err(HttpError::HeadTooLarge)
        } else {
            Ok(None)
        };
    };
    if end > MAX_HEAD_LEN {
        return Err(HttpError::HeadTooLarge);
    }
    let text =
        std::str::from_utf8(&buf[..end]).map_err(|_| HttpError::Malformed("non-UTF-8 head"))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().ok_or(HttpError::Malformed("empty head"))?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(HttpError::Malformed("not an HTTP/1.x status line"));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or(HttpError::Malformed("bad status code"))?;
    let mut framing = Framing::Close;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(HttpError::Malformed("header line without a colon"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding")
            && value.to_ascii_lowercase().contains("chunked")
        {
            framing = Framing::Chunked;
        } else if name.eq_ignore_ascii_case("content-length") && framing != Framing::Chunked {
            framing = Framing::Length(
                value
                    .parse()
                    .map_err(|_| HttpError::Malformed("bad content-length"))?,
            );
        }
    }
    Ok(Some((ResponseHead { status, framing }, end + 4)))
}

/// Incremental `Transfer-Encoding: chunked` decoder.
#[derive(Debug, Default)]
pub(crate) struct ChunkedDecoder {
    state: ChunkState,
    line: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailer,
    Done,
}

impl ChunkedDecoder {
    /// True after the terminating zero-size chunk and its trailer.
    pub(crate) fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes `input`, appending payload bytes to `out`.
    pub(crate) fn push(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), HttpError> {
        while !input.is_empty() {
            match self.state {
                ChunkState::Size | ChunkState::DataEnd | ChunkState::Trailer => {
                    let Some(nl) = input.iter().position(|b| *b == b'\n') else {
                        self.line.extend_from_slice(input);
                        if self.line.len() > MAX_CHUNK_LINE {
                            return Err(HttpError::Malformed("chunk line too long"));
                        }
                        return Ok(());
                    };
                    self.line.extend_from_slice(&input[..nl]);
                    input = &input[nl + 1..];
                    let line = std::mem::take(&mut self.line);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    self.state = match self.state {
                        ChunkState::Size => {
                            let text = std::str::from_utf8(line)
                                .map_err(|_| HttpError::Malformed("chunk size"))?;
                            let hex = text.split(';').next().unwrap_or_default().trim();
                            let size = u64::from_str_radix(hex, 16)
                                .map_err(|_| HttpError::Malformed("chunk size"))?;
                            if size == 0 {
                                ChunkState::Trailer
                            } else {
                                ChunkState::Data(size)
                            }
                        }
                        ChunkState::DataEnd if line.is_empty() => ChunkState::Size,
                        ChunkState::DataEnd => {
                            return Err(HttpError::Malformed("chunk not followed by CRLF"));
                        }
                        ChunkState::Trailer if line.is_empty() => ChunkState::Done,
                        other => other,
                    };
                }
                ChunkState::Data(left) => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left)
                    };
                }
                ChunkState::Done => return Ok(()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_defaults_and_ipv6() {
        assert_eq!(
            HttpUrl::parse("http://127.0.0.1:8000/v1/").unwrap(),
            HttpUrl {
                host: "127.0.0.1".into(),
                port: 8000,
                path: "/v1".into()
            }
        );
        assert_eq!(
            HttpUrl::parse("http://localhost").unwrap(),
            HttpUrl {
                host: "localhost".into(),
                port: 80,
                path: String::new()
            }
        );
        let v6 = HttpUrl::parse("http://[::1]:11434/v1").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("[::1]", 11434));
        assert_eq!(v6.connect_addr(), "::1:11434");
        assert!(matches!(
            HttpUrl::parse("https://api.example/v1"),
            Err(HttpError::UnsupportedScheme(_))
        ));
        assert!(matches!(
            HttpUrl::parse("localhost:80"),
            Err(HttpError::InvalidUrl(_))
        ));
        assert!(matches!(
            HttpUrl::parse("http://h:notaport"),
            Err(HttpError::InvalidUrl(_))
        ));
    }

    #[test]
    fn request_carries_length_and_optional_bearer() {
        let url = HttpUrl::parse("http://h:1/v1").unwrap();
        let req =
            String::from_utf8(post_request(&url, "/chat/completions", Some("k"), b"{}")).unwrap();
        assert!(req.starts_with("POST /v1/chat/completions HTTP/1.1\r\nHost: h:1\r\n"));
        assert!(req.contains("Content-Length: 2\r\n"));
        assert!(req.contains("Authorization: Bearer k\r\n"));
        assert!(req.ends_with("\r\n\r\n{}"));
    }

    #[test]
    fn head_parses_status_and_framing() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nrest";
        let (head, used) = parse_head(raw).unwrap().unwrap();
        assert_eq!(
            head,
            ResponseHead {
                status: 200,
                framing: Framing::Chunked
            }
        );
        assert_eq!(&raw[used..], b"rest");
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n").unwrap().is_none());
        let (head, _) = parse_head(b"HTTP/1.0 404 Not Found\r\nContent-Length: 5\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            head,
            ResponseHead {
                status: 404,
                framing: Framing::Length(5)
            }
        );
        assert!(parse_head(b"SSH-2.0\r\n\r\n").is_err());
    }

    #[test]
    fn chunked_body_decodes_identically_at_every_split_point() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: y\r\n\r\n";
        for split in 0..=wire.len() {
            let mut d = ChunkedDecoder::default();
            let mut out = Vec::new();
            d.push(&wire[..split], &mut out).unwrap();
            d.push(&wire[split..], &mut out).unwrap();
            assert_eq!(out, b"hello, world", "split at {split}");
            assert!(d.is_done());
        }
    }

    #[test]
    fn chunked_body_with_a_bad_size_is_an_error() {
        let mut d = ChunkedDecoder::default();
        assert!(d.push(b"zz\r\n", &mut Vec::new()).is_err());
    }
}
