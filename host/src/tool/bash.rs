//! `bash`: run a shell command in the session's working directory.
//!
//! The command runs as `<shell> -c <command>` in its own process group, with stdin closed and
//! stdout and stderr merged (each stream keeps its own order). On abort or timeout the whole
//! process group is killed with `SIGKILL`, so children the command started die with it.
//!
//! Output is bounded in memory: the model sees at most the last [`OutputLimits::max_lines`]
//! lines / [`OutputLimits::max_bytes`] bytes. When that cuts anything, the output is kept in a
//! file under the session's artefact directory (its first [`OutputLimits::max_file_bytes`]
//! bytes; the command's output goes on being drained, and the tail kept, past that) and its
//! path is reported.
//!
//! The command gets a scrubbed environment and, where the kernel has Landlock, may write only
//! in the workspace and the session's temporary directory (`<artifacts>/tmp`, its `TMPDIR`);
//! see the `confine` module.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use baton_protocol::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::confine::{self, Confinement, ParentEnv, Writable};
use super::{ObjectSchema, Schema, Tool, ToolContext, ToolError, ToolOutput, opt_u64_arg, str_arg};
use crate::BoxFuture;

/// Default [`OutputLimits::max_file_bytes`]: 64 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// How much command output is kept for the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// Most bytes of output kept (the tail).
    pub max_bytes: usize,
    /// Most lines of output kept (the tail).
    pub max_lines: usize,
    /// Most bytes written to the full-output file; later output is drained but not saved.
    pub max_file_bytes: u64,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            max_bytes: 50 * 1024,
            max_lines: 2000,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }
}

/// Configuration of the bash tool and of user `!command`s.
#[derive(Debug, Clone)]
pub struct BashConfig {
    /// The shell binary (`bash` from `PATH` by default).
    pub shell: PathBuf,
    /// Timeout when the call gives none; `None` waits forever (abort still works).
    pub default_timeout: Option<Duration>,
    /// Output bounds.
    pub limits: OutputLimits,
    /// Confine the session's tools (default on): bash commands run under Landlock where the
    /// kernel has it, writing only in the workspace, the session's temporary directory and
    /// [`BashConfig::writable`]; `read`, `write` and `edit` refuse paths outside the workspace.
    /// Off, both may touch anything the host user can. [`confinement_status`] says which
    /// applies.
    pub confine: bool,
    /// More directories confined commands may write in (e.g. a shared build cache).
    pub writable: Vec<PathBuf>,
    /// Where the environment passed on to commands comes from (then filtered to an allowlist).
    pub parent_env: ParentEnv,
}

impl Default for BashConfig {
    fn default() -> Self {
        Self {
            shell: PathBuf::from("bash"),
            default_timeout: Some(Duration::from_secs(300)),
            limits: OutputLimits::default(),
            confine: true,
            writable: Vec::new(),
            parent_env: ParentEnv::Process,
        }
    }
}

/// Whether commands run with `config` are confined, for the session state and the host's
/// startup line. The kernel is probed once per process.
pub fn confinement_status(config: &BashConfig) -> Confinement {
    if !config.confine {
        return Confinement::Disabled;
    }
    confine::landlock_support()
}

/// What one command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BashRun {
    /// The kept output (the tail when truncated), lossily decoded as UTF-8.
    pub output: String,
    /// Exit code; `None` when killed by a signal (abort, timeout) or not started.
    pub exit_code: Option<i32>,
    /// Aborted through the cancellation token.
    pub cancelled: bool,
    /// Killed because the timeout elapsed.
    pub timed_out: bool,
    /// `output` is only the tail.
    pub truncated: bool,
    /// Where the complete output is, when truncated.
    pub full_output_path: Option<PathBuf>,
    /// The output file holds only the first [`OutputLimits::max_file_bytes`].
    pub full_output_capped: bool,
    /// The command ran under Landlock.
    pub confined: bool,
}

/// Runs `command` in `cwd`. `output_name` names the full-output file if one is needed
/// (`<artifacts_dir>/<output_name>.log`); `<artifacts_dir>/tmp` is the command's `TMPDIR`.
///
/// # Errors
/// The shell could not be started (or confined, on a kernel with Landlock), or reading its
/// output failed.
pub async fn run_bash(
    config: &BashConfig,
    command: &str,
    cwd: &Path,
    timeout: Option<Duration>,
    artifacts_dir: &Path,
    output_name: &str,
    cancel: &CancellationToken,
) -> Result<BashRun, ToolError> {
    let tmp = artifacts_dir.join("tmp");
    tokio::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&tmp)
        .await
        .map_err(|e| ToolError::io(&tmp, &e))?;
    let mut shell = Command::new(&config.shell);
    shell
        .arg("-c")
        .arg(command)
        .current_dir(cwd)
        .env_clear()
        .envs(confine::child_env(&config.parent_env, cwd, &tmp))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let writable = config.confine.then(|| Writable {
        dirs: [cwd.to_path_buf(), tmp.clone()]
            .into_iter()
            .chain(config.writable.iter().cloned())
            .collect(),
    });
    let (mut child, confined) = confine::spawn(shell, writable).await?;
    let pid = child.id();
    let (Some(mut stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(ToolError::new("shell pipes were not captured"));
    };
    let file_path = artifacts_dir.join(format!("{}.log", sanitize(output_name)));
    let mut sink = OutputSink::new(config.limits, file_path);
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let sleep = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(sleep);
    let (mut out_open, mut err_open) = (true, true);
    let (mut out_buf, mut err_buf) = (vec![0u8; 8192], vec![0u8; 8192]);
    let mut stop: Option<Stop> = None;
    while out_open || err_open {
        tokio::select! {
            () = cancel.cancelled() => { stop = Some(Stop::Cancelled); break; }
            () = &mut sleep => { stop = Some(Stop::TimedOut); break; }
            n = read_some(&mut stdout, &mut out_buf, out_open) => match n {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) => sink.push(&out_buf[..n]).await?,
            },
            n = read_some(&mut stderr, &mut err_buf, err_open) => match n {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) => sink.push(&err_buf[..n]).await?,
            },
        }
    }
    let exit_code = if stop.is_some() {
        kill_group(pid);
        let _ = child.start_kill();
        let _ = child.wait().await;
        None
    } else {
        tokio::select! {
            status = child.wait() => status.ok().and_then(|s| s.code()),
            () = cancel.cancelled() => { stop = Some(Stop::Cancelled); kill_group(pid); let _ = child.wait().await; None }
            () = &mut sleep => { stop = Some(Stop::TimedOut); kill_group(pid); let _ = child.wait().await; None }
        }
    };
    let full_output_capped = sink.capped();
    let (output, truncated, full_output_path) = sink.finish().await?;
    Ok(BashRun {
        output,
        exit_code,
        cancelled: stop == Some(Stop::Cancelled),
        timed_out: stop == Some(Stop::TimedOut),
        truncated,
        full_output_path,
        full_output_capped,
        confined,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Cancelled,
    TimedOut,
}

/// Reads from `r` when `open`; otherwise never completes (so `select!` ignores it).
async fn read_some<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut [u8],
    open: bool,
) -> std::io::Result<usize> {
    if open {
        r.read(buf).await
    } else {
        std::future::pending().await
    }
}

/// Kills the process group led by `pid` (the shell was started with `process_group(0)`).
fn kill_group(pid: Option<u32>) {
    let Some(pid) = pid
        .and_then(|p| i32::try_from(p).ok())
        .and_then(rustix::process::Pid::from_raw)
    else {
        return;
    };
    if let Err(error) = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL) {
        tracing::debug!(%error, "killing the command's process group failed (already gone?)");
    }
}

fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if s.is_empty() { "output".into() } else { s }
}

/// Bounded output accumulation: everything in memory up to `max_bytes`, then everything in the
/// spill file while memory keeps only a tail.
#[derive(Debug)]
struct OutputSink {
    limits: OutputLimits,
    path: PathBuf,
    file: Option<tokio::fs::File>,
    /// All output while nothing was spilled; afterwards a tail of at least `max_bytes`.
    mem: Vec<u8>,
    total: usize,
    /// Bytes written to the file.
    written: u64,
}

impl OutputSink {
    fn new(limits: OutputLimits, path: PathBuf) -> Self {
        Self {
            limits,
            path,
            file: None,
            mem: Vec::new(),
            total: 0,
            written: 0,
        }
    }

    async fn push(&mut self, chunk: &[u8]) -> Result<(), ToolError> {
        self.total += chunk.len();
        if self.file.is_none() && self.total > self.limits.max_bytes {
            self.file = Some(self.open().await?);
            let head = std::mem::take(&mut self.mem);
            self.write(&head).await?;
            self.mem = head;
        }
        if self.file.is_some() {
            self.write(chunk).await?;
        }
        self.mem.extend_from_slice(chunk);
        let keep = self.limits.max_bytes.max(1);
        if self.file.is_some() && self.mem.len() > keep * 2 {
            self.mem.drain(..self.mem.len() - keep);
        }
        Ok(())
    }

    /// Creates the file readable by the host's user only (0600; its directory 0700), like
    /// every file under the sessions directory.
    async fn open(&self) -> Result<tokio::fs::File, ToolError> {
        if let Some(parent) = self.path.parent() {
            tokio::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .await
                .map_err(|e| ToolError::io(parent, &e))?;
        }
        tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&self.path)
            .await
            .map_err(|e| ToolError::io(&self.path, &e))
    }

    /// Appends to the file, up to [`OutputLimits::max_file_bytes`] in all.
    async fn write(&mut self, bytes: &[u8]) -> Result<(), ToolError> {
        if let Some(f) = &mut self.file {
            let room = self.limits.max_file_bytes.saturating_sub(self.written);
            let n = usize::try_from(room).map_or(bytes.len(), |room| room.min(bytes.len()));
            f.write_all(&bytes[..n])
                .await
                .map_err(|e| ToolError::io(&self.path, &e))?;
            self.written += u64::try_from(n).unwrap_or(u64::MAX);
        }
        Ok(())
    }

    /// More output came than the file may hold.
    fn capped(&self) -> bool {
        u64::try_from(self.total).unwrap_or(u64::MAX) > self.limits.max_file_bytes
    }

    /// (kept output, truncated, full output path).
    async fn finish(mut self) -> Result<(String, bool, Option<PathBuf>), ToolError> {
        let text = String::from_utf8_lossy(&self.mem).into_owned();
        let spilled = self.file.is_some();
        let body = text.strip_suffix('\n').unwrap_or(&text);
        let lines: Vec<&str> = body.split('\n').collect();
        let mut kept: Vec<&str> = Vec::new();
        let mut bytes = 0;
        for line in lines.iter().rev() {
            if kept.len() == self.limits.max_lines || bytes + line.len() + 1 > self.limits.max_bytes
            {
                break;
            }
            bytes += line.len() + 1;
            kept.push(line);
        }
        let truncated = spilled || kept.len() < lines.len();
        if !truncated {
            return Ok((body.to_owned(), false, None));
        }
        kept.reverse();
        let mut output = kept.join("\n");
        if kept.is_empty() {
            // One enormous line: keep its last bytes on a char boundary.
            let start = body.ceil_char_boundary(body.len().saturating_sub(self.limits.max_bytes));
            output = body[start..].to_owned();
        }
        if !spilled {
            self.file = Some(self.open().await?);
            let all = std::mem::take(&mut self.mem);
            self.write(&all).await?;
        }
        if let Some(f) = &mut self.file {
            f.flush().await.map_err(|e| ToolError::io(&self.path, &e))?;
        }
        Ok((output, true, Some(self.path)))
    }
}

/// The `bash` tool.
#[derive(Debug)]
pub struct BashTool {
    config: BashConfig,
    schema: ObjectSchema,
}

impl BashTool {
    /// The tool with `config`.
    pub fn new(config: BashConfig) -> Self {
        Self {
            config,
            schema: ObjectSchema::new()
                .required("command", Schema::String, "Shell command to run")
                .optional("timeout", Schema::integer_min(1), "Timeout in seconds"),
        }
    }
}

impl Tool for BashTool {
    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> &str {
        "Run a shell command in the working directory. Output (stdout and stderr) is truncated to the last 2000 lines or 50 KB; the full output is saved to a file when truncated."
    }

    fn parameters(&self) -> &ObjectSchema {
        &self.schema
    }

    fn execute<'a>(
        &'a self,
        arguments: &'a Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let command = str_arg(arguments, "command")?;
            let timeout = opt_u64_arg(arguments, "timeout")
                .map(Duration::from_secs)
                .or(self.config.default_timeout);
            let run = run_bash(
                &self.config,
                command,
                &ctx.cwd,
                timeout,
                &ctx.artifacts_dir,
                &format!("bash-{}", ctx.tool_call_id),
                &ctx.cancel,
            )
            .await?;
            let mut text = if run.output.is_empty() {
                "(no output)".to_owned()
            } else {
                run.output.clone()
            };
            if let Some(path) = &run.full_output_path {
                if run.full_output_capped {
                    text.push_str(&format!(
                        "\n\n[Output truncated. The first {} bytes of output: {}]",
                        self.config.limits.max_file_bytes,
                        path.display()
                    ));
                } else {
                    text.push_str(&format!(
                        "\n\n[Output truncated. Full output: {}]",
                        path.display()
                    ));
                }
            }
            let mut details = baton_protocol::Map::new();
            details.insert("truncated", Value::Bool(run.truncated));
            details.insert("confined", Value::Bool(run.confined));
            if let Some(path) = &run.full_output_path {
                details.insert("fullOutputPath", path.display().to_string().into());
            }
            if run.cancelled {
                text.push_str("\n\nCommand aborted");
                return Err(ToolError::new(text));
            }
            if run.timed_out {
                let secs = timeout.map_or(0, |t| t.as_secs());
                text.push_str(&format!("\n\nCommand timed out after {secs} seconds"));
                return Err(ToolError::new(text));
            }
            match run.exit_code {
                Some(0) => Ok(ToolOutput::text(text).with_details(Value::Map(details))),
                Some(code) => {
                    text.push_str(&format!("\n\nCommand exited with code {code}"));
                    Err(ToolError::new(text))
                }
                None => {
                    text.push_str("\n\nCommand was killed by a signal");
                    Err(ToolError::new(text))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_confinement_says_so() {
        let config = BashConfig {
            confine: false,
            ..BashConfig::default()
        };
        assert_eq!(confinement_status(&config), Confinement::Disabled);
    }

    fn ctx(dir: &Path, cancel: CancellationToken) -> ToolContext {
        ToolContext {
            cwd: dir.to_path_buf(),
            artifacts_dir: dir.join("artifacts"),
            cancel,
            tool_call_id: "call_1".into(),
        }
    }

    fn args(text: &str) -> Value {
        Value::from_json(text).unwrap()
    }

    #[tokio::test]
    async fn command_runs_in_the_session_working_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("marker.txt"), "x").unwrap();
        let tool = BashTool::new(BashConfig::default());
        let out = tool
            .execute(
                &args(r#"{"command":"ls; echo err >&2"}"#),
                &ctx(dir.path(), CancellationToken::new()),
            )
            .await
            .unwrap();
        let text = out.content[0].as_text().unwrap();
        assert!(text.contains("marker.txt"), "{text}");
        assert!(text.contains("err"), "{text}");
    }

    #[tokio::test]
    async fn nonzero_exit_is_an_error_with_the_code() {
        let dir = tempfile::tempdir().unwrap();
        let tool = BashTool::new(BashConfig::default());
        let err = tool
            .execute(
                &args(r#"{"command":"echo out; exit 3"}"#),
                &ctx(dir.path(), CancellationToken::new()),
            )
            .await
            .unwrap_err();
        assert_eq!(err.message, "out\n\nCommand exited with code 3");
    }

    #[tokio::test]
    async fn long_output_keeps_the_tail_and_the_full_output_in_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = BashConfig {
            limits: OutputLimits {
                max_bytes: 1000,
                max_lines: 10,
                ..OutputLimits::default()
            },
            ..BashConfig::default()
        };
        let run = run_bash(
            &config,
            "seq 1 5000",
            dir.path(),
            None,
            &dir.path().join("artifacts"),
            "seq",
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert!(run.truncated);
        let expected: Vec<String> = (4991..=5000).map(|n| n.to_string()).collect();
        assert_eq!(run.output, expected.join("\n"));
        let full = std::fs::read_to_string(run.full_output_path.unwrap()).unwrap();
        assert_eq!(full.lines().count(), 5000);
        assert!(full.starts_with("1\n2\n"));
    }

    #[tokio::test]
    async fn the_full_output_file_is_readable_by_its_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let config = BashConfig {
            limits: OutputLimits {
                max_bytes: 100,
                max_lines: 3,
                ..OutputLimits::default()
            },
            ..BashConfig::default()
        };
        // Spilled to the file while the command runs, and written once it ended.
        for (name, command) in [("spilled", "seq 1 5000"), ("at-end", "seq 1 10")] {
            let run = run_bash(
                &config,
                command,
                dir.path(),
                None,
                &dir.path().join("artifacts"),
                name,
                &CancellationToken::new(),
            )
            .await
            .unwrap();
            let path = run.full_output_path.unwrap();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(format!("{:o}", mode & 0o777), "600", "{}", path.display());
        }
        let artifacts = std::fs::metadata(dir.path().join("artifacts")).unwrap();
        assert_eq!(
            format!("{:o}", artifacts.permissions().mode() & 0o777),
            "700"
        );
    }

    #[tokio::test]
    async fn one_line_longer_than_the_byte_limit_keeps_its_last_bytes_on_a_char_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let config = BashConfig {
            limits: OutputLimits {
                max_bytes: 5,
                max_lines: 10,
                ..OutputLimits::default()
            },
            ..BashConfig::default()
        };
        // "aé€😀": the last 5 bytes start inside "€", so the kept tail starts at "😀".
        let run = run_bash(
            &config,
            "printf 'a\\303\\251\\342\\202\\254\\360\\237\\230\\200'",
            dir.path(),
            None,
            &dir.path().join("artifacts"),
            "wide",
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert!(run.truncated);
        assert_eq!(run.output, "\u{1F600}");
    }

    #[tokio::test]
    async fn many_short_lines_under_the_byte_limit_are_cut_by_the_line_limit() {
        let dir = tempfile::tempdir().unwrap();
        let config = BashConfig {
            limits: OutputLimits {
                max_bytes: 100_000,
                max_lines: 3,
                ..OutputLimits::default()
            },
            ..BashConfig::default()
        };
        let run = run_bash(
            &config,
            "seq 1 10",
            dir.path(),
            None,
            &dir.path().join("a"),
            "x",
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert_eq!(run.output, "8\n9\n10");
        assert!(run.truncated);
        let full = std::fs::read_to_string(run.full_output_path.unwrap()).unwrap();
        assert_eq!(full.lines().count(), 10);
    }

    #[tokio::test]
    async fn abort_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("held.fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let cancel = CancellationToken::new();
        let config = BashConfig::default();
        // A background grandchild holds the FIFO's write end open for as long as it lives.
        let cmd = format!("sleep 600 > {} & wait", fifo.display());
        let run = {
            let cancel = cancel.clone();
            let dir = dir.path().to_path_buf();
            async move { run_bash(&config, &cmd, &dir, None, &dir.join("a"), "x", &cancel).await }
        };
        let observe = async {
            // Opening the read end completes once the grandchild has opened the write end.
            let mut reader = tokio::fs::File::open(&fifo).await.unwrap();
            cancel.cancel();
            // EOF arrives only when every writer is gone, i.e. the grandchild died.
            let mut rest = Vec::new();
            tokio::time::timeout(Duration::from_secs(60), reader.read_to_end(&mut rest))
                .await
                .expect("the background child survived the abort")
                .unwrap();
        };
        let (run, ()) = tokio::join!(run, observe);
        let run = run.unwrap();
        assert!(run.cancelled);
        assert_eq!(run.exit_code, None);
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_kills_the_command_and_reports_it() {
        let dir = tempfile::tempdir().unwrap();
        let tool = BashTool::new(BashConfig::default());
        let err = tool
            .execute(
                &args(r#"{"command":"sleep 600","timeout":1}"#),
                &ctx(dir.path(), CancellationToken::new()),
            )
            .await
            .unwrap_err();
        assert!(
            err.message.ends_with("Command timed out after 1 seconds"),
            "{}",
            err.message
        );
    }
}
