//! Shared harness for baton's integration tests: a scriptable [`host::TestHost`], a
//! frame-level [`peer::RawPeer`], and test certificates ([`certs`]).
//!
//! Tests synchronise on events the test host reports (channels and counters), never on
//! sleeps; timeouts here are hang guards only.

pub mod certs;
pub mod host;
pub mod mirror;
#[cfg(target_os = "linux")]
pub mod netns;
pub mod notation;
pub mod peer;
pub mod server;

use std::time::Duration;

use baton_protocol::ServerId;

/// The server id upstream's test server uses.
pub const SERVER_ID: &str = "00000000-0000-4000-8000-000000000001";
/// Another valid server id.
pub const OTHER_SERVER_ID: &str = "00000000-0000-4000-8000-000000000002";
/// How long any single wait may take before a test is declared hung.
pub const HANG_GUARD: Duration = Duration::from_secs(10);

/// [`SERVER_ID`] parsed.
pub fn server_id() -> ServerId {
    ServerId::parse(SERVER_ID).expect("constant is a canonical UUIDv4")
}

/// Awaits `fut`, panicking with `what` if it takes longer than [`HANG_GUARD`].
pub async fn guard<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(HANG_GUARD, fut).await {
        Ok(v) => v,
        Err(_) => panic!("hung waiting for {what}"),
    }
}

/// This process's resident set size in bytes (`VmRSS` in `/proc/self/status`). The test
/// server runs in-process, so this bounds the server's memory too.
pub fn vm_rss_bytes() -> u64 {
    proc_status_bytes("VmRSS:")
}

/// This process's peak resident set size in bytes (`VmHWM` in `/proc/self/status`).
pub fn vm_hwm_bytes() -> u64 {
    proc_status_bytes("VmHWM:")
}

fn proc_status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a /proc/self/status memory line");
    kib * 1024
}

/// A fresh private temporary directory (removed on drop).
#[derive(Debug)]
pub struct TempDir {
    path: std::path::PathBuf,
}

impl TempDir {
    /// Creates `$TMPDIR/baton-test-<random>` with mode 0700.
    pub fn new() -> Self {
        use std::os::unix::fs::DirBuilderExt;
        let mut bytes = [0u8; 6];
        getrandom_fill(&mut bytes);
        let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let path = std::env::temp_dir().join(format!("bt-{name}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .expect("create temp dir");
        Self { path }
    }

    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn getrandom_fill(buf: &mut [u8]) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in buf {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = (x & 0xff) as u8;
    }
}
