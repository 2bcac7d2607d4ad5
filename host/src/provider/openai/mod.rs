//! OpenAI-compatible chat-completions streaming (vLLM, llama.cpp, Ollama, hosted APIs behind a
//! plain-http endpoint).
//!
//! One request per model call: `POST {base_url}/chat/completions` with `stream: true`; the
//! response is read as server-sent events, `data:` payloads are folded into provider events,
//! and `[DONE]` ends the stream. The API key is read from the configured environment variable
//! at each request (so rotating it needs no restart); without one no `Authorization` header is
//! sent, which is what local model servers expect.

mod http;
mod sse;
mod wire;

use std::collections::VecDeque;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::{ModelRequest, Provider, ProviderEvent, ProviderStream};
use crate::BoxFuture;

pub use http::HttpError;

use http::{ChunkedDecoder, Framing, HttpUrl, ResponseHead};
use sse::SseParser;
use wire::ChunkAccumulator;

/// Provider id.
pub const PROVIDER_ID: &str = "openai";
/// Most bytes of an error response body quoted in the error message.
const ERROR_BODY_LIMIT: usize = 4096;

/// Configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// E.g. `http://127.0.0.1:8000/v1` (the `/chat/completions` suffix is added).
    pub base_url: String,
    /// Name of the environment variable holding the API key, if any.
    pub api_key_env: Option<String>,
    /// Bound on establishing the TCP connection.
    pub connect_timeout: Duration,
}

impl OpenAiConfig {
    /// A configuration for `base_url` with no key and a 10 s connect timeout.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key_env: None,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// The provider.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    config: OpenAiConfig,
    url: Result<HttpUrl, String>,
}

impl OpenAiProvider {
    /// A provider for `config`. An invalid base URL is reported by every stream as an error
    /// event (and by [`OpenAiProvider::validate`]).
    pub fn new(config: OpenAiConfig) -> Self {
        let url = HttpUrl::parse(&config.base_url).map_err(|e| e.to_string());
        Self { config, url }
    }

    /// Checks the base URL.
    ///
    /// # Errors
    /// [`HttpError::InvalidUrl`] or [`HttpError::UnsupportedScheme`].
    pub fn validate(config: &OpenAiConfig) -> Result<(), HttpError> {
        HttpUrl::parse(&config.base_url).map(|_| ())
    }

    fn api_key(&self) -> Option<String> {
        let name = self.config.api_key_env.as_deref()?;
        let key = std::env::var(name).ok().filter(|k| !k.is_empty());
        if key.is_none() {
            tracing::debug!(
                env = name,
                "API key variable is unset; sending no Authorization"
            );
        }
        key
    }
}

impl Provider for OpenAiProvider {
    fn id(&self) -> &str {
        PROVIDER_ID
    }

    fn api(&self) -> &str {
        "openai-completions"
    }

    fn stream(&self, request: ModelRequest, cancel: CancellationToken) -> Box<dyn ProviderStream> {
        let state = match &self.url {
            Ok(url) => {
                let body = wire::request_body(&request).to_string();
                let bytes = http::post_request(
                    url,
                    "/chat/completions",
                    self.api_key().as_deref(),
                    body.as_bytes(),
                );
                State::Connect {
                    url: url.clone(),
                    request: bytes,
                }
            }
            Err(e) => State::Failed(e.clone()),
        };
        Box::new(OpenAiStream {
            state,
            cancel,
            timeout: self.config.connect_timeout,
            pending: VecDeque::new(),
        })
    }
}

#[derive(Debug)]
enum State {
    Failed(String),
    Connect { url: HttpUrl, request: Vec<u8> },
    Head { conn: TcpStream, buf: Vec<u8> },
    Body(Box<Body>),
    Finished,
}

#[derive(Debug)]
struct Body {
    conn: TcpStream,
    head: ResponseHead,
    chunked: ChunkedDecoder,
    remaining: Option<u64>,
    sse: SseParser,
    acc: ChunkAccumulator,
    /// Non-2xx: the body collected for the error message.
    error_body: Option<Vec<u8>>,
}

#[derive(Debug)]
struct OpenAiStream {
    state: State,
    cancel: CancellationToken,
    timeout: Duration,
    pending: VecDeque<ProviderEvent>,
}

impl ProviderStream for OpenAiStream {
    fn next(&mut self) -> BoxFuture<'_, Option<ProviderEvent>> {
        Box::pin(async move {
            loop {
                if let Some(ev) = self.pending.pop_front() {
                    return Some(ev);
                }
                if matches!(self.state, State::Finished) {
                    return None;
                }
                if self.cancel.is_cancelled() {
                    self.state = State::Finished;
                    return None;
                }
                let cancel = self.cancel.clone();
                tokio::select! {
                    () = cancel.cancelled() => { self.state = State::Finished; return None; }
                    () = self.step() => {}
                }
            }
        })
    }
}

impl OpenAiStream {
    fn fail(&mut self, message: String) {
        self.pending.push_back(ProviderEvent::Error(message));
        self.state = State::Finished;
    }

    /// Advances the connection by one I/O step, queueing any events it produced.
    async fn step(&mut self) {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::Failed(e) => self.fail(e),
            State::Finished => {}
            State::Connect { url, request } => match http::send(&url, &request, self.timeout).await
            {
                Ok(conn) => {
                    self.state = State::Head {
                        conn,
                        buf: Vec::new(),
                    }
                }
                Err(e) => self.fail(describe(&e)),
            },
            State::Head { mut conn, mut buf } => {
                let mut chunk = [0u8; 8192];
                match conn.read(&mut chunk).await {
                    Ok(0) => self
                        .fail("the model server closed the connection without a response".into()),
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        match http::parse_head(&buf) {
                            Ok(None) => self.state = State::Head { conn, buf },
                            Ok(Some((head, used))) => {
                                let rest = buf.split_off(used);
                                let ok = (200..300).contains(&head.status);
                                let mut body = Box::new(Body {
                                    conn,
                                    remaining: match head.framing {
                                        Framing::Length(n) => Some(n),
                                        Framing::Chunked | Framing::Close => None,
                                    },
                                    head,
                                    chunked: ChunkedDecoder::default(),
                                    sse: SseParser::default(),
                                    acc: ChunkAccumulator::default(),
                                    error_body: (!ok).then(Vec::new),
                                });
                                if self.feed(&mut body, &rest) {
                                    self.state = State::Body(body);
                                }
                            }
                            Err(e) => self.fail(describe(&e)),
                        }
                    }
                    Err(e) => self.fail(describe(&HttpError::Io(e))),
                }
            }
            State::Body(mut body) => {
                let mut chunk = [0u8; 8192];
                match body.conn.read(&mut chunk).await {
                    Ok(0) => self.end(&mut body),
                    Ok(n) => {
                        if self.feed(&mut body, &chunk[..n]) {
                            self.state = State::Body(body);
                        }
                    }
                    Err(e) => self.fail(describe(&HttpError::Io(e))),
                }
            }
        }
    }

    /// Feeds raw body bytes; returns whether the body continues.
    fn feed(&mut self, body: &mut Body, raw: &[u8]) -> bool {
        let mut data = Vec::new();
        let mut complete = false;
        match body.head.framing {
            Framing::Chunked => {
                if let Err(e) = body.chunked.push(raw, &mut data) {
                    self.fail(describe(&e));
                    return false;
                }
                complete = body.chunked.is_done();
            }
            Framing::Length(_) => {
                let left = body.remaining.unwrap_or(0);
                let take = usize::try_from(left).unwrap_or(usize::MAX).min(raw.len());
                data.extend_from_slice(&raw[..take]);
                let left = left - take as u64;
                body.remaining = Some(left);
                complete = left == 0;
            }
            Framing::Close => data.extend_from_slice(raw),
        }
        if let Some(err) = &mut body.error_body {
            let room = ERROR_BODY_LIMIT.saturating_sub(err.len());
            err.extend_from_slice(&data[..room.min(data.len())]);
        } else {
            match body.sse.push(&data) {
                Ok(events) => {
                    for ev in events {
                        self.pending.extend(body.acc.on_data(&ev.data));
                    }
                }
                Err(e) => {
                    self.fail(e.to_string());
                    return false;
                }
            }
            if body.acc.is_finished() {
                self.state = State::Finished;
                return false;
            }
        }
        if complete {
            self.end(body);
            return false;
        }
        true
    }

    /// The body ended (EOF or framing complete).
    fn end(&mut self, body: &mut Body) {
        if let Some(err) = body.error_body.take() {
            let text = String::from_utf8_lossy(&err);
            self.fail(format!(
                "model server answered HTTP {}: {}",
                body.head.status,
                text.trim()
            ));
            return;
        }
        if let Some(ev) = body.sse.finish() {
            self.pending.extend(body.acc.on_data(&ev.data));
        }
        self.pending.extend(body.acc.finish(false));
        self.state = State::Finished;
    }
}

/// Error text with its source chain (the model and the UI see this).
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests;
