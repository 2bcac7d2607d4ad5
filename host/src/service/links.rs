//! `baton.links`: minting one-time links for the web listener, listing the browser
//! identities, and revoking them (`baton link`, `baton links`, `baton unlink`). A baton
//! service, not one of upstream's: callable on the server target, not in the catalogue
//! (there is nothing to subscribe to), so upstream clients see the catalogue they expect.
//!
//! | caller | may mint |
//! | --- | --- |
//! | the host's own uid, in-process | any link |
//! | a TLS client | links to sessions it owns |
//! | any other identity | links to sessions it sees (`--viewer` where it may only view), or to its own rights |
//! | a browser identity | nothing |
//!
//! `list` and `revoke` cover every link for the host's own uid, and the caller's own links
//! for anyone else; a browser identity may call neither.

use baton_protocol::{Map, Value};
use baton_server::{CallResult, Context, PeerIdentity, ServiceError};

use super::access::forbidden;
use super::errors::{busy, invalid};
use super::shared::Shared;
use crate::clock::format_iso8601;
use crate::link::{DEFAULT_LINK_TTL, LinkError, Listed, MAX_LINK_TTL, Minter, Revoked, Terms};

/// The service id.
pub(crate) const SERVICE: &str = "baton.links";
/// What `mint` answers when no web listener's base URL was given.
pub(crate) const NO_WEB_LISTENER: &str =
    "this host serves no web listener; start it with --listen http://127.0.0.1:PORT";
/// Shortest link lifetime accepted.
const MIN_TTL_MS: u64 = 1_000;

fn browser_refused(identity: Option<&PeerIdentity>) -> Result<(), ServiceError> {
    match identity.and_then(PeerIdentity::web_token_id) {
        Some(id) => Err(forbidden(format!(
            "Identity web:{id} is a browser: browser identities may not mint, list or revoke links"
        ))),
        None => Ok(()),
    }
}

/// One `baton.links` call.
pub(crate) fn invoke(shared: &Shared, member: &str, args: &[Value], ctx: &Context) -> CallResult {
    browser_refused(ctx.identity())?;
    match member {
        "mint" => mint(shared, args, ctx),
        "list" => {
            if !args.is_empty() {
                return Err(invalid("Expected arguments []"));
            }
            Ok(Some(Value::Array(
                visible(shared, ctx).iter().map(listed_value).collect(),
            )))
        }
        "revoke" => revoke(shared, args, ctx),
        other => Err(invalid(format!("Unknown method {SERVICE}.{other}"))),
    }
}

/// `[{"session"?, "viewer"?, "ttlMs"?}]` → `{"url", "tokenId", "expiresAt"}`.
fn mint(shared: &Shared, args: &[Value], ctx: &Context) -> CallResult {
    const USAGE: &str = r#"[{"session"?, "viewer"?, "ttlMs"?}]"#;
    let map = match args {
        [] => Map::new(),
        [Value::Map(m)] => m.clone(),
        _ => return Err(invalid(format!("Expected arguments {USAGE}"))),
    };
    let mut session = None;
    let mut viewer = false;
    let mut ttl = DEFAULT_LINK_TTL;
    for (key, value) in map.iter() {
        match key {
            "session" => {
                session = Some(
                    value
                        .as_str()
                        .ok_or_else(|| invalid("mint option session must be a string"))?
                        .to_owned(),
                );
            }
            "viewer" => {
                viewer = value
                    .as_bool()
                    .ok_or_else(|| invalid("mint option viewer must be a boolean"))?;
            }
            "ttlMs" => {
                let max = u64::try_from(MAX_LINK_TTL.as_millis()).unwrap_or(u64::MAX);
                let ms = value
                    .as_u64()
                    .filter(|ms| (MIN_TTL_MS..=max).contains(ms))
                    .ok_or_else(|| {
                        invalid(format!(
                            "mint option ttlMs must be from {MIN_TTL_MS} (1 s) to {max} (24 h)"
                        ))
                    })?;
                ttl = std::time::Duration::from_millis(ms);
            }
            other => return Err(invalid(format!("Unknown mint option {other}"))),
        }
    }
    let links = shared.access.links();
    let Some(base) = links.web_base_urls().into_iter().next() else {
        return Err(invalid(NO_WEB_LISTENER));
    };
    let identity = ctx.identity();
    let rights = shared.access.rights(identity);
    let itself = shared.access.is_host_itself(identity);
    let tls = identity.is_some_and(|i| i.client_certificate().is_some());
    let Some(minter) = Minter::of(identity) else {
        return Err(forbidden("This identity may not mint links"));
    };
    let role = match &session {
        Some(text) => {
            let id = shared.directory.resolve(text, &rights)?;
            let owner = shared.directory.owner_of(&id);
            if !itself && tls && !rights.owns(owner.as_deref()) {
                return Err(forbidden(format!(
                    "A TLS client may mint links only for sessions it owns; {id} is not yours"
                )));
            }
            if !viewer && !rights.may_operate(&id, owner.as_deref()) {
                return Err(forbidden(format!(
                    "Identity {} may only view session {id}: mint a --viewer link",
                    rights.key
                )));
            }
            session = Some(id);
            if viewer { "viewer" } else { "operator" }
        }
        None => {
            if !itself && tls {
                return Err(forbidden(
                    "A TLS client may mint links only for sessions it owns: name one",
                ));
            }
            if viewer { "viewer" } else { rights.role() }
        }
    };
    let terms = Terms {
        role: role.to_owned(),
        session,
        read_only: viewer,
        minter,
        minter_key: rights.key.clone(),
    };
    let minted = links.mint(terms, ttl).map_err(link_error)?;
    let mut m = Map::new();
    m.insert(
        "url",
        Value::from(format!(
            "{}/#pair={}",
            base.trim_end_matches('/'),
            minted.code
        )),
    );
    m.insert("tokenId", Value::from(minted.token_id));
    m.insert("expiresAt", Value::from(format_iso8601(minted.expires_ms)));
    Ok(Some(Value::Map(m)))
}

/// The links and tokens the caller may list and revoke: all of them for the host's own
/// uid, else those it minted.
fn visible(shared: &Shared, ctx: &Context) -> Vec<Listed> {
    let all = shared.access.links().list();
    if shared.access.is_host_itself(ctx.identity()) {
        return all;
    }
    let key = shared.access.rights(ctx.identity()).key;
    all.into_iter().filter(|l| l.minter_key == key).collect()
}

fn listed_value(l: &Listed) -> Value {
    let mut m = Map::new();
    m.insert("id", Value::from(l.id.as_str()));
    m.insert("role", Value::from(l.role.as_str()));
    m.insert(
        "session",
        l.session.as_deref().map_or(Value::Null, Value::from),
    );
    m.insert("pending", Value::from(l.pending()));
    m.insert("createdAt", Value::from(format_iso8601(l.created_ms)));
    m.insert(
        "lastSeenAt",
        l.last_seen_ms
            .map_or(Value::Null, |ms| Value::from(format_iso8601(ms))),
    );
    m.insert(
        "expiresAt",
        l.expires_ms
            .map_or(Value::Null, |ms| Value::from(format_iso8601(ms))),
    );
    Value::Map(m)
}

/// `[{"id"}]` → `{"id", "revoked": "token" | "link"}`.
fn revoke(shared: &Shared, args: &[Value], ctx: &Context) -> CallResult {
    const USAGE: &str = r#"[{"id"}]"#;
    let id = match args {
        [Value::Map(m)] if m.len() == 1 => m.get("id").and_then(Value::as_str),
        _ => None,
    }
    .ok_or_else(|| invalid(format!("Expected arguments {USAGE}")))?;
    let id = id.strip_prefix("web:").unwrap_or(id);
    let unknown = || invalid(format!("No browser identity or link {id}"));
    if !visible(shared, ctx).iter().any(|l| l.id == id) {
        return Err(unknown());
    }
    let what = shared
        .access
        .links()
        .revoke(id)
        .map_err(link_error)?
        .ok_or_else(unknown)?;
    let mut m = Map::new();
    m.insert("id", Value::from(id));
    m.insert(
        "revoked",
        Value::from(match what {
            Revoked::Token => "token",
            Revoked::Link => "link",
        }),
    );
    Ok(Some(Value::Map(m)))
}

fn link_error(e: LinkError) -> ServiceError {
    match e {
        LinkError::Refused(message) => busy(message),
        other => ServiceError::internal(other),
    }
}
