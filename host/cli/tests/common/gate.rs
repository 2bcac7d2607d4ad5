//! A gate for the scripted model's tools: a FIFO that a tool running `cat` on blocks on
//! until the test opens it, so "the turn is mid-tool" is a state the test controls rather
//! than a race it hopes to win.

use std::path::{Path, PathBuf};

use super::state::guard;

/// A FIFO at `<dir>/<name>`.
pub(crate) struct Gate {
    path: PathBuf,
}

impl Gate {
    /// A FIFO at `<dir>/gate`.
    pub(crate) fn new(dir: &Path) -> Self {
        Self::named(dir, "gate")
    }

    /// A FIFO at `<dir>/<name>` (for a test with more than one gate).
    pub(crate) fn named(dir: &Path, name: &str) -> Self {
        let path = dir.join(name);
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo {}", path.display());
        Self { path }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The shell command that blocks on the gate: `cat <fifo>`.
    pub(crate) fn command(&self) -> String {
        format!("cat {}", self.path.display())
    }

    /// The prompt that makes the scripted model run [`command`](Self::command).
    pub(crate) fn prompt(&self) -> String {
        format!("run `{}`", self.command())
    }

    /// Lets the tool blocked on the gate finish, printing `text`. Waits (hang-guarded) for
    /// the tool to open the FIFO if it has not yet.
    pub(crate) async fn open(&self, text: &str) {
        let fifo = self.path.clone();
        let text = format!("{text}\n");
        guard(
            "writing the gate",
            tokio::task::spawn_blocking(move || std::fs::write(fifo, text)),
        )
        .await
        .unwrap()
        .unwrap();
    }
}
