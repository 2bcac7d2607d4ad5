//! The fleet's session directory in etcd ([`EtcdSessions`], the
//! [`SessionDirectoryStore`] of a host in a fleet): one record per session, one name claim per
//! owner and name, neither under a lease (docs/cluster.md, The session directory).
//!
//! * create: `create_revision(record) == 0 ∧ create_revision(name) == 0 → put both`, so a
//!   name the same owner holds anywhere in the fleet is refused before any file is written;
//! * remove: `value(name) == id → delete both`, else delete the record alone (the name was
//!   claimed again by another session meanwhile, or never);
//! * reconcile at start: this server id's records made those of its journal files;
//! * read: the records and the member keys in one transaction (one revision).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::timeout;

use super::keys::{HOSTS_PREFIX, SESSIONS_PREFIX, name_key, session_key, sessions_of};
use super::liveness::Health;
use super::record::{self, MemberRecord, RECORD_VERSION, SessionRecord};
use crate::future::BoxFuture;
use crate::service::fleet::{
    FleetError, FleetSession, FleetView, LocalSession, Reconciled, SessionDirectoryStore,
};

/// How long one request to etcd may take before it counts as unreachable.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// At most this many session records are read (a bound on memory, far above any fleet's).
pub const MAX_FLEET_SESSIONS: i64 = 100_000;
/// At most this many member records are read.
const MAX_HOSTS: i64 = 10_000;

/// One host's view of the session directory in etcd.
pub struct EtcdSessions {
    client: Client,
    server_id: String,
    health: watch::Receiver<Health>,
    /// The last view read, answered (stale) while etcd does not answer.
    last: Mutex<Option<FleetView>>,
}

impl std::fmt::Debug for EtcdSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSessions")
            .field("server_id", &self.server_id)
            .finish_non_exhaustive()
    }
}

impl EtcdSessions {
    /// The directory of server id `server_id` over `client`; `health` says whether the
    /// host's view is current.
    pub(crate) fn new(client: Client, server_id: String, health: watch::Receiver<Health>) -> Self {
        Self {
            client,
            server_id,
            health,
            last: Mutex::new(None),
        }
    }

    fn record(&self, s: &LocalSession) -> SessionRecord {
        SessionRecord {
            v: RECORD_VERSION,
            server_id: self.server_id.clone(),
            session_id: s.session_id.clone(),
            owner: s.owner.clone(),
            name: s.name.clone(),
            created: s.created.clone(),
        }
    }

    async fn txn(&self, txn: Txn) -> Result<etcd_client::TxnResponse, FleetError> {
        let mut client = self.client.clone();
        match timeout(REQUEST_TIMEOUT, client.txn(txn)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(FleetError::Unreachable(e.to_string())),
            Err(_) => Err(FleetError::Unreachable(format!(
                "no answer within {} s",
                REQUEST_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Puts `record` and, when it has a name that is free, its name claim; whether the name
    /// was free (a record without a name: `true`).
    async fn put_record(&self, record: &SessionRecord) -> Result<bool, FleetError> {
        let key = session_key(&record.server_id, &record.session_id);
        let put = TxnOp::put(key.clone(), record::encode(record), None);
        let Some(name) = &record.name else {
            self.txn(Txn::new().and_then([put])).await?;
            return Ok(true);
        };
        let name = name_key(record.owner.as_deref(), name);
        let response = self
            .txn(
                Txn::new()
                    .when([
                        Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                        Compare::create_revision(name.clone(), CompareOp::Equal, 0),
                    ])
                    .and_then([
                        put.clone(),
                        TxnOp::put(name.clone(), record.session_id.clone().into_bytes(), None),
                    ]),
            )
            .await?;
        if response.succeeded() {
            return Ok(true);
        }
        // The claim may be this session's own, left by a record deleted alone (reconcile).
        let own = self
            .txn(
                Txn::new()
                    .when([
                        Compare::create_revision(key, CompareOp::Equal, 0),
                        Compare::value(
                            name,
                            CompareOp::Equal,
                            record.session_id.clone().into_bytes(),
                        ),
                    ])
                    .and_then([put]),
            )
            .await?;
        Ok(own.succeeded())
    }

    /// Deletes the record under `key` (`record` its value, if it could be read) and its
    /// name claim if the claim is still this session's, in one transaction.
    async fn delete_record(
        &self,
        key: String,
        record: Option<&SessionRecord>,
    ) -> Result<(), FleetError> {
        let delete = TxnOp::delete(key.clone(), None);
        let txn = match record.and_then(|r| r.name.as_ref().map(|n| (r, n))) {
            Some((r, name)) => {
                let name = name_key(r.owner.as_deref(), name);
                Txn::new()
                    .when([Compare::value(
                        name.clone(),
                        CompareOp::Equal,
                        r.session_id.clone().into_bytes(),
                    )])
                    .and_then([delete.clone(), TxnOp::delete(name, None)])
                    .or_else([delete])
            }
            None => Txn::new().and_then([delete]),
        };
        self.txn(txn).await.map(|_| ())
    }

    async fn read(&self) -> Result<FleetView, FleetError> {
        let read = Txn::new().and_then([
            TxnOp::get(
                SESSIONS_PREFIX,
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_limit(MAX_FLEET_SESSIONS),
                ),
            ),
            TxnOp::get(
                HOSTS_PREFIX,
                Some(GetOptions::new().with_prefix().with_limit(MAX_HOSTS)),
            ),
        ]);
        let response = self.txn(read).await?;
        let mut gets = response.op_responses().into_iter().filter_map(|r| match r {
            TxnOpResponse::Get(g) => Some(g),
            TxnOpResponse::Put(_) | TxnOpResponse::Delete(_) | TxnOpResponse::Txn(_) => None,
        });
        let (Some(sessions), Some(hosts)) = (gets.next(), gets.next()) else {
            return Err(FleetError::Unreachable(
                "etcd answered the read without its results".into(),
            ));
        };
        let members: Vec<MemberRecord> = hosts
            .kvs()
            .iter()
            .filter_map(|kv| decoded::<MemberRecord>(kv.key(), kv.value()))
            .collect();
        let hosts: HashMap<String, &MemberRecord> =
            members.iter().map(|m| (m.server_id.clone(), m)).collect();
        let sessions = sessions
            .kvs()
            .iter()
            .filter_map(|kv| decoded::<SessionRecord>(kv.key(), kv.value()))
            .map(|record| {
                let host = hosts.get(&record.server_id);
                FleetSession {
                    endpoints: host.map(|h| h.advertise.clone()).unwrap_or_default(),
                    live: host.is_some(),
                    record,
                }
            })
            .collect();
        Ok(FleetView {
            sessions,
            hosts: members,
            stale: *self.health.borrow() != Health::Serving,
        })
    }

    /// This server id's records: key → record (`None`: unreadable).
    async fn own_records(&self) -> Result<BTreeMap<String, Option<SessionRecord>>, FleetError> {
        let prefix = sessions_of(&self.server_id);
        let response = self
            .txn(
                Txn::new().and_then([TxnOp::get(
                    prefix,
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_limit(MAX_FLEET_SESSIONS),
                    ),
                )]),
            )
            .await?;
        let mut out = BTreeMap::new();
        for r in response.op_responses() {
            if let TxnOpResponse::Get(g) = r {
                for kv in g.kvs() {
                    out.insert(
                        String::from_utf8_lossy(kv.key()).into_owned(),
                        decoded::<SessionRecord>(kv.key(), kv.value()),
                    );
                }
            }
        }
        Ok(out)
    }
}

/// The record in `value`, or `None` (logged) when it cannot be read.
fn decoded<T: for<'de> serde::Deserialize<'de> + record::Versioned>(
    key: &[u8],
    value: &[u8],
) -> Option<T> {
    match record::decode::<T>(value) {
        Ok(r) => Some(r),
        Err(error) => {
            tracing::debug!(key = %String::from_utf8_lossy(key), %error, "skipping an unreadable fleet record");
            None
        }
    }
}

impl SessionDirectoryStore for EtcdSessions {
    fn claim<'a>(&'a self, session: &'a LocalSession) -> BoxFuture<'a, Result<(), FleetError>> {
        Box::pin(async move {
            if self.put_record(&self.record(session)).await? {
                Ok(())
            } else {
                Err(FleetError::NameTaken {
                    name: session.name.clone().unwrap_or_default(),
                })
            }
        })
    }

    fn release<'a>(&'a self, session_id: &'a str) -> BoxFuture<'a, Result<(), FleetError>> {
        Box::pin(async move {
            let key = session_key(&self.server_id, session_id);
            let mut client = self.client.clone();
            let value = match timeout(REQUEST_TIMEOUT, client.get(key.clone(), None)).await {
                Ok(Ok(r)) => r.kvs().first().map(|kv| kv.value().to_vec()),
                Ok(Err(e)) => return Err(FleetError::Unreachable(e.to_string())),
                Err(_) => return Err(FleetError::Unreachable("no answer in time".into())),
            };
            let Some(value) = value else {
                return Ok(());
            };
            let record = decoded::<SessionRecord>(key.as_bytes(), &value);
            self.delete_record(key, record.as_ref()).await
        })
    }

    fn reconcile(&self, local: Vec<LocalSession>) -> BoxFuture<'_, Result<Reconciled, FleetError>> {
        Box::pin(async move {
            let mut existing = self.own_records().await?;
            let mut done = Reconciled::default();
            for session in &local {
                let key = session_key(&self.server_id, &session.session_id);
                if existing.remove(&key).is_some() {
                    continue;
                }
                let record = self.record(session);
                if !self.put_record(&record).await? {
                    // Its name is another session's now: listed without the claim.
                    tracing::warn!(session_id = %session.session_id, "a session's name is claimed by another session of its owner in the fleet; recorded without it");
                    let unnamed = SessionRecord {
                        name: None,
                        ..record
                    };
                    self.put_record(&unnamed).await?;
                }
                done.added += 1;
            }
            for (key, record) in existing {
                self.delete_record(key, record.as_ref()).await?;
                done.deleted += 1;
            }
            Ok(done)
        })
    }

    fn fleet(&self) -> BoxFuture<'_, Result<FleetView, FleetError>> {
        Box::pin(async move {
            match self.read().await {
                Ok(view) => {
                    *self.last.lock() = Some(view.clone());
                    Ok(view)
                }
                Err(error) => match self.last.lock().clone() {
                    Some(mut view) => {
                        view.stale = true;
                        Ok(view)
                    }
                    None => Err(error),
                },
            }
        })
    }
}
