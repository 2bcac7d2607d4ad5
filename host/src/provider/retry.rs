//! Retrying a model call that failed before its first token.
//!
//! Retried: an HTTP answer of 429 (rate limited), 500, 502, 503, 504 or 529 (Anthropic's
//! "overloaded"), and a connection that failed before any byte of a response arrived
//! (refused, reset or closed, connect timeout; see [`ConnectFailure`]). Only before any of
//! the response body was used: once a 2xx head arrived the call is never repeated, so no
//! token is ever streamed twice. Both kinds count against the same [`MAX_ATTEMPTS`]. The wait
//! is the server's `retry-after-ms` / `Retry-After` (seconds or an HTTP-date) when it sends
//! one, else a capped exponential backoff. A server asking for more than [`MAX_RETRY_AFTER`]
//! ends the call with an error instead of a long silent wait. Waiting happens inside the
//! stream's `next`, so an abort ends it at once.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::header::HeaderMap;

use crate::BoxFuture;

/// Most attempts of one call (the first plus three retries).
pub const MAX_ATTEMPTS: u32 = 4;
/// Backoff before the first retry; doubled for each further one.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Longest backoff between two attempts.
pub const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// Longest server-requested wait honoured; beyond it the call fails with the status.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How a wait is performed (tokio's timer by default; tests inject one that records).
pub type SleepFn = Arc<dyn Fn(Duration) -> BoxFuture<'static, ()> + Send + Sync>;
/// The wall clock an HTTP-date `Retry-After` is measured against (the system clock by
/// default; tests inject a fixed one).
pub type NowFn = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The retry limits of a provider.
#[derive(Clone)]
pub struct RetryPolicy {
    /// See [`MAX_ATTEMPTS`] (1 disables retries).
    pub max_attempts: u32,
    /// See [`BACKOFF_BASE`].
    pub base: Duration,
    /// See [`BACKOFF_CAP`].
    pub cap: Duration,
    /// See [`MAX_RETRY_AFTER`].
    pub max_retry_after: Duration,
    sleep: SleepFn,
    now: NowFn,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: MAX_ATTEMPTS,
            base: BACKOFF_BASE,
            cap: BACKOFF_CAP,
            max_retry_after: MAX_RETRY_AFTER,
            sleep: Arc::new(|d| Box::pin(tokio::time::sleep(d))),
            now: Arc::new(SystemTime::now),
        }
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.max_attempts)
            .field("base", &self.base)
            .field("cap", &self.cap)
            .field("max_retry_after", &self.max_retry_after)
            .finish_non_exhaustive()
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Wait this long, then try again.
    Retry(Duration),
    /// The status is final or the attempts are used up.
    GiveUp,
    /// The server asked for a wait longer than the policy honours.
    TooLong(Duration),
}

impl RetryPolicy {
    /// The same limits, waiting through `sleep` (e.g. a recorder that returns at once).
    #[must_use]
    pub fn with_sleep(mut self, sleep: SleepFn) -> Self {
        self.sleep = sleep;
        self
    }

    /// The same limits, reading the wall clock through `now` (for HTTP-date waits).
    #[must_use]
    pub fn with_clock(mut self, now: NowFn) -> Self {
        self.now = now;
        self
    }

    /// The wall clock's time now.
    pub(crate) fn now(&self) -> SystemTime {
        (self.now)()
    }

    /// True for the statuses worth another attempt.
    pub fn is_retryable(status: u16) -> bool {
        matches!(status, 429 | 500 | 502 | 503 | 504 | 529)
    }

    /// The backoff before retry number `retry` (0 for the first retry): `base · 2^retry`,
    /// at most `cap`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The decision after attempt number `attempt` (0-based) answered `status`, with the
    /// server's requested wait if any.
    pub fn decide(
        &self,
        attempt: u32,
        status: u16,
        retry_after: Option<Duration>,
    ) -> RetryDecision {
        if !Self::is_retryable(status) || attempt.saturating_add(1) >= self.max_attempts {
            return RetryDecision::GiveUp;
        }
        match retry_after {
            Some(d) if d > self.max_retry_after => RetryDecision::TooLong(d),
            Some(d) => RetryDecision::Retry(d),
            None => RetryDecision::Retry(self.backoff(attempt)),
        }
    }

    /// The decision after attempt number `attempt` (0-based) failed to connect with `failure`
    /// (no byte of a response arrived): the same backoff and attempt limit as a status.
    pub fn decide_connect(&self, attempt: u32, failure: Option<ConnectFailure>) -> RetryDecision {
        if failure.is_none() || attempt.saturating_add(1) >= self.max_attempts {
            return RetryDecision::GiveUp;
        }
        RetryDecision::Retry(self.backoff(attempt))
    }

    /// Waits `d` the policy's way.
    pub(crate) fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        (self.sleep)(d)
    }
}

/// A connection failure that happened before any byte of a response, worth another attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectFailure {
    /// The server refused the connection (nothing listens, or it is restarting).
    Refused,
    /// The connection was reset or closed before the response began.
    Closed,
    /// Establishing the connection took longer than the connect timeout.
    TimedOut,
}

impl ConnectFailure {
    /// The retryable kind of `error`, if it is one: a DNS failure, a TLS rejection or a
    /// response that timed out after connecting are final (another attempt would fail the
    /// same way, or repeat work the server may already be doing).
    pub fn classify(error: &reqwest::Error) -> Option<Self> {
        if error.is_timeout() {
            return error.is_connect().then_some(Self::TimedOut);
        }
        if !error.is_connect() && !error.is_request() {
            return None;
        }
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
        while let Some(e) = source {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind as K;
                match io.kind() {
                    K::ConnectionRefused => return Some(Self::Refused),
                    K::ConnectionReset
                    | K::ConnectionAborted
                    | K::BrokenPipe
                    | K::UnexpectedEof
                    | K::NotConnected => return Some(Self::Closed),
                    K::TimedOut => return Some(Self::TimedOut),
                    _ => {}
                }
                // A TLS rejection travels as an io::Error too; its inner error decides.
            }
            if let Some(h) = e.downcast_ref::<hyper::Error>()
                && h.is_incomplete_message()
            {
                return Some(Self::Closed);
            }
            source = e.source();
        }
        None
    }
}

/// The server's requested wait: `retry-after-ms` (milliseconds, OpenAI), else `Retry-After`
/// in seconds or as an HTTP-date (measured from `now`; a date in the past means at once).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let text = |name: &str| headers.get(name)?.to_str().ok().map(str::trim);
    if let Some(ms) = text("retry-after-ms").and_then(|t| t.parse::<f64>().ok()) {
        return finite_secs(ms / 1000.0);
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return finite_secs(secs);
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

fn finite_secs(secs: f64) -> Option<Duration> {
    (secs.is_finite() && secs >= 0.0)
        .then(|| Duration::try_from_secs_f64(secs).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn backoff_doubles_from_the_base_and_stops_at_the_cap() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(0), BACKOFF_BASE);
        assert_eq!(p.backoff(1), BACKOFF_BASE * 2);
        assert_eq!(p.backoff(2), BACKOFF_BASE * 4);
        assert_eq!(p.backoff(10), BACKOFF_CAP);
        assert_eq!(p.backoff(u32::MAX), BACKOFF_CAP);
    }

    #[test]
    fn only_rate_limits_and_server_errors_are_retried_within_the_attempt_limit() {
        let p = RetryPolicy::default();
        assert_eq!(p.decide(0, 429, None), RetryDecision::Retry(BACKOFF_BASE));
        assert_eq!(
            p.decide(1, 503, None),
            RetryDecision::Retry(BACKOFF_BASE * 2)
        );
        for status in [400, 401, 403, 404, 501] {
            assert_eq!(p.decide(0, status, None), RetryDecision::GiveUp, "{status}");
        }
        assert_eq!(p.decide(MAX_ATTEMPTS - 1, 500, None), RetryDecision::GiveUp);
    }

    #[test]
    fn a_server_requested_wait_wins_unless_it_is_too_long() {
        let p = RetryPolicy::default();
        let seven = Duration::from_secs(7);
        assert_eq!(p.decide(0, 429, Some(seven)), RetryDecision::Retry(seven));
        let long = MAX_RETRY_AFTER + Duration::from_secs(1);
        assert_eq!(p.decide(0, 429, Some(long)), RetryDecision::TooLong(long));
    }

    /// 2015-10-21T07:28:00Z.
    fn then() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480)
    }

    #[test]
    fn retry_after_reads_milliseconds_then_seconds_and_ignores_garbage() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h, then()), None);
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h, then()), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h, then()), Some(Duration::from_millis(250)));
        let mut h = HeaderMap::new();
        for garbage in ["-5", "1e300", "soon", "Wed, 32 Oct 2015 07:28:00 GMT"] {
            h.insert("retry-after", HeaderValue::from_static(garbage));
            assert_eq!(retry_after(&h, then()), None, "{garbage}");
        }
    }

    #[test]
    fn an_http_date_retry_after_is_the_time_left_until_it() {
        let mut h = HeaderMap::new();
        for date in [
            "Wed, 21 Oct 2015 07:28:05 GMT",
            "Wednesday, 21-Oct-15 07:28:05 GMT",
            "Wed Oct 21 07:28:05 2015",
        ] {
            h.insert("retry-after", HeaderValue::from_static(date));
            assert_eq!(
                retry_after(&h, then()),
                Some(Duration::from_secs(5)),
                "{date}"
            );
        }
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:27:00 GMT"),
        );
        assert_eq!(
            retry_after(&h, then()),
            Some(Duration::ZERO),
            "a past date means at once"
        );
    }

    #[test]
    fn connection_failures_back_off_like_statuses_within_the_same_attempt_limit() {
        let p = RetryPolicy::default();
        assert_eq!(
            p.decide_connect(0, Some(ConnectFailure::Refused)),
            RetryDecision::Retry(BACKOFF_BASE)
        );
        assert_eq!(
            p.decide_connect(2, Some(ConnectFailure::Closed)),
            RetryDecision::Retry(BACKOFF_BASE * 4)
        );
        assert_eq!(
            p.decide_connect(MAX_ATTEMPTS - 1, Some(ConnectFailure::TimedOut)),
            RetryDecision::GiveUp
        );
        assert_eq!(p.decide_connect(0, None), RetryDecision::GiveUp);
    }
}
