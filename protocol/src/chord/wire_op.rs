//! Wire ops: the decoded vocabulary plus path ids (`#`), numeric refs and short forms.
//!
//! A wire op is a [`Value`] array. [`validate_wire_op`] is upstream's `assertValidWireOp`;
//! the crate-internal [`WireOp`] view is what the decoder works on after validation.
//!
//! | verb | full form | short form (previous path of the batch) |
//! | --- | --- | --- |
//! | `r` | `["r", value]` | — |
//! | `s` | `["s", ref, value]` | `["s", value]` |
//! | `d` | `["d", ref]` | `["d"]` |
//! | `a` | `["a", ref, text]` | `["a", text]` |
//! | `t` | `["t", ref, count]` | `["t", count]` |
//! | `p` | `["p", ref, index, remove, items]` | `["p", index, remove, items]` |
//! | `m` | `["m", ref, permutation]` | `["m", permutation]` |
//! | `#` | `["#", id, path]` defines a path id | — |
//!
//! A `ref` is an inline path array or a path id (an integer ≥ 0). The arity alone decides the
//! form: `["s", X]` is always the short form, `["d", X]` always the full one.

use crate::chord::error::{ChordError, OpError};
use crate::chord::js::{js_string, non_negative_integer};
use crate::chord::op::{parse_permutation, splice_operands};
use crate::chord::path::{Path, parse_path};
use crate::value::Value;

/// Validates one wire op (upstream `assertValidWireOp`).
///
/// # Errors
/// `op is not a tuple`, `unknown op verb: X`, `r arity`, `s arity`, `d arity`, `a value`,
/// `a arity`, `t count`, `t arity`, `p arity`, `p index`, `p remove`, `p items`, `m arity`,
/// `m permutation is not an array`, `m permutation is not a bijection`, `# shape`,
/// `bad path id`, `path is not an array`, `unsafe path segment: …`.
pub fn validate_wire_op(op: &Value) -> Result<(), ChordError> {
    WireOp::parse(op).map(|_| ())
}

/// Where a wire op's path comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ref {
    /// Short form: the previous path of the batch.
    Previous,
    /// A path id defined by `#`.
    Id(u64),
    /// An inline path.
    Inline(Path),
}

/// The operands of a validated wire op, borrowed from the tuple.
#[derive(Debug)]
pub(crate) enum WireOp<'a> {
    /// `["r", value]`.
    Replace(&'a Value),
    /// `["#", id, path]`.
    Define { id: u64, path: Path },
    /// `s`.
    Set { at: Ref, value: &'a Value },
    /// `d`.
    Delete { at: Ref },
    /// `a`.
    Append { at: Ref, text: &'a str },
    /// `t`.
    Truncate { at: Ref, count: u64 },
    /// `p`.
    Splice {
        at: Ref,
        index: u64,
        remove: u64,
        items: &'a [Value],
    },
    /// `m`.
    Permute { at: Ref, permutation: Vec<usize> },
}

impl<'a> WireOp<'a> {
    /// Validates and views one wire op, checking in upstream's order.
    pub(crate) fn parse(op: &'a Value) -> Result<Self, ChordError> {
        let Some((verb, args)) = op.as_array().and_then(|t| t.split_first()) else {
            return Err(OpError::NotTuple.into());
        };
        match verb.as_str() {
            Some("r") => match args {
                [value] => Ok(Self::Replace(value)),
                _ => Err(OpError::ReplaceArity.into()),
            },
            Some("s") => match args {
                [at, value] => Ok(Self::Set {
                    at: reference(at)?,
                    value,
                }),
                [value] => Ok(Self::Set {
                    at: Ref::Previous,
                    value,
                }),
                _ => Err(OpError::SetArity.into()),
            },
            Some("d") => match args {
                [at] => Ok(Self::Delete { at: reference(at)? }),
                [] => Ok(Self::Delete { at: Ref::Previous }),
                _ => Err(OpError::DeleteArity.into()),
            },
            Some("a") => {
                let (at, text) = match args {
                    [at, text] => (reference(at)?, text),
                    [text] => (Ref::Previous, text),
                    _ => return Err(OpError::AppendArity.into()),
                };
                let text = text.as_str().ok_or(OpError::AppendValue)?;
                Ok(Self::Append { at, text })
            }
            Some("t") => {
                let (at, count) = match args {
                    [at, count] => (reference(at)?, count),
                    [count] => (Ref::Previous, count),
                    _ => return Err(OpError::TruncateArity.into()),
                };
                let count = non_negative_integer(count).ok_or(OpError::TruncateCount)?;
                Ok(Self::Truncate { at, count })
            }
            Some("p") => {
                let (at, index, remove, items) = match args {
                    [at, index, remove, items] => (Some(at), index, remove, items),
                    [index, remove, items] => (None, index, remove, items),
                    _ => return Err(OpError::SpliceArity.into()),
                };
                let at = at.map_or(Ok(Ref::Previous), reference)?;
                let (index, remove, items) = splice_operands(index, remove, items)?;
                Ok(Self::Splice {
                    at,
                    index,
                    remove,
                    items,
                })
            }
            Some("m") => {
                let (at, permutation) = match args {
                    [at, permutation] => (reference(at)?, permutation),
                    [permutation] => (Ref::Previous, permutation),
                    _ => return Err(OpError::PermuteArity.into()),
                };
                Ok(Self::Permute {
                    at,
                    permutation: parse_permutation(permutation)?,
                })
            }
            Some("#") => match args {
                [id, path @ Value::Array(_)] => {
                    let id = non_negative_integer(id).ok_or(OpError::DefineShape)?;
                    Ok(Self::Define {
                        id,
                        path: parse_path(path)?,
                    })
                }
                _ => Err(OpError::DefineShape.into()),
            },
            _ => Err(OpError::UnknownVerb(js_string(verb)).into()),
        }
    }
}

/// A full-form path reference: an id (integer ≥ 0) or an inline safe path.
fn reference(value: &Value) -> Result<Ref, ChordError> {
    match value {
        Value::Number(_) => non_negative_integer(value)
            .map(Ref::Id)
            .ok_or_else(|| OpError::BadPathId.into()),
        _ => parse_path(value).map(Ref::Inline),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(json: &str) -> String {
        validate_wire_op(&Value::from_json(json).unwrap())
            .unwrap_err()
            .to_string()
    }

    fn ok(json: &str) {
        validate_wire_op(&Value::from_json(json).unwrap()).unwrap();
    }

    #[test]
    fn wire_only_forms_are_accepted_by_the_wire_validator() {
        for json in [
            r#"["s",1]"#,
            r#"["d"]"#,
            r#"["a","x"]"#,
            r#"["t",2]"#,
            r#"["p",0,0,[]]"#,
            r##"["#",0,["a"]]"##,
            r#"["s",0,1]"#,
            r#"["m",[1,0]]"#,
            r#"["m",0,[0]]"#,
            r#"["s",["a"],1]"#,
            r#"["r",{"a":1}]"#,
        ] {
            ok(json);
        }
    }

    #[test]
    fn wire_validator_messages_follow_upstream() {
        assert_eq!(err(r#"["?",0]"#), "unknown op verb: ?");
        assert_eq!(err("[]"), "op is not a tuple");
        assert_eq!(err(r#""s""#), "op is not a tuple");
        assert_eq!(err(r#"["r",1,2]"#), "r arity");
        assert_eq!(err(r#"["s"]"#), "s arity");
        assert_eq!(err(r#"["d",0,1]"#), "d arity");
        assert_eq!(err(r#"["a",0,1]"#), "a value");
        assert_eq!(err(r#"["a",1]"#), "a value");
        assert_eq!(err(r#"["a"]"#), "a arity");
        assert_eq!(err(r#"["t",["a"],-1]"#), "t count");
        assert_eq!(err(r#"["t",-1]"#), "t count");
        assert_eq!(err(r#"["t"]"#), "t arity");
        assert_eq!(err(r#"["p",0,0]"#), "p arity");
        assert_eq!(err(r#"["p",-1,0,0,[]]"#), "bad path id");
        assert_eq!(err(r#"["p",0,-1,0,[]]"#), "p index");
        assert_eq!(err(r#"["p",0,0.5,0,[]]"#), "p index");
        assert_eq!(err(r#"["p",0,0,-1,[]]"#), "p remove");
        assert_eq!(err(r#"["p",0,0,"x"]"#), "p items");
        assert_eq!(err(r#"["m"]"#), "m arity");
        assert_eq!(err(r#"["m",0,{}]"#), "m permutation is not an array");
        assert_eq!(err(r#"["m",[0,0]]"#), "m permutation is not a bijection");
        assert_eq!(err(r##"["#",0]"##), "# shape");
        assert_eq!(err(r##"["#",-1,["a"]]"##), "# shape");
        assert_eq!(err(r##"["#",0,"a"]"##), "# shape");
        assert_eq!(
            err(r##"["#",0,["__proto__","w"]]"##),
            "unsafe path segment: __proto__"
        );
        assert_eq!(err(r#"["s",1.5,1]"#), "bad path id");
        assert_eq!(err(r#"["s","a",1]"#), "path is not an array");
        assert_eq!(err(r#"["s",null,1]"#), "path is not an array");
        assert_eq!(
            err(r#"["s",["prototype"],1]"#),
            "unsafe path segment: prototype"
        );
    }

    #[test]
    fn arity_alone_decides_the_form() {
        // ["s", X] is the short form even when X looks like a path.
        let value = Value::from_json(r#"["s",["a"]]"#).unwrap();
        assert!(matches!(
            WireOp::parse(&value).unwrap(),
            WireOp::Set {
                at: Ref::Previous,
                ..
            }
        ));
        // ["d", X] is always the full form.
        let value = Value::from_json(r#"["d",["a"]]"#).unwrap();
        assert!(matches!(
            WireOp::parse(&value).unwrap(),
            WireOp::Delete { at: Ref::Inline(_) }
        ));
    }
}
