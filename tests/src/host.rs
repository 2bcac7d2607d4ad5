//! A scriptable host: seeded sessions, gates that hold calls until a test releases them,
//! counters and an event log for every boundary call, and a chord counter service
//! (`test.counter`) whose updates go through the server's publisher.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use baton_protocol::Value;
use baton_protocol::chord::{Op, diff};
use baton_server::chord::{
    ControlCall, InstanceSnapshot, MemberSnapshot, ProviderUpdate, RemoteServiceError, ServiceCall,
    ServiceMode, SubscriptionSnapshot,
};
use baton_server::{
    CallResult, Context, PeerIdentity, Presentation, Published, Publisher, ServerHost,
    ServiceError, ServiceScope, SessionHandle, SessionMetadata, SharedUpdate, Termination,
};
use tokio::sync::{Notify, Semaphore};

/// Everything the test host observed and can be told to do.
#[derive(Debug, Default)]
pub struct Inner {
    /// Boundary calls in order, e.g. `connect_services`, `open s1`, `call test.echo`.
    pub events: Vec<String>,
    /// Identities seen by `connect_services`.
    pub peers: Vec<Option<PeerIdentity>>,
    /// Session ids `resolve_session` knows.
    pub sessions: Vec<String>,
    /// Opens per canonical session id.
    pub opens: HashMap<String, usize>,
    /// Session `lease` calls per session.
    pub session_attaches: HashMap<String, usize>,
    /// Lease releases per session.
    pub lease_releases: HashMap<String, usize>,
    /// Handle closes per session.
    pub closes: HashMap<String, usize>,
    /// Server-services releases.
    pub services_released: usize,
    /// Calls that saw their context cancelled.
    pub cancelled_calls: usize,
    /// Of those, the ones cancelled by the client's own `cancel` (not a disconnect).
    pub explicit_cancels: usize,
    /// Every publish outcome of `test.counter`.
    pub published: Vec<Published>,
    /// Make the next opens fail (with a private error).
    pub fail_open: bool,
    /// Updates `subscribe` publishes after taking its snapshot, before returning it.
    pub race_updates: usize,
    /// Size of the `blob` string each bump writes.
    pub blob_len: usize,
    /// Identity policy for the handshake: `connect_services` of a peer whose
    /// [`identity_key`] is listed fails with that `(code, message)` (the client gets it as
    /// `hello_error`). An empty code makes it an internal error whose text is `message`.
    pub refuse_clients: HashMap<String, (String, String)>,
    /// Identity policy for sessions: `resolve_session` for a peer whose [`identity_key`] is
    /// listed fails with that `(code, message)` (the attach request gets it as its error).
    pub refuse_sessions: HashMap<String, (String, String)>,
    /// Host hooks that panic (a host bug): any of [`hooks`]' names.
    pub panic_in: HashSet<&'static str>,
    counter: Counter,
    terminators: HashMap<String, Arc<Notify>>,
}

#[derive(Debug, Default)]
struct Counter {
    value: i64,
    blob: String,
    /// Set by [`TestHost::set_counter_state`]: replaces the value/blob state wholesale.
    custom: Option<Value>,
    sequence: u64,
    subscribers: Vec<(Publisher, String)>,
}

impl Counter {
    fn value(&self) -> Value {
        if let Some(v) = &self.custom {
            return v.clone();
        }
        let mut m = baton_protocol::Map::new();
        m.insert("value", Value::try_from(self.value).expect("small"));
        m.insert("blob", Value::from(self.blob.as_str()));
        Value::Map(m)
    }

    fn snapshot(&self) -> SubscriptionSnapshot {
        SubscriptionSnapshot::new(
            "test.counter",
            ServiceMode::Singleton,
            vec![InstanceSnapshot::new(
                None,
                vec![
                    MemberSnapshot::method("bump"),
                    MemberSnapshot::state("state", self.sequence, self.value()),
                ],
            )],
        )
    }
}

/// Shared state of a [`TestHost`].
#[derive(Debug, Default)]
pub struct HostState {
    inner: Mutex<Inner>,
    /// Notified (`notify_waiters`) after every change to [`Inner`].
    pub changed: Notify,
    gates: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// The host; cheap to clone, every clone sees the same state.
#[derive(Debug, Clone, Default)]
pub struct TestHost {
    /// The state.
    pub state: Arc<HostState>,
}

/// Gate names the host waits on.
pub mod gates {
    /// Held by `connect_services` (the handshake).
    pub const CONNECT_SERVICES: &str = "connect_services";
    /// Held by `open_session`.
    pub const OPEN: &str = "open";
}

/// Host hooks that [`Inner::panic_in`] can make panic.
pub mod hooks {
    /// `ServerHost::connect_services` (the handshake).
    pub const CONNECT_SERVICES: &str = "connect_services";
    /// `ServerHost::open_session`.
    pub const OPEN: &str = "open_session";
    /// `SessionHandle::lease`.
    pub const SESSION_ATTACH: &str = "session lease";
    /// `release` of a session lease.
    pub const LEASE_RELEASE: &str = "lease release";
    /// `release` of a connection's server services.
    pub const SERVICES_RELEASE: &str = "services release";
    /// `SessionHandle::close`.
    pub const CLOSE: &str = "close";
}

impl TestHost {
    /// A host that knows `sessions`.
    pub fn new(sessions: &[&str]) -> Self {
        let host = Self::default();
        host.with(|i| i.sessions = sessions.iter().map(|s| (*s).to_owned()).collect());
        host
    }

    /// Mutates the state and wakes waiters.
    pub fn with<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        let r = f(&mut self.lock());
        self.state.changed.notify_waiters();
        r
    }

    /// Reads the state.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.state.inner.lock().expect("test host state")
    }

    fn event(&self, e: impl Into<String>) {
        let e = e.into();
        self.with(|i| i.events.push(e));
    }

    /// Waits until `f` holds (hang-guarded).
    pub async fn until(&self, what: &str, f: impl Fn(&Inner) -> bool) {
        crate::peer::until(what, &self.state.changed, || f(&self.lock())).await;
    }

    /// Installs a closed gate: calls waiting on `name` block until [`Self::open_gate`].
    pub fn close_gate(&self, name: &str) {
        self.state
            .gates
            .lock()
            .expect("gates")
            .insert(name.to_owned(), Arc::new(Semaphore::new(0)));
    }

    /// Lets every current and future waiter of `name` through.
    pub fn open_gate(&self, name: &str) {
        if let Some(g) = self.state.gates.lock().expect("gates").remove(name) {
            g.close();
        }
    }

    async fn pass(&self, name: &str) {
        let gate = self.state.gates.lock().expect("gates").get(name).cloned();
        if let Some(g) = gate {
            self.event(format!("waiting {name}"));
            let _ = g.acquire().await;
        }
    }

    /// Panics (outside the state lock) when the test asked `hook` to.
    fn maybe_panic(&self, hook: &'static str) {
        let panics = self.lock().panic_in.contains(hook);
        if panics {
            self.event(format!("panic {hook}"));
            panic!("test host panic in {hook}");
        }
    }

    /// Ends the hosted session `id` on its own (its `terminated` resolves).
    pub fn terminate(&self, id: &str) {
        let t = self.lock().terminators.get(id).cloned();
        if let Some(t) = t {
            t.notify_one();
        }
    }

    /// Bumps `test.counter` and publishes the update (shared) to every subscriber.
    /// Returns how many times the update was encoded.
    pub fn bump(&self) -> usize {
        let shared = self.with(|i| {
            let old = i.counter.value();
            i.counter.value += 1;
            let len = i.blob_len;
            let c = char::from(b'a' + u8::try_from(i.counter.value % 26).expect("small"));
            i.counter.blob = std::iter::repeat_n(c, len).collect();
            i.counter.sequence += 1;
            let ops: Vec<Op> = diff(&old, &i.counter.value());
            let update = SharedUpdate::new(ProviderUpdate::State {
                instance: None,
                member: "state".into(),
                sequence: i.counter.sequence,
                ops,
            });
            publish_all(i, &update);
            update
        });
        shared.encode_count()
    }

    /// Replaces `test.counter`'s state with `value` and publishes the diff (shared) to every
    /// subscriber, as a host streaming arbitrary state changes would.
    pub fn set_counter_state(&self, value: Value) {
        self.with(|i| {
            let old = i.counter.value();
            i.counter.custom = Some(value);
            let ops: Vec<Op> = diff(&old, &i.counter.value());
            if ops.is_empty() {
                return;
            }
            i.counter.sequence += 1;
            let update = SharedUpdate::new(ProviderUpdate::State {
                instance: None,
                member: "state".into(),
                sequence: i.counter.sequence,
                ops,
            });
            publish_all(i, &update);
        });
    }

    /// The counter's current value (what a converged replica must show).
    pub fn counter_value(&self) -> Value {
        self.lock().counter.value()
    }

    /// The counter's current sequence.
    pub fn counter_sequence(&self) -> u64 {
        self.lock().counter.sequence
    }

    /// How often `e` was logged.
    pub fn count(&self, e: &str) -> usize {
        self.lock().events.iter().filter(|x| *x == e).count()
    }

    async fn invoke(
        &self,
        scope: &str,
        presentation: Option<&Presentation>,
        call: ServiceCall,
        publisher: Publisher,
        ctx: Context,
    ) -> CallResult {
        self.event(format!("{scope}call {}.{}", call.service_id, call.member));
        let arg = |n: usize| {
            call.args
                .get(n)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match (call.service_id.as_str(), call.member.as_str(), presentation) {
            ("pi.session-management", "attach", Some(p)) => {
                p.attach_session(&arg(0), ctx).await?;
                Ok(Some(Value::Null))
            }
            ("pi.session-management", "detach", Some(p)) => {
                p.detach_session(ctx).await?;
                Ok(Some(Value::Null))
            }
            ("pi.session-management", "remove", Some(p)) => {
                p.prepare_session_removal(&arg(0), ctx).await?;
                Ok(None)
            }
            ("test", "echo", _) => Ok(Some(call.args.first().cloned().unwrap_or(Value::Null))),
            ("test", "void", _) => Ok(None),
            ("test", "fail", _) => Err(ServiceError::internal("private adapter detail")),
            // A host error carrying whatever detail the test chooses (paths, secrets).
            ("test", "fail_with", _) => Err(ServiceError::internal(arg(0))),
            // A host bug: the call panics with the test's message.
            ("test", "panic", _) => panic!("test host panic: {}", arg(0)),
            ("test", "error", _) => Err(ServiceError::new(&arg(0), arg(1))),
            ("test", "big", _) => {
                let n = call.args.first().and_then(Value::as_u64).unwrap_or(0);
                Ok(Some(Value::from(
                    "x".repeat(usize::try_from(n).unwrap_or(0)),
                )))
            }
            ("test", "wait", _) => {
                // args: [gate, "cancellable" | "observe" | "ignore"]
                let gate = arg(0);
                if arg(1) == "cancellable" {
                    tokio::select! {
                        () = self.pass(&gate) => Ok(Some(Value::from(gate.as_str()))),
                        () = ctx.cancelled() => {
                            let explicit = ctx.cancel_requested();
                            self.with(|i| {
                                i.cancelled_calls += 1;
                                i.explicit_cancels += usize::from(explicit);
                            });
                            Err(ServiceError::internal("aborted by the client"))
                        }
                    }
                } else if arg(1) == "observe" {
                    // Keeps going after cancellation, but reports that it saw it.
                    tokio::select! {
                        () = self.pass(&gate) => {}
                        () = ctx.cancelled() => {
                            self.event("cancel observed");
                            self.pass(&gate).await;
                        }
                    }
                    Ok(Some(Value::from(gate.as_str())))
                } else {
                    self.pass(&gate).await;
                    if ctx.is_cancelled() {
                        self.with(|i| i.cancelled_calls += 1);
                    }
                    Ok(Some(Value::from(gate.as_str())))
                }
            }
            ("$chord.service", _, _) => self.control(&call, publisher),
            (service, _, _) => Err(RemoteServiceError::unknown_service(service).into()),
        }
    }

    fn control(&self, call: &ServiceCall, publisher: Publisher) -> CallResult {
        match ControlCall::decode(call) {
            Some(ControlCall::Catalogue) => Ok(Some(Value::Array(vec![]))),
            Some(ControlCall::Subscribe {
                subscription_id,
                service_id,
                ..
            }) if service_id == "test.counter" => {
                let snapshot = self.with(|i| {
                    i.counter
                        .subscribers
                        .push((publisher.clone(), subscription_id.clone()));
                    let snapshot = i.counter.snapshot();
                    // A state update the snapshot already covers (the server must drop it).
                    let covered = SharedUpdate::new(ProviderUpdate::State {
                        instance: None,
                        member: "state".into(),
                        sequence: i.counter.sequence,
                        ops: vec![Op::Replace(i.counter.value())],
                    });
                    if i.counter.sequence > 0 {
                        let r = publisher
                            .publish_shared(&subscription_id, &covered, || i.counter.snapshot());
                        i.published.push(r);
                    }
                    snapshot
                });
                let race = self.lock().race_updates;
                for _ in 0..race {
                    self.bump();
                }
                Ok(Some(snapshot.to_value()))
            }
            Some(ControlCall::Subscribe { service_id, .. }) => {
                Err(RemoteServiceError::unknown_service(&service_id).into())
            }
            Some(ControlCall::Unsubscribe { subscription_id }) => {
                self.with(|i| i.counter.subscribers.retain(|(_, s)| *s != subscription_id));
                Ok(None)
            }
            None => Err(RemoteServiceError::not_allowlisted(&call.service_id).into()),
        }
    }
}

fn publish_all(i: &mut Inner, update: &SharedUpdate) {
    let mut keep = Vec::new();
    let subscribers = std::mem::take(&mut i.counter.subscribers);
    for (publisher, sid) in subscribers {
        let r = publisher.publish_shared(&sid, update, || i.counter.snapshot());
        i.published.push(r);
        if r != Published::Closed {
            keep.push((publisher, sid));
        }
    }
    i.counter.subscribers = keep;
}

/// The key the host's identity policies use: `cn:<common name>` for a verified TLS client
/// certificate, `tls:anonymous` for TLS without one, `uid:<uid>` for a Unix peer, `tcp` for
/// plain TCP.
pub fn identity_key(identity: &PeerIdentity) -> String {
    match identity {
        PeerIdentity::Unix { uid, .. } => format!("uid:{uid}"),
        PeerIdentity::Tls {
            client_certificate, ..
        } => format!(
            "cn:{}",
            client_certificate.common_name().unwrap_or_default()
        ),
        PeerIdentity::AnonymousTls { .. } => "tls:anonymous".to_owned(),
        _ => "tcp".to_owned(),
    }
}

/// What `resolve_session` returns.
#[derive(Debug, Clone)]
pub struct Metadata {
    id: String,
}

impl SessionMetadata for Metadata {
    fn session_id(&self) -> &str {
        &self.id
    }
}

/// One connection's server-scope services.
#[derive(Debug)]
pub struct TestServices {
    host: TestHost,
    presentation: Presentation,
}

impl ServiceScope for TestServices {
    fn invoke_service(
        &self,
        call: ServiceCall,
        publish: Publisher,
        ctx: Context,
    ) -> impl Future<Output = CallResult> + Send {
        self.host
            .invoke("", Some(&self.presentation), call, publish, ctx)
    }

    async fn release(&self, _ctx: Context) -> Result<(), ServiceError> {
        self.host.maybe_panic(hooks::SERVICES_RELEASE);
        self.host.with(|i| i.services_released += 1);
        Ok(())
    }
}

/// A hosted session.
#[derive(Debug)]
pub struct TestSession {
    host: TestHost,
    id: String,
    terminated: Arc<Notify>,
}

/// A connection's lease on a [`TestSession`].
#[derive(Debug)]
pub struct TestLease {
    host: TestHost,
    id: String,
}

impl ServiceScope for TestLease {
    fn invoke_service(
        &self,
        call: ServiceCall,
        publish: Publisher,
        ctx: Context,
    ) -> impl Future<Output = CallResult> + Send {
        self.host.invoke("session ", None, call, publish, ctx)
    }

    async fn release(&self, _ctx: Context) -> Result<(), ServiceError> {
        let id = self.id.clone();
        self.host
            .with(|i| *i.lease_releases.entry(id).or_default() += 1);
        self.host.maybe_panic(hooks::LEASE_RELEASE);
        Ok(())
    }
}

impl SessionHandle for TestSession {
    type Lease = TestLease;

    async fn lease(&self, _ctx: Context) -> Result<TestLease, ServiceError> {
        self.host.maybe_panic(hooks::SESSION_ATTACH);
        let id = self.id.clone();
        self.host
            .with(|i| *i.session_attaches.entry(id).or_default() += 1);
        Ok(TestLease {
            host: self.host.clone(),
            id: self.id.clone(),
        })
    }

    async fn terminated(&self) -> Termination {
        self.terminated.notified().await;
        Termination::Failed("worker exited".into())
    }

    async fn close(&self, _ctx: Context) -> Result<(), ServiceError> {
        let id = self.id.clone();
        self.host.with(|i| *i.closes.entry(id).or_default() += 1);
        self.host.maybe_panic(hooks::CLOSE);
        Ok(())
    }
}

impl ServerHost for TestHost {
    type Services = TestServices;
    type Metadata = Metadata;
    type Session = TestSession;

    async fn connect_services(
        &self,
        presentation: Presentation,
        ctx: Context,
    ) -> Result<TestServices, ServiceError> {
        let peer = ctx.identity().cloned();
        let refused = self.with(|i| {
            let key = peer.as_ref().map(identity_key).unwrap_or_default();
            i.peers.push(peer);
            i.events.push("connect_services".into());
            i.refuse_clients.get(&key).cloned()
        });
        if let Some((code, message)) = refused {
            self.event("refused client");
            if code.is_empty() {
                return Err(ServiceError::internal(message));
            }
            return Err(ServiceError::new(&code, message));
        }
        self.pass(gates::CONNECT_SERVICES).await;
        self.maybe_panic(hooks::CONNECT_SERVICES);
        Ok(TestServices {
            host: self.clone(),
            presentation,
        })
    }

    async fn resolve_session(
        &self,
        session_id: &str,
        ctx: Context,
    ) -> Result<Metadata, ServiceError> {
        let key = ctx.identity().map(identity_key).unwrap_or_default();
        let refused = self.lock().refuse_sessions.get(&key).cloned();
        if let Some((code, message)) = refused {
            self.event(format!("refused session {session_id} to {key}"));
            return Err(ServiceError::new(&code, message));
        }
        let sessions = self.lock().sessions.clone();
        if sessions.iter().any(|s| s == session_id) {
            return Ok(Metadata {
                id: session_id.to_owned(),
            });
        }
        let matches: Vec<_> = sessions
            .iter()
            .filter(|s| s.starts_with(session_id))
            .collect();
        match matches.as_slice() {
            [one] => Ok(Metadata { id: (*one).clone() }),
            [] => Err(ServiceError::session_not_found()),
            _ => Err(ServiceError::session_ambiguous()),
        }
    }

    async fn open_session(
        &self,
        metadata: Metadata,
        _ctx: Context,
    ) -> Result<TestSession, ServiceError> {
        let id = metadata.id;
        self.with(|i| {
            *i.opens.entry(id.clone()).or_default() += 1;
            i.events.push(format!("open {id}"));
        });
        self.pass(gates::OPEN).await;
        self.maybe_panic(hooks::OPEN);
        if self.lock().fail_open {
            return Err(ServiceError::internal("private open failure"));
        }
        let terminated = Arc::new(Notify::new());
        self.with(|i| {
            i.terminators.insert(id.clone(), Arc::clone(&terminated));
        });
        Ok(TestSession {
            host: self.clone(),
            id,
            terminated,
        })
    }
}
