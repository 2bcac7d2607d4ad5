//! `diff`: the producer side, turning two revisions of a state into a small op batch.
//!
//! The law: `apply(old, diff(old, new))` yields a value equal to `new`, map key order
//! included. The shapes follow upstream's flush-time differ (`diffValue` in `delta/index.ts`):
//!
//! * Equal values produce nothing; a change of type or of a scalar is `s` (`r` at the root).
//! * Strings: growth at the end is `a`; otherwise the longest suffix of the old string that
//!   is a prefix of the new one (a rolling window) gives `t` + `a`; otherwise `s`. At the root
//!   a changed string is `r`, since `a`/`t`/`s` cannot target the root.
//! * Maps: recurse into kept keys, `s` new keys, `d` removed ones. A map holding a reserved key
//!   (`__proto__`, `constructor`, `prototype`) is set whole, as no path may name it.
//! * Arrays of equal length: recurse per index. Otherwise a pure insertion or removal (common
//!   prefix and suffix cover the shorter array) is one `p`; anything else recurses on the
//!   common indexes and splices the tail. A splice covering the whole array, or a batch that
//!   would replace every common element anyway, becomes a set of the array (`r` at the root).
//!
//! Key order: applying `s` to a new key appends it, and `d` removes a key in place, so the
//! differ keeps the longest prefix of the new key order that already appears in the old
//! order, and deletes then re-sets every later key that existed before (upstream does not
//! preserve key order; our [`Map`] equality does).

use std::collections::{HashMap, HashSet};

use crate::chord::op::Op;
use crate::chord::path::{Path, PathSegment, is_reserved};
use crate::chord::utf16::utf16_len;
use crate::value::{Map, Value};

/// How far back into the old string the rolling-window search looks (upstream default).
pub const MAX_OVERLAP_SCAN: usize = 65_536;

/// The ops that turn `old` into `new` (see the module docs).
pub fn diff(old: &Value, new: &Value) -> Vec<Op> {
    let mut out = Vec::new();
    let mut path = Vec::new();
    diff_value(old, new, &mut path, &mut out);
    out
}

fn diff_value(before: &Value, after: &Value, path: &mut Path, out: &mut Vec<Op>) {
    match (before, after) {
        (Value::String(a), Value::String(b)) => diff_string(a, b, path, out),
        (Value::Array(a), Value::Array(b)) => diff_array(a, b, path, out),
        (Value::Map(a), Value::Map(b)) => diff_map(a, b, path, out),
        _ => {
            if before != after {
                emit_set(path, after, out);
            }
        }
    }
}

/// `s` at `path`, or `r` at the root.
fn emit_set(path: &Path, value: &Value, out: &mut Vec<Op>) {
    if path.is_empty() {
        out.push(Op::Replace(value.clone()));
    } else {
        out.push(Op::Set {
            path: path.clone(),
            value: value.clone(),
        });
    }
}

fn diff_string(before: &str, after: &str, path: &mut Path, out: &mut Vec<Op>) {
    if before == after {
        return;
    }
    if path.is_empty() {
        out.push(Op::Replace(Value::from(after)));
        return;
    }
    if let Some(tail) = after.strip_prefix(before) {
        out.push(Op::Append {
            path: path.clone(),
            text: tail.to_owned(),
        });
        return;
    }
    let shared = overlap(before, after, MAX_OVERLAP_SCAN);
    if shared == 0 {
        out.push(Op::Set {
            path: path.clone(),
            value: Value::from(after),
        });
        return;
    }
    // `shared` is a byte length at a character boundary of both strings.
    let dropped = before.get(..before.len() - shared).unwrap_or_default();
    out.push(Op::Truncate {
        path: path.clone(),
        count: utf16_len(dropped),
    });
    if let Some(tail) = after.get(shared..).filter(|t| !t.is_empty()) {
        out.push(Op::Append {
            path: path.clone(),
            text: tail.to_owned(),
        });
    }
}

/// The byte length of the longest suffix of `a` that is a prefix of `b`, searching at most
/// the last `scan` bytes of `a` (upstream `overlap`: a long probe first, then a one-character
/// probe, each giving up after 8 candidates; giving up returns 0, which only costs size).
pub(crate) fn overlap(a: &str, b: &str, scan: usize) -> usize {
    const PROBE: usize = 64;
    const MAX_CANDIDATES: usize = 8;
    if a.is_empty() || b.is_empty() || scan == 0 {
        return 0;
    }
    let tail = &a[a.ceil_char_boundary(a.len().saturating_sub(scan))..];
    let long = b.floor_char_boundary(PROBE);
    let one = b.chars().next().map_or(0, char::len_utf8);
    for head_len in [long, one] {
        if head_len == 0 {
            continue;
        }
        let head = &b[..head_len];
        let mut from = 0;
        let mut tried = 0;
        while let Some(found) = tail.get(from..).and_then(|rest| rest.find(head)) {
            let k = from + found;
            tried += 1;
            if tried > MAX_CANDIDATES {
                break;
            }
            let candidate = &tail[k..];
            if b.starts_with(candidate) {
                return candidate.len();
            }
            from = k + tail[k..].chars().next().map_or(1, char::len_utf8);
        }
        if head_len == one {
            break;
        }
    }
    0
}

fn diff_map(before: &Map, after: &Map, path: &mut Path, out: &mut Vec<Op>) {
    // Reserved keys cannot be addressed by a path, so such a map is replaced whole, but only
    // when it actually changed.
    if before.keys().chain(after.keys()).any(is_reserved) {
        if before == after {
            return;
        }
        emit_set(path, &Value::Map(after.clone()), out);
        return;
    }
    let old: Vec<(&str, &Value)> = before.iter().collect();
    let position: HashMap<&str, usize> =
        old.iter().enumerate().map(|(i, (k, _))| (*k, i)).collect();
    let new_keys: HashSet<&str> = after.keys().collect();

    // The longest prefix of the new key order whose keys keep their relative old order: those
    // stay in place; every later key is (re)appended in the new order.
    let mut kept = 0;
    let mut last: Option<usize> = None;
    for key in after.keys() {
        match position.get(key) {
            Some(&p) if last.is_none_or(|l| p > l) => {
                last = Some(p);
                kept += 1;
            }
            _ => break,
        }
    }
    for (i, (key, value)) in after.iter().enumerate() {
        path.push(PathSegment::key(key));
        match position.get(key).and_then(|&p| old.get(p)) {
            Some((_, previous)) if i < kept => diff_value(previous, value, path, out),
            Some(_) => {
                // Present but out of order: remove it so the set appends it in place.
                out.push(Op::Delete { path: path.clone() });
                emit_set(path, value, out);
            }
            None => emit_set(path, value, out),
        }
        path.pop();
    }
    for (key, _) in &old {
        if !new_keys.contains(key) {
            path.push(PathSegment::key(*key));
            out.push(Op::Delete { path: path.clone() });
            path.pop();
        }
    }
}

fn diff_array(before: &[Value], after: &[Value], path: &mut Path, out: &mut Vec<Op>) {
    if before.len() == after.len() {
        if !diff_elements(before, after, path, out) {
            emit_set(path, &Value::Array(after.to_vec()), out);
        }
        return;
    }
    let prefix = before.iter().zip(after).take_while(|(a, b)| a == b).count();
    let shorter = before.len().min(after.len());
    let suffix = before[prefix..]
        .iter()
        .rev()
        .zip(after[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    if prefix + suffix == shorter {
        let remove = before.len() - prefix - suffix;
        if prefix == 0 && remove == before.len() {
            emit_set(path, &Value::Array(after.to_vec()), out);
        } else {
            out.push(Op::Splice {
                path: path.clone(),
                index: prefix as u64,
                remove: remove as u64,
                items: after[prefix..after.len() - suffix].to_vec(),
            });
        }
        return;
    }
    // Movement combined with edits: keep the per-index edits, splice the tail.
    if !diff_elements(&before[..shorter], &after[..shorter], path, out) {
        emit_set(path, &Value::Array(after.to_vec()), out);
        return;
    }
    if after.len() > before.len() {
        out.push(Op::Splice {
            path: path.clone(),
            index: before.len() as u64,
            remove: 0,
            items: after[before.len()..].to_vec(),
        });
    } else {
        out.push(Op::Splice {
            path: path.clone(),
            index: after.len() as u64,
            remove: (before.len() - after.len()) as u64,
            items: Vec::new(),
        });
    }
}

/// Diffs equal-length slices index by index and returns `true`. When no element survives
/// (every index would be set whole) it emits nothing and returns `false`: one set of the
/// whole array is smaller, and the caller emits that instead.
fn diff_elements(before: &[Value], after: &[Value], path: &mut Path, out: &mut Vec<Op>) -> bool {
    let start = out.len();
    let mut retained = false;
    for (i, (a, b)) in before.iter().zip(after).enumerate() {
        path.push(PathSegment::Index(i as u64));
        let from = out.len();
        diff_value(a, b, path, out);
        let whole = out.len() == from + 1
            && matches!(out.last(), Some(Op::Set { path: p, .. }) if p == path);
        retained |= !whole;
        path.pop();
    }
    if retained || before.is_empty() {
        return true;
    }
    out.truncate(start);
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chord::apply::apply;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    fn ops_json(ops: &[Op]) -> String {
        Value::Array(ops.iter().map(Op::to_value).collect()).to_json()
    }

    /// Diffs, checks the law, and returns the ops as JSON.
    fn check(old: &str, new: &str) -> String {
        let (old, new) = (v(old), v(new));
        let ops = diff(&old, &new);
        let mut replica = old;
        apply(&mut replica, &ops).unwrap();
        assert_eq!(replica.to_json(), new.to_json(), "ops: {}", ops_json(&ops));
        ops_json(&ops)
    }

    #[test]
    fn string_growth_is_an_append() {
        assert_eq!(
            check(r#"{"s":"","pad":"p"}"#, r#"{"s":"abcd","pad":"p"}"#),
            r#"[["a",["s"],"abcd"]]"#
        );
    }

    #[test]
    fn rolling_window_is_truncate_then_append() {
        assert_eq!(
            check(r#"{"s":"abcdefgh"}"#, r#"{"s":"defghxyz"}"#),
            r#"[["t",["s"],3],["a",["s"],"xyz"]]"#
        );
        assert_eq!(
            check(r#"{"s":"abcdefgh"}"#, r#"{"s":"defgh"}"#),
            r#"[["t",["s"],3]]"#
        );
    }

    #[test]
    fn truncation_counts_utf16_code_units() {
        assert_eq!(
            check(r#"{"s":"😀é-abc"}"#, r#"{"s":"abcdef"}"#),
            r#"[["t",["s"],4],["a",["s"],"def"]]"#
        );
    }

    #[test]
    fn unrelated_strings_are_set() {
        assert_eq!(
            check(r#"{"s":"abc"}"#, r#"{"s":"xyz"}"#),
            r#"[["s",["s"],"xyz"]]"#
        );
    }

    #[test]
    fn array_push_is_one_splice() {
        assert_eq!(
            check(r#"{"xs":[1,2],"pad":"p"}"#, r#"{"xs":[1,2,3],"pad":"p"}"#),
            r#"[["p",["xs"],2,0,[3]]]"#
        );
        assert_eq!(check("[1,2,3,4]", "[1,2,3,4,4]"), r#"[["p",[],4,0,[4]]]"#);
        assert_eq!(
            check(r#"{"xs":[1]}"#, r#"{"xs":[1,{"value":3},null,null]}"#),
            r#"[["p",["xs"],1,0,[{"value":3},null,null]]]"#
        );
    }

    #[test]
    fn removed_fields_are_deleted() {
        assert_eq!(
            check(r#"{"a":1,"pad":"p"}"#, r#"{"pad":"p"}"#),
            r#"[["d",["a"]]]"#
        );
    }

    #[test]
    fn whole_array_rewrites_become_sets() {
        assert_eq!(check("[1,2,3]", "[9]"), r#"[["r",[9]]]"#);
        assert_eq!(
            check(r#"{"xs":[1,2,3],"pad":"p"}"#, r#"{"xs":[9],"pad":"p"}"#),
            r#"[["s",["xs"],[9]]]"#
        );
        assert_eq!(check("[1,2,3]", "[]"), r#"[["r",[]]]"#);
        assert_eq!(
            check(r#"{"a":1,"xs":[1,2,3]}"#, r#"{"a":2,"xs":[9]}"#),
            r#"[["s",["a"],2],["s",["xs"],[9]]]"#
        );
    }

    #[test]
    fn root_changes_of_scalars_and_strings_are_replacements() {
        assert_eq!(check("1", "2"), r#"[["r",2]]"#);
        assert_eq!(check(r#""ab""#, r#""abc""#), r#"[["r","abc"]]"#);
        assert_eq!(check("{}", "[]"), r#"[["r",[]]]"#);
        assert_eq!(check(r#"{"a":1}"#, r#"{"a":1}"#), "[]");
    }

    #[test]
    fn reassigned_objects_are_deep_diffed() {
        assert_eq!(
            check(
                r#"{"message":{"content":[{"text":"hello"}],"count":0}}"#,
                r#"{"message":{"content":[{"text":"hello world"}],"count":1}}"#
            ),
            r#"[["a",["message","content",0,"text"]," world"],["s",["message","count"],1]]"#
        );
        assert_eq!(
            check(
                r#"{"view":{"messages":[{"text":"a"},{"text":"b"}]}}"#,
                r#"{"view":{"messages":[{"text":"ax"},{"text":"b"},{"text":"c"}]}}"#
            ),
            r#"[["a",["view","messages",0,"text"],"x"],["p",["view","messages"],2,0,[{"text":"c"}]]]"#
        );
        assert_eq!(
            check(r#"{"a":{"b":1},"x":1}"#, r#"{"a":{"c":5},"x":1}"#),
            r#"[["s",["a","c"],5],["d",["a","b"]]]"#
        );
    }

    #[test]
    fn key_order_is_preserved() {
        assert_eq!(
            check(r#"{"a":1,"b":2}"#, r#"{"b":2,"a":1}"#),
            r#"[["d",["a"]],["s",["a"],1]]"#
        );
        assert_eq!(
            check(r#"{"x":1,"y":2}"#, r#"{"x":1,"n":0,"y":2}"#),
            r#"[["s",["n"],0],["d",["y"]],["s",["y"],2]]"#
        );
        check(r#"{"a":1,"b":2,"c":3}"#, r#"{"c":3,"a":1}"#);
        check(
            r#"{"a":{"x":[1,"s"]},"b":2}"#,
            r#"{"n":1,"b":3,"a":{"x":[1,"st"]}}"#,
        );
    }

    #[test]
    fn maps_with_reserved_keys_are_set_whole() {
        assert_eq!(
            check(
                r#"{"v":{"__proto__":1,"a":1}}"#,
                r#"{"v":{"__proto__":1,"a":2}}"#
            ),
            r#"[["s",["v"],{"__proto__":1,"a":2}]]"#
        );
        assert_eq!(
            check(r#"{"constructor":1}"#, r#"{"constructor":2}"#),
            r#"[["r",{"constructor":2}]]"#
        );
    }

    #[test]
    fn movement_with_edits_keeps_edits_and_splices_the_tail() {
        check(r#"{"xs":["ab","cd","ef"]}"#, r#"{"xs":["abx","zz"]}"#);
        check("[[1],[2],[3]]", "[[1,2],[3]]");
    }

    #[test]
    fn overlap_finds_the_longest_suffix_prefix() {
        assert_eq!(overlap("abcdefgh", "defghxyz", MAX_OVERLAP_SCAN), 5);
        assert_eq!(overlap("abcdef", "defghi", 0), 0);
        assert_eq!(overlap("aaaa", "aaab", MAX_OVERLAP_SCAN), 3);
        assert_eq!(overlap("xé", "éy", MAX_OVERLAP_SCAN), "é".len());
    }
}
