//! A figure of the report: [`Measured::Value`] or [`Measured::NotMeasured`] (its section or
//! implementation did not run). The tables format a figure only through [`Measured::show`]
//! and judge it only through [`judge`] / [`judge_growth`], so no number and no "met" ever
//! stands for a figure that was not taken.

use crate::util::{fmt_num, fmt_ratio};

/// What the report prints for a figure that was not measured.
pub const NOT_MEASURED: &str = "not measured";

/// A figure that was measured, or was not.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Measured<T> {
    /// The measured value.
    Value(T),
    /// Not measured: the section or the implementation was not selected, or the run had no
    /// room for it (said on stderr).
    #[default]
    NotMeasured,
}

impl<T> Measured<T> {
    /// The value through `f`, or still not measured.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Measured<U> {
        match self {
            Self::Value(v) => Measured::Value(f(v)),
            Self::NotMeasured => Measured::NotMeasured,
        }
    }

    /// A borrowed view.
    pub fn as_ref(&self) -> Measured<&T> {
        match self {
            Self::Value(v) => Measured::Value(v),
            Self::NotMeasured => Measured::NotMeasured,
        }
    }

    /// Both values, or not measured if either is not.
    pub fn zip<U>(self, other: Measured<U>) -> Measured<(T, U)> {
        match (self, other) {
            (Self::Value(a), Measured::Value(b)) => Measured::Value((a, b)),
            _ => Measured::NotMeasured,
        }
    }

    /// A note on the value for a label (a count, a limit), or nothing when not measured.
    pub fn note(self, f: impl FnOnce(T) -> String) -> String {
        match self {
            Self::Value(v) => f(v),
            Self::NotMeasured => String::new(),
        }
    }

    /// The value formatted by `f`, or [`NOT_MEASURED`].
    pub fn show(self, f: impl FnOnce(T) -> String) -> String {
        match self {
            Self::Value(v) => f(v),
            Self::NotMeasured => NOT_MEASURED.to_owned(),
        }
    }
}

impl<T> From<Option<T>> for Measured<T> {
    fn from(v: Option<T>) -> Self {
        v.map_or(Self::NotMeasured, Self::Value)
    }
}

impl Measured<f64> {
    /// [`fmt_num`] of the value, or [`NOT_MEASURED`].
    pub fn num(self) -> String {
        self.show(fmt_num)
    }

    /// [`fmt_ratio`] of the value, or [`NOT_MEASURED`].
    pub fn times(self) -> String {
        self.show(fmt_ratio)
    }

    /// `self ÷ other`.
    pub fn ratio(self, other: Self) -> Self {
        self.zip(other).map(|(a, b)| a / b)
    }
}

/// A goal a figure is judged against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// The figure must be at least this.
    AtLeast(f64),
    /// The figure must be at most this.
    AtMost(f64),
}

/// The status column for `v` against `goal`: "met", "missed (…)", [`NOT_MEASURED`], or
/// "–" for a measured figure that is not a number (a window that counted nothing).
pub fn judge(v: Measured<f64>, goal: Goal) -> String {
    let Measured::Value(v) = v else {
        return NOT_MEASURED.to_owned();
    };
    if !v.is_finite() {
        return "–".to_owned();
    }
    match goal {
        Goal::AtLeast(g) if v >= g => "met".to_owned(),
        Goal::AtLeast(g) => format!("missed ({:.0}% of goal)", v / g * 100.0),
        Goal::AtMost(g) if v <= g => "met".to_owned(),
        Goal::AtMost(g) => format!("missed ({:.0}% over)", (v / g - 1.0) * 100.0),
    }
}

/// The status column for a resident-memory growth `v` (bytes, signed) against "at most
/// `max` bytes": as [`judge`], except that a drop is not judged at all. RSS that fell while
/// things were added means something else released memory during the measurement, so the
/// figure says nothing about the cost of the things added, and a negative number must not
/// pass for "met".
pub fn judge_growth(v: Measured<f64>, max: f64) -> String {
    match v {
        Measured::Value(b) if b < 0.0 => "not judged: RSS fell during the measurement".to_owned(),
        _ => judge(v, Goal::AtMost(max)),
    }
}

/// A signed byte count with its KiB: `5,034 B (4.9 KiB)`, `-1,200 B (-1.2 KiB)`.
pub fn fmt_bytes(v: Measured<f64>) -> String {
    v.show(|b| format!("{} B ({:.1} KiB)", fmt_num(b), b / 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_not_measured_prints_as_not_measured_and_is_never_met() {
        let v = Measured::<f64>::NotMeasured;
        assert_eq!(v.num(), "not measured");
        assert_eq!(fmt_bytes(v), "not measured");
        assert_eq!(judge(v, Goal::AtMost(8_192.0)), "not measured");
        assert_eq!(judge(v, Goal::AtLeast(0.0)), "not measured");
        assert_eq!(judge_growth(v, 8_192.0), "not measured");
    }

    #[test]
    fn a_note_on_a_figure_not_measured_is_empty() {
        assert_eq!(
            Measured::<usize>::NotMeasured.note(|n| format!(", {n} clients")),
            ""
        );
        assert_eq!(
            Measured::Value(4).note(|n| format!(", {n} clients")),
            ", 4 clients"
        );
    }

    #[test]
    fn a_ratio_with_a_side_not_measured_is_not_measured() {
        let one = Measured::Value(2.0);
        assert_eq!(one.ratio(Measured::NotMeasured), Measured::NotMeasured);
        assert_eq!(Measured::NotMeasured.ratio(one), Measured::NotMeasured);
        assert_eq!(one.ratio(Measured::Value(4.0)), Measured::Value(0.5));
    }

    #[test]
    fn a_measured_zero_prints_as_zero() {
        assert_eq!(fmt_bytes(Measured::Value(0.0)), "0.00 B (0.0 KiB)");
        assert_eq!(judge(Measured::Value(0.0), Goal::AtMost(1.0)), "met");
    }

    #[test]
    fn an_rss_drop_prints_signed_and_is_not_judged_met() {
        let drop = Measured::Value(-1_200.0);
        assert_eq!(fmt_bytes(drop), "-1,200 B (-1.2 KiB)");
        let status = judge_growth(drop, 8_192.0);
        assert!(status.starts_with("not judged"), "{status}");
    }

    #[test]
    fn growth_within_and_over_the_goal() {
        assert_eq!(judge_growth(Measured::Value(5_034.0), 8_192.0), "met");
        assert_eq!(
            judge_growth(Measured::Value(9_011.2), 8_192.0),
            "missed (10% over)"
        );
    }

    #[test]
    fn a_measured_figure_that_is_not_a_number_is_a_dash_not_met() {
        assert_eq!(judge(Measured::Value(f64::NAN), Goal::AtMost(3.0)), "–");
        assert_eq!(
            judge(Measured::Value(f64::INFINITY), Goal::AtMost(3.0)),
            "–"
        );
    }

    #[test]
    fn at_least_goals() {
        assert_eq!(judge(Measured::Value(1.5), Goal::AtLeast(1.5)), "met");
        assert_eq!(
            judge(Measured::Value(0.75), Goal::AtLeast(1.5)),
            "missed (50% of goal)"
        );
    }
}
