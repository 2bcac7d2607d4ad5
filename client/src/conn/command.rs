//! What the handles ask of the connection core.

use std::time::Instant;

use baton_protocol::chord::ServiceMode;
use baton_protocol::{Id, Target, Value};

/// Where a request goes, resolved by the core when it is sent.
#[derive(Debug, Clone)]
pub(crate) enum TargetSpec {
    /// Exactly this target.
    Explicit(Target),
    /// The current attachment, which must be to this session.
    Session(Id),
}

/// What a handle asks of the connection. `W` is how a caller waits for its answer.
#[derive(Debug)]
pub(crate) enum Command<W> {
    /// A caller's request; it counts against the in-flight limit.
    Request(UserRequest<W>),
    /// Attach to `session_id`; answer with [`Answer::Attached`](super::Answer::Attached).
    Attach { session_id: Id, waiter: W },
    /// Detach; answer with [`Answer::Reply`](super::Answer::Reply).
    Detach { waiter: W },
    /// Start a subscription; what becomes of it comes out as
    /// [`Event::Subscription`](super::Event::Subscription).
    Subscribe(Subscribe),
    /// The caller gave up on request `number`: forget it, and `cancel` it if it was sent.
    Cancel(u64),
    /// The subscription with this key was dropped.
    Unsubscribe(u64),
}

/// A caller's request: send `call` to `target` and answer `waiter` with
/// [`Answer::Reply`](super::Answer::Reply). A `deadline` fails it with
/// [`RequestError::TimedOut`](crate::RequestError::TimedOut), wherever it is (waiting for a
/// slot, held for a transport, or sent: then it is cancelled too).
#[derive(Debug)]
pub(crate) struct UserRequest<W> {
    /// Its number, from the handles' [`RequestNumbers`](super::RequestNumbers).
    pub(crate) number: u64,
    pub(crate) target: TargetSpec,
    pub(crate) call: Value,
    pub(crate) deadline: Option<Instant>,
    pub(crate) waiter: W,
}

/// A new subscription: its handle's key, and what to subscribe to where.
#[derive(Debug)]
pub(crate) struct Subscribe {
    /// The handle's key, unique per client; every output about it carries it.
    pub(crate) key: u64,
    pub(crate) target: TargetSpec,
    pub(crate) service_id: String,
    pub(crate) mode: ServiceMode,
}
