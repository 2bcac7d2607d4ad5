//! Instructions retired, from the hardware counters, over a counting window: `perf stat -e
//! instructions -p <this process>` is started when the window opens and stopped with SIGINT
//! when it closes. perf opens the counter with `perf_event_open(2)` (inherited by every
//! thread of the process); driving the syscall from here instead would need new `unsafe`
//! FFI for the same number. Where the kernel gives no counter (this VM: `<not supported>`)
//! or perf is missing, [`probe`] says why once and every figure prints as not measured with
//! that reason; `bench/instructions` (callgrind) is the stable figure there. perf attaches a
//! few milliseconds after the window opens, so a figure may undercount by that share.

use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use crate::figure::Measured;

/// Whether counters can be read here: `Ok`, or why not (for the report).
pub fn probe() -> &'static Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        let out = Command::new("perf")
            .args(["stat", "-x,", "-e", "instructions", "--", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run perf: {e}"))?;
        parse_csv(&String::from_utf8_lossy(&out.stderr))
            .map(|_| ())
            .map_err(|why| format!("`perf stat -e instructions true` says {why}"))
    })
}

/// The `instructions` count of `perf stat -x,` output, or what perf printed instead of one
/// (`<not supported>`, `<not counted>`, an error line).
pub fn parse_csv(stderr: &str) -> Result<f64, String> {
    for line in stderr.lines() {
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() >= 3 && fields[2].starts_with("instructions") {
            return fields[0]
                .trim()
                .parse::<f64>()
                .map_err(|_| fields[0].trim().to_owned());
        }
    }
    Err(format!(
        "no instructions line ({})",
        stderr.lines().next().unwrap_or("no output").trim()
    ))
}

/// An open counting window (nothing running when counters are unavailable).
#[derive(Debug)]
pub struct Window {
    perf: Option<Child>,
}

impl Window {
    /// Starts counting this process's instructions, if counters are available.
    pub fn open() -> Self {
        let perf = probe().as_ref().ok().and_then(|()| {
            Command::new("perf")
                .args(["stat", "-x,", "-e", "instructions", "-p"])
                .arg(std::process::id().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .ok()
        });
        Self { perf }
    }

    /// Stops counting: the instructions counted, or not measured.
    pub fn close(self) -> Measured<f64> {
        let Some(child) = self.perf else {
            return Measured::NotMeasured;
        };
        let pid = rustix::process::Pid::from_child(&child);
        if rustix::process::kill_process(pid, rustix::process::Signal::INT).is_err() {
            return Measured::NotMeasured;
        }
        child
            .wait_with_output()
            .ok()
            .and_then(|o| parse_csv(&String::from_utf8_lossy(&o.stderr)).ok())
            .into()
    }
}

/// The status a "per request" or "per delivery" figure prints when it was not measured.
pub fn not_measured_reason() -> String {
    match probe() {
        Ok(()) => crate::figure::NOT_MEASURED.to_owned(),
        Err(why) => format!("not measured (no hardware counters: {why})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counted_line_gives_the_count() {
        let out = "1234567,,instructions:u,1000000,100.00,,\n";
        assert_eq!(parse_csv(out), Ok(1_234_567.0));
    }

    #[test]
    fn an_unsupported_counter_is_the_reason_not_a_number() {
        let out = "<not supported>,,instructions,0,100.00,,\n";
        assert_eq!(parse_csv(out), Err("<not supported>".to_owned()));
    }

    #[test]
    fn output_without_an_instructions_line_is_an_error_naming_its_first_line() {
        let err = parse_csv("perf: command failed\n").expect_err("no line");
        assert!(err.contains("perf: command failed"), "{err}");
    }
}
