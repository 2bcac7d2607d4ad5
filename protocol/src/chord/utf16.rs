//! String lengths and cuts in UTF-16 code units, the unit JavaScript (and so the `t` op) uses.

/// The replacement for a lone low surrogate left by a cut through a surrogate pair.
pub(crate) const REPLACEMENT: char = '\u{FFFD}';

/// The length of `s` in UTF-16 code units.
pub(crate) fn utf16_len(s: &str) -> u64 {
    s.chars().map(|c| c.len_utf16() as u64).sum()
}

/// `s.slice(count)` in JavaScript: drop the first `count` UTF-16 code units.
///
/// A count past the end leaves the empty string. A count that splits a surrogate pair (a
/// character outside the Basic Multilingual Plane) would leave JavaScript holding a lone low
/// surrogate, which no UTF-8 string (and no CBOR text string) can represent. The cut then
/// keeps one U+FFFD in its place: still exactly one UTF-16 code unit, so later `t` counts
/// stay aligned with a JavaScript replica, and U+FFFD is what a lone surrogate becomes
/// whenever JavaScript text is encoded as UTF-8.
pub(crate) fn drop_front_utf16(s: &str, count: u64) -> String {
    let mut remaining = count;
    for (at, c) in s.char_indices() {
        if remaining == 0 {
            return s[at..].to_owned();
        }
        let units = c.len_utf16() as u64;
        if units > remaining {
            // Only possible with a pair and one unit left: the cut falls inside it.
            let mut out = String::with_capacity(s.len() - at);
            out.push(REPLACEMENT);
            out.push_str(&s[at + c.len_utf8()..]);
            return out;
        }
        remaining -= units;
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_count_utf16_code_units() {
        assert_eq!(utf16_len("abc"), 3);
        assert_eq!(utf16_len("é"), 1);
        assert_eq!(utf16_len("😀"), 2);
        assert_eq!(utf16_len(""), 0);
    }

    #[test]
    fn truncation_drops_code_units_not_bytes_or_chars() {
        assert_eq!(drop_front_utf16("abcdefgh", 3), "defgh");
        assert_eq!(drop_front_utf16("éa", 1), "a");
        assert_eq!(drop_front_utf16("😀a", 2), "a");
        assert_eq!(drop_front_utf16("abc", 0), "abc");
        assert_eq!(drop_front_utf16("abc", 3), "");
        assert_eq!(drop_front_utf16("abc", 1_000), "");
    }

    #[test]
    fn truncation_through_a_surrogate_pair_keeps_one_replacement_unit() {
        let cut = drop_front_utf16("x😀yz", 2);
        assert_eq!(cut, "\u{FFFD}yz");
        // Still as many code units as JavaScript's lone-surrogate string "\uDE00yz".
        assert_eq!(utf16_len(&cut), 3);
        assert_eq!(drop_front_utf16(&cut, 1), "yz");
    }
}
