//! The pure core of the store: unused links (pairing codes) and browser tokens, with time
//! passed in. No I/O, no clock, no randomness: the caller draws the secrets, reads the
//! clock and writes the file ([`super::LinkStore`]).
//!
//! A link is minted with its token id already chosen; pairing turns it into the token of
//! that id, so `baton links` and `baton unlink` name one thing from minting to revocation.
//! Codes and token secrets are held as SHA-256 digests only, and a code is looked for by
//! comparing its digest with every unused link's in constant time.

use std::collections::BTreeMap;

use baton_server::PeerIdentity;

use super::gate::PairRefused;
use super::minter::Minter;
use super::secret::{Digest, same};

/// Most links minted and not yet used or expired; minting one more is refused.
pub const MAX_PENDING_LINKS: usize = 64;
/// Most browser tokens; pairing one more is refused until some are revoked.
pub const MAX_TOKENS: usize = 1024;
/// How long a used or expired link is remembered, to say which it was.
const REMEMBERED_MS: u64 = 60 * 60 * 1000;
/// Most used or expired links remembered.
const MAX_REMEMBERED: usize = 4 * MAX_PENDING_LINKS;

/// What a link gives, fixed when it is minted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    /// The role as listed: `viewer` or `operator` for one session, else the minter's own
    /// (`admin`, `operator`, `owner`, `viewer`).
    pub role: String,
    /// The one session it is for (full id); `None`: the minter's sessions.
    pub session: Option<String>,
    /// Whether it may only view.
    pub read_only: bool,
    /// Who minted it.
    pub minter: Minter,
    /// The minter's owner key (`unix:uid=…`, `tls:sha256=…`): whose links these are.
    pub minter_key: String,
}

/// One browser token.
#[derive(Debug, Clone)]
pub struct Token {
    /// Its public id.
    pub id: String,
    /// The SHA-256 digest of its secret.
    pub hash: Digest,
    /// What it gives.
    pub terms: Terms,
    /// When its link was traded for it (Unix ms).
    pub created_ms: u64,
    /// When its cookie was last presented (Unix ms).
    pub last_seen_ms: Option<u64>,
    /// The minter, rebuilt for working out its rights (`None`: in-process).
    pub(crate) minter: Option<PeerIdentity>,
}

impl Token {
    /// A token as recorded.
    ///
    /// # Errors
    /// Its minter does not decode (one line).
    pub fn new(
        id: String,
        hash: Digest,
        terms: Terms,
        created_ms: u64,
        last_seen_ms: Option<u64>,
    ) -> Result<Self, String> {
        let minter = terms.minter.identity()?;
        Ok(Self {
            id,
            hash,
            terms,
            created_ms,
            last_seen_ms,
            minter,
        })
    }
}

#[derive(Debug, Clone)]
struct Link {
    id: String,
    code: Digest,
    terms: Terms,
    created_ms: u64,
    expires_ms: u64,
    used: bool,
}

/// A browser identity or an unused link, as `baton links` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The token id (`web:<id>`).
    pub id: String,
    /// Its role.
    pub role: String,
    /// Its session, if it is for one.
    pub session: Option<String>,
    /// Minted (a link) or paired (a token), Unix ms.
    pub created_ms: u64,
    /// Last seen (tokens only).
    pub last_seen_ms: Option<u64>,
    /// When the unused link expires; `None` for a token.
    pub expires_ms: Option<u64>,
    /// Whose it is.
    pub minter_key: String,
}

impl Listed {
    /// Whether this is a link not yet used.
    pub fn pending(&self) -> bool {
        self.expires_ms.is_some()
    }
}

/// What [`Book::revoke`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    /// An unused link.
    Link,
    /// A browser token.
    Token,
}

/// The links and tokens of one host.
#[derive(Debug, Default)]
pub struct Book {
    links: Vec<Link>,
    tokens: BTreeMap<String, Token>,
}

impl Book {
    /// A book holding `tokens` (from the file) and no links.
    pub fn with_tokens(tokens: impl IntoIterator<Item = Token>) -> Self {
        Self {
            links: Vec::new(),
            tokens: tokens.into_iter().map(|t| (t.id.clone(), t)).collect(),
        }
    }

    /// Whether `id` names a link or a token (a fresh id must not).
    pub fn is_taken(&self, id: &str) -> bool {
        self.tokens.contains_key(id) || self.links.iter().any(|l| l.id == id)
    }

    fn forget_old(&mut self, now_ms: u64) {
        self.links
            .retain(|l| now_ms < l.expires_ms.saturating_add(REMEMBERED_MS));
        let mut spent = self
            .links
            .iter()
            .filter(|l| l.used || now_ms >= l.expires_ms)
            .count();
        // Oldest first: forget the oldest spent links beyond the cap.
        self.links.retain(|l| {
            let drop = spent > MAX_REMEMBERED && (l.used || now_ms >= l.expires_ms);
            if drop {
                spent -= 1;
            }
            !drop
        });
    }

    /// Records a link with token id `id` (not [taken](Self::is_taken)) and code digest
    /// `code`, usable until `now_ms + ttl_ms`; returns that expiry.
    ///
    /// # Errors
    /// [`MAX_PENDING_LINKS`] links are unused (one line).
    pub fn mint(
        &mut self,
        now_ms: u64,
        id: String,
        code: Digest,
        terms: Terms,
        ttl_ms: u64,
    ) -> Result<u64, String> {
        self.forget_old(now_ms);
        let live = self
            .links
            .iter()
            .filter(|l| !l.used && now_ms < l.expires_ms)
            .count();
        if live >= MAX_PENDING_LINKS {
            return Err(format!(
                "Too many unused links (limit {MAX_PENDING_LINKS}); revoke some with `baton unlink` or let them expire"
            ));
        }
        let expires_ms = now_ms.saturating_add(ttl_ms);
        self.links.push(Link {
            id,
            code,
            terms,
            created_ms: now_ms,
            expires_ms,
            used: false,
        });
        Ok(expires_ms)
    }

    /// Trades the link whose code has digest `code` for a token whose secret has digest
    /// `secret`: once, before it expires.
    ///
    /// # Errors
    /// The link is unknown (or revoked), expired or already used, or there are
    /// [`MAX_TOKENS`] tokens.
    pub fn pair(
        &mut self,
        now_ms: u64,
        code: &Digest,
        secret: Digest,
    ) -> Result<&Token, PairRefused> {
        self.forget_old(now_ms);
        // Every link is compared, so the time taken says nothing about which one matched.
        let mut found = None;
        for (i, link) in self.links.iter().enumerate() {
            if same(&link.code, code) {
                found = Some(i);
            }
        }
        let Some(i) = found else {
            return Err(PairRefused("unknown link".to_owned()));
        };
        let link = &self.links[i];
        if link.used {
            return Err(PairRefused("this link was already used".to_owned()));
        }
        if now_ms >= link.expires_ms {
            return Err(PairRefused("this link has expired".to_owned()));
        }
        if self.tokens.len() >= MAX_TOKENS {
            return Err(PairRefused(format!(
                "this host has too many browser identities (limit {MAX_TOKENS}); revoke some with `baton unlink`"
            )));
        }
        let token = Token::new(
            link.id.clone(),
            secret,
            link.terms.clone(),
            now_ms,
            Some(now_ms),
        )
        .map_err(PairRefused)?;
        self.links[i].used = true;
        let id = token.id.clone();
        Ok(self.tokens.entry(id).or_insert(token))
    }

    /// Undoes the [`pair`](Self::pair) that made token `id` (its record could not be
    /// written): the token goes, the link is unused again.
    pub fn unpair(&mut self, id: &str) {
        self.tokens.remove(id);
        if let Some(link) = self.links.iter_mut().find(|l| l.id == id) {
            link.used = false;
        }
    }

    /// The token `id` if `secret` is the digest of its secret; marks it seen at `now_ms`.
    pub fn authenticate(&mut self, now_ms: u64, id: &str, secret: &Digest) -> Option<&Token> {
        let token = self.tokens.get_mut(id)?;
        if !same(&token.hash, secret) {
            return None;
        }
        token.last_seen_ms = Some(now_ms);
        Some(token)
    }

    /// The live token `id`.
    pub fn token(&self, id: &str) -> Option<&Token> {
        self.tokens.get(id)
    }

    /// Every token (for the file).
    pub fn tokens(&self) -> impl Iterator<Item = &Token> {
        self.tokens.values()
    }

    /// Removes the token or unused link `id`.
    pub fn revoke(&mut self, id: &str) -> Option<Revoked> {
        if self.tokens.remove(id).is_some() {
            return Some(Revoked::Token);
        }
        let before = self.links.len();
        self.links.retain(|l| l.id != id || l.used);
        (self.links.len() < before).then_some(Revoked::Link)
    }

    /// The live tokens and the links still usable at `now_ms`, links first, oldest first.
    pub fn list(&self, now_ms: u64) -> Vec<Listed> {
        let links = self
            .links
            .iter()
            .filter(|l| !l.used && now_ms < l.expires_ms)
            .map(|l| Listed {
                id: l.id.clone(),
                role: l.terms.role.clone(),
                session: l.terms.session.clone(),
                created_ms: l.created_ms,
                last_seen_ms: None,
                expires_ms: Some(l.expires_ms),
                minter_key: l.terms.minter_key.clone(),
            });
        let mut tokens: Vec<Listed> = self
            .tokens
            .values()
            .map(|t| Listed {
                id: t.id.clone(),
                role: t.terms.role.clone(),
                session: t.terms.session.clone(),
                created_ms: t.created_ms,
                last_seen_ms: t.last_seen_ms,
                expires_ms: None,
                minter_key: t.terms.minter_key.clone(),
            })
            .collect();
        tokens.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        links.chain(tokens).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::secret::digest;

    const MIN: u64 = 60_000;

    fn terms() -> Terms {
        Terms {
            role: "operator".into(),
            session: Some("s1".into()),
            read_only: false,
            minter: Minter::Local,
            minter_key: "local".into(),
        }
    }

    #[test]
    fn a_code_is_single_use() {
        let mut book = Book::default();
        book.mint(0, "id1".into(), digest("code"), terms(), 5 * MIN)
            .unwrap();
        let token = book.pair(MIN, &digest("code"), digest("secret")).unwrap();
        assert_eq!(token.id, "id1");
        assert_eq!(
            book.pair(MIN, &digest("code"), digest("other"))
                .unwrap_err(),
            PairRefused("this link was already used".into())
        );
        assert_eq!(
            book.pair(MIN, &digest("nope"), digest("other"))
                .unwrap_err(),
            PairRefused("unknown link".into())
        );
        assert!(book.authenticate(MIN, "id1", &digest("secret")).is_some());
        assert!(book.authenticate(MIN, "id1", &digest("other")).is_none());
    }

    #[test]
    fn an_expired_code_is_refused_and_no_longer_listed() {
        let mut book = Book::default();
        let expires = book
            .mint(0, "id1".into(), digest("code"), terms(), 5 * MIN)
            .unwrap();
        assert_eq!(expires, 5 * MIN);
        assert_eq!(book.list(5 * MIN - 1).len(), 1);
        assert!(book.list(5 * MIN - 1)[0].pending());
        assert!(book.list(5 * MIN).is_empty());
        assert_eq!(
            book.pair(5 * MIN, &digest("code"), digest("secret"))
                .unwrap_err(),
            PairRefused("this link has expired".into())
        );
        assert!(book.token("id1").is_none());
    }

    #[test]
    fn unused_links_are_capped_and_a_revoked_link_cannot_be_used() {
        let mut book = Book::default();
        for i in 0..MAX_PENDING_LINKS {
            book.mint(0, format!("l{i}"), digest(&format!("c{i}")), terms(), MIN)
                .unwrap();
        }
        assert!(
            book.mint(0, "more".into(), digest("more"), terms(), MIN)
                .unwrap_err()
                .contains("Too many unused links")
        );
        assert_eq!(book.revoke("l0"), Some(Revoked::Link));
        assert_eq!(
            book.pair(1, &digest("c0"), digest("s")).unwrap_err(),
            PairRefused("unknown link".into())
        );
        // Expired links free their places.
        book.mint(MIN, "later".into(), digest("later"), terms(), MIN)
            .unwrap();
    }

    #[test]
    fn unpairing_restores_the_link() {
        let mut book = Book::default();
        book.mint(0, "id1".into(), digest("code"), terms(), MIN)
            .unwrap();
        book.pair(1, &digest("code"), digest("s")).unwrap();
        book.unpair("id1");
        assert!(book.token("id1").is_none());
        assert!(book.pair(2, &digest("code"), digest("s")).is_ok());
        assert_eq!(book.revoke("id1"), Some(Revoked::Token));
        assert_eq!(book.revoke("id1"), None);
    }
}
