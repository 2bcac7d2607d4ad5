//! `Op`: the decoded delta vocabulary (`r s d a t p m`), its validator and its tuple form.

use crate::chord::error::{ChordError, OpError};
use crate::chord::js::{is_safe, js_string, non_negative_integer, safe_number};
use crate::chord::path::{Path, PathSegment, check_safe_path, parse_path, path_to_value};
use crate::value::Value;

/// One decoded operation on a replicated value (upstream `Op`).
///
/// Paths are always inline here; path ids and short forms exist only on the wire
/// (see [`OpEncoder`](crate::chord::OpEncoder)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `["r", value]`: replace the whole value.
    Replace(Value),
    /// `["s", path≠[], value]`: set an object key, or an array element (up to one past the end).
    Set {
        /// Where (non-empty).
        path: Path,
        /// The new value.
        value: Value,
    },
    /// `["d", path≠[]]`: delete an object key (missing is fine) or remove an array element.
    Delete {
        /// Where (non-empty).
        path: Path,
    },
    /// `["a", path≠[], text]`: append to an existing string.
    Append {
        /// Where (non-empty).
        path: Path,
        /// The appended text.
        text: String,
    },
    /// `["t", path≠[], count]`: drop the first `count` UTF-16 code units of a string.
    Truncate {
        /// Where (non-empty).
        path: Path,
        /// UTF-16 code units to drop from the front.
        count: u64,
    },
    /// `["p", path, index, remove, items]`: `Array.prototype.splice` with its clamping.
    Splice {
        /// The array (may be the root).
        path: Path,
        /// Where to start (clamped to the length).
        index: u64,
        /// How many to remove (clamped to what is there).
        remove: u64,
        /// What to insert.
        items: Vec<Value>,
    },
    /// `["m", path, permutation]`: reorder an array so `new[i] = old[permutation[i]]`.
    Permute {
        /// The array (may be the root).
        path: Path,
        /// A bijection on `0..len`.
        permutation: Vec<usize>,
    },
}

impl Op {
    /// The verb letter.
    pub fn verb(&self) -> &'static str {
        match self {
            Self::Replace(_) => "r",
            Self::Set { .. } => "s",
            Self::Delete { .. } => "d",
            Self::Append { .. } => "a",
            Self::Truncate { .. } => "t",
            Self::Splice { .. } => "p",
            Self::Permute { .. } => "m",
        }
    }

    /// The path, for every verb but `r`.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Replace(_) => None,
            Self::Set { path, .. }
            | Self::Delete { path }
            | Self::Append { path, .. }
            | Self::Truncate { path, .. }
            | Self::Splice { path, .. }
            | Self::Permute { path, .. } => Some(path),
        }
    }

    /// True for `r`.
    pub fn is_replace(&self) -> bool {
        matches!(self, Self::Replace(_))
    }

    /// Parses and validates one decoded op tuple (upstream `assertValidOp`).
    ///
    /// Wire-only forms (`#`, short forms, numeric path refs) are rejected. Payloads are not
    /// inspected.
    ///
    /// # Errors
    /// The validator's messages: `op is not a tuple`, `unknown op verb: X`, `r arity`,
    /// `s arity`, `d arity`, `a shape`, `t shape`, `p arity`, `p index`, `p remove`,
    /// `p items`, `m arity`, `m permutation is not an array`,
    /// `m permutation is not a bijection`, `path is not an array`, `path is empty`,
    /// `unsafe path segment: …`.
    pub fn parse(value: &Value) -> Result<Self, ChordError> {
        let Some((verb, args)) = value.as_array().and_then(|t| t.split_first()) else {
            return Err(OpError::NotTuple.into());
        };
        match (verb.as_str(), args) {
            (Some("r"), [value]) => Ok(Self::Replace(value.clone())),
            (Some("r"), _) => Err(OpError::ReplaceArity.into()),
            (Some("s"), [path, value]) => Ok(Self::Set {
                path: non_empty_path(path)?,
                value: value.clone(),
            }),
            (Some("s"), _) => Err(OpError::SetArity.into()),
            (Some("d"), [path]) => Ok(Self::Delete {
                path: non_empty_path(path)?,
            }),
            (Some("d"), _) => Err(OpError::DeleteArity.into()),
            (Some("a"), [path, Value::String(text)]) => Ok(Self::Append {
                path: non_empty_path(path)?,
                text: text.clone(),
            }),
            (Some("a"), _) => Err(OpError::AppendShape.into()),
            (Some("t"), [path, count]) => {
                let count = non_negative_integer(count).ok_or(OpError::TruncateShape)?;
                Ok(Self::Truncate {
                    path: non_empty_path(path)?,
                    count,
                })
            }
            (Some("t"), _) => Err(OpError::TruncateShape.into()),
            (Some("p"), [path, index, remove, items]) => {
                let path = parse_path(path)?;
                let (index, remove, items) = splice_operands(index, remove, items)?;
                Ok(Self::Splice {
                    path,
                    index,
                    remove,
                    items: items.clone(),
                })
            }
            (Some("p"), _) => Err(OpError::SpliceArity.into()),
            (Some("m"), [path, permutation]) => Ok(Self::Permute {
                path: parse_path(path)?,
                permutation: parse_permutation(permutation)?,
            }),
            (Some("m"), _) => Err(OpError::PermuteArity.into()),
            _ => Err(OpError::UnknownVerb(js_string(verb)).into()),
        }
    }

    /// Checks a typed op against the rules [`Op::parse`] enforces on tuples: non-empty paths
    /// for `s d a t`, safe segments, counts and indexes the wire can carry, and a bijective
    /// permutation.
    ///
    /// # Errors
    /// The same messages as [`Op::parse`].
    pub fn validate(&self) -> Result<(), ChordError> {
        match self {
            Self::Replace(_) => Ok(()),
            Self::Set { path, .. } | Self::Delete { path } | Self::Append { path, .. } => {
                check_non_empty(path)
            }
            Self::Truncate { path, count } => {
                if !is_safe(*count) {
                    return Err(OpError::TruncateShape.into());
                }
                check_non_empty(path)
            }
            Self::Splice {
                path,
                index,
                remove,
                ..
            } => {
                check_safe_path(path)?;
                if !is_safe(*index) {
                    return Err(OpError::SpliceIndex.into());
                }
                if !is_safe(*remove) {
                    return Err(OpError::SpliceRemove.into());
                }
                Ok(())
            }
            Self::Permute { path, permutation } => {
                check_safe_path(path)?;
                check_bijection(permutation)
            }
        }
    }

    /// The decoded tuple, e.g. `["s", ["a", 0], 1]`.
    pub fn to_value(&self) -> Value {
        let verb = Value::from(self.verb());
        Value::Array(match self {
            Self::Replace(value) => vec![verb, value.clone()],
            Self::Set { path, value } => vec![verb, path_to_value(path), value.clone()],
            Self::Delete { path } => vec![verb, path_to_value(path)],
            Self::Append { path, text } => {
                vec![verb, path_to_value(path), Value::from(text.as_str())]
            }
            Self::Truncate { path, count } => {
                vec![verb, path_to_value(path), safe_number(*count)]
            }
            Self::Splice {
                path,
                index,
                remove,
                items,
            } => vec![
                verb,
                path_to_value(path),
                safe_number(*index),
                safe_number(*remove),
                Value::Array(items.clone()),
            ],
            Self::Permute { path, permutation } => {
                vec![verb, path_to_value(path), permutation_to_value(permutation)]
            }
        })
    }
}

/// True when a batch begins with `r` (upstream `isBase`).
pub fn is_base(ops: &[Op]) -> bool {
    ops.first().is_some_and(Op::is_replace)
}

fn non_empty_path(value: &Value) -> Result<Path, ChordError> {
    let path = parse_path(value)?;
    if path.is_empty() {
        return Err(OpError::PathEmpty.into());
    }
    Ok(path)
}

pub(crate) fn check_non_empty(path: &[PathSegment]) -> Result<(), ChordError> {
    if path.is_empty() {
        return Err(OpError::PathEmpty.into());
    }
    check_safe_path(path)
}

/// The `index, remove, items` operands of a splice, checked in upstream's order.
pub(crate) fn splice_operands<'a>(
    index: &Value,
    remove: &Value,
    items: &'a Value,
) -> Result<(u64, u64, &'a Vec<Value>), ChordError> {
    let index = non_negative_integer(index).ok_or(OpError::SpliceIndex)?;
    let remove = non_negative_integer(remove).ok_or(OpError::SpliceRemove)?;
    let items = items.as_array().ok_or(OpError::SpliceItems)?;
    Ok((index, remove, items))
}

/// Parses a permutation (upstream `assertPermutation`).
pub(crate) fn parse_permutation(value: &Value) -> Result<Vec<usize>, ChordError> {
    let items = value.as_array().ok_or(OpError::PermutationNotArray)?;
    let permutation = items
        .iter()
        .map(|item| non_negative_integer(item).and_then(|i| usize::try_from(i).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or(OpError::PermutationNotBijection)?;
    check_bijection(&permutation)?;
    Ok(permutation)
}

fn check_bijection(permutation: &[usize]) -> Result<(), ChordError> {
    let mut seen = vec![false; permutation.len()];
    for &index in permutation {
        match seen.get_mut(index) {
            Some(slot @ false) => *slot = true,
            _ => return Err(OpError::PermutationNotBijection.into()),
        }
    }
    Ok(())
}

pub(crate) fn permutation_to_value(permutation: &[usize]) -> Value {
    Value::Array(
        permutation
            .iter()
            .map(|&i| safe_number(u64::try_from(i).unwrap_or(u64::MAX)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chord::path::PathSegment;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    fn err(json: &str) -> String {
        Op::parse(&v(json)).unwrap_err().to_string()
    }

    #[test]
    fn decoded_ops_round_trip_through_their_tuples() {
        for json in [
            r#"["r",{"a":1}]"#,
            r#"["s",["a"],1]"#,
            r#"["d",["a"]]"#,
            r#"["a",["a"],"x"]"#,
            r#"["t",["a"],2]"#,
            r#"["p",["a"],0,0,[]]"#,
            r#"["p",[],4,0,[4]]"#,
            r#"["m",["values"],[2,0,1]]"#,
            r#"["m",[],[]]"#,
        ] {
            let op = Op::parse(&v(json)).unwrap();
            op.validate().unwrap();
            assert_eq!(op.to_value().to_json(), json);
        }
    }

    #[test]
    fn wire_only_forms_are_rejected_by_the_decoded_validator() {
        assert_eq!(err(r#"["s",1]"#), "s arity");
        assert_eq!(err(r#"["d"]"#), "d arity");
        assert_eq!(err(r#"["a","x"]"#), "a shape");
        assert_eq!(err(r#"["t",2]"#), "t shape");
        assert_eq!(err(r#"["p",0,0,[]]"#), "p arity");
        assert_eq!(err(r##"["#",0,["a"]]"##), "unknown op verb: #");
        assert_eq!(err(r#"["s",0,1]"#), "path is not an array");
    }

    #[test]
    fn validator_messages_follow_upstream() {
        assert_eq!(err("[]"), "op is not a tuple");
        assert_eq!(err(r#"{"op":"s"}"#), "op is not a tuple");
        assert_eq!(err("null"), "op is not a tuple");
        assert_eq!(err(r#"["ZZZ",["a"],9]"#), "unknown op verb: ZZZ");
        assert_eq!(err(r#"[1,["a"],9]"#), "unknown op verb: 1");
        assert_eq!(err(r#"["r"]"#), "r arity");
        assert_eq!(err(r#"["s","a",9]"#), "path is not an array");
        assert_eq!(err(r#"["s",[],9]"#), "path is empty");
        assert_eq!(err(r#"["a",["a"],1]"#), "a shape");
        assert_eq!(err(r#"["t",["a"],-1]"#), "t shape");
        assert_eq!(err(r#"["t",["a"],1.5]"#), "t shape");
        assert_eq!(err(r#"["p",["xs"],-1,0,[]]"#), "p index");
        assert_eq!(err(r#"["p",["xs"],0,-1,[]]"#), "p remove");
        assert_eq!(err(r#"["p",["xs"],0,0,"not-an-array"]"#), "p items");
        assert_eq!(err(r#"["m",["xs"]]"#), "m arity");
        assert_eq!(err(r#"["m",["xs"],{}]"#), "m permutation is not an array");
        assert_eq!(
            err(r#"["m",["values"],[0,0]]"#),
            "m permutation is not a bijection"
        );
        assert_eq!(
            err(r#"["m",["values"],[1,2]]"#),
            "m permutation is not a bijection"
        );
        assert_eq!(
            err(r#"["s",["constructor","prototype","gadget"],true]"#),
            "unsafe path segment: constructor"
        );
        assert_eq!(
            err(r#"["s",["__proto__","w"],true]"#),
            "unsafe path segment: __proto__"
        );
    }

    #[test]
    fn payloads_are_not_inspected() {
        assert!(Op::parse(&v(r#"["s",["x"],["r",{"evil":true}]]"#)).is_ok());
        assert!(Op::parse(&v(r#"["s",["a"],{"__proto__":{"z":1}}]"#)).is_ok());
    }

    #[test]
    fn typed_validation_matches_the_tuple_rules() {
        let empty = Op::Set {
            path: vec![],
            value: Value::Null,
        };
        assert_eq!(empty.validate().unwrap_err().to_string(), "path is empty");
        let unsafe_key = Op::Delete {
            path: vec![PathSegment::key("prototype")],
        };
        assert_eq!(
            unsafe_key.validate().unwrap_err().to_string(),
            "unsafe path segment: prototype"
        );
        let bad_perm = Op::Permute {
            path: vec![],
            permutation: vec![1, 1],
        };
        assert_eq!(
            bad_perm.validate().unwrap_err().to_string(),
            "m permutation is not a bijection"
        );
        let huge = Op::Splice {
            path: vec![],
            index: u64::MAX,
            remove: 0,
            items: vec![],
        };
        assert_eq!(huge.validate().unwrap_err().to_string(), "p index");
    }

    #[test]
    fn base_batches_begin_with_a_replacement() {
        assert!(is_base(&[Op::Replace(Value::Null)]));
        assert!(!is_base(&[]));
        assert!(!is_base(&[Op::Delete {
            path: vec![PathSegment::key("a")]
        }]));
    }
}
