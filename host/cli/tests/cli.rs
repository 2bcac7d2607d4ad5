//! The `baton-host` command line: help for every command, `--version`, completion scripts,
//! and short usage errors.

use std::process::{Command, Output, Stdio};

const HOST: &str = env!("CARGO_BIN_EXE_baton-host");

const COMMANDS: [&str; 4] = ["serve", "certs", "demo", "completions"];

fn host(args: &[&str]) -> Output {
    Command::new(HOST)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("baton-host runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_command_has_its_own_help() {
    for command in COMMANDS {
        let o = host(&[command, "--help"]);
        assert!(o.status.success(), "{command}: {}", text(&o.stderr));
        let help = text(&o.stdout);
        assert!(
            help.contains(&format!("Usage: baton-host {command}")),
            "{command}: {help}"
        );
    }
    let serve = text(&host(&["serve", "--help"]).stdout);
    for flag in [
        "--listen",
        "--sessions-dir",
        "--tls-cert",
        "--access",
        "--no-confine",
    ] {
        assert!(serve.contains(flag), "serve --help lists {flag}");
    }
    assert!(
        !text(&host(&["certs", "--help"]).stdout).contains("--listen"),
        "certs' help is its own, not serve's"
    );
}

#[test]
fn version_names_the_crate_version() {
    let o = host(&["--version"]);
    assert!(o.status.success());
    let out = text(&o.stdout);
    assert!(
        out.starts_with(&format!("baton-host {}", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
}

#[test]
fn completions_are_a_script_for_each_shell_naming_the_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let o = host(&["completions", shell]);
        assert!(o.status.success(), "{shell}: {}", text(&o.stderr));
        let script = text(&o.stdout);
        assert!(script.len() > 500, "{shell}: a real script, got {script:?}");
        for word in ["serve", "certs", "demo", "sessions-dir"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
}

#[test]
fn a_usage_error_is_short_with_a_hint_and_exits_2() {
    for args in [
        &["frob"][..],
        &["serve", "--bogus"],
        &["serve", "--model", "gpt"],
        &["serve", "--model", "openai:m"],
        &["serve", "--tls-cert", "a.pem"],
        &["certs"],
        &["demo", "now"],
    ] {
        let o = host(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        let err = text(&o.stderr);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(
            err.trim_end()
                .ends_with("For more information, try '--help'."),
            "{args:?}: {err}"
        );
        assert!(err.lines().count() <= 8, "short, not the full help: {err}");
    }
}
