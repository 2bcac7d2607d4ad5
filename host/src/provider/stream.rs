//! The pulled HTTP stream both network providers share: send (retrying statuses and
//! connections that failed before any response byte), then read the body as server-sent
//! events and fold them through a provider-specific [`Decoder`].
//!
//! No background task: every step runs inside [`ProviderStream::next`], raced against the
//! cancellation token, so an abort ends a connect, a retry wait or a read at once and
//! dropping the stream closes the connection. Every failure becomes one
//! [`ProviderEvent::Error`] naming the endpoint; the API key is redacted from any text a
//! server echoes back.

use std::collections::VecDeque;

use reqwest::header::HeaderMap;
use tokio_util::sync::CancellationToken;

use super::retry::{ConnectFailure, RetryDecision, RetryPolicy, retry_after};
use super::sse::{SseEvent, SseParser};
use super::transport::{ERROR_BODY_LIMIT, ProviderUrl, READ_TIMEOUT, describe};
use super::{ProviderEvent, ProviderStream};
use crate::BoxFuture;

/// Folds one API's server-sent events into provider events (sans-IO).
pub(crate) trait Decoder: Send {
    /// One dispatched event.
    fn on_event(&mut self, event: &SseEvent) -> Vec<ProviderEvent>;
    /// The body ended cleanly (EOF): settle, or report a cut-off stream.
    fn on_end(&mut self) -> Vec<ProviderEvent>;
    /// The transport failed mid-body with `message`: flush what is complete, then the error.
    fn on_interrupted(&mut self, message: String) -> Vec<ProviderEvent>;
    /// True once the stream is settled (a terminal event was produced).
    fn is_finished(&self) -> bool;
}

/// One prepared request.
pub(crate) struct Call {
    pub client: reqwest::Client,
    pub endpoint: ProviderUrl,
    /// Includes the credentials (marked sensitive, so `Debug` hides them).
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    /// Text never to repeat in an error message (the API key).
    pub secret: Option<String>,
    /// The client's read timeout (named in the error when it fires).
    pub read_timeout: std::time::Duration,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret; headers print sensitive values as `Sensitive`.
        f.debug_struct("Call")
            .field("endpoint", &self.endpoint)
            .field("headers", &self.headers)
            .field("body_len", &self.body.len())
            .finish_non_exhaustive()
    }
}

enum State {
    Failed(String),
    Send {
        attempt: u32,
    },
    Body {
        response: reqwest::Response,
        sse: SseParser,
    },
    Finished,
}

/// The stream.
pub(crate) struct HttpStream<D> {
    call: Option<Call>,
    decoder: D,
    retry: RetryPolicy,
    cancel: CancellationToken,
    state: State,
    pending: VecDeque<ProviderEvent>,
}

impl<D> std::fmt::Debug for HttpStream<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpStream")
            .field("endpoint", &self.call.as_ref().map(|c| &c.endpoint))
            .finish_non_exhaustive()
    }
}

impl<D: Decoder> HttpStream<D> {
    /// A stream for `call` (or one that yields only the set-up error).
    pub(crate) fn new(
        call: Result<Call, String>,
        decoder: D,
        retry: RetryPolicy,
        cancel: CancellationToken,
    ) -> Self {
        let (call, state) = match call {
            Ok(c) => (Some(c), State::Send { attempt: 0 }),
            Err(e) => (None, State::Failed(e)),
        };
        Self {
            call,
            decoder,
            retry,
            cancel,
            state,
            pending: VecDeque::new(),
        }
    }

    fn fail(&mut self, message: String) {
        let message = self.redact(message);
        self.pending.push_back(ProviderEvent::Error(message));
        self.state = State::Finished;
    }

    fn redact(&self, mut text: String) -> String {
        if let Some(secret) = self.call.as_ref().and_then(|c| c.secret.as_deref())
            && !secret.is_empty()
        {
            text = text.replace(secret, "[redacted]");
        }
        text
    }

    fn push_all(&mut self, events: Vec<ProviderEvent>) {
        for ev in events {
            let ev = match ev {
                ProviderEvent::Error(m) => ProviderEvent::Error(self.redact(m)),
                other => other,
            };
            self.pending.push_back(ev);
        }
    }

    /// Advances by one I/O step, queueing what it produced.
    async fn step(&mut self) {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::Finished => {}
            State::Failed(e) => self.fail(e),
            State::Send { attempt } => self.send(attempt).await,
            State::Body {
                mut response,
                mut sse,
            } => match response.chunk().await {
                Ok(Some(bytes)) => match sse.push(&bytes) {
                    Ok(events) => {
                        for ev in events {
                            let out = self.decoder.on_event(&ev);
                            self.push_all(out);
                            if self.decoder.is_finished() {
                                return;
                            }
                        }
                        self.state = State::Body { response, sse };
                    }
                    Err(e) => {
                        let msg = format!("{}: {e}", self.endpoint_text());
                        let out = self.decoder.on_interrupted(msg);
                        self.push_all(out);
                    }
                },
                Ok(None) => {
                    if let Some(ev) = sse.finish() {
                        let out = self.decoder.on_event(&ev);
                        self.push_all(out);
                    }
                    if !self.decoder.is_finished() {
                        let out = self.decoder.on_end();
                        self.push_all(out);
                    }
                }
                Err(e) => {
                    let msg = if e.is_timeout() {
                        let limit = self.call.as_ref().map_or(READ_TIMEOUT, |c| c.read_timeout);
                        format!(
                            "no data from {} for {:?} (read timeout)",
                            self.endpoint_text(),
                            limit
                        )
                    } else {
                        format!(
                            "the stream from {} was interrupted: {}",
                            self.endpoint_text(),
                            describe(&e.without_url())
                        )
                    };
                    let out = self.decoder.on_interrupted(msg);
                    self.push_all(out);
                }
            },
        }
    }

    fn endpoint_text(&self) -> String {
        self.call
            .as_ref()
            .map_or_else(String::new, |c| c.endpoint.to_string())
    }

    async fn send(&mut self, attempt: u32) {
        let Some(call) = &self.call else { return };
        let endpoint = call.endpoint.clone();
        let request = call
            .client
            .post(call.endpoint.url().clone())
            .headers(call.headers.clone())
            .body(call.body.clone());
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                let what = if e.is_timeout() {
                    "timed out connecting to"
                } else {
                    "cannot reach"
                };
                let failure = ConnectFailure::classify(&e);
                let mut message = format!("{what} {endpoint}: {}", describe(&e.without_url()));
                return match self.retry.decide_connect(attempt, failure) {
                    RetryDecision::Retry(delay) => {
                        tracing::debug!(
                            ?failure,
                            attempt,
                            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                            "model call failed to connect; retrying"
                        );
                        self.retry.sleep(delay).await;
                        self.state = State::Send {
                            attempt: attempt + 1,
                        };
                    }
                    RetryDecision::GiveUp | RetryDecision::TooLong(_) => {
                        if attempt > 0 {
                            message.push_str(&format!(" (after {} attempts)", attempt + 1));
                        }
                        self.fail(message);
                    }
                };
            }
        };
        let status = response.status();
        if status.is_success() {
            self.state = State::Body {
                response,
                sse: SseParser::default(),
            };
            return;
        }
        let wait = retry_after(response.headers(), self.retry.now());
        let detail = error_detail(&read_limited(response).await);
        let mut message = format!("{endpoint} answered HTTP {}", status.as_u16());
        if let Some(reason) = status.canonical_reason() {
            message.push(' ');
            message.push_str(reason);
        }
        if !detail.is_empty() {
            message.push_str(": ");
            message.push_str(&detail);
        }
        match self.retry.decide(attempt, status.as_u16(), wait) {
            RetryDecision::Retry(delay) => {
                tracing::debug!(
                    status = status.as_u16(),
                    attempt,
                    delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "model call rejected before streaming; retrying"
                );
                self.retry.sleep(delay).await;
                self.state = State::Send {
                    attempt: attempt + 1,
                };
            }
            RetryDecision::TooLong(delay) => self.fail(format!(
                "{message} (the server asks to retry after {} s, more than the {} s this host waits)",
                delay.as_secs(),
                self.retry.max_retry_after.as_secs()
            )),
            RetryDecision::GiveUp => {
                if attempt > 0 {
                    message.push_str(&format!(" (after {} attempts)", attempt + 1));
                }
                self.fail(message);
            }
        }
    }
}

impl<D: Decoder> ProviderStream for HttpStream<D> {
    fn next(&mut self) -> BoxFuture<'_, Option<ProviderEvent>> {
        Box::pin(async move {
            loop {
                if let Some(ev) = self.pending.pop_front() {
                    return Some(ev);
                }
                if matches!(self.state, State::Finished) || self.cancel.is_cancelled() {
                    self.state = State::Finished;
                    return None;
                }
                let cancel = self.cancel.clone();
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => { self.state = State::Finished; return None; }
                    () = self.step() => {}
                }
            }
        })
    }
}

/// Reads at most [`ERROR_BODY_LIMIT`] bytes of an error body.
async fn read_limited(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < ERROR_BODY_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = ERROR_BODY_LIMIT - body.len();
                body.extend_from_slice(&chunk[..room.min(chunk.len())]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// The useful part of an error body: `error.message` (OpenAI and Anthropic shapes), `error`
/// as text, `message`, else the trimmed text.
pub(crate) fn error_detail(body: &str) -> String {
    let text = body.trim();
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(text) {
        let pick = json
            .get("error")
            .and_then(|e| e.get("message").or(Some(e)))
            .or_else(|| json.get("message"))
            .and_then(|m| m.as_str().map(str::to_owned));
        if let Some(m) = pick {
            return m;
        }
    }
    text.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_detail_prefers_the_message_of_either_api_shape() {
        assert_eq!(
            error_detail(r#"{"error":{"message":"model not found","type":"x"}}"#),
            "model not found"
        );
        assert_eq!(
            error_detail(
                r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#
            ),
            "invalid x-api-key"
        );
        assert_eq!(error_detail(r#"{"error":"bad"}"#), "bad");
        assert_eq!(error_detail(" plain text \n"), "plain text");
        assert_eq!(error_detail(r#"{"other":1}"#), r#"{"other":1}"#);
    }
}
