//! A throwaway etcd for the fleet tests: Debian's `etcd` on free loopback ports, in a
//! temporary data directory, killed and removed on drop.
//!
//! [`Etcd::start`] returns once etcd says on its log that it serves clients (no fixed wait;
//! a hang guard of [`READY_TIMEOUT`] only). Without an `etcd` binary, [`Etcd::start_or_skip`]
//! reports the test SKIPPED through [`Need::Etcd`], which fails instead
//! under `BATON_REQUIRE_ETCD=1`.

use std::io::{self, BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use crate::Need;

/// How long etcd may take to serve clients before the start is a failure (a hang guard:
/// it takes well under a second on an idle machine).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// What etcd logs once it serves clients: zap's `serving client traffic insecurely` /
/// `securely` (3.4 and later), capnslog's `ready to serve client requests` (older).
const READY: [&str; 2] = ["serving client traffic", "ready to serve client requests"];
/// Log lines kept to explain a failed start.
const KEPT_LINES: usize = 20;

/// TLS for etcd's client port: its certificate and key, and the CA client certificates must
/// chain to (etcd's `--client-cert-auth`).
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// etcd's certificate (PEM), for 127.0.0.1.
    pub cert: PathBuf,
    /// Its key (PEM).
    pub key: PathBuf,
    /// The CA clients' certificates must chain to (PEM).
    pub ca: PathBuf,
}

/// A running etcd. Dropping it kills it and removes its data directory.
#[derive(Debug)]
pub struct Etcd {
    /// `None` between [`Etcd::kill`] and [`Etcd::restart`].
    child: Option<Child>,
    url: String,
    dir: PathBuf,
    /// What [`Etcd::restart`] runs again.
    command: Vec<std::ffi::OsString>,
}

impl Etcd {
    /// An etcd on plain `http://127.0.0.1:<port>`, or `None` after reporting the calling
    /// test SKIPPED when this machine has no `etcd`.
    ///
    /// # Panics
    /// When etcd is there but does not start, or `BATON_REQUIRE_ETCD=1` and it is missing.
    #[track_caller]
    pub fn start_or_skip() -> Option<Self> {
        Self::start_or_skip_with(None)
    }

    /// As [`Etcd::start_or_skip`], serving clients over TLS when `tls` is given.
    ///
    /// # Panics
    /// As [`Etcd::start_or_skip`].
    #[track_caller]
    pub fn start_or_skip_with(tls: Option<&EtcdTls>) -> Option<Self> {
        if !available() {
            Need::Etcd.skip("no etcd binary (Debian: apt-get install etcd-server)");
            return None;
        }
        match Self::start(tls) {
            Ok(etcd) => Some(etcd),
            Err(e) => panic!("etcd did not start: {e}"),
        }
    }

    /// Starts etcd (TLS on its client port when `tls` is given).
    ///
    /// # Errors
    /// etcd cannot be spawned, exits, or is not ready within [`READY_TIMEOUT`].
    pub fn start(tls: Option<&EtcdTls>) -> io::Result<Self> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "baton-etcd-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        // Both ports held at once, so they differ; freed just before etcd binds them.
        let (client, peer) = {
            let a = TcpListener::bind("127.0.0.1:0")?;
            let b = TcpListener::bind("127.0.0.1:0")?;
            (a.local_addr()?.port(), b.local_addr()?.port())
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut cmd = Command::new("etcd");
        cmd.arg("--name")
            .arg("default")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("default={peer_url}")])
            .args(["--logger", "zap", "--log-outputs", "stderr"]);
        if let Some(tls) = tls {
            cmd.arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        let command = cmd.get_args().map(ToOwned::to_owned).collect();
        let mut etcd = Self {
            child: None,
            url,
            dir,
            command,
        };
        etcd.restart()?;
        Ok(etcd)
    }

    /// Kills etcd (SIGKILL), keeping its data for [`Etcd::restart`].
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports and data (after [`Etcd::kill`]); returns once it
    /// serves clients.
    ///
    /// # Errors
    /// As [`Etcd::start`].
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        let mut child = Command::new("etcd")
            .args(&self.command)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| io::Error::other("no stderr"))?;
        self.child = Some(child);
        let (ready_tx, ready) = mpsc::sync_channel(1);
        // Reads the log to its end (so etcd never blocks on a full pipe), saying when it is
        // ready; the thread ends when etcd does.
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut ready_tx = Some(ready_tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if ready_tx.is_none() {
                    continue;
                }
                if READY.iter().any(|r| line.contains(r)) {
                    if let Some(tx) = ready_tx.take() {
                        let _ = tx.send(Ok(()));
                    }
                } else {
                    if kept.len() == KEPT_LINES {
                        kept.remove(0);
                    }
                    kept.push(line);
                }
            }
            if let Some(tx) = ready_tx {
                let _ = tx.send(Err(kept.join("\n")));
            }
        });
        match ready.recv_timeout(READY_TIMEOUT) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(log)) => Err(io::Error::other(format!("etcd exited:\n{log}"))),
            Err(_) => Err(io::Error::other("etcd was not ready in time")),
        }
    }

    /// Its client URL (`http://127.0.0.1:<port>` or `https://…`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its data directory's parent, removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether an `etcd` binary runs here.
fn available() -> bool {
    Command::new("etcd")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
