//! The store the host and its web listener share: the [`Book`] behind a lock, the token
//! file written after every change to the tokens, the clock, and one
//! [`CancellationToken`] per token, which revoking it cancels.
//!
//! Calls are short and synchronous (the file is small; it is written under the lock so
//! two changes never race to the rename), and never held across an `.await`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use baton_server::PeerIdentity;
use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

use super::book::{Book, Listed, Revoked, Terms, Token};
use super::error::LinkError;
use super::file;
use super::gate::{PairRefused, Paired, WebPeer};
use super::secret::{CODE_BYTES, ID_BYTES, SECRET_BYTES, digest, random_hex};
use crate::clock::Clock;

/// How long a link stays usable unless the minter says otherwise (`--ttl`).
pub const DEFAULT_LINK_TTL: Duration = Duration::from_secs(5 * 60);
/// The longest a link may stay usable.
pub const MAX_LINK_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// How often a token's "last seen" is written to the file at most (it is kept exactly in
/// memory; a restart may show it up to this much older).
const LAST_SEEN_SAVE: Duration = Duration::from_secs(60);
/// Longest cookie value looked at (`<id>.<secret>` is 73 characters).
const MAX_COOKIE: usize = 256;

/// A link just minted: its code exists only here and in the URL made of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Minted {
    /// The token id the link becomes when used.
    pub token_id: String,
    /// The one-time code (hex; 128 bits).
    pub code: String,
    /// When it stops being usable (Unix ms).
    pub expires_ms: u64,
}

/// What a live browser token gives, for working out its rights under the policy in force.
#[derive(Debug, Clone)]
pub struct LinkGrant {
    /// The minter (`None`: an in-process call).
    pub minter: Option<PeerIdentity>,
    /// The one session it is for, if any.
    pub session: Option<String>,
    /// Whether it may only view.
    pub read_only: bool,
}

#[derive(Debug, Default)]
struct Inner {
    book: Book,
    /// The cancellation of each token handed out so far.
    revoked: HashMap<String, CancellationToken>,
    /// A "last seen" changed since the file was written.
    seen_unsaved: bool,
    /// When the file was last written (Unix ms).
    saved_ms: u64,
}

impl Inner {
    fn peer(&mut self, token: &Token) -> WebPeer {
        WebPeer {
            token_id: token.id.clone(),
            role: token.terms.role.clone(),
            session: token.terms.session.clone(),
            revoked: self.revoked.entry(token.id.clone()).or_default().clone(),
        }
    }
}

/// Browser identities and one-time links (module docs).
#[derive(Debug)]
pub struct LinkStore {
    path: PathBuf,
    clock: Arc<dyn Clock>,
    inner: Mutex<Inner>,
    base_urls: RwLock<Vec<String>>,
}

impl LinkStore {
    /// The store whose token file is in `dir` (the sessions directory), loading the tokens
    /// recorded there.
    ///
    /// # Errors
    /// The file exists and cannot be used ([`LinkError`]).
    pub fn open(dir: &Path, clock: Arc<dyn Clock>) -> Result<Self, LinkError> {
        let path = file::path_in(dir);
        let tokens = file::load(&path)?;
        let saved_ms = clock.now_ms();
        Ok(Self {
            path,
            clock,
            inner: Mutex::new(Inner {
                book: Book::with_tokens(tokens),
                saved_ms,
                ..Inner::default()
            }),
            base_urls: RwLock::new(Vec::new()),
        })
    }

    /// The token file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The web listener's public base URLs (`http://127.0.0.1:7880`, `https://NAME:PORT`),
    /// first preferred; links are made from the first. Empty: no web listener.
    pub fn set_web_base_urls(&self, urls: Vec<String>) {
        *self.base_urls.write() = urls;
    }

    /// The base URLs set by [`set_web_base_urls`](Self::set_web_base_urls).
    pub fn web_base_urls(&self) -> Vec<String> {
        self.base_urls.read().clone()
    }

    /// Mints a link giving `terms`, usable once within `ttl` (at most [`MAX_LINK_TTL`]).
    ///
    /// # Errors
    /// Too many unused links, or the random source failed.
    pub fn mint(&self, terms: Terms, ttl: Duration) -> Result<Minted, LinkError> {
        let ttl_ms = u64::try_from(ttl.min(MAX_LINK_TTL).as_millis()).unwrap_or(u64::MAX);
        let code = random_hex(CODE_BYTES).map_err(LinkError::Random)?;
        let mut inner = self.inner.lock();
        let mut id = random_hex(ID_BYTES).map_err(LinkError::Random)?;
        while inner.book.is_taken(&id) {
            id = random_hex(ID_BYTES).map_err(LinkError::Random)?;
        }
        let expires_ms = inner
            .book
            .mint(
                self.clock.now_ms(),
                id.clone(),
                digest(&code),
                terms,
                ttl_ms,
            )
            .map_err(LinkError::Refused)?;
        Ok(Minted {
            token_id: id,
            code,
            expires_ms,
        })
    }

    /// Trades a one-time code (from a link's fragment) for a browser token, recorded in the
    /// file before it is handed out.
    ///
    /// # Errors
    /// [`PairRefused`] with one line: unknown, expired or already used, or the token could
    /// not be made or recorded.
    pub fn pair(&self, code: &str) -> Result<Paired, PairRefused> {
        if code.is_empty() || code.len() > MAX_COOKIE {
            return Err(PairRefused("unknown link".to_owned()));
        }
        let secret = random_hex(SECRET_BYTES).map_err(PairRefused)?;
        let mut inner = self.inner.lock();
        let now = self.clock.now_ms();
        let token = inner
            .book
            .pair(now, &digest(code), digest(&secret))?
            .clone();
        if let Err(error) = file::save(&self.path, inner.book.tokens()) {
            tracing::error!(%error, "cannot record a browser token; the link stays unused");
            inner.book.unpair(&token.id);
            return Err(PairRefused(
                "the host could not record this browser; try the link again".to_owned(),
            ));
        }
        inner.saved_ms = now;
        inner.seen_unsaved = false;
        tracing::info!(token_id = %token.id, role = %token.terms.role, "browser paired");
        Ok(Paired {
            cookie_value: format!("{}.{secret}", token.id),
            peer: inner.peer(&token),
        })
    }

    /// The live browser identity a cookie value names (and marks it seen), or `None`.
    pub fn authenticate(&self, cookie_value: &str) -> Option<WebPeer> {
        if cookie_value.len() > MAX_COOKIE {
            return None;
        }
        let (id, secret) = cookie_value.split_once('.')?;
        let secret = digest(secret);
        let mut inner = self.inner.lock();
        let now = self.clock.now_ms();
        let token = inner.book.authenticate(now, id, &secret)?.clone();
        inner.seen_unsaved = true;
        let due = u64::try_from(LAST_SEEN_SAVE.as_millis()).unwrap_or(u64::MAX);
        if now.saturating_sub(inner.saved_ms) >= due {
            match file::save(&self.path, inner.book.tokens()) {
                Ok(()) => {
                    inner.saved_ms = now;
                    inner.seen_unsaved = false;
                }
                Err(error) => tracing::warn!(%error, "cannot record when browsers were last seen"),
            }
        }
        Some(inner.peer(&token))
    }

    /// Revokes the token or unused link `id`: gone from the file, its cancellation fired
    /// (its connections close), every later use refused. `None`: no such id.
    ///
    /// # Errors
    /// The file could not be written. The token is revoked in this process anyway, and its
    /// cancellation fired; a restart would bring it back.
    pub fn revoke(&self, id: &str) -> Result<Option<Revoked>, LinkError> {
        let mut inner = self.inner.lock();
        let Some(what) = inner.book.revoke(id) else {
            return Ok(None);
        };
        if let Some(cancel) = inner.revoked.remove(id) {
            cancel.cancel();
        }
        if what == Revoked::Token {
            file::save(&self.path, inner.book.tokens())?;
            inner.saved_ms = self.clock.now_ms();
            inner.seen_unsaved = false;
            tracing::info!(token_id = %id, "browser token revoked");
        }
        Ok(Some(what))
    }

    /// The live tokens and usable links.
    pub fn list(&self) -> Vec<Listed> {
        self.inner.lock().book.list(self.clock.now_ms())
    }

    /// What the live token `id` gives, or `None` (unknown or revoked).
    pub fn grant(&self, id: &str) -> Option<LinkGrant> {
        let inner = self.inner.lock();
        let token = inner.book.token(id)?;
        Some(LinkGrant {
            minter: token.minter.clone(),
            session: token.terms.session.clone(),
            read_only: token.terms.read_only,
        })
    }

    /// Writes a "last seen" not yet in the file (at shutdown).
    ///
    /// # Errors
    /// The file could not be written.
    pub fn flush(&self) -> Result<(), LinkError> {
        let mut inner = self.inner.lock();
        if inner.seen_unsaved {
            file::save(&self.path, inner.book.tokens())?;
            inner.seen_unsaved = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::clock::ManualClock;
    use crate::link::Minter;

    fn terms(session: Option<&str>) -> Terms {
        Terms {
            role: "operator".into(),
            session: session.map(str::to_owned),
            read_only: false,
            minter: Minter::Local,
            minter_key: "local".into(),
        }
    }

    fn store(dir: &Path, clock: &Arc<ManualClock>) -> LinkStore {
        LinkStore::open(dir, Arc::clone(clock) as Arc<dyn Clock>).unwrap()
    }

    #[test]
    fn a_link_pairs_once_and_the_file_holds_no_secret() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(1_000, 0));
        let s = store(dir.path(), &clock);
        let minted = s.mint(terms(Some("s1")), DEFAULT_LINK_TTL).unwrap();
        assert_eq!(minted.code.len(), 32, "128 bits");
        assert_eq!(minted.expires_ms, 1_000 + 300_000);
        let paired = s.pair(&minted.code).unwrap();
        assert_eq!(paired.peer.token_id, minted.token_id);
        assert_eq!(paired.peer.session.as_deref(), Some("s1"));
        let (id, secret) = paired.cookie_value.split_once('.').unwrap();
        assert_eq!((id, secret.len()), (minted.token_id.as_str(), 64));
        assert_eq!(
            s.pair(&minted.code).unwrap_err().0,
            "this link was already used"
        );
        let text = std::fs::read_to_string(s.path()).unwrap();
        assert!(
            !text.contains(secret) && !text.contains(&minted.code),
            "{text}"
        );
        assert!(text.contains(id));
        let mode = std::fs::metadata(s.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(s.authenticate(&paired.cookie_value).is_some());
        assert!(
            s.authenticate(&format!("{id}.{}", "0".repeat(64)))
                .is_none()
        );
        assert!(s.authenticate(id).is_none());
    }

    #[test]
    fn an_expired_code_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(1_000, 0));
        let s = store(dir.path(), &clock);
        let minted = s.mint(terms(None), Duration::from_secs(60)).unwrap();
        clock.set(1_000 + 60_000);
        assert_eq!(s.pair(&minted.code).unwrap_err().0, "this link has expired");
        assert!(s.list().is_empty());
        // The cap: a day at most, whatever is asked.
        let long = s.mint(terms(None), Duration::from_secs(1 << 30)).unwrap();
        assert_eq!(long.expires_ms, 61_000 + 24 * 3_600_000);
    }

    #[test]
    fn a_restart_keeps_tokens_and_forgets_unused_links() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(1_000, 0));
        let s = store(dir.path(), &clock);
        let used = s.mint(terms(Some("s1")), DEFAULT_LINK_TTL).unwrap();
        let cookie = s.pair(&used.code).unwrap().cookie_value;
        let unused = s.mint(terms(None), DEFAULT_LINK_TTL).unwrap();
        clock.set(2_000);
        assert!(s.authenticate(&cookie).is_some());
        drop(s);
        let again = store(dir.path(), &clock);
        let peer = again.authenticate(&cookie).unwrap();
        assert_eq!(peer.token_id, used.token_id);
        assert_eq!(peer.role, "operator");
        assert_eq!(peer.session.as_deref(), Some("s1"));
        assert_eq!(again.pair(&unused.code).unwrap_err().0, "unknown link");
        let listed = again.list();
        assert_eq!(listed.len(), 1);
        assert!(!listed[0].pending());
        assert!(again.grant(&used.token_id).is_some());
    }

    #[test]
    fn a_revoked_token_authenticates_nothing_and_its_cancellation_fires() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(ManualClock::new(1_000, 0));
        let s = store(dir.path(), &clock);
        let minted = s.mint(terms(None), DEFAULT_LINK_TTL).unwrap();
        let paired = s.pair(&minted.code).unwrap();
        let live = s.authenticate(&paired.cookie_value).unwrap();
        assert!(!paired.peer.revoked.is_cancelled());
        assert_eq!(s.revoke(&minted.token_id).unwrap(), Some(Revoked::Token));
        assert!(paired.peer.revoked.is_cancelled());
        assert!(live.revoked.is_cancelled(), "every handed-out peer is told");
        assert!(s.authenticate(&paired.cookie_value).is_none());
        assert!(s.grant(&minted.token_id).is_none());
        assert_eq!(s.revoke(&minted.token_id).unwrap(), None);
        // Persisted: a restart does not bring it back.
        let again = store(dir.path(), &clock);
        assert!(again.authenticate(&paired.cookie_value).is_none());
        // An unused link revoked cannot be used.
        let link = again.mint(terms(None), DEFAULT_LINK_TTL).unwrap();
        assert_eq!(again.revoke(&link.token_id).unwrap(), Some(Revoked::Link));
        assert_eq!(again.pair(&link.code).unwrap_err().0, "unknown link");
    }
}
