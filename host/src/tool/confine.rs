//! What a bash command may touch: a scrubbed environment, and kernel confinement with Landlock.
//!
//! **Environment.** A command sees only [`PASSED_ENV`] and `LC_*` from the host's environment
//! (or from [`ParentEnv::Given`]), plus `TMPDIR` (the session's temporary directory) and `PWD`;
//! API keys, tokens and cloud credentials the host was started with are not passed on.
//!
//! **Landlock.** Where the kernel has Landlock (Linux 5.13+) and
//! [`BashConfig::confine`](super::BashConfig::confine) is on, the command can read and execute
//! anything the host user can, but create, change or remove files only inside the workspace,
//! the session's temporary directory and [`BashConfig::writable`](super::BashConfig::writable)
//! (plus a few character devices such as `/dev/null`). Network access and signals are not
//! restricted. [`confinement_status`](super::confinement_status) says which applies.
//!
//! Landlock restricts the *calling thread* and everything it starts afterwards, for good. The
//! command is therefore spawned from a fresh, short-lived thread that first restricts itself,
//! then spawns the shell (which inherits the restriction across `exec`), and then ends; the
//! host's other threads are never restricted. This needs no `unsafe` (no `pre_exec`).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use tokio::process::{Child, Command};

use super::error::ToolError;

/// Variables passed from the host's environment to commands (with `LC_*`).
pub const PASSED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TZ",
];

/// `PATH` for commands when the host has none.
const FALLBACK_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Where commands' environment variables come from (before the allowlist is applied).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ParentEnv {
    /// The host process's environment, read when each command starts.
    #[default]
    Process,
    /// These variables instead (tests, embedders that manage the environment themselves).
    Given(Vec<(OsString, OsString)>),
}

/// Whether bash commands run under kernel confinement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confinement {
    /// Landlock confines every command; `abi` is the kernel's Landlock ABI version.
    Active {
        /// The Landlock ABI version the kernel reports.
        abi: u32,
    },
    /// The configuration turned confinement off
    /// ([`BashConfig::confine`](super::BashConfig::confine) is false): commands, and the file
    /// tools, may touch anything the host user can.
    Disabled,
    /// Confinement is on but the kernel cannot provide it: commands run **unconfined** (the
    /// file tools are still confined to the workspace).
    Unavailable {
        /// Why, in a few words.
        reason: String,
    },
}

impl Confinement {
    /// Commands run under Landlock.
    pub fn is_active(&self) -> bool {
        matches!(self, Self::Active { .. })
    }
}

impl fmt::Display for Confinement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Active { abi } => write!(f, "landlock (ABI {abi})"),
            Self::Disabled => f.write_str("disabled"),
            Self::Unavailable { reason } => write!(f, "unavailable ({reason})"),
        }
    }
}

/// What the kernel offers, probed once per process.
pub(crate) fn landlock_support() -> Confinement {
    static PROBE: std::sync::OnceLock<Confinement> = std::sync::OnceLock::new();
    PROBE
        .get_or_init(|| {
            let found = imp::probe();
            if let Confinement::Unavailable { reason } = &found {
                tracing::warn!(%reason, "Landlock is unavailable: bash commands run unconfined");
            }
            found
        })
        .clone()
}

/// The environment a command gets: the allowlisted part of `parent`, then `TMPDIR` and `PWD`.
pub(crate) fn child_env(parent: &ParentEnv, cwd: &Path, tmp: &Path) -> Vec<(OsString, OsString)> {
    let process;
    let vars: &[(OsString, OsString)] = match parent {
        ParentEnv::Process => {
            process = std::env::vars_os().collect::<Vec<_>>();
            &process
        }
        ParentEnv::Given(vars) => vars,
    };
    let mut env: Vec<(OsString, OsString)> = vars
        .iter()
        .filter(|(k, _)| {
            k.to_str()
                .is_some_and(|k| PASSED_ENV.contains(&k) || k.starts_with("LC_"))
        })
        .cloned()
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".into(), FALLBACK_PATH.into()));
    }
    env.push(("TMPDIR".into(), tmp.into()));
    env.push(("PWD".into(), cwd.into()));
    env
}

/// Directories a confined command may write in.
#[derive(Debug, Clone)]
pub(crate) struct Writable {
    /// The workspace, the temporary directory, then the configured extras.
    pub(crate) dirs: Vec<PathBuf>,
}

/// Spawns `command`, under Landlock when `writable` is given and the kernel supports it.
/// Returns whether the command is confined.
///
/// # Errors
/// The command could not be started, or the kernel has Landlock but the rules could not be
/// applied (the command is then not run at all rather than run unconfined).
pub(crate) async fn spawn(
    mut command: Command,
    writable: Option<Writable>,
) -> Result<(Child, bool), ToolError> {
    let Some(writable) = writable.filter(|_| landlock_support().is_active()) else {
        let child = command.spawn().map_err(|e| spawn_error(&command, &e))?;
        return Ok((child, false));
    };
    let handle = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("baton-confined-spawn".into())
        .spawn(move || {
            // This thread is confined from here on; it only spawns the command and ends.
            let result = imp::restrict_current_thread(&writable).and_then(|()| {
                let _runtime = handle.enter();
                command.spawn().map_err(|e| spawn_error(&command, &e))
            });
            // If the caller is gone the child is dropped here, and `kill_on_drop` kills it.
            let _ = tx.send(result);
        })
        .map_err(|e| ToolError::new(format!("failed to start a spawning thread: {e}")))?;
    let child = rx
        .await
        .map_err(|_| ToolError::new("the confined spawning thread ended without an answer"))??;
    Ok((child, true))
}

fn spawn_error(command: &Command, e: &std::io::Error) -> ToolError {
    ToolError::new(format!(
        "failed to start {}: {e}",
        command.as_std().get_program().to_string_lossy()
    ))
}

#[cfg(target_os = "linux")]
mod imp {
    use landlock::{
        ABI, Access, AccessFs, LandlockStatus, PathBeneath, PathFd, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, path_beneath_rules,
    };

    use super::{Confinement, ToolError, Writable};

    /// The newest ABI whose filesystem rights we use (V5 added `IoctlDev`; later ABIs add
    /// scopes and logging, not filesystem rights). Older kernels get what they support.
    const TARGET_ABI: ABI = ABI::V5;

    /// Character devices commands may open for writing (and reading, and ioctls).
    const DEVICES: &[&str] = &[
        "/dev/null",
        "/dev/zero",
        "/dev/full",
        "/dev/random",
        "/dev/urandom",
        "/dev/tty",
        "/dev/ptmx",
        "/dev/pts",
    ];

    /// Restricts a throwaway thread to learn what the kernel supports.
    pub(super) fn probe() -> Confinement {
        let probe = std::thread::Builder::new()
            .name("baton-landlock-probe".into())
            .spawn(|| {
                Ruleset::default()
                    .handle_access(AccessFs::from_all(TARGET_ABI))?
                    .create()?
                    .restrict_self()
            });
        let status = match probe.map(std::thread::JoinHandle::join) {
            Ok(Ok(Ok(status))) => status,
            Ok(Ok(Err(e))) => {
                return Confinement::Unavailable {
                    reason: format!("Landlock refused a ruleset: {e}"),
                };
            }
            Ok(Err(_)) | Err(_) => {
                return Confinement::Unavailable {
                    reason: "the Landlock probe thread failed".into(),
                };
            }
        };
        match status.landlock {
            LandlockStatus::Available {
                effective_abi,
                kernel_abi,
            } if status.ruleset != RulesetStatus::NotEnforced => Confinement::Active {
                abi: kernel_abi
                    .and_then(|v| u32::try_from(v).ok())
                    .unwrap_or(effective_abi as u32),
            },
            LandlockStatus::NotEnabled => Confinement::Unavailable {
                reason: "Landlock is built into this kernel but not enabled (see the `lsm=` boot parameter)".into(),
            },
            LandlockStatus::NotImplemented => Confinement::Unavailable {
                reason: "this kernel has no Landlock (Linux 5.13 or later, built with it, is needed)".into(),
            },
            LandlockStatus::Available { .. } => Confinement::Unavailable {
                reason: "Landlock did not enforce the ruleset".into(),
            },
        }
    }

    /// Confines the calling thread (and what it starts): read and execute everywhere, write
    /// only in `writable` and the devices.
    pub(super) fn restrict_current_thread(writable: &Writable) -> Result<(), ToolError> {
        let fail = |e: &dyn std::fmt::Display| {
            ToolError::new(format!("could not confine the command with Landlock: {e}"))
        };
        let all = AccessFs::from_all(TARGET_ABI);
        let mut ruleset = Ruleset::default()
            .handle_access(all)
            .map_err(|e| fail(&e))?
            .create()
            .map_err(|e| fail(&e))?
            .add_rules(path_beneath_rules(["/"], AccessFs::from_read(TARGET_ABI)))
            .map_err(|e| fail(&e))?
            .add_rules(path_beneath_rules(DEVICES, AccessFs::from_file(TARGET_ABI)))
            .map_err(|e| fail(&e))?;
        for dir in &writable.dirs {
            // Unlike `path_beneath_rules`, a directory that cannot be opened is an error.
            let fd = PathFd::new(dir).map_err(|e| fail(&format_args!("{}: {e}", dir.display())))?;
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, all))
                .map_err(|e| fail(&e))?;
        }
        let status = ruleset.restrict_self().map_err(|e| fail(&e))?;
        if status.ruleset == RulesetStatus::NotEnforced {
            return Err(fail(&"the kernel did not enforce the ruleset"));
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::{Confinement, ToolError, Writable};

    pub(super) fn probe() -> Confinement {
        Confinement::Unavailable {
            reason: "Landlock is Linux-only".into(),
        }
    }

    pub(super) fn restrict_current_thread(_: &Writable) -> Result<(), ToolError> {
        Err(ToolError::new("Landlock is Linux-only"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_keeps_only_the_allowlist_and_sets_tmpdir_and_pwd() {
        let parent = ParentEnv::Given(
            [
                ("PATH", "/bin"),
                ("HOME", "/home/u"),
                ("LC_ALL", "C.UTF-8"),
                ("OPENAI_API_KEY", "sk-secret"),
                ("GITHUB_TOKEN", "ghp"),
                ("AWS_SECRET_ACCESS_KEY", "x"),
                ("TMPDIR", "/tmp"),
                ("PWD", "/elsewhere"),
            ]
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
        );
        let env = child_env(&parent, Path::new("/w"), Path::new("/w.tmp"));
        let names: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["PATH", "HOME", "LC_ALL", "TMPDIR", "PWD"]);
        assert_eq!(env[3].1, "/w.tmp");
        assert_eq!(env[4].1, "/w");
    }

    #[test]
    fn a_missing_path_gets_a_fallback() {
        let env = child_env(
            &ParentEnv::Given(Vec::new()),
            Path::new("/w"),
            Path::new("/t"),
        );
        assert_eq!(env[0], ("PATH".into(), FALLBACK_PATH.into()));
    }
}
