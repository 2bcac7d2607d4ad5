//! The connection driver: one task that owns the connection state.
//!
//! It reads server frames, routes responses to waiting callers, tracks the attachment,
//! feeds subscription replicas, and (with a reconnect policy) reconnects, re-attaches and
//! re-subscribes. Writes go to a separate writer task through a bounded queue, so a slow
//! socket never stops us from reading. While connected, user requests skip the driver on
//! the way out: callers queue their frames for the writer themselves and record them in the
//! shared [`Wire`](crate::client::Wire), which the driver completes from.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use baton_protocol::chord::{ControlCall, ServiceCall};
use baton_protocol::{
    Cancel, ClientMessage, Id, Outcome, Request, ServerFrame, ServerFrameCodec, ServerId,
    ServerMessage, SessionTarget, Target, Value, encode_frame,
};
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tracing::{debug, warn};

use crate::client::{Answered, SentRequest, Shared};
use crate::config::ClientConfig;
use crate::connect::{self, Connection};
use crate::error::RequestError;
use crate::status::Status;
use crate::subscription::{SubCore, SubscribeCmd};
use crate::transport::BoxStream;

/// The service that attaches a connection to a session (pi's session manager).
pub const SESSION_MANAGEMENT_SERVICE: &str = "pi.session-management";

/// Frames queued for the writer task.
const OUTBOUND_QUEUE: usize = crate::config::DEFAULT_OUTBOUND_QUEUE;
/// The writer coalesces queued frames into one write of at most this many bytes.
const WRITE_COALESCE_BYTES: usize = 64 * 1024;

/// A successful answer: void is distinct from `null`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The handler returned nothing (`ok:true` without `result`).
    Void,
    /// The handler returned a value (possibly `null`).
    Value(Value),
}

impl Reply {
    /// The value, treating void as `null`.
    pub fn into_value(self) -> Value {
        match self {
            Self::Void => Value::Null,
            Self::Value(v) => v,
        }
    }
}

/// Where a request goes, resolved by the driver at send time.
#[derive(Debug, Clone)]
pub(crate) enum TargetSpec {
    /// Exactly this target.
    Explicit(Target),
    /// The current attachment, which must be to this session.
    Session(Id),
}

pub(crate) type ReplyTx = oneshot::Sender<Result<Reply, RequestError>>;

/// Work sent to the driver by client handles.
pub(crate) enum Command {
    Request {
        id: Id,
        target: TargetSpec,
        call: Value,
        reply: ReplyTx,
    },
    Attach {
        session_id: Id,
        reply: oneshot::Sender<Result<SessionTarget, RequestError>>,
    },
    Detach {
        reply: ReplyTx,
    },
    Subscribe(SubscribeCmd),
}

/// Work that handles queue from `Drop` (which cannot await).
#[derive(Debug)]
pub(crate) enum Deferred {
    Cancel(Id),
    Unsubscribe(u64),
}

/// What a response id is waiting for (user requests live in the shared `Wire` instead).
enum Pending {
    Attach {
        session_id: Id,
        reply: Option<oneshot::Sender<Result<SessionTarget, RequestError>>>,
    },
    Detach {
        reply: ReplyTx,
    },
    Subscribe {
        key: u64,
    },
    /// Unsubscribes and re-subscribe cleanups: the answer does not matter.
    Internal,
}

/// The live transport of one connection.
struct Live {
    reader: FramedRead<ReadHalf<BoxStream>, ServerFrameCodec>,
    outbound: mpsc::Sender<Bytes>,
}

enum Ended {
    /// The user closed the client or every handle was dropped.
    Closed(String),
    /// The connection was lost.
    Lost(String),
}

pub(crate) struct Driver {
    shared: Arc<Shared>,
    config: ClientConfig,
    tls: Option<Arc<rustls::ClientConfig>>,
    server_id: ServerId,
    commands: mpsc::Receiver<Command>,
    status: watch::Sender<Status>,
    attachment: watch::Sender<Option<SessionTarget>>,
    pending: HashMap<Id, Pending>,
    /// The session to re-attach after a reconnect.
    desired_session: Option<Id>,
    subs: SubCore,
    /// Reconnect attempts since the last healthy connection (the backoff exponent).
    attempt: u32,
    /// This connection's re-attach and re-subscribe requests still unanswered.
    resuming: HashSet<Id>,
    /// When this connection's last resume request was answered: it is healthy once it has
    /// stayed up `healthy_after` from here.
    resumed_at: Option<Instant>,
}

impl Driver {
    #[expect(
        clippy::too_many_arguments,
        reason = "assembled once by Client::connect"
    )]
    pub(crate) fn new(
        shared: Arc<Shared>,
        config: ClientConfig,
        tls: Option<Arc<rustls::ClientConfig>>,
        server_id: ServerId,
        commands: mpsc::Receiver<Command>,
        status: watch::Sender<Status>,
        attachment: watch::Sender<Option<SessionTarget>>,
        subs: SubCore,
    ) -> Self {
        Self {
            shared,
            config,
            tls,
            server_id,
            commands,
            status,
            attachment,
            pending: HashMap::new(),
            desired_session: None,
            subs,
            attempt: 0,
            resuming: HashSet::new(),
            resumed_at: None,
        }
    }

    /// Runs until closed: serve, and on loss reconnect per the policy.
    pub(crate) async fn run(mut self, first: Connection) {
        let mut conn = first;
        loop {
            let live = self.start_writer(conn.writer, conn.reader);
            let ended = self.serve(live).await;
            // No caller may write to (or record a request for) the ended connection.
            let sent = self.shared.clear_wire();
            let reason = match ended {
                Ended::Closed(reason) => {
                    fail_sent(sent, &reason);
                    self.finish(&reason);
                    return;
                }
                Ended::Lost(reason) => reason,
            };
            debug!(%reason, "connection lost");
            fail_sent(sent, &reason);
            self.fail_in_flight(&reason);
            match self.reconnect(&reason).await {
                Some(next) => conn = next,
                None => return,
            }
        }
    }

    fn start_writer(
        &self,
        writer: WriteHalf<BoxStream>,
        reader: FramedRead<ReadHalf<BoxStream>, ServerFrameCodec>,
    ) -> Live {
        let (outbound, rx) = mpsc::channel(OUTBOUND_QUEUE);
        let cancel = self.shared.shutdown.clone();
        self.shared.spawn(async move {
            tokio::select! {
                _ = write_loop(writer, rx) => {}
                () = cancel.cancelled() => {}
            }
        });
        Live { reader, outbound }
    }

    async fn serve(&mut self, mut live: Live) -> Ended {
        self.resume_after_connect(&live).await;
        // After the re-attach request, as when every request went through the driver.
        self.shared.install_wire(live.outbound.clone());
        loop {
            tokio::select! {
                biased;
                () = self.shared.shutdown.cancelled() => return Ended::Closed("client closed".to_owned()),
                () = self.shared.deferred_notify.notified() => {
                    if let Err(e) = self.drain_deferred(&live).await {
                        return e;
                    }
                }
                frame = live.reader.next() => match frame {
                    Some(Ok(ServerFrame::Update(update))) => {
                        let resync = self.subs.on_update(&update.subscription_id, update.update);
                        if let Err(e) = self.handle_resync(resync, &live).await {
                            return e;
                        }
                    }
                    Some(Ok(ServerFrame::Message(msg))) => {
                        if let Err(e) = self.handle_message(msg, &live).await {
                            return e;
                        }
                    }
                    Some(Err(e)) => return Ended::Lost(e.to_string()),
                    None => return Ended::Lost("Byte transport closed".to_owned()),
                },
                cmd = self.commands.recv() => match cmd {
                    Some(cmd) => {
                        if let Err(e) = self.handle_command(cmd, &live).await {
                            return e;
                        }
                    }
                    None => return Ended::Closed("every client handle was dropped".to_owned()),
                },
                () = live.outbound.closed() => return Ended::Lost("the connection's writer stopped".to_owned()),
            }
        }
    }

    /// Re-attach and re-subscribe on a fresh connection, noting the requests that must be
    /// answered before the connection can count as healthy.
    async fn resume_after_connect(&mut self, live: &Live) {
        self.resuming.clear();
        self.resumed_at = None;
        if let Some(session_id) = self.desired_session.clone() {
            let call = attach_call(&session_id);
            if let Ok(id) = self
                .send_request(
                    live,
                    Target::Server(self.server_id.clone()),
                    call,
                    Pending::Attach {
                        session_id,
                        reply: None,
                    },
                )
                .await
            {
                self.resuming.insert(id);
            }
        }
        self.subs.end_orphaned(self.desired_session.as_ref());
        for key in self.subs.keys_to_resume(self.desired_session.is_some()) {
            if let Some(id) = self.start_subscription(key, live).await {
                self.resuming.insert(id);
            }
        }
        if self.resuming.is_empty() {
            self.resumed_at = Some(Instant::now());
        }
    }

    /// A response arrived for `id`: if it was the last resume request, the healthy clock
    /// starts.
    fn resume_answered(&mut self, id: &Id) {
        if self.resuming.remove(id) && self.resuming.is_empty() {
            self.resumed_at = Some(Instant::now());
        }
    }

    /// Whether the connection that just ended was healthy: resumed, then up `healthy_after`.
    fn was_healthy(&mut self, healthy_after: std::time::Duration) -> bool {
        self.resumed_at
            .take()
            .is_some_and(|at| at.elapsed() >= healthy_after)
    }

    fn next_request_id(&self) -> Id {
        self.shared.next_request_id()
    }

    async fn send(&self, live: &Live, msg: &ClientMessage) -> Result<(), RequestError> {
        let frame = encode_frame(msg, self.config.max_frame_length)?;
        live.outbound
            .send(frame)
            .await
            .map_err(|_| RequestError::NotSent("connection lost".to_owned()))
    }

    /// Sends a request and records what its response is for, returning its id. On failure
    /// the pending entry is not kept and the error is returned (the caller owns the reply
    /// channel then).
    async fn send_request(
        &mut self,
        live: &Live,
        target: Target,
        call: Value,
        pending: Pending,
    ) -> Result<Id, (RequestError, Pending)> {
        let id = self.next_request_id();
        let msg = ClientMessage::Request(Request {
            id: id.clone(),
            target,
            call,
        });
        match self.send(live, &msg).await {
            Ok(()) => {
                self.pending.insert(id.clone(), pending);
                Ok(id)
            }
            Err(e) => Err((e, pending)),
        }
    }

    fn resolve(&self, spec: &TargetSpec) -> Result<Target, RequestError> {
        match spec {
            TargetSpec::Explicit(t) => Ok(t.clone()),
            TargetSpec::Session(session_id) => match &*self.attachment.borrow() {
                Some(a) if &a.session_id == session_id => Ok(Target::Session(a.clone())),
                _ => Err(RequestError::NotAttached(session_id.to_string())),
            },
        }
    }

    async fn handle_command(&mut self, cmd: Command, live: &Live) -> Result<(), Ended> {
        match cmd {
            Command::Request {
                id,
                target,
                call,
                reply,
            } => {
                // The caller gave up (dropped, cancelled, timed out) before we got here.
                if reply.is_closed() {
                    return Ok(());
                }
                let target = match self.resolve(&target) {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return Ok(());
                    }
                };
                let msg = ClientMessage::Request(Request {
                    id: id.clone(),
                    target: target.clone(),
                    call,
                });
                match self.send(live, &msg).await {
                    Ok(()) => {
                        self.shared.record_sent(id, SentRequest { reply, target });
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            Command::Attach { session_id, reply } => {
                let call = attach_call(&session_id);
                let target = Target::Server(self.server_id.clone());
                let pending = Pending::Attach {
                    session_id,
                    reply: Some(reply),
                };
                if let Err((e, Pending::Attach { reply: Some(r), .. })) =
                    self.send_request(live, target, call, pending).await
                {
                    let _ = r.send(Err(e));
                }
            }
            Command::Detach { reply } => {
                self.desired_session = None;
                let call =
                    ServiceCall::new(SESSION_MANAGEMENT_SERVICE, "detach", Vec::new()).into_value();
                let target = Target::Server(self.server_id.clone());
                if let Err((e, Pending::Detach { reply })) = self
                    .send_request(live, target, call, Pending::Detach { reply })
                    .await
                {
                    let _ = reply.send(Err(e));
                }
            }
            Command::Subscribe(cmd) => {
                let key = self.subs.insert(cmd);
                self.start_subscription(key, live).await;
            }
        }
        Ok(())
    }

    /// Sends (or re-sends) the subscribe request for `key` with a fresh subscription id,
    /// returning the request's id if it was sent.
    async fn start_subscription(&mut self, key: u64, live: &Live) -> Option<Id> {
        let (spec, service_id, mode) = self.subs.request_parts(key)?;
        let target = match self.resolve(&spec) {
            Ok(t) => t,
            Err(e) => {
                self.subs.fail(key, e);
                return None;
            }
        };
        let wire_id = self.shared.next_subscription_id();
        let call = ControlCall::subscribe(wire_id.as_str(), service_id, mode).to_value();
        self.subs.begin(key, wire_id, target.clone());
        match self
            .send_request(live, target, call, Pending::Subscribe { key })
            .await
        {
            Ok(id) => Some(id),
            Err((e, _)) => {
                self.subs.fail(key, e);
                None
            }
        }
    }

    async fn drain_deferred(&mut self, live: &Live) -> Result<(), Ended> {
        let items: Vec<Deferred> = std::mem::take(&mut *self.shared.lock_deferred());
        for item in items {
            match item {
                Deferred::Cancel(id) => {
                    if let Some(SentRequest { target, .. }) = self.shared.take_sent(&id) {
                        let msg = ClientMessage::Cancel(Cancel {
                            id: id.clone(),
                            target,
                        });
                        self.shared.abandon(id);
                        // A lost connection shows up on the reader; nothing else to do here.
                        let _ = self.send(live, &msg).await;
                    }
                }
                Deferred::Unsubscribe(key) => {
                    if let Some((wire_id, target)) = self.subs.remove(key) {
                        let call = ControlCall::unsubscribe(wire_id.as_str()).to_value();
                        let _ = self
                            .send_request(live, target, call, Pending::Internal)
                            .await;
                    }
                }
            }
        }
        Ok(())
    }

    async fn handle_message(&mut self, msg: ServerMessage, live: &Live) -> Result<(), Ended> {
        match msg {
            ServerMessage::Hello { .. } | ServerMessage::HelloError(_) => {
                Err(Ended::Lost("Unexpected handshake message".to_owned()))
            }
            ServerMessage::Attachment(attachment) => {
                if attachment
                    .as_ref()
                    .is_some_and(|a| a.server_id != self.server_id)
                {
                    return Err(Ended::Lost(
                        "Attachment update belongs to another server".to_owned(),
                    ));
                }
                if attachment.is_none() {
                    // The server ended our attachment (detach, session terminated or removed).
                    self.desired_session = None;
                }
                // Session subscriptions made through any other attachment are gone with it.
                let detaching = self
                    .pending
                    .values()
                    .any(|p| matches!(p, Pending::Detach { .. }));
                self.subs.attachment_changed(attachment.as_ref(), detaching);
                self.attachment.send_if_modified(|current| {
                    if *current == attachment {
                        false
                    } else {
                        *current = attachment;
                        true
                    }
                });
                Ok(())
            }
            ServerMessage::ServiceUpdate(update) => {
                // The frame codec hands updates over encoded; this form only arises if a
                // decoded message is fed in, so re-encode it (values from the wire always do).
                let limits = baton_protocol::limits::CborLimits::for_frame_length(
                    self.config.max_frame_length,
                );
                let bytes = baton_protocol::cbor::to_vec(&update.update, &limits)
                    .map_err(|e| Ended::Lost(format!("invalid service update: {e}")))?;
                let resync = self
                    .subs
                    .on_update(&update.subscription_id, Bytes::from(bytes));
                self.handle_resync(resync, live).await
            }
            ServerMessage::Response(response) => {
                let result = match response.outcome {
                    Outcome::Void => Ok(Reply::Void),
                    Outcome::Value(v) => Ok(Reply::Value(v)),
                    Outcome::Error(e) => Err(RequestError::Server(e)),
                };
                if let Some(pending) = self.pending.remove(&response.id) {
                    // After `complete`, which may send more resume requests (the session's
                    // subscriptions once the re-attach is answered).
                    let completed = self.complete(pending, result, live).await;
                    self.resume_answered(&response.id);
                    return completed;
                }
                match self.shared.take_answered(&response.id) {
                    Answered::Sent(sent) => {
                        let _ = sent.reply.send(result);
                        Ok(())
                    }
                    Answered::Abandoned => Ok(()),
                    Answered::Unknown => {
                        Err(Ended::Lost("Response has no matching request".to_owned()))
                    }
                }
            }
        }
    }

    async fn complete(
        &mut self,
        pending: Pending,
        result: Result<Reply, RequestError>,
        live: &Live,
    ) -> Result<(), Ended> {
        match pending {
            Pending::Detach { reply } => {
                let _ = reply.send(result);
            }
            Pending::Attach { session_id, reply } => {
                let outcome = match result {
                    // The attachment frame precedes the response, and names the session id
                    // the server resolved (the caller may have given a prefix or alias), so
                    // the attachment now is the one this attach made (or kept).
                    Ok(_) => self
                        .attachment
                        .borrow()
                        .clone()
                        .ok_or_else(|| RequestError::NotAttached(session_id.to_string())),
                    Err(e) => Err(e),
                };
                let resumed = reply.is_none();
                if let Ok(attached) = &outcome {
                    // Re-attach after a reconnect by the canonical id.
                    self.desired_session = Some(attached.session_id.clone());
                }
                if resumed {
                    match &outcome {
                        Ok(_) => {
                            for key in self.subs.keys_waiting_for_session() {
                                if let Some(id) = self.start_subscription(key, live).await {
                                    self.resuming.insert(id);
                                }
                            }
                        }
                        Err(e) => {
                            warn!(error = %e, "re-attach after reconnect failed");
                            self.desired_session = None;
                            self.subs.fail_waiting_for_session(e);
                        }
                    }
                }
                if let Some(reply) = reply {
                    let _ = reply.send(outcome);
                }
            }
            Pending::Subscribe { key } => {
                let resync = self.subs.on_response(key, result);
                return self.handle_resync(resync, live).await;
            }
            Pending::Internal => {}
        }
        Ok(())
    }

    /// Re-subscribes every subscription whose replica lost sync (gap, overflow).
    async fn handle_resync(
        &mut self,
        resync: Result<Vec<u64>, String>,
        live: &Live,
    ) -> Result<(), Ended> {
        let keys = resync.map_err(Ended::Lost)?;
        for key in keys {
            if let Some((old_id, target)) = self.subs.detach_wire(key) {
                let call = ControlCall::unsubscribe(old_id.as_str()).to_value();
                let _ = self
                    .send_request(live, target, call, Pending::Internal)
                    .await;
            }
            self.start_subscription(key, live).await;
        }
        Ok(())
    }

    /// Requests that were sent may have run: their outcome is unknown. (User requests were
    /// failed when the connection's wire was cleared.)
    fn fail_in_flight(&mut self, reason: &str) {
        self.fail_pending(reason);
        self.attachment.send_replace(None);
        self.subs.connection_lost(reason);
    }

    async fn reconnect(&mut self, reason: &str) -> Option<Connection> {
        let Some(policy) = self.config.reconnect.clone() else {
            self.finish(reason);
            return None;
        };
        // The backoff starts over only after a healthy connection; a server that drops every
        // connection right after the handshake keeps the delays growing.
        if self.was_healthy(policy.healthy_after) {
            self.attempt = 0;
        } else {
            debug!(
                attempt = self.attempt,
                "connection lost before it was healthy; backoff continues"
            );
        }
        let mut last = reason.to_owned();
        loop {
            let attempt = self.attempt;
            if policy.max_attempts.is_some_and(|max| attempt >= max) {
                self.finish(&format!(
                    "gave up reconnecting after {attempt} attempts: {last}"
                ));
                return None;
            }
            self.status.send_replace(Status::Reconnecting {
                attempt: attempt + 1,
                reason: last.clone(),
            });
            let delay = policy.delay(attempt, self.shared.jitter());
            self.attempt = attempt.saturating_add(1);
            tokio::select! {
                () = self.shared.shutdown.cancelled() => {
                    self.finish("client closed");
                    return None;
                }
                () = tokio::time::sleep(delay) => {}
            }
            // Reconnect only to the server we first reached.
            match connect::connect(&self.config, self.tls.as_ref(), Some(&self.server_id)).await {
                Ok(conn) => {
                    self.status.send_replace(Status::Connected);
                    return Some(conn);
                }
                Err(e) => {
                    debug!(error = %e, attempt = self.attempt, "reconnect attempt failed");
                    last = e.to_string();
                }
            }
        }
    }

    /// Every sent request whose answer will never come may have run: its outcome is unknown.
    fn fail_pending(&mut self, reason: &str) {
        for (_, pending) in self.pending.drain() {
            let err = RequestError::OutcomeUnknown(reason.to_owned());
            match pending {
                Pending::Detach { reply } => {
                    let _ = reply.send(Err(err));
                }
                Pending::Attach {
                    reply: Some(reply), ..
                } => {
                    let _ = reply.send(Err(err));
                }
                Pending::Attach { reply: None, .. }
                | Pending::Subscribe { .. }
                | Pending::Internal => {}
            }
        }
    }

    fn finish(&mut self, reason: &str) {
        self.fail_pending(reason);
        self.commands.close();
        while let Ok(cmd) = self.commands.try_recv() {
            reject_unsent(cmd, reason);
        }
        self.attachment.send_replace(None);
        self.subs.close(reason);
        self.status.send_replace(Status::Closed {
            reason: reason.to_owned(),
        });
        self.shared.shutdown.cancel();
    }
}

/// User requests written to a connection that ended may have run: their outcome is unknown.
fn fail_sent(sent: Vec<SentRequest>, reason: &str) {
    for request in sent {
        let _ = request
            .reply
            .send(Err(RequestError::OutcomeUnknown(reason.to_owned())));
    }
}

fn reject_unsent(cmd: Command, reason: &str) {
    let err = || RequestError::NotSent(reason.to_owned());
    match cmd {
        Command::Request { reply, .. } | Command::Detach { reply } => {
            let _ = reply.send(Err(err()));
        }
        Command::Attach { reply, .. } => {
            let _ = reply.send(Err(err()));
        }
        Command::Subscribe(cmd) => cmd.reject(err()),
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

/// Writes queued frames, coalescing whatever is already queued into one write.
async fn write_loop(mut writer: WriteHalf<BoxStream>, mut rx: mpsc::Receiver<Bytes>) {
    let mut buf = BytesMut::new();
    while let Some(frame) = rx.recv().await {
        buf.extend_from_slice(&frame);
        while buf.len() < WRITE_COALESCE_BYTES {
            match rx.try_recv() {
                Ok(frame) => buf.extend_from_slice(&frame),
                Err(_) => break,
            }
        }
        if writer.write_all(&buf).await.is_err() || writer.flush().await.is_err() {
            return;
        }
        buf.clear();
    }
    let _ = writer.shutdown().await;
}
