//! Wall-clock time: the one place the runtime reads it, plus ISO-8601 text.
//!
//! Messages carry Unix milliseconds (`timestamp`), session entries carry ISO-8601 UTC text.
//! Everything that needs "now" takes a [`Clock`], so tests use [`ManualClock`] and are
//! deterministic.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// A source of wall-clock time in Unix milliseconds.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    fn now_ms(&self) -> u64;
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        // The only wall-clock read in the crate. A clock before 1970 reads as 0.
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock tests control: it starts at a fixed instant and advances by `step_ms` on every read.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicU64,
    step_ms: u64,
}

impl ManualClock {
    /// A clock at `start_ms` that advances `step_ms` after each read.
    pub fn new(start_ms: u64, step_ms: u64) -> Self {
        Self {
            now: AtomicU64::new(start_ms),
            step_ms,
        }
    }

    /// Sets the next reading.
    pub fn set(&self, ms: u64) {
        self.now.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.fetch_add(self.step_ms, Ordering::SeqCst)
    }
}

/// Formats Unix milliseconds as ISO-8601 UTC with milliseconds (`2025-05-30T01:20:00.000Z`).
pub fn format_iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let millis = ms % 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Parses the subset of ISO-8601 that [`format_iso8601`] writes (the fraction is optional and
/// may have 1–9 digits; only `Z` is accepted as the zone). `None` for anything else.
pub fn parse_iso8601(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 || b.last() != Some(&b'Z') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let s = text.get(r)?;
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    let sep = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(sep(4, b'-') && sep(7, b'-') && sep(10, b'T') && sep(13, b':') && sep(16, b':')) {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let frac = &text[19..text.len() - 1];
    let millis = if frac.is_empty() {
        0
    } else {
        let digits = frac.strip_prefix('.')?;
        if digits.is_empty() || digits.len() > 9 || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let mut padded = digits.to_owned();
        padded.truncate(3);
        while padded.len() < 3 {
            padded.push('0');
        }
        padded.parse::<u64>().ok()?
    };
    let days = days_from_civil(i64::try_from(y).ok()?, mo, d);
    let days = u64::try_from(days).ok()?;
    Some(((days * 86_400 + h * 3600 + mi * 60 + s) * 1000) + millis)
}

/// Howard Hinnant's `civil_from_days`: days since 1970-01-01 → (year, month, day).
fn civil_from_days(z: i64) -> (i64, u64, u64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    (
        y,
        u64::try_from(m).unwrap_or(1),
        u64::try_from(d).unwrap_or(1),
    )
}

/// Howard Hinnant's `days_from_civil`: (year, month, day) → days since 1970-01-01.
fn days_from_civil(y: i64, m: u64, d: u64) -> i64 {
    let m = i64::try_from(m).unwrap_or(1);
    let d = i64::try_from(d).unwrap_or(1);
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_formats_as_iso8601_utc() {
        assert_eq!(format_iso8601(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn known_instant_formats_and_parses_back() {
        let ms = 1_748_568_000_123;
        let text = format_iso8601(ms);
        assert_eq!(text, "2025-05-30T01:20:00.123Z");
        assert_eq!(parse_iso8601(&text), Some(ms));
    }

    #[test]
    fn leap_day_round_trips() {
        let text = "2024-02-29T23:59:59.999Z";
        let ms = parse_iso8601(text).unwrap();
        assert_eq!(format_iso8601(ms), text);
    }

    #[test]
    fn parse_accepts_missing_and_long_fractions() {
        assert_eq!(parse_iso8601("1970-01-01T00:00:01Z"), Some(1000));
        assert_eq!(parse_iso8601("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(parse_iso8601("1970-01-01T00:00:01.123456Z"), Some(1123));
    }

    #[test]
    fn parse_rejects_other_zones_and_garbage() {
        assert_eq!(parse_iso8601("2025-05-30T01:20:00+02:00"), None);
        assert_eq!(parse_iso8601("not a date at all!!!Z"), None);
        assert_eq!(parse_iso8601("2025-13-30T01:20:00Z"), None);
    }

    #[test]
    fn manual_clock_advances_by_its_step() {
        let c = ManualClock::new(10, 5);
        assert_eq!(c.now_ms(), 10);
        assert_eq!(c.now_ms(), 15);
        c.set(100);
        assert_eq!(c.now_ms(), 100);
    }
}
