//! `serve --cluster`: the fleet flags as a [`ClusterConfig`], joining (owning the server id)
//! before the sessions directory is opened, and the member record once the listeners are
//! bound.

use std::path::Path;
use std::time::Duration;

use baton_host::clock::{Clock, SystemClock, format_iso8601};
use baton_host::cluster::membership::hostname;
use baton_host::cluster::record::RECORD_VERSION;
use baton_host::cluster::{ClusterConfig, ClusterTls, HolderRecord, Membership};
use baton_protocol::ServerId;

use crate::Failure;
use crate::args::ServeArgs;

/// The fleet configuration of `args`, checked; `None` without `--cluster`.
pub(crate) fn config(args: &ServeArgs) -> Result<Option<ClusterConfig>, Failure> {
    let Some(endpoints) = &args.cluster else {
        return Ok(None);
    };
    let fail = |e: baton_host::cluster::ConfigError| Failure::new(format!("--cluster: {e}"));
    let mut config = ClusterConfig::new(baton_host::cluster::config::split_endpoints(endpoints));
    if let Some(secs) = args.cluster_lease_secs {
        config.lease_ttl = Duration::from_secs(secs);
    }
    if let Some(ca) = &args.cluster_ca {
        config.tls = Some(ClusterTls {
            ca: ca.clone(),
            cert: args.cluster_cert.clone(),
            key: args.cluster_key.clone(),
        });
    } else if args.cluster_cert.is_some() {
        return Err(Failure::new(
            "--cluster-cert needs --cluster-ca (and https:// etcd endpoints)",
        ));
    }
    config.advertise.clone_from(&args.advertise);
    for label in &args.label {
        config.add_label(label).map_err(fail)?;
    }
    config.validate().map_err(fail)?;
    Ok(Some(config))
}

/// Owns `server_id` in the fleet for this process. The refusal when another process owns it
/// is the one line the error says.
pub(crate) async fn join(
    config: &ClusterConfig,
    server_id: &ServerId,
    args: &ServeArgs,
) -> Result<Membership, Failure> {
    // The holder names what it will advertise; the member record later has the bound
    // addresses.
    let advertise = if config.advertise.is_empty() {
        args.listen
            .iter()
            .filter(|l| !l.starts_with("http://") && !l.starts_with("https://"))
            .cloned()
            .collect()
    } else {
        config.advertise.clone()
    };
    let holder = HolderRecord {
        v: RECORD_VERSION,
        server_id: server_id.to_string(),
        pid: std::process::id(),
        hostname: hostname(),
        advertise,
        since: now(),
    };
    Membership::join(config, server_id, &holder)
        .await
        .map_err(|e| Failure::new(e.to_string()))
}

/// The id a directory already has, read without its lock (the id is claimed in the fleet
/// before the directory is opened); `None` for a new directory.
pub(crate) fn existing_server_id(dir: &Path, file: &str) -> Result<Option<ServerId>, Failure> {
    let path = dir.join(file);
    match std::fs::read_to_string(&path) {
        Ok(text) => ServerId::parse(text.trim()).map(Some).map_err(|_| {
            Failure::new(format!(
                "{} does not hold a UUIDv4 server id (remove it to get a new one)",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Failure::from_error(
            &format!("cannot read {}", path.display()),
            &e,
        )),
    }
}

/// Now, ISO-8601 UTC.
pub(crate) fn now() -> String {
    format_iso8601(SystemClock.now_ms())
}
