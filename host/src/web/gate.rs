//! What the web listener asks of the host's browser identities: pairing a one-time code for a
//! cookie, and naming the live identity a cookie belongs to. The host's link store implements
//! it; the listener knows nothing of how tokens are kept.

use std::fmt;

use tokio_util::sync::CancellationToken;

/// The browser identities the web listener consults.
pub trait WebGate: Send + Sync + 'static {
    /// Trades a one-time pairing code (from the link's fragment) for a browser token.
    ///
    /// # Errors
    /// [`PairRefused`] with one line for the page: the link expired, was used, is unknown.
    fn pair(&self, code: &str) -> Result<Paired, PairRefused>;
    /// The live browser identity a cookie value names (marks it seen), or None.
    fn authenticate(&self, cookie_value: &str) -> Option<WebPeer>;
}

/// A code traded for a token: the cookie to set, and who the browser now is.
#[derive(Debug, Clone)]
pub struct Paired {
    /// The `baton_web` cookie's value (the token's secret; never logged).
    pub cookie_value: String,
    /// The identity the cookie names.
    pub peer: WebPeer,
}

/// A live browser identity, `web:<token_id>`.
#[derive(Clone)]
pub struct WebPeer {
    /// The token's public id.
    pub token_id: String,
    /// `viewer`, `operator`, `admin` or `owner`: the rights of whoever minted the link.
    pub role: String,
    /// The session the link was for (full id), if any.
    pub session: Option<String>,
    /// Cancelled when the token is revoked (`baton unlink`): the listener then closes every
    /// live socket of the token at once.
    pub revoked: CancellationToken,
}

impl fmt::Debug for WebPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebPeer")
            .field("token_id", &self.token_id)
            .field("role", &self.role)
            .field("session", &self.session)
            .field("revoked", &self.revoked.is_cancelled())
            .finish()
    }
}

/// Why a code was not traded: one line for the page ("this link has expired", "this link was
/// already used", "unknown link").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PairRefused(pub String);
