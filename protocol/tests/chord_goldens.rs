//! Chord goldens: the derived flow frames (§7.7), the worked subscription (§6.10), the
//! delta-codec and service-wire goldens (§7.8) and the upstream service-wire cases (§8.7).

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a broken fixture should panic"
)]

use baton_protocol::chord::{
    CatalogueEntry, ChordError, ControlCall, InstanceAddress, InstanceSnapshot, MemberSnapshot, Op,
    ProviderUpdate, Replica, ServiceCall, ServiceMode, StateDecoder, StateEncoder,
    SubscriptionSnapshot, catalogue_to_value, parse_catalogue,
};
use baton_protocol::limits::DEFAULT_MAX_FRAME_LENGTH;
use baton_protocol::{
    ClientMessage, Outcome, ServerMessage, Value, decode_payload, encode_frame, from_value,
};

const SERVER_ID: &str = "00000000-0000-4000-8000-000000000001";

/// §7.7 C catalogue request (session target): `{"type":"request","id":"request-2","target":{"serverId":"00000000-0000-4000-8000-000000000001","sessionId":"session-1","attachmentId":"attachment-1"},"call":{"serviceId":"$chord.service","member":"catalogue","args":[]}}`
const CATALOGUE_REQUEST: &str = "000000b6a46474797065677265717565737462696469726571756573742d3266746172676574a3687365727665724964782430303030303030302d303030302d343030302d383030302d3030303030303030303030316973657373696f6e49646973657373696f6e2d316c6174746163686d656e7449646c6174746163686d656e742d316463616c6ca3697365727669636549646e2463686f72642e73657276696365666d656d62657269636174616c6f677565646172677380";

/// §7.7 S catalogue response: `{"type":"response","id":"request-2","ok":true,"result":[{"serviceId":"pi.models","mode":"singleton"},{"serviceId":"pi.dialogs","mode":"keyed"}]}`
const CATALOGUE_RESPONSE: &str = "0000006da4647479706568726573706f6e736562696469726571756573742d32626f6bf566726573756c7482a2697365727669636549646970692e6d6f64656c73646d6f64656973696e676c65746f6ea2697365727669636549646a70692e6469616c6f6773646d6f6465656b65796564";

/// §7.7 C subscribe request: `{"type":"request","id":"request-3","target":{"serverId":"00000000-0000-4000-8000-000000000001","sessionId":"session-1","attachmentId":"attachment-1"},"call":{"serviceId":"$chord.service","member":"subscribe","args":["service-1","pi.models","singleton"]}}`
const SUBSCRIBE_REQUEST: &str = "000000d4a46474797065677265717565737462696469726571756573742d3366746172676574a3687365727665724964782430303030303030302d303030302d343030302d383030302d3030303030303030303030316973657373696f6e49646973657373696f6e2d316c6174746163686d656e7449646c6174746163686d656e742d316463616c6ca3697365727669636549646e2463686f72642e73657276696365666d656d6265726973756273637269626564617267738369736572766963652d316970692e6d6f64656c736973696e676c65746f6e";

/// §7.7 S subscribe response (wire snapshot): `{"type":"response","id":"request-3","ok":true,"result":{"serviceId":"pi.models","mode":"singleton","instances":[{"members":[{"name":"select","kind":"method"},{"name":"state","kind":"state","sequence":0,"ops":[["r",{"revision":0}]]}]}]}}`
const SUBSCRIBE_RESPONSE: &str = "000000ada4647479706568726573706f6e736562696469726571756573742d33626f6bf566726573756c74a3697365727669636549646970692e6d6f64656c73646d6f64656973696e676c65746f6e69696e7374616e63657381a1676d656d6265727382a2646e616d656673656c656374646b696e64666d6574686f64a4646e616d65657374617465646b696e646573746174656873657175656e636500636f707381826172a1687265766973696f6e00";

/// §7.7 S service_update seq 1 (first use of path: inline): `{"type":"service_update","subscriptionId":"service-1","update":{"type":"state","member":"state","sequence":1,"ops":[["s",["revision"],1]]}}`
const UPDATE_SEQ_1: &str = "0000006ba364747970656e736572766963655f7570646174656e737562736372697074696f6e496469736572766963652d3166757064617465a46474797065657374617465666d656d6265726573746174656873657175656e636501636f70738183617381687265766973696f6e01";

/// §7.7 S service_update seq 2 (second use: define id 0, then reference): `{"type":"service_update","subscriptionId":"service-1","update":{"type":"state","member":"state","sequence":2,"ops":[["#",0,["revision"]],["s",0,2]]}}`
const UPDATE_SEQ_2: &str = "00000070a364747970656e736572766963655f7570646174656e737562736372697074696f6e496469736572766963652d3166757064617465a46474797065657374617465666d656d6265726573746174656873657175656e636502636f7073828361230081687265766973696f6e8361730002";

/// §7.7 S service_update seq 3 (id reference): `{"type":"service_update","subscriptionId":"service-1","update":{"type":"state","member":"state","sequence":3,"ops":[["s",0,3]]}}`
const UPDATE_SEQ_3: &str = "00000062a364747970656e736572766963655f7570646174656e737562736372697074696f6e496469736572766963652d3166757064617465a46474797065657374617465666d656d6265726573746174656873657175656e636503636f7073818361730003";

/// §7.7 S service_update rolling window (t + short-form a): `{"type":"service_update","subscriptionId":"service-1","update":{"type":"state","member":"state","sequence":4,"ops":[["t",["output"],200],["a","next chunk"]]}}`
const UPDATE_ROLLING_WINDOW: &str = "00000078a364747970656e736572766963655f7570646174656e737562736372697074696f6e496469736572766963652d3166757064617465a46474797065657374617465666d656d6265726573746174656873657175656e636504636f70738283617481666f757470757418c88261616a6e657874206368756e6b";

/// §7.7 C unsubscribe request: `{"type":"request","id":"request-4","target":{"serverId":"00000000-0000-4000-8000-000000000001","sessionId":"session-1","attachmentId":"attachment-1"},"call":{"serviceId":"$chord.service","member":"unsubscribe","args":["service-1"]}}`
const UNSUBSCRIBE_REQUEST: &str = "000000c2a46474797065677265717565737462696469726571756573742d3466746172676574a3687365727665724964782430303030303030302d303030302d343030302d383030302d3030303030303030303030316973657373696f6e49646973657373696f6e2d316c6174746163686d656e7449646c6174746163686d656e742d316463616c6ca3697365727669636549646e2463686f72642e73657276696365666d656d6265726b756e73756273637269626564617267738169736572766963652d31";

/// §7.7 S keyed spawned: `{"type":"service_update","subscriptionId":"service-2","update":{"type":"spawned","instance":{"instance":{"key":"dialog-1","generation":1},"members":[{"name":"request","kind":"state","sequence":0,"ops":[["r",{"value":0}]]}]}}}`
const KEYED_SPAWNED: &str = "000000aca364747970656e736572766963655f7570646174656e737562736372697074696f6e496469736572766963652d3266757064617465a2647479706567737061776e656468696e7374616e6365a268696e7374616e6365a2636b6579686469616c6f672d316a67656e65726174696f6e01676d656d6265727381a4646e616d656772657175657374646b696e646573746174656873657175656e636500636f707381826172a16576616c756500";

/// §7.7 S keyed state update: `{"type":"service_update","subscriptionId":"service-2","update":{"type":"state","instance":{"key":"dialog-1","generation":1},"member":"request","sequence":1,"ops":[["s",["value"],1]]}}`
const KEYED_STATE: &str = "0000008da364747970656e736572766963655f7570646174656e737562736372697074696f6e496469736572766963652d3266757064617465a5647479706565737461746568696e7374616e6365a2636b6579686469616c6f672d316a67656e65726174696f6e01666d656d62657267726571756573746873657175656e636501636f707381836173816576616c756501";

/// §7.7 S keyed closed: `{"type":"service_update","subscriptionId":"service-2","update":{"type":"closed","instance":{"key":"dialog-1","generation":1}}}`
const KEYED_CLOSED: &str = "00000065a364747970656e736572766963655f7570646174656e737562736372697074696f6e496469736572766963652d3266757064617465a2647479706566636c6f73656468696e7374616e6365a2636b6579686469616c6f672d316a67656e65726174696f6e01";

/// §7.7 S unavailable: `{"type":"service_update","subscriptionId":"service-1","update":{"type":"unavailable"}}`
const UNAVAILABLE: &str = "00000047a364747970656e736572766963655f7570646174656e737562736372697074696f6e496469736572766963652d3166757064617465a164747970656b756e617661696c61626c65";

/// §7.7 S reset (post-0.87.1): `{"type":"service_update","subscriptionId":"service-1","update":{"type":"reset","snapshot":{"serviceId":"test.delivery-counter","mode":"singleton","instances":[{"members":[{"name":"state","kind":"state","sequence":101,"ops":[["r",{"value":101}]]}]}]}}}`
const RESET: &str = "000000c2a364747970656e736572766963655f7570646174656e737562736372697074696f6e496469736572766963652d3166757064617465a2647479706565726573657468736e617073686f74a36973657276696365496475746573742e64656c69766572792d636f756e746572646d6f64656973696e676c65746f6e69696e7374616e63657381a1676d656d6265727381a4646e616d65657374617465646b696e646573746174656873657175656e63651865636f707381826172a16576616c75651865";

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

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

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(entries.into_iter().collect())
}

fn session_target() -> Value {
    map(vec![
        ("serverId", Value::from(SERVER_ID)),
        ("sessionId", Value::from("session-1")),
        ("attachmentId", Value::from("attachment-1")),
    ])
}

/// The framed `request` carrying `call` to the session target.
fn request_frame(id: &str, call: Value) -> String {
    let msg: ClientMessage = from_value(map(vec![
        ("type", Value::from("request")),
        ("id", Value::from(id)),
        ("target", session_target()),
        ("call", call),
    ]))
    .unwrap();
    hex(&encode_frame(&msg, DEFAULT_MAX_FRAME_LENGTH).unwrap())
}

/// The framed successful `response` carrying `result`.
fn response_frame(id: &str, result: Value) -> String {
    let msg: ServerMessage = from_value(map(vec![
        ("type", Value::from("response")),
        ("id", Value::from(id)),
        ("ok", Value::Bool(true)),
        ("result", result),
    ]))
    .unwrap();
    hex(&encode_frame(&msg, DEFAULT_MAX_FRAME_LENGTH).unwrap())
}

/// The framed `service_update` carrying `update`.
fn update_frame(subscription_id: &str, update: Value) -> String {
    let msg: ServerMessage = from_value(map(vec![
        ("type", Value::from("service_update")),
        ("subscriptionId", Value::from(subscription_id)),
        ("update", update),
    ]))
    .unwrap();
    hex(&encode_frame(&msg, DEFAULT_MAX_FRAME_LENGTH).unwrap())
}

fn decode_server(frame: &str) -> ServerMessage {
    decode_payload(&unhex(frame)[4..], DEFAULT_MAX_FRAME_LENGTH).unwrap()
}

/// The `update` of a framed `service_update`.
fn update_of(frame: &str) -> Value {
    match decode_server(frame) {
        ServerMessage::ServiceUpdate(update) => update.update,
        other => panic!("not a service_update: {other:?}"),
    }
}

/// The `result` of a framed successful `response`.
fn result_of(frame: &str) -> Value {
    match decode_server(frame) {
        ServerMessage::Response(response) => match response.outcome {
            Outcome::Value(value) => value,
            other => panic!("no result: {other:?}"),
        },
        other => panic!("not a response: {other:?}"),
    }
}

fn state_update(
    instance: Option<InstanceAddress>,
    member: &str,
    sequence: u64,
    batch: &str,
) -> ProviderUpdate {
    ProviderUpdate::State {
        instance,
        member: member.into(),
        sequence,
        ops: ops(batch),
    }
}

/// The `pi.models` snapshot of §7.7: a `select` method and a `state` at revision 0.
fn models_snapshot() -> SubscriptionSnapshot {
    SubscriptionSnapshot::new(
        "pi.models",
        ServiceMode::Singleton,
        vec![InstanceSnapshot::new(
            None,
            vec![
                MemberSnapshot::method("select"),
                MemberSnapshot::state("state", 0, v(r#"{"revision":0}"#)),
            ],
        )],
    )
}

fn revision(sequence: u64) -> ProviderUpdate {
    state_update(
        None,
        "state",
        sequence,
        &format!(r#"[["s",["revision"],{sequence}]]"#),
    )
}

#[test]
fn control_call_requests_encode_the_derived_frames() {
    assert_eq!(
        request_frame("request-2", ControlCall::Catalogue.to_value()),
        CATALOGUE_REQUEST
    );
    assert_eq!(
        request_frame(
            "request-3",
            ControlCall::subscribe("service-1", "pi.models", ServiceMode::Singleton).to_value()
        ),
        SUBSCRIBE_REQUEST
    );
    assert_eq!(
        request_frame(
            "request-4",
            ControlCall::unsubscribe("service-1").to_value()
        ),
        UNSUBSCRIBE_REQUEST
    );
}

#[test]
fn control_call_frames_decode_back_to_control_calls() {
    for (frame, expected) in [
        (CATALOGUE_REQUEST, ControlCall::Catalogue),
        (
            SUBSCRIBE_REQUEST,
            ControlCall::subscribe("service-1", "pi.models", ServiceMode::Singleton),
        ),
        (UNSUBSCRIBE_REQUEST, ControlCall::unsubscribe("service-1")),
    ] {
        let ClientMessage::Request(request) =
            decode_payload::<ClientMessage>(&unhex(frame)[4..], DEFAULT_MAX_FRAME_LENGTH).unwrap()
        else {
            panic!("not a request");
        };
        let call = ServiceCall::parse(&request.call).unwrap();
        assert_eq!(ControlCall::decode(&call), Some(expected));
    }
}

#[test]
fn catalogue_response_encodes_the_derived_frame() {
    let entries = vec![
        CatalogueEntry::new("pi.models", ServiceMode::Singleton),
        CatalogueEntry::new("pi.dialogs", ServiceMode::Keyed),
    ];
    assert_eq!(
        response_frame("request-2", catalogue_to_value(&entries)),
        CATALOGUE_RESPONSE
    );
    assert_eq!(
        parse_catalogue(&result_of(CATALOGUE_RESPONSE)).unwrap(),
        entries
    );
}

#[test]
fn server_encodes_the_derived_subscription_frames() {
    let mut encoder = StateEncoder::new();
    let snapshot = encoder.encode_snapshot(&models_snapshot()).unwrap();
    assert_eq!(response_frame("request-3", snapshot), SUBSCRIBE_RESPONSE);
    for (sequence, frame) in [(1, UPDATE_SEQ_1), (2, UPDATE_SEQ_2), (3, UPDATE_SEQ_3)] {
        let update = encoder.encode_update(&revision(sequence)).unwrap();
        assert_eq!(
            update_frame("service-1", update),
            frame,
            "sequence {sequence}"
        );
    }
    let window = encoder
        .encode_update(&state_update(
            None,
            "state",
            4,
            r#"[["t",["output"],200],["a",["output"],"next chunk"]]"#,
        ))
        .unwrap();
    assert_eq!(update_frame("service-1", window), UPDATE_ROLLING_WINDOW);
}

#[test]
fn client_decodes_the_derived_subscription_frames_into_a_replica() {
    let mut decoder = StateDecoder::new();
    let snapshot = decoder
        .decode_snapshot(&result_of(SUBSCRIBE_RESPONSE))
        .unwrap();
    assert_eq!(snapshot, models_snapshot());
    let mut replica = Replica::new("pi.models", ServiceMode::Singleton);
    replica.apply_snapshot(snapshot).unwrap();
    assert_eq!(replica.value(None, "state"), Some(&v(r#"{"revision":0}"#)));
    for (sequence, frame) in [(1, UPDATE_SEQ_1), (2, UPDATE_SEQ_2), (3, UPDATE_SEQ_3)] {
        let update = decoder.decode_update(&update_of(frame)).unwrap();
        assert_eq!(update, revision(sequence));
        replica.apply_update(update).unwrap();
    }
    assert_eq!(replica.value(None, "state"), Some(&v(r#"{"revision":3}"#)));
    assert_eq!(replica.sequence(None, "state"), Some(3));
    assert_eq!(
        decoder
            .decode_update(&update_of(UPDATE_ROLLING_WINDOW))
            .unwrap(),
        state_update(
            None,
            "state",
            4,
            r#"[["t",["output"],200],["a",["output"],"next chunk"]]"#
        )
    );
}

#[test]
fn worked_subscription_of_section_6_10_produces_its_wire_values() {
    let mut encoder = StateEncoder::new();
    let snapshot = SubscriptionSnapshot::new(
        "pi.models",
        ServiceMode::Singleton,
        vec![InstanceSnapshot::new(
            None,
            vec![MemberSnapshot::state("state", 0, v(r#"{"revision":0}"#))],
        )],
    );
    assert_eq!(
        encoder.encode_snapshot(&snapshot).unwrap().to_json(),
        r#"{"serviceId":"pi.models","mode":"singleton","instances":[{"members":[{"name":"state","kind":"state","sequence":0,"ops":[["r",{"revision":0}]]}]}]}"#
    );
    let expected = [
        r#"{"type":"state","member":"state","sequence":1,"ops":[["s",["revision"],1]]}"#,
        r##"{"type":"state","member":"state","sequence":2,"ops":[["#",0,["revision"]],["s",0,2]]}"##,
        r#"{"type":"state","member":"state","sequence":3,"ops":[["s",0,3]]}"#,
    ];
    for (sequence, json) in (1..).zip(expected) {
        assert_eq!(
            encoder
                .encode_update(&revision(sequence))
                .unwrap()
                .to_json(),
            json
        );
    }
}

#[test]
fn client_decodes_an_interned_reference_back_to_its_path() {
    // client.test.ts: seq 3 `["#",0,["revision"]],["s",0,3]` decodes to `["s",["revision"],3]`.
    let mut decoder = StateDecoder::new();
    decoder
        .decode_snapshot(&result_of(SUBSCRIBE_RESPONSE))
        .unwrap();
    let update = decoder
        .decode_update(&v(
            r##"{"type":"state","member":"state","sequence":3,"ops":[["#",0,["revision"]],["s",0,3]]}"##,
        ))
        .unwrap();
    assert_eq!(update, revision(3));
}

#[test]
fn keyed_lifecycle_encodes_the_derived_frames() {
    let address = InstanceAddress::new("dialog-1", 1);
    let mut encoder = StateEncoder::new();
    encoder
        .encode_snapshot(&SubscriptionSnapshot::new(
            "pi.dialogs",
            ServiceMode::Keyed,
            vec![],
        ))
        .unwrap();
    let spawned = ProviderUpdate::Spawned {
        instance: InstanceSnapshot::new(
            Some(address.clone()),
            vec![MemberSnapshot::state("request", 0, v(r#"{"value":0}"#))],
        ),
    };
    let update = state_update(
        Some(address.clone()),
        "request",
        1,
        r#"[["s",["value"],1]]"#,
    );
    let closed = ProviderUpdate::Closed {
        instance: address.clone(),
    };
    for (update, frame) in [
        (&spawned, KEYED_SPAWNED),
        (&update, KEYED_STATE),
        (&closed, KEYED_CLOSED),
    ] {
        assert_eq!(
            update_frame("service-2", encoder.encode_update(update).unwrap()),
            frame
        );
    }
    // The closed instance's codecs are gone.
    let err = encoder
        .encode_update(&state_update(
            Some(address),
            "request",
            2,
            r#"[["s",["value"],2]]"#,
        ))
        .unwrap_err();
    assert!(err.to_string().contains("Unknown service state"));
    assert_eq!(err.to_string(), "Unknown service state dialog-1@1.request");
}

#[test]
fn keyed_lifecycle_decodes_into_a_replica() {
    let address = InstanceAddress::new("dialog-1", 1);
    let mut decoder = StateDecoder::new();
    let mut replica = Replica::new("pi.dialogs", ServiceMode::Keyed);
    replica
        .apply_snapshot(
            decoder
                .decode_snapshot(&v(
                    r#"{"serviceId":"pi.dialogs","mode":"keyed","instances":[]}"#,
                ))
                .unwrap(),
        )
        .unwrap();
    replica
        .apply_update(decoder.decode_update(&update_of(KEYED_SPAWNED)).unwrap())
        .unwrap();
    assert_eq!(
        replica.value(Some(&address), "request"),
        Some(&v(r#"{"value":0}"#))
    );
    replica
        .apply_update(decoder.decode_update(&update_of(KEYED_STATE)).unwrap())
        .unwrap();
    assert_eq!(
        replica.value(Some(&address), "request"),
        Some(&v(r#"{"value":1}"#))
    );
    replica
        .apply_update(decoder.decode_update(&update_of(KEYED_CLOSED)).unwrap())
        .unwrap();
    assert!(replica.instances().is_empty());
    let err = decoder.decode_update(&update_of(KEYED_STATE)).unwrap_err();
    assert_eq!(err.to_string(), "Unknown service state dialog-1@1.request");
}

#[test]
fn unavailable_and_reset_encode_the_derived_frames() {
    let mut encoder = StateEncoder::new();
    encoder.encode_snapshot(&models_snapshot()).unwrap();
    assert_eq!(
        update_frame(
            "service-1",
            encoder.encode_update(&ProviderUpdate::Unavailable).unwrap()
        ),
        UNAVAILABLE
    );
    let reset = ProviderUpdate::Reset {
        snapshot: SubscriptionSnapshot::new(
            "test.delivery-counter",
            ServiceMode::Singleton,
            vec![InstanceSnapshot::new(
                None,
                vec![MemberSnapshot::state("state", 101, v(r#"{"value":101}"#))],
            )],
        ),
    };
    assert_eq!(
        update_frame("service-1", encoder.encode_update(&reset).unwrap()),
        RESET
    );
    // The reset re-baselined the dictionary: the next update is inline again.
    assert_eq!(
        encoder
            .encode_update(&state_update(
                None,
                "state",
                102,
                r#"[["s",["value"],102]]"#
            ))
            .unwrap()
            .to_json(),
        r#"{"type":"state","member":"state","sequence":102,"ops":[["s",["value"],102]]}"#
    );
}

#[test]
fn client_applies_a_reset_after_falling_behind() {
    let mut decoder = StateDecoder::new();
    let mut replica = Replica::new("test.delivery-counter", ServiceMode::Singleton);
    replica
        .apply_snapshot(
            decoder
                .decode_snapshot(&v(
                    r#"{"serviceId":"test.delivery-counter","mode":"singleton","instances":[{"members":[{"name":"state","kind":"state","sequence":0,"ops":[["r",{"value":0}]]}]}]}"#,
                ))
                .unwrap(),
        )
        .unwrap();
    replica
        .apply_update(decoder.decode_update(&update_of(RESET)).unwrap())
        .unwrap();
    assert_eq!(replica.value(None, "state"), Some(&v(r#"{"value":101}"#)));
    assert_eq!(replica.sequence(None, "state"), Some(101));
}

#[test]
fn wire_reset_verdicts_match_the_captured_table() {
    let reset = |ops: &str| {
        v(&format!(
            r#"{{"type":"reset","snapshot":{{"serviceId":"s","mode":"singleton","instances":[{{"members":[{{"name":"state","kind":"state","sequence":0,"ops":{ops}}}]}}]}}}}"#
        ))
    };
    let verdict = |update: &Value| StateDecoder::new().decode_update(update).map(|_| ());
    assert_eq!(
        verdict(&reset("[]")),
        Err(ChordError::ResetNotRootReplacements)
    );
    assert_eq!(
        verdict(&reset(r#"[["r",1],["r",2]]"#)),
        Err(ChordError::ResetNotRootReplacements)
    );
    assert_eq!(verdict(&reset(r#"[["r",1]]"#)), Ok(()));
    assert_eq!(
        verdict(&v(r#"{"type":"reset","snapshot":{"serviceId":"s","mode":"keyed","instances":[]},"extraKey":1}"#))
            .unwrap_err()
            .to_string(),
        "Invalid reset update"
    );
}

#[test]
fn one_subscription_keeps_one_codec_pair_per_state() {
    let mut encoder = StateEncoder::new();
    let mut decoder = StateDecoder::new();
    let snapshot = SubscriptionSnapshot::new(
        "pi.models",
        ServiceMode::Singleton,
        vec![InstanceSnapshot::new(
            None,
            vec![MemberSnapshot::state("state", 0, v(r#"{"revision":0}"#))],
        )],
    );
    assert_eq!(
        decoder
            .decode_snapshot(&encoder.encode_snapshot(&snapshot).unwrap())
            .unwrap(),
        snapshot
    );
    let first = encoder.encode_update(&revision(1)).unwrap();
    let second = encoder.encode_update(&revision(2)).unwrap();
    assert_eq!(
        first.as_map().unwrap().get("ops").unwrap().to_json(),
        r#"[["s",["revision"],1]]"#
    );
    assert_eq!(
        second.as_map().unwrap().get("ops").unwrap().to_json(),
        r##"[["#",0,["revision"]],["s",0,2]]"##
    );
    assert_eq!(decoder.decode_update(&first).unwrap(), revision(1));
    assert_eq!(decoder.decode_update(&second).unwrap(), revision(2));
}

#[test]
fn operation_dictionaries_are_isolated_between_states_and_subscriptions() {
    let snapshot = SubscriptionSnapshot::new(
        "pi.states",
        ServiceMode::Singleton,
        vec![InstanceSnapshot::new(
            None,
            vec![
                MemberSnapshot::state("left", 0, v(r#"{"revision":0}"#)),
                MemberSnapshot::state("right", 0, v(r#"{"revision":0}"#)),
            ],
        )],
    );
    let update = |member: &str, sequence: u64, revision: u64| {
        state_update(
            None,
            member,
            sequence,
            &format!(r#"[["s",["revision"],{revision}]]"#),
        )
    };
    let ops_of = |wire: &Value| wire.as_map().unwrap().get("ops").unwrap().to_json();
    let mut first_encoder = StateEncoder::new();
    let mut first_decoder = StateDecoder::new();
    let mut second_encoder = StateEncoder::new();
    let mut second_decoder = StateDecoder::new();
    first_decoder
        .decode_snapshot(&first_encoder.encode_snapshot(&snapshot).unwrap())
        .unwrap();
    second_decoder
        .decode_snapshot(&second_encoder.encode_snapshot(&snapshot).unwrap())
        .unwrap();

    let first_left = first_encoder.encode_update(&update("left", 1, 1)).unwrap();
    let first_right = first_encoder.encode_update(&update("right", 1, 1)).unwrap();
    let second_left = first_encoder.encode_update(&update("left", 2, 2)).unwrap();
    let second_right = first_encoder.encode_update(&update("right", 2, 2)).unwrap();
    assert_eq!(ops_of(&first_left), r#"[["s",["revision"],1]]"#);
    assert_eq!(ops_of(&first_right), r#"[["s",["revision"],1]]"#);
    assert_eq!(
        ops_of(&second_left),
        r##"[["#",0,["revision"]],["s",0,2]]"##
    );
    assert_eq!(
        ops_of(&second_right),
        r##"[["#",0,["revision"]],["s",0,2]]"##
    );
    assert_eq!(
        first_decoder.decode_update(&first_left).unwrap(),
        update("left", 1, 1)
    );
    assert_eq!(
        first_decoder.decode_update(&first_right).unwrap(),
        update("right", 1, 1)
    );
    assert_eq!(
        first_decoder.decode_update(&second_left).unwrap(),
        update("left", 2, 2)
    );
    assert_eq!(
        first_decoder.decode_update(&second_right).unwrap(),
        update("right", 2, 2)
    );

    // A fresh encoder for another subscription starts inline again.
    let independent_left = second_encoder.encode_update(&update("left", 1, 1)).unwrap();
    assert_eq!(ops_of(&independent_left), r#"[["s",["revision"],1]]"#);
    assert_eq!(
        second_decoder.decode_update(&independent_left).unwrap(),
        update("left", 1, 1)
    );

    // Left's base batch resets only left's dictionary: right continues with its id.
    let left_base = state_update(None, "left", 3, r#"[["r",{"revision":3}]]"#);
    let left_base_wire = first_encoder.encode_update(&left_base).unwrap();
    assert_eq!(ops_of(&left_base_wire), r#"[["r",{"revision":3}]]"#);
    assert_eq!(
        first_decoder.decode_update(&left_base_wire).unwrap(),
        left_base
    );
    let third_right = first_encoder.encode_update(&update("right", 3, 3)).unwrap();
    assert_eq!(ops_of(&third_right), r#"[["s",0,3]]"#);
    assert_eq!(
        first_decoder.decode_update(&third_right).unwrap(),
        update("right", 3, 3)
    );
}

#[test]
fn encoders_in_the_same_state_encode_identical_updates() {
    let mut a = StateEncoder::new();
    let mut b = StateEncoder::new();
    a.encode_snapshot(&models_snapshot()).unwrap();
    b.encode_snapshot(&models_snapshot()).unwrap();
    assert_eq!(a, b);
    let shared = a.encode_update(&revision(1)).unwrap();
    // The server may share the frame and fast-forward `b` by cloning `a`.
    assert_ne!(a, b);
    assert_eq!(b.clone().encode_update(&revision(1)).unwrap(), shared);
    b = a.clone();
    assert_eq!(
        a.encode_update(&revision(2)).unwrap(),
        b.encode_update(&revision(2)).unwrap()
    );
}

#[test]
fn decoded_and_wire_values_validate_with_their_own_grammar() {
    let snapshot = v(
        r#"{"serviceId":"pi.models","mode":"singleton","instances":[{"members":[{"name":"state","kind":"state","sequence":0,"ops":[["r",{"revision":1}]]}]}]}"#,
    );
    let parsed = SubscriptionSnapshot::parse(&snapshot).unwrap();
    let mut encoder = StateEncoder::new();
    let wire_snapshot = encoder.encode_snapshot(&parsed).unwrap();
    assert_eq!(wire_snapshot, snapshot);
    let update =
        v(r#"{"type":"state","member":"state","sequence":1,"ops":[["s",["revision"],2]]}"#);
    let parsed = ProviderUpdate::parse(&update).unwrap();
    assert_eq!(parsed.to_value(), update);
    let wire_update = encoder.encode_update(&parsed).unwrap();
    assert_eq!(wire_update, update);

    // A wire-only form is valid on the wire but not as a decoded update.
    let wire_only = v(
        r##"{"type":"state","member":"state","sequence":2,"ops":[["#",0,["revision"]],["s",0,3]]}"##,
    );
    assert_eq!(
        ProviderUpdate::parse(&wire_only).unwrap_err().to_string(),
        "unknown op verb: #"
    );
    let mut decoder = StateDecoder::new();
    decoder.decode_snapshot(&snapshot).unwrap();
    decoder.decode_update(&update).unwrap();
    assert!(decoder.decode_update(&wire_only).is_ok());
}

#[test]
fn malformed_service_values_are_rejected_with_upstream_messages() {
    assert_eq!(
        ServiceCall::parse(&v(
            r#"{"serviceId":"pi.models","member":"list","args":[],"extra":true}"#
        ))
        .unwrap_err()
        .to_string(),
        "Invalid service call"
    );
    assert_eq!(
        parse_catalogue(&v(r#"[{"serviceId":"pi.models","mode":"unknown"}]"#))
            .unwrap_err()
            .to_string(),
        "Invalid service catalogue"
    );
    assert_eq!(
        ProviderUpdate::parse(&v(
            r#"{"type":"state","member":"state","sequence":0,"ops":[]}"#
        ))
        .unwrap_err()
        .to_string(),
        "Invalid service state update"
    );
    let mut decoder = StateDecoder::new();
    decoder
        .decode_snapshot(&v(
            r#"{"serviceId":"s","mode":"singleton","instances":[{"members":[{"name":"state","kind":"state","sequence":0,"ops":[["r",{}]]}]}]}"#,
        ))
        .unwrap();
    assert!(
        decoder
            .decode_update(&v(
                r#"{"type":"state","member":"state","sequence":1,"ops":[["?",0]]}"#
            ))
            .is_err()
    );
}

#[test]
fn addressed_calls_keep_upstream_key_order() {
    let call = ServiceCall::new(
        "pi.question-dialog",
        "submit",
        vec![v(r#"{"outcome":"selected","index":0}"#)],
    )
    .with_instance(InstanceAddress::new("invocation-1", 2));
    assert_eq!(
        call.to_value().to_json(),
        r#"{"serviceId":"pi.question-dialog","instance":{"key":"invocation-1","generation":2},"member":"submit","args":[{"outcome":"selected","index":0}]}"#
    );
    assert_eq!(ServiceCall::parse(&call.to_value()).unwrap(), call);
}

#[test]
fn diff_of_equal_values_with_reserved_keys_is_empty() {
    // Found by the tracker fuzzer: a map holding `__proto__` re-set itself when unchanged.
    let v = Value::from_json(r#"{"m":{"__proto__":1},"n":[{"constructor":2}]}"#).unwrap();
    assert!(baton_protocol::chord::diff(&v, &v).is_empty());
    let w = Value::from_json(r#"{"m":{"__proto__":2},"n":[{"constructor":2}]}"#).unwrap();
    let ops = baton_protocol::chord::diff(&v, &w);
    assert_eq!(ops.len(), 1, "only the changed map is re-set: {ops:?}");
}
