//! `host/systemd/baton-host.service` against the real command: systemd accepts the unit, and
//! every `--flag` its `ExecStart=` passes is one `baton-host serve` has, so the unit cannot
//! drift from the command.
//!
//! `systemd-analyze` is not on every machine (CI does not install systemd for this): without
//! it the verify test prints `SKIPPED` and passes. The flag test needs only the binary.

#![allow(
    clippy::unwrap_used,
    reason = "test binary: a failed step is the test failing"
)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

/// The unit as shipped; `include_str!` rebuilds this test when it changes.
const UNIT: &str = include_str!("../../systemd/baton-host.service");

/// The unit's file name, which `systemd-analyze` puts on every line it has to say about it.
const UNIT_NAME: &str = "baton-host.service";

/// Where the unit says the binary is installed; the verify test points it at the built one.
const INSTALLED_BINARY: &str = "/usr/local/bin/baton-host";

const HOST: &str = env!("CARGO_BIN_EXE_baton-host");

/// The unit's logical lines: continuation lines (ending in `\`) joined, comments dropped.
fn logical_lines(unit: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut pending = String::new();
    for line in unit.lines() {
        let line = line.trim();
        if pending.is_empty() && (line.starts_with('#') || line.starts_with(';')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(line);
                lines.push(std::mem::take(&mut pending));
            }
        }
    }
    if !pending.is_empty() {
        lines.push(pending);
    }
    lines
}

/// The words of the one `ExecStart=` line.
fn exec_start(unit: &str) -> Vec<String> {
    let lines: Vec<String> = logical_lines(unit)
        .into_iter()
        .filter(|l| l.starts_with("ExecStart="))
        .collect();
    assert_eq!(lines.len(), 1, "the unit has one ExecStart=: {lines:?}");
    let command = lines[0].trim_start_matches("ExecStart=");
    // Plain words only, so splitting at whitespace is what systemd does too.
    assert!(
        !command.contains(['"', '\'']),
        "ExecStart= uses no quoting: {command}"
    );
    command.split_whitespace().map(str::to_owned).collect()
}

/// The long options `--help` defines: the option lines (indented less than the
/// descriptions), `--name` up to the first space, after an optional `-x, `.
fn help_flags(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter(|l| l.len() - l.trim_start().len() < 10)
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.split_once(", ").map_or(l, |(short, rest)| {
                if short.len() == 2 && short.starts_with('-') {
                    rest
                } else {
                    l
                }
            });
            l.starts_with("--")
                .then(|| l.split_whitespace().next().unwrap().to_owned())
        })
        .collect()
}

fn serve_help() -> String {
    let out = Command::new(HOST)
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "serve --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// `systemd-analyze` on `PATH`, if any.
fn systemd_analyze() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("systemd-analyze"))
        .find(|p| p.is_file())
}

#[test]
fn every_flag_of_exec_start_is_a_serve_flag() {
    let words = exec_start(UNIT);
    assert_eq!(
        words.get(..2),
        Some(&[INSTALLED_BINARY.to_owned(), "serve".to_owned()][..]),
        "ExecStart= runs `baton-host serve`: {words:?}"
    );
    let known = help_flags(&serve_help());
    assert!(
        known.contains("--listen") && known.contains("--cluster"),
        "the help parser found the options: {known:?}"
    );
    let used: Vec<&str> = words
        .iter()
        .filter(|w| w.starts_with("--"))
        .map(|w| w.split_once('=').map_or(w.as_str(), |(flag, _)| flag))
        .collect();
    assert!(used.len() > 5, "ExecStart= passes its flags: {used:?}");
    let unknown: Vec<&&str> = used.iter().filter(|f| !known.contains(**f)).collect();
    assert!(
        unknown.is_empty(),
        "flags in ExecStart= that `baton-host serve` does not have: {unknown:?}"
    );
}

#[test]
fn the_unit_restarts_on_failure_and_reloads_with_sighup() {
    let lines = logical_lines(UNIT);
    for wanted in [
        "Restart=on-failure",
        "ExecReload=/bin/kill -HUP $MAINPID",
        // The policy SIGHUP reloads must be the file as it is now, not a credential's copy.
        "--access /etc/baton/access.toml",
    ] {
        assert!(
            lines.iter().any(|l| l.contains(wanted)),
            "the unit has {wanted:?}"
        );
    }
}

#[test]
fn systemd_analyze_verify_accepts_the_unit() {
    let Some(analyze) = systemd_analyze() else {
        println!(
            "SKIPPED systemd_analyze_verify_accepts_the_unit: no systemd-analyze on this machine"
        );
        return;
    };
    assert!(
        UNIT.contains(&format!("ExecStart={INSTALLED_BINARY} ")),
        "ExecStart= names {INSTALLED_BINARY}"
    );
    // verify checks that ExecStart's binary exists and is executable: use the built one.
    let dir = tempfile::tempdir().unwrap();
    let unit: PathBuf = dir.path().join(UNIT_NAME);
    std::fs::write(&unit, UNIT.replace(INSTALLED_BINARY, HOST)).unwrap();
    let out = Command::new(&analyze)
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Unknown keys and values are warnings with status 0: any line about the unit fails it.
    let complaints: Vec<&str> = stderr.lines().filter(|l| l.contains(UNIT_NAME)).collect();
    assert!(
        out.status.success() && complaints.is_empty(),
        "systemd-analyze verify {}: {}\n{stderr}",
        unit.display(),
        out.status
    );
}
