//! The delta codec: path interning and short forms between decoded ops and wire ops.
//!
//! One [`OpEncoder`]/[`OpDecoder`] pair per state stream (one replicated state member of one
//! subscription). The algorithm is upstream's `encoder()`/`decoder()` exactly:
//!
//! * A path is written inline on its first use. On its second use the encoder emits
//!   `["#", id, path]` (ids are dense: 0, 1, 2, … in order of definition) and refers to the id
//!   from then on.
//! * An op whose path equals the previous op's path *in the same batch* drops the path
//!   entirely (the short form, told apart by arity). Short forms never span batches and do
//!   not count as a use.
//! * `r` is emitted as is and resets the dictionary on both sides: a base batch is a recovery
//!   point, so everything after it must be self-contained.
//! * Paths are compared structurally (upstream compares `JSON.stringify(path)`), so `["0"]`
//!   and `[0]` differ, as do `["a\u0000b"]` and `["a","b"]`.

use std::collections::{BTreeMap, HashMap};

use crate::chord::error::ChordError;
use crate::chord::js::safe_number;
use crate::chord::op::{Op, permutation_to_value};
use crate::chord::path::{Path, path_to_value, unresolvable};
use crate::chord::wire_op::{Ref, WireOp};
use crate::value::Value;

/// Encodes decoded op batches of one state stream into wire ops.
///
/// The state is small and `Clone + Eq`: two encoders that compare equal produce identical
/// wire output for identical input, so a server may encode an update once and share the
/// bytes among subscribers whose encoders agree (cloning the advanced encoder into the
/// others).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpEncoder {
    /// Every path used since the last `r`: `None` after one use, `Some(id)` once interned.
    seen: HashMap<Path, Option<u64>>,
    /// The next id to define.
    next_id: u64,
}

impl OpEncoder {
    /// A fresh encoder (empty dictionary).
    pub fn new() -> Self {
        Self::default()
    }

    /// True when the dictionary is empty (fresh, or just after an `r`).
    pub fn is_fresh(&self) -> bool {
        self.seen.is_empty()
    }

    /// Encodes one batch.
    ///
    /// Every op is validated ([`Op::validate`]) before anything is encoded, so a rejected
    /// batch leaves the encoder unchanged.
    ///
    /// # Errors
    /// The first invalid op's validation error.
    pub fn encode(&mut self, ops: &[Op]) -> Result<Vec<Value>, ChordError> {
        ops.iter().try_for_each(Op::validate)?;
        let mut out = Vec::with_capacity(ops.len());
        let mut previous: Option<&Path> = None;
        for op in ops {
            let Some(path) = op.path() else {
                // `r`: emitted as is; the dictionary restarts.
                out.push(op.to_value());
                self.seen.clear();
                self.next_id = 0;
                previous = None;
                continue;
            };
            if previous == Some(path) {
                out.push(wire_tuple(op, None));
                continue;
            }
            let reference = match self.seen.get_mut(path) {
                Some(Some(id)) => safe_number(*id),
                Some(slot @ None) => {
                    let id = self.next_id;
                    self.next_id += 1;
                    *slot = Some(id);
                    out.push(Value::Array(vec![
                        Value::from("#"),
                        safe_number(id),
                        path_to_value(path),
                    ]));
                    safe_number(id)
                }
                None => {
                    self.seen.insert(path.clone(), None);
                    path_to_value(path)
                }
            };
            out.push(wire_tuple(op, Some(reference)));
            previous = Some(path);
        }
        Ok(out)
    }
}

/// The wire tuple of a non-`r` op: `[verb, reference?, ...operands]`.
fn wire_tuple(op: &Op, reference: Option<Value>) -> Value {
    let mut tuple = Vec::with_capacity(5);
    tuple.push(Value::from(op.verb()));
    tuple.extend(reference);
    match op {
        Op::Replace(value) | Op::Set { value, .. } => tuple.push(value.clone()),
        Op::Delete { .. } => {}
        Op::Append { text, .. } => tuple.push(Value::from(text.as_str())),
        Op::Truncate { count, .. } => tuple.push(safe_number(*count)),
        Op::Splice {
            index,
            remove,
            items,
            ..
        } => {
            tuple.push(safe_number(*index));
            tuple.push(safe_number(*remove));
            tuple.push(Value::Array(items.clone()));
        }
        Op::Permute { permutation, .. } => tuple.push(permutation_to_value(permutation)),
    }
    Value::Array(tuple)
}

/// Decodes wire op batches of one state stream back into decoded ops.
///
/// After an error the decoder's dictionary is unspecified: the stream is broken and the
/// caller discards it (upstream fails the connection).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpDecoder {
    /// Path ids defined since the last `r` (ordered: a lookup per op, on the client's hot
    /// path, costs a few comparisons instead of a SipHash of the id).
    paths: BTreeMap<u64, Path>,
}

impl OpDecoder {
    /// A fresh decoder (no ids defined).
    pub fn new() -> Self {
        Self::default()
    }

    /// The path defined for `id`, if any.
    pub(crate) fn path(&self, id: u64) -> Option<&Path> {
        self.paths.get(&id)
    }

    /// Decodes one batch, validating each wire op as it goes.
    ///
    /// # Errors
    /// A wire-op validation error; `unresolvable path: []` for a short form with no previous
    /// path in the batch (or an `s d a t` whose path is empty); `unresolvable path: <id>` for
    /// an undefined id.
    pub fn decode(&mut self, wire: &[Value]) -> Result<Vec<Op>, ChordError> {
        self.decode_iter(wire)
    }

    /// [`OpDecoder::decode`] over borrowed tuples, validating each as it goes.
    pub(crate) fn decode_iter<'a>(
        &mut self,
        wire: impl IntoIterator<Item = &'a Value>,
    ) -> Result<Vec<Op>, ChordError> {
        let wire = wire.into_iter();
        let mut out = Vec::with_capacity(wire.size_hint().0);
        let mut previous: Option<usize> = None;
        for tuple in wire {
            self.decode_op(WireOp::parse(tuple)?, &mut previous, &mut out)?;
        }
        Ok(out)
    }

    /// Decodes one batch of ops that were all validated already (by the snapshot and update
    /// parsers, which check a whole batch before any of it is decoded, as upstream does).
    pub(crate) fn decode_parsed<'a>(
        &mut self,
        wire: impl IntoIterator<Item = WireOp<'a>>,
    ) -> Result<Vec<Op>, ChordError> {
        let wire = wire.into_iter();
        let mut out = Vec::with_capacity(wire.size_hint().0);
        let mut previous: Option<usize> = None;
        for op in wire {
            self.decode_op(op, &mut previous, &mut out)?;
        }
        Ok(out)
    }

    /// Resolves one op's path against the dictionary and the batch's previous path.
    fn decode_op(
        &mut self,
        op: WireOp<'_>,
        previous: &mut Option<usize>,
        out: &mut Vec<Op>,
    ) -> Result<(), ChordError> {
        let (at, build): (Ref, Build<'_>) = match op {
            WireOp::Define { id, path } => {
                // Redefinition is allowed; a definition is not a "previous path".
                self.paths.insert(id, path);
                return Ok(());
            }
            WireOp::Replace(value) => {
                out.push(Op::Replace(value.clone()));
                self.paths.clear();
                *previous = None;
                return Ok(());
            }
            WireOp::Set { at, value } => (at, Build::Set(value)),
            WireOp::Delete { at } => (at, Build::Delete),
            WireOp::Append { at, text } => (at, Build::Append(text)),
            WireOp::Truncate { at, count } => (at, Build::Truncate(count)),
            WireOp::Splice {
                at,
                index,
                remove,
                items,
            } => (at, Build::Splice(index, remove, items)),
            WireOp::Permute { at, permutation } => (at, Build::Permute(permutation)),
        };
        // The previous path is the path of the last op pushed that named one (by id or
        // inline); it is read back from that op rather than kept as a second copy.
        let path = match at {
            Ref::Previous => previous
                .and_then(|i| out.get(i))
                .and_then(Op::path)
                .cloned()
                .ok_or_else(|| unresolvable(&[]))?,
            Ref::Id(id) => {
                *previous = None;
                self.paths
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| ChordError::UnresolvablePath(id.to_string()))?
            }
            Ref::Inline(path) => {
                *previous = None;
                path
            }
        };
        if path.is_empty() && !matches!(build, Build::Splice(..) | Build::Permute(_)) {
            return Err(unresolvable(&path));
        }
        if previous.is_none() {
            *previous = Some(out.len());
        }
        out.push(build.finish(path));
        Ok(())
    }
}

/// The operands of a decoded op waiting for its resolved path.
enum Build<'a> {
    Set(&'a Value),
    Delete,
    Append(&'a str),
    Truncate(u64),
    Splice(u64, u64, &'a [Value]),
    Permute(Vec<usize>),
}

impl Build<'_> {
    fn finish(self, path: Path) -> Op {
        match self {
            Self::Set(value) => Op::Set {
                path,
                value: value.clone(),
            },
            Self::Delete => Op::Delete { path },
            Self::Append(text) => Op::Append {
                path,
                text: text.to_owned(),
            },
            Self::Truncate(count) => Op::Truncate { path, count },
            Self::Splice(index, remove, items) => Op::Splice {
                path,
                index,
                remove,
                items: items.to_vec(),
            },
            Self::Permute(permutation) => Op::Permute { path, permutation },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(json: &str) -> Value {
        Value::from_json(json).unwrap()
    }

    fn ops(json: &str) -> Vec<Op> {
        v(json)
            .as_array()
            .unwrap()
            .iter()
            .map(|op| Op::parse(op).unwrap())
            .collect()
    }

    fn wire(json: &str) -> Vec<Value> {
        v(json).as_array().unwrap().clone()
    }

    fn json(wire: &[Value]) -> String {
        Value::Array(wire.to_vec()).to_json()
    }

    #[test]
    fn interns_on_second_use_not_first() {
        let mut enc = OpEncoder::new();
        let first = enc.encode(&ops(r#"[["a",["a","deep"],"1"]]"#)).unwrap();
        let second = enc.encode(&ops(r#"[["a",["a","deep"],"2"]]"#)).unwrap();
        assert_eq!(json(&first), r#"[["a",["a","deep"],"1"]]"#);
        assert_eq!(json(&second), r##"[["#",0,["a","deep"]],["a",0,"2"]]"##);
    }

    #[test]
    fn omits_the_path_when_it_repeats() {
        let mut enc = OpEncoder::new();
        let out = enc
            .encode(&ops(r#"[["s",["a"],1],["s",["a"],2]]"#))
            .unwrap();
        assert_eq!(json(&out), r#"[["s",["a"],1],["s",2]]"#);
    }

    #[test]
    fn base_batch_resets_the_table_so_recovery_is_self_contained() {
        let mut enc = OpEncoder::new();
        enc.encode(&ops(r#"[["a",["a","deep"],"1"]]"#)).unwrap();
        enc.encode(&ops(r#"[["a",["a","deep"],"2"]]"#)).unwrap();
        let base = enc.encode(&ops(r#"[["r",{"a":{"deep":"x"}}]]"#)).unwrap();
        assert!(enc.is_fresh());
        let after = enc.encode(&ops(r#"[["a",["a","deep"],"3"]]"#)).unwrap();
        assert_eq!(json(&base), r#"[["r",{"a":{"deep":"x"}}]]"#);
        assert_eq!(json(&after), r#"[["a",["a","deep"],"3"]]"#);

        let mut dec = OpDecoder::new();
        dec.decode(&base).unwrap();
        assert_eq!(
            dec.decode(&after).unwrap(),
            ops(r#"[["a",["a","deep"],"3"]]"#)
        );
    }

    #[test]
    fn decoder_clears_ids_on_a_base_batch() {
        let mut dec = OpDecoder::new();
        dec.decode(&wire(r##"[["#",0,["a"]],["a",0,"1"]]"##))
            .unwrap();
        dec.decode(&wire(r#"[["r",{"a":""}]]"#)).unwrap();
        let err = dec.decode(&wire(r#"[["a",0,"2"]]"#)).unwrap_err();
        assert_eq!(err.to_string(), "unresolvable path: 0");
    }

    #[test]
    fn short_form_without_a_previous_path_is_unresolvable() {
        let err = OpDecoder::new()
            .decode(&wire(r#"[["a","x"]]"#))
            .unwrap_err();
        assert_eq!(err.to_string(), "unresolvable path: []");
    }

    #[test]
    fn short_forms_do_not_span_batches() {
        let mut dec = OpDecoder::new();
        dec.decode(&wire(r#"[["s",["a"],1]]"#)).unwrap();
        let err = dec.decode(&wire(r#"[["s",2]]"#)).unwrap_err();
        assert_eq!(err.to_string(), "unresolvable path: []");
    }

    #[test]
    fn a_definition_does_not_become_the_previous_path() {
        let err = OpDecoder::new()
            .decode(&wire(r##"[["#",0,["a"]],["s",1]]"##))
            .unwrap_err();
        assert_eq!(err.to_string(), "unresolvable path: []");
    }

    #[test]
    fn an_empty_path_is_unresolvable_except_for_splice_and_permute() {
        let err = OpDecoder::new()
            .decode(&wire(r#"[["s",[],1]]"#))
            .unwrap_err();
        assert_eq!(err.to_string(), "unresolvable path: []");
        let decoded = OpDecoder::new()
            .decode(&wire(r#"[["p",[],0,0,[1]],["m",[1,0]]]"#))
            .unwrap();
        assert_eq!(decoded, ops(r#"[["p",[],0,0,[1]],["m",[],[1,0]]]"#));
    }

    #[test]
    fn negative_truncation_is_rejected_by_the_decoder() {
        let err = OpDecoder::new()
            .decode(&wire(r#"[["t",["a"],-1]]"#))
            .unwrap_err();
        assert_eq!(err.to_string(), "t count");
    }

    #[test]
    fn a_forbidden_path_behind_an_interned_id_is_rejected() {
        let err = OpDecoder::new()
            .decode(&wire(r##"[["#",0,["__proto__","w"]],["s",0,true]]"##))
            .unwrap_err();
        assert_eq!(err.to_string(), "unsafe path segment: __proto__");
    }

    #[test]
    fn paths_containing_null_characters_do_not_collide() {
        let batch = ops(r#"[["s",["a\u0000b"],1],["s",["a","b"],2]]"#);
        let encoded = OpEncoder::new().encode(&batch).unwrap();
        assert_eq!(OpDecoder::new().decode(&encoded).unwrap(), batch);
    }

    #[test]
    fn go_codec_golden_interleaved_paths() {
        let mut enc = OpEncoder::new();
        let batch =
            ops(r#"[["s",["p"],1],["s",["q"],2],["s",["p"],3],["s",["p"],4],["s",["q"],5]]"#);
        let out = enc.encode(&batch).unwrap();
        assert_eq!(
            json(&out),
            r##"[["s",["p"],1],["s",["q"],2],["#",0,["p"]],["s",0,3],["s",4],["#",1,["q"]],["s",1,5]]"##
        );
        assert_eq!(OpDecoder::new().decode(&out).unwrap(), batch);
    }

    #[test]
    fn go_codec_golden_permutations() {
        let mut enc = OpEncoder::new();
        let batch = ops(
            r#"[["m",["values"],[2,0,1]],["m",["values"],[1,2,0]],["s",["x"],1],["m",["values"],[0,2,1]],["m",[],[1,0]]]"#,
        );
        let out = enc.encode(&batch).unwrap();
        assert_eq!(
            json(&out),
            r##"[["m",["values"],[2,0,1]],["m",[1,2,0]],["s",["x"],1],["#",0,["values"]],["m",0,[0,2,1]],["m",[],[1,0]]]"##
        );
        assert_eq!(OpDecoder::new().decode(&out).unwrap(), batch);
    }

    #[test]
    fn go_codec_golden_rolling_window() {
        let batch = ops(r#"[["t",["output"],200],["a",["output"],"next chunk"]]"#);
        let out = OpEncoder::new().encode(&batch).unwrap();
        assert_eq!(json(&out), r#"[["t",["output"],200],["a","next chunk"]]"#);
        assert_eq!(OpDecoder::new().decode(&out).unwrap(), batch);
    }

    /// Appends `text` to `value[key]["deep"]`.
    fn append_deep(value: &mut Value, key: &str, text: &str) {
        let Some(Value::Map(inner)) = value.as_map().and_then(|m| m.get(key)).cloned() else {
            panic!("no {key}")
        };
        let mut inner = inner;
        let Some(Value::String(deep)) = inner.get_mut("deep") else {
            panic!("no deep")
        };
        deep.push_str(text);
        if let Value::Map(map) = value {
            map.insert(key, Value::Map(inner));
        }
    }

    #[test]
    fn a_stream_round_trips_exactly_and_recovers_from_its_last_base_batch() {
        let mut enc = OpEncoder::new();
        let mut dec = OpDecoder::new();
        let mut value = v(r#"{"a":{"deep":""},"b":{"deep":""}}"#);
        let mut wire = Vec::new();
        for i in 0..8 {
            let old = value.clone();
            append_deep(&mut value, "a", &format!("x{i}"));
            append_deep(&mut value, "b", &format!("y{i}"));
            let batch = if i == 5 {
                vec![Op::Replace(value.clone())]
            } else {
                crate::chord::tracker::diff(&old, &value)
            };
            let encoded = enc.encode(&batch).unwrap();
            assert_eq!(dec.decode(&encoded).unwrap(), batch);
            wire.push(encoded);
        }
        // From the second batch on, both paths are interned.
        assert_eq!(
            json(&wire[1]),
            r##"[["#",0,["a","deep"]],["a",0,"x1"],["#",1,["b","deep"]],["a",1,"y1"]]"##
        );
        let last_base = wire
            .iter()
            .rposition(|batch| {
                batch
                    .first()
                    .and_then(|op| op.as_array())
                    .and_then(|t| t.first())
                    == Some(&Value::from("r"))
            })
            .unwrap();
        assert_eq!(last_base, 5);
        let mut fresh = OpDecoder::new();
        let mut replica = Value::Null;
        for batch in &wire[last_base..] {
            crate::chord::apply::apply(&mut replica, &fresh.decode(batch).unwrap()).unwrap();
        }
        assert_eq!(replica, value);
    }

    #[test]
    fn an_invalid_batch_leaves_the_encoder_unchanged() {
        let mut enc = OpEncoder::new();
        enc.encode(&ops(r#"[["s",["a"],1]]"#)).unwrap();
        let before = enc.clone();
        let bad = [
            Op::Set {
                path: vec!["a".into()],
                value: Value::Null,
            },
            Op::Delete { path: vec![] },
        ];
        assert_eq!(enc.encode(&bad).unwrap_err().to_string(), "path is empty");
        assert_eq!(enc, before);
    }

    #[test]
    fn encoders_fed_the_same_stream_compare_equal() {
        let mut a = OpEncoder::new();
        let mut b = OpEncoder::new();
        for batch in [r#"[["s",["x"],1]]"#, r#"[["s",["x"],2],["s",["y"],3]]"#] {
            assert_eq!(
                a.encode(&ops(batch)).unwrap(),
                b.encode(&ops(batch)).unwrap()
            );
            assert_eq!(a, b);
        }
        b.encode(&ops(r#"[["s",["y"],4]]"#)).unwrap();
        assert_ne!(a, b);
    }
}
