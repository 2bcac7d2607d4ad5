//! What the web listener asks of the host's browser identities: pairing a one-time code for a
//! cookie, and naming the live identity a cookie belongs to. The host's [`LinkStore`]
//! implements it; the listener knows nothing of how tokens are kept, and tests give it a
//! fake.

use crate::link::LinkStore;
pub use crate::link::{PairRefused, Paired, WebPeer};

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

impl WebGate for LinkStore {
    fn pair(&self, code: &str) -> Result<Paired, PairRefused> {
        LinkStore::pair(self, code)
    }

    fn authenticate(&self, cookie_value: &str) -> Option<WebPeer> {
        LinkStore::authenticate(self, cookie_value)
    }
}
