//! The `baton` command line as a user meets it, without a host: help for every command,
//! `--version`, completion scripts, short usage errors, JSON errors, and config-file errors.
//! (Commands against a running host are in `host/cli/tests/cli_baton.rs`.)

use std::path::Path;
use std::process::{Command, Output, Stdio};

use baton_protocol::Value;

const BATON: &str = env!("CARGO_BIN_EXE_baton");

const COMMANDS: [&str; 8] = [
    "sessions",
    "models",
    "create",
    "prompt",
    "watch",
    "attach",
    "remove",
    "completions",
];

/// Runs `baton args…` isolated from the user's environment (no config file, no host).
fn baton(args: &[&str], config_home: &Path) -> Output {
    Command::new(BATON)
        .args(args)
        .env("XDG_CONFIG_HOME", config_home)
        .env("XDG_RUNTIME_DIR", config_home.join("no-runtime"))
        .env_remove("BATON_CONNECT")
        .env_remove("BATON_PROFILE")
        .env_remove("BATON_CONFIG")
        .env_remove("BATON_SERVER_ID")
        .env_remove("BATON_SERVER_NAME")
        .stdin(Stdio::null())
        .output()
        .expect("baton runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The one JSON error line on stderr: (code, message).
fn json_error(o: &Output) -> (String, String) {
    let text = stderr(o);
    assert_eq!(text.lines().count(), 1, "one line: {text:?}");
    let v = Value::from_json(text.trim()).expect("stderr is JSON");
    let e = v
        .as_map()
        .and_then(|m| m.get("error"))
        .and_then(Value::as_map)
        .expect("an error object");
    let get = |k: &str| e.get(k).and_then(Value::as_str).expect(k).to_owned();
    (get("code"), get("message"))
}

#[test]
fn every_command_has_its_own_help() {
    let dir = tempfile::tempdir().unwrap();
    for command in COMMANDS {
        let o = baton(&[command, "--help"], dir.path());
        assert!(o.status.success(), "{command}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(
            text.contains(&format!("Usage: baton {command}")),
            "{command}: {text}"
        );
    }
    let top = stdout(&baton(&["--help"], dir.path()));
    for command in COMMANDS {
        assert!(
            top.contains(command),
            "top-level help lists {command}: {top}"
        );
    }
    assert!(top.contains("Exit status"), "{top}");
}

#[test]
fn version_names_the_crate_version() {
    let dir = tempfile::tempdir().unwrap();
    let o = baton(&["--version"], dir.path());
    assert!(o.status.success());
    assert!(
        stdout(&o).starts_with(&format!("baton {}", env!("CARGO_PKG_VERSION"))),
        "{}",
        stdout(&o)
    );
}

#[test]
fn completions_are_a_script_for_each_shell_naming_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    for shell in ["bash", "zsh", "fish"] {
        let o = baton(&["completions", shell], dir.path());
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        assert!(script.len() > 500, "{shell}: a real script, got {script:?}");
        for command in ["sessions", "attach", "prompt", "completions"] {
            assert!(script.contains(command), "{shell} script lacks {command}");
        }
        assert!(
            script.contains("profile"),
            "{shell} script lacks the --profile option"
        );
    }
}

#[test]
fn a_usage_error_is_short_with_a_hint_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        &["frob"][..],
        &["watch"],
        &["prompt", "abc"],
        &["sessions", "extra"],
        &["--timeout", "-1", "sessions"],
        &["completions", "tcsh"],
    ] {
        let o = baton(args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let text = stderr(&o);
        assert!(text.starts_with("error: "), "{args:?}: {text}");
        assert!(
            text.trim_end()
                .ends_with("For more information, try '--help'."),
            "{args:?}: {text}"
        );
        assert!(
            text.lines().count() <= 8,
            "short, not the full help: {text}"
        );
        assert!(stdout(&o).is_empty());
    }
}

#[test]
fn with_json_a_usage_error_is_one_json_line() {
    let dir = tempfile::tempdir().unwrap();
    let o = baton(&["frob", "--json"], dir.path());
    assert_eq!(o.status.code(), Some(2));
    let (code, message) = json_error(&o);
    assert_eq!(code, "usage");
    assert!(message.contains("frob"), "{message}");
}

#[test]
fn with_json_a_connect_failure_is_one_json_line_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nobody.sock").display().to_string();
    let o = baton(
        &[
            "--json",
            "--connect",
            &format!("unix://{socket}"),
            "sessions",
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let (code, message) = json_error(&o);
    assert_eq!(code, "connect");
    assert!(message.contains("nobody.sock"), "{message}");
    // Without a host to discover, too.
    let o = baton(&["--json", "models"], dir.path());
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(json_error(&o).0, "no_host");
}

#[test]
fn an_unknown_profile_is_an_error_listing_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("baton");
    std::fs::create_dir(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        "[profiles.work]\nconnect = \"tcp://127.0.0.1:1\"\n[profiles.home]\nconnect = \"tcp://127.0.0.1:2\"\n",
    )
    .unwrap();
    let o = baton(&["--profile", "play", "sessions"], dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let text = stderr(&o);
    assert!(
        text.contains("\"play\"") && text.contains("home, work"),
        "{text}"
    );
    let o = baton(&["--json", "--profile", "play", "sessions"], dir.path());
    assert_eq!(json_error(&o).0, "config");
}

#[test]
fn an_unknown_key_in_the_config_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("custom.toml");
    std::fs::write(&file, "[profiles.work]\nconect = \"tcp://127.0.0.1:1\"\n").unwrap();
    let o = baton(
        &["--config", &file.display().to_string(), "sessions"],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let text = stderr(&o);
    assert!(
        text.contains("conect") && text.contains("custom.toml"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
}

#[test]
fn an_explicit_config_file_must_exist() {
    let dir = tempfile::tempdir().unwrap();
    let o = baton(
        &["--config", "/nonexistent/baton.toml", "sessions"],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("/nonexistent/baton.toml"),
        "{}",
        stderr(&o)
    );
}
