//! The common provider update read straight from its CBOR bytes.
//!
//! Nearly every update a client receives is a singleton `state` batch of appends, truncates
//! and deletes addressed by path id (a streaming reply). [`parse_state_update`] reads exactly
//! that shape in place: keys, verbs and text are borrowed from the bytes and nothing is
//! allocated but the op list. Any other op is decoded into a [`Value`] and validated by the
//! shared [`WireOp::parse`]. For anything else (another update type, a keyed instance, a
//! field of another type, any doubt at all) it returns `None`, and the caller takes the
//! general path: decode the bytes into a [`Value`] and parse that. So the fast path only ever
//! accepts, and never decides an error; the differential tests hold it to the general path.

use crate::cbor::Reader;
use crate::chord::apply::{LeafOp, apply_leaf};
use crate::chord::delta_codec::OpDecoder;
use crate::chord::error::ChordError;
use crate::chord::path::{Path, PathSegment, parse_path, unresolvable};
use crate::chord::wire_op::{Ref, WireOp};
use crate::limits::VALIDATED;
use crate::value::Value;

/// The keys of a singleton `state` update, matched without a UTF-8 pass (equal bytes are
/// valid UTF-8; any other key is checked as usual).
const STATE_KEYS: [&str; 4] = ["type", "member", "sequence", "ops"];

/// A `state` update of the singleton, its ops not yet resolved against the dictionary.
#[derive(Debug)]
pub(crate) struct StateUpdate<'a> {
    pub(crate) member: &'a str,
    pub(crate) sequence: u64,
    pub(crate) ops: Vec<WireOp<'a>>,
}

/// One op read in place, or the index of an op tuple decoded into the side arena.
enum Slot<'a> {
    Ready(WireOp<'a>),
    Decoded(usize),
}

/// Reads `bytes` as `{"type":"state","member","sequence","ops"}` (keys in any order). `None`
/// means "not this shape (or not valid)": use the general path.
pub(crate) fn parse_state_update<'a>(
    bytes: &'a [u8],
    arena: &'a mut Vec<Value>,
) -> Option<StateUpdate<'a>> {
    let (member, sequence, slots) = read_state(bytes, arena)?;
    // Filled: from here on the arena is only read, and the ops borrow from it.
    let arena: &'a Vec<Value> = arena;
    let ops = slots
        .into_iter()
        .map(|slot| match slot {
            Slot::Ready(op) => Some(op),
            Slot::Decoded(i) => arena.get(i).and_then(|tuple| WireOp::parse(tuple).ok()),
        })
        .collect::<Option<Vec<_>>>()?;
    Some(StateUpdate {
        member,
        sequence,
        ops,
    })
}

/// Batches of up to this many ops keep their resolved ops from the one read of the bytes;
/// longer ones read their ops again to apply them (a streamed reply's batch has one or two).
const FEW: usize = 4;

/// A singleton `state` update whose every op is an `a`, `t` or `d` that [`read_op`] reads in
/// place and that resolves against its member's dictionary: the update the client applies
/// straight from its bytes ([`LeafUpdate::apply_to`]). Nothing is allocated (but an inline
/// path, which a stream interns on its second use).
pub(crate) struct LeafUpdate<'a, 'd> {
    pub(crate) member: &'a str,
    pub(crate) sequence: u64,
    codec: &'d OpDecoder,
    /// Where the ops start, and how many there are.
    ops: Reader<'a, 'static>,
    len: usize,
    /// The resolved ops of a batch of at most [`FEW`].
    few: [Option<(LeafOp<'a>, Resolved<'d>)>; FEW],
}

impl LeafUpdate<'_, '_> {
    /// Applies the ops to `value`, in order, as [`apply`](crate::chord::apply) applies the
    /// decoded ops (not transactional either).
    pub(crate) fn apply_to(&self, value: &mut Value) -> Result<(), ChordError> {
        if self.len <= FEW {
            for (op, path) in self.few.iter().flatten() {
                apply_leaf(value, path.path(), *op)?;
            }
            return Ok(());
        }
        // Read and resolved once already, so neither fails here.
        let mut r = self.ops.clone();
        let mut previous = None;
        for _ in 0..self.len {
            let (at, op) = read_op(&mut r)
                .and_then(leaf)
                .ok_or_else(|| unresolvable(&[]))?;
            let path = resolve(self.codec, at, previous.take()).ok_or_else(|| unresolvable(&[]))?;
            apply_leaf(value, path.path(), op)?;
            previous = Some(path);
        }
        Ok(())
    }
}

/// A leaf op's path, resolved as [`OpDecoder`] resolves it: the dictionary's, or its own.
#[derive(Clone)]
enum Resolved<'d> {
    Interned(&'d [PathSegment]),
    Inline(Path),
}

impl Resolved<'_> {
    fn path(&self) -> &[PathSegment] {
        match self {
            Self::Interned(path) => path,
            Self::Inline(path) => path,
        }
    }
}

/// Resolves `at` as `OpDecoder::decode_op` does for `a`/`t`/`d` (the previous path is the
/// last one an op of the batch resolved to); `None` where decoding would fail.
fn resolve<'d>(
    codec: &'d OpDecoder,
    at: Ref,
    previous: Option<Resolved<'d>>,
) -> Option<Resolved<'d>> {
    let path = match at {
        Ref::Previous => previous?,
        Ref::Id(id) => Resolved::Interned(codec.path(id)?),
        Ref::Inline(path) => Resolved::Inline(path),
    };
    (!path.path().is_empty()).then_some(path)
}

/// The operands of a leaf wire op.
fn leaf(op: WireOp<'_>) -> Option<(Ref, LeafOp<'_>)> {
    match op {
        WireOp::Append { at, text } => Some((at, LeafOp::Append(text))),
        WireOp::Truncate { at, count } => Some((at, LeafOp::Truncate(count))),
        WireOp::Delete { at } => Some((at, LeafOp::Delete)),
        _ => None,
    }
}

/// Reads `bytes` as a [`LeafUpdate`] in one pass, resolving each op against the dictionary
/// `codec_of` gives for the member (which must come before `ops`, as every encoder writes
/// it). `None` means "not this shape, not valid, or not resolvable": use the general path,
/// which reads everything this accepts the same way (the same [`read_op`] and resolution
/// rules, changing nothing: leaf ops define no path) and judges everything else.
pub(crate) fn read_leaf_update<'a, 'd>(
    bytes: &'a [u8],
    codec_of: impl FnOnce(&str) -> Option<&'d OpDecoder>,
) -> Option<LeafUpdate<'a, 'd>> {
    let mut few: [Option<(LeafOp<'a>, Resolved<'d>)>; FEW] = Default::default();
    let (member, sequence, (codec, ops, len)) = state_fields(bytes, |r, member| {
        let codec = codec_of(member?)?;
        let len = r.array_len(1).ok()??;
        let start = r.clone();
        let mut previous = None;
        for i in 0..len {
            let (at, op) = leaf(read_op(r)?)?;
            let path = resolve(codec, at, previous.take())?;
            if let Some(slot) = few.get_mut(i) {
                *slot = Some((op, path.clone()));
            }
            previous = Some(path);
        }
        Some((codec, start, len))
    })?;
    Some(LeafUpdate {
        member,
        sequence,
        codec,
        ops,
        len,
        few,
    })
}

/// The update's fields; ops that are not read in place are pushed to `arena`.
fn read_state<'a>(
    bytes: &'a [u8],
    arena: &mut Vec<Value>,
) -> Option<(&'a str, u64, Vec<Slot<'a>>)> {
    state_fields(bytes, |r, _member| read_ops(r, arena))
}

/// The four fields of a singleton `state` update (exactly those keys, each once: `instance`,
/// a keyed state, goes the general way), with its ops read by `ops`, which is given the
/// member if it came before them. `None` for anything else.
fn state_fields<'a, T>(
    bytes: &'a [u8],
    ops: impl FnOnce(&mut Reader<'a, 'static>, Option<&'a str>) -> Option<T>,
) -> Option<(&'a str, u64, T)> {
    let mut ops_reader = Some(ops);
    let mut r = Reader::new(bytes, &VALIDATED).ok()?;
    if r.map_len(0).ok()? != Some(4) {
        return None;
    }
    let (mut ty, mut member, mut sequence, mut read) = (false, None, None, None);
    for _ in 0..4 {
        match r.key_among(1, &STATE_KEYS).ok()? {
            "type" if !ty => {
                if r.text_or_skip_among(1, &["state"]).ok()?? != "state" {
                    return None;
                }
                ty = true;
            }
            "member" if member.is_none() => {
                member = Some(r.text_or_skip(1).ok()??).filter(|m| !m.is_empty());
                member?;
            }
            "sequence" if sequence.is_none() => {
                sequence = Some(r.unsigned(1).ok()??).filter(|s| *s >= 1);
                sequence?;
            }
            "ops" if read.is_none() => read = Some(ops_reader.take()?(&mut r, member)?),
            _ => return None,
        }
    }
    r.finish().ok()?;
    // Four distinct known keys were read, so all four are present.
    Some((member?, sequence?, read?))
}

fn read_ops<'a>(r: &mut Reader<'a, '_>, arena: &mut Vec<Value>) -> Option<Vec<Slot<'a>>> {
    let len = r.array_len(1).ok()??;
    // Never reserve more than the bytes could hold (one byte per op at least).
    let mut slots = Vec::with_capacity(len.min(r.remaining()));
    for _ in 0..len {
        let start = r.clone();
        match read_op(r) {
            Some(op) => slots.push(Slot::Ready(op)),
            None => {
                // Not a shape read in place: decode the tuple and let `WireOp::parse` judge.
                *r = start;
                arena.push(r.item(2).ok()?);
                slots.push(Slot::Decoded(arena.len() - 1));
            }
        }
    }
    Some(slots)
}

/// `a`, `t` and `d` in their full (path id or inline path) and short forms.
fn read_op<'a>(r: &mut Reader<'a, '_>) -> Option<WireOp<'a>> {
    let arity = r.array_len(2).ok()??;
    let verb = r.text_or_skip_among(3, &["a", "t", "d"]).ok()??;
    match (verb, arity) {
        ("a", 3) => {
            let at = reference(r)?;
            let text = r.text_or_skip(3).ok()??;
            Some(WireOp::Append { at, text })
        }
        ("a", 2) => Some(WireOp::Append {
            at: Ref::Previous,
            text: r.text_or_skip(3).ok()??,
        }),
        ("t", 3) => {
            let at = reference(r)?;
            let count = r.unsigned(3).ok()??;
            Some(WireOp::Truncate { at, count })
        }
        ("t", 2) => Some(WireOp::Truncate {
            at: Ref::Previous,
            count: r.unsigned(3).ok()??,
        }),
        ("d", 2) => Some(WireOp::Delete { at: reference(r)? }),
        ("d", 1) => Some(WireOp::Delete { at: Ref::Previous }),
        _ => None,
    }
}

/// A path id (unsigned integer) or an inline path array.
fn reference(r: &mut Reader<'_, '_>) -> Option<Ref> {
    if let Some(id) = r.unsigned(3).ok()? {
        return Some(Ref::Id(id));
    }
    if r.peek_major().ok()? != 4 {
        return None;
    }
    let path = r.item(3).ok()?;
    parse_path(&path).ok().map(Ref::Inline)
}
