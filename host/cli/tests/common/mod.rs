//! Helpers the process-level suites share: the `baton-host` and `baton` binaries, a running
//! `baton-host serve`, and running a command to completion under the hang guard.

#![allow(
    dead_code,
    reason = "each test binary that includes this module uses its own subset of it"
)]

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

use state::guard;

/// The hang guard and `pi.session` state readers the in-process suites use.
#[path = "../../../tests/e2e/state.rs"]
pub(crate) mod state;

/// A host that serves only a fixed session directory, for ids a baton host never makes.
pub(crate) mod directory;
/// A `baton-host serve --cluster` and etcd read as another party would (the etcd suites).
pub(crate) mod fleet;
/// The FIFO gates that hold a scripted tool call until the test lets it finish.
pub(crate) mod gate;
/// A relay whose host→client direction a test can hold (a frozen replica, on demand).
pub(crate) mod relay;
/// The tmux harness of the terminal-UI suites.
pub(crate) mod tmux;

pub(crate) const HOST: &str = env!("CARGO_BIN_EXE_baton-host");

/// The `baton` binary of the client package: `<target>/<profile>/baton`, built first (a
/// binary of another package is not built for this package's tests).
pub(crate) fn baton() -> &'static Path {
    static BATON: OnceLock<PathBuf> = OnceLock::new();
    BATON.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        // <target>/<profile>/deps/process-<hash>
        let profile_dir = exe.parent().unwrap().parent().unwrap();
        let target_dir = profile_dir.parent().unwrap();
        let mut build = std::process::Command::new(env!("CARGO"));
        build
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .args([
                "build",
                "-q",
                "-p",
                "baton-client",
                "--bin",
                "baton",
                "--target-dir",
            ])
            .arg(target_dir);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().unwrap();
        assert!(status.success(), "building the baton CLI failed");
        let path = profile_dir.join("baton");
        assert!(path.exists(), "{} missing after the build", path.display());
        path
    })
}

/// A running `baton-host serve`.
pub(crate) struct HostProcess {
    pub(crate) child: Child,
    pub(crate) lines: Lines<BufReader<ChildStdout>>,
    /// Its stderr, when started with [`HostProcess::start_logged`].
    pub(crate) log: Option<Lines<BufReader<ChildStderr>>>,
    pub(crate) url: String,
    pub(crate) server_id: String,
}

impl HostProcess {
    /// `baton-host serve args…` with `env`, logging warnings to the test's stderr; returns
    /// once the host printed its `listening` line.
    pub(crate) async fn start(args: &[&str], env: &[(&str, &Path)]) -> Self {
        Self::spawn(args, env, None).await
    }

    /// As [`start`](Self::start), with `RUST_LOG=filter` and stderr captured in `log`.
    pub(crate) async fn start_logged(args: &[&str], filter: &str) -> Self {
        Self::spawn(args, &[], Some(filter)).await
    }

    async fn spawn(args: &[&str], env: &[(&str, &Path)], log: Option<&str>) -> Self {
        let mut cmd = Command::new(HOST);
        cmd.arg("serve")
            .args(args)
            .env("RUST_LOG", log.unwrap_or("warn"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if log.is_some() {
            cmd.stderr(Stdio::piped());
        }
        for (k, val) in env {
            cmd.env(k, val);
        }
        Self::from_command(cmd).await
    }

    /// Spawns `cmd`, a `baton-host serve` with stdout piped (and stderr piped when it is to
    /// be kept in `log`); returns once the host printed its `listening` line.
    pub(crate) async fn from_command(mut cmd: Command) -> Self {
        let mut child = cmd.spawn().unwrap();
        let log = child
            .stderr
            .take()
            .map(|stderr| BufReader::new(stderr).lines());
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = guard("listening line", lines.next_line())
            .await
            .unwrap()
            .expect("the host exited before listening");
        let words: Vec<&str> = line.split(' ').collect();
        assert!(
            matches!(words.as_slice(), ["listening", _, "server-id", _]),
            "unexpected first line {line:?}"
        );
        Self {
            url: words[1].to_owned(),
            server_id: words[3].to_owned(),
            child,
            lines,
            log,
        }
    }

    /// A host listening in `<dir>/sock` with its sessions in `<dir>/sessions`.
    pub(crate) async fn in_dir(dir: &Path) -> Self {
        Self::start(
            &[
                "--listen",
                &format!("unix://{}", dir.join("sock").display()),
                "--sessions-dir",
                &dir.join("sessions").display().to_string(),
            ],
            &[],
        )
        .await
    }

    /// As [`in_dir`](Self::in_dir), in a fresh temporary directory (removed when the
    /// returned `TempDir` is dropped).
    pub(crate) async fn in_temp_dir() -> (tempfile::TempDir, Self) {
        let dir = tempfile::tempdir().unwrap();
        let host = Self::in_dir(dir.path()).await;
        (dir, host)
    }

    pub(crate) fn signal(&self, signal: rustix::process::Signal) {
        let pid = self.child.id().and_then(|p| i32::try_from(p).ok()).unwrap();
        rustix::process::kill_process(rustix::process::Pid::from_raw(pid).unwrap(), signal)
            .unwrap();
    }

    /// SIGTERM, then the exit status (the drain must finish).
    /// A captured log is read to its end meanwhile, so the drain never blocks on it.
    pub(crate) async fn terminate(mut self) -> ExitStatus {
        self.signal(rustix::process::Signal::TERM);
        let mut log = self.log.take();
        let drain_log = async {
            if let Some(log) = &mut log {
                while log.next_line().await.unwrap().is_some() {}
            }
        };
        let read_rest = async {
            let mut rest = Vec::new();
            while let Some(l) = self.lines.next_line().await.unwrap() {
                rest.push(l);
            }
            rest
        };
        let ((), rest) = guard("host output after SIGTERM", async {
            tokio::join!(drain_log, read_rest)
        })
        .await;
        assert!(rest.is_empty(), "unexpected output {rest:?}");
        guard("host exit", self.child.wait()).await.unwrap()
    }

    pub(crate) fn socket(&self) -> PathBuf {
        PathBuf::from(self.url.strip_prefix("unix://").unwrap())
    }
}

/// Runs `cmd` to completion (stdin closed, hang-guarded): status, stdout, stderr.
pub(crate) async fn run(what: &str, cmd: &mut Command) -> (ExitStatus, String, String) {
    let out = guard(what, cmd.stdin(Stdio::null()).kill_on_drop(true).output())
        .await
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `baton --connect <url> args…` to completion.
pub(crate) async fn cli(url: &str, args: &[&str]) -> (ExitStatus, String, String) {
    run(
        &format!("baton {args:?}"),
        Command::new(baton()).arg("--connect").arg(url).args(args),
    )
    .await
}

/// `baton create --name NAME` → the new session id.
pub(crate) async fn create(url: &str, name: &str) -> String {
    let (status, out, err) = cli(url, &["create", "--name", name]).await;
    assert!(status.success(), "create: {err}");
    let id = out.trim().to_owned();
    assert_eq!(id.len(), 36, "a session id: {out:?}");
    id
}

/// The permission bits of `path`.
pub(crate) fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// The `pi.session` state of session `id` on the host at `socket`, as a fresh client sees
/// it (attached, subscribed, then closed again).
pub(crate) async fn session_state(socket: &Path, id: &str) -> baton_protocol::Value {
    use baton_client::{Client, ClientConfig, Endpoint};
    let client = guard(
        "connect",
        Client::connect(ClientConfig::new(Endpoint::Unix(socket.to_owned()))),
    )
    .await
    .unwrap();
    let session = guard("attach", client.attach(id)).await.unwrap();
    let sub = guard(
        "subscribe",
        session.subscribe("pi.session", baton_protocol::chord::ServiceMode::Singleton),
    )
    .await
    .unwrap();
    let state = state::member(&sub, "state");
    drop(sub);
    client.close().await;
    state
}

/// Reads `watch`'s output until a line contains `what`; the lines before it.
pub(crate) async fn until(lines: &mut Lines<BufReader<ChildStdout>>, what: &str) -> Vec<String> {
    guard(what, async {
        let mut seen = Vec::new();
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("watch ended after {seen:?}"));
            if line.contains(what) {
                return seen;
            }
            seen.push(line);
        }
    })
    .await
}
