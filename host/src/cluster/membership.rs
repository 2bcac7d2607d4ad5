//! The tokio glue over etcd: claim the server id, keep the lease alive, publish the member
//! record, leave. The decisions are [`Liveness`]'s and [`LoadGate`]'s; this file only does
//! the I/O they ask for and reports [`Health`] to the host.

use std::time::Duration;

use baton_protocol::ServerId;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, Identity, LeaseKeepAliveStream,
    LeaseKeeper, PutOptions, TlsOptions, Txn, TxnOp, TxnOpResponse,
};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::{ClusterConfig, ClusterTls};
use super::error::ClusterError;
use super::keys::{host_key, owner_key};
use super::liveness::{Health, Liveness, Transition};
use super::load::LoadGate;
use super::record::{self, HolderRecord, Load, MemberRecord, RECORD_VERSION};
use crate::spawn::spawn_tracked;

/// How long joining waits for etcd (connecting, granting the lease, the claim).
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a clean shutdown waits for the lease's revocation.
pub const REVOKE_TIMEOUT: Duration = Duration::from_secs(2);
/// A TLS file (CA, certificate, key) longer than this is refused unread.
const MAX_TLS_FILE_BYTES: u64 = 1024 * 1024;

/// This host's place in the fleet: it owns its server id while the lease lives.
///
/// Dropping it stops the keep-alive task without revoking (the keys then expire with the
/// lease); [`Membership::leave`] revokes at once.
pub struct Membership {
    client: Client,
    lease: i64,
    server_id: ServerId,
    health: watch::Receiver<Health>,
    member: watch::Sender<Option<MemberRecord>>,
    tracker: TaskTracker,
    stop: CancellationToken,
}

impl Membership {
    /// Connects to etcd, grants a lease and claims `server_id` for `holder` in one
    /// transaction (`create_revision(owner key) == 0 → put(owner key, holder, lease)`). A
    /// server id that someone holds is refused, never waited for. On success the lease is
    /// kept alive until [`Membership::leave`] or the drop.
    ///
    /// # Errors
    /// [`ClusterError::Owned`] naming the holder; [`ClusterError::Unreachable`] when etcd
    /// does not answer within [`JOIN_TIMEOUT`]; a configuration or TLS file problem.
    pub async fn join(
        config: &ClusterConfig,
        server_id: &ServerId,
        holder: &HolderRecord,
    ) -> Result<Self, ClusterError> {
        config.validate()?;
        let options = connect_options(config.tls.as_ref())?;
        let unreachable = |source: etcd_client::Error| ClusterError::Unreachable {
            endpoints: config.endpoints.join(","),
            source: source.into(),
        };
        let timed_out = || ClusterError::Unreachable {
            endpoints: config.endpoints.join(","),
            source: format!("no answer within {} s", JOIN_TIMEOUT.as_secs()).into(),
        };
        let ttl_secs = i64::try_from(config.lease_ttl.as_secs()).unwrap_or(i64::MAX);
        let sent = Instant::now();
        let (mut client, lease) = timeout(JOIN_TIMEOUT, async {
            let mut client = Client::connect(&config.endpoints, Some(options))
                .await
                .map_err(unreachable)?;
            let grant = client
                .lease_grant(ttl_secs, None)
                .await
                .map_err(unreachable)?;
            Ok::<_, ClusterError>((client, grant))
        })
        .await
        .map_err(|_| timed_out())??;
        let granted_ttl = Duration::from_secs(u64::try_from(lease.ttl()).unwrap_or(0));
        let lease = lease.id();

        let key = owner_key(server_id);
        let claim = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.clone(),
                record::encode(holder),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(key.clone(), None)]);
        let outcome = match timeout(JOIN_TIMEOUT, client.txn(claim)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(ClusterError::Etcd {
                what: "claim",
                source: e.into(),
            }),
            Err(_) => Err(timed_out()),
        };
        let response = match outcome {
            Ok(r) => r,
            Err(e) => {
                revoke(&mut client, lease).await;
                return Err(e);
            }
        };
        if !response.succeeded() {
            let holder = response
                .op_responses()
                .into_iter()
                .find_map(|r| match r {
                    TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
                    TxnOpResponse::Put(_) | TxnOpResponse::Delete(_) | TxnOpResponse::Txn(_) => {
                        None
                    }
                })
                .map_or_else(
                    || "another process (its record vanished meanwhile)".to_owned(),
                    |bytes| match record::decode::<HolderRecord>(&bytes) {
                        Ok(h) => h.describe(),
                        Err(e) => format!("another process ({e})"),
                    },
                );
            revoke(&mut client, lease).await;
            return Err(ClusterError::Owned {
                server_id: server_id.to_string(),
                holder: format!("{holder} (etcd key {key})"),
            });
        }

        let (health_tx, health) = watch::channel(Health::Serving);
        let (member, member_rx) = watch::channel(None);
        let tracker = TaskTracker::new();
        let stop = CancellationToken::new();
        // etcd may round the TTL up to its minimum; what it granted is what counts.
        let ttl = if granted_ttl.is_zero() {
            config.lease_ttl
        } else {
            granted_ttl
        };
        let machine = Liveness::new(sent, ttl);
        spawn_tracked(
            &tracker,
            keep_alive(KeepAlive {
                client: client.clone(),
                lease,
                key: host_key(server_id),
                machine,
                health: health_tx,
                member: member_rx,
                stop: stop.clone(),
            }),
        );
        tracker.close();
        tracing::info!(%server_id, lease, ttl_secs = granted_ttl.as_secs(), "owns its server id in the fleet");
        Ok(Self {
            client,
            lease,
            server_id: server_id.clone(),
            health,
            member,
            tracker,
            stop,
        })
    }

    /// Writes the member record (server id, `advertise`, `labels`, `load`) under the lease;
    /// later [`Membership::set_load`] calls rewrite it, coalesced.
    ///
    /// # Errors
    /// etcd did not take the write within [`JOIN_TIMEOUT`].
    pub async fn register(
        &self,
        advertise: Vec<String>,
        labels: std::collections::BTreeMap<String, String>,
        load: Load,
        since: String,
    ) -> Result<(), ClusterError> {
        let record = MemberRecord {
            v: RECORD_VERSION,
            server_id: self.server_id.to_string(),
            advertise,
            labels,
            load,
            since,
        };
        let mut client = self.client.clone();
        let put = client.put(
            host_key(&self.server_id),
            record::encode(&record),
            Some(PutOptions::new().with_lease(self.lease)),
        );
        match timeout(JOIN_TIMEOUT, put).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                return Err(ClusterError::Etcd {
                    what: "member record write",
                    source: e.into(),
                });
            }
            Err(_) => {
                return Err(ClusterError::Etcd {
                    what: "member record write",
                    source: "no answer in time".into(),
                });
            }
        }
        self.member.send_replace(Some(record));
        Ok(())
    }

    /// The host's load is now `load`; the member record follows within a second.
    pub fn set_load(&self, load: Load) {
        self.member.send_if_modified(|record| match record {
            Some(r) if r.load != load => {
                r.load = load;
                true
            }
            Some(_) | None => false,
        });
    }

    /// This host's session directory in the fleet (records outlive the lease).
    pub fn sessions(&self) -> super::sessions::EtcdSessions {
        super::sessions::EtcdSessions::new(
            self.client.clone(),
            self.server_id.to_string(),
            self.health.clone(),
        )
    }

    /// Whether the host may take new work; changes as the lease is renewed or not.
    pub fn health(&self) -> watch::Receiver<Health> {
        self.health.clone()
    }

    /// Stops renewing and revokes the lease, so both keys vanish at once. Call after the
    /// host drained.
    pub async fn leave(mut self) {
        self.stop.cancel();
        self.tracker.wait().await;
        if *self.health.borrow() != Health::Lost {
            revoke(&mut self.client, self.lease).await;
        }
    }
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("server_id", &self.server_id)
            .field("lease", &self.lease)
            .field("health", &*self.health.borrow())
            .finish_non_exhaustive()
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The hostname the holder record names.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown-host".into())
}

fn connect_options(tls: Option<&ClusterTls>) -> Result<ConnectOptions, ClusterError> {
    let options = ConnectOptions::new()
        .with_connect_timeout(JOIN_TIMEOUT)
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5));
    let Some(tls) = tls else {
        return Ok(options);
    };
    let mut tls_options = TlsOptions::new().ca_certificate(Certificate::from_pem(read(&tls.ca)?));
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        tls_options = tls_options.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(options.with_tls(tls_options))
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, ClusterError> {
    use std::io::Read as _;
    let file_error = |source| ClusterError::TlsFile {
        path: path.to_path_buf(),
        source,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TLS_FILE_BYTES).read_to_end(&mut bytes))
        .map_err(file_error)?;
    Ok(bytes)
}

/// Best effort: a lease that cannot be revoked expires with its TTL.
async fn revoke(client: &mut Client, lease: i64) {
    match timeout(REVOKE_TIMEOUT, client.lease_revoke(lease)).await {
        Ok(Ok(_)) => tracing::info!(lease, "fleet lease revoked"),
        Ok(Err(error)) => {
            tracing::warn!(%error, "cannot revoke the fleet lease; it expires with its TTL")
        }
        Err(_) => {
            tracing::warn!("etcd did not answer the revocation; the lease expires with its TTL")
        }
    }
}

/// What the keep-alive task owns.
struct KeepAlive {
    client: Client,
    lease: i64,
    key: String,
    machine: Liveness,
    health: watch::Sender<Health>,
    member: watch::Receiver<Option<MemberRecord>>,
    stop: CancellationToken,
}

/// What one renewal found.
enum Renewal {
    Alive(Duration),
    Gone,
    Failed(etcd_client::Error),
}

/// Renews every TTL/3, reports [`Health`], rewrites the member record when the load changed.
async fn keep_alive(mut k: KeepAlive) {
    let mut stream: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    let mut gate: Option<LoadGate> = None;
    let mut failing = false;
    loop {
        let now = Instant::now();
        k.machine.handle_timeout(now);
        if report(&mut k.machine, &k.health) {
            return;
        }
        if k.machine.poll_renew(now) {
            let budget = k.machine.attempt_budget(now);
            let renewal = tokio::select! {
                () = k.stop.cancelled() => return,
                r = timeout(budget, renew(&mut k.client, k.lease, &mut stream)) => r,
            };
            let now = Instant::now();
            match renewal {
                Ok(Renewal::Alive(ttl)) => {
                    if failing {
                        tracing::info!("fleet lease renewed again");
                    }
                    failing = false;
                    k.machine.handle_renewed(now, ttl);
                }
                Ok(Renewal::Gone) => k.machine.handle_lease_lost(),
                Ok(Renewal::Failed(error)) => {
                    stream = None;
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(%error, "cannot renew the fleet lease; retrying");
                    }
                    k.machine.handle_renew_failed(now);
                }
                Err(_) => {
                    stream = None;
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!("etcd did not answer a lease renewal in time; retrying");
                    }
                    k.machine.handle_renew_failed(now);
                }
            }
            continue;
        }
        let record = k.member.borrow_and_update().clone();
        if let Some(record) = record {
            let gate = gate.get_or_insert_with(|| LoadGate::new(record.load, now));
            gate.handle_load(record.load);
            if k.machine.health() == Health::Serving
                && let Some(load) = gate.poll_publish(now)
            {
                let mut record = record;
                record.load = load;
                let put = k.client.put(
                    k.key.clone(),
                    record::encode(&record),
                    Some(PutOptions::new().with_lease(k.lease)),
                );
                let budget = k.machine.attempt_budget(now);
                let written = tokio::select! {
                    () = k.stop.cancelled() => return,
                    r = timeout(budget, put) => r,
                };
                if !matches!(written, Ok(Ok(_))) {
                    tracing::debug!("cannot publish the host's load; retrying");
                    gate.handle_failed();
                }
                continue;
            }
        }
        let wake = [
            k.machine.poll_timeout(),
            gate.as_ref().and_then(LoadGate::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(wake) = wake else {
            return;
        };
        tokio::select! {
            () = k.stop.cancelled() => return,
            () = sleep_until(wake) => {}
            changed = k.member.changed() => {
                if changed.is_err() {
                    // The Membership is gone: nobody listens any more.
                    return;
                }
            }
        }
    }
}

/// Publishes the machine's transition, if any; whether the lease is lost.
fn report(machine: &mut Liveness, health: &watch::Sender<Health>) -> bool {
    match machine.poll_transition() {
        Some(Transition::Paused { remaining }) => tracing::warn!(
            remaining_ms = u64::try_from(remaining.as_millis()).unwrap_or(u64::MAX),
            "cannot renew the fleet lease: taking no new connections or sessions until etcd answers"
        ),
        Some(Transition::Overdue) => tracing::warn!(
            "the fleet lease's TTL ran out without a renewal: it may be gone; serving what is open until etcd answers"
        ),
        Some(Transition::Resumed) => tracing::info!("fleet lease renewed: taking new work again"),
        Some(Transition::Lost) => {
            tracing::error!("the fleet lease is gone: another process may own this server id")
        }
        None => {}
    }
    health.send_if_modified(|h| {
        let changed = *h != machine.health();
        *h = machine.health();
        changed
    });
    machine.health() == Health::Lost
}

/// One renewal over the kept-alive stream, opening it first when there is none.
async fn renew(
    client: &mut Client,
    lease: i64,
    stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
) -> Renewal {
    if let Some((keeper, responses)) = stream {
        let answer = match keeper.keep_alive().await {
            Ok(()) => responses.message().await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(Some(r)) if r.ttl() > 0 => {
                return Renewal::Alive(Duration::from_secs(r.ttl().unsigned_abs()));
            }
            Ok(Some(_)) => return Renewal::Gone,
            // The stream broke (etcd restarted, the connection dropped): open another.
            Ok(None) | Err(_) => *stream = None,
        }
    }
    match client.lease_keep_alive(lease).await {
        Ok(pair) => {
            *stream = Some(pair);
            // The opening request renewed it; the TTL it answered is not exposed, so ask.
            match client.lease_time_to_live(lease, None).await {
                Ok(r) if r.ttl() > 0 => {
                    Renewal::Alive(Duration::from_secs(r.granted_ttl().unsigned_abs()))
                }
                Ok(_) => Renewal::Gone,
                Err(e) => Renewal::Failed(e),
            }
        }
        Err(error) => match client.lease_time_to_live(lease, None).await {
            // -1: etcd does not know the lease (expired or revoked).
            Ok(r) if r.ttl() <= 0 => Renewal::Gone,
            Ok(_) | Err(_) => Renewal::Failed(error),
        },
    }
}
