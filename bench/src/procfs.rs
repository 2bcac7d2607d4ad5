//! What the harness reads from `/proc`: CPU time (`stat`, `schedstat`), resident memory
//! (`status`), open fds and the load average. Every reader returns a [`ProcError`] when the
//! file cannot be read or parsed, or when the process it measures has exited, so a figure is
//! never computed from a default; the run fails with that error's one line instead.

use std::io;
use std::path::{Path, PathBuf};

/// Why a `/proc` reading failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The file could not be read (for another process: it has been reaped).
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The read's error.
        #[source]
        source: io::Error,
    },
    /// The file was read but does not hold the field.
    #[error("{path} has no readable {field}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The field looked for.
        field: &'static str,
    },
    /// The process being measured has exited (a zombie, not yet reaped): its CPU figures
    /// would be those of its remains, not of the window.
    #[error("process {pid} exited during the measurement")]
    Exited {
        /// The process.
        pid: u32,
    },
}

/// Whose figures to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// This process (`/proc/self`).
    This,
    /// Another process, e.g. a child of the harness.
    Other(u32),
}

impl Process {
    fn dir(self) -> PathBuf {
        match self {
            Self::This => PathBuf::from("/proc/self"),
            Self::Other(pid) => PathBuf::from(format!("/proc/{pid}")),
        }
    }
}

fn read(path: PathBuf) -> Result<String, ProcError> {
    std::fs::read_to_string(&path).map_err(|source| ProcError::Read { path, source })
}

/// The fields of `/proc/<pid>/stat` after the parenthesised command name (which may itself
/// hold spaces and parentheses): field 3 (state) is index 0, utime (14) index 11, stime (15)
/// index 12.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// User + system CPU seconds in a `/proc/<pid>/stat` line, whose times are in clock ticks of
/// `ticks_per_second` (`sysconf(_SC_CLK_TCK)`).
pub fn parse_stat_cpu_secs(stat: &str, ticks_per_second: u64) -> Option<f64> {
    let f = stat_fields(stat)?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    (ticks_per_second > 0).then(|| (utime + stime) as f64 / ticks_per_second as f64)
}

/// Whether a `/proc/<pid>/stat` line is that of a process that has exited: state `Z`
/// (zombie) or `X`/`x` (dead).
pub fn parse_stat_exited(stat: &str) -> Option<bool> {
    let state = *stat_fields(stat)?.first()?;
    Some(matches!(state, "Z" | "X" | "x"))
}

/// `VmRSS` of a `/proc/<pid>/status` text, in bytes.
pub fn parse_status_rss(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// Clock ticks per second of the times in `/proc/<pid>/stat` (`sysconf(_SC_CLK_TCK)`).
pub fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

/// Fails with [`ProcError::Exited`] if `p` has exited (or with [`ProcError::Read`] if it is
/// gone altogether); this process is always alive.
fn ensure_alive(p: Process) -> Result<(), ProcError> {
    let Process::Other(pid) = p else {
        return Ok(());
    };
    let path = p.dir().join("stat");
    let stat = read(path.clone())?;
    match parse_stat_exited(&stat) {
        Some(false) => Ok(()),
        Some(true) => Err(ProcError::Exited { pid }),
        None => Err(ProcError::Parse {
            path,
            field: "state",
        }),
    }
}

/// User + system CPU seconds of `p` so far, every thread it ever ran included (`stat`; a
/// resolution of one clock tick, 10 ms at the usual 100 Hz).
pub fn cpu_secs(p: Process) -> Result<f64, ProcError> {
    ensure_alive(p)?;
    let path = p.dir().join("stat");
    let stat = read(path.clone())?;
    parse_stat_cpu_secs(&stat, clock_ticks_per_second()).ok_or(ProcError::Parse {
        path,
        field: "utime and stime",
    })
}

/// CPU nanoseconds of every live thread of `p`, summed over `task/*/schedstat`: exact to the
/// nanosecond, unlike the ticks of [`cpu_secs`], which matters for the short windows of the
/// scale curves and for a child. A thread that ends between the listing and its read is
/// left out (its time goes with it); a process that has exited is an error, checked after
/// the sum so that an exit during the sum is caught too.
pub fn cpu_ns(p: Process) -> Result<f64, ProcError> {
    ensure_alive(p)?;
    let dir = p.dir().join("task");
    let tasks = std::fs::read_dir(&dir).map_err(|source| ProcError::Read {
        path: dir.clone(),
        source,
    })?;
    let mut sum = 0.0;
    let mut threads = 0usize;
    for task in tasks {
        let Ok(task) = task else { continue };
        let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let ns = s
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok());
        let ns = ns.ok_or_else(|| ProcError::Parse {
            path: task.path().join("schedstat"),
            field: "run time",
        })?;
        sum += ns;
        threads += 1;
    }
    ensure_alive(p)?;
    if threads == 0 {
        return Err(ProcError::Parse {
            path: dir,
            field: "thread",
        });
    }
    Ok(sum)
}

/// Resident set size of `p` in bytes (`status`, `VmRSS`).
pub fn rss_bytes(p: Process) -> Result<u64, ProcError> {
    let path = p.dir().join("status");
    let status = read(path.clone())?;
    parse_status_rss(&status).ok_or(ProcError::Parse {
        path,
        field: "VmRSS",
    })
}

/// File descriptors this process has open now (`/proc/self/fd`).
pub fn open_fds() -> Result<u64, ProcError> {
    let path = Path::new("/proc/self/fd");
    let dir = std::fs::read_dir(path).map_err(|source| ProcError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(dir.count() as u64)
}

/// `/proc/loadavg` as text, for the report header.
pub fn loadavg() -> Result<String, ProcError> {
    Ok(read(PathBuf::from("/proc/loadavg"))?.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `stat` line whose command name holds a space and a `)`: utime 250, stime 50.
    const STAT: &str = "4242 (a b) c) S 1 4242 4242 0 -1 4194304 103 0 0 0 250 50 0 0 20 0 1 0 115512 3133440 413 18446744073709551615";

    #[test]
    fn stat_cpu_is_utime_plus_stime_in_ticks_of_the_given_rate() {
        assert_eq!(parse_stat_cpu_secs(STAT, 100), Some(3.0));
        assert_eq!(parse_stat_cpu_secs(STAT, 250), Some(1.2));
        assert_eq!(parse_stat_cpu_secs(STAT, 1_000), Some(0.3));
    }

    #[test]
    fn a_stat_line_without_cpu_fields_does_not_parse() {
        assert_eq!(parse_stat_cpu_secs("", 100), None);
        assert_eq!(parse_stat_cpu_secs("4242 (x) S 1 2 3", 100), None);
        assert_eq!(parse_stat_cpu_secs(STAT, 0), None);
    }

    #[test]
    fn the_state_field_tells_an_exited_process() {
        assert_eq!(parse_stat_exited(STAT), Some(false));
        assert_eq!(parse_stat_exited(&STAT.replace(") S ", ") Z ")), Some(true));
        assert_eq!(parse_stat_exited(&STAT.replace(") S ", ") X ")), Some(true));
        assert_eq!(parse_stat_exited("no command name"), None);
    }

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tbaton-bench\nVmPeak:\t  9000 kB\nVmRSS:\t   1234 kB\nThreads:\t3\n";
        assert_eq!(parse_status_rss(status), Some(1234 * 1024));
        assert_eq!(parse_status_rss("Name:\tkthreadd\nThreads:\t1\n"), None);
        assert_eq!(parse_status_rss("VmRSS:\t lots kB\n"), None);
    }

    #[test]
    fn the_clock_tick_rate_is_the_systems() {
        // sysconf(_SC_CLK_TCK) through the C library, against the value the readers use.
        let out = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .expect("getconf runs");
        let tck: u64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("getconf CLK_TCK prints a number");
        assert_eq!(clock_ticks_per_second(), tck);
    }

    #[test]
    fn this_process_reads() {
        assert!(rss_bytes(Process::This).expect("rss") > 0);
        assert!(cpu_ns(Process::This).expect("schedstat") > 0.0);
        assert!(cpu_secs(Process::This).expect("stat") >= 0.0);
        assert!(open_fds().expect("fds") > 0);
    }

    /// Above any `pid_max` (at most 2^22 on Linux).
    const NO_SUCH_PID: u32 = u32::MAX;

    #[test]
    fn every_reader_fails_for_a_process_that_does_not_exist() {
        let gone = Process::Other(NO_SUCH_PID);
        for err in [
            cpu_ns(gone).map(drop),
            cpu_secs(gone).map(drop),
            rss_bytes(gone).map(drop),
        ] {
            let err = err.expect_err("a missing process must not read as 0");
            assert!(
                matches!(&err, ProcError::Read { path, .. } if path.starts_with(format!("/proc/{NO_SUCH_PID}"))),
                "{err:?}"
            );
        }
    }

    #[test]
    fn the_cpu_of_a_child_that_has_exited_is_an_error_not_a_figure() {
        use rustix::process::{Pid, WaitId, WaitIdOptions, waitid};
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        // Wait for the exit but leave the zombie in place (no reap), as a child that dies
        // during a counting window stays until the harness waits for it.
        let raw = Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid");
        waitid(
            WaitId::Pid(raw),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        )
        .expect("waitid");
        let err = cpu_ns(Process::Other(pid)).expect_err("an exited child has no CPU figure");
        assert!(
            matches!(err, ProcError::Exited { pid: p } if p == pid),
            "{err:?}"
        );
        let err = cpu_secs(Process::Other(pid)).expect_err("an exited child has no CPU figure");
        assert!(
            matches!(err, ProcError::Exited { pid: p } if p == pid),
            "{err:?}"
        );
        child.wait().expect("reap");
        let err = cpu_ns(Process::Other(pid)).expect_err("a reaped child has no CPU figure");
        assert!(matches!(err, ProcError::Read { .. }), "{err:?}");
    }
}
