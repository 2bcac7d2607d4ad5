//! `apply`: run decoded ops against a value, with upstream's resolution rules and errors.
//!
//! The rules (upstream `applyOps` / `resolve`):
//!
//! * `r` replaces the root.
//! * `p` and `m` address their target by the full path (`[]` is the root), which must be an
//!   array, else `unresolvable path: <path>`.
//! * `s d a t` address the *parent* by the path less its last segment; the parent must be an
//!   object or an array, else `unresolvable path: <parent path>`.
//! * Walking a path: every step must be an own key of an object, or a number below the length
//!   of an array. A string step into an array is `unsafe path segment: <seg>`; a missing step
//!   is `unresolvable path: <path being resolved>`.
//! * Under an array, the last segment must be a number no further than one past the end,
//!   else `unsafe path segment: <seg>`. `s` at the length appends; `d` needs an existing
//!   element (`unresolvable path: <path>` otherwise); `a`/`t` need an existing string.
//! * Under an object, a number segment is the key spelled in decimal; `d` of a missing key is
//!   a no-op.
//!
//! Application is not transactional: when an op fails, the ops before it have already
//! changed the value. Callers discard the value (a replica clears itself) on error.

use crate::chord::error::{ChordError, OpError};
use crate::chord::js::is_safe;
use crate::chord::op::{Op, check_non_empty};
use crate::chord::path::{PathSegment, unresolvable};
use crate::chord::utf16::drop_front_utf16;
use crate::value::Value;

/// Applies `ops` in order to `root`, cloning payloads out of the borrowed ops.
///
/// Every op is validated ([`Op::validate`]) just before it runs.
///
/// # Errors
/// A validation error, `unresolvable path: …` or `unsafe path segment: …`. The value may
/// already hold the effect of the ops before the failing one.
pub fn apply(root: &mut Value, ops: &[Op]) -> Result<(), ChordError> {
    ops.iter().try_for_each(|op| apply_op_ref(root, op))
}

/// Like [`apply`], moving payloads out of the ops instead of cloning them.
///
/// # Errors
/// As [`apply`].
pub fn apply_owned(root: &mut Value, ops: Vec<Op>) -> Result<(), ChordError> {
    ops.into_iter().try_for_each(|op| apply_op(root, op))
}

/// Applies one borrowed op: `d`, `a` and `t` (a streamed reply) run without copying the op;
/// the others clone it, since their payload moves into the value.
fn apply_op_ref(root: &mut Value, op: &Op) -> Result<(), ChordError> {
    match op {
        Op::Delete { path } => apply_leaf(root, path, LeafOp::Delete),
        Op::Append { path, text } => apply_leaf(root, path, LeafOp::Append(text)),
        Op::Truncate { path, count } => apply_leaf(root, path, LeafOp::Truncate(*count)),
        Op::Replace(_) | Op::Set { .. } | Op::Splice { .. } | Op::Permute { .. } => {
            apply_op(root, op.clone())
        }
    }
}

/// A `d`, `a` or `t` whose operands are borrowed from wherever they were read: a decoded
/// [`Op`], or the CBOR bytes of a client's frame (`StateDecoder::apply_update_cbor`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeafOp<'a> {
    Delete,
    Append(&'a str),
    Truncate(u64),
}

/// Applies `op` at `path`, validated first exactly as [`Op::validate`] validates the same
/// op, so both ways of applying it accept and refuse the same.
pub(crate) fn apply_leaf(
    root: &mut Value,
    path: &[PathSegment],
    op: LeafOp<'_>,
) -> Result<(), ChordError> {
    if let LeafOp::Truncate(count) = op
        && !is_safe(count)
    {
        return Err(OpError::TruncateShape.into());
    }
    check_non_empty(path)?;
    let leaf = match op {
        LeafOp::Delete => Leaf::Delete,
        LeafOp::Append(text) => Leaf::Append(text),
        LeafOp::Truncate(count) => Leaf::Truncate(count),
    };
    edit(root, path, leaf)
}

/// Applies one op.
fn apply_op(root: &mut Value, op: Op) -> Result<(), ChordError> {
    op.validate()?;
    match op {
        Op::Replace(value) => {
            *root = value;
            Ok(())
        }
        Op::Splice {
            path,
            index,
            remove,
            items,
        } => {
            let Value::Array(array) = resolve_container(root, &path)? else {
                return Err(unresolvable(&path));
            };
            let len = array.len();
            let start = clamp(index, len);
            let end = start.saturating_add(clamp(remove, len - start));
            array.splice(start..end, items);
            Ok(())
        }
        Op::Permute { path, permutation } => {
            let target = resolve_container(root, &path)?;
            match target {
                Value::Array(array) if array.len() == permutation.len() => {
                    permute(array, &permutation);
                    Ok(())
                }
                _ => Err(unresolvable(&path)),
            }
        }
        Op::Set { path, value } => edit(root, &path, Leaf::Set(value)),
        Op::Delete { path } => edit(root, &path, Leaf::Delete),
        Op::Append { path, text } => edit(root, &path, Leaf::Append(&text)),
        Op::Truncate { path, count } => edit(root, &path, Leaf::Truncate(count)),
    }
}

/// What `s d a t` do to the addressed slot.
enum Leaf<'a> {
    Set(Value),
    Delete,
    Append(&'a str),
    Truncate(u64),
}

/// Applies a leaf edit: resolves the parent, then writes `parent[key]`.
fn edit(root: &mut Value, path: &[PathSegment], leaf: Leaf<'_>) -> Result<(), ChordError> {
    let Some((key, parent_path)) = path.split_last() else {
        // Validation guarantees a non-empty path; keep the upstream message regardless.
        return Err(unresolvable(path));
    };
    match resolve_container(root, parent_path)? {
        Value::Array(array) => {
            let PathSegment::Index(index) = key else {
                return Err(key.unsafe_error());
            };
            let len = array.len();
            let index = match usize::try_from(*index) {
                Ok(i) if i <= len => i,
                _ => return Err(key.unsafe_error()),
            };
            match leaf {
                Leaf::Set(value) => {
                    if index == len {
                        array.push(value);
                    } else if let Some(slot) = array.get_mut(index) {
                        *slot = value;
                    }
                    Ok(())
                }
                Leaf::Delete => {
                    if index >= len {
                        return Err(unresolvable(path));
                    }
                    array.remove(index);
                    Ok(())
                }
                Leaf::Append(text) => edit_string(array.get_mut(index), path, |s| s.push_str(text)),
                Leaf::Truncate(count) => edit_string(array.get_mut(index), path, |s| {
                    *s = drop_front_utf16(s, count);
                }),
            }
        }
        Value::Map(map) => {
            let key = key.property_key();
            match leaf {
                Leaf::Set(value) => {
                    map.insert(key.into_owned(), value);
                    Ok(())
                }
                Leaf::Delete => {
                    map.remove(&key);
                    Ok(())
                }
                Leaf::Append(text) => edit_string(map.get_mut(&key), path, |s| s.push_str(text)),
                Leaf::Truncate(count) => edit_string(map.get_mut(&key), path, |s| {
                    *s = drop_front_utf16(s, count);
                }),
            }
        }
        // `resolve_container` only returns containers.
        _ => Err(unresolvable(parent_path)),
    }
}

/// Runs `f` on an existing string slot, else `unresolvable path: <path>`.
fn edit_string(
    slot: Option<&mut Value>,
    path: &[PathSegment],
    f: impl FnOnce(&mut String),
) -> Result<(), ChordError> {
    match slot {
        Some(Value::String(s)) => {
            f(s);
            Ok(())
        }
        _ => Err(unresolvable(path)),
    }
}

/// Walks `path` from `root` and returns the object or array it names (upstream `resolve`).
fn resolve_container<'v>(
    root: &'v mut Value,
    path: &[PathSegment],
) -> Result<&'v mut Value, ChordError> {
    let mut node = root;
    for segment in path {
        node = match node {
            Value::Array(array) => {
                let PathSegment::Index(index) = segment else {
                    return Err(segment.unsafe_error());
                };
                usize::try_from(*index)
                    .ok()
                    .and_then(|i| array.get_mut(i))
                    .ok_or_else(|| unresolvable(path))?
            }
            Value::Map(map) => map
                .get_mut(&segment.property_key())
                .ok_or_else(|| unresolvable(path))?,
            _ => return Err(unresolvable(path)),
        };
    }
    match node {
        Value::Array(_) | Value::Map(_) => Ok(node),
        _ => Err(unresolvable(path)),
    }
}

/// Clamps a wire count or index to `limit` (JavaScript splice clamping).
fn clamp(n: u64, limit: usize) -> usize {
    usize::try_from(n).map_or(limit, |n| n.min(limit))
}

/// `new[i] = old[permutation[i]]`; the caller checked the length and validation the bijection.
fn permute(array: &mut Vec<Value>, permutation: &[usize]) {
    let mut old: Vec<Option<Value>> = std::mem::take(array).into_iter().map(Some).collect();
    *array = permutation
        .iter()
        .map(|&from| {
            old.get_mut(from)
                .and_then(Option::take)
                .unwrap_or(Value::Null)
        })
        .collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    fn ops(json: &str) -> Vec<Op> {
        let Value::Array(items) = v(json) else {
            panic!("not an array")
        };
        items.iter().map(|op| Op::parse(op).unwrap()).collect()
    }

    fn run(initial: &str, batch: &str) -> Result<Value, String> {
        let mut value = v(initial);
        apply(&mut value, &ops(batch)).map_err(|e| e.to_string())?;
        Ok(value)
    }

    #[test]
    fn replace_adopts_the_new_root() {
        assert_eq!(run("null", r#"[["r",{"a":1}]]"#), Ok(v(r#"{"a":1}"#)));
    }

    #[test]
    fn set_writes_an_existing_index_and_appends_one_past_the_end() {
        assert_eq!(
            run(r#"{"xs":[1,2,3]}"#, r#"[["s",["xs",1],9]]"#),
            Ok(v(r#"{"xs":[1,9,3]}"#))
        );
        assert_eq!(
            run(r#"{"xs":[1,2,3]}"#, r#"[["s",["xs",3],9]]"#),
            Ok(v(r#"{"xs":[1,2,3,9]}"#))
        );
    }

    #[test]
    fn set_rejects_a_gap_and_a_huge_index() {
        assert_eq!(
            run(r#"{"xs":[1,2,3]}"#, r#"[["s",["xs",5],9]]"#),
            Err("unsafe path segment: 5".into())
        );
        assert_eq!(
            run(r#"{"xs":[]}"#, r#"[["s",["xs",4294967290],1]]"#),
            Err("unsafe path segment: 4294967290".into())
        );
    }

    #[test]
    fn string_spelled_array_indices_are_unsafe() {
        assert_eq!(
            run(r#"{"xs":[1,2,3]}"#, r#"[["s",["xs","7"],9]]"#),
            Err("unsafe path segment: 7".into())
        );
        assert_eq!(
            run(r#"{"xs":["a"]}"#, r#"[["a",["xs","0"],"b"]]"#),
            Err("unsafe path segment: 0".into())
        );
        assert_eq!(
            run(r#"{"xs":[{"a":1}]}"#, r#"[["s",["xs","0","a"],2]]"#),
            Err("unsafe path segment: 0".into())
        );
    }

    #[test]
    fn set_keeps_the_position_of_an_existing_key_and_appends_a_new_one() {
        assert_eq!(
            run(r#"{"a":1,"b":2}"#, r#"[["s",["a"],3],["s",["c"],4]]"#).map(|v| v.to_json()),
            Ok(r#"{"a":3,"b":2,"c":4}"#.into())
        );
    }

    #[test]
    fn number_segments_under_an_object_are_decimal_keys() {
        assert_eq!(
            run(r#"{"0":"x"}"#, r#"[["a",[0],"y"]]"#),
            Ok(v(r#"{"0":"xy"}"#))
        );
    }

    #[test]
    fn delete_of_a_missing_key_is_a_no_op() {
        assert_eq!(run(r#"{"a":1}"#, r#"[["d",["b"]]]"#), Ok(v(r#"{"a":1}"#)));
        assert_eq!(
            run(r#"{"a":1,"b":2}"#, r#"[["d",["a"]]]"#),
            Ok(v(r#"{"b":2}"#))
        );
    }

    #[test]
    fn delete_removes_an_array_element_but_not_one_past_the_end() {
        assert_eq!(
            run(r#"{"xs":[1,2]}"#, r#"[["d",["xs",0]]]"#),
            Ok(v(r#"{"xs":[2]}"#))
        );
        assert_eq!(
            run(r#"{"xs":[1]}"#, r#"[["d",["xs",1]]]"#),
            Err(r#"unresolvable path: ["xs",1]"#.into())
        );
        assert_eq!(
            run(r#"{"xs":[1]}"#, r#"[["d",["xs",2]]]"#),
            Err("unsafe path segment: 2".into())
        );
    }

    #[test]
    fn append_needs_an_existing_string() {
        assert_eq!(
            run(r#"{"s":"ab"}"#, r#"[["a",["s"],"cd"]]"#),
            Ok(v(r#"{"s":"abcd"}"#))
        );
        assert_eq!(
            run(r#"{"a":1}"#, r#"[["a",["missing"],"x"]]"#),
            Err(r#"unresolvable path: ["missing"]"#.into())
        );
        assert_eq!(
            run(r#"{"a":1}"#, r#"[["a",["a"],"x"]]"#),
            Err(r#"unresolvable path: ["a"]"#.into())
        );
        assert_eq!(
            run(r#"{"xs":["a"]}"#, r#"[["a",["xs",1],"x"]]"#),
            Err(r#"unresolvable path: ["xs",1]"#.into())
        );
    }

    #[test]
    fn truncate_drops_utf16_code_units_from_the_front() {
        assert_eq!(
            run(
                r#"{"s":"abcdefgh"}"#,
                r#"[["t",["s"],3],["a",["s"],"xyz"]]"#
            ),
            Ok(v(r#"{"s":"defghxyz"}"#))
        );
        assert_eq!(
            run(r#"{"s":"😀ab"}"#, r#"[["t",["s"],2]]"#),
            Ok(v(r#"{"s":"ab"}"#))
        );
        assert_eq!(
            run(r#"{"s":"😀ab"}"#, r#"[["t",["s"],1]]"#),
            Ok(v(r#"{"s":"\ufffdab"}"#))
        );
        assert_eq!(
            run(r#"{"s":"ab"}"#, r#"[["t",["s"],99]]"#),
            Ok(v(r#"{"s":""}"#))
        );
    }

    #[test]
    fn the_parent_must_resolve_to_a_container() {
        assert_eq!(
            run("null", r#"[["s",["a"],1]]"#),
            Err("unresolvable path: []".into())
        );
        assert_eq!(
            run(r#"{}"#, r#"[["s",["a","b"],1]]"#),
            Err(r#"unresolvable path: ["a"]"#.into())
        );
        assert_eq!(
            run(r#"{"a":1}"#, r#"[["s",["a","b"],1]]"#),
            Err(r#"unresolvable path: ["a"]"#.into())
        );
        assert_eq!(
            run(r#"{"a":{"b":"x"}}"#, r#"[["s",["a","b","c"],1]]"#),
            Err(r#"unresolvable path: ["a","b"]"#.into())
        );
    }

    #[test]
    fn splice_clamps_like_array_prototype_splice() {
        assert_eq!(
            run(r#"{"xs":[1,2]}"#, r#"[["p",["xs"],0,1e9,[]]]"#),
            Ok(v(r#"{"xs":[]}"#))
        );
        assert_eq!(
            run(r#"{"xs":[1,2]}"#, r#"[["p",["xs"],7,3,[9]]]"#),
            Ok(v(r#"{"xs":[1,2,9]}"#))
        );
        assert_eq!(
            run(r#"{"xs":[1,2,3]}"#, r#"[["p",["xs"],1,1,["a","b"]]]"#),
            Ok(v(r#"{"xs":[1,"a","b",3]}"#))
        );
        assert_eq!(
            run(r#"{"xs":[1]}"#, r#"[["p",["xs"],1,0,[null,null,9]]]"#),
            Ok(v(r#"{"xs":[1,null,null,9]}"#))
        );
        assert_eq!(run("[1,2,3]", r#"[["p",[],3,0,[4]]]"#), Ok(v("[1,2,3,4]")));
    }

    #[test]
    fn splice_needs_an_array() {
        assert_eq!(
            run(r#"{"xs":{}}"#, r#"[["p",["xs"],0,0,[]]]"#),
            Err(r#"unresolvable path: ["xs"]"#.into())
        );
        assert_eq!(
            run(r#"{"xs":"ab"}"#, r#"[["p",["xs"],0,0,[]]]"#),
            Err(r#"unresolvable path: ["xs"]"#.into())
        );
        assert_eq!(
            run(r#"{}"#, r#"[["p",[],0,0,[]]]"#),
            Err("unresolvable path: []".into())
        );
    }

    #[test]
    fn permute_reorders_an_array_of_the_same_length() {
        assert_eq!(
            run(
                r#"{"values":["a","b","c"]}"#,
                r#"[["m",["values"],[2,0,1]]]"#
            ),
            Ok(v(r#"{"values":["c","a","b"]}"#))
        );
        assert_eq!(run("[1,2]", r#"[["m",[],[1,0]]]"#), Ok(v("[2,1]")));
        assert_eq!(
            run(r#"{"values":["a"]}"#, r#"[["m",["values"],[1,0]]]"#),
            Err(r#"unresolvable path: ["values"]"#.into())
        );
    }

    #[test]
    fn prototype_walks_are_rejected() {
        let mut value = v(r#"{"constructor":[]}"#);
        let op = Op::Splice {
            path: vec![PathSegment::key("constructor")],
            index: 0,
            remove: 0,
            items: vec![Value::Null],
        };
        assert_eq!(
            apply(&mut value, &[op]).unwrap_err().to_string(),
            "unsafe path segment: constructor"
        );
        let mut value = v("{}");
        let op = Op::Set {
            path: vec![PathSegment::key("__proto__"), PathSegment::key("x")],
            value: Value::Bool(true),
        };
        assert_eq!(
            apply(&mut value, &[op]).unwrap_err().to_string(),
            "unsafe path segment: __proto__"
        );
        assert_eq!(value, v("{}"));
    }

    #[test]
    fn a_reserved_name_is_fine_as_a_value_key() {
        assert_eq!(
            run("{}", r#"[["s",["a"],{"__proto__":{"z":1}}]]"#),
            Ok(v(r#"{"a":{"__proto__":{"z":1}}}"#))
        );
    }
}
