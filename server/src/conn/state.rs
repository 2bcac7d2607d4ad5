//! The sans-IO core of one connection: handshake stage, active requests, and the outbound
//! queue, with the connection's [`Subscriptions`] queueing into it.
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

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton_protocol::codec::encode_frame;
use baton_protocol::handshake::{ServerHandshake, ServerStep};
use baton_protocol::{
    Cancel, ClientMessage, DecodeError, ErrorCode, Id, Outcome, Request, Response, ServerId,
    ServerMessage, SessionTarget, Target, Value, WireError,
};
use bytes::Bytes;

use crate::chord::{
    ControlCall, ServiceCall, SharedUpdate, SubscriptionEncoder, SubscriptionSnapshot,
    parse_snapshot,
};
use crate::conn::call::parse_call;
use crate::conn::limits::ConnLimits;
use crate::conn::outbound::Outbound;
use crate::conn::subscriptions::{Fatal, Published, Sink, Subscriptions};
use crate::error::ServiceError;
use crate::request_cancel::RequestCancel;

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
    cancel: Arc<RequestCancel>,
}

/// A request the driver must run against the host.
#[derive(Debug)]
pub(crate) struct Dispatch {
    pub(crate) id: Id,
    pub(crate) target: Target,
    pub(crate) call: ServiceCall,
    pub(crate) cancel: Arc<RequestCancel>,
}

/// What the driver must do after [`ConnState::handle_message`].
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "a Step lives on the stack for one message; boxing Dispatch would cost an allocation per request"
)]
pub(crate) enum Step {
    /// Nothing (an immediate response may have been queued).
    Nothing,
    /// A valid hello: attach the client at the host, then call
    /// [`ConnState::handshake_complete`] or [`ConnState::handshake_failed`].
    Attach,
    /// Run this request.
    Dispatch(Dispatch),
}

/// How the connection is ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closing {
    /// Write what is queued (ending with any final frame), then close.
    Flush,
    /// Close now; queued frames are dropped.
    Abort,
}

/// The state of one connection.
#[derive(Debug)]
pub(crate) struct ConnState {
    server_id: ServerId,
    limits: ConnLimits,
    handshake: ServerHandshake,
    queued: VecDeque<ClientMessage>,
    active: HashMap<Id, Active>,
    subscriptions: Subscriptions,
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
            subscriptions: Subscriptions::default(),
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
                dispatches.push(d);
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
                    self.subscriptions.abandon(sid, id);
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
                self.subscriptions.remove(&mut self.out, &sid);
                self.respond(id, value.map_or(Outcome::Void, Outcome::Value));
            }
            RequestKind::Subscribe(sid) => self.finish_subscribe(id, &sid, value),
        }
    }

    fn finish_subscribe(&mut self, id: &Id, sid: &Id, value: Option<Value>) {
        let Some(value) = value else {
            self.subscriptions.abandon(sid, id);
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
                self.subscriptions.abandon(sid, id);
                self.respond(id, Outcome::Error(ServiceError::internal(reason).to_wire()));
                return;
            }
        };
        if !self.respond(id, Outcome::Value(wire)) {
            self.subscriptions.abandon(sid, id);
            return;
        }
        let (subscriptions, mut sink) = self.queueing();
        if let Err(fatal) = subscriptions.open(&mut sink, sid, id, encoder, &snapshot) {
            self.fatal(fatal);
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
        let (subscriptions, mut sink) = self.queueing();
        match subscriptions.publish(&mut sink, subscription_id, updates, snapshot) {
            Ok(published) => published,
            Err(fatal) => self.fatal(fatal),
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
        // Moved out of the request, which is dropped after this call anyway.
        let Ok(call) = parse_call(r.call) else {
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
                if self.subscriptions.contains(&sid) {
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
                self.subscriptions.begin(sid.clone(), r.id.clone());
                RequestKind::Subscribe(sid)
            }
            Some(ControlCall::Unsubscribe { subscription_id }) => match Id::new(subscription_id) {
                Ok(sid) => RequestKind::Unsubscribe(sid),
                Err(_) => RequestKind::Call,
            },
            Some(ControlCall::Catalogue) | None => RequestKind::Call,
        };
        //# 3. register; 7. dispatch
        // No token yet: one is made only if the host asks for it (`RequestCancel`).
        let cancel = Arc::new(RequestCancel::default());
        self.active.insert(
            r.id.clone(),
            Active {
                target: r.target.clone(),
                kind,
                cancel: Arc::clone(&cancel),
            },
        );
        Step::Dispatch(Dispatch {
            id: r.id,
            target: r.target,
            call,
            cancel,
        })
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
            active.cancel.cancel(true);
        }
    }

    /// The subscriptions, with what they queue into.
    fn queueing(&mut self) -> (&mut Subscriptions, Sink<'_>) {
        (
            &mut self.subscriptions,
            Sink {
                out: &mut self.out,
                limits: &self.limits,
                wake: &mut self.wake,
            },
        )
    }

    /// Queueing for a subscriber failed: close the connection.
    fn fatal(&mut self, fatal: Fatal) -> Published {
        match fatal {
            Fatal::Encode => {
                self.abort();
                Published::Closed
            }
            Fatal::PendingBytes => self.overflow(),
        }
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
            active.cancel.cancel(false);
        }
        self.subscriptions.clear();
        self.queued.clear();
        self.wake = true;
    }
}

#[cfg(test)]
mod tests;
