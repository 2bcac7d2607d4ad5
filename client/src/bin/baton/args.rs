//! Command-line parsing with clap (derive): per-subcommand `--help`, `--version`, short usage
//! errors with a hint, environment fallbacks, and the model shell completions are made from.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};
use clap_complete::Shell;

/// The program name used in help, errors and completion scripts.
pub(crate) const BIN: &str = "baton";

/// `--version`: the crate version and how it was built (no git: the source may be a tarball).
#[cfg(debug_assertions)]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (debug build)");
/// `--version`: the crate version and how it was built (no git: the source may be a tarball).
#[cfg(not(debug_assertions))]
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (release build)");

const AFTER_HELP: &str = "\
A <SESSION> is a session id, a session name, or a unique id prefix of at least 4 hex digits.
Profiles: ~/.config/baton/config.toml ($XDG_CONFIG_HOME/baton/config.toml), see --profile.
Exit status: 0 success, 1 the operation failed, 2 usage or configuration error,
3 could not connect (no host, several local hosts, TLS or handshake failure),
4 no such session (or the name or prefix matches several).";

/// Attach a terminal to agent sessions on a baton host.
#[derive(Debug, Parser)]
#[command(name = BIN, version = VERSION, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    /// Connection and output options (allowed before or after the command).
    #[command(flatten)]
    pub(crate) global: Global,
    /// The command.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Options every command takes. Precedence: the flag, then its environment variable, then
/// the selected profile.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct Global {
    /// Where the host listens: unix:///path, tcp://host:port or tls://host:port (default:
    /// the profile's `connect`, else the local host's socket).
    #[arg(
        long,
        global = true,
        value_name = "URL",
        env = "BATON_CONNECT",
        hide_env_values = true
    )]
    pub(crate) connect: Option<String>,
    /// PEM CA certificates to trust for tls:// (default: system roots).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) ca: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --key).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) cert: Option<PathBuf>,
    /// PEM private key for --cert.
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) key: Option<PathBuf>,
    /// Name to verify in the server certificate instead of the --connect host, for
    /// tunnels: --connect tls://127.0.0.1:17879 --server-name build-box.example.
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "BATON_SERVER_NAME",
        hide_env_values = true
    )]
    pub(crate) server_name: Option<String>,
    /// Refuse any other server; with several local hosts, pick this one.
    #[arg(
        long,
        global = true,
        value_name = "UUID",
        env = "BATON_SERVER_ID",
        hide_env_values = true
    )]
    pub(crate) server_id: Option<String>,
    /// Per-request timeout in seconds (default: none for prompts, 30 for other calls).
    #[arg(long, global = true, value_name = "SECS", value_parser = positive_seconds)]
    pub(crate) timeout: Option<f64>,
    /// Machine-readable output (JSON), and errors as one JSON line on stderr.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// The profile to use from the config file (default: its `default_profile`).
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "BATON_PROFILE",
        hide_env_values = true
    )]
    pub(crate) profile: Option<String>,
    /// The config file (default: $XDG_CONFIG_HOME/baton/config.toml, else
    /// ~/.config/baton/config.toml).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        env = "BATON_CONFIG",
        hide_env_values = true
    )]
    pub(crate) config: Option<PathBuf>,
    /// Set when `--server-name` came from `BATON_SERVER_NAME`, which only tls:// endpoints
    /// use (the flag on another endpoint is an error).
    #[arg(skip)]
    pub(crate) server_name_from_env: bool,
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0)
        .ok_or_else(|| "must be a positive number of seconds".to_owned())
}

/// The commands.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub(crate) enum Command {
    /// List sessions as a table (ID, NAME, PHASE, MODEL, UPDATED, CWD); --json: one array.
    Sessions,
    /// List the host's models; --json: one array.
    Models,
    /// Create a session and print its id.
    Create {
        /// A name to address the session by.
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Its working directory on the host.
        #[arg(long, value_name = "DIR")]
        cwd: Option<String>,
        /// Its model, PROVIDER/ID (default: the host's).
        #[arg(long, value_name = "MODEL")]
        model: Option<String>,
        /// Its thinking level.
        #[arg(long, value_name = "LEVEL")]
        thinking: Option<String>,
        /// In a fleet: place it on the least-loaded live host with this label (repeatable:
        /// every one must match).
        #[arg(long = "on", value_name = "KEY=VALUE")]
        on: Vec<String>,
    },
    /// Send a prompt, stream the reply, and exit when the turn settles.
    Prompt {
        /// The session: id, name or unique id prefix.
        session: String,
        /// The prompt (several words are joined with spaces).
        #[arg(required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
        text: Vec<String>,
    },
    /// Follow a session live (read-only).
    Watch {
        /// The session: id, name or unique id prefix.
        session: String,
    },
    /// Interactive: type prompts; /steer T, /abort, /model P/ID, /thinking L, /detach;
    /// Ctrl-C aborts a turn, twice exits.
    Attach {
        /// The session: id, name or unique id prefix.
        session: String,
    },
    /// Delete a session.
    Remove {
        /// The session: id, name or unique id prefix.
        session: String,
    },
    /// Mint a one-time link for a browser and print its URL (the host's web listener).
    Link {
        /// The session it is for (id, name or unique id prefix); omitted: your own rights.
        session: Option<String>,
        /// Read-only: the browser may watch, never change anything.
        #[arg(long)]
        viewer: bool,
        /// How long the link stays usable, e.g. 90s, 10m, 2h (default 5m, at most 24h).
        #[arg(long, value_name = "DURATION", value_parser = crate::links::parse_duration)]
        ttl: Option<std::time::Duration>,
    },
    /// List browser identities and unused links (ID, ROLE, SESSION, CREATED, LAST SEEN);
    /// --json: one array.
    Links,
    /// Revoke a browser identity or an unused link; its connections close at once.
    Unlink {
        /// The id `baton links` shows (`web:` before it allowed).
        id: String,
    },
    /// Print a shell completion script, e.g. `baton completions bash >
    /// ~/.local/share/bash-completion/completions/baton`.
    Completions {
        /// The shell to write the script for.
        shell: Shell,
    },
}

/// The clap model of the command line (for completions).
pub(crate) fn command() -> clap::Command {
    Cli::command()
}

/// Parses the full argument list (program name first).
///
/// # Errors
/// A clap error: help and version requests too (`error.exit_code()` is 0 for those).
pub(crate) fn parse(
    argv: impl IntoIterator<Item = impl Into<OsString> + Clone>,
) -> Result<Cli, clap::Error> {
    let mut cmd = Cli::command();
    let matches = cmd.try_get_matches_from_mut(argv)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))?;
    cli.global.server_name_from_env = from_env(&matches, "server_name");
    Ok(cli)
}

/// Whether `id` was taken from its environment variable (global options may sit on the
/// subcommand's matches).
fn from_env(matches: &ArgMatches, id: &str) -> bool {
    let mut m = Some(matches);
    let mut source = None;
    while let Some(level) = m {
        if let Some(s) = level.value_source(id) {
            source = Some(s);
        }
        m = level.subcommand().map(|(_, sub)| sub);
    }
    source == Some(ValueSource::EnvVariable)
}

/// Whether the raw command line asks for `--json` (for reporting a usage error, when the
/// parse did not get far enough to say).
pub(crate) fn wants_json(argv: &[OsString]) -> bool {
    argv.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Cli, clap::Error> {
        parse(std::iter::once(BIN).chain(s.split_whitespace()))
    }

    #[test]
    fn the_clap_model_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn global_options_may_come_before_or_after_the_command() {
        let a = p("--json prompt abc hello there").unwrap();
        assert!(a.global.json);
        assert_eq!(
            a.command,
            Command::Prompt {
                session: "abc".into(),
                text: vec!["hello".into(), "there".into()]
            }
        );
        let a = p("sessions --connect tcp://127.0.0.1:1 --json").unwrap();
        assert!(a.global.json);
        assert_eq!(a.global.connect.as_deref(), Some("tcp://127.0.0.1:1"));
    }

    #[test]
    fn prompt_text_may_look_like_options() {
        let a = p("prompt abc explain --verbose flags").unwrap();
        assert_eq!(
            a.command,
            Command::Prompt {
                session: "abc".into(),
                text: vec!["explain".into(), "--verbose".into(), "flags".into()]
            }
        );
    }

    #[test]
    fn server_name_is_a_global_option() {
        let a =
            p("--connect tls://127.0.0.1:17879 sessions --server-name build-box.example").unwrap();
        assert_eq!(a.global.server_name.as_deref(), Some("build-box.example"));
        assert!(!a.global.server_name_from_env);
        assert!(p("sessions --server-name").is_err());
    }

    #[test]
    fn create_takes_its_own_options() {
        let a = p("create --name demo --cwd /tmp").unwrap();
        assert_eq!(
            a.command,
            Command::Create {
                name: Some("demo".into()),
                cwd: Some("/tmp".into()),
                model: None,
                thinking: None,
                on: Vec::new(),
            }
        );
    }

    #[test]
    fn link_takes_an_optional_session_viewer_and_ttl() {
        let a = p("link demo --viewer --ttl 10m").unwrap();
        assert_eq!(
            a.command,
            Command::Link {
                session: Some("demo".into()),
                viewer: true,
                ttl: Some(std::time::Duration::from_secs(600)),
            }
        );
        let a = p("link").unwrap();
        assert_eq!(
            a.command,
            Command::Link {
                session: None,
                viewer: false,
                ttl: None
            }
        );
        assert_eq!(
            p("unlink ab12cd34").unwrap().command,
            Command::Unlink {
                id: "ab12cd34".into()
            }
        );
        assert_eq!(p("link --ttl 5").unwrap_err().exit_code(), 2);
        assert_eq!(p("unlink").unwrap_err().exit_code(), 2);
    }

    #[test]
    fn bad_command_lines_are_usage_errors() {
        for line in [
            "",
            "watch",
            "frob",
            "--timeout -1 sessions",
            "--timeout x sessions",
            "sessions extra",
            "prompt abc",
            "completions tcsh",
        ] {
            let e = p(line).err().unwrap_or_else(|| panic!("{line:?} parsed"));
            assert_eq!(e.exit_code(), 2, "{line:?}");
        }
    }

    #[test]
    fn json_is_seen_on_a_line_that_does_not_parse() {
        let argv = |s: &str| -> Vec<OsString> { s.split_whitespace().map(Into::into).collect() };
        assert!(wants_json(&argv("baton frob --json")));
        assert!(!wants_json(&argv("baton prompt x -- --json")));
        assert!(!wants_json(&argv("baton frob")));
    }
}
