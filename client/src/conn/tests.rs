//! Specifications of the sans-IO client connection, driven without sockets or tokio: the test
//! plays the server with [`ServerCodec`], moves virtual time by hand, and plays the glue by
//! collecting the core's events and holding the replicas it lends the core.

mod batch;
mod in_flight;
mod subscriptions;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use baton_protocol::chord::{ControlCall, Replica, ServiceCall, ServiceMode};
use baton_protocol::handshake::HandshakeError;
use baton_protocol::{
    ClientMessage, ErrorCode, Id, Outcome, Request, Response, ServerCodec, ServerId, ServerMessage,
    ServiceUpdate, SessionTarget, Target, Value, WireError,
};
use bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

use super::*;
use crate::config::ReconnectPolicy;
use crate::tls::TlsFailure;

/// A caller, as the core sees it: a tag to tell answers apart.
type Tag = u32;

const MAX_FRAME: u32 = 1 << 20;

/// The in-flight limit of [`Pair::new`]: more than any test but the limit's own makes.
const MAX_IN_FLIGHT: usize = 64;

#[expect(
    clippy::disallowed_methods,
    reason = "one fixed origin for virtual time"
)]
fn origin() -> Instant {
    Instant::now()
}

fn server_id() -> ServerId {
    ServerId::parse("00000000-0000-4000-8000-000000000001").unwrap()
}

fn other_server_id() -> ServerId {
    ServerId::parse("00000000-0000-4000-8000-000000000002").unwrap()
}

fn endpoint() -> Endpoint {
    Endpoint::Unix("/run/baton/test.sock".into())
}

/// A connection refused by the OS (the host is down): retried.
fn refused(n: u32) -> ConnectError {
    ConnectError::Io {
        endpoint: endpoint(),
        source: std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            format!("refused {n}"),
        ),
    }
}

fn json(s: &str) -> Value {
    Value::from_json(s).unwrap()
}

fn call(member: &str) -> Value {
    json(&format!(
        r#"{{"serviceId":"svc","member":"{member}","args":[]}}"#
    ))
}

fn route(attachment: &str) -> SessionTarget {
    SessionTarget {
        server_id: server_id(),
        session_id: Id::new("session-1").unwrap(),
        attachment_id: Id::new(attachment).unwrap(),
    }
}

fn snapshot(sequence: u64, value: &str) -> Value {
    json(&format!(
        r#"{{"serviceId":"pi.models","mode":"singleton","instances":[{{"members":[{{"name":"state","kind":"state","sequence":{sequence},"ops":[["r",{value}]]}}]}}]}}"#
    ))
}

/// No jitter, so every backoff delay is exact.
fn policy() -> ReconnectPolicy {
    ReconnectPolicy {
        initial_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(800),
        multiplier: 2.0,
        jitter: 0.0,
        healthy_after: Duration::from_secs(10),
        max_attempts: None,
    }
}

/// The replicas the test lends the core, as the glue's sinks hold them.
#[derive(Debug, Default)]
struct TestReplicas(HashMap<u64, Replica>);

impl Replicas for TestReplicas {
    fn install(&mut self, key: u64, replica: Replica) {
        self.0.insert(key, replica);
    }

    fn apply<T>(&mut self, key: u64, f: impl FnOnce(&mut Replica) -> T) -> Option<T> {
        self.0.get_mut(&key).map(f)
    }
}

/// What one subscription's handle has been told, channel by channel as the glue splits it.
#[derive(Debug, Default)]
struct SubLog {
    answered: Option<Result<(), RequestError>>,
    events: VecDeque<SubscriptionEvent>,
    /// [`SubscriptionChange::Changed`]s: how often its readers were woken.
    wakes: usize,
    ended: Option<EndReason>,
    /// `Ended` or a failed `Answered` came: nothing may follow.
    finished: bool,
    /// Every change's kind, in order.
    kinds: Vec<&'static str>,
}

/// A core and the server's end of its transport, in virtual time.
struct Pair {
    conn: ClientConn<Tag>,
    /// The allocator the handles share with the core.
    numbers: RequestNumbers,
    now: Instant,
    /// What the client wrote and the server has not read yet.
    wire: BytesMut,
    codec: ServerCodec,
    replicas: TestReplicas,
    /// Every subscription's changes so far, by key.
    subs: HashMap<u64, SubLog>,
    /// Events other than subscription changes, not yet looked at.
    events: VecDeque<Event<Tag>>,
}

impl Pair {
    fn new(reconnect: Option<ReconnectPolicy>, expected: Option<ServerId>) -> Self {
        Self::with_limit(reconnect, expected, MAX_IN_FLIGHT)
    }

    fn with_limit(
        reconnect: Option<ReconnectPolicy>,
        expected: Option<ServerId>,
        max_in_flight: usize,
    ) -> Self {
        let config = ConnConfig {
            max_frame_length: MAX_FRAME,
            expected_server_id: expected,
            reconnect,
            max_in_flight,
            jitter_seed: 7,
        };
        let numbers = RequestNumbers::default();
        Self {
            conn: ClientConn::new(config, numbers.clone()),
            numbers,
            now: origin(),
            wire: BytesMut::new(),
            codec: ServerCodec::new(MAX_FRAME),
            replicas: TestReplicas::default(),
            subs: HashMap::new(),
            events: VecDeque::new(),
        }
    }

    /// A core whose first transport is handshaken, with nothing left to read.
    fn live(reconnect: Option<ReconnectPolicy>) -> Self {
        let mut pair = Self::new(reconnect, None);
        pair.open_and_greet();
        assert!(pair.conn.is_live());
        pair
    }

    fn open_and_greet(&mut self) {
        self.conn.handle_open(self.now);
        assert_eq!(self.recv(), ClientMessage::hello());
        self.send(ServerMessage::Hello {
            server_id: server_id(),
        });
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        if self.conn.poll_timeout().is_some_and(|at| at <= self.now) {
            self.conn.handle_timeout(self.now);
        }
    }

    /// The server sends `msg` (all in one read).
    fn send(&mut self, msg: ServerMessage) {
        let mut buf = BytesMut::new();
        self.codec.encode(msg, &mut buf).unwrap();
        self.feed(&buf);
    }

    /// The transport delivers `bytes` in one read.
    fn feed(&mut self, bytes: &[u8]) {
        self.conn.read_buffer(bytes.len()).extend_from_slice(bytes);
        self.conn.handle_read(self.now, &mut self.replicas);
        while self.conn.has_unread_frames() {
            let _ = self.pump();
            self.conn.handle_read(self.now, &mut self.replicas);
        }
    }

    /// The transport reaches end of stream.
    fn eof(&mut self) {
        self.conn.handle_eof(self.now, &mut self.replicas);
    }

    fn respond(&mut self, id: &Id, outcome: Outcome) {
        self.send(ServerMessage::Response(Response {
            id: id.clone(),
            outcome,
        }));
    }

    /// The next message the client wrote.
    fn recv(&mut self) -> ClientMessage {
        self.try_recv().expect("the client sent a message")
    }

    fn try_recv(&mut self) -> Option<ClientMessage> {
        let _ = self.conn.poll_transmit(&mut self.wire);
        self.codec.decode(&mut self.wire).unwrap()
    }

    fn recv_request(&mut self) -> Request {
        match self.recv() {
            ClientMessage::Request(r) => r,
            other => panic!("expected a request, got {other:?}"),
        }
    }

    fn command(&mut self, cmd: Command<Tag>) {
        self.conn.handle_command(self.now, cmd);
    }

    /// Asks for `member` on the server target as caller `tag`; returns the request number.
    fn request(&mut self, tag: Tag, member: &str, deadline: Option<Instant>) -> u64 {
        self.request_to(
            tag,
            TargetSpec::Explicit(Target::Server(server_id())),
            member,
            deadline,
        )
    }

    /// Asks for `member` at `target` as caller `tag`; returns the request number.
    fn request_to(
        &mut self,
        tag: Tag,
        target: TargetSpec,
        member: &str,
        deadline: Option<Instant>,
    ) -> u64 {
        let number = self.numbers.next();
        self.command(Command::Request(UserRequest {
            number,
            target,
            call: call(member),
            deadline,
            waiter: tag,
        }));
        number
    }

    /// Drains the core's events: subscription changes go to their [`SubLog`], the others
    /// wait for [`events`](Self::events). Returns how many there were.
    fn pump(&mut self) -> usize {
        let mut drained = 0;
        while let Some(event) = self.conn.poll_event() {
            drained += 1;
            let Event::Subscription { key, change } = event else {
                self.events.push_back(event);
                continue;
            };
            let log = self.subs.entry(key).or_default();
            assert!(
                !log.finished,
                "subscription {key} changed after it finished: {change:?}"
            );
            log.kinds.push(match &change {
                SubscriptionChange::Answered(_) => "answered",
                SubscriptionChange::Event(SubscriptionEvent::Snapshot { .. }) => "snapshot",
                SubscriptionChange::Event(SubscriptionEvent::Updates(_)) => "updates",
                SubscriptionChange::Event(SubscriptionEvent::Resyncing { .. }) => "resyncing",
                SubscriptionChange::Event(SubscriptionEvent::Lagged) => "lagged",
                SubscriptionChange::Event(SubscriptionEvent::Ended { .. }) => "ended event",
                SubscriptionChange::Changed => "changed",
                SubscriptionChange::Ended(_) => "ended",
            });
            match change {
                SubscriptionChange::Answered(result) => {
                    assert!(log.answered.is_none(), "subscription {key} answered twice");
                    log.finished = result.is_err();
                    log.answered = Some(result);
                }
                SubscriptionChange::Event(event) => log.events.push_back(event),
                SubscriptionChange::Changed => log.wakes += 1,
                SubscriptionChange::Ended(reason) => {
                    log.finished = true;
                    log.ended = Some(reason);
                    // The glue lets go of an ended subscription's replica.
                    self.replicas.0.remove(&key);
                }
            }
        }
        drained
    }

    /// The events other than subscription changes since the last call, in order.
    fn events(&mut self) -> Vec<Event<Tag>> {
        let _ = self.pump();
        self.events.drain(..).collect()
    }

    /// Subscription `key`'s first-snapshot answer, once it came.
    fn answered(&mut self, key: u64) -> Option<Result<(), RequestError>> {
        let _ = self.pump();
        self.subs.get(&key)?.answered.clone()
    }

    /// The next event on subscription `key`'s stream.
    fn next_sub_event(&mut self, key: u64) -> Option<SubscriptionEvent> {
        let _ = self.pump();
        self.subs.get_mut(&key)?.events.pop_front()
    }

    /// Why subscription `key` ended, once it has.
    fn ended(&mut self, key: u64) -> Option<EndReason> {
        let _ = self.pump();
        self.subs.get(&key)?.ended.clone()
    }

    /// The kinds of subscription `key`'s changes so far, in order.
    fn kinds(&mut self, key: u64) -> Vec<&'static str> {
        let _ = self.pump();
        self.subs
            .get(&key)
            .map(|log| log.kinds.clone())
            .unwrap_or_default()
    }

    /// How often subscription `key`'s readers were woken.
    fn wakes(&mut self, key: u64) -> usize {
        let _ = self.pump();
        self.subs.get(&key).map_or(0, |log| log.wakes)
    }

    /// Subscription `key`'s `state` member, as its readers see it.
    fn state_of(&mut self, key: u64) -> Option<Value> {
        let _ = self.pump();
        self.replicas.0.get(&key)?.value(None, "state").cloned()
    }

    /// Every answer delivered so far, by tag.
    fn answers(&mut self) -> Vec<(Tag, Answer)> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Event::Answer { waiter, answer } => Some((waiter, answer)),
                _ => None,
            })
            .collect()
    }

    fn reply_of(&mut self, tag: Tag) -> Result<Reply, RequestError> {
        let mut found = None;
        for (t, c) in self.answers() {
            if t == tag {
                assert!(found.is_none(), "answered twice");
                found = Some(c);
            }
        }
        match found {
            Some(Answer::Reply(r)) => r,
            other => panic!("expected a reply for {tag}, got {other:?}"),
        }
    }

    /// Attaches to `session-1` through `attachment`, as caller 99.
    fn attach(&mut self, attachment: &str) {
        self.command(Command::Attach {
            session_id: Id::new("session-1").unwrap(),
            waiter: 99,
        });
        let r = self.recv_request();
        assert_eq!(r.target, Target::Server(server_id()));
        self.send(ServerMessage::Attachment(Some(route(attachment))));
        self.respond(&r.id, Outcome::Void);
        let attached: Vec<_> = self
            .answers()
            .into_iter()
            .filter_map(|(t, c)| match (t, c) {
                (99, Answer::Attached(r)) => Some(r.unwrap()),
                _ => None,
            })
            .collect();
        assert_eq!(attached, [route(attachment)]);
    }

    /// Subscribes to `pi.models` at `target` under `key` and returns the subscribe request
    /// and the wire subscription id, before any answer.
    fn subscribe(&mut self, key: u64, target: TargetSpec) -> (Request, String) {
        self.command(Command::Subscribe(Subscribe {
            key,
            target,
            service_id: "pi.models".to_owned(),
            mode: ServiceMode::Singleton,
        }));
        let r = self.recv_request();
        let wire_id = subscribe_id(&r);
        (r, wire_id)
    }
}

fn subscribe_id(r: &Request) -> String {
    match ControlCall::decode(&ServiceCall::parse(&r.call).unwrap()) {
        Some(ControlCall::Subscribe {
            subscription_id, ..
        }) => subscription_id,
        other => panic!("expected subscribe, got {other:?}"),
    }
}

fn status_events(events: &[Event<Tag>]) -> Vec<Status> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Status(s) => Some(s.clone()),
            _ => None,
        })
        .collect()
}

// ---- the handshake ----------------------------------------------------------------------

#[test]
fn the_hello_goes_first_and_the_servers_hello_makes_the_connection_live() {
    let mut pair = Pair::new(None, Some(server_id()));
    assert!(!pair.conn.is_live());
    pair.open_and_greet();
    assert!(pair.conn.is_live());
    assert_eq!(pair.conn.server_id(), Some(&server_id()));
    assert!(pair.conn.take_handshake_failure().is_none());
    // The first connection's status is the handle's initial one: no event for it.
    assert!(status_events(&pair.events()).is_empty());
}

#[test]
fn a_hello_from_another_server_than_expected_fails_the_handshake() {
    let mut pair = Pair::new(None, Some(other_server_id()));
    pair.open_and_greet();
    assert!(!pair.conn.is_live());
    match pair.conn.take_handshake_failure() {
        Some(HandshakeFailure::Handshake(HandshakeError::ServerMismatch { got, expected })) => {
            assert_eq!(got, server_id().to_string());
            assert_eq!(expected, other_server_id().to_string());
        }
        other => panic!("expected a server mismatch, got {other:?}"),
    }
    // The first transport's failure finishes the core: the caller of `connect` gets it.
    pair.conn.handle_connect_failed(
        pair.now,
        &HandshakeFailure::Handshake(HandshakeError::ExpectedHello).into_error(&endpoint()),
    );
    assert!(pair.conn.is_closed());
    assert!(matches!(
        &status_events(&pair.events())[..],
        [Status::Closed {
            reason: CloseReason::ConnectFailed(_)
        }]
    ));
}

#[test]
fn a_hello_error_fails_the_handshake_with_the_servers_code() {
    let mut pair = Pair::new(None, None);
    pair.conn.handle_open(pair.now);
    assert_eq!(pair.recv(), ClientMessage::hello());
    pair.send(ServerMessage::HelloError(WireError::from_code(
        ErrorCode::Version,
        "Unsupported protocol version",
    )));
    match pair.conn.take_handshake_failure() {
        Some(HandshakeFailure::Handshake(HandshakeError::Server(e))) => {
            assert!(e.is(ErrorCode::Version));
        }
        other => panic!("expected the server's refusal, got {other:?}"),
    }
}

#[test]
fn a_first_message_that_is_not_a_hello_fails_the_handshake() {
    let mut pair = Pair::new(None, None);
    pair.conn.handle_open(pair.now);
    let _hello = pair.recv();
    pair.send(ServerMessage::Attachment(None));
    assert!(matches!(
        pair.conn.take_handshake_failure(),
        Some(HandshakeFailure::Handshake(HandshakeError::ExpectedHello))
    ));
}

#[test]
fn a_transport_that_ends_before_the_hello_is_a_closed_handshake() {
    let mut pair = Pair::new(None, None);
    pair.conn.handle_open(pair.now);
    pair.eof();
    assert!(matches!(
        pair.conn.take_handshake_failure(),
        Some(HandshakeFailure::Closed)
    ));
}

#[test]
fn frames_that_arrive_with_the_hello_are_handled_as_live_ones() {
    let mut pair = Pair::new(None, None);
    pair.conn.handle_open(pair.now);
    let _hello = pair.recv();
    let mut buf = BytesMut::new();
    for msg in [
        ServerMessage::Hello {
            server_id: server_id(),
        },
        ServerMessage::Attachment(Some(route("attachment-1"))),
    ] {
        pair.codec.encode(msg, &mut buf).unwrap();
    }
    pair.feed(&buf);
    assert!(pair.conn.is_live());
    let events = pair.events();
    assert!(
        matches!(&events[..], [Event::Attachment(Some(a))] if *a == route("attachment-1")),
        "{events:?}"
    );
}

// ---- requests -----------------------------------------------------------------------------

#[test]
fn responses_complete_their_requests_in_any_order() {
    let mut pair = Pair::live(None);
    let na = pair.request(1, "a", None);
    let nb = pair.request(2, "b", None);
    let a = pair.recv_request();
    let b = pair.recv_request();
    assert_eq!((&a.id, &b.id), (&request_id(na), &request_id(nb)));
    assert_eq!(a.call, call("a"));
    pair.respond(&b.id, Outcome::Value(Value::from("B")));
    assert_eq!(pair.reply_of(2), Ok(Reply::Value(Value::from("B"))));
    pair.respond(
        &a.id,
        Outcome::Error(WireError::new("application_error", "no")),
    );
    match pair.reply_of(1) {
        Err(RequestError::Server(e)) => assert_eq!(e.code.as_str(), "application_error"),
        other => panic!("expected the server's error, got {other:?}"),
    }
    assert_eq!(pair.conn.requests_on_wire(), 0);
}

#[test]
fn a_frame_split_across_reads_is_handled_once_it_is_complete() {
    let mut pair = Pair::live(None);
    pair.request(1, "a", None);
    let r = pair.recv_request();
    let mut buf = BytesMut::new();
    pair.codec
        .encode(
            ServerMessage::Response(Response {
                id: r.id,
                outcome: Outcome::Value(Value::from("done")),
            }),
            &mut buf,
        )
        .unwrap();
    let (head, tail) = buf.split_at(3);
    pair.feed(head);
    assert!(pair.answers().is_empty());
    pair.feed(tail);
    assert_eq!(pair.reply_of(1), Ok(Reply::Value(Value::from("done"))));
}

#[test]
fn a_stream_that_ends_inside_a_frame_is_a_framing_error_not_a_clean_close() {
    let mut pair = Pair::live(None);
    pair.feed(&[0, 0, 0, 9, 1]);
    pair.eof();
    let events = pair.events();
    match &status_events(&events)[..] {
        [
            Status::Closed {
                reason: CloseReason::Lost(reason),
            },
        ] => assert_ne!(reason, "Byte transport closed"),
        other => panic!("expected closed, got {other:?}"),
    }
}

#[test]
fn requests_written_together_are_coalesced_into_one_transmit() {
    let mut pair = Pair::live(None);
    pair.request(1, "a", None);
    pair.request(2, "b", None);
    let mut buf = BytesMut::new();
    assert!(pair.conn.poll_transmit(&mut buf));
    assert!(
        !pair.conn.poll_transmit(&mut buf),
        "everything came out at once"
    );
    let mut codec = ServerCodec::new(MAX_FRAME);
    assert!(matches!(
        codec.decode(&mut buf),
        Ok(Some(ClientMessage::Request(_)))
    ));
    assert!(matches!(
        codec.decode(&mut buf),
        Ok(Some(ClientMessage::Request(_)))
    ));
    assert!(buf.is_empty());
}

#[test]
fn cancelling_a_sent_request_sends_cancel_and_ignores_its_late_answer() {
    let mut pair = Pair::live(None);
    let number = pair.request(1, "slow", None);
    let r = pair.recv_request();
    pair.command(Command::Cancel(number));
    match pair.recv() {
        ClientMessage::Cancel(c) => {
            assert_eq!(c.id, r.id);
            assert_eq!(c.target, Target::Server(server_id()));
        }
        other => panic!("expected cancel, got {other:?}"),
    }
    // The late answer is not fatal and answers nobody.
    pair.respond(
        &r.id,
        Outcome::Error(WireError::new("cancelled", "RPC request cancelled")),
    );
    assert!(pair.conn.is_live());
    assert!(pair.answers().is_empty());
    // Cancelling again, or something never sent, sends nothing.
    pair.command(Command::Cancel(number));
    pair.command(Command::Cancel(number + 1000));
    assert_eq!(pair.try_recv(), None);
}

#[test]
fn a_request_deadline_fails_it_as_timed_out_and_cancels_it() {
    let mut pair = Pair::live(None);
    let deadline = pair.now + Duration::from_millis(300);
    pair.request(1, "slow", Some(deadline));
    assert_eq!(pair.conn.poll_timeout(), Some(deadline));
    let r = pair.recv_request();
    pair.advance(Duration::from_millis(299));
    assert!(pair.answers().is_empty());
    pair.advance(Duration::from_millis(1));
    assert_eq!(pair.reply_of(1), Err(RequestError::TimedOut));
    assert!(matches!(pair.recv(), ClientMessage::Cancel(c) if c.id == r.id));
    assert_eq!(pair.conn.poll_timeout(), None);
    // Its answer may still come: ignored.
    pair.respond(&r.id, Outcome::Void);
    assert!(pair.conn.is_live());
}

#[test]
fn an_answered_request_leaves_no_deadline_behind() {
    let mut pair = Pair::live(None);
    pair.request(1, "fast", Some(pair.now + Duration::from_secs(1)));
    let r = pair.recv_request();
    pair.respond(&r.id, Outcome::Void);
    assert_eq!(pair.reply_of(1), Ok(Reply::Void));
    assert_eq!(pair.conn.poll_timeout(), None);
}

#[test]
fn a_response_for_an_id_the_client_never_sent_ends_the_connection() {
    let mut pair = Pair::live(None);
    pair.request(1, "a", None);
    let _ = pair.recv_request();
    for id in ["request-999", "request-01", "nobody"] {
        let mut pair = Pair::live(None);
        pair.respond(&Id::new(id).unwrap(), Outcome::Void);
        let events = pair.events();
        assert!(
            matches!(events.first(), Some(Event::Disconnect)),
            "{id}: {events:?}"
        );
        assert_eq!(
            status_events(&events),
            [Status::Closed {
                reason: CloseReason::Lost("Response has no matching request".to_owned())
            }]
        );
        assert!(pair.conn.is_closed());
    }
}

#[test]
fn an_update_the_client_cannot_read_fails_the_connection() {
    let mut pair = Pair::live(None);
    pair.feed(&[0, 0, 0, 1, 0xff]);
    assert!(pair.conn.is_closed());
}

#[test]
fn a_request_over_the_frame_limit_fails_alone() {
    let mut pair = Pair::live(None);
    let big = "x".repeat(MAX_FRAME as usize);
    pair.command(Command::Request(UserRequest {
        number: pair.numbers.next(),
        target: TargetSpec::Explicit(Target::Server(server_id())),
        call: Value::from(big.as_str()),
        deadline: None,
        waiter: 1,
    }));
    assert!(matches!(pair.reply_of(1), Err(RequestError::Encode(_))));
    assert_eq!(pair.try_recv(), None);
    assert!(pair.conn.is_live());
}

// ---- the attachment ---------------------------------------------------------------------

#[test]
fn session_requests_use_the_current_attachment_and_fail_without_it() {
    let mut pair = Pair::live(None);
    let session = || TargetSpec::Session(Id::new("session-1").unwrap());
    pair.request_to(1, session(), "early", None);
    assert_eq!(
        pair.reply_of(1),
        Err(RequestError::NotAttached("session-1".to_owned()))
    );
    assert_eq!(pair.try_recv(), None, "nothing goes out with a stale route");

    pair.attach("attachment-1");
    pair.request_to(2, session(), "state", None);
    assert_eq!(
        pair.recv_request().target,
        Target::Session(route("attachment-1"))
    );
    // The server moves the attachment: later calls follow it.
    pair.send(ServerMessage::Attachment(Some(route("attachment-2"))));
    assert!(matches!(
        &pair.events()[..],
        [Event::Attachment(Some(a))] if *a == route("attachment-2")
    ));
    pair.request_to(3, session(), "state", None);
    assert_eq!(
        pair.recv_request().target,
        Target::Session(route("attachment-2"))
    );
}

#[test]
fn an_attachment_for_another_server_ends_the_connection() {
    let mut pair = Pair::live(None);
    pair.send(ServerMessage::Attachment(Some(SessionTarget {
        server_id: other_server_id(),
        ..route("attachment-1")
    })));
    assert_eq!(
        status_events(&pair.events()),
        [Status::Closed {
            reason: CloseReason::Lost("Attachment update belongs to another server".to_owned())
        }]
    );
}

#[test]
fn attaching_by_a_prefix_answers_with_the_session_the_server_announced() {
    let mut pair = Pair::live(None);
    pair.command(Command::Attach {
        session_id: Id::new("sess").unwrap(),
        waiter: 1,
    });
    let r = pair.recv_request();
    assert_eq!(
        r.call,
        json(r#"{"serviceId":"pi.session-management","member":"attach","args":["sess"]}"#)
    );
    pair.send(ServerMessage::Attachment(Some(route("attachment-1"))));
    pair.respond(&r.id, Outcome::Void);
    let answers = pair.answers();
    assert!(
        matches!(&answers[..], [(1, Answer::Attached(Ok(a)))] if *a == route("attachment-1")),
        "{answers:?}"
    );
}

#[test]
fn a_detach_answers_its_caller_and_ends_the_sessions_subscriptions() {
    let mut pair = Pair::live(None);
    pair.attach("attachment-1");
    let (r, _) = pair.subscribe(1, TargetSpec::Session(Id::new("session-1").unwrap()));
    pair.respond(&r.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    pair.command(Command::Detach { waiter: 7 });
    let d = pair.recv_request();
    pair.send(ServerMessage::Attachment(None));
    pair.respond(&d.id, Outcome::Void);
    assert_eq!(pair.reply_of(7), Ok(Reply::Void));
    assert_eq!(pair.ended(1), Some(EndReason::Detached));
    assert_eq!(pair.conn.subscriptions(), 0, "the core forgets it");
    assert!(matches!(
        pair.next_sub_event(1),
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    // The sink empties the replica and queues `Ended` (`crate::sink`'s tests).
    assert!(pair.next_sub_event(1).is_none());
}

// ---- subscriptions ----------------------------------------------------------------------

#[test]
fn a_subscription_installs_its_snapshot_then_applies_deltas_including_early_ones() {
    let mut pair = Pair::live(None);
    let (r, wire_id) = pair.subscribe(1, TargetSpec::Explicit(Target::Server(server_id())));
    assert_eq!(wire_id, "service-1");
    let update = |body: &str| {
        ServerMessage::ServiceUpdate(ServiceUpdate {
            subscription_id: Id::new(wire_id.as_str()).unwrap(),
            update: json(body),
        })
    };
    // Sequence 1 beats the snapshot: it waits for it.
    pair.send(update(
        r#"{"type":"state","member":"state","sequence":1,"ops":[["s",["revision"],1]]}"#,
    ));
    assert!(pair.answered(1).is_none(), "not ready before the snapshot");
    pair.respond(&r.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    assert!(matches!(pair.answered(1), Some(Ok(()))));
    assert_eq!(pair.state_of(1), Some(json(r#"{"revision":1}"#)));
    pair.send(update(
        r#"{"type":"state","member":"state","sequence":2,"ops":[["s",["revision"],2]]}"#,
    ));
    assert_eq!(pair.state_of(1), Some(json(r#"{"revision":2}"#)));
    assert!(matches!(
        pair.next_sub_event(1),
        Some(SubscriptionEvent::Snapshot { resynced: false })
    ));
    // The early update comes with the snapshot, the next in its own read.
    assert!(matches!(
        pair.next_sub_event(1),
        Some(SubscriptionEvent::Updates(b)) if b.sequences().collect::<Vec<_>>() == [Some(1)]
    ));
    assert!(matches!(
        pair.next_sub_event(1),
        Some(SubscriptionEvent::Updates(b)) if b.sequences().collect::<Vec<_>>() == [Some(2)]
    ));

    // A gap re-subscribes under a fresh id, unsubscribing the old one.
    pair.send(update(
        r#"{"type":"state","member":"state","sequence":9,"ops":[["s",["revision"],9]]}"#,
    ));
    let unsub = pair.recv_request();
    assert!(matches!(
        ControlCall::decode(&ServiceCall::parse(&unsub.call).unwrap()),
        Some(ControlCall::Unsubscribe { subscription_id }) if subscription_id == "service-1"
    ));
    let again = pair.recv_request();
    assert_eq!(subscribe_id(&again), "service-2");
    pair.respond(&unsub.id, Outcome::Void);
    pair.respond(&again.id, Outcome::Value(snapshot(9, r#"{"revision":9}"#)));
    assert_eq!(pair.state_of(1), Some(json(r#"{"revision":9}"#)));

    // Dropping the handle unsubscribes the current id.
    pair.command(Command::Unsubscribe(1));
    let unsub = pair.recv_request();
    assert!(matches!(
        ControlCall::decode(&ServiceCall::parse(&unsub.call).unwrap()),
        Some(ControlCall::Unsubscribe { subscription_id }) if subscription_id == "service-2"
    ));
}

#[test]
fn a_failed_subscribe_answers_the_waiting_caller_with_the_servers_error() {
    let mut pair = Pair::live(None);
    let (r, _) = pair.subscribe(1, TargetSpec::Explicit(Target::Server(server_id())));
    let not_found = WireError::new("service_not_found", "no such service");
    pair.respond(&r.id, Outcome::Error(not_found.clone()));
    assert_eq!(
        pair.answered(1).unwrap(),
        Err(RequestError::Server(not_found))
    );
}

// ---- losing the connection --------------------------------------------------------------

#[test]
fn without_a_policy_a_lost_connection_fails_sent_requests_as_outcome_unknown_and_finishes() {
    let mut pair = Pair::live(None);
    pair.request(1, "slow", None);
    let _ = pair.recv_request();
    pair.eof();
    let events = pair.events();
    assert!(pair.conn.is_closed());
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Answer { waiter: 1, answer: Answer::Reply(Err(RequestError::OutcomeUnknown(r))) }
            if r == "Byte transport closed"
    )));
    assert_eq!(
        status_events(&events),
        [Status::Closed {
            reason: CloseReason::Lost("Byte transport closed".to_owned())
        }]
    );
    // What comes after was never sent.
    pair.request(2, "after", None);
    assert_eq!(
        pair.reply_of(2),
        Err(RequestError::NotSent("Byte transport closed".to_owned()))
    );
    assert_eq!(pair.try_recv(), None);
}

#[test]
fn a_lost_connection_plans_the_re_attach_then_the_session_re_subscribe() {
    let mut pair = Pair::live(Some(policy()));
    pair.attach("attachment-1");
    let session = TargetSpec::Session(Id::new("session-1").unwrap());
    let (r, _) = pair.subscribe(1, session.clone());
    pair.respond(&r.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    pair.request_to(5, session, "prompt", None);
    let _ = pair.recv_request();

    pair.conn.handle_lost(pair.now, "reset by peer".to_owned());
    let events = pair.events();
    // The request may have run: its outcome is unknown.
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Answer {
            waiter: 5,
            answer: Answer::Reply(Err(RequestError::OutcomeUnknown(_)))
        }
    )));
    assert!(events.iter().any(|e| matches!(e, Event::Attachment(None))));
    assert_eq!(
        status_events(&events),
        [Status::Reconnecting {
            attempt: 1,
            reason: "reset by peer".to_owned(),
            retry_in: Duration::from_millis(100),
            retry_at: pair.now + Duration::from_millis(100),
        }]
    );
    let _ = pair.next_sub_event(1); // the first snapshot
    assert!(matches!(
        pair.next_sub_event(1),
        Some(SubscriptionEvent::Resyncing { reason }) if reason.starts_with("connection lost")
    ));
    assert!(
        pair.ended(1).is_none(),
        "a lost connection alone ends nothing"
    );

    // The backoff is a deadline; the attempt is an event.
    assert_eq!(
        pair.conn.poll_timeout(),
        Some(pair.now + Duration::from_millis(100))
    );
    pair.advance(Duration::from_millis(99));
    assert!(pair.events().is_empty());
    pair.advance(Duration::from_millis(1));
    assert!(matches!(&pair.events()[..], [Event::Dial]));
    pair.open_and_greet();
    assert_eq!(status_events(&pair.events()), [Status::Connected]);

    // Re-attach first, by the canonical id; the session's subscription waits for it.
    let attach = pair.recv_request();
    assert_eq!(
        attach.call,
        json(r#"{"serviceId":"pi.session-management","member":"attach","args":["session-1"]}"#)
    );
    assert_eq!(pair.try_recv(), None);
    pair.send(ServerMessage::Attachment(Some(route("attachment-2"))));
    pair.respond(&attach.id, Outcome::Void);
    let resub = pair.recv_request();
    assert_eq!(resub.target, Target::Session(route("attachment-2")));
    pair.respond(&resub.id, Outcome::Value(snapshot(5, r#"{"revision":5}"#)));
    assert!(matches!(
        pair.next_sub_event(1),
        Some(SubscriptionEvent::Snapshot { resynced: true })
    ));
    assert_eq!(pair.state_of(1), Some(json(r#"{"revision":5}"#)));
}

#[test]
fn a_first_subscribe_cut_short_by_a_lost_connection_is_sent_again_on_the_next() {
    let mut pair = Pair::live(Some(policy()));
    let (_unanswered, first) = pair.subscribe(1, TargetSpec::Explicit(Target::Server(server_id())));
    pair.conn.handle_lost(pair.now, "gone".to_owned());
    assert!(pair.answered(1).is_none(), "still waiting, not failed");
    pair.advance(Duration::from_millis(100));
    pair.open_and_greet();
    let again = pair.recv_request();
    assert_ne!(subscribe_id(&again), first);
    pair.respond(&again.id, Outcome::Value(snapshot(3, r#"{"revision":3}"#)));
    assert!(matches!(pair.answered(1), Some(Ok(()))));
    assert_eq!(pair.state_of(1), Some(json(r#"{"revision":3}"#)));
}

#[test]
fn a_failed_re_attach_ends_the_sessions_subscriptions() {
    let mut pair = Pair::live(Some(policy()));
    pair.attach("attachment-1");
    let (r, _) = pair.subscribe(1, TargetSpec::Session(Id::new("session-1").unwrap()));
    pair.respond(&r.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    pair.conn.handle_lost(pair.now, "gone".to_owned());
    pair.advance(Duration::from_millis(100));
    pair.open_and_greet();
    let attach = pair.recv_request();
    let not_found = WireError::from_code(ErrorCode::SessionNotFound, "Session not found");
    pair.respond(&attach.id, Outcome::Error(not_found.clone()));
    assert_eq!(
        pair.ended(1),
        Some(EndReason::ReattachFailed(RequestError::Server(not_found)))
    );
    assert_eq!(pair.try_recv(), None, "nothing is re-subscribed");
}

#[test]
fn requests_made_between_connections_wait_and_go_out_after_the_resume() {
    let mut pair = Pair::live(Some(policy()));
    let (r, _) = pair.subscribe(1, TargetSpec::Explicit(Target::Server(server_id())));
    pair.respond(&r.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    pair.conn.handle_lost(pair.now, "gone".to_owned());
    let _ = pair.events();
    let later_number = pair.request(1, "later", None);
    let dropped = pair.request(2, "dropped", None);
    pair.command(Command::Cancel(dropped));
    assert!(pair.answers().is_empty(), "held, not failed");
    pair.advance(Duration::from_millis(100));
    pair.open_and_greet();
    // The re-subscribe, then the held request; the cancelled one never leaves.
    assert_eq!(subscribe_id(&pair.recv_request()), "service-2");
    let later = pair.recv_request();
    assert_eq!(later.call, call("later"));
    assert_eq!(later.id, request_id(later_number));
    assert_eq!(pair.try_recv(), None);
    pair.respond(&later.id, Outcome::Void);
    assert_eq!(pair.reply_of(1), Ok(Reply::Void));
}

#[test]
fn a_held_request_times_out_at_its_deadline_without_being_sent() {
    let mut pair = Pair::live(Some(ReconnectPolicy {
        initial_delay: Duration::from_secs(5),
        max_delay: Duration::from_secs(5),
        ..policy()
    }));
    pair.conn.handle_lost(pair.now, "gone".to_owned());
    let _ = pair.events();
    pair.request(1, "slow", Some(pair.now + Duration::from_secs(1)));
    assert_eq!(
        pair.conn.poll_timeout(),
        Some(pair.now + Duration::from_secs(1)),
        "the earlier of the request deadline and the next attempt"
    );
    pair.advance(Duration::from_secs(1));
    assert_eq!(pair.reply_of(1), Err(RequestError::TimedOut));
    pair.advance(Duration::from_secs(4));
    pair.open_and_greet();
    assert_eq!(pair.try_recv(), None);
}

#[test]
fn the_backoff_grows_until_a_connection_stays_healthy_then_starts_over() {
    let mut pair = Pair::live(Some(policy()));
    let mut delays = Vec::new();
    for _ in 0..5 {
        pair.conn.handle_lost(pair.now, "dropped".to_owned());
        let _ = pair.events();
        let at = pair.conn.poll_timeout().unwrap();
        delays.push(at - pair.now);
        pair.now = at;
        pair.conn.handle_timeout(pair.now);
        assert!(matches!(&pair.events()[..], [Event::Dial]));
        pair.open_and_greet();
    }
    let ms = Duration::from_millis;
    assert_eq!(delays, [ms(100), ms(200), ms(400), ms(800), ms(800)]);

    // Up for `healthy_after` (nothing to resume): the next loss starts over.
    pair.now += Duration::from_secs(10);
    pair.conn.handle_lost(pair.now, "dropped".to_owned());
    assert_eq!(pair.conn.poll_timeout(), Some(pair.now + ms(100)));
}

#[test]
fn failed_attempts_count_toward_max_attempts_and_giving_up_closes() {
    let mut pair = Pair::live(Some(ReconnectPolicy {
        max_attempts: Some(2),
        ..policy()
    }));
    pair.conn.handle_lost(pair.now, "dropped".to_owned());
    for n in 1..=2 {
        pair.now = pair.conn.poll_timeout().unwrap();
        pair.conn.handle_timeout(pair.now);
        let _ = pair.events();
        pair.conn.handle_connect_failed(pair.now, &refused(n));
    }
    let events = pair.events();
    assert!(pair.conn.is_closed());
    assert_eq!(
        status_events(&events),
        [Status::Closed {
            reason: CloseReason::GaveUp {
                attempts: 2,
                last: refused(2).to_string()
            }
        }]
    );
}

#[test]
fn close_fails_what_was_sent_as_outcome_unknown_and_refuses_what_comes_after() {
    let mut pair = Pair::live(None);
    pair.request(1, "slow", None);
    let _ = pair.recv_request();
    let (_, _) = pair.subscribe(2, TargetSpec::Explicit(Target::Server(server_id())));
    pair.conn.close("client closed");
    pair.conn.close("twice");
    let events = pair.events();
    assert!(matches!(events.first(), Some(Event::Disconnect)));
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Answer {
            waiter: 1,
            answer: Answer::Reply(Err(RequestError::OutcomeUnknown(_)))
        }
    )));
    assert_eq!(
        status_events(&events),
        [Status::Closed {
            reason: CloseReason::Requested("client closed".to_owned())
        }]
    );
    assert!(pair.answered(2).unwrap().is_err());
    pair.command(Command::Attach {
        session_id: Id::new("s").unwrap(),
        waiter: 3,
    });
    assert!(matches!(
        &pair.answers()[..],
        [(3, Answer::Attached(Err(RequestError::NotSent(_))))]
    ));
}

// ---- reconnect refusals -----------------------------------------------------------------

/// A live core with a reconnect policy, attached to `session-1` with a session subscription
/// that has its snapshot; then the connection is lost and the first attempt is due and dialled.
fn dialling_after_a_loss() -> Pair {
    let mut pair = Pair::live(Some(policy()));
    pair.attach("attachment-1");
    let (r, _) = pair.subscribe(1, TargetSpec::Session(Id::new("session-1").unwrap()));
    pair.respond(&r.id, Outcome::Value(snapshot(0, r#"{"revision":0}"#)));
    pair.conn.handle_lost(pair.now, "reset by peer".to_owned());
    pair.advance(Duration::from_millis(100));
    assert!(matches!(pair.events().last(), Some(Event::Dial)));
    pair
}

/// The attempt's transport opens and the server answers the hello with `answer`; the core
/// is told the handshake's failure as the glue tells it.
fn answer_the_attempt(pair: &mut Pair, answer: ServerMessage) {
    pair.conn.handle_open(pair.now);
    assert_eq!(pair.recv(), ClientMessage::hello());
    pair.send(answer);
    let failure = pair
        .conn
        .take_handshake_failure()
        .expect("the handshake failed");
    pair.conn
        .handle_connect_failed(pair.now, &failure.into_error(&endpoint()));
}

/// The core finished with `refusal` at once: no further attempt is planned, what waited for
/// the next transport is refused, the session's subscription ends with the same reason.
/// Returns the events of the ending.
fn assert_stopped_with(pair: &mut Pair, refusal: &ReconnectRefusal) -> Vec<Event<Tag>> {
    let events = pair.events();
    assert_eq!(
        status_events(&events),
        [Status::Closed {
            reason: CloseReason::Refused(refusal.clone())
        }]
    );
    assert!(pair.conn.is_closed());
    assert!(!events.iter().any(|e| matches!(e, Event::Dial)));
    assert_eq!(pair.conn.poll_timeout(), None, "no attempt is scheduled");
    pair.advance(Duration::from_secs(3600));
    assert!(pair.events().is_empty(), "and none comes later");
    assert_eq!(
        pair.ended(1),
        Some(EndReason::Closed(CloseReason::Refused(refusal.clone())))
    );
    pair.request(42, "after", None);
    assert_eq!(
        pair.reply_of(42),
        Err(RequestError::NotSent(refusal.to_string()))
    );
    events
}

#[test]
fn a_reconnect_answered_with_another_server_id_stops_at_once_as_server_changed() {
    let mut pair = dialling_after_a_loss();
    // Held while no transport is live; refused with the reason once the core finishes.
    pair.request(7, "held", None);
    answer_the_attempt(
        &mut pair,
        ServerMessage::Hello {
            server_id: other_server_id(),
        },
    );
    let refusal = ReconnectRefusal::ServerChanged {
        expected: server_id().to_string(),
        got: other_server_id().to_string(),
    };
    let events = assert_stopped_with(&mut pair, &refusal);
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Answer { waiter: 7, answer: Answer::Reply(Err(RequestError::NotSent(r))) }
            if *r == refusal.to_string()
    )));
    assert_eq!(
        refusal.to_string(),
        "a different host answers now: its server id is \
         00000000-0000-4000-8000-000000000002, not 00000000-0000-4000-8000-000000000001"
    );
}

#[test]
fn a_reconnect_refused_by_the_access_policy_stops_at_once_as_identity_refused() {
    let mut pair = dialling_after_a_loss();
    let message = "Identity tls:sha256=ab12 is not admitted by the access policy";
    answer_the_attempt(
        &mut pair,
        ServerMessage::HelloError(WireError::from_code(ErrorCode::Forbidden, message)),
    );
    assert_stopped_with(
        &mut pair,
        &ReconnectRefusal::IdentityRefused {
            reason: message.to_owned(),
        },
    );
}

#[test]
fn a_reconnect_to_a_server_of_another_protocol_version_stops_at_once() {
    let mut pair = dialling_after_a_loss();
    answer_the_attempt(
        &mut pair,
        ServerMessage::HelloError(WireError::from_code(
            ErrorCode::Version,
            "Unsupported protocol version",
        )),
    );
    assert_stopped_with(
        &mut pair,
        &ReconnectRefusal::Incompatible {
            reason: "Unsupported protocol version".to_owned(),
        },
    );
}

fn tls_error(failure: TlsFailure, reason: &str) -> ConnectError {
    ConnectError::Tls {
        endpoint: "tls://127.0.0.1:7879".parse().unwrap(),
        reason: reason.to_owned(),
        failure,
    }
}

#[test]
fn a_tls_handshake_that_refuses_the_client_certificate_stops_reconnecting_at_once() {
    let mut pair = dialling_after_a_loss();
    let error = tls_error(TlsFailure::ClientRefused, "received fatal alert: UnknownCA");
    pair.conn.handle_connect_failed(pair.now, &error);
    assert_stopped_with(
        &mut pair,
        &ReconnectRefusal::IdentityRefused {
            reason: "the TLS handshake refused its certificate (received fatal alert: UnknownCA)"
                .to_owned(),
        },
    );
}

#[test]
fn a_server_certificate_no_longer_trusted_stops_reconnecting_at_once() {
    let mut pair = dialling_after_a_loss();
    let reason = "invalid peer certificate: UnknownIssuer";
    pair.conn
        .handle_connect_failed(pair.now, &tls_error(TlsFailure::ServerRejected, reason));
    assert_stopped_with(
        &mut pair,
        &ReconnectRefusal::ServerUntrusted {
            reason: reason.to_owned(),
        },
    );
}

#[test]
fn transport_failures_and_a_busy_or_draining_server_are_retried_with_growing_delays() {
    let mut pair = dialling_after_a_loss();
    let failures = [
        refused(1),
        ConnectError::Timeout {
            endpoint: endpoint(),
        },
        ConnectError::Closed {
            endpoint: endpoint(),
        },
        tls_error(TlsFailure::Other, "connection reset by peer"),
        HandshakeFailure::Handshake(HandshakeError::Server(WireError::from_code(
            ErrorCode::ServerDraining,
            "Server is draining",
        )))
        .into_error(&endpoint()),
        HandshakeFailure::Handshake(HandshakeError::Server(WireError::from_code(
            ErrorCode::Busy,
            "too many connections",
        )))
        .into_error(&endpoint()),
        HandshakeFailure::Decode(DecodeError::InvalidMessage { side: Side::Server })
            .into_error(&endpoint()),
    ];
    let mut delays = Vec::new();
    for (n, failure) in failures.iter().enumerate() {
        assert_eq!(failure.refusal(), None, "{failure}");
        pair.conn.handle_connect_failed(pair.now, failure);
        let events = pair.events();
        match &status_events(&events)[..] {
            [
                Status::Reconnecting {
                    attempt,
                    reason,
                    retry_in,
                    retry_at,
                },
            ] => {
                // The first attempt (after the loss) was number 1.
                assert_eq!(*attempt, u32::try_from(n).unwrap() + 2, "{failure}");
                assert_eq!(*reason, failure.to_string());
                assert_eq!(Some(*retry_at), pair.conn.poll_timeout());
                assert_eq!(*retry_at, pair.now + *retry_in);
                delays.push(*retry_in);
            }
            other => panic!("{failure}: expected a retry, got {other:?}"),
        }
        pair.now = pair.conn.poll_timeout().unwrap();
        pair.conn.handle_timeout(pair.now);
        assert!(matches!(&pair.events()[..], [Event::Dial]));
    }
    let ms = Duration::from_millis;
    assert_eq!(
        delays,
        [
            ms(200),
            ms(400),
            ms(800),
            ms(800),
            ms(800),
            ms(800),
            ms(800)
        ]
    );
    assert!(pair.ended(1).is_none(), "nothing ended");
    let _ = pair.next_sub_event(1); // the first snapshot
    assert!(matches!(
        pair.next_sub_event(1),
        Some(SubscriptionEvent::Resyncing { .. })
    ));
}

#[test]
fn the_reconnecting_status_carries_the_jittered_delay_the_core_waits() {
    let mut pair = Pair::live(Some(ReconnectPolicy {
        jitter: 0.25,
        ..policy()
    }));
    let mut drawn = Vec::new();
    for _ in 0..3 {
        pair.conn.handle_lost(pair.now, "dropped".to_owned());
        let events = pair.events();
        let statuses = status_events(&events);
        let [
            Status::Reconnecting {
                retry_in, retry_at, ..
            },
        ] = &statuses[..]
        else {
            panic!("expected reconnecting: {events:?}");
        };
        assert_eq!(pair.conn.poll_timeout(), Some(*retry_at));
        assert_eq!(*retry_at, pair.now + *retry_in);
        drawn.push(*retry_in);
        pair.now = *retry_at;
        pair.conn.handle_timeout(pair.now);
        let _ = pair.events();
        pair.open_and_greet();
        let _ = pair.events(); // connected
    }
    // 100, 200 and 400 ms, each scaled by a factor in [0.75, 1.25).
    for (delay, base) in drawn.iter().zip([100.0, 200.0, 400.0]) {
        let ms = delay.as_secs_f64() * 1000.0;
        assert!(ms >= base * 0.75 && ms < base * 1.25, "{ms} ms for {base}");
    }
    assert!(
        drawn
            .iter()
            .zip([100, 200, 400])
            .any(|(d, base)| *d != Duration::from_millis(base)),
        "jittered, not the middle: {drawn:?}"
    );
}
