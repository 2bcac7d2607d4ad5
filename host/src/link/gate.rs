//! What the web listener asks of the store (the shape of its `WebGate`): trade a pairing
//! code for a cookie, and name the live browser identity a cookie is.

use std::fmt;

use tokio_util::sync::CancellationToken;

/// A pairing code traded for a browser token. Its `Debug` leaves the secret out.
#[derive(Clone)]
pub struct Paired {
    /// The cookie's value, `<token id>.<secret>`: the only time the secret exists outside
    /// the browser (the host keeps its SHA-256 digest).
    pub cookie_value: String,
    /// The browser identity it authenticates.
    pub peer: WebPeer,
}

impl fmt::Debug for Paired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Paired")
            .field("cookie_value", &"<secret>")
            .field("peer", &self.peer)
            .finish()
    }
}

/// A live browser identity, `web:<token_id>`.
#[derive(Debug, Clone)]
pub struct WebPeer {
    /// The token's short public id.
    pub token_id: String,
    /// What it may do, as listed: `viewer` or `operator` for a link to one session, else
    /// the minter's own rights when minted (`admin`, `operator`, `owner` or `viewer`).
    pub role: String,
    /// The session (full id) the link was for, if any.
    pub session: Option<String>,
    /// Cancelled when the token is revoked (`baton unlink`): close its connections.
    pub revoked: CancellationToken,
}

/// Why a pairing code was refused: one line for the page to show ("this link has expired",
/// "this link was already used", "unknown link", …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PairRefused(pub String);
