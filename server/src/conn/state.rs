//! The sans-IO core of one connection: handshake stage, active requests, subscriptions with
//! their encoders, and the outbound queue.
//!
//! It owns no socket, task, lock or clock. The driver feeds it decoded messages
//! ([`ConnState::handle_message`]), request completions ([`ConnState::finish_request`]),
//! publishes ([`ConnState::publish`]) and timer expiries ([`ConnState::handle_timeout`]), and
//! drains frames with [`ConnState::poll_transmit`]. After any call, check
//! [`ConnState::take_wake`] (the writer has work) and [`ConnState::closing`].
//!
//! Request handling follows the upstream order exactly (`docs/protocol.md`, server
//! semantics): duplicate active id, invalid service call, then this crate's `busy` limit,
//! registration, control-call decoding, wrong server, then `server_draining` while draining,
//! duplicate subscription (and the subscription limit), dispatch.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use baton_protocol::codec::encode_frame;
use baton_protocol::handshake::{ServerHandshake, ServerStep};
use baton_protocol::{
    Cancel, ClientMessage, DecodeError, ErrorCode, Id, Outcome, Request, Response, ServerId,
    ServerMessage, SessionTarget, Target, Value, WireError,
};
use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::chord::{
    BatchCursor, ControlCall, InstanceAddress, ProviderUpdate, ServiceCall, ServiceMode,
    SharedUpdate, SubscriptionEncoder, SubscriptionSnapshot, addresses, covered_by, parse_snapshot,
    resync,
};
use crate::config::ResyncDialect;
use crate::conn::outbound::{Outbound, SubSlot};
use crate::error::ServiceError;

/// Per-connection limits, copied from the server configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnLimits {
    pub(crate) max_frame_length: u32,
    pub(crate) max_pending_bytes: usize,
    pub(crate) max_active_requests: usize,
    pub(crate) max_subscriptions: usize,
    pub(crate) subscriber_queue_length: usize,
    pub(crate) resync: ResyncDialect,
}

/// What a request is, for post-processing its result.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RequestKind {
    Call,
    Subscribe(Id),
    Unsubscribe(Id),
}

#[derive(Debug)]
struct Active {
    target: Target,
    kind: RequestKind,
    cancel: CancellationToken,
    /// Set when the client itself sent `cancel` (as opposed to leaving or a shutdown).
    requested: Arc<AtomicBool>,
}

#[derive(Debug)]
enum Buffered {
    Update(SharedUpdate),
    /// The held updates overflowed: re-baseline on this snapshot once open.
    Resync(SubscriptionSnapshot),
}

/// The instances a keyed subscriber's client holds, so that a resync can close exactly those.
///
/// `delivered` is what the client holds once it has applied every unit of the subscription
/// the writer has taken (the subscribe response's instances to begin with); `pending` lists
/// the instance changes still in the outbound queue, each with the number of the unit that
/// carries it. Changes move from `pending` into `delivered` as the writer takes their units,
/// checked whenever a change is queued or a resync is built, so `pending` never holds more
/// than the subscription's queue (at most one entry per queued unit) and `delivered` never
/// more than the instances the client was told of.
#[derive(Debug, Default)]
struct KeyedView {
    delivered: BTreeSet<InstanceAddress>,
    pending: VecDeque<(u64, ViewChange)>,
}

#[derive(Debug)]
enum ViewChange {
    Spawned(InstanceAddress),
    Closed(InstanceAddress),
    /// A resync: the client then holds exactly these.
    Resync(BTreeSet<InstanceAddress>),
}

impl KeyedView {
    /// Applies every change whose unit the writer has taken (`taken` units so far).
    fn settle(&mut self, taken: u64) {
        while let Some((_, change)) = self.pending.pop_front_if(|(unit, _)| *unit < taken) {
            match change {
                ViewChange::Spawned(address) => {
                    self.delivered.insert(address);
                }
                ViewChange::Closed(address) => {
                    self.delivered.remove(&address);
                }
                ViewChange::Resync(held) => self.delivered = held,
            }
        }
    }

    /// Notes a queued update that spawns or closes an instance, riding in unit `unit`.
    fn queued(&mut self, unit: u64, update: &ProviderUpdate) {
        let change = match update {
            ProviderUpdate::Spawned { instance } => match &instance.instance {
                Some(address) => ViewChange::Spawned(address.clone()),
                None => return,
            },
            ProviderUpdate::Closed { instance } => ViewChange::Closed(instance.clone()),
            _ => return,
        };
        self.pending.push_back((unit, change));
    }
}

#[derive(Debug)]
enum Subscription {
    /// Subscribe in flight: updates wait here until the response is queued.
    Opening {
        request: Id,
        buffer: VecDeque<Buffered>,
    },
    /// Response queued: updates are encoded and queued as they are published.
    Open {
        encoder: SubscriptionEncoder,
        /// Its frames in the outbound queue.
        slot: SubSlot,
        /// What the client holds, for a keyed subscription (a singleton's resync needs no
        /// history).
        view: Option<KeyedView>,
    },
}

/// A request the driver must run against the host.
#[derive(Debug)]
pub(crate) struct Dispatch {
    pub(crate) id: Id,
    pub(crate) target: Target,
    pub(crate) call: ServiceCall,
    pub(crate) cancel: CancellationToken,
    pub(crate) cancel_requested: Arc<AtomicBool>,
}

/// What the driver must do after [`ConnState::handle_message`].
#[derive(Debug)]
pub(crate) enum Step {
    /// Nothing (an immediate response may have been queued).
    Nothing,
    /// A valid hello: attach the client at the host, then call
    /// [`ConnState::handshake_complete`] or [`ConnState::handshake_failed`].
    Attach,
    /// Run this request.
    Dispatch(Box<Dispatch>),
}

/// How the connection is ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closing {
    /// Write what is queued (ending with any final frame), then close.
    Flush,
    /// Close now; queued frames are dropped.
    Abort,
}

/// What became of a publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Published {
    /// Queued for the subscriber (or buffered until its subscribe response goes out).
    Queued,
    /// The subscriber was behind: its backlog was replaced by a resync from the current
    /// snapshot (see [`ResyncDialect`]).
    Reset,
    /// No such subscription on this connection (never subscribed, or unsubscribed).
    Dropped,
    /// The connection is closed; the host should forget this subscriber.
    Closed,
}

/// The state of one connection.
#[derive(Debug)]
pub(crate) struct ConnState {
    server_id: ServerId,
    limits: ConnLimits,
    handshake: ServerHandshake,
    queued: VecDeque<ClientMessage>,
    active: HashMap<Id, Active>,
    subscriptions: HashMap<Id, Subscription>,
    out: Outbound,
    draining: bool,
    closing: Option<Closing>,
    wake: bool,
}

fn error(code: ErrorCode, message: impl Into<String>) -> WireError {
    WireError::from_code(code, message)
}

impl ConnState {
    pub(crate) fn new(
        now: Instant,
        handshake_timeout: Duration,
        server_id: ServerId,
        limits: ConnLimits,
    ) -> Self {
        Self {
            server_id,
            limits,
            handshake: ServerHandshake::new(now, handshake_timeout),
            queued: VecDeque::new(),
            active: HashMap::new(),
            subscriptions: HashMap::new(),
            out: Outbound::default(),
            draining: false,
            closing: None,
            wake: false,
        }
    }

    // ---- inputs -------------------------------------------------------------------------

    /// Feeds one decoded client message.
    pub(crate) fn handle_message(&mut self, msg: ClientMessage) -> Step {
        if self.closing.is_some() {
            return Step::Nothing;
        }
        match self.handshake.handle_message(&msg) {
            ServerStep::Accept => Step::Attach,
            ServerStep::Queue => {
                self.queued.push_back(msg);
                Step::Nothing
            }
            ServerStep::Process => match msg {
                ClientMessage::Request(r) => self.handle_request(r),
                ClientMessage::Cancel(c) => {
                    self.handle_cancel(&c);
                    Step::Nothing
                }
                // The handshake machine fails a late hello; nothing else reaches here.
                ClientMessage::Hello { .. } => Step::Nothing,
            },
            ServerStep::Fail(e) => {
                self.fail(e);
                Step::Nothing
            }
        }
    }

    /// The inbound byte stream broke the framing or message rules.
    pub(crate) fn handle_decode_error(&mut self, e: &DecodeError) {
        tracing::debug!(error = %e, "peer sent an invalid frame");
        self.fail(error(ErrorCode::InvalidRequest, e.to_string()));
    }

    /// The host accepted the client: queue the server hello, then process what arrived
    /// during the handshake. Returns the requests to run, in order.
    pub(crate) fn handshake_complete(&mut self) -> Vec<Dispatch> {
        if self.closing.is_some() {
            return Vec::new();
        }
        let hello = ServerMessage::Hello {
            server_id: self.server_id.clone(),
        };
        self.push_message(&hello);
        self.handshake.complete();
        let mut dispatches = Vec::new();
        while let Some(msg) = self.queued.pop_front() {
            if let Step::Dispatch(d) = self.handle_message(msg) {
                dispatches.push(*d);
            }
        }
        dispatches
    }

    /// Refuses the connection (e.g. over the connection limit): `error` is the only frame.
    pub(crate) fn reject(&mut self, error: WireError) {
        self.fail(error);
    }

    /// The host refused to attach the client.
    pub(crate) fn handshake_failed(&mut self, e: &ServiceError) {
        if let ServiceError::Internal(source) = e {
            tracing::warn!(error = %source, "host failed to attach client");
        }
        self.fail(e.to_wire());
    }

    /// When the handshake times out, if it is pending.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        if self.closing.is_some() {
            return None;
        }
        self.handshake.deadline()
    }

    /// Checks the handshake deadline.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if self.closing.is_some() {
            return;
        }
        if let Some(e) = self.handshake.handle_timeout(now) {
            tracing::debug!("handshake timed out");
            self.fail(e);
        }
    }

    /// A request finished at the host.
    pub(crate) fn finish_request(&mut self, id: &Id, result: Result<Option<Value>, ServiceError>) {
        let Some(active) = self.active.remove(id) else {
            return;
        };
        if self.closing.is_some() {
            return;
        }
        let cancelled = active.cancel.is_cancelled();
        let value = match result {
            Ok(value) => value,
            Err(e) => {
                if let RequestKind::Subscribe(sid) = &active.kind {
                    self.remove_opening(sid, id);
                }
                let wire = if cancelled {
                    error(ErrorCode::Cancelled, "RPC request cancelled")
                } else {
                    if let ServiceError::Internal(source) = &e {
                        tracing::warn!(error = %source, "service call failed");
                    }
                    e.to_wire()
                };
                self.respond(id, Outcome::Error(wire));
                return;
            }
        };
        match active.kind {
            RequestKind::Call => {
                self.respond(id, value.map_or(Outcome::Void, Outcome::Value));
            }
            RequestKind::Unsubscribe(sid) => {
                if let Some(Subscription::Open { slot, .. }) = self.subscriptions.remove(&sid) {
                    self.out.close_subscription(slot);
                }
                self.respond(id, value.map_or(Outcome::Void, Outcome::Value));
            }
            RequestKind::Subscribe(sid) => self.finish_subscribe(id, &sid, value),
        }
    }

    fn finish_subscribe(&mut self, id: &Id, sid: &Id, value: Option<Value>) {
        let Some(value) = value else {
            self.remove_opening(sid, id);
            self.respond(
                id,
                Outcome::Error(error(
                    ErrorCode::InvalidRequest,
                    "Service subscription did not return a snapshot",
                )),
            );
            return;
        };
        let mut encoder = SubscriptionEncoder::default();
        let encoded = parse_snapshot(&value).and_then(|snapshot| {
            encoder
                .encode_snapshot(&snapshot)
                .map(|wire| (snapshot, wire))
        });
        let (snapshot, wire) = match encoded {
            Ok(x) => x,
            Err(reason) => {
                tracing::warn!(%reason, subscription = %sid, "host returned an invalid subscription snapshot");
                self.remove_opening(sid, id);
                self.respond(id, Outcome::Error(ServiceError::internal(reason).to_wire()));
                return;
            }
        };
        if !self.respond(id, Outcome::Value(wire)) {
            self.remove_opening(sid, id);
            return;
        }
        let buffer = match self.subscriptions.get(sid) {
            Some(Subscription::Opening { request, .. }) if request == id => {
                let slot = self.out.open_subscription();
                let view = (snapshot.mode == ServiceMode::Keyed).then(|| KeyedView {
                    delivered: addresses(&snapshot),
                    pending: VecDeque::new(),
                });
                match self.subscriptions.insert(
                    sid.clone(),
                    Subscription::Open {
                        encoder,
                        slot,
                        view,
                    },
                ) {
                    Some(Subscription::Opening { buffer, .. }) => buffer,
                    _ => VecDeque::new(),
                }
            }
            // Unsubscribed while the subscribe was in flight: nothing to install.
            _ => return,
        };
        // Updates published while the subscribe was in flight follow its response.
        for item in buffer {
            let outcome = match item {
                Buffered::Update(u) if covered_by(u.update(), &snapshot) => continue,
                Buffered::Update(u) => {
                    self.enqueue_updates(sid, std::slice::from_ref(&u), None::<fn() -> _>)
                }
                Buffered::Resync(s) => self.enqueue_resync(sid, &s),
            };
            if outcome == Published::Closed {
                return;
            }
        }
    }

    fn remove_opening(&mut self, sid: &Id, request_id: &Id) {
        if matches!(self.subscriptions.get(sid), Some(Subscription::Opening { request, .. }) if request == request_id)
        {
            self.subscriptions.remove(sid);
        }
    }

    /// A provider update for one of this connection's subscriptions. `snapshot` is called
    /// only if the subscriber's backlog must be replaced by a resync.
    pub(crate) fn publish(
        &mut self,
        subscription_id: &str,
        update: &SharedUpdate,
        snapshot: impl FnOnce() -> SubscriptionSnapshot,
    ) -> Published {
        self.publish_many(subscription_id, std::slice::from_ref(update), snapshot)
    }

    /// Provider updates for one of this connection's subscriptions, in order. `snapshot`
    /// is called only if the subscriber's backlog must be replaced by a resync; it must
    /// include the effect of every update in `updates`, so the rest of the batch is then
    /// dropped (the resync covers it).
    pub(crate) fn publish_many(
        &mut self,
        subscription_id: &str,
        updates: &[SharedUpdate],
        snapshot: impl FnOnce() -> SubscriptionSnapshot,
    ) -> Published {
        if self.closing.is_some() {
            return Published::Closed;
        }
        let queue_length = self.limits.subscriber_queue_length;
        let Some((sid, sub)) = self.subscriptions.get_key_value(subscription_id) else {
            return Published::Dropped;
        };
        let sid = sid.clone();
        match sub {
            Subscription::Opening { .. } => {
                let Some(Subscription::Opening { buffer, .. }) = self.subscriptions.get_mut(&sid)
                else {
                    return Published::Dropped;
                };
                for update in updates {
                    if buffer.len() >= queue_length {
                        buffer.clear();
                        buffer.push_back(Buffered::Resync(snapshot()));
                        return Published::Reset;
                    }
                    buffer.push_back(Buffered::Update(update.clone()));
                }
                Published::Queued
            }
            Subscription::Open { .. } => self.enqueue_updates(&sid, updates, Some(snapshot)),
        }
    }

    /// Queues an attachment route change.
    pub(crate) fn push_attachment(&mut self, attachment: Option<SessionTarget>) {
        if self.closing.is_none() {
            self.push_message(&ServerMessage::Attachment(attachment));
        }
    }

    /// Stop admitting requests: new ones are answered `server_draining`.
    pub(crate) fn set_draining(&mut self) {
        self.draining = true;
    }

    /// Close after writing what is queued.
    pub(crate) fn finish(&mut self) {
        if self.closing.is_none() {
            self.begin_closing(Closing::Flush);
        }
    }

    /// The transport closed or failed: drop everything.
    pub(crate) fn abort(&mut self) {
        if self.closing != Some(Closing::Abort) {
            self.begin_closing(Closing::Abort);
        }
    }

    // ---- outputs ------------------------------------------------------------------------

    /// The next bytes to write: one frame, or a run of update frames back to back.
    pub(crate) fn poll_transmit(&mut self) -> Option<Bytes> {
        if self.closing == Some(Closing::Abort) {
            return None;
        }
        self.out.pop()
    }

    /// A frame from [`Self::poll_transmit`] was written.
    pub(crate) fn transmitted(&mut self, len: usize) {
        self.out.written(len);
    }

    /// True while frames are queued for [`Self::poll_transmit`].
    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// True once the writer has nothing left to do.
    pub(crate) fn is_finished(&self) -> bool {
        match self.closing {
            None => false,
            Some(Closing::Abort) => true,
            Some(Closing::Flush) => self.out.is_empty(),
        }
    }

    /// How the connection is ending, if it is.
    pub(crate) fn closing(&self) -> Option<Closing> {
        self.closing
    }

    /// True if the writer should look for work; clears the flag.
    pub(crate) fn take_wake(&mut self) -> bool {
        std::mem::take(&mut self.wake)
    }

    /// Requests in flight.
    pub(crate) fn active_requests(&self) -> usize {
        self.active.len()
    }

    /// Outbound bytes queued or being written.
    pub(crate) fn pending_bytes(&self) -> usize {
        self.out.pending_bytes()
    }

    // ---- internals ----------------------------------------------------------------------

    fn handle_request(&mut self, r: Request) -> Step {
        //= docs/server.md#request-handling
        //# 1. duplicate active id
        if self.active.contains_key(&r.id) {
            tracing::debug!(request = %r.id, "duplicate active request id");
            self.respond(
                &r.id,
                Outcome::Error(error(
                    ErrorCode::InvalidRequest,
                    "Request ID is already active",
                )),
            );
            return Step::Nothing;
        }
        //# 2. invalid service call
        let Ok(call) = ServiceCall::parse(&r.call) else {
            tracing::debug!(request = %r.id, "invalid service call");
            self.respond(
                &r.id,
                Outcome::Error(error(ErrorCode::InvalidRequest, "Invalid service call")),
            );
            return Step::Nothing;
        };
        // Ours: the active-request limit; the connection stays open.
        if self.active.len() >= self.limits.max_active_requests {
            tracing::debug!(request = %r.id, "active request limit reached");
            self.respond(
                &r.id,
                Outcome::Error(error(
                    ErrorCode::Busy,
                    format!(
                        "Too many active requests on this connection (limit {})",
                        self.limits.max_active_requests
                    ),
                )),
            );
            return Step::Nothing;
        }
        //# 4. decode control call; 5. wrong server
        let control = ControlCall::decode(&call);
        if r.target.server_id() != &self.server_id {
            self.respond(
                &r.id,
                Outcome::Error(error(
                    ErrorCode::WrongServer,
                    "Request was addressed to another server",
                )),
            );
            return Step::Nothing;
        }
        if self.draining {
            self.respond(
                &r.id,
                Outcome::Error(ServiceError::server_draining().to_wire()),
            );
            return Step::Nothing;
        }
        //# 6. duplicate subscription
        let kind = match control {
            Some(ControlCall::Subscribe {
                subscription_id, ..
            }) => {
                let Ok(sid) = Id::new(subscription_id) else {
                    // `ControlCall::decode` only yields non-empty ids.
                    self.respond(
                        &r.id,
                        Outcome::Error(error(ErrorCode::InvalidRequest, "Invalid service call")),
                    );
                    return Step::Nothing;
                };
                if self.subscriptions.contains_key(&sid) {
                    self.respond(
                        &r.id,
                        Outcome::Error(error(
                            ErrorCode::InvalidRequest,
                            format!("Duplicate service subscription {sid}"),
                        )),
                    );
                    return Step::Nothing;
                }
                if self.subscriptions.len() >= self.limits.max_subscriptions {
                    self.respond(
                        &r.id,
                        Outcome::Error(error(
                            ErrorCode::Busy,
                            format!(
                                "Too many subscriptions on this connection (limit {})",
                                self.limits.max_subscriptions
                            ),
                        )),
                    );
                    return Step::Nothing;
                }
                self.subscriptions.insert(
                    sid.clone(),
                    Subscription::Opening {
                        request: r.id.clone(),
                        buffer: VecDeque::new(),
                    },
                );
                RequestKind::Subscribe(sid)
            }
            Some(ControlCall::Unsubscribe { subscription_id }) => match Id::new(subscription_id) {
                Ok(sid) => RequestKind::Unsubscribe(sid),
                Err(_) => RequestKind::Call,
            },
            Some(ControlCall::Catalogue) | None => RequestKind::Call,
        };
        //# 3. register; 7. dispatch
        let cancel = CancellationToken::new();
        let requested = Arc::new(AtomicBool::new(false));
        self.active.insert(
            r.id.clone(),
            Active {
                target: r.target.clone(),
                kind,
                cancel: cancel.clone(),
                requested: Arc::clone(&requested),
            },
        );
        Step::Dispatch(Box::new(Dispatch {
            id: r.id,
            target: r.target,
            call,
            cancel,
            cancel_requested: requested,
        }))
    }

    fn handle_cancel(&mut self, c: &Cancel) {
        //= docs/server.md#cancel
        //# Same id and same target, else ignored; a cancel is never answered.
        if c.target.server_id() != &self.server_id {
            return;
        }
        if let Some(active) = self.active.get(&c.id)
            && active.target == c.target
        {
            active.requested.store(true, Ordering::Release);
            active.cancel.cancel();
        }
    }

    /// Encodes and queues `updates` for the open subscription `sid`. With `snapshot`, a full
    /// subscriber queue (length or pending bytes) turns into a resync that replaces the
    /// backlog and covers the rest of `updates`; without (replaying what was held during the
    /// subscribe, which is bounded by the queue length already), only the pending-byte limit
    /// applies and breaking it closes the connection.
    fn enqueue_updates(
        &mut self,
        sid: &Id,
        updates: &[SharedUpdate],
        snapshot: Option<impl FnOnce() -> SubscriptionSnapshot>,
    ) -> Published {
        let Some(Subscription::Open {
            encoder,
            slot,
            view,
        }) = self.subscriptions.get_mut(sid)
        else {
            return Published::Dropped;
        };
        let slot = *slot;
        let limits = self.limits;
        let out = &mut self.out;
        let mut full = false;
        let mut failed = None;
        let mut cursor = BatchCursor::default();
        for update in updates {
            if snapshot.is_some() && out.subscription_len(slot) >= limits.subscriber_queue_length {
                full = true;
                break;
            }
            let staged = out.stage();
            let encoded =
                encoder.encode_in_batch(&mut cursor, sid, update, limits.max_frame_length, staged);
            if let Err(reason) = encoded {
                failed = Some(reason);
                break;
            }
            if out.pending_bytes() + out.staged_len() > limits.max_pending_bytes {
                out.discard_staged();
                full = true;
                break;
            }
            out.commit_staged(slot);
            if let Some(view) = view.as_mut()
                && matches!(
                    update.update(),
                    ProviderUpdate::Spawned { .. } | ProviderUpdate::Closed { .. }
                )
            {
                let taken = out.subscription_taken(slot);
                view.settle(taken);
                // The unit just queued is the subscription's last.
                let unit = taken + out.subscription_len(slot) as u64 - 1;
                view.queued(unit, update.update());
            }
            self.wake = true;
        }
        encoder.end_batch(cursor);
        if let Some(reason) = failed {
            tracing::warn!(subscription = %sid, %reason, "cannot encode service update; closing connection");
            self.abort();
            return Published::Closed;
        }
        if !full {
            return Published::Queued;
        }
        match snapshot {
            Some(snapshot) => self.enqueue_resync(sid, &snapshot()),
            None => self.overflow(),
        }
    }

    /// Replaces the backlog of the open subscription `sid` by one resync from `snapshot`
    /// (the state after everything published so far), in the configured dialect
    /// ([`resync`](crate::chord::resync)). The resync is one unit of the subscriber's queue
    /// and takes the place of its oldest queued frame.
    fn enqueue_resync(&mut self, sid: &Id, snapshot: &SubscriptionSnapshot) -> Published {
        let Some(Subscription::Open {
            encoder,
            slot,
            view,
        }) = self.subscriptions.get_mut(sid)
        else {
            return Published::Dropped;
        };
        let slot = *slot;
        let taken = self.out.subscription_taken(slot);
        let no_instances = BTreeSet::new();
        let held = match view.as_mut() {
            Some(view) => {
                view.settle(taken);
                &view.delivered
            }
            None => &no_instances,
        };
        let max_frame_length = self.limits.max_frame_length;
        let frames = resync(self.limits.resync, snapshot, held)
            .and_then(|updates| encoder.encode_resync(sid, snapshot, &updates, max_frame_length));
        let frames = match frames {
            Ok(frames) => frames,
            Err(reason) => {
                tracing::warn!(subscription = %sid, %reason, "cannot encode resync; closing connection");
                self.abort();
                return Published::Closed;
            }
        };
        let replaced = self.out.subscription_bytes(slot);
        if self.out.pending_bytes() - replaced + frames.len() > self.limits.max_pending_bytes {
            return self.overflow();
        }
        tracing::debug!(subscription = %sid, "subscriber fell behind; backlog replaced by a resync");
        if let Some(view) = view.as_mut() {
            // What was pending is dropped with the backlog; the resync is unit `taken`.
            view.pending.clear();
            view.pending
                .push_back((taken, ViewChange::Resync(addresses(snapshot))));
        }
        self.out.replace_subscription(slot, frames);
        self.wake = true;
        Published::Reset
    }

    fn overflow(&mut self) -> Published {
        tracing::info!(
            limit = self.limits.max_pending_bytes,
            "outbound pending byte limit exceeded; closing connection"
        );
        self.abort();
        Published::Closed
    }

    /// Queues a response. Returns false if it could not be queued.
    fn respond(&mut self, id: &Id, outcome: Outcome) -> bool {
        let msg = ServerMessage::Response(Response {
            id: id.clone(),
            outcome,
        });
        match encode_frame(&msg, self.limits.max_frame_length) {
            Ok(frame) => self.push_frame(frame),
            Err(e) => {
                // Upstream: the encode failure is a ProtocolValidationError, answered as such.
                tracing::warn!(request = %id, error = %e, "cannot encode response");
                let msg = ServerMessage::Response(Response {
                    id: id.clone(),
                    outcome: Outcome::Error(error(ErrorCode::InvalidRequest, e.to_string())),
                });
                match encode_frame(&msg, self.limits.max_frame_length) {
                    Ok(frame) => {
                        self.push_frame(frame);
                    }
                    Err(_) => self.abort(),
                }
                false
            }
        }
    }

    fn push_message(&mut self, msg: &ServerMessage) -> bool {
        match encode_frame(msg, self.limits.max_frame_length) {
            Ok(frame) => self.push_frame(frame),
            Err(e) => {
                tracing::warn!(error = %e, "cannot encode server message; closing connection");
                self.abort();
                false
            }
        }
    }

    fn push_frame(&mut self, frame: Bytes) -> bool {
        if self.closing.is_some() {
            return false;
        }
        if self.out.pending_bytes() + frame.len() > self.limits.max_pending_bytes {
            self.overflow();
            return false;
        }
        self.out.push(frame);
        self.wake = true;
        true
    }

    /// Fatal protocol error: `hello_error` is the last frame, behind what is queued.
    fn fail(&mut self, e: WireError) {
        if self.closing.is_some() {
            return;
        }
        tracing::debug!(code = %e.code, message = %e.message, "closing connection with hello_error");
        match encode_frame(&ServerMessage::HelloError(e), self.limits.max_frame_length) {
            // The final frame is exempt from the pending-byte limit: it is small and last.
            Ok(frame) => {
                self.out.push(frame);
                self.wake = true;
            }
            Err(_) => self.closing = Some(Closing::Abort),
        }
        self.begin_closing(Closing::Flush);
    }

    fn begin_closing(&mut self, how: Closing) {
        self.handshake.close();
        if self.closing != Some(Closing::Abort) {
            self.closing = Some(how);
        }
        if how == Closing::Abort {
            self.out.clear();
        }
        for active in self.active.values() {
            active.cancel.cancel();
        }
        self.subscriptions.clear();
        self.queued.clear();
        self.wake = true;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use baton_protocol::chord::{
        InstanceSnapshot, MemberSnapshot, Op, ProviderUpdate, ServiceMode,
    };
    use baton_protocol::{Map, decode_payload};

    use super::*;

    const SERVER: &str = "00000000-0000-4000-8000-000000000001";

    fn limits() -> ConnLimits {
        ConnLimits {
            max_frame_length: 1 << 20,
            max_pending_bytes: 4 << 20,
            max_active_requests: 2,
            max_subscriptions: 4,
            subscriber_queue_length: 3,
            resync: ResyncDialect::Lifecycle,
        }
    }

    fn ready(limits: ConnLimits) -> ConnState {
        let mut s = ConnState::new(
            tokio::time::Instant::now().into_std(),
            Duration::from_secs(5),
            ServerId::parse(SERVER).unwrap(),
            limits,
        );
        assert!(matches!(
            s.handle_message(ClientMessage::hello()),
            Step::Attach
        ));
        assert!(s.handshake_complete().is_empty());
        assert!(matches!(drain(&mut s)[..], [ServerMessage::Hello { .. }]));
        s
    }

    fn drain(s: &mut ConnState) -> Vec<ServerMessage> {
        let mut out = Vec::new();
        while let Some(chunk) = s.poll_transmit() {
            s.transmitted(chunk.len());
            // A chunk is one frame or a run of update frames.
            let mut rest = &chunk[..];
            while !rest.is_empty() {
                let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
                out.push(decode_payload::<ServerMessage>(&rest[4..4 + len], u32::MAX).unwrap());
                rest = &rest[4 + len..];
            }
        }
        out
    }

    fn call(service: &str, member: &str, args: Vec<Value>) -> Value {
        let mut m = Map::new();
        m.insert("serviceId", Value::from(service));
        m.insert("member", Value::from(member));
        m.insert("args", Value::Array(args));
        Value::Map(m)
    }

    fn request(id: &str, call: Value) -> ClientMessage {
        ClientMessage::Request(Request {
            id: Id::new(id).unwrap(),
            target: Target::Server(ServerId::parse(SERVER).unwrap()),
            call,
        })
    }

    fn error_of(m: &ServerMessage) -> (ErrorCode, &str) {
        match m {
            ServerMessage::Response(Response {
                outcome: Outcome::Error(e),
                ..
            }) => (e.kind().expect("a code baton produces"), e.message.as_str()),
            other => panic!("not an error response: {other:?}"),
        }
    }

    fn snapshot(sequence: u64, value: i32) -> SubscriptionSnapshot {
        let mut m = Map::new();
        m.insert("value", Value::from(value));
        SubscriptionSnapshot::new(
            "svc",
            ServiceMode::Singleton,
            vec![InstanceSnapshot::new(
                None,
                vec![MemberSnapshot::state("state", sequence, Value::Map(m))],
            )],
        )
    }

    fn set(sequence: u64, value: i32) -> SharedUpdate {
        SharedUpdate::new(ProviderUpdate::State {
            instance: None,
            member: "state".into(),
            sequence,
            ops: vec![Op::Set {
                path: baton_protocol::chord::parse_path(&Value::Array(vec![Value::from("value")]))
                    .unwrap(),
                value: Value::from(value),
            }],
        })
    }

    #[test]
    fn duplicate_id_is_checked_before_the_active_limit() {
        let mut s = ready(limits());
        let echo = || call("t", "echo", vec![]);
        assert!(matches!(
            s.handle_message(request("a", echo())),
            Step::Dispatch(_)
        ));
        assert!(matches!(
            s.handle_message(request("b", echo())),
            Step::Dispatch(_)
        ));
        assert!(matches!(
            s.handle_message(request("a", echo())),
            Step::Nothing
        ));
        assert!(matches!(
            s.handle_message(request("c", echo())),
            Step::Nothing
        ));
        let out = drain(&mut s);
        assert_eq!(
            error_of(&out[0]),
            (ErrorCode::InvalidRequest, "Request ID is already active")
        );
        assert_eq!(
            error_of(&out[1]),
            (
                ErrorCode::Busy,
                "Too many active requests on this connection (limit 2)"
            )
        );
        assert_eq!(s.active_requests(), 2);
    }

    #[test]
    fn draining_refuses_after_the_wrong_server_check() {
        let mut s = ready(limits());
        s.set_draining();
        let mut other = request("x", call("t", "echo", vec![]));
        if let ClientMessage::Request(r) = &mut other {
            r.target =
                Target::Server(ServerId::parse("00000000-0000-4000-8000-000000000002").unwrap());
        }
        assert!(matches!(s.handle_message(other), Step::Nothing));
        assert!(matches!(
            s.handle_message(request("y", call("t", "echo", vec![]))),
            Step::Nothing
        ));
        let out = drain(&mut s);
        assert_eq!(error_of(&out[0]).0, ErrorCode::WrongServer);
        assert_eq!(
            error_of(&out[1]),
            (ErrorCode::ServerDraining, "Server is draining")
        );
    }

    #[test]
    fn updates_published_during_subscribe_follow_its_response_minus_covered_ones() {
        let mut s = ready(limits());
        let sub = call(
            "$chord.service",
            "subscribe",
            vec![
                Value::from("sub"),
                Value::from("svc"),
                Value::from("singleton"),
            ],
        );
        let Step::Dispatch(d) = s.handle_message(request("r", sub)) else {
            panic!("dispatch expected");
        };
        assert_eq!(
            s.publish("sub", &set(1, 1), || snapshot(1, 1)),
            Published::Queued
        );
        assert_eq!(
            s.publish("sub", &set(2, 2), || snapshot(2, 2)),
            Published::Queued
        );
        assert!(drain(&mut s).is_empty(), "nothing before the response");
        s.finish_request(&d.id, Ok(Some(snapshot(1, 1).to_value())));
        let out = drain(&mut s);
        assert!(
            matches!(&out[0], ServerMessage::Response(r) if matches!(r.outcome, Outcome::Value(_)))
        );
        assert_eq!(
            out.len(),
            2,
            "the covered update (sequence 1) is dropped: {out:?}"
        );
        assert!(
            matches!(&out[1], ServerMessage::ServiceUpdate(u) if u.update.to_json().contains("\"sequence\":2"))
        );
    }

    #[test]
    fn a_full_singleton_queue_collapses_into_one_replaced_carrying_the_current_instance() {
        let mut s = ready(limits());
        let sub = call(
            "$chord.service",
            "subscribe",
            vec![
                Value::from("sub"),
                Value::from("svc"),
                Value::from("singleton"),
            ],
        );
        let Step::Dispatch(d) = s.handle_message(request("r", sub)) else {
            panic!("dispatch expected");
        };
        s.finish_request(&d.id, Ok(Some(snapshot(0, 0).to_value())));
        assert_eq!(drain(&mut s).len(), 1);
        for i in 1..=3 {
            assert_eq!(
                s.publish("sub", &set(i, i as i32), || snapshot(i, i as i32)),
                Published::Queued
            );
        }
        assert_eq!(
            s.publish("sub", &set(4, 4), || snapshot(4, 4)),
            Published::Reset
        );
        assert_eq!(
            s.publish("sub", &set(5, 5), || snapshot(5, 5)),
            Published::Queued
        );
        let out = drain(&mut s);
        assert_eq!(out.len(), 2);
        let ServerMessage::ServiceUpdate(resync) = &out[0] else {
            panic!("not an update: {:?}", out[0]);
        };
        assert_eq!(
            resync.update.to_json(),
            r#"{"type":"replaced","snapshot":{"members":[{"name":"state","kind":"state","sequence":4,"ops":[["r",{"value":4}]]}]}}"#,
            "one chord 0.85.1 update: the instance at the snapshot's sequence"
        );
        assert!(
            matches!(&out[1], ServerMessage::ServiceUpdate(u) if u.update.to_json().contains("\"sequence\":5"))
        );
    }

    fn subscribed(limits: ConnLimits, sids: &[&str]) -> ConnState {
        let mut s = ready(limits);
        for sid in sids {
            let sub = call(
                "$chord.service",
                "subscribe",
                vec![
                    Value::from(*sid),
                    Value::from("svc"),
                    Value::from("singleton"),
                ],
            );
            let Step::Dispatch(d) = s.handle_message(request(&format!("r-{sid}"), sub)) else {
                panic!("dispatch expected");
            };
            s.finish_request(&d.id, Ok(Some(snapshot(0, 0).to_value())));
        }
        assert_eq!(drain(&mut s).len(), sids.len());
        s
    }

    fn sequences(out: &[ServerMessage]) -> Vec<(String, String)> {
        out.iter()
            .map(|m| match m {
                ServerMessage::ServiceUpdate(u) => {
                    let json = u.update.to_json();
                    let what = if json.starts_with("{\"type\":\"reset\"") {
                        "reset".to_owned()
                    } else if json.starts_with("{\"type\":\"replaced\"") {
                        "replaced".to_owned()
                    } else {
                        json.split("\"sequence\":")
                            .nth(1)
                            .and_then(|rest| rest.split([',', '}']).next())
                            .unwrap_or_default()
                            .to_owned()
                    };
                    (u.subscription_id.to_string(), what)
                }
                other => panic!("not an update: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn batches_to_several_subscriptions_leave_in_publish_order() {
        let mut s = subscribed(limits(), &["a", "b"]);
        let batch = [set(1, 1), set(2, 2)];
        assert_eq!(
            s.publish_many("a", &batch, || snapshot(2, 2)),
            Published::Queued
        );
        assert_eq!(
            s.publish_many("b", &batch, || snapshot(2, 2)),
            Published::Queued
        );
        assert_eq!(
            s.publish_many("a", &[set(3, 3)], || snapshot(3, 3)),
            Published::Queued
        );
        let out = drain(&mut s);
        let expected = [("a", "1"), ("a", "2"), ("b", "1"), ("b", "2"), ("a", "3")]
            .map(|(a, b)| (a.to_owned(), b.to_owned()));
        assert_eq!(sequences(&out), expected);
        assert_eq!(
            batch[0].encode_count(),
            1,
            "both subscribers shared one encoding"
        );
    }

    #[test]
    fn a_batch_that_overflows_the_queue_ends_in_one_resync_covering_the_rest() {
        let mut s = subscribed(limits(), &["a", "b"]);
        assert_eq!(
            s.publish_many("b", &[set(1, 1)], || snapshot(1, 1)),
            Published::Queued
        );
        let batch: Vec<_> = (1..=5).map(|i| set(i, i as i32)).collect();
        assert_eq!(
            s.publish_many("a", &batch, || snapshot(5, 5)),
            Published::Reset
        );
        assert_eq!(
            s.publish_many("a", &[set(6, 6)], || snapshot(6, 6)),
            Published::Queued
        );
        let out = drain(&mut s);
        let expected =
            [("b", "1"), ("a", "replaced"), ("a", "6")].map(|(a, b)| (a.to_owned(), b.to_owned()));
        assert_eq!(sequences(&out), expected);
        assert!(
            matches!(&out[1], ServerMessage::ServiceUpdate(u) if u.update.to_json().contains("\"sequence\":5")),
            "the resync carries the state after the whole batch"
        );
        assert_eq!(s.pending_bytes(), 0);
    }

    #[test]
    fn a_batch_published_during_subscribe_is_held_and_a_full_hold_becomes_one_resync() {
        let mut s = ready(limits());
        let sub = call(
            "$chord.service",
            "subscribe",
            vec![
                Value::from("a"),
                Value::from("svc"),
                Value::from("singleton"),
            ],
        );
        let Step::Dispatch(d) = s.handle_message(request("r", sub)) else {
            panic!("dispatch expected");
        };
        let batch: Vec<_> = (1..=4).map(|i| set(i, i as i32)).collect();
        assert_eq!(
            s.publish_many("a", &batch, || snapshot(4, 4)),
            Published::Reset
        );
        assert_eq!(
            s.publish_many("a", &[set(5, 5)], || snapshot(5, 5)),
            Published::Queued
        );
        s.finish_request(&d.id, Ok(Some(snapshot(0, 0).to_value())));
        let out = drain(&mut s);
        assert!(matches!(&out[0], ServerMessage::Response(_)));
        let expected = [("a", "replaced"), ("a", "5")].map(|(a, b)| (a.to_owned(), b.to_owned()));
        assert_eq!(sequences(&out[1..]), expected);
    }

    #[test]
    fn unsubscribing_drops_queued_updates_and_a_new_subscription_starts_clean() {
        let mut s = subscribed(limits(), &["a"]);
        assert_eq!(
            s.publish_many("a", &[set(1, 1), set(2, 2)], || snapshot(2, 2)),
            Published::Queued
        );
        let unsub = call("$chord.service", "unsubscribe", vec![Value::from("a")]);
        let Step::Dispatch(d) = s.handle_message(request("u", unsub)) else {
            panic!("dispatch expected");
        };
        s.finish_request(&d.id, Ok(None));
        assert_eq!(
            s.publish("a", &set(3, 3), || snapshot(3, 3)),
            Published::Dropped
        );
        let out = drain(&mut s);
        assert_eq!(out.len(), 1, "only the unsubscribe response: {out:?}");
        let mut s2 = s;
        let sub = call(
            "$chord.service",
            "subscribe",
            vec![
                Value::from("b"),
                Value::from("svc"),
                Value::from("singleton"),
            ],
        );
        let Step::Dispatch(d) = s2.handle_message(request("r2", sub)) else {
            panic!("dispatch expected");
        };
        s2.finish_request(&d.id, Ok(Some(snapshot(0, 0).to_value())));
        for i in 1..=3 {
            assert_eq!(
                s2.publish("b", &set(i, i as i32), || snapshot(i, i as i32)),
                Published::Queued,
                "the reused queue slot starts empty"
            );
        }
    }

    #[test]
    fn fatal_error_is_queued_behind_pending_output_and_is_last() {
        let mut s = ready(limits());
        let Step::Dispatch(d) = s.handle_message(request("r", call("t", "echo", vec![]))) else {
            panic!("dispatch expected");
        };
        s.finish_request(&d.id, Ok(None));
        s.handle_message(ClientMessage::hello());
        assert_eq!(s.closing(), Some(Closing::Flush));
        assert!(!s.is_finished());
        let out = drain(&mut s);
        assert!(matches!(&out[0], ServerMessage::Response(_)));
        assert!(
            matches!(&out[1], ServerMessage::HelloError(e) if e.message == "hello may only be sent as the first message")
        );
        assert!(s.is_finished());
        assert_eq!(
            s.publish("sub", &set(1, 1), || snapshot(1, 1)),
            Published::Closed
        );
    }

    #[test]
    fn exceeding_the_pending_byte_limit_aborts() {
        let mut l = limits();
        l.max_pending_bytes = 200;
        let mut s = ready(l);
        for i in 0..2 {
            let Step::Dispatch(d) =
                s.handle_message(request(&format!("r{i}"), call("t", "echo", vec![])))
            else {
                panic!("dispatch expected");
            };
            s.finish_request(&d.id, Ok(Some(Value::from("x".repeat(120)))));
        }
        assert_eq!(s.closing(), Some(Closing::Abort));
        assert!(s.is_finished());
        assert_eq!(s.pending_bytes(), 0);
    }

    /// A keyed provider for tests: each live instance has one `state` member `{"value":n}`.
    #[derive(Debug, Default)]
    struct Keyed {
        /// key → (generation, sequence, value)
        live: std::collections::BTreeMap<String, (u64, u64, i32)>,
        generations: HashMap<String, u64>,
    }

    fn keyed_instance(key: &str, generation: u64, sequence: u64, value: i32) -> InstanceSnapshot {
        let mut m = Map::new();
        m.insert("value", Value::from(value));
        InstanceSnapshot::new(
            Some(InstanceAddress::new(key, generation)),
            vec![MemberSnapshot::state("state", sequence, Value::Map(m))],
        )
    }

    impl Keyed {
        fn snapshot(&self) -> SubscriptionSnapshot {
            SubscriptionSnapshot::new(
                "svc",
                ServiceMode::Keyed,
                self.live
                    .iter()
                    .map(|(k, (g, seq, v))| keyed_instance(k, *g, *seq, *v))
                    .collect(),
            )
        }

        fn spawn(&mut self, key: &str) -> Option<SharedUpdate> {
            if self.live.contains_key(key) {
                return None;
            }
            let generation = self.generations.entry(key.to_owned()).or_default();
            *generation += 1;
            self.live.insert(key.to_owned(), (*generation, 0, 0));
            Some(SharedUpdate::new(ProviderUpdate::Spawned {
                instance: keyed_instance(key, *generation, 0, 0),
            }))
        }

        fn close(&mut self, key: &str) -> Option<SharedUpdate> {
            let (generation, ..) = self.live.remove(key)?;
            Some(SharedUpdate::new(ProviderUpdate::Closed {
                instance: InstanceAddress::new(key, generation),
            }))
        }

        fn bump(&mut self, key: &str) -> Option<SharedUpdate> {
            let (generation, sequence, value) = self.live.get_mut(key)?;
            *sequence += 1;
            *value += 1;
            Some(SharedUpdate::new(ProviderUpdate::State {
                instance: Some(InstanceAddress::new(key, *generation)),
                member: "state".into(),
                sequence: *sequence,
                ops: vec![Op::Set {
                    path: baton_protocol::chord::parse_path(&Value::Array(vec![Value::from(
                        "value",
                    )]))
                    .unwrap(),
                    value: Value::from(*value),
                }],
            }))
        }
    }

    /// What a chord consumer does with the frames: upstream's state decoder (which refuses a
    /// `spawned` for an address it still has codecs for) and replica rules.
    struct Client {
        decoder: baton_protocol::chord::StateDecoder,
        replica: baton_protocol::chord::Replica,
    }

    impl Client {
        fn new(response: &ServerMessage, mode: ServiceMode) -> Self {
            let ServerMessage::Response(Response {
                outcome: Outcome::Value(wire),
                ..
            }) = response
            else {
                panic!("not a subscribe response: {response:?}");
            };
            let mut decoder = baton_protocol::chord::StateDecoder::new();
            let mut replica = baton_protocol::chord::Replica::new("svc", mode);
            replica
                .apply_snapshot(decoder.decode_snapshot(wire).unwrap())
                .unwrap();
            Self { decoder, replica }
        }

        fn apply(&mut self, messages: &[ServerMessage]) -> Vec<String> {
            let mut types = Vec::new();
            for m in messages {
                let ServerMessage::ServiceUpdate(u) = m else {
                    panic!("not an update: {m:?}");
                };
                let update = self.decoder.decode_update(&u.update).unwrap();
                types.push(match &update {
                    ProviderUpdate::Spawned { instance } => {
                        let a = instance.instance.as_ref().unwrap();
                        format!("spawned {}@{}", a.key, a.generation)
                    }
                    ProviderUpdate::Closed { instance } => {
                        format!("closed {}@{}", instance.key, instance.generation)
                    }
                    other => other.type_name().to_owned(),
                });
                self.replica.apply_update(update).unwrap();
            }
            types
        }

        /// Each instance with its value and sequence.
        fn view(&self) -> Vec<(Option<InstanceAddress>, Option<Value>, Option<u64>)> {
            let mut v: Vec<_> = self
                .replica
                .instances()
                .iter()
                .map(|i| {
                    (
                        i.address().cloned(),
                        i.value("state").cloned(),
                        i.sequence("state"),
                    )
                })
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v
        }
    }

    fn expected_view(
        snapshot: &SubscriptionSnapshot,
    ) -> Vec<(Option<InstanceAddress>, Option<Value>, Option<u64>)> {
        let mut replica = baton_protocol::chord::Replica::new("svc", snapshot.mode);
        replica.apply_snapshot(snapshot.clone()).unwrap();
        let mut v: Vec<_> = replica
            .instances()
            .iter()
            .map(|i| {
                (
                    i.address().cloned(),
                    i.value("state").cloned(),
                    i.sequence("state"),
                )
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    fn subscribe_keyed(s: &mut ConnState, sid: &str, snapshot: &SubscriptionSnapshot) -> Client {
        let sub = call(
            "$chord.service",
            "subscribe",
            vec![Value::from(sid), Value::from("svc"), Value::from("keyed")],
        );
        let Step::Dispatch(d) = s.handle_message(request(&format!("r-{sid}"), sub)) else {
            panic!("dispatch expected");
        };
        s.finish_request(&d.id, Ok(Some(snapshot.to_value())));
        let out = drain(s);
        assert_eq!(out.len(), 1);
        Client::new(&out[0], ServiceMode::Keyed)
    }

    /// Takes at most `chunks` writes' worth of frames.
    fn drain_some(s: &mut ConnState, chunks: usize) -> Vec<ServerMessage> {
        let mut out = Vec::new();
        for _ in 0..chunks {
            let Some(chunk) = s.poll_transmit() else {
                break;
            };
            s.transmitted(chunk.len());
            let mut rest = &chunk[..];
            while !rest.is_empty() {
                let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
                out.push(decode_payload::<ServerMessage>(&rest[4..4 + len], u32::MAX).unwrap());
                rest = &rest[4 + len..];
            }
        }
        out
    }

    #[test]
    fn a_keyed_resync_closes_what_the_client_holds_then_spawns_every_current_instance() {
        let mut s = ready(limits());
        let mut p = Keyed::default();
        p.spawn("a");
        p.spawn("b");
        let mut client = subscribe_keyed(&mut s, "k", &p.snapshot());
        // The client gets the close of `a`.
        let closed = p.close("a").unwrap();
        assert_eq!(s.publish("k", &closed, || p.snapshot()), Published::Queued);
        assert_eq!(client.apply(&drain_some(&mut s, 1)), ["closed a@1"]);
        // Then it stops reading: three updates fill its queue, the fourth overflows.
        for update in [p.spawn("c"), p.bump("b"), p.spawn("d")] {
            let update = update.unwrap();
            assert_eq!(s.publish("k", &update, || p.snapshot()), Published::Queued);
        }
        let bump = p.bump("c").unwrap();
        assert_eq!(s.publish("k", &bump, || p.snapshot()), Published::Reset);
        let types = client.apply(&drain(&mut s));
        assert_eq!(
            types,
            ["closed b@1", "spawned b@1", "spawned c@1", "spawned d@1"],
            "only what the client holds is closed (`a` went out before, `c` and `d` never did)"
        );
        assert_eq!(client.view(), expected_view(&p.snapshot()));
        // Updates continue from the snapshot's sequences.
        let bump = p.bump("c").unwrap();
        assert_eq!(s.publish("k", &bump, || p.snapshot()), Published::Queued);
        assert_eq!(client.apply(&drain(&mut s)), ["state"]);
        assert_eq!(client.view(), expected_view(&p.snapshot()));
    }

    #[test]
    fn a_keyed_resync_during_subscribe_closes_the_response_instances() {
        let mut s = ready(limits());
        let mut p = Keyed::default();
        p.spawn("a");
        let response = p.snapshot();
        let sub = call(
            "$chord.service",
            "subscribe",
            vec![Value::from("k"), Value::from("svc"), Value::from("keyed")],
        );
        let Step::Dispatch(d) = s.handle_message(request("r", sub)) else {
            panic!("dispatch expected");
        };
        let batch: Vec<_> = [p.close("a"), p.spawn("a"), p.spawn("b"), p.bump("b")]
            .into_iter()
            .map(Option::unwrap)
            .collect();
        assert_eq!(
            s.publish_many("k", &batch, || p.snapshot()),
            Published::Reset
        );
        s.finish_request(&d.id, Ok(Some(response.to_value())));
        let out = drain(&mut s);
        let mut client = Client::new(&out[0], ServiceMode::Keyed);
        assert_eq!(
            client.apply(&out[1..]),
            ["closed a@1", "spawned a@2", "spawned b@1"]
        );
        assert_eq!(client.view(), expected_view(&p.snapshot()));
    }

    #[test]
    fn keyed_subscribers_converge_through_any_interleaving_of_resyncs_and_writes() {
        // A small deterministic generator: the same run every time.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let keys = ["a", "b", "c", "d", "e"];
        for round in 0..20 {
            let mut s = ready(limits());
            let mut p = Keyed::default();
            p.spawn("a");
            p.spawn("b");
            let mut client = subscribe_keyed(&mut s, "k", &p.snapshot());
            let mut resyncs = 0;
            for _ in 0..400 {
                let key = keys[next(keys.len() as u64) as usize];
                let batch: Vec<_> = (0..1 + next(3))
                    .filter_map(|_| match next(4) {
                        0 => p.spawn(key),
                        1 => p.close(key),
                        _ => p.bump(key),
                    })
                    .collect();
                if !batch.is_empty() {
                    match s.publish_many("k", &batch, || p.snapshot()) {
                        Published::Queued => {}
                        Published::Reset => resyncs += 1,
                        other => panic!("round {round}: {other:?}"),
                    }
                }
                if next(3) == 0 {
                    let chunks = next(3) as usize;
                    client.apply(&drain_some(&mut s, chunks));
                }
                let Some(Subscription::Open {
                    view: Some(view), ..
                }) = s.subscriptions.get("k")
                else {
                    panic!("keyed subscription open");
                };
                assert!(
                    view.pending.len() <= s.limits.subscriber_queue_length,
                    "round {round}: {} pending changes",
                    view.pending.len()
                );
            }
            client.apply(&drain(&mut s));
            assert!(resyncs > 0, "round {round} never overflowed");
            assert_eq!(client.view(), expected_view(&p.snapshot()), "round {round}");
        }
    }

    #[test]
    fn the_reset_dialect_sends_one_reset_for_pi_1_clients() {
        let mut s = subscribed(
            ConnLimits {
                resync: ResyncDialect::Reset,
                ..limits()
            },
            &["a"],
        );
        let batch: Vec<_> = (1..=5).map(|i| set(i, i as i32)).collect();
        assert_eq!(
            s.publish_many("a", &batch, || snapshot(5, 5)),
            Published::Reset
        );
        let out = drain(&mut s);
        assert_eq!(sequences(&out), [("a".to_owned(), "reset".to_owned())]);
    }
}
