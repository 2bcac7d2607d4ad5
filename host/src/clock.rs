//! Wall-clock time: the one place the runtime reads it, plus ISO-8601 text.
//!
//! Messages carry Unix milliseconds (`timestamp`), session entries carry ISO-8601 UTC text.
//! Everything that needs "now" takes a [`Clock`], so tests use [`ManualClock`] and are
//! deterministic.

use std::fmt;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use time::UtcDateTime;
use time::format_description::BorrowedFormatItem;

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

/// Formats Unix milliseconds as ISO-8601 UTC with milliseconds (`2025-05-30T01:20:00.123Z`),
/// the form JavaScript's `Date.toISOString` writes. An instant after 9999-12-31T23:59:59.999Z
/// (which four year digits cannot hold) is written as that last instant.
pub fn format_iso8601(ms: u64) -> String {
    let t = i128::from(ms)
        .checked_mul(1_000_000)
        .and_then(|nanos| UtcDateTime::from_unix_timestamp_nanos(nanos).ok())
        .unwrap_or(UtcDateTime::MAX);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// Parses what [`format_iso8601`] writes, with the fraction optional and of any length (cut to
/// milliseconds), in UTC (`Z`) only: `None` for anything else, an impossible date
/// (`2025-02-31`, `2023-02-29`) or an instant before 1970.
pub fn parse_iso8601(text: &str) -> Option<u64> {
    // The year's description would also take a sign (`+2025-…`), which is not the form above.
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let [with_fraction, whole_seconds] = &*ISO8601_UTC;
    let t = UtcDateTime::parse(text, with_fraction.as_slice())
        .or_else(|_| UtcDateTime::parse(text, whole_seconds.as_slice()))
        .ok()?;
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// `YYYY-MM-DDTHH:MM:SS.fractionZ` and `YYYY-MM-DDTHH:MM:SSZ` (descriptions parsed at run time
/// have no optional items).
static ISO8601_UTC: LazyLock<[Vec<BorrowedFormatItem<'static>>; 2]> = LazyLock::new(|| {
    let parse = |description| {
        time::format_description::parse_borrowed::<2>(description)
            .expect("the ISO-8601 format descriptions are valid")
    };
    [
        parse("[year range:standard]-[month]-[day]T[hour]:[minute]:[second].[subsecond]Z"),
        parse("[year range:standard]-[month]-[day]T[hour]:[minute]:[second]Z"),
    ]
});

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
        assert_eq!(parse_iso8601("1970-01-01T00:00:01.1234567891Z"), Some(1123));
    }

    #[test]
    fn parse_rejects_other_zones_and_garbage() {
        assert_eq!(parse_iso8601("2025-05-30T01:20:00+02:00"), None);
        assert_eq!(parse_iso8601("2025-05-30T01:20:00+00:00"), None);
        assert_eq!(parse_iso8601("2025-05-30t01:20:00z"), None);
        assert_eq!(parse_iso8601("not a date at all!!!Z"), None);
        assert_eq!(parse_iso8601("2025-13-30T01:20:00Z"), None);
        assert_eq!(parse_iso8601("2025-05-30T24:00:00Z"), None);
        assert_eq!(parse_iso8601("2025-05-30T01:20:00.Z"), None);
        assert_eq!(parse_iso8601("2025-05-30T01:20:00.123Z trailing"), None);
        assert_eq!(parse_iso8601("+2025-05-30T01:20:00Z"), None);
        assert_eq!(parse_iso8601("1969-12-31T23:59:59.999Z"), None);
    }

    #[test]
    fn parse_rejects_days_the_month_does_not_have() {
        assert_eq!(parse_iso8601("2025-02-31T12:00:00.000Z"), None);
        assert_eq!(parse_iso8601("2025-04-31T12:00:00.000Z"), None);
        assert_eq!(parse_iso8601("2023-02-29T12:00:00.000Z"), None);
        assert_eq!(parse_iso8601("1900-02-29T12:00:00.000Z"), None);
        assert_eq!(parse_iso8601("2025-01-00T12:00:00.000Z"), None);
        assert_eq!(parse_iso8601("2025-01-32T12:00:00.000Z"), None);
        assert!(parse_iso8601("2024-02-29T12:00:00.000Z").is_some());
        assert!(parse_iso8601("2000-02-29T12:00:00.000Z").is_some());
        assert!(parse_iso8601("2025-01-31T12:00:00.000Z").is_some());
    }

    #[test]
    fn what_is_written_parses_back_to_the_same_instant() {
        // Every millisecond boundary case, each day of a leap year, and the ends of the range.
        let day = 86_400_000;
        let leap_year_start = parse_iso8601("2024-01-01T00:00:00.000Z").unwrap();
        let instants = (0..366)
            .map(|d| leap_year_start + d * day + d * 3_600_123 % day)
            .chain([0, 1, 999, 1000, 951_782_400_000, 4_102_444_799_999])
            .chain([253_402_300_799_999]);
        for ms in instants {
            let text = format_iso8601(ms);
            assert_eq!(text.len(), 24, "{text}");
            assert_eq!(parse_iso8601(&text), Some(ms), "{text}");
        }
        assert_eq!(format_iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(
            format_iso8601(253_402_300_799_999),
            "9999-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn an_instant_past_year_9999_is_written_as_the_last_one_four_digits_hold() {
        assert_eq!(
            format_iso8601(253_402_300_800_000),
            "9999-12-31T23:59:59.999Z"
        );
        assert_eq!(format_iso8601(u64::MAX), "9999-12-31T23:59:59.999Z");
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
