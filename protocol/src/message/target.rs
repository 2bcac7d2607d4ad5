//! Routing targets: a server, or an attached session on it.

use crate::ids::{Id, ServerId};
use crate::message::parse::{Fields, Invalid};
use crate::value::Value;

/// An attached session route: `{serverId, sessionId, attachmentId}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionTarget {
    /// The logical server.
    pub server_id: ServerId,
    /// The session, as the client named it when attaching.
    pub session_id: Id,
    /// The attachment the server granted this connection.
    pub attachment_id: Id,
}

/// Where a request or cancel is addressed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// `{serverId}`: server-scope services.
    Server(ServerId),
    /// `{serverId, sessionId, attachmentId}`: services of an attached session.
    Session(SessionTarget),
}

impl Target {
    /// The server this target names.
    pub fn server_id(&self) -> &ServerId {
        match self {
            Self::Server(id) => id,
            Self::Session(s) => &s.server_id,
        }
    }

    /// The session route, for session targets.
    pub fn session(&self) -> Option<&SessionTarget> {
        match self {
            Self::Server(_) => None,
            Self::Session(s) => Some(s),
        }
    }

    pub(crate) fn parse(value: Value) -> Result<Self, Invalid> {
        let mut f = Fields::new(value, &["serverId", "sessionId", "attachmentId"])?;
        let server_id = f.server_id("serverId")?;
        match (f.opt_id("sessionId")?, f.opt_id("attachmentId")?) {
            (None, None) => Ok(Self::Server(server_id)),
            (Some(session_id), Some(attachment_id)) => Ok(Self::Session(SessionTarget {
                server_id,
                session_id,
                attachment_id,
            })),
            _ => Err(Invalid),
        }
    }
}

impl SessionTarget {
    pub(crate) fn parse(value: Value) -> Result<Self, Invalid> {
        match Target::parse(value)? {
            Target::Session(s) => Ok(s),
            Target::Server(_) => Err(Invalid),
        }
    }
}

impl From<SessionTarget> for Target {
    fn from(s: SessionTarget) -> Self {
        Self::Session(s)
    }
}
