//! Chord properties: the delta codec is lossless over random op streams, `diff` satisfies
//! `apply(old, diff(old, new)) == new`, and a replica fed through the full wire path
//! (encoder → CBOR → decoder → replica) converges to the producer's values. The decoder that
//! reads updates straight from their CBOR bytes agrees with the one that reads a `Value`.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a broken fixture should panic"
)]

use baton_protocol::cbor::{decode_value, to_vec};
use baton_protocol::chord::{
    InstanceAddress, InstanceSnapshot, MemberSnapshot, Op, OpDecoder, OpEncoder, PathSegment,
    ProviderUpdate, Replica, ServiceMode, StateDecoder, StateEncoder, SubscriptionSnapshot, apply,
    diff, validate_wire_op,
};
use baton_protocol::limits::CborLimits;
use baton_protocol::{Map, Number, Value};
use proptest::prelude::*;

const KEYS: [&str; 6] = ["a", "b", "c", "0", "10", "x y"];

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-1000i64..1000).prop_map(|i| Value::Number(Number::from_i64(i).unwrap())),
        (-1.0e3f64..1.0e3)
            .prop_filter_map("finite", |f| Number::from_f64(f).ok())
            .prop_map(Value::Number),
        "[abé😀 ]{0,8}".prop_map(Value::String),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(&KEYS[..]), inner), 0..5)
                .prop_map(|kv| Value::Map(kv.into_iter().collect::<Map>())),
        ]
    })
}

/// A tiny deterministic generator, so one proptest seed drives a whole mutation script.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn text(rng: &mut Rng) -> String {
    const ALPHABET: [&str; 5] = ["a", "b", "é", "😀", " "];
    (0..rng.below(6))
        .map(|_| ALPHABET[rng.below(ALPHABET.len())])
        .collect()
}

fn small_scalar(rng: &mut Rng) -> Value {
    match rng.below(7) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(50)),
        2 => Value::Number(Number::from_i64(rng.below(100) as i64).unwrap()),
        3 | 4 => Value::String(text(rng)),
        5 => Value::Array(
            (0..rng.below(4))
                .map(|_| Value::String(text(rng)))
                .collect(),
        ),
        _ => Value::Map(
            (0..rng.below(3))
                .map(|_| (KEYS[rng.below(KEYS.len())], Value::String(text(rng))))
                .collect(),
        ),
    }
}

/// A realistic edit of `value`: appends, rolling windows, pushes, removals, key churn and
/// reorders, nested edits, or a wholesale replacement.
fn mutate(value: &mut Value, rng: &mut Rng, depth: u32) {
    if rng.chance(8) || depth > 4 {
        *value = small_scalar(rng);
        return;
    }
    match value {
        Value::String(s) => match rng.below(3) {
            0 => s.push_str(&text(rng)),
            1 => {
                let keep: String = s.chars().skip(rng.below(4)).collect();
                *s = keep + &text(rng);
            }
            _ => *s = text(rng),
        },
        Value::Array(items) => match rng.below(5) {
            0 => items.push(small_scalar(rng)),
            1 if !items.is_empty() => {
                let at = rng.below(items.len());
                items.remove(at);
            }
            2 => {
                let at = rng.below(items.len() + 1);
                items.insert(at, small_scalar(rng));
            }
            3 if !items.is_empty() => items.reverse(),
            _ if !items.is_empty() => {
                let at = rng.below(items.len());
                mutate(&mut items[at], rng, depth + 1);
            }
            _ => items.push(Value::Array(vec![])),
        },
        Value::Map(map) => {
            let mut entries = std::mem::take(map).into_entries();
            match rng.below(5) {
                0 => {
                    let key = KEYS[rng.below(KEYS.len())].to_owned();
                    entries.retain(|(k, _)| *k != key);
                    entries.push((key, small_scalar(rng)));
                }
                1 if !entries.is_empty() => {
                    let at = rng.below(entries.len());
                    entries.remove(at);
                }
                2 if !entries.is_empty() => {
                    let by = rng.below(entries.len());
                    entries.rotate_left(by);
                }
                _ if !entries.is_empty() => {
                    let at = rng.below(entries.len());
                    mutate(&mut entries[at].1, rng, depth + 1);
                }
                _ => entries.push(("a".to_owned(), Value::Map(Map::new()))),
            }
            *map = entries.into_iter().collect();
        }
        _ => *value = small_scalar(rng),
    }
}

fn path() -> impl Strategy<Value = Vec<PathSegment>> {
    prop::collection::vec(
        prop_oneof![
            prop::sample::select(&KEYS[..]).prop_map(PathSegment::key),
            (0u64..3).prop_map(PathSegment::Index),
        ],
        0..3,
    )
}

fn non_empty_path() -> impl Strategy<Value = Vec<PathSegment>> {
    path().prop_filter("non-empty", |p| !p.is_empty())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => value().prop_map(Op::Replace),
        4 => (non_empty_path(), value()).prop_map(|(path, value)| Op::Set { path, value }),
        2 => non_empty_path().prop_map(|path| Op::Delete { path }),
        3 => (non_empty_path(), "[aé😀]{0,4}").prop_map(|(path, text)| Op::Append { path, text }),
        2 => (non_empty_path(), 0u64..10).prop_map(|(path, count)| Op::Truncate { path, count }),
        2 => (path(), 0u64..5, 0u64..5, prop::collection::vec(value(), 0..3))
            .prop_map(|(path, index, remove, items)| Op::Splice { path, index, remove, items }),
        2 => (path(), (0usize..5).prop_flat_map(|n| Just((0..n).collect::<Vec<_>>()).prop_shuffle()))
            .prop_map(|(path, permutation)| Op::Permute { path, permutation }),
    ]
}

/// Encodes a wire value to CBOR and back, as it crosses a real connection.
fn through_cbor(value: &Value) -> Value {
    let limits = CborLimits::default();
    decode_value(&to_vec(value, &limits).unwrap(), &limits).unwrap()
}

/// Operands a wire op might (wrongly or rightly) carry.
fn operand() -> impl Strategy<Value = Value> {
    prop::sample::select(vec![
        "0",
        "1",
        "2",
        "7",
        "-1",
        "1.5",
        "null",
        "true",
        r#""""#,
        r#""tok""#,
        r#"["text"]"#,
        r#"["list",0]"#,
        "[]",
        r#"["__proto__"]"#,
        "[0]",
        r#"["text","x"]"#,
        "{}",
        r#"[1,0]"#,
        r#"[[1]]"#,
    ])
    .prop_map(|json| Value::from_json(json).unwrap())
}

/// Wire op tuples near the valid ones: known and unknown verbs, any arity, mixed operands.
fn near_op() -> impl Strategy<Value = Value> {
    let verb = prop::sample::select(vec!["a", "t", "d", "#", "s", "r", "p", "m", "zz", "A"])
        .prop_map(Value::from);
    let head = prop_oneof![10 => verb, 1 => operand()];
    let near = (head, prop::collection::vec(operand(), 0..4)).prop_map(|(head, rest)| {
        let mut tuple = vec![head];
        tuple.extend(rest);
        Value::Array(tuple)
    });
    // Well-formed ops against `hydrated_decoder`'s state, so whole batches often decode.
    let valid = prop::sample::select(vec![
        r#"["a",0,"tok"]"#,
        r#"["a","tok"]"#,
        r#"["a",["text"],"x"]"#,
        r#"["a",5,"x"]"#,
        r#"["t",0,1]"#,
        r#"["t",2]"#,
        r#"["d",1]"#,
        r#"["d"]"#,
        r##"["#",2,["text"]]"##,
        r##"["#",0,["list",0]]"##,
        r#"["s",0,"v"]"#,
        r#"["s",["list",1],7]"#,
        r#"["r",{"text":"","list":[]}]"#,
        r#"["p",["list"],0,0,[1]]"#,
        r#"["m",["list"],[0]]"#,
    ])
    .prop_map(|json| Value::from_json(json).unwrap());
    prop_oneof![3 => valid, 1 => near]
}

/// `state` updates near the valid ones: fields missing, extra or of the wrong type.
fn near_state_update() -> impl Strategy<Value = Value> {
    let pick = |options: Vec<(u32, &'static str)>| {
        prop::strategy::Union::new_weighted(
            options
                .into_iter()
                .map(|(w, json)| (w, Just(json)))
                .collect(),
        )
    };
    let ty = pick(vec![(8, r#""state""#), (1, r#""unavailable""#), (1, "3")]);
    let member = pick(vec![
        (8, r#""left""#),
        (1, r#""nope""#),
        (1, r#""""#),
        (1, "1"),
    ]);
    let sequence = pick(vec![
        (4, "1"),
        (4, "2"),
        (1, "0"),
        (1, "-1"),
        (1, "1.5"),
        (1, r#""1""#),
    ]);
    let ops = prop_oneof![
        8 => prop::collection::vec(near_op(), 0..5).prop_map(Value::Array),
        1 => operand(),
    ];
    // Mostly none of either, sometimes one.
    let extra = prop_oneof![
        6 => Just(None),
        1 => Just(Some(("instance", r#"{"key":"k","generation":1}"#))),
        1 => Just(Some(("extra", "1"))),
    ];
    let drop =
        prop_oneof![6 => Just(None), 1 => prop::sample::select(vec![0usize, 2, 3]).prop_map(Some)];
    (ty, member, sequence, ops, extra, drop, any::<u64>()).prop_map(
        |(ty, member, sequence, ops, extra, drop, order)| {
            let mut fields = vec![
                ("type", Value::from_json(ty).unwrap()),
                ("member", Value::from_json(member).unwrap()),
                ("sequence", Value::from_json(sequence).unwrap()),
                ("ops", ops),
            ];
            if let Some((key, json)) = extra {
                fields.push((key, Value::from_json(json).unwrap()));
            }
            if let Some(i) = drop {
                fields.remove(i);
            }
            // Key order is free on the wire.
            let n = fields.len();
            fields.swap(0, (order % n as u64) as usize);
            let mut map = Map::new();
            for (key, value) in fields {
                map.insert(key, value);
            }
            Value::Map(map)
        },
    )
}

/// A decoder hydrated with a singleton whose `left` state has path ids 0 and 1 defined.
fn hydrated_decoder() -> StateDecoder {
    let mut decoder = StateDecoder::new();
    let snapshot = Value::from_json(
        r##"{"serviceId":"svc","mode":"singleton","instances":[{"members":[
            {"name":"left","kind":"state","sequence":1,"ops":[
                ["r",{"text":"","list":[0]}],["#",0,["text"]],["#",1,["list",0]]]}]}]}"##,
    )
    .unwrap();
    decoder.decode_snapshot(&snapshot).unwrap();
    decoder
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn updates_decoded_from_bytes_match_updates_decoded_from_values_result_and_state(
        updates in prop::collection::vec(near_state_update(), 1..4)
    ) {
        let mut by_value = hydrated_decoder();
        let mut by_bytes = by_value.clone();
        for update in &updates {
            let bytes = to_vec(update, &CborLimits::default()).unwrap();
            let expected = by_value.decode_update(update).map_err(|e| e.to_string());
            let got = by_bytes.decode_update_cbor(&bytes).map_err(|e| e.to_string());
            prop_assert_eq!(&got, &expected, "update {}", update.to_json());
            prop_assert_eq!(&by_bytes, &by_value);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn codec_streams_decode_to_the_original_ops(
        batches in prop::collection::vec(prop::collection::vec(op(), 0..6), 1..6)
    ) {
        let mut encoder = OpEncoder::new();
        let mut decoder = OpDecoder::new();
        for batch in &batches {
            let wire = encoder.encode(batch).unwrap();
            for op in &wire {
                prop_assert!(validate_wire_op(op).is_ok(), "invalid wire op {}", op.to_json());
            }
            let wire = through_cbor(&Value::Array(wire));
            let decoded = decoder.decode(wire.as_array().unwrap()).unwrap();
            prop_assert_eq!(&decoded, batch);
        }
    }

    #[test]
    fn diff_of_independent_values_applies_to_the_new_value(old in value(), new in value()) {
        let ops = diff(&old, &new);
        let mut replica = old;
        apply(&mut replica, &ops).unwrap();
        prop_assert_eq!(replica, new);
    }

    #[test]
    fn diff_of_edited_values_applies_to_the_edited_value(old in value(), seed in any::<u64>(), edits in 1usize..6) {
        let mut rng = Rng(seed | 1);
        let mut new = old.clone();
        for _ in 0..edits {
            mutate(&mut new, &mut rng, 0);
        }
        let ops = diff(&old, &new);
        let mut replica = old.clone();
        apply(&mut replica, &ops).unwrap();
        prop_assert_eq!(&replica, &new);
        if old == new {
            prop_assert!(ops.is_empty());
        }
    }

    #[test]
    fn singleton_replica_converges_through_the_wire(
        initial in prop::collection::vec(value(), 2..3),
        seed in any::<u64>(),
        steps in 1usize..24,
    ) {
        let names = ["left", "right"];
        let mut rng = Rng(seed | 1);
        let mut values = initial;
        let mut sequences = [0u64; 2];
        let snapshot = |values: &[Value], sequences: &[u64]| {
            SubscriptionSnapshot::new(
                "svc",
                ServiceMode::Singleton,
                vec![InstanceSnapshot::new(
                    None,
                    vec![
                        MemberSnapshot::method("call"),
                        MemberSnapshot::state(names[0], sequences[0], values[0].clone()),
                        MemberSnapshot::state(names[1], sequences[1], values[1].clone()),
                    ],
                )],
            )
        };
        let mut encoder = StateEncoder::new();
        let mut decoder = StateDecoder::new();
        let mut replica = Replica::new("svc", ServiceMode::Singleton);
        let wire = through_cbor(&encoder.encode_snapshot(&snapshot(&values, &sequences)).unwrap());
        replica.apply_snapshot(decoder.decode_snapshot(&wire).unwrap()).unwrap();
        // The client's path: updates decoded from their bytes, applied by reference.
        let mut byte_decoder = decoder.clone();
        let mut byte_replica = replica.clone();

        for _ in 0..steps {
            let update = if rng.chance(10) {
                ProviderUpdate::Reset { snapshot: snapshot(&values, &sequences) }
            } else {
                let member = rng.below(2);
                let old = values[member].clone();
                let ops = if rng.chance(10) {
                    mutate(&mut values[member], &mut rng, 0);
                    vec![Op::Replace(values[member].clone())]
                } else {
                    mutate(&mut values[member], &mut rng, 0);
                    diff(&old, &values[member])
                };
                if ops.is_empty() {
                    continue;
                }
                sequences[member] += 1;
                ProviderUpdate::State {
                    instance: None,
                    member: names[member].to_owned(),
                    sequence: sequences[member],
                    ops,
                }
            };
            let wire = through_cbor(&encoder.encode_update(&update).unwrap());
            let decoded = decoder.decode_update(&wire).unwrap();
            prop_assert_eq!(&decoded, &update);
            let from_bytes = byte_decoder
                .decode_update_cbor(&to_vec(&wire, &CborLimits::default()).unwrap())
                .unwrap();
            prop_assert_eq!(&from_bytes, &update);
            prop_assert_eq!(&byte_decoder, &decoder);
            byte_replica.apply_update_ref(&from_bytes).unwrap();
            replica.apply_update(decoded).unwrap();
            prop_assert_eq!(&byte_replica, &replica);
            for (member, name) in names.iter().enumerate() {
                prop_assert_eq!(replica.value(None, name), Some(&values[member]));
                prop_assert_eq!(replica.sequence(None, name), Some(sequences[member]));
            }
        }
    }

    #[test]
    fn keyed_replica_converges_through_the_wire(seed in any::<u64>(), steps in 1usize..32) {
        let mut rng = Rng(seed | 1);
        // key → (generation, value, sequence); generations only grow per key.
        let keys = ["k1", "k2", "k3"];
        let mut live: Vec<Option<(u64, Value, u64)>> = vec![None; keys.len()];
        let mut generations = [0u64; 3];
        let mut encoder = StateEncoder::new();
        let mut decoder = StateDecoder::new();
        let mut replica = Replica::new("svc", ServiceMode::Keyed);
        let empty = SubscriptionSnapshot::new("svc", ServiceMode::Keyed, vec![]);
        let wire = through_cbor(&encoder.encode_snapshot(&empty).unwrap());
        replica.apply_snapshot(decoder.decode_snapshot(&wire).unwrap()).unwrap();

        for _ in 0..steps {
            let k = rng.below(keys.len());
            let update = match &mut live[k] {
                None => {
                    generations[k] += 1;
                    let value = small_scalar(&mut rng);
                    live[k] = Some((generations[k], value.clone(), 0));
                    ProviderUpdate::Spawned {
                        instance: InstanceSnapshot::new(
                            Some(InstanceAddress::new(keys[k], generations[k])),
                            vec![MemberSnapshot::state("state", 0, value)],
                        ),
                    }
                }
                Some((generation, _, _)) if rng.chance(15) => {
                    let address = InstanceAddress::new(keys[k], *generation);
                    live[k] = None;
                    ProviderUpdate::Closed { instance: address }
                }
                Some((generation, value, sequence)) => {
                    let old = value.clone();
                    mutate(value, &mut rng, 0);
                    let ops = diff(&old, value);
                    if ops.is_empty() {
                        continue;
                    }
                    *sequence += 1;
                    ProviderUpdate::State {
                        instance: Some(InstanceAddress::new(keys[k], *generation)),
                        member: "state".to_owned(),
                        sequence: *sequence,
                        ops,
                    }
                }
            };
            let wire = through_cbor(&encoder.encode_update(&update).unwrap());
            replica.apply_update(decoder.decode_update(&wire).unwrap()).unwrap();
            for (k, key) in keys.iter().enumerate() {
                match &live[k] {
                    None => prop_assert!(replica
                        .instances()
                        .iter()
                        .all(|i| i.address().is_some_and(|a| a.key != *key))),
                    Some((generation, value, sequence)) => {
                        let address = InstanceAddress::new(*key, *generation);
                        prop_assert_eq!(replica.value(Some(&address), "state"), Some(value));
                        prop_assert_eq!(replica.sequence(Some(&address), "state"), Some(*sequence));
                    }
                }
            }
        }
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_wire_batches(batch in prop::collection::vec(value(), 0..6)) {
        let _ = OpDecoder::new().decode(&batch);
        let _ = StateDecoder::new().decode_update(&Value::Array(batch.clone()));
        for op in &batch {
            let _ = validate_wire_op(op);
            let _ = Op::parse(op);
        }
    }

    #[test]
    fn apply_never_panics_on_valid_ops(root in value(), batch in prop::collection::vec(op(), 0..6)) {
        let mut root = root;
        let _ = apply(&mut root, &batch);
    }
}
