//! Browser identities and one-time links (`docs/SECURITY.md`, browser identities): what
//! `baton link` mints and the web listener trades for a cookie.
//!
//! ```text
//!  baton link ──baton.links mint──▶ LinkStore::mint ── code (128 bits, once, ≤ 24 h) ──▶ URL #pair=CODE
//!  browser ──POST /pair {code}──▶ LinkStore::pair ── token <id>.<secret> (256 bits) ──▶ cookie
//!  browser ──GET /ws (cookie)──▶ LinkStore::authenticate ─▶ WebPeer ─▶ PeerIdentity::Web (web:<id>)
//!  baton unlink ID ──▶ LinkStore::revoke ── file rewritten, WebPeer::revoked cancelled
//! ```
//!
//! * [`book`]: the pure core: links and tokens, time passed in.
//! * [`LinkStore`] (`store`): the core behind a lock, the clock, the file and the
//!   cancellations: the thin glue.
//! * `file`: the token file in the sessions directory (0600, written atomically, digests
//!   only).
//! * [`LinkError`] (`error`): why the store could not do what was asked.
//! * `secret`: OS-random secrets, SHA-256 digests, constant-time comparison.
//! * [`Minter`] (`minter`): who minted a link, recorded so its rights can be worked out
//!   again at each use.
//! * [`Paired`], [`WebPeer`], [`PairRefused`] (`gate`): what the web listener's gate gets.
//!
//! What a browser identity may do is the access policy's to say (`service::access`): at
//! most what its minter may do at the time of each call.

pub mod book;
mod error;
mod file;
mod gate;
mod minter;
mod secret;
mod store;

pub use book::{Listed, MAX_PENDING_LINKS, MAX_TOKENS, Revoked, Terms};
pub use error::LinkError;
pub use file::TOKENS_FILE;
pub use gate::{PairRefused, Paired, WebPeer};
pub use minter::Minter;
pub use store::{DEFAULT_LINK_TTL, LinkGrant, LinkStore, MAX_LINK_TTL, Minted};
