//! The access policy file (`baton-host serve --access FILE`, `docs/host.md`, access): TOML
//! that grants roles to identities and denies identities outright.
//!
//! ```toml
//! # What a verified TLS client certificate that no grant names may do: "own" (create
//! # sessions and use only those; the default) or "none" (refused at the listener).
//! ungranted_tls = "own"
//!
//! [[grant]]
//! role = "admin"
//! unix_user = "alice"          # or unix_uid = 1000
//! [[grant]]
//! role = "operator"
//! tls_cn = "bob"               # or tls_fingerprint, tls_san_dns, tls_san_email, tls_san_uri
//! sessions = ["3f2a…"]         # omitted: all sessions
//! [[grant]]
//! role = "viewer"
//! tls_fingerprint = "…"
//! [[grant]]
//! role = "operator"
//! tcp = true                   # the loopback TCP listener's peers
//! [[grant]]
//! role = "viewer"
//! web_token = "3f2a9c1e"       # a browser identity, web:<id> (`baton links`)
//! [[deny]]
//! tls_fingerprint = "…"        # refused at the listener whatever it is granted
//! ```
//!
//! Parsing is strict (`deny_unknown_fields`): a misspelt key is an error, never a grant
//! silently ignored.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use baton_server::PeerIdentity;
use serde::Deserialize;

/// Largest policy file read: 1 MiB (a policy is a few lines per person).
pub const MAX_POLICY_BYTES: u64 = 1024 * 1024;

/// What an identity is granted, weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Attach, subscribe, read and list; every mutating method is refused (`forbidden`).
    Viewer,
    /// A viewer who may also prompt, steer, abort, run `bash`, change the model and the
    /// thinking level, and create sessions (which it then owns).
    Operator,
    /// Every session, including `remove`.
    Admin,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Viewer => "viewer",
            Self::Operator => "operator",
            Self::Admin => "admin",
        })
    }
}

/// What a verified TLS client certificate no grant names may do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Ungranted {
    /// Create sessions, and see and use only the sessions it created (the default).
    #[default]
    Own,
    /// Nothing: refused at the listener.
    None,
}

/// One way of naming identities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matcher {
    /// A Unix peer whose uid `/etc/passwd` names so.
    UnixUser(String),
    /// A Unix peer with this uid.
    UnixUid(u32),
    /// A TLS client certificate with this common name.
    TlsCn(String),
    /// A TLS client certificate with this SHA-256 fingerprint (lowercase hex, no colons).
    TlsFingerprint(String),
    /// A TLS client certificate with this DNS subject alternative name (ASCII case ignored).
    TlsSanDns(String),
    /// A TLS client certificate with this e-mail subject alternative name (ASCII case
    /// ignored).
    TlsSanEmail(String),
    /// A TLS client certificate with this URI subject alternative name (e.g. SPIFFE).
    TlsSanUri(String),
    /// Every peer of the plain-TCP (loopback) listener: one shared identity, `tcp`.
    Tcp,
    /// Every TLS peer without a client certificate: one shared identity, `tls`.
    TlsAnonymous,
    /// The browser identity `web:<id>` with this token id (as `baton links` lists it).
    WebToken(String),
}

impl Matcher {
    /// Whether `identity` is one this matcher names.
    pub fn matches(&self, identity: &PeerIdentity) -> bool {
        let cert = identity.client_certificate();
        match self {
            Self::UnixUser(name) => identity.user_name() == Some(name.as_str()),
            Self::UnixUid(uid) => identity.uid() == Some(*uid),
            Self::TlsCn(cn) => cert.is_some_and(|c| c.common_name() == Some(cn.as_str())),
            Self::TlsFingerprint(hex) => cert.is_some_and(|c| c.sha256_fingerprint_hex() == *hex),
            Self::TlsSanDns(dns) => {
                cert.is_some_and(|c| c.dns_names().any(|d| d.eq_ignore_ascii_case(dns)))
            }
            Self::TlsSanEmail(email) => {
                cert.is_some_and(|c| c.emails().any(|e| e.eq_ignore_ascii_case(email)))
            }
            Self::TlsSanUri(uri) => cert.is_some_and(|c| c.uris().any(|u| u == uri)),
            Self::Tcp => matches!(identity, PeerIdentity::Tcp { .. }),
            Self::TlsAnonymous => matches!(identity, PeerIdentity::AnonymousTls { .. }),
            Self::WebToken(id) => identity.web_token_id() == Some(id.as_str()),
        }
    }
}

/// One `[[grant]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The role granted.
    pub role: Role,
    /// Who it is granted to.
    pub matcher: Matcher,
    /// The sessions it covers (full ids); `None`: every session. An admin grant always
    /// covers every session.
    pub sessions: Option<BTreeSet<String>>,
}

/// A parsed access policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessPolicy {
    /// The grants, in file order.
    pub grants: Vec<Grant>,
    /// Identities refused whatever they are granted.
    pub denies: Vec<Matcher>,
    /// What a verified TLS certificate no grant names may do.
    pub ungranted_tls: Ungranted,
}

/// A policy file that could not be used. Its `Display` is one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file could not be read.
    #[error("cannot read access policy {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_POLICY_BYTES`].
    #[error("access policy {} is larger than {MAX_POLICY_BYTES} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file is not a valid policy.
    #[error("access policy {}: {message}", path.display())]
    Invalid {
        /// The file (empty for text parsed with [`AccessPolicy::from_toml`]).
        path: PathBuf,
        /// What is wrong and where (one line).
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    ungranted_tls: Ungranted,
    #[serde(default)]
    grant: Vec<RawGrant>,
    #[serde(default)]
    deny: Vec<RawIdentity>,
}

/// A `[[grant]]` as written: a role, the sessions, and the identity keys of
/// [`RawIdentity`] (spelt out, since `serde(flatten)` would defeat `deny_unknown_fields`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    role: Role,
    sessions: Option<Vec<String>>,
    unix_user: Option<String>,
    unix_uid: Option<u32>,
    tls_cn: Option<String>,
    tls_fingerprint: Option<String>,
    tls_san_dns: Option<String>,
    tls_san_email: Option<String>,
    tls_san_uri: Option<String>,
    tcp: Option<bool>,
    tls_anonymous: Option<bool>,
    web_token: Option<String>,
}

impl RawGrant {
    fn identity(&mut self) -> RawIdentity {
        RawIdentity {
            unix_user: self.unix_user.take(),
            unix_uid: self.unix_uid.take(),
            tls_cn: self.tls_cn.take(),
            tls_fingerprint: self.tls_fingerprint.take(),
            tls_san_dns: self.tls_san_dns.take(),
            tls_san_email: self.tls_san_email.take(),
            tls_san_uri: self.tls_san_uri.take(),
            tcp: self.tcp.take(),
            tls_anonymous: self.tls_anonymous.take(),
            web_token: self.web_token.take(),
        }
    }
}

/// A `[[deny]]`: exactly one identity key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdentity {
    unix_user: Option<String>,
    unix_uid: Option<u32>,
    tls_cn: Option<String>,
    tls_fingerprint: Option<String>,
    tls_san_dns: Option<String>,
    tls_san_email: Option<String>,
    tls_san_uri: Option<String>,
    tcp: Option<bool>,
    tls_anonymous: Option<bool>,
    web_token: Option<String>,
}

const IDENTITY_KEYS: &str = "unix_user, unix_uid, tls_cn, tls_fingerprint, tls_san_dns, \
                             tls_san_email, tls_san_uri, tcp, tls_anonymous, web_token";

impl RawIdentity {
    fn matcher(self) -> Result<Matcher, String> {
        let mut found: Vec<Matcher> = Vec::new();
        let text = |what: &str, v: String| {
            if v.is_empty() {
                Err(format!("{what} is empty"))
            } else {
                Ok(v)
            }
        };
        let flag = |what: &str, v: bool, m: Matcher| {
            if v {
                Ok(m)
            } else {
                Err(format!("{what} = false names nobody; leave it out"))
            }
        };
        if let Some(v) = self.unix_user {
            found.push(Matcher::UnixUser(text("unix_user", v)?));
        }
        if let Some(v) = self.unix_uid {
            found.push(Matcher::UnixUid(v));
        }
        if let Some(v) = self.tls_cn {
            found.push(Matcher::TlsCn(text("tls_cn", v)?));
        }
        if let Some(v) = self.tls_fingerprint {
            found.push(Matcher::TlsFingerprint(fingerprint(&v)?));
        }
        if let Some(v) = self.tls_san_dns {
            found.push(Matcher::TlsSanDns(text("tls_san_dns", v)?));
        }
        if let Some(v) = self.tls_san_email {
            found.push(Matcher::TlsSanEmail(text("tls_san_email", v)?));
        }
        if let Some(v) = self.tls_san_uri {
            found.push(Matcher::TlsSanUri(text("tls_san_uri", v)?));
        }
        if let Some(v) = self.tcp {
            found.push(flag("tcp", v, Matcher::Tcp)?);
        }
        if let Some(v) = self.tls_anonymous {
            found.push(flag("tls_anonymous", v, Matcher::TlsAnonymous)?);
        }
        if let Some(v) = self.web_token {
            found.push(Matcher::WebToken(web_token(&v)?));
        }
        match found.len() {
            1 => Ok(found.remove(0)),
            0 => Err(format!("names no identity (give one of {IDENTITY_KEYS})")),
            _ => Err("names more than one identity; write one entry per identity".to_owned()),
        }
    }
}

/// A browser token id as written: the hex id `baton links` shows, `web:` before it allowed.
fn web_token(text: &str) -> Result<String, String> {
    let id = text.strip_prefix("web:").unwrap_or(text);
    if !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(id.to_owned())
    } else {
        Err(format!(
            "web_token {text:?} is not a browser token id (the lowercase hex id `baton links` shows)"
        ))
    }
}

/// A SHA-256 fingerprint as written (hex, any case, colons allowed) in the form
/// [`ClientCertificate::sha256_fingerprint_hex`](baton_server::ClientCertificate) gives.
fn fingerprint(text: &str) -> Result<String, String> {
    let hex: String = text
        .chars()
        .filter(|c| *c != ':')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if hex.len() == 64 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(hex)
    } else {
        Err(format!(
            "tls_fingerprint {text:?} is not a SHA-256 fingerprint (64 hex digits)"
        ))
    }
}

impl AccessPolicy {
    /// Reads and parses the policy file at `path`.
    ///
    /// # Errors
    /// [`PolicyError`]: unreadable, too large, or not a valid policy (the message names the
    /// line or the entry).
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        use std::io::Read;
        let read = |source| PolicyError::Read {
            path: path.to_path_buf(),
            source,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(read)?
            .take(MAX_POLICY_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(read)?;
        if text.len() as u64 > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        Self::parse(&text).map_err(|message| PolicyError::Invalid {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parses policy text.
    ///
    /// # Errors
    /// [`PolicyError::Invalid`] with an empty path.
    pub fn from_toml(text: &str) -> Result<Self, PolicyError> {
        Self::parse(text).map_err(|message| PolicyError::Invalid {
            path: PathBuf::new(),
            message,
        })
    }

    fn parse(text: &str) -> Result<Self, String> {
        let raw: RawPolicy = toml::from_str(text).map_err(|e| {
            let message = e.message().trim().replace('\n', "; ");
            match e.span() {
                Some(span) => {
                    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                    format!("line {line}: {message}")
                }
                None => message,
            }
        })?;
        let grants = raw
            .grant
            .into_iter()
            .enumerate()
            .map(|(i, mut g)| {
                let role = g.role;
                let at = |e: String| format!("grant {} ({role}): {e}", i + 1);
                let matcher = g.identity().matcher().map_err(at)?;
                let sessions = match g.sessions {
                    None => None,
                    Some(_) if g.role == Role::Admin => {
                        return Err(at(
                            "an admin grant covers every session; leave sessions out".to_owned(),
                        ));
                    }
                    Some(list) => {
                        if let Some(bad) = list.iter().find(|s| s.is_empty()) {
                            return Err(at(format!("session id {bad:?} is empty")));
                        }
                        Some(list.into_iter().collect())
                    }
                };
                Ok(Grant {
                    role: g.role,
                    matcher,
                    sessions,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let denies = raw
            .deny
            .into_iter()
            .enumerate()
            .map(|(i, d)| d.matcher().map_err(|e| format!("deny {}: {e}", i + 1)))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Self {
            grants,
            denies,
            ungranted_tls: raw.ungranted_tls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: &str = "AB:12:cd:34:ef:56:78:90:ab:12:cd:34:ef:56:78:90:ab:12:cd:34:ef:56:78:90:ab:12:cd:34:ef:56:78:90";

    #[test]
    fn the_documented_example_parses() {
        let text = format!(
            r#"
            [[grant]]
            role = "admin"
            unix_user = "alice"
            [[grant]]
            role = "operator"
            tls_cn = "bob"
            sessions = ["3f2a"]
            [[grant]]
            role = "viewer"
            tls_fingerprint = "{FP}"
            [[grant]]
            role = "operator"
            tcp = true
            [[grant]]
            role = "viewer"
            web_token = "web:3f2a9c1e"
            [[deny]]
            unix_uid = 1001
            [[deny]]
            web_token = "ab12cd34"
            "#
        );
        let p = AccessPolicy::from_toml(&text).unwrap();
        assert_eq!(p.grants.len(), 5);
        assert_eq!(p.grants[0].matcher, Matcher::UnixUser("alice".into()));
        assert_eq!(p.grants[1].role, Role::Operator);
        assert_eq!(
            p.grants[1].sessions,
            Some(BTreeSet::from(["3f2a".to_owned()]))
        );
        assert_eq!(
            p.grants[2].matcher,
            Matcher::TlsFingerprint("ab12cd34ef567890".repeat(4))
        );
        assert_eq!(p.grants[3].matcher, Matcher::Tcp);
        assert_eq!(p.grants[4].matcher, Matcher::WebToken("3f2a9c1e".into()));
        assert_eq!(
            p.denies,
            [Matcher::UnixUid(1001), Matcher::WebToken("ab12cd34".into())]
        );
        assert_eq!(p.ungranted_tls, Ungranted::Own);
        assert_eq!(
            AccessPolicy::from_toml("").unwrap(),
            AccessPolicy::default()
        );
    }

    fn error(text: &str) -> String {
        AccessPolicy::from_toml(text).unwrap_err().to_string()
    }

    #[test]
    fn mistakes_are_one_line_errors_that_say_where() {
        let e = error("[[grant]]\nrol = \"admin\"\nunix_uid = 1\n");
        assert!(e.contains("line 2") && e.contains("rol"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let e = error("[[grant]]\nrole = \"root\"\nunix_uid = 1\n");
        assert!(e.contains("line 2"), "{e}");
        assert!(
            error("[[grant]]\nrole = \"viewer\"\n").contains("grant 1 (viewer): names no identity")
        );
        assert!(
            error("[[grant]]\nrole = \"viewer\"\ntcp = true\nunix_uid = 3\n")
                .contains("more than one identity")
        );
        assert!(error("[[grant]]\nrole = \"viewer\"\ntcp = false\n").contains("names nobody"));
        assert!(
            error("[[grant]]\nrole = \"viewer\"\ntls_fingerprint = \"abc\"\n")
                .contains("not a SHA-256 fingerprint")
        );
        assert!(
            error("[[grant]]\nrole = \"admin\"\ntcp = true\nsessions = [\"a\"]\n")
                .contains("covers every session")
        );
        assert!(error("[[deny]]\nrole = \"admin\"\ntcp = true\n").contains("role"));
        assert!(error("ungranted_tls = \"maybe\"\n").contains("line 1"));
        assert!(error("[[deny]]\nweb_token = \"AB-12\"\n").contains("not a browser token id"));
        assert!(error("[[deny]]\nweb_tokens = \"ab12\"\n").contains("web_tokens"));
    }
}
