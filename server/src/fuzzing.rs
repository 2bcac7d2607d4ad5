//! Fuzz target bodies for the server (not a stable API).
//!
//! [`server_conn`] is the body of the cargo-fuzz target of the same name in
//! `fuzz/fuzz_targets/`; `server/tests/fuzz_seeds.rs` replays the committed seeds
//! (`fuzz/seeds/server_conn/*`) through it on stable `cargo test`. A panic here is a bug
//! report.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use baton_protocol::chord::{
    ControlCall, InstanceSnapshot, MemberSnapshot, Op, ProviderUpdate, ServiceCall, ServiceMode,
    SubscriptionSnapshot, parse_path,
};
use baton_protocol::codec::{ClientMessageDecoder, ServerMessageDecoder, encode_frame};
use baton_protocol::fuzzing::ValueSource;
use baton_protocol::{
    Cancel, ClientMessage, HelloVersion, Id, Map, Outcome, Request, ServerId, ServerMessage,
    SessionTarget, Target, Value,
};

use crate::chord::SharedUpdate;
use crate::conn::limits::ConnLimits;
use crate::conn::state::{ConnState, Dispatch, Step};
use crate::error::ServiceError;

const SERVER: &str = "00000000-0000-4000-8000-000000000001";
const OTHER_SERVER: &str = "00000000-0000-4000-8000-000000000002";
/// Request ids the peer uses.
const REQUEST_IDS: [&str; 5] = ["r0", "r1", "r2", "r3", "r4"];
/// Ids the peer only ever cancels, never requests: no response may carry them.
const CANCEL_ONLY_IDS: [&str; 2] = ["x0", "x1"];
/// Subscription ids.
const SUBSCRIPTION_IDS: [&str; 3] = ["s0", "s1", "s2"];
/// Error messages of the responses `ConnState` writes without dispatching.
const IMMEDIATE: [&str; 6] = [
    "Request ID is already active",
    "Invalid service call",
    "Too many active requests on this connection",
    "Request was addressed to another server",
    "Server is draining",
    "Too many subscriptions on this connection",
];
/// Bound on a final `hello_error` frame, which is exempt from the pending-byte limit.
const FINAL_FRAME_ALLOWANCE: usize = 1024;

fn id(s: &str) -> Id {
    Id::new(s).unwrap_or_else(|_| unreachable!("non-empty"))
}

fn server_id(s: &str) -> ServerId {
    ServerId::parse(s).unwrap_or_else(|_| unreachable!("valid uuid"))
}

fn call(service: &str, member: &str, args: Vec<Value>) -> Value {
    ServiceCall::new(service, member, args).into_value()
}

/// What the fake host knows about a dispatched request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Call,
    Subscribe(String),
    Unsubscribe(String),
}

/// The peer's view of the output stream, with the invariants it checks.
struct Observer {
    decoder: ServerMessageDecoder,
    frames: usize,
    hello_error: bool,
    /// Request messages fed per id (bounds the responses per id).
    requested: HashMap<String, usize>,
    responses: HashMap<String, usize>,
    /// Requests finished while the connection was open, per id, in order: each owes one
    /// non-immediate response.
    finished: HashMap<String, VecDeque<Kind>>,
    /// Subscriptions whose subscribe response has been seen (and no unsubscribe since).
    open: HashSet<String>,
}

impl Observer {
    fn new(limit: u32) -> Self {
        Self {
            decoder: ServerMessageDecoder::new(limit),
            frames: 0,
            hello_error: false,
            requested: HashMap::new(),
            responses: HashMap::new(),
            finished: HashMap::new(),
            open: HashSet::new(),
        }
    }

    fn frame(&mut self, frame: &[u8]) {
        assert!(!self.hello_error, "a frame after hello_error");
        let msgs = self
            .decoder
            .push(frame)
            .expect("the server wrote an invalid frame");
        // One frame, or a run of one subscription's update frames; never a partial frame.
        assert!(!msgs.is_empty(), "whole frames per poll_transmit");
        let first_sid = match msgs.first() {
            Some(ServerMessage::ServiceUpdate(u)) => Some(&u.subscription_id),
            _ => None,
        };
        assert!(
            msgs.len() == 1
                || msgs.iter().all(|m| matches!(
                    m,
                    ServerMessage::ServiceUpdate(u) if Some(&u.subscription_id) == first_sid
                )),
            "only updates of one subscription are sent as runs"
        );
        for m in msgs {
            self.message(m);
        }
    }

    fn message(&mut self, m: ServerMessage) {
        self.frames += 1;
        if self.frames == 1 {
            assert!(
                matches!(
                    m,
                    ServerMessage::Hello { .. } | ServerMessage::HelloError(_)
                ),
                "first frame is {m:?}"
            );
        } else {
            assert!(
                !matches!(m, ServerMessage::Hello { .. }),
                "hello after the first frame"
            );
        }
        match m {
            ServerMessage::Hello { server_id: s } => assert_eq!(s.to_string(), SERVER),
            ServerMessage::HelloError(_) => self.hello_error = true,
            ServerMessage::Attachment(_) => {}
            ServerMessage::ServiceUpdate(u) => {
                assert!(
                    self.open.contains(u.subscription_id.as_str()),
                    "update for {} before its subscribe response (or after unsubscribe)",
                    u.subscription_id
                );
            }
            ServerMessage::Response(r) => {
                let rid = r.id.as_str().to_owned();
                assert!(
                    !CANCEL_ONLY_IDS.contains(&rid.as_str()),
                    "a response to a cancel"
                );
                let n = self.responses.entry(rid.clone()).or_default();
                *n += 1;
                assert!(
                    *n <= self.requested.get(&rid).copied().unwrap_or(0),
                    "more responses than requests for id {rid}"
                );
                let immediate = matches!(&r.outcome, Outcome::Error(e)
                    if IMMEDIATE.iter().any(|p| e.message.starts_with(p))
                        || e.message.starts_with("Duplicate service subscription"));
                if immediate {
                    return;
                }
                let kind = self
                    .finished
                    .get_mut(&rid)
                    .and_then(VecDeque::pop_front)
                    .unwrap_or_else(|| panic!("response {r:?} to no finished request"));
                let ok = !matches!(r.outcome, Outcome::Error(_));
                match kind {
                    Kind::Subscribe(sid) if ok => {
                        assert!(
                            matches!(r.outcome, Outcome::Value(_)),
                            "a subscribe answered void"
                        );
                        self.open.insert(sid);
                    }
                    Kind::Unsubscribe(sid) if ok => {
                        self.open.remove(&sid);
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The fake host: the state of each subscribed service.
#[derive(Default)]
struct Provider {
    sequence: HashMap<String, u64>,
    value: HashMap<String, Value>,
}

impl Provider {
    fn snapshot(&self, sid: &str) -> SubscriptionSnapshot {
        let seq = self.sequence.get(sid).copied().unwrap_or(0);
        let value = self.value.get(sid).cloned().unwrap_or(Value::Null);
        SubscriptionSnapshot::new(
            "svc",
            ServiceMode::Singleton,
            vec![InstanceSnapshot::new(
                None,
                vec![MemberSnapshot::state("state", seq, value)],
            )],
        )
    }
}

/// Target `server_conn`: the sans-IO connection core driven by an in-memory peer and a fake
/// host, both scripted by the input.
///
/// Input: five bytes of limits (active requests, subscriptions, subscriber queue length,
/// pending-byte limit, frame limit), then operations: the peer queues messages (hello,
/// calls, subscribe/unsubscribe, catalogue, invalid calls, cancels, raw garbage) and
/// delivers its bytes in input-chosen chunks through a `ClientMessageDecoder`; the host
/// accepts or refuses the attach, finishes dispatched requests (value, void, error,
/// snapshots good and bad), publishes updates (overflowing into resyncs); the writer drains some or all
/// frames or stalls; timers, drain, finish and abort happen.
///
/// Checks: no panic; every output frame is a valid server frame; the first frame is `hello`
/// or `hello_error` and nothing follows a `hello_error`; no more responses per id than
/// requests with that id, and every non-immediate response matches a finished request; no
/// response carries an id that was only cancelled; a subscription's updates follow its
/// subscribe response and stop at its unsubscribe response; active requests never exceed
/// the limit; pending bytes never exceed the limit (plus one final `hello_error`).
#[expect(clippy::too_many_lines, reason = "one interpreter loop")]
pub fn server_conn(data: &[u8]) {
    let mut src = ValueSource::new(data);
    let limits = ConnLimits {
        max_active_requests: 1 + src.below(4),
        max_subscriptions: 1 + src.below(3),
        subscriber_queue_length: 1 + src.below(4),
        max_pending_bytes: [160, 400, 1200, 4096, 1 << 16][src.below(5)],
        max_frame_length: [1 << 20, 300, 120][src.below(3)],
        resync: crate::ResyncDialect::Lifecycle,
    };
    let start = tokio::time::Instant::now().into_std();
    let timeout = Duration::from_secs(5);
    let mut state = ConnState::new(start, timeout, server_id(SERVER), limits);
    let mut observer = Observer::new(limits.max_frame_length);
    let mut inbound = ClientMessageDecoder::new(limits.max_frame_length);
    let mut peer_bytes: VecDeque<u8> = VecDeque::new();
    let mut attach_pending = false;
    let mut attached = false;
    let mut dispatched: Vec<(Dispatch, Kind)> = Vec::new();
    let mut provider = Provider::default();
    let mut ops = 0;

    while !src.is_empty() && ops < 200 {
        ops += 1;
        match src.below(12) {
            // The peer queues a message.
            0..=2 => {
                let msg = peer_message(&mut src);
                match encode_frame(&msg, 1 << 20) {
                    Ok(f) => peer_bytes.extend(f.iter()),
                    Err(_) => unreachable!("small client messages encode"),
                }
            }
            // The peer queues garbage.
            3 if src.below(4) == 0 => {
                for _ in 0..src.below(12) {
                    peer_bytes.push_back(src.byte());
                }
            }
            // The network delivers a chunk (not while the attach is pending: the reader
            // stops reading then).
            3..=5 => {
                if attach_pending {
                    continue;
                }
                let n = match src.below(4) {
                    0 => peer_bytes.len(),
                    1 => 1,
                    _ => 1 + src.below(40),
                }
                .min(peer_bytes.len());
                let chunk: Vec<u8> = peer_bytes.drain(..n).collect();
                match inbound.push(&chunk) {
                    Ok(msgs) => {
                        for m in msgs {
                            if let ClientMessage::Request(r) = &m {
                                *observer
                                    .requested
                                    .entry(r.id.as_str().to_owned())
                                    .or_default() += 1;
                            }
                            match state.handle_message(m) {
                                Step::Nothing => {}
                                Step::Attach => {
                                    assert!(!attached && !attach_pending, "a second attach");
                                    attach_pending = true;
                                }
                                Step::Dispatch(d) => {
                                    push_dispatch(&mut dispatched, d, &state, limits);
                                }
                            }
                        }
                    }
                    Err(e) => state.handle_decode_error(&e),
                }
            }
            // The host answers the attach.
            6 => {
                if !attach_pending {
                    continue;
                }
                attach_pending = false;
                if src.below(5) == 0 {
                    state.handshake_failed(&ServiceError::new("refused", "not you"));
                } else {
                    attached = true;
                    for d in state.handshake_complete() {
                        push_dispatch(&mut dispatched, d, &state, limits);
                    }
                }
            }
            // The host finishes a request.
            7 => {
                if dispatched.is_empty() {
                    continue;
                }
                let i = src.below(dispatched.len());
                let (d, kind) = dispatched.swap_remove(i);
                let result = host_result(&mut src, &kind, &provider, d.cancel.is_cancelled());
                let open = state.closing().is_none();
                let rid = d.id.as_str().to_owned();
                state.finish_request(&d.id, result);
                if open {
                    observer.finished.entry(rid).or_default().push_back(kind);
                }
            }
            // The host publishes.
            8 => {
                let sid = SUBSCRIPTION_IDS[src.below(SUBSCRIPTION_IDS.len())];
                let update = if src.below(6) == 0 {
                    ProviderUpdate::Unavailable
                } else {
                    let seq = provider.sequence.entry(sid.to_owned()).or_default();
                    *seq += 1;
                    let value = if src.below(3) == 0 {
                        Value::String("x".repeat(src.below(200)))
                    } else {
                        src.value(0)
                    };
                    let mut m = Map::new();
                    m.insert("v", value.clone());
                    provider.value.insert(sid.to_owned(), Value::Map(m));
                    let path = parse_path(&Value::Array(vec![Value::from("v")]))
                        .unwrap_or_else(|_| unreachable!("valid path"));
                    ProviderUpdate::State {
                        instance: None,
                        member: "state".into(),
                        sequence: *seq,
                        ops: vec![Op::Set { path, value }],
                    }
                };
                let published =
                    state.publish(sid, &SharedUpdate::new(update), || provider.snapshot(sid));
                if published == crate::Published::Closed {
                    assert!(state.closing().is_some(), "Closed while open");
                }
            }
            // The writer drains some frames, or everything.
            9 => {
                let all = src.below(3) == 0;
                let n = if all { usize::MAX } else { 1 + src.below(4) };
                drain(&mut state, &mut observer, n);
            }
            // Out of band: timers, attachment changes, drain, finish, abort.
            _ => match src.below(8) {
                0 => state.handle_timeout(start + Duration::from_secs(src.below(8) as u64)),
                1 if attached => state.push_attachment(None),
                2 => state.set_draining(),
                3 if src.below(4) == 0 => state.finish(),
                4 if src.below(8) == 0 => state.abort(),
                5 if src.below(8) == 0 => state.reject(baton_protocol::WireError::from_code(
                    baton_protocol::ErrorCode::Busy,
                    "Too many connections",
                )),
                _ => {
                    let _ = state.deadline();
                    let _ = state.take_wake();
                }
            },
        }
        assert!(
            state.active_requests() <= limits.max_active_requests,
            "active requests over the limit"
        );
        let allowance = if state.closing().is_some() {
            FINAL_FRAME_ALLOWANCE
        } else {
            0
        };
        assert!(
            state.pending_bytes() <= limits.max_pending_bytes + allowance,
            "pending bytes {} over the limit {}",
            state.pending_bytes(),
            limits.max_pending_bytes
        );
    }

    // The host finishes everything, then the writer drains to the end.
    for (d, kind) in std::mem::take(&mut dispatched) {
        let open = state.closing().is_none();
        let rid = d.id.as_str().to_owned();
        state.finish_request(&d.id, Ok(Some(Value::Null)));
        if open {
            observer.finished.entry(rid).or_default().push_back(kind);
        }
    }
    drain(&mut state, &mut observer, usize::MAX);
    if state.closing().is_some() {
        assert!(state.is_finished(), "closing with nothing left to write");
    }
    if observer.hello_error {
        assert!(state.poll_transmit().is_none(), "a frame after hello_error");
    }
    assert!(
        observer.decoder.end().is_ok(),
        "the output stream ends mid-frame"
    );
}

fn drain(state: &mut ConnState, observer: &mut Observer, n: usize) {
    for _ in 0..n {
        let Some(frame) = state.poll_transmit() else {
            break;
        };
        state.transmitted(frame.len());
        observer.frame(&frame);
    }
}

fn push_dispatch(
    dispatched: &mut Vec<(Dispatch, Kind)>,
    d: Dispatch,
    state: &ConnState,
    limits: ConnLimits,
) {
    // `handshake_complete` returns its batch after processing every queued message, so a
    // later one (a second hello) may have closed the connection; those dispatches arrive
    // already cancelled.
    assert!(
        state.closing().is_none() || d.cancel.is_cancelled(),
        "a live dispatch while closing"
    );
    assert!(
        !dispatched.iter().any(|(x, _)| x.id == d.id),
        "two active requests with id {}",
        d.id
    );
    assert!(
        dispatched.len() < limits.max_active_requests,
        "dispatch over the active-request limit"
    );
    let kind = match ControlCall::decode(&d.call) {
        Some(ControlCall::Subscribe {
            subscription_id, ..
        }) => Kind::Subscribe(subscription_id),
        Some(ControlCall::Unsubscribe { subscription_id }) => Kind::Unsubscribe(subscription_id),
        _ => Kind::Call,
    };
    dispatched.push((d, kind));
}

fn host_result(
    src: &mut ValueSource<'_>,
    kind: &Kind,
    provider: &Provider,
    cancelled: bool,
) -> Result<Option<Value>, ServiceError> {
    match (src.below(8), kind) {
        (0, _) => Err(ServiceError::new("fuzz_host", "the host said no")),
        (1, _) if cancelled => Err(ServiceError::from_code(
            baton_protocol::ErrorCode::Cancelled,
            "stopped",
        )),
        (2, _) => Err(ServiceError::internal("secret internal detail")),
        (3, _) => Ok(None),
        (4, Kind::Subscribe(_)) => Ok(Some(src.value(0))),
        (_, Kind::Subscribe(sid)) => Ok(Some(provider.snapshot(sid).to_value())),
        (4 | 5, _) => Ok(Some(Value::String("y".repeat(src.below(400))))),
        _ => Ok(Some(src.value(0))),
    }
}

fn peer_message(src: &mut ValueSource<'_>) -> ClientMessage {
    let rid = || REQUEST_IDS;
    let target = |src: &mut ValueSource<'_>| match src.below(10) {
        0 => Target::Server(server_id(OTHER_SERVER)),
        1 => Target::Session(SessionTarget {
            server_id: server_id(SERVER),
            session_id: id("session"),
            attachment_id: id("attachment"),
        }),
        _ => Target::Server(server_id(SERVER)),
    };
    let request = |src: &mut ValueSource<'_>, call: Value| {
        ClientMessage::Request(Request {
            id: id(rid()[src.below(REQUEST_IDS.len())]),
            target: target(src),
            call,
        })
    };
    let sid = |src: &mut ValueSource<'_>| Value::from(SUBSCRIPTION_IDS[src.below(3)]);
    match src.below(10) {
        0 => match src.below(4) {
            0 => match src.below(8) {
                0 => ClientMessage::Hello {
                    version: HelloVersion::NEGATIVE_ZERO,
                },
                _ => ClientMessage::Hello {
                    version: HelloVersion::from(u32::from(src.byte())),
                },
            },
            _ => ClientMessage::hello(),
        },
        1 | 2 => {
            let args = vec![src.value(0)];
            request(src, call("t", "echo", args))
        }
        3 | 4 => {
            let s = sid(src);
            let mode = if src.below(6) == 0 {
                "keyed"
            } else {
                "singleton"
            };
            let c = call(
                "$chord.service",
                "subscribe",
                vec![s, Value::from("svc"), Value::from(mode)],
            );
            request(src, c)
        }
        5 => {
            let s = sid(src);
            request(src, call("$chord.service", "unsubscribe", vec![s]))
        }
        6 => request(src, call("$chord.service", "catalogue", vec![])),
        7 => {
            let v = src.value(0);
            request(src, v)
        }
        _ => {
            let cid = if src.below(3) == 0 {
                CANCEL_ONLY_IDS[src.below(2)]
            } else {
                REQUEST_IDS[src.below(REQUEST_IDS.len())]
            };
            ClientMessage::Cancel(Cancel {
                id: id(cid),
                target: target(src),
            })
        }
    }
}

/// Body of the `x509_identity` target: `data` is a client certificate (DER) as a TLS peer
/// could present it.
///
/// [`ClientCertificate::from_der`](crate::ClientCertificate::from_der) never panics; the
/// fingerprint is the SHA-256 of the bytes in lowercase hex; bytes `x509-parser` refuses give
/// no names at all, and for bytes it accepts the alternative names are exactly its DNS, IP
/// (4 or 16 bytes), e-mail and URI general names in order; the by-kind accessors partition
/// them. The RFC 4514 escaping (our own code) round-trips every attribute text of the
/// subject and the input itself read as text.
pub fn x509_identity(data: &[u8]) {
    use std::net::IpAddr;

    use x509_parser::certificate::X509Certificate;
    use x509_parser::extensions::GeneralName;
    use x509_parser::prelude::FromDer;

    use crate::identity::x509::{escape, unescape};
    use crate::{ClientCertificate, SubjectAltName};

    let cert = ClientCertificate::from_der(data.to_vec().into());
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    assert_eq!(cert.sha256_fingerprint().as_slice(), digest.as_ref());
    let hex = cert.sha256_fingerprint_hex();
    assert_eq!(hex.len(), 64);
    assert!(hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    let kinds = cert.dns_names().count()
        + cert.ip_addresses().count()
        + cert.emails().count()
        + cert.uris().count();
    assert_eq!(kinds, cert.subject_alt_names().len());
    let _ = format!("{cert:?}");

    match X509Certificate::from_der(data) {
        Err(_) => {
            assert_eq!(cert.subject(), "");
            assert_eq!(cert.common_name(), None);
            assert!(cert.subject_alt_names().is_empty());
        }
        Ok((_, parsed)) => {
            let expected: Vec<SubjectAltName> = match parsed.subject_alternative_name() {
                Ok(Some(san)) => san
                    .value
                    .general_names
                    .iter()
                    .filter_map(|n| match n {
                        GeneralName::DNSName(s) => Some(SubjectAltName::Dns((*s).into())),
                        GeneralName::RFC822Name(s) => Some(SubjectAltName::Email((*s).into())),
                        GeneralName::URI(s) => Some(SubjectAltName::Uri((*s).into())),
                        GeneralName::IPAddress(b) => match b.len() {
                            4 => <[u8; 4]>::try_from(*b).ok().map(IpAddr::from),
                            16 => <[u8; 16]>::try_from(*b).ok().map(IpAddr::from),
                            _ => None,
                        }
                        .map(SubjectAltName::Ip),
                        _ => None,
                    })
                    .collect(),
                Ok(None) | Err(_) => Vec::new(),
            };
            assert_eq!(cert.subject_alt_names(), expected.as_slice());
            if parsed.subject().iter_attributes().next().is_none() {
                assert_eq!(cert.subject(), "");
            }
            for atv in parsed.subject().iter_attributes() {
                if let Ok(text) = atv.as_str() {
                    assert_eq!(unescape(&escape(text)).as_deref(), Some(text));
                }
            }
            if parsed.subject().iter_common_name().next().is_some() {
                assert!(cert.common_name().is_some());
            }
        }
    }
    let text = String::from_utf8_lossy(data);
    assert_eq!(unescape(&escape(&text)).as_deref(), Some(&*text));
}
