//! The few JavaScript value semantics the chord wire inherits from upstream.
//!
//! Upstream validates with `Number.isInteger`, renders error details with `String(x)` and
//! `JSON.stringify`, and counts string lengths in UTF-16 code units. These helpers reproduce
//! exactly those behaviours over [`Value`].

use crate::value::{MAX_SAFE_INTEGER, Number, Value};

/// `Number.isInteger(v) && v >= 0`, as an index. Negative zero counts as `0`, as in JS.
pub(crate) fn non_negative_integer(v: &Value) -> Option<u64> {
    let Value::Number(n) = v else {
        return None;
    };
    number_as_non_negative_integer(n)
}

fn number_as_non_negative_integer(n: &Number) -> Option<u64> {
    match n.as_i64() {
        Some(i) => u64::try_from(i).ok(),
        // Integral floats do not exist in `Number` except negative zero.
        None if n.as_f64() == 0.0 => Some(0),
        None => None,
    }
}

/// A wire number for a count, index or sequence. Values above 2^53 − 1 cannot be carried;
/// they are clamped there (the validators reject them before anything is encoded).
pub(crate) fn safe_number(n: u64) -> Value {
    let clamped = i64::try_from(n)
        .unwrap_or(MAX_SAFE_INTEGER)
        .min(MAX_SAFE_INTEGER);
    Number::from_i64(clamped).map_or(Value::Null, Value::Number)
}

/// True when `n` can cross the wire as an exact integer.
pub(crate) fn is_safe(n: u64) -> bool {
    i64::try_from(n).is_ok_and(|i| i <= MAX_SAFE_INTEGER)
}

/// JavaScript `String(v)` for a JSON value.
pub(crate) fn js_string(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => js_number(n),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            // Array.prototype.join: null and undefined become "", everything else String().
            let mut out = String::new();
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if !item.is_null() {
                    out.push_str(&js_string(item));
                }
            }
            out
        }
        Value::Map(_) => "[object Object]".to_owned(),
    }
}

/// JavaScript `Number.prototype.toString()` for the numbers the wire can carry.
pub(crate) fn js_number(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    let f = n.as_f64();
    if f == 0.0 {
        // Negative zero prints as "0".
        return "0".to_owned();
    }
    // Integral floats cannot occur (|v| < 2^53 would be an int), so only the small-magnitude
    // exponent form differs from Rust's shortest round-trip rendering.
    if f.abs() < 1e-6 {
        let s = format!("{f:e}");
        // JS writes a sign on the exponent only when negative: Rust's "1e-7" already matches.
        return s;
    }
    format!("{f}")
}

/// `JSON.stringify(s)` for a string (serde_json escapes as JavaScript does for valid UTF-8).
pub(crate) fn json_string(s: &str) -> String {
    Value::String(s.to_owned()).to_json()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    #[test]
    fn string_of_values_follows_javascript() {
        assert_eq!(js_string(&v("null")), "null");
        assert_eq!(js_string(&v("true")), "true");
        assert_eq!(js_string(&v("1.5")), "1.5");
        assert_eq!(js_string(&v("-1")), "-1");
        assert_eq!(js_string(&v("1e-7")), "1e-7");
        assert_eq!(js_string(&v("[1,null,[2,3]]")), "1,,2,3");
        assert_eq!(js_string(&v("{}")), "[object Object]");
        assert_eq!(
            js_string(&Value::Number(Number::from_f64(-0.0).unwrap())),
            "0"
        );
    }

    #[test]
    fn negative_zero_is_a_non_negative_integer() {
        assert_eq!(
            non_negative_integer(&Value::Number(Number::from_f64(-0.0).unwrap())),
            Some(0)
        );
        assert_eq!(non_negative_integer(&v("-1")), None);
        assert_eq!(non_negative_integer(&v("1.5")), None);
        assert_eq!(non_negative_integer(&v("\"1\"")), None);
        assert_eq!(non_negative_integer(&v("7")), Some(7));
    }

    #[test]
    fn safe_numbers_clamp_at_the_javascript_limit() {
        assert_eq!(safe_number(3), v("3"));
        assert_eq!(safe_number(u64::MAX), v("9007199254740991"));
        assert!(is_safe(9_007_199_254_740_991));
        assert!(!is_safe(9_007_199_254_740_992));
    }
}
