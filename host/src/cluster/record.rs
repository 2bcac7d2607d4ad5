//! The values under the keys of [`keys`](super::keys): small JSON objects, each with a format
//! version `v`, so a later host can read an older one and refuse a newer one by name.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The format version this host writes and reads.
pub const RECORD_VERSION: u32 = 1;
/// A record value longer than this is refused unread (etcd is trusted, but a bound costs
/// nothing and keeps a mistaken writer from growing our memory).
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

/// Who owns a server id: the value of `/baton/v1/owners/<server-id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderRecord {
    /// [`RECORD_VERSION`].
    pub v: u32,
    /// The server id owned.
    pub server_id: String,
    /// The owning process.
    pub pid: u32,
    /// The machine it runs on.
    pub hostname: String,
    /// What it advertises (as configured when it claimed; the member record has the bound
    /// addresses).
    pub advertise: Vec<String>,
    /// When it claimed, ISO-8601 UTC.
    pub since: String,
}

/// How busy a host is, for placement: the member record's `load`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Load {
    /// Sessions whose runtime is open.
    pub open_sessions: u64,
    /// Client connections.
    pub attached_clients: u64,
}

/// A live host: the value of `/baton/v1/hosts/<server-id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    /// [`RECORD_VERSION`].
    pub v: u32,
    /// The host's server id.
    pub server_id: String,
    /// What clients dial.
    pub advertise: Vec<String>,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its load when last published.
    pub load: Load,
    /// When it joined, ISO-8601 UTC.
    pub since: String,
}

/// A session in the fleet: the value of `/baton/v1/sessions/<server-id>/<session-id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// [`RECORD_VERSION`].
    pub v: u32,
    /// The host that owns it (its journal file is there).
    pub server_id: String,
    /// The session id.
    pub session_id: String,
    /// Who created it (`service::owner_key`), if recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Its name when created, if any (unique per owner across the fleet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When it was created, ISO-8601 UTC.
    pub created: String,
}

/// Why a record could not be read.
#[derive(Debug, Error)]
pub enum RecordError {
    /// Longer than [`MAX_RECORD_BYTES`].
    #[error("record of {0} bytes is over the limit")]
    TooLong(usize),
    /// Not the JSON of this record.
    #[error("record is not valid: {0}")]
    Invalid(#[from] serde_json::Error),
    /// Written by a newer host.
    #[error("record format v{0} is newer than this host's v{RECORD_VERSION}")]
    Newer(u32),
}

/// Reads a record of type `T` from an etcd value.
///
/// # Errors
/// [`RecordError`].
pub fn decode<T: for<'de> Deserialize<'de> + Versioned>(bytes: &[u8]) -> Result<T, RecordError> {
    if bytes.len() > MAX_RECORD_BYTES {
        return Err(RecordError::TooLong(bytes.len()));
    }
    let record: T = serde_json::from_slice(bytes)?;
    match record.version() {
        v if v > RECORD_VERSION => Err(RecordError::Newer(v)),
        _ => Ok(record),
    }
}

/// Writes a record as its etcd value.
pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    // Plain structs of strings, integers and maps with string keys: serialising cannot fail.
    serde_json::to_vec(record).unwrap_or_default()
}

/// A record with a format version.
pub trait Versioned {
    /// Its `v`.
    fn version(&self) -> u32;
}

impl Versioned for HolderRecord {
    fn version(&self) -> u32 {
        self.v
    }
}

impl Versioned for MemberRecord {
    fn version(&self) -> u32 {
        self.v
    }
}

impl Versioned for SessionRecord {
    fn version(&self) -> u32 {
        self.v
    }
}

impl HolderRecord {
    /// The holder as the refusal names it, one line: `baton-host pid 1234 on box-2
    /// (tls://box-2:7879) since 2026-…`.
    pub fn describe(&self) -> String {
        let endpoints = if self.advertise.is_empty() {
            "no advertised endpoint".to_owned()
        } else {
            self.advertise
                .iter()
                .take(4)
                .map(|s| printable(s))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "pid {} on {} ({endpoints}) since {}",
            self.pid,
            printable(&self.hostname),
            printable(&self.since)
        )
    }
}

/// At most 128 characters of `s`, without control characters, so a message stays one line.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(128).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder() -> HolderRecord {
        HolderRecord {
            v: RECORD_VERSION,
            server_id: "id".into(),
            pid: 1234,
            hostname: "box-2".into(),
            advertise: vec!["tls://box-2:7879".into()],
            since: "2026-12-02T10:00:00.000Z".into(),
        }
    }

    #[test]
    fn a_holder_round_trips_and_describes_itself_on_one_line() {
        let h = holder();
        let back: HolderRecord = decode(&encode(&h)).unwrap();
        assert_eq!(back, h);
        assert_eq!(
            h.describe(),
            "pid 1234 on box-2 (tls://box-2:7879) since 2026-12-02T10:00:00.000Z"
        );
        let mut evil = h;
        evil.hostname = "a\nb".into();
        assert!(!evil.describe().contains('\n'));
    }

    #[test]
    fn a_newer_or_oversized_or_garbled_record_is_refused() {
        let mut h = holder();
        h.v = RECORD_VERSION + 1;
        assert!(matches!(
            decode::<HolderRecord>(&encode(&h)),
            Err(RecordError::Newer(2))
        ));
        let big = vec![b' '; MAX_RECORD_BYTES + 1];
        assert!(matches!(
            decode::<HolderRecord>(&big),
            Err(RecordError::TooLong(_))
        ));
        assert!(matches!(
            decode::<MemberRecord>(b"{"),
            Err(RecordError::Invalid(_))
        ));
    }
}
