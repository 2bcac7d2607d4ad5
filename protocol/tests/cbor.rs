//! The strict CBOR profile: upstream's item vectors, decoder rejects and limits.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use baton_protocol::Value;
use baton_protocol::cbor::{ValueDecodeError, decode_value, to_vec};
use baton_protocol::limits::CborLimits;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn dec(h: &str) -> Result<Value, String> {
    decode_value(&unhex(h), &CborLimits::default()).map_err(|e| e.to_string())
}

fn enc(v: &Value) -> String {
    hex(&to_vec(v, &CborLimits::default()).unwrap())
}

/// RFC 8949 and upstream-generated vectors (spec §7.3), excluding byte strings.
const ITEM_VECTORS: &[(&str, &str)] = &[
    ("null", "f6"),
    ("false", "f4"),
    ("true", "f5"),
    ("0", "00"),
    ("1", "01"),
    ("10", "0a"),
    ("23", "17"),
    ("24", "1818"),
    ("25", "1819"),
    ("100", "1864"),
    ("1000", "1903e8"),
    ("1000000", "1a000f4240"),
    ("1000000000000", "1b000000e8d4a51000"),
    ("9007199254740991", "1b001fffffffffffff"),
    ("-1", "20"),
    ("-10", "29"),
    ("-24", "37"),
    ("-25", "3818"),
    ("-100", "3863"),
    ("-1000", "3903e7"),
    ("-1000000", "3a000f423f"),
    ("-9007199254740991", "3b001ffffffffffffe"),
    ("1.1", "fb3ff199999999999a"),
    ("-0.0", "fb8000000000000000"),
    ("\"\"", "60"),
    ("\"IETF\"", "6449455446"),
    ("\"ü\"", "62c3bc"),
    ("\"水\"", "63e6b0b4"),
    ("\"𐅑\"", "64f0908591"),
    ("[]", "80"),
    ("[1,2,3]", "83010203"),
    ("[1,[2,3],[4,5]]", "8301820203820405"),
    ("{\"a\":1,\"b\":[2,3]}", "a26161016162820203"),
    ("255", "18ff"),
    ("256", "190100"),
    ("65535", "19ffff"),
    ("65536", "1a00010000"),
    ("4294967295", "1affffffff"),
    ("4294967296", "1b0000000100000000"),
    ("0.5", "fb3fe0000000000000"),
    ("-0.5", "fbbfe0000000000000"),
    ("3.141592653589793", "fb400921fb54442d18"),
    ("1.0", "01"),
    ("1000000000000000.0", "1b00038d7ea4c68000"),
    ("1e15", "1b00038d7ea4c68000"),
    ("\"hello\"", "6568656c6c6f"),
    ("\"héllo ✨ 世界\"", "7168c3a96c6c6f20e29ca820e4b896e7958c"),
    ("\"👋🏽\"", "68f09f918bf09f8fbd"),
    ("[1,[2,[3,[4]]]]", "8201820282038104"),
    ("{}", "a0"),
    (
        "{\"a\":1,\"b\":\"two\",\"c\":true}",
        "a361610161626374776f6163f5",
    ),
    ("{\"z\":1,\"a\":2,\"m\":3}", "a3617a01616102616d03"),
    ("{\"a\":null}", "a16161f6"),
    (
        "{\"outer\":{\"inner\":{\"deep\":[1,2]}}}",
        "a1656f75746572a165696e6e6572a16464656570820102",
    ),
    (
        "{\"id\":\"s1\",\"n\":42,\"ok\":true,\"tags\":[\"a\",\"b\"],\"meta\":{\"x\":null}}",
        "a5626964627331616e182a626f6bf564746167738261616162646d657461a16178f6",
    ),
];

#[test]
fn item_vectors_encode_and_decode_exactly() {
    for (json, h) in ITEM_VECTORS {
        let v = Value::from_json(json).unwrap();
        assert_eq!(enc(&v), *h, "encode {json}");
        assert_eq!(dec(h).unwrap(), v, "decode {h}");
    }
}

#[test]
fn negative_zero_survives_a_round_trip() {
    let v = dec("fb8000000000000000").unwrap();
    assert_eq!(enc(&v), "fb8000000000000000");
    assert_ne!(v, dec("00").unwrap());
}

#[test]
fn negative_zero_is_json_minus_zero_and_reads_back_as_the_float() {
    let v = dec("fb8000000000000000").unwrap();
    assert_eq!(v.to_json(), "-0");
    assert_eq!(Value::from_json("-0").unwrap(), v);
    assert_eq!(enc(&Value::from_json("-0").unwrap()), "fb8000000000000000");
    // `-0.0` (serde_json's own spelling) reads the same; every other number is unchanged.
    assert_eq!(Value::from_json("-0.0").unwrap(), v);
    let others = Value::from_json("[0,-1,1.5,-2.5e-7,1.25e-300,-0.5]").unwrap();
    assert_eq!(others.to_json(), "[0,-1,1.5,-2.5e-7,1.25e-300,-0.5]");
    assert_eq!(dec("00").unwrap().to_json(), "0");
}

#[test]
fn non_minimal_heads_and_integral_floats_decode_to_canonical_values() {
    assert_eq!(dec("1801").unwrap(), dec("01").unwrap());
    assert_eq!(dec("190001").unwrap(), dec("01").unwrap());
    assert_eq!(dec("fb3ff0000000000000").unwrap(), dec("01").unwrap());
    assert_eq!(enc(&dec("fb3ff0000000000000").unwrap()), "01");
}

#[test]
fn byte_strings_are_valid_cbor_but_not_json() {
    let r = decode_value(&unhex("4401020304"), &CborLimits::default());
    assert_eq!(r, Err(ValueDecodeError::NotJson));
    let r = decode_value(&unhex("8140"), &CborLimits::default());
    assert_eq!(r, Err(ValueDecodeError::NotJson));
}

/// Upstream `cbor.test.ts` "rejects invalid decoder input" with decoder.ts messages (§7.4).
const DECODER_REJECTS: &[(&str, &str)] = &[
    ("", "Truncated CBOR payload"),
    ("18", "Truncated CBOR payload"),
    ("1c", "Malformed CBOR additional information"),
    ("3d", "Malformed CBOR additional information"),
    ("5e", "Malformed CBOR additional information"),
    ("7c", "Malformed CBOR additional information"),
    ("9d", "Malformed CBOR additional information"),
    ("be", "Malformed CBOR additional information"),
    // Major 7 (upstream `readSimple`): 28–30 are unsupported simple values, not malformed.
    (
        "fc",
        "Unsupported CBOR simple value or floating-point width",
    ),
    (
        "fd",
        "Unsupported CBOR simple value or floating-point width",
    ),
    (
        "fe",
        "Unsupported CBOR simple value or floating-point width",
    ),
    // Major 6 is refused before its additional information is read.
    ("dc", "CBOR tags are not supported"),
    (
        "5f",
        "Indefinite-length CBOR byte strings are not supported",
    ),
    (
        "7f",
        "Indefinite-length CBOR text strings are not supported",
    ),
    ("9f", "Indefinite-length CBOR arrays are not supported"),
    ("bf", "Indefinite-length CBOR maps are not supported"),
    ("1f", "Indefinite-length CBOR items are not supported"),
    ("3f", "Indefinite-length CBOR items are not supported"),
    ("c000", "CBOR tags are not supported"),
    (
        "f7",
        "Unsupported CBOR simple value or floating-point width",
    ),
    (
        "e0",
        "Unsupported CBOR simple value or floating-point width",
    ),
    (
        "f820",
        "Unsupported CBOR simple value or floating-point width",
    ),
    ("ff", "CBOR break marker is not supported"),
    (
        "f93c00",
        "Unsupported CBOR simple value or floating-point width",
    ),
    (
        "fa3f800000",
        "Unsupported CBOR simple value or floating-point width",
    ),
    ("fb7ff0000000000000", "Decoded CBOR number must be finite"),
    ("fbfff0000000000000", "Decoded CBOR number must be finite"),
    ("fb7ff8000000000000", "Decoded CBOR number must be finite"),
    ("fb3ff00000", "Truncated CBOR payload"),
    ("44010203", "Truncated CBOR payload"),
    ("636162", "Truncated CBOR payload"),
    ("8201", "Truncated CBOR payload"),
    ("a16161", "Truncated CBOR payload"),
    ("0000", "CBOR payload contains trailing data"),
    ("a10102", "CBOR map keys must be strings"),
    ("a2616101616102", "CBOR map contains a duplicate key"),
    ("61ff", "CBOR text string contains invalid UTF-8"),
    ("62c080", "CBOR text string contains invalid UTF-8"),
    ("63eda080", "CBOR text string contains invalid UTF-8"),
    (
        "1b0020000000000000",
        "Decoded CBOR integer or length is outside the safe range",
    ),
    (
        "3b001fffffffffffff",
        "Decoded CBOR integer is outside the safe range",
    ),
    (
        "fb4340000000000000",
        "Decoded CBOR integer is outside the safe range",
    ),
    (
        "5a01000001",
        "CBOR byte string length exceeds configured limit of 16777216",
    ),
    (
        "7a01000001",
        "CBOR text string length exceeds configured limit of 16777216",
    ),
    (
        "9a000f4241",
        "CBOR array length exceeds configured limit of 1000000",
    ),
    (
        "ba000f4241",
        "CBOR map length exceeds configured limit of 1000000",
    ),
];

#[test]
fn decoder_rejects_every_profile_violation_with_upstream_message() {
    for (h, msg) in DECODER_REJECTS {
        assert_eq!(dec(h).unwrap_err(), *msg, "input {h:?}");
    }
}

#[test]
fn depth_64_is_accepted_and_65_is_refused() {
    let ok = format!("{}f6", "81".repeat(64));
    assert!(dec(&ok).is_ok());
    let bad = format!("{}f6", "81".repeat(65));
    assert_eq!(
        dec(&bad).unwrap_err(),
        "CBOR nesting depth exceeds configured limit of 64"
    );
}

#[test]
fn map_keys_count_toward_depth() {
    let limits = CborLimits {
        max_depth: 1,
        ..CborLimits::default()
    };
    // {"a": 1}: key and value at depth 1.
    assert!(decode_value(&unhex("a1616101"), &limits).is_ok());
    let limits = CborLimits {
        max_depth: 0,
        ..CborLimits::default()
    };
    assert_eq!(
        decode_value(&unhex("a1616101"), &limits)
            .unwrap_err()
            .to_string(),
        "CBOR nesting depth exceeds configured limit of 0"
    );
}

#[test]
fn stricter_caller_limits_apply_to_both_directions() {
    let depth2 = CborLimits {
        max_depth: 2,
        ..CborLimits::default()
    };
    assert!(decode_value(&unhex("818101"), &depth2).is_ok());
    let depth1 = CborLimits {
        max_depth: 1,
        ..CborLimits::default()
    };
    assert_eq!(
        decode_value(&unhex("818101"), &depth1)
            .unwrap_err()
            .to_string(),
        "CBOR nesting depth exceeds configured limit of 1"
    );
    let containers = CborLimits {
        max_container_length: 2,
        ..CborLimits::default()
    };
    assert_eq!(
        decode_value(&unhex("83010203"), &containers)
            .unwrap_err()
            .to_string(),
        "CBOR array length exceeds configured limit of 2"
    );
    let bytes2 = CborLimits {
        max_byte_length: 2,
        ..CborLimits::default()
    };
    assert_eq!(
        decode_value(&unhex("626162"), &bytes2)
            .unwrap_err()
            .to_string(),
        "CBOR byte length exceeds configured limit of 2"
    );
    let bytes3 = CborLimits {
        max_byte_length: 3,
        ..CborLimits::default()
    };
    assert_eq!(
        to_vec(&Value::from("abc"), &bytes3)
            .unwrap_err()
            .to_string(),
        "CBOR byte length exceeds configured limit of 3"
    );
    assert_eq!(
        to_vec(&Value::from_json("[1,2,3]").unwrap(), &containers)
            .unwrap_err()
            .to_string(),
        "CBOR array length exceeds configured limit of 2"
    );
    assert_eq!(
        to_vec(&Value::from_json("[[1]]").unwrap(), &depth1)
            .unwrap_err()
            .to_string(),
        "CBOR nesting depth exceeds configured limit of 1"
    );
}

#[test]
fn a_bom_is_preserved_and_proto_is_plain_data() {
    assert_eq!(dec("63efbbbf").unwrap(), Value::from("\u{feff}"));
    let v = dec("a1695f5f70726f746f5f5fa0").unwrap();
    assert_eq!(
        v.as_map().unwrap().keys().collect::<Vec<_>>(),
        ["__proto__"]
    );
}

#[test]
fn hostile_declared_lengths_fail_without_allocating() {
    // 4 GiB text string in a 5-byte header, with a limit large enough to pass the check.
    let limits = CborLimits {
        max_byte_length: u32::MAX,
        ..CborLimits::default()
    };
    assert_eq!(
        decode_value(&unhex("7affffffff"), &limits)
            .unwrap_err()
            .to_string(),
        "Truncated CBOR payload"
    );
    // A million-element array declared in 5 bytes reserves at most what is present.
    assert_eq!(dec("9a000f4240").unwrap_err(), "Truncated CBOR payload");
    assert_eq!(dec("ba000f4240").unwrap_err(), "Truncated CBOR payload");
}

#[test]
fn non_finite_and_unsafe_numbers_cannot_be_built() {
    assert!(Value::try_from(f64::NAN).is_err());
    assert!(Value::try_from(f64::INFINITY).is_err());
    assert!(Value::try_from(9_007_199_254_740_992_i64).is_err());
    assert!(Value::try_from(9_007_199_254_740_992.0_f64).is_err());
    assert!(Value::from_json("1e300").is_err());
    assert!(Value::try_from(-9_007_199_254_740_991_i64).is_ok());
}

#[test]
fn large_maps_reject_duplicates_too() {
    // 20 entries (hash-set path), the last repeating the first key.
    let mut h = String::from("b4");
    for i in 0..19u8 {
        h.push_str(&format!("61{:02x}00", b'a' + i));
    }
    h.push_str("616100");
    assert_eq!(dec(&h).unwrap_err(), "CBOR map contains a duplicate key");
}

#[test]
fn a_payload_may_hold_at_most_the_item_budget() {
    // [[null, null], null]: 5 items (3 nulls, 2 arrays).
    let five = unhex("8282f6f6f6");
    let at = CborLimits {
        max_total_items: 5,
        ..CborLimits::default()
    };
    assert!(decode_value(&five, &at).is_ok());
    let under = CborLimits {
        max_total_items: 4,
        ..CborLimits::default()
    };
    assert_eq!(
        decode_value(&five, &under).unwrap_err().to_string(),
        "CBOR item count exceeds configured limit of 4"
    );
    // Map keys count too: {"a": null} is 3 items.
    let map = unhex("a16161f6");
    let two = CborLimits {
        max_total_items: 2,
        ..CborLimits::default()
    };
    assert!(decode_value(&map, &two).is_err());
    let three = CborLimits {
        max_total_items: 3,
        ..CborLimits::default()
    };
    assert!(decode_value(&map, &three).is_ok());
}

#[test]
fn the_default_budget_admits_a_full_size_container_but_not_an_amplification_bomb() {
    // One array of 1,000,000 nulls (the container limit) decodes.
    let mut full = unhex("1a000f4240");
    full[0] = 0x9a;
    full.extend(std::iter::repeat_n(0xf6, 1_000_000));
    assert!(decode_value(&full, &CborLimits::default()).is_ok());
    // Two such arrays in one payload exceed the 1,048,576-item budget.
    let mut bomb = vec![0x82];
    for _ in 0..2 {
        bomb.extend_from_slice(&full);
    }
    assert_eq!(
        decode_value(&bomb, &CborLimits::default())
            .unwrap_err()
            .to_string(),
        "CBOR item count exceeds configured limit of 1048576"
    );
}
