//! The sans-IO core of a client connection: handshake, the request table, the in-flight
//! limit, cancel, the attachment route, subscriptions, and reconnect bookkeeping.
//!
//! [`ClientConn`] owns no socket, task, channel or clock. It outlives every transport of one
//! client: each transport is a new handshake, and what the client wants (its attachment, its
//! subscriptions) is re-made on it. Time is always a `now` argument, so timeouts and the
//! reconnect backoff are deadlines it reports, never timers it runs; the backoff jitter's seed
//! is part of its configuration.
//!
//! A failed reconnect attempt is classified here ([`ConnectError::refusal`]): one that no
//! retry can cure (another server id, this identity refused, the server's certificate
//! untrusted, another protocol version) finishes the core at once with
//! [`CloseReason::Refused`]; any other is retried after the next backoff delay, which
//! [`Status::Reconnecting`] reports as drawn.
//!
//! # Calling contract
//! * Inputs (`handle_*`): [`handle_open`](ClientConn::handle_open) when a transport is up,
//!   [`handle_read`](ClientConn::handle_read) after reading into
//!   [`read_buffer`](ClientConn::read_buffer) (the decoder's own buffer: frames are decoded
//!   where they were read; the glue lends its [`Replicas`] for it), and again, after
//!   draining the events, while [`has_unread_frames`](ClientConn::has_unread_frames);
//!   [`handle_eof`](ClientConn::handle_eof),
//!   [`handle_lost`](ClientConn::handle_lost) (the transport failed),
//!   [`handle_connect_failed`](ClientConn::handle_connect_failed) (opening or handshaking a
//!   transport failed), [`handle_command`](ClientConn::handle_command) (what a handle asked
//!   for), [`handle_timeout`](ClientConn::handle_timeout) once
//!   [`poll_timeout`](ClientConn::poll_timeout) has passed, and
//!   [`close`](ClientConn::close).
//! * After any input, drain the outputs (`poll_*`): [`poll_event`](ClientConn::poll_event)
//!   until `None` (answers for callers, what became of each subscription, attachment and
//!   status changes, [`Event::Dial`] to open a transport, [`Event::Disconnect`] to drop the
//!   current one), [`poll_transmit`](ClientConn::poll_transmit) into the write buffer, and
//!   re-arm the timer from [`poll_timeout`](ClientConn::poll_timeout).
//! * Hand over commands only while [`accepts_commands`](ClientConn::accepts_commands) says so
//!   (the requests waiting for an in-flight slot are bounded).
//! * `now` must not go backwards.
//!
//! While a transport is handshaking,
//! [`take_handshake_failure`](ClientConn::take_handshake_failure) says why it failed and
//! [`is_live`](ClientConn::is_live) that it succeeded.
//!
//! Request numbers come from a [`RequestNumbers`] allocator the handles share, so a caller
//! can name its request in a later [`Command::Cancel`] before the core has seen it; the
//! request table (what each number is waiting for) has this one owner.
//!
//! Every caller's request takes a slot of the in-flight limit ([`in_flight`]) from the moment
//! the core admits it until it settles; beyond the limit it waits in the core, in order.
//!
//! Subscriptions ([`subscriptions`]) are the core's state; their replicas are the glue's,
//! where readers see them, lent to the core while it reads ([`Replicas`]). What becomes of a
//! subscription comes out as [`Event::Subscription`], in order with every other output.

mod batch;
mod command;
mod decode;
mod event;
mod in_flight;
mod requests;
mod subscriptions;
#[cfg(test)]
mod tests;

use std::collections::{HashSet, VecDeque};
use std::mem;
use std::time::Instant;

use baton_protocol::chord::{ControlCall, ServiceCall};
use baton_protocol::handshake::{ClientHandshake, HandshakeError};
use baton_protocol::{
    Cancel, ClientMessage, DecodeError, Id, Outcome, Request, ServerFrame, ServerFrameDecoder,
    ServerId, ServerMessage, SessionTarget, Side, Target, Value, encode_frame_into,
};
use bytes::{Bytes, BytesMut};
use tracing::{debug, warn};

use crate::config::ReconnectPolicy;
use crate::endpoint::Endpoint;
use crate::error::{ConnectError, RequestError};
use crate::reply::Reply;
use crate::status::{CloseReason, ReconnectRefusal, Status};

pub use self::batch::{Encodings, UpdateBatch, Updates};
pub(crate) use self::command::{Command, Subscribe, TargetSpec, UserRequest};
pub(crate) use self::event::{Answer, Event, SubscriptionChange};
pub use self::event::{EndReason, SubscriptionEvent};
use self::in_flight::InFlight;
pub(crate) use self::requests::{NumberMap, RequestNumbers};
use self::requests::{Purpose, RequestTable, Sent, Slot, request_id, request_number};
pub(crate) use self::subscriptions::Replicas;
use self::subscriptions::{Resync, Subscriptions};

/// The service that attaches a connection to a session (pi's session manager).
pub const SESSION_MANAGEMENT_SERVICE: &str = "pi.session-management";

/// Events after which [`ClientConn::handle_read`] sets the rest of a read aside until the
/// glue has drained them, so the event queue stays small however many frames one read holds
/// (a 64 KiB read can hold well over a thousand updates).
const EVENT_BATCH: usize = 64;

/// Why a transport's handshake failed.
#[derive(Debug)]
pub(crate) enum HandshakeFailure {
    /// The server refused the hello or broke a handshake rule.
    Handshake(HandshakeError),
    /// The server's bytes did not decode.
    Decode(DecodeError),
    /// The server closed the connection before its hello.
    Closed,
}

impl HandshakeFailure {
    /// The error the caller of a connect to `endpoint` gets (and the core is told about in
    /// [`ClientConn::handle_connect_failed`]).
    pub(crate) fn into_error(self, endpoint: &Endpoint) -> ConnectError {
        let endpoint = endpoint.clone();
        match self {
            Self::Handshake(source) => ConnectError::Handshake { endpoint, source },
            Self::Decode(source) => ConnectError::Protocol { endpoint, source },
            Self::Closed => ConnectError::Closed { endpoint },
        }
    }
}

/// Where the connection stands.
#[derive(Debug)]
enum Link {
    /// No transport: one is being opened.
    Dialing,
    /// Hello sent, waiting for the server's.
    Handshaking(ClientHandshake),
    /// Handshaken.
    Live,
    /// No transport: the next attempt is at `until`.
    Backoff { until: Instant },
    /// Finished for good.
    Closed { reason: CloseReason },
}

/// Configuration of the core.
#[derive(Debug, Clone)]
pub(crate) struct ConnConfig {
    /// Frame limit for both directions.
    pub(crate) max_frame_length: u32,
    /// Refuse a first server whose hello carries another id (later ones must match the
    /// first's).
    pub(crate) expected_server_id: Option<ServerId>,
    /// Reconnect policy (`None`: a lost connection finishes the client).
    pub(crate) reconnect: Option<ReconnectPolicy>,
    /// Callers' requests in flight at once (at least one); as many more wait in order.
    pub(crate) max_in_flight: usize,
    /// Seed for the backoff jitter (any value; the glue draws it from the OS).
    pub(crate) jitter_seed: u64,
}

/// The sans-IO client connection. See the [module docs](self) for the calling contract.
#[derive(Debug)]
pub(crate) struct ClientConn<W> {
    max_frame_length: u32,
    expected: Option<ServerId>,
    server_id: Option<ServerId>,
    link: Link,
    codec: ServerFrameDecoder,
    requests: RequestTable<W>,
    /// Commands made while no transport was live, replayed in order once one is.
    held: VecDeque<Command<W>>,
    in_flight: InFlight<W>,
    numbers: RequestNumbers,
    next_subscription: u64,
    attachment: Option<SessionTarget>,
    /// The session to re-attach after a reconnect.
    desired_session: Option<Id>,
    subs: Subscriptions,
    reconnect: Option<ReconnectPolicy>,
    /// Reconnect attempts since the last healthy connection (the backoff exponent).
    attempt: u32,
    jitter_state: u64,
    /// This transport's re-attach and re-subscribe requests still unanswered.
    resuming: HashSet<u64>,
    /// When this transport's last resume request was answered: it is healthy once it has
    /// stayed up `healthy_after` from here.
    resumed_at: Option<Instant>,
    out: BytesMut,
    events: VecDeque<Event<W>>,
    /// The read buffer holds frames set aside after a batch of events.
    unread: bool,
    handshake_failure: Option<HandshakeFailure>,
}

impl<W> ClientConn<W> {
    /// A core waiting for its first transport ([`handle_open`](Self::handle_open)).
    pub(crate) fn new(config: ConnConfig, numbers: RequestNumbers) -> Self {
        Self {
            max_frame_length: config.max_frame_length,
            codec: ServerFrameDecoder::new(config.max_frame_length),
            expected: config.expected_server_id,
            server_id: None,
            link: Link::Dialing,
            requests: RequestTable::default(),
            held: VecDeque::new(),
            in_flight: InFlight::new(config.max_in_flight),
            numbers,
            next_subscription: 1,
            attachment: None,
            desired_session: None,
            subs: Subscriptions::default(),
            reconnect: config.reconnect,
            attempt: 0,
            // xorshift needs a non-zero state.
            jitter_state: config.jitter_seed.max(1),
            resuming: HashSet::new(),
            resumed_at: None,
            out: BytesMut::new(),
            events: VecDeque::new(),
            unread: false,
            handshake_failure: None,
        }
    }

    // ---- inputs -------------------------------------------------------------------------

    /// A transport is open: the hello is queued and the handshake starts. Ignored unless a
    /// transport was wanted (first connect or after [`Event::Dial`]).
    pub(crate) fn handle_open(&mut self, _now: Instant) {
        if !matches!(self.link, Link::Dialing) {
            return;
        }
        self.codec = ServerFrameDecoder::new(self.max_frame_length);
        self.unread = false;
        self.out.clear();
        self.handshake_failure = None;
        let mut handshake = ClientHandshake::new(self.expected.clone());
        // The hello is a constant small message: it always encodes.
        let _ = encode_frame_into(&handshake.start(), self.max_frame_length, &mut self.out);
        self.link = Link::Handshaking(handshake);
    }

    /// The read buffer of the current transport, with room for at least `spare` more bytes:
    /// read into it (append only), then call [`handle_read`](Self::handle_read). It is the
    /// decoder's own buffer, so frames are decoded where they were read.
    pub(crate) fn read_buffer(&mut self, spare: usize) -> &mut BytesMut {
        self.codec.read_buffer(spare)
    }

    /// Bytes were appended to [`read_buffer`](Self::read_buffer): the frames they complete
    /// are handled (subscription replicas are written through `replicas`); a partial frame
    /// stays for the next read. Once a batch of events is queued the rest of the frames wait
    /// ([`has_unread_frames`](Self::has_unread_frames)) for the glue to drain the events and
    /// call again; at least one frame is handled per call.
    pub(crate) fn handle_read(&mut self, now: Instant, replicas: &mut impl Replicas) {
        self.read_frames(now, replicas, EVENT_BATCH);
        self.admit_waiting(now);
    }

    /// The transport reached end of stream: every frame still in the read buffer is handled,
    /// then the end.
    pub(crate) fn handle_eof(&mut self, now: Instant, replicas: &mut impl Replicas) {
        self.read_frames(now, replicas, usize::MAX);
        if self.has_transport() {
            match self.codec.end() {
                Err(e) => self.fail_transport(now, e),
                Ok(()) if matches!(self.link, Link::Handshaking(_)) => {
                    self.fail_handshake(HandshakeFailure::Closed);
                }
                Ok(()) => self.connection_lost(now, "Byte transport closed".to_owned()),
            }
        }
        self.admit_waiting(now);
    }

    /// The transport failed (a read or write error) or was closed under us.
    pub(crate) fn handle_lost(&mut self, now: Instant, reason: String) {
        match self.link {
            Link::Live => self.connection_lost(now, reason),
            Link::Handshaking(_) => self.attempt_failed(now, reason, None),
            Link::Dialing | Link::Backoff { .. } | Link::Closed { .. } => {}
        }
        self.admit_waiting(now);
    }

    /// Opening or handshaking a transport failed with `error`. The first transport's failure
    /// finishes the core (the caller of `connect` gets the error). A later one is a failed
    /// reconnect attempt: retried with backoff, unless retrying cannot help
    /// ([`ConnectError::refusal`]: another server id, this identity refused, the server's
    /// certificate untrusted, another protocol version), which finishes the core at once with
    /// [`CloseReason::Refused`].
    pub(crate) fn handle_connect_failed(&mut self, now: Instant, error: &ConnectError) {
        self.attempt_failed(now, error.to_string(), error.refusal());
        self.admit_waiting(now);
    }

    /// A handle's command. A request takes an in-flight slot or waits for one.
    pub(crate) fn handle_command(&mut self, now: Instant, cmd: Command<W>) {
        if let Link::Closed { reason } = &self.link {
            let reason = reason.to_string();
            self.reject(cmd, &reason);
            return;
        }
        match cmd {
            Command::Request(request) => {
                let (number, deadline) = (request.number, request.deadline);
                match self.in_flight.admit(request) {
                    Some(request) => self.dispatch(now, request),
                    // It may time out before it takes a slot.
                    None => {
                        if let Some(at) = deadline {
                            self.requests.watch_deadline(number, at);
                        }
                    }
                }
            }
            Command::Cancel(number) => self.cancel(number),
            cmd if self.is_live() => self.run_command(now, cmd),
            cmd => self.hold(cmd),
        }
        self.admit_waiting(now);
    }

    /// Time has reached `now`: expired requests fail, a due reconnect attempt starts.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        while let Some(number) = self.requests.pop_expired(now) {
            self.expire(number);
        }
        if let Link::Backoff { until } = self.link
            && now >= until
        {
            self.link = Link::Dialing;
            self.events.push_back(Event::Dial);
        }
        self.admit_waiting(now);
    }

    /// Closes for good: requests fail, subscriptions end, the status becomes
    /// [`Status::Closed`]. Idempotent.
    pub(crate) fn close(&mut self, reason: &str) {
        if !matches!(self.link, Link::Closed { .. }) {
            if self.has_transport() {
                self.events.push_back(Event::Disconnect);
            }
            self.finish(CloseReason::Requested(reason.to_owned()));
        }
    }

    // ---- outputs ------------------------------------------------------------------------

    /// The next event for the glue.
    #[must_use]
    pub(crate) fn poll_event(&mut self) -> Option<Event<W>> {
        self.events.pop_front()
    }

    /// Moves every queued frame into `buf` (coalesced, in order). Returns whether any were.
    #[must_use]
    pub(crate) fn poll_transmit(&mut self, buf: &mut BytesMut) -> bool {
        if self.out.is_empty() {
            return false;
        }
        if buf.is_empty() {
            // No copy: the buffers trade places.
            mem::swap(buf, &mut self.out);
        } else {
            buf.extend_from_slice(&self.out);
            self.out.clear();
        }
        true
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    #[must_use]
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let backoff = match self.link {
            Link::Backoff { until } => Some(until),
            Link::Dialing | Link::Handshaking(_) | Link::Live | Link::Closed { .. } => None,
        };
        match (self.requests.next_deadline(), backoff) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Why the transport being handshaken failed (once; the core then waits for
    /// [`handle_connect_failed`](Self::handle_connect_failed)).
    #[must_use]
    pub(crate) fn take_handshake_failure(&mut self) -> Option<HandshakeFailure> {
        self.handshake_failure.take()
    }

    // ---- getters ------------------------------------------------------------------------

    /// Whether a transport is handshaken.
    pub(crate) fn is_live(&self) -> bool {
        matches!(self.link, Link::Live)
    }

    /// Whether the core is finished.
    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.link, Link::Closed { .. })
    }

    /// The server's id, once a handshake succeeded.
    pub(crate) fn server_id(&self) -> Option<&ServerId> {
        self.server_id.as_ref()
    }

    /// Whether the last [`handle_read`](Self::handle_read) set frames aside: drain the events,
    /// then call it again before reading more.
    pub(crate) fn has_unread_frames(&self) -> bool {
        self.unread
    }

    /// Bytes queued for the transport.
    pub(crate) fn pending_transmit(&self) -> usize {
        self.out.len()
    }

    /// Whether the glue should hand over more commands: not while as many requests wait for
    /// an in-flight slot as the limit admits (callers then wait on the handles' queue).
    pub(crate) fn accepts_commands(&self) -> bool {
        !self.in_flight.is_full()
    }

    /// Requests on the wire (including cancelled ones whose answer is still due).
    #[cfg(test)]
    pub(crate) fn requests_on_wire(&self) -> usize {
        self.requests.len()
    }

    /// Callers' requests holding an in-flight slot, and those waiting for one.
    #[cfg(test)]
    pub(crate) fn requests_in_flight(&self) -> (usize, usize) {
        (self.in_flight.admitted(), self.in_flight.waiting())
    }

    /// Subscriptions the core holds.
    #[cfg(test)]
    pub(crate) fn subscriptions(&self) -> usize {
        self.subs.len()
    }

    // ---- reading frames ---------------------------------------------------------------------

    /// Handles the complete frames in the read buffer, stopping before the next one once
    /// `batch` events are queued.
    fn read_frames(&mut self, now: Instant, replicas: &mut impl Replicas, batch: usize) {
        self.unread = false;
        let mut handled = false;
        while self.has_transport() {
            if handled && self.events.len() >= batch {
                // Readers are woken once the whole read is handled.
                self.unread = true;
                return;
            }
            match self.codec.next_message() {
                Ok(Some(frame)) => {
                    self.handle_frame(now, frame, replicas);
                    handled = true;
                }
                Ok(None) => break,
                Err(e) => {
                    self.fail_transport(now, e);
                    break;
                }
            }
        }
        // Replica readers learn once per read, not once per update in it.
        self.subs.notify_changed(&mut self.events);
    }

    fn handle_frame(&mut self, now: Instant, frame: ServerFrame, replicas: &mut impl Replicas) {
        match &mut self.link {
            Link::Handshaking(handshake) => {
                let step = match frame.into_message() {
                    Ok(msg) => handshake.handle_message(&msg),
                    Err(_) => {
                        let e = DecodeError::InvalidMessage { side: Side::Server };
                        self.fail_handshake(HandshakeFailure::Decode(e));
                        return;
                    }
                };
                match step {
                    Ok(Some(server_id)) => self.connected(now, server_id),
                    Ok(None) => {
                        self.fail_handshake(HandshakeFailure::Handshake(
                            HandshakeError::ExpectedHello,
                        ));
                    }
                    Err(e) => self.fail_handshake(HandshakeFailure::Handshake(e)),
                }
            }
            Link::Live => self.handle_live_frame(now, frame, replicas),
            Link::Dialing | Link::Backoff { .. } | Link::Closed { .. } => {}
        }
    }

    // ---- the handshake and the resume plan ------------------------------------------------

    fn has_transport(&self) -> bool {
        matches!(self.link, Link::Live | Link::Handshaking(_))
    }

    fn fail_handshake(&mut self, failure: HandshakeFailure) {
        self.link = Link::Dialing;
        self.handshake_failure = Some(failure);
    }

    /// A decode error on the transport.
    fn fail_transport(&mut self, now: Instant, e: DecodeError) {
        match self.link {
            Link::Handshaking(_) => self.fail_handshake(HandshakeFailure::Decode(e)),
            Link::Live => self.lose(now, e.to_string()),
            Link::Dialing | Link::Backoff { .. } | Link::Closed { .. } => {}
        }
    }

    fn connected(&mut self, now: Instant, server_id: ServerId) {
        self.link = Link::Live;
        if self.server_id.is_none() {
            // Reconnect only to the server first reached.
            self.expected = Some(server_id.clone());
            self.server_id = Some(server_id);
        } else {
            self.events.push_back(Event::Status(Status::Connected));
        }
        self.resume(now);
        for cmd in mem::take(&mut self.held) {
            self.run_command(now, cmd);
        }
    }

    /// Re-attach and re-subscribe on a fresh transport, noting the requests that must be
    /// answered before it can count as healthy.
    fn resume(&mut self, now: Instant) {
        self.resuming.clear();
        self.resumed_at = None;
        if let Some(session_id) = self.desired_session.clone() {
            let number = self.numbers.next();
            let call = attach_call(&session_id);
            let purpose = Purpose::Attach {
                session_id,
                waiter: None,
            };
            if self
                .send_request(number, self.server_target(), call, purpose, None)
                .is_ok()
            {
                self.resuming.insert(number);
            }
        }
        self.subs
            .end_orphaned(self.desired_session.as_ref(), &mut self.events);
        for key in self.subs.keys_to_resume(self.desired_session.is_some()) {
            if let Some(number) = self.start_subscription(key) {
                self.resuming.insert(number);
            }
        }
        if self.resuming.is_empty() {
            self.resumed_at = Some(now);
        }
    }

    /// A response arrived for `number`: if it was the last resume request, the healthy
    /// clock starts.
    fn resume_answered(&mut self, now: Instant, number: u64) {
        if self.resuming.remove(&number) && self.resuming.is_empty() {
            self.resumed_at = Some(now);
        }
    }

    // ---- commands -----------------------------------------------------------------------

    /// Waiting requests take the slots that settled requests freed, in order.
    fn admit_waiting(&mut self, now: Instant) {
        while let Some(request) = self.in_flight.next_admitted() {
            self.dispatch(now, request);
        }
    }

    /// An admitted request is sent now, or held for the next transport.
    fn dispatch(&mut self, now: Instant, request: UserRequest<W>) {
        match &self.link {
            Link::Live => self.run_request(now, request),
            Link::Dialing | Link::Handshaking(_) | Link::Backoff { .. } => {
                // It may time out before a transport is live.
                if let Some(at) = request.deadline {
                    self.requests.watch_deadline(request.number, at);
                }
                self.held.push_back(Command::Request(request));
            }
            // A finished core takes no requests and lets none wait; kept total.
            Link::Closed { reason } => {
                let reason = reason.to_string();
                self.in_flight.release();
                self.requests
                    .forget_deadline(request.number, request.deadline);
                self.reject(Command::Request(request), &reason);
            }
        }
    }

    /// A command made while no transport is live waits for the next one.
    fn hold(&mut self, cmd: Command<W>) {
        match cmd {
            Command::Cancel(number) => self.cancel(number),
            Command::Unsubscribe(key) => {
                let before = self.held.len();
                self.held
                    .retain(|c| !matches!(c, Command::Subscribe(s) if s.key == key));
                if self.held.len() == before {
                    // Not on the wire while there is no transport: nothing to send.
                    let _ = self.subs.remove(key);
                }
            }
            Command::Request(_)
            | Command::Attach { .. }
            | Command::Detach { .. }
            | Command::Subscribe(_) => self.held.push_back(cmd),
        }
    }

    fn take_held_request(&mut self, number: u64) -> Option<UserRequest<W>> {
        let at = self
            .held
            .iter()
            .position(|c| matches!(c, Command::Request(r) if r.number == number))?;
        let Some(Command::Request(request)) = self.held.remove(at) else {
            unreachable!("found as a request above")
        };
        Some(request)
    }

    fn run_command(&mut self, now: Instant, cmd: Command<W>) {
        match cmd {
            Command::Request(request) => self.run_request(now, request),
            Command::Attach { session_id, waiter } => {
                let number = self.numbers.next();
                let call = attach_call(&session_id);
                let purpose = Purpose::Attach {
                    session_id,
                    waiter: Some(waiter),
                };
                if let Err((e, purpose)) =
                    self.send_request(number, self.server_target(), call, purpose, None)
                {
                    self.fail_purpose(purpose, e);
                }
            }
            Command::Detach { waiter } => {
                self.desired_session = None;
                let number = self.numbers.next();
                let call =
                    ServiceCall::new(SESSION_MANAGEMENT_SERVICE, "detach", Vec::new()).into_value();
                let purpose = Purpose::Detach { waiter };
                if let Err((e, purpose)) =
                    self.send_request(number, self.server_target(), call, purpose, None)
                {
                    self.fail_purpose(purpose, e);
                }
            }
            Command::Subscribe(sub) => {
                let key = self.subs.insert(sub);
                let _ = self.start_subscription(key);
            }
            Command::Cancel(number) => self.cancel(number),
            Command::Unsubscribe(key) => {
                if let Some((wire_id, target)) = self.subs.remove(key) {
                    self.send_internal(target, ControlCall::unsubscribe(wire_id.as_str()));
                }
            }
        }
    }

    /// Sends an admitted request on the live transport (it holds its slot until it settles).
    fn run_request(&mut self, now: Instant, request: UserRequest<W>) {
        let UserRequest {
            number,
            target,
            call,
            deadline,
            waiter,
        } = request;
        // Past its deadline while it waited for a slot or a transport.
        if deadline.is_some_and(|at| at <= now) {
            self.requests.forget_deadline(number, deadline);
            self.in_flight.release();
            self.answer_caller(waiter, Answer::Reply(Err(RequestError::TimedOut)));
            return;
        }
        let target = match self.resolve(&target) {
            Ok(t) => t,
            Err(e) => {
                self.requests.forget_deadline(number, deadline);
                self.in_flight.release();
                self.answer_caller(waiter, Answer::Reply(Err(e)));
                return;
            }
        };
        let purpose = Purpose::User { waiter };
        if let Err((e, purpose)) = self.send_request(number, target, call, purpose, deadline) {
            self.requests.forget_deadline(number, deadline);
            self.fail_purpose(purpose, e);
        }
    }

    /// The caller gave up on request `number`: a sent one is cancelled on the wire (its late
    /// answer is ignored), a held or waiting one never leaves. Its waiter is dropped
    /// unanswered.
    fn cancel(&mut self, number: u64) {
        if let Some(Sent {
            purpose, target, ..
        }) = self.requests.abandon(number)
        {
            self.send_cancel(number, target);
            self.settled(&purpose);
        } else if let Some(request) = self.take_held_request(number) {
            self.requests.forget_deadline(number, request.deadline);
            self.in_flight.release();
        } else if let Some(request) = self.in_flight.take_waiting(number) {
            self.requests.forget_deadline(number, request.deadline);
        }
    }

    /// The closed core refuses a command: nothing of it was sent.
    fn reject(&mut self, cmd: Command<W>, reason: &str) {
        let err = || RequestError::NotSent(reason.to_owned());
        match cmd {
            Command::Request(UserRequest { waiter, .. }) | Command::Detach { waiter } => {
                self.answer_caller(waiter, Answer::Reply(Err(err())));
            }
            Command::Attach { waiter, .. } => {
                self.answer_caller(waiter, Answer::Attached(Err(err())));
            }
            Command::Subscribe(sub) => self.events.push_back(Event::Subscription {
                key: sub.key,
                change: SubscriptionChange::Answered(Err(err())),
            }),
            Command::Cancel(_) | Command::Unsubscribe(_) => {}
        }
    }

    /// Request `number`'s deadline passed: it fails as timed out wherever it is.
    fn expire(&mut self, number: u64) {
        if let Some(Sent {
            purpose, target, ..
        }) = self.requests.abandon(number)
        {
            // Its answer may still come: it is ignored, and the server is asked to stop.
            self.send_cancel(number, target);
            self.fail_purpose(purpose, RequestError::TimedOut);
        } else if let Some(request) = self.take_held_request(number) {
            self.in_flight.release();
            self.answer_caller(request.waiter, Answer::Reply(Err(RequestError::TimedOut)));
        } else if let Some(request) = self.in_flight.take_waiting(number) {
            self.answer_caller(request.waiter, Answer::Reply(Err(RequestError::TimedOut)));
        }
    }

    /// A sent request with this purpose is settled: a caller's gives its slot back.
    fn settled(&mut self, purpose: &Purpose<W>) {
        if matches!(purpose, Purpose::User { .. }) {
            self.in_flight.release();
        }
    }

    // ---- the wire -----------------------------------------------------------------------

    fn server_target(&self) -> Target {
        // Commands only run on a live transport, which has a server id.
        Target::Server(
            self.server_id
                .clone()
                .unwrap_or_else(|| unreachable!("a live connection knows its server")),
        )
    }

    fn resolve(&self, spec: &TargetSpec) -> Result<Target, RequestError> {
        match spec {
            TargetSpec::Explicit(t) => Ok(t.clone()),
            TargetSpec::Session(session_id) => match &self.attachment {
                Some(a) if &a.session_id == session_id => Ok(Target::Session(a.clone())),
                _ => Err(RequestError::NotAttached(session_id.to_string())),
            },
        }
    }

    /// Writes a request and records what its response is for. On failure nothing was
    /// written and the purpose comes back (the caller answers its waiter).
    fn send_request(
        &mut self,
        number: u64,
        target: Target,
        call: Value,
        purpose: Purpose<W>,
        deadline: Option<Instant>,
    ) -> Result<(), (RequestError, Purpose<W>)> {
        let msg = ClientMessage::Request(Request {
            id: request_id(number),
            target,
            call,
        });
        if let Err(e) = encode_frame_into(&msg, self.max_frame_length, &mut self.out) {
            return Err((RequestError::Encode(e), purpose));
        }
        // The target goes into the table, not a copy of it.
        let ClientMessage::Request(Request { target, .. }) = msg else {
            unreachable!("built as a request above")
        };
        self.requests.insert(number, purpose, target, deadline);
        Ok(())
    }

    /// A request whose answer does not matter.
    fn send_internal(&mut self, target: Target, call: ControlCall) {
        let number = self.numbers.next();
        let _ = self.send_request(number, target, call.to_value(), Purpose::Internal, None);
    }

    fn send_cancel(&mut self, number: u64, target: Target) {
        let msg = ClientMessage::Cancel(Cancel {
            id: request_id(number),
            target,
        });
        // Its id and target encoded in the request, so this encodes too.
        let _ = encode_frame_into(&msg, self.max_frame_length, &mut self.out);
    }

    /// Sends (or re-sends) the subscribe request for `key` under a fresh subscription id,
    /// returning the request's number if it was sent.
    fn start_subscription(&mut self, key: u64) -> Option<u64> {
        let (spec, service_id, mode) = self.subs.request_parts(key)?;
        let target = match self.resolve(&spec) {
            Ok(t) => t,
            Err(e) => {
                self.subs.fail(key, e, &mut self.events);
                return None;
            }
        };
        let n = self.next_subscription;
        self.next_subscription += 1;
        let wire_id = Id::new(format!("service-{n}")).unwrap_or_else(|_| unreachable!("non-empty"));
        let call = ControlCall::subscribe(wire_id.as_str(), service_id, mode).to_value();
        self.subs.begin(key, wire_id.clone(), target.clone());
        let number = self.numbers.next();
        let purpose = Purpose::Subscribe { key, wire_id };
        match self.send_request(number, target, call, purpose, None) {
            Ok(()) => Some(number),
            Err((e, _)) => {
                self.subs.fail(key, e, &mut self.events);
                None
            }
        }
    }

    // ---- what the server sent -----------------------------------------------------------

    fn handle_live_frame(
        &mut self,
        now: Instant,
        frame: ServerFrame,
        replicas: &mut impl Replicas,
    ) {
        match frame {
            ServerFrame::Update(update) => {
                let resync = self.subs.on_update(
                    &update.subscription_id,
                    update.update,
                    replicas,
                    &mut self.events,
                );
                self.handle_resync(now, resync);
            }
            ServerFrame::Message(msg) => self.handle_message(now, msg, replicas),
        }
    }

    fn handle_message(&mut self, now: Instant, msg: ServerMessage, replicas: &mut impl Replicas) {
        match msg {
            ServerMessage::Hello { .. } | ServerMessage::HelloError(_) => {
                self.lose(now, "Unexpected handshake message".to_owned());
            }
            ServerMessage::Attachment(attachment) => self.handle_attachment(now, attachment),
            ServerMessage::ServiceUpdate(update) => {
                // The frame codec hands updates over encoded; this form only arises if a
                // decoded message is fed in, so re-encode it (values from the wire always do).
                let limits =
                    baton_protocol::limits::CborLimits::for_frame_length(self.max_frame_length);
                match baton_protocol::cbor::to_vec(&update.update, &limits) {
                    Ok(bytes) => {
                        let resync = self.subs.on_update(
                            &update.subscription_id,
                            Bytes::from(bytes),
                            replicas,
                            &mut self.events,
                        );
                        self.handle_resync(now, resync);
                    }
                    Err(e) => self.lose(now, format!("invalid service update: {e}")),
                }
            }
            ServerMessage::Response(response) => {
                let result = match response.outcome {
                    Outcome::Void => Ok(Reply::Void),
                    Outcome::Value(v) => Ok(Reply::Value(v)),
                    Outcome::Error(e) => Err(RequestError::Server(e)),
                };
                let slot = request_number(&response.id)
                    .and_then(|number| Some((number, self.requests.take(number)?)));
                match slot {
                    Some((number, Slot::Sent(sent))) => {
                        // After `answer`, which may send more resume requests (the session's
                        // subscriptions once the re-attach is answered).
                        self.answer(now, sent.purpose, result, replicas);
                        self.resume_answered(now, number);
                    }
                    Some((_, Slot::Abandoned)) => {}
                    None => self.lose(now, "Response has no matching request".to_owned()),
                }
            }
        }
    }

    fn handle_attachment(&mut self, now: Instant, attachment: Option<SessionTarget>) {
        if attachment
            .as_ref()
            .is_some_and(|a| Some(&a.server_id) != self.server_id.as_ref())
        {
            self.lose(
                now,
                "Attachment update belongs to another server".to_owned(),
            );
            return;
        }
        if attachment.is_none() {
            // The server ended our attachment (detach, session terminated or removed).
            self.desired_session = None;
        }
        // Session subscriptions made through any other attachment are gone with it.
        let detaching = self.requests.detaching();
        self.subs
            .attachment_changed(attachment.as_ref(), detaching, &mut self.events);
        self.set_attachment(attachment);
    }

    fn set_attachment(&mut self, attachment: Option<SessionTarget>) {
        if self.attachment != attachment {
            self.attachment.clone_from(&attachment);
            self.events.push_back(Event::Attachment(attachment));
        }
    }

    /// A response for a request this connection sent.
    fn answer(
        &mut self,
        now: Instant,
        purpose: Purpose<W>,
        result: Result<Reply, RequestError>,
        replicas: &mut impl Replicas,
    ) {
        match purpose {
            Purpose::User { waiter } => {
                self.in_flight.release();
                self.answer_caller(waiter, Answer::Reply(result));
            }
            Purpose::Detach { waiter } => self.answer_caller(waiter, Answer::Reply(result)),
            Purpose::Attach { session_id, waiter } => {
                let outcome = match result {
                    // The attachment frame precedes the response, and names the session id
                    // the server resolved (the caller may have given a prefix or alias), so
                    // the attachment now is the one this attach made (or kept).
                    Ok(_) => self
                        .attachment
                        .clone()
                        .ok_or_else(|| RequestError::NotAttached(session_id.to_string())),
                    Err(e) => Err(e),
                };
                if let Ok(attached) = &outcome {
                    // Re-attach after a reconnect by the canonical id.
                    self.desired_session = Some(attached.session_id.clone());
                }
                match waiter {
                    Some(waiter) => self.answer_caller(waiter, Answer::Attached(outcome)),
                    // The re-attach after a reconnect: the session's subscriptions follow.
                    None => match outcome {
                        Ok(_) => {
                            for key in self.subs.keys_waiting_for_session() {
                                if let Some(number) = self.start_subscription(key) {
                                    self.resuming.insert(number);
                                }
                            }
                        }
                        Err(e) => {
                            warn!(error = %e, "re-attach after reconnect failed");
                            self.desired_session = None;
                            self.subs.fail_waiting_for_session(&e, &mut self.events);
                        }
                    },
                }
            }
            Purpose::Subscribe { key, wire_id } => {
                let resync =
                    self.subs
                        .on_response(key, &wire_id, result, replicas, &mut self.events);
                self.handle_resync(now, resync);
            }
            Purpose::Internal => {}
        }
    }

    /// Re-subscribes every subscription whose replica lost sync (gap, overflow); an
    /// undecodable snapshot or update fails the transport.
    fn handle_resync(&mut self, now: Instant, resync: Resync) {
        match resync {
            Ok(keys) => {
                for key in keys {
                    if let Some((old_id, target)) = self.subs.detach_wire(key) {
                        self.send_internal(target, ControlCall::unsubscribe(old_id.as_str()));
                    }
                    let _ = self.start_subscription(key);
                }
            }
            Err(reason) => self.lose(now, reason),
        }
    }

    fn answer_caller(&mut self, waiter: W, answer: Answer) {
        self.events.push_back(Event::Answer { waiter, answer });
    }

    fn fail_purpose(&mut self, purpose: Purpose<W>, err: RequestError) {
        match purpose {
            Purpose::User { waiter } => {
                self.in_flight.release();
                self.answer_caller(waiter, Answer::Reply(Err(err)));
            }
            Purpose::Detach { waiter } => self.answer_caller(waiter, Answer::Reply(Err(err))),
            Purpose::Attach {
                waiter: Some(waiter),
                ..
            } => self.answer_caller(waiter, Answer::Attached(Err(err))),
            Purpose::Subscribe { key, wire_id } => {
                if self.subs.is_current(key, &wire_id) {
                    self.subs.fail(key, err, &mut self.events);
                }
            }
            Purpose::Attach { waiter: None, .. } | Purpose::Internal => {}
        }
    }

    // ---- losing a transport -------------------------------------------------------------

    /// The core gives up on the live transport (the server broke the protocol).
    fn lose(&mut self, now: Instant, reason: String) {
        if matches!(self.link, Link::Live) {
            self.events.push_back(Event::Disconnect);
            self.connection_lost(now, reason);
        }
    }

    /// The live transport is gone: what was sent on it may have run.
    fn connection_lost(&mut self, now: Instant, reason: String) {
        debug!(%reason, "connection lost");
        self.link = Link::Dialing;
        self.out.clear();
        // Whatever the lost transport left unread goes with it.
        self.codec = ServerFrameDecoder::new(self.max_frame_length);
        self.unread = false;
        self.fail_sent(&reason);
        self.resuming.clear();
        self.set_attachment(None);
        // Readers learn of what the lost transport's last read applied.
        self.subs.notify_changed(&mut self.events);
        self.subs.connection_lost(&reason, &mut self.events);
        let Some(policy) = &self.reconnect else {
            self.finish(CloseReason::Lost(reason));
            return;
        };
        // The backoff starts over only after a healthy connection; a server that drops every
        // connection right after the handshake keeps the delays growing.
        let healthy_after = policy.healthy_after;
        if self
            .resumed_at
            .take()
            .is_some_and(|at| now.saturating_duration_since(at) >= healthy_after)
        {
            self.attempt = 0;
        } else {
            debug!(
                attempt = self.attempt,
                "connection lost before it was healthy; backoff continues"
            );
        }
        self.schedule_attempt(now, reason);
    }

    /// A transport being opened or handshaken failed: the first one finishes the core, a
    /// reconnect attempt is retried unless it was `refused`.
    fn attempt_failed(&mut self, now: Instant, reason: String, refused: Option<ReconnectRefusal>) {
        if !matches!(self.link, Link::Dialing | Link::Handshaking(_)) {
            return;
        }
        self.link = Link::Dialing;
        if self.server_id.is_none() {
            self.finish(CloseReason::ConnectFailed(reason));
        } else if let Some(refusal) = refused {
            debug!(error = %reason, "reconnecting refused; not retrying");
            self.finish(CloseReason::Refused(refusal));
        } else {
            debug!(error = %reason, attempt = self.attempt, "reconnect attempt failed");
            self.schedule_attempt(now, reason);
        }
    }

    /// The next reconnect attempt, or giving up.
    fn schedule_attempt(&mut self, now: Instant, last: String) {
        let Some(policy) = self.reconnect.clone() else {
            self.finish(CloseReason::Lost(last));
            return;
        };
        let attempt = self.attempt;
        if policy.max_attempts.is_some_and(|max| attempt >= max) {
            self.finish(CloseReason::GaveUp {
                attempts: attempt,
                last,
            });
            return;
        }
        // The status carries the delay as drawn, so a countdown shows the real one.
        let delay = policy.delay(attempt, self.jitter());
        let until = now + delay;
        self.events.push_back(Event::Status(Status::Reconnecting {
            attempt: attempt + 1,
            reason: last,
            retry_in: delay,
            retry_at: until,
        }));
        self.attempt = attempt.saturating_add(1);
        self.link = Link::Backoff { until };
    }

    /// Every caller's request on the wire fails: its outcome is unknown. Subscribes are left
    /// to the subscriptions (a first one still waiting is re-sent on the next transport).
    fn fail_sent(&mut self, reason: &str) {
        for sent in self.requests.drain() {
            match sent.purpose {
                Purpose::Subscribe { .. } => {}
                purpose => {
                    self.fail_purpose(purpose, RequestError::OutcomeUnknown(reason.to_owned()));
                }
            }
        }
    }

    /// Finished for good.
    fn finish(&mut self, reason: CloseReason) {
        self.link = Link::Closed {
            reason: reason.clone(),
        };
        self.out.clear();
        let line = reason.to_string();
        self.fail_sent(&line);
        for cmd in mem::take(&mut self.held) {
            if let Command::Request(request) = &cmd {
                self.requests
                    .forget_deadline(request.number, request.deadline);
                self.in_flight.release();
            }
            self.reject(cmd, &line);
        }
        for request in self.in_flight.take_all_waiting() {
            self.requests
                .forget_deadline(request.number, request.deadline);
            self.reject(Command::Request(request), &line);
        }
        self.set_attachment(None);
        self.subs.close(&reason, &mut self.events);
        self.events
            .push_back(Event::Status(Status::Closed { reason }));
    }

    /// A number in `[0, 1)` for backoff jitter (xorshift; quality is irrelevant here).
    fn jitter(&mut self) -> f64 {
        let mut x = self.jitter_state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter_state = x;
        #[expect(clippy::cast_precision_loss, reason = "jitter only needs 53 bits")]
        let f = (x >> 11) as f64 / (1u64 << 53) as f64;
        f
    }
}

fn attach_call(session_id: &Id) -> Value {
    ServiceCall::new(
        SESSION_MANAGEMENT_SERVICE,
        "attach",
        vec![Value::from(session_id.as_str())],
    )
    .into_value()
}
