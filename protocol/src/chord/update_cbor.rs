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
use crate::chord::path::parse_path;
use crate::chord::wire_op::{Ref, WireOp};
use crate::limits::VALIDATED;
use crate::value::Value;

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

/// A singleton `state` update whose every op is an `a`, `t` or `d` that [`read_op`] reads in
/// place: the update the client applies straight from its bytes. Nothing is kept of the ops
/// but where they start; [`ops`](Self::ops) reads them again, so nothing is allocated (but an
/// inline path, which a stream interns on its second use).
pub(crate) struct LeafUpdate<'a> {
    pub(crate) member: &'a str,
    pub(crate) sequence: u64,
    ops: Reader<'a, 'static>,
    len: usize,
}

impl<'a> LeafUpdate<'a> {
    /// The ops, read from the bytes again: each reads as it did in [`read_leaf_update`].
    pub(crate) fn ops(&self) -> impl Iterator<Item = WireOp<'a>> {
        let mut r = self.ops.clone();
        (0..self.len).map_while(move |_| read_op(&mut r))
    }
}

/// Reads `bytes` as a [`LeafUpdate`]. `None` means "not this shape (or not valid)": use
/// [`parse_state_update`] or the general path, which read everything this accepts the same
/// way (the same [`read_op`]) and judge everything else.
pub(crate) fn read_leaf_update(bytes: &[u8]) -> Option<LeafUpdate<'_>> {
    let mut r = Reader::new(bytes, &VALIDATED).ok()?;
    if r.map_len(0).ok()? != Some(4) {
        return None;
    }
    let (mut ty, mut member, mut sequence, mut ops) = (false, None, None, None);
    for _ in 0..4 {
        match r.key(1).ok()? {
            "type" if !ty => {
                if r.text_or_skip(1).ok()?? != "state" {
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
            "ops" if ops.is_none() => {
                let len = r.array_len(1).ok()??;
                let start = r.clone();
                for _ in 0..len {
                    read_op(&mut r)?;
                }
                ops = Some((start, len));
            }
            _ => return None,
        }
    }
    r.finish().ok()?;
    let (ops, len) = ops?;
    Some(LeafUpdate {
        member: member?,
        sequence: sequence?,
        ops,
        len,
    })
}

/// The update's fields; ops that are not read in place are pushed to `arena`.
fn read_state<'a>(
    bytes: &'a [u8],
    arena: &mut Vec<Value>,
) -> Option<(&'a str, u64, Vec<Slot<'a>>)> {
    let mut r = Reader::new(bytes, &VALIDATED).ok()?;
    // Exactly the four keys: `instance` (a keyed state) goes the general way.
    if r.map_len(0).ok()? != Some(4) {
        return None;
    }
    let (mut ty, mut member, mut sequence, mut ops) = (false, None, None, None);
    for _ in 0..4 {
        match r.key(1).ok()? {
            "type" if !ty => {
                if r.text_or_skip(1).ok()?? != "state" {
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
            "ops" if ops.is_none() => ops = Some(read_ops(&mut r, arena)?),
            _ => return None,
        }
    }
    r.finish().ok()?;
    // Four distinct known keys were read, so all four are present.
    Some((member?, sequence?, ops?))
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
    let verb = r.text_or_skip(3).ok()??;
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
