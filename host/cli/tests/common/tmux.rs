//! The terminal harness of the tmux suites: a private tmux server, one window per `baton`
//! run (typed at with `send-keys`, read with `capture-pane`), waits on what is on screen,
//! and [`Setup`], a host in a temporary directory with one session to attach to.
//!
//! Every wait polls the screen for what a person would look for, under the generous hang
//! guard; nothing waits for a fixed time. Without `tmux` a test calls [`have_tmux`], which
//! prints SKIPPED, unless `BATON_REQUIRE_TMUX` is set (CI), where a missing tmux fails.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::{HostProcess, baton, cli, create};

/// Between two looks at the screen while waiting for something to appear.
const POLL: Duration = Duration::from_millis(50);

/// The window size every pane starts with.
pub(crate) const COLUMNS: u16 = 120;
/// See [`COLUMNS`].
pub(crate) const ROWS: u16 = 40;

/// Whether tmux can be used; prints SKIPPED (or fails under `BATON_REQUIRE_TMUX=1`) if not.
pub(crate) fn have_tmux() -> bool {
    let found = std::process::Command::new("tmux")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        baton_testkit::Need::Tmux.skip("tmux is not installed");
    }
    found
}

/// A private tmux server (its own socket) running one command per window.
pub(crate) struct Tmux {
    socket: PathBuf,
    dir: tempfile::TempDir,
}

impl Tmux {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        // Dead panes stay so the exit status and the last words can be read.
        let conf = dir.path().join("tmux.conf");
        std::fs::write(&conf, "set -g remain-on-exit on\nset -g status off\n").unwrap();
        let socket = dir.path().join("tmux.sock");
        let t = Self { socket, dir };
        // The server starts with a placeholder session and this configuration.
        t.tmux(&[
            "-f",
            conf.to_str().unwrap(),
            "new-session",
            "-d",
            "-s",
            "idle",
            "cat",
        ]);
        t
    }

    /// Runs `tmux args…` against this server; its stdout. A failing tmux fails the test.
    pub(crate) fn tmux(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts `baton args…` in a new [`COLUMNS`]×[`ROWS`] window named `name`, with `env`.
    pub(crate) fn attach(&self, name: &str, env: &[(&str, &Path)], args: &[&str]) -> Pane<'_> {
        // One shell command that prints the exit status: a person reads the program's last
        // words on the terminal it leaves, and so does the test.
        let mut words = vec!["env".to_owned()];
        words.extend(
            env.iter()
                .map(|(k, v)| quote(&format!("{k}={}", v.display()))),
        );
        words.push(quote(&baton().display().to_string()));
        words.extend(args.iter().map(|a| quote(a)));
        // Its stderr (the one line a lost session ends with) goes to a file beside the socket.
        let stderr = self.dir.path().join(format!("{name}.stderr"));
        // The shell then stays (reading nothing) rather than exit: tmux 3.3 can drop what a
        // pane printed just before its process ended, and the exit line would be lost.
        let line = format!(
            "{} 2>{}; echo \"[exited $?]\"; exec sleep 86400",
            words.join(" "),
            quote(&stderr.display().to_string())
        );
        let (columns, rows) = (COLUMNS.to_string(), ROWS.to_string());
        let argv = [
            "new-session",
            "-d",
            "-x",
            &columns,
            "-y",
            &rows,
            "-s",
            name,
            &line,
        ];
        self.tmux(&argv);
        Pane {
            tmux: self,
            name: name.to_owned(),
            stderr,
        }
    }
}

/// `a` as one single-quoted shell word.
fn quote(a: &str) -> String {
    format!("'{}'", a.replace('\'', "'\\''"))
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = std::process::Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .status();
    }
}

/// One terminal window.
pub(crate) struct Pane<'a> {
    tmux: &'a Tmux,
    name: String,
    /// Where the program's stderr goes.
    pub(crate) stderr: PathBuf,
}

impl Pane<'_> {
    /// The window's tmux target name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Types `text` literally.
    pub(crate) fn type_text(&self, text: &str) {
        self.tmux.tmux(&["send-keys", "-t", &self.name, "-l", text]);
    }

    /// Presses keys by tmux name (`Enter`, `C-c`, `Up`, `M-Enter`).
    pub(crate) fn keys(&self, keys: &[&str]) {
        let mut argv = vec!["send-keys", "-t", &self.name];
        argv.extend(keys);
        self.tmux.tmux(&argv);
    }

    /// Types `text` and presses Enter.
    pub(crate) fn submit(&self, text: &str) {
        self.type_text(text);
        self.keys(&["Enter"]);
    }

    /// Pastes `text` as a terminal paste: bracketed (`ESC[200~ … ESC[201~`) when the
    /// program asked for bracketed paste, as `paste-buffer -p` does.
    pub(crate) fn paste(&self, text: &str) {
        let buffer = format!("paste-{}", self.name);
        let file = self.tmux.dir.path().join(format!("{buffer}.txt"));
        std::fs::write(&file, text).unwrap();
        self.tmux
            .tmux(&["load-buffer", "-b", &buffer, file.to_str().unwrap()]);
        self.tmux
            .tmux(&["paste-buffer", "-p", "-d", "-b", &buffer, "-t", &self.name]);
    }

    /// What the window shows now.
    pub(crate) fn screen(&self) -> String {
        self.tmux.tmux(&["capture-pane", "-p", "-t", &self.name])
    }

    /// The program's exit status once it has exited.
    pub(crate) fn dead(&self) -> Option<i32> {
        exited(&self.screen())
    }

    /// Waits until the screen satisfies `f`; returns it.
    pub(crate) async fn wait(&self, what: &str, f: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = tokio::time::timeout(super::state::HANG, async {
            loop {
                last = self.screen();
                if f(&last) {
                    return last.clone();
                }
                tokio::time::sleep(POLL).await;
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("hung waiting for {what}; the screen:\n{last}"))
    }

    /// Waits until the screen shows `text`.
    pub(crate) async fn wait_for(&self, text: &str) -> String {
        self.wait(&format!("{text:?} on screen"), |s| s.contains(text))
            .await
    }

    /// Waits for the program to exit; its status.
    pub(crate) async fn exit_status(&self) -> i32 {
        let screen = self
            .wait("the program to exit", |s| exited(s).is_some())
            .await;
        exited(&screen).unwrap()
    }

    /// Waits until the status line says the session is idle.
    pub(crate) async fn wait_idle(&self) {
        self.wait("the session to be idle", |s| {
            status_line(s).contains(" · idle · ")
        })
        .await;
    }

    /// The status line (the screen's last non-empty row).
    pub(crate) fn status_line(&self) -> String {
        status_line(&self.screen()).to_owned()
    }
}

/// The last non-empty row of `screen`: the status line.
pub(crate) fn status_line(screen: &str) -> &str {
    screen
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
}

/// The status in the `[exited N]` line the wrapping shell prints.
fn exited(screen: &str) -> Option<i32> {
    screen.lines().find_map(|l| {
        l.trim()
            .strip_prefix("[exited ")?
            .strip_suffix(']')?
            .parse()
            .ok()
    })
}

/// A host in a temporary directory, one session on it named `tui`, and the environment for
/// `baton` (its history in `<dir>/state`).
pub(crate) struct Setup {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) host: HostProcess,
    pub(crate) url: String,
    pub(crate) id: String,
    pub(crate) state_home: PathBuf,
}

impl Setup {
    /// A host listening in `<dir>/sock` with its sessions in `<dir>/sessions`, and a session.
    pub(crate) async fn new() -> Self {
        let (dir, host) = HostProcess::in_temp_dir().await;
        Self::with_host(dir, host).await
    }

    /// As [`new`](Self::new), with the session's workspace `<dir>/project` holding `files`
    /// (relative path, contents).
    pub(crate) async fn in_workspace(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        for (path, contents) in files {
            let path = project.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, contents).unwrap();
        }
        std::fs::create_dir_all(&project).unwrap();
        let host = HostProcess::in_dir(dir.path()).await;
        let url = host.url.clone();
        let (status, out, err) = cli(
            &url,
            &[
                "create",
                "--name",
                "tui",
                "--cwd",
                project.to_str().unwrap(),
            ],
        )
        .await;
        assert!(status.success(), "create: {err}");
        Self::finish(dir, host, out.trim().to_owned())
    }

    /// As [`new`](Self::new), on a host the caller started (in `dir`, with its own flags).
    pub(crate) async fn with_host(dir: tempfile::TempDir, host: HostProcess) -> Self {
        let id = create(&host.url, "tui").await;
        Self::finish(dir, host, id)
    }

    fn finish(dir: tempfile::TempDir, host: HostProcess, id: String) -> Self {
        let url = host.url.clone();
        let state_home = dir.path().join("state");
        Self {
            dir,
            host,
            url,
            id,
            state_home,
        }
    }

    /// `baton attach <session>` in a new window `name` (`EDITOR=true`).
    pub(crate) fn attach<'t>(&self, tmux: &'t Tmux, name: &str) -> Pane<'t> {
        self.attach_with(tmux, name, &[("EDITOR", Path::new("true"))])
    }

    /// As [`attach`](Self::attach), with more environment (e.g. another `EDITOR`).
    pub(crate) fn attach_with<'t>(
        &self,
        tmux: &'t Tmux,
        name: &str,
        env: &[(&str, &Path)],
    ) -> Pane<'t> {
        self.attach_via(tmux, name, &self.url, env)
    }

    /// As [`attach_with`](Self::attach_with), connecting to `url` (e.g. a relay).
    pub(crate) fn attach_via<'t>(
        &self,
        tmux: &'t Tmux,
        name: &str,
        url: &str,
        env: &[(&str, &Path)],
    ) -> Pane<'t> {
        let mut all = vec![("XDG_STATE_HOME", self.state_home.as_path())];
        all.extend_from_slice(env);
        tmux.attach(name, &all, &["--connect", url, "attach", &self.id])
    }
}
