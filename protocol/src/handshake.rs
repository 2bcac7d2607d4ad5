//! Sans-IO handshake state machines for both ends. Time is always an argument.

use std::time::{Duration, Instant};

use crate::error_code::ErrorCode;
use crate::ids::ServerId;
use crate::message::{ClientMessage, ServerMessage, WireError};
use crate::version::{PROTOCOL_VERSION, is_supported_protocol_version};

/// Default time a server waits for the client hello: 5 s.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the client side of a handshake failed. `Display` is upstream's wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The server answered with `hello_error`.
    #[error("{}", .0.message)]
    Server(WireError),
    /// The first server message was neither `hello` nor `hello_error`.
    #[error("Expected server hello as first message")]
    ExpectedHello,
    /// The server is not the one we meant to reach.
    #[error("Connected server {got:?} does not match {expected:?}")]
    ServerMismatch {
        /// The id the server presented.
        got: String,
        /// The id we required.
        expected: String,
    },
    /// Server bytes arrived before our hello went out.
    #[error("Received server data before the client hello was sent")]
    DataBeforeHello,
    /// `hello`/`hello_error` after the handshake completed.
    #[error("Unexpected handshake message")]
    UnexpectedHandshakeMessage,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ClientState {
    Start,
    HelloSent,
    Connected(ServerId),
    Failed(HandshakeError),
}

/// The client's handshake: send hello, then accept exactly one server hello.
///
/// Contract: call [`start`](Self::start) and send the message it returns before feeding any
/// server message to [`handle_message`](Self::handle_message). After connecting, pass every
/// server message through `handle_message` too: a later hello is a fatal error.
#[derive(Debug, Clone)]
pub struct ClientHandshake {
    expected: Option<ServerId>,
    state: ClientState,
}

impl ClientHandshake {
    /// A handshake that optionally insists on a server identity.
    pub fn new(expected: Option<ServerId>) -> Self {
        Self {
            expected,
            state: ClientState::Start,
        }
    }

    /// Marks the hello as sent and returns it.
    #[must_use]
    pub fn start(&mut self) -> ClientMessage {
        if self.state == ClientState::Start {
            self.state = ClientState::HelloSent;
        }
        ClientMessage::hello()
    }

    /// The server identity once connected.
    pub fn server_id(&self) -> Option<&ServerId> {
        match &self.state {
            ClientState::Connected(id) => Some(id),
            _ => None,
        }
    }

    /// Feeds one server message.
    ///
    /// Returns `Ok(Some(id))` when this message completed the handshake, `Ok(None)` for an
    /// ordinary post-handshake message the caller should process.
    ///
    /// # Errors
    /// Any [`HandshakeError`]; the machine then stays failed with that error.
    pub fn handle_message(
        &mut self,
        msg: &ServerMessage,
    ) -> Result<Option<ServerId>, HandshakeError> {
        let result = match (&self.state, msg) {
            (ClientState::Failed(e), _) => return Err(e.clone()),
            (ClientState::Start, _) => Err(HandshakeError::DataBeforeHello),
            (ClientState::HelloSent, ServerMessage::Hello { server_id }) => match &self.expected {
                Some(expected) if expected != server_id => Err(HandshakeError::ServerMismatch {
                    got: server_id.to_string(),
                    expected: expected.to_string(),
                }),
                _ => {
                    self.state = ClientState::Connected(server_id.clone());
                    return Ok(Some(server_id.clone()));
                }
            },
            (ClientState::HelloSent, ServerMessage::HelloError(e)) => {
                Err(HandshakeError::Server(e.clone()))
            }
            (ClientState::HelloSent, _) => Err(HandshakeError::ExpectedHello),
            (
                ClientState::Connected(_),
                ServerMessage::Hello { .. } | ServerMessage::HelloError(_),
            ) => Err(HandshakeError::UnexpectedHandshakeMessage),
            (ClientState::Connected(_), _) => return Ok(None),
        };
        if let Err(e) = &result {
            self.state = ClientState::Failed(e.clone());
        }
        result
    }
}

/// What the server should do with a client message during or after the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerStep {
    /// A valid hello: set up the connection, then call
    /// [`ServerHandshake::complete`] and send the server hello.
    Accept,
    /// A post-handshake message (request or cancel) to process now.
    Process,
    /// A request or cancel that arrived while the handshake is still completing: queue it
    /// and process it, in order, once complete.
    Queue,
    /// Fatal: send this as `hello_error` (the final frame) and close.
    Fail(WireError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerState {
    AwaitingHello { deadline: Instant },
    Handshaking { deadline: Instant },
    Ready,
    Closed,
}

/// The server's handshake: hello first, within a deadline, at version 8, exactly once.
///
/// Contract: feed every decoded client message to [`handle_message`](Self::handle_message)
/// and act on the returned [`ServerStep`]; arm a timer for [`deadline`](Self::deadline) and
/// call [`handle_timeout`](Self::handle_timeout) when it fires.
#[derive(Debug, Clone)]
pub struct ServerHandshake {
    state: ServerState,
}

impl ServerHandshake {
    /// Starts waiting for a hello at `now`, for at most `timeout`.
    pub fn new(now: Instant, timeout: Duration) -> Self {
        Self {
            state: ServerState::AwaitingHello {
                deadline: now + timeout,
            },
        }
    }

    /// When the handshake times out, if it is still pending.
    pub fn deadline(&self) -> Option<Instant> {
        match self.state {
            ServerState::AwaitingHello { deadline } | ServerState::Handshaking { deadline } => {
                Some(deadline)
            }
            ServerState::Ready | ServerState::Closed => None,
        }
    }

    /// True once the server hello has been sent.
    pub fn is_ready(&self) -> bool {
        self.state == ServerState::Ready
    }

    /// Feeds one decoded client message.
    #[must_use]
    pub fn handle_message(&mut self, msg: &ClientMessage) -> ServerStep {
        match (self.state, msg) {
            (ServerState::Closed, _) => ServerStep::Fail(WireError::from_code(
                ErrorCode::InvalidRequest,
                "Connection is closed",
            )),
            (ServerState::AwaitingHello { deadline }, ClientMessage::Hello { version }) => {
                if is_supported_protocol_version(version.get()) {
                    self.state = ServerState::Handshaking { deadline };
                    ServerStep::Accept
                } else {
                    self.state = ServerState::Closed;
                    ServerStep::Fail(WireError::from_code(
                        ErrorCode::Version,
                        format!(
                            "Unsupported protocol version {version}; expected {PROTOCOL_VERSION}"
                        ),
                    ))
                }
            }
            (ServerState::AwaitingHello { .. }, _) => {
                self.state = ServerState::Closed;
                ServerStep::Fail(WireError::from_code(
                    ErrorCode::InvalidRequest,
                    "The first client message must be hello",
                ))
            }
            (ServerState::Handshaking { .. } | ServerState::Ready, ClientMessage::Hello { .. }) => {
                self.state = ServerState::Closed;
                ServerStep::Fail(WireError::from_code(
                    ErrorCode::InvalidRequest,
                    "hello may only be sent as the first message",
                ))
            }
            (ServerState::Handshaking { .. }, _) => ServerStep::Queue,
            (ServerState::Ready, _) => ServerStep::Process,
        }
    }

    /// Marks the server hello as sent: the deadline no longer applies.
    pub fn complete(&mut self) {
        if matches!(self.state, ServerState::Handshaking { .. }) {
            self.state = ServerState::Ready;
        }
    }

    /// Checks the deadline. Returns the `hello_error` to send when it has passed.
    #[must_use]
    pub fn handle_timeout(&mut self, now: Instant) -> Option<WireError> {
        let deadline = self.deadline()?;
        if now < deadline {
            return None;
        }
        self.state = ServerState::Closed;
        Some(WireError::from_code(
            ErrorCode::InvalidRequest,
            "Handshake timeout",
        ))
    }

    /// Marks the connection closed (after any fatal error).
    pub fn close(&mut self) {
        self.state = ServerState::Closed;
    }
}
