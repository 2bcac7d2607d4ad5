//! Command-line parsing with clap (derive): per-subcommand `--help`, `--version`, short
//! usage errors with a hint, and shell completions generated from the same model.
//!
//! `serve`'s flags all live in [`ServeArgs`], one field per flag, so adding one is one field.

use std::ffi::OsString;
use std::path::PathBuf;

use baton_protocol::ServerId;
use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use clap_complete::Shell;

use crate::certs::{CertsArgs, ClientName, San};

/// `--version`: the crate version and how it was built (no git: the source may be a tarball).
#[cfg(debug_assertions)]
pub(crate) const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (debug build)");
/// `--version`: the crate version and how it was built (no git: the source may be a tarball).
#[cfg(not(debug_assertions))]
pub(crate) const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (release build)");

/// The program name used in help, errors and completion scripts.
pub(crate) const BIN: &str = "baton-host";

/// Run the agent host that baton clients attach to.
#[derive(Debug, Parser)]
#[command(
    name = BIN,
    version = VERSION,
    after_help = "Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) to change the level.\n\
                  Exit status: 0 success (including a drained shutdown on SIGINT/SIGTERM), \
                  1 failure, 2 usage error."
)]
struct Cli {
    #[command(subcommand)]
    command: CliCommand,
}

#[derive(Debug, Subcommand)]
enum CliCommand {
    /// Serve sessions until SIGINT/SIGTERM (then drain and exit 0).
    Serve(Box<ServeArgs>),
    /// Write a development PKI for mutual TLS, or sign one more client certificate.
    ///
    /// Without --client: a CA (ca.pem, ca.key), a server certificate (server.pem,
    /// server.key) for the --san DNS names and IP addresses (without --san: localhost,
    /// 127.0.0.1 and ::1), and a client certificate (client.pem, client.key); keep ca.key
    /// off client machines. With --client NAME: NAME.pem and NAME.key (CN=NAME) signed by the
    /// CA in DIR, and its SHA-256 fingerprint on stdout.
    Certs(CertsCli),
    /// Start an embedded host on a temporary socket, create a session, and stream a
    /// scripted conversation with a tool call through the protocol.
    Demo,
    /// Print a shell completion script (e.g. `baton-host completions bash > ~/.local/share/bash-completion/completions/baton-host`).
    Completions {
        /// The shell to write the script for.
        shell: Shell,
    },
}

/// `--model`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum ModelChoice {
    /// The embedded scripted model.
    #[default]
    Scripted,
    /// An OpenAI-compatible model id (`openai:MODEL`, needs `--base-url`).
    OpenAi(String),
    /// An Anthropic model id (`anthropic:MODEL`).
    Anthropic(String),
    /// A model of a models-file provider (`PROVIDER:MODEL`).
    Listed {
        /// The provider id in the models file.
        provider: String,
        /// The model id.
        id: String,
    },
}

fn parse_model(text: &str) -> Result<ModelChoice, String> {
    match text.split_once(':') {
        None if text == "scripted" => Ok(ModelChoice::Scripted),
        Some(("openai", m)) if !m.is_empty() => Ok(ModelChoice::OpenAi(m.into())),
        Some(("anthropic", m)) if !m.is_empty() => Ok(ModelChoice::Anthropic(m.into())),
        Some((p, m)) if !p.is_empty() && !m.is_empty() && p != "scripted" => {
            Ok(ModelChoice::Listed {
                provider: p.into(),
                id: m.into(),
            })
        }
        _ => Err(
            "expected scripted, openai:MODEL, anthropic:MODEL or PROVIDER:MODEL from --models"
                .into(),
        ),
    }
}

fn parse_server_id(text: &str) -> Result<ServerId, String> {
    ServerId::parse(text).map_err(|_| "not a canonical lowercase UUIDv4".into())
}

fn parse_at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// `serve` options: one field per flag.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ServeArgs {
    /// Where to listen (repeatable): unix:///DIR (socket DIR/<server-id>.sock, mode 0600),
    /// tcp://127.0.0.1:7878 (plain TCP, loopback only), tls://0.0.0.0:7879 (TLS, needs
    /// --tls-cert/--tls-key), or the web listener for browsers: http://127.0.0.1:7880
    /// (loopback only) or https://0.0.0.0:7880 (--tls-cert/--tls-key; no client certificate
    /// asked). Default: a Unix socket in $XDG_RUNTIME_DIR/baton (else /tmp/baton-<uid>),
    /// where `baton` looks; it is also added when every --listen is a web one.
    #[arg(long, value_name = "URL")]
    pub(crate) listen: Vec<String>,
    /// Session transcripts (default $XDG_DATA_HOME/baton/sessions, else
    /// ~/.local/share/baton/sessions).
    #[arg(long, value_name = "DIR")]
    pub(crate) sessions_dir: Option<PathBuf>,
    /// Server identity (default: kept in <sessions-dir>/server-id).
    #[arg(long, value_name = "UUID", value_parser = parse_server_id)]
    pub(crate) server_id: Option<ServerId>,
    /// Default model: scripted (offline), openai:MODEL (an OpenAI-compatible server, see
    /// --base-url), anthropic:MODEL, or PROVIDER:MODEL from the models file.
    #[arg(long, value_name = "M", default_value = "scripted", value_parser = parse_model)]
    pub(crate) model: ModelChoice,
    /// Endpoint of the --model provider, e.g. https://api.openai.com/v1 or
    /// http://127.0.0.1:8000/v1 (required for openai:, default for anthropic: the public API).
    #[arg(long, value_name = "URL")]
    pub(crate) base_url: Option<String>,
    /// Environment variable holding the --model provider's API key (openai: none by default;
    /// anthropic: ANTHROPIC_API_KEY).
    #[arg(long, value_name = "NAME")]
    pub(crate) api_key_env: Option<String>,
    /// Extra trusted CA certificates (PEM) for the --model provider's HTTPS endpoint.
    #[arg(long, value_name = "PEM")]
    pub(crate) ca_file: Option<PathBuf>,
    /// Send the --model provider's key over plain http:// to a non-loopback host.
    #[arg(long)]
    pub(crate) allow_insecure_key: bool,
    /// Models file (TOML) listing providers and models (default
    /// $XDG_CONFIG_HOME/baton/models.toml, else ~/.config/baton/models.toml, if it exists).
    #[arg(long, value_name = "FILE")]
    pub(crate) models: Option<PathBuf>,
    /// Hello deadline in milliseconds (default 5000).
    #[arg(long, value_name = "N")]
    pub(crate) handshake_timeout_ms: Option<u64>,
    /// Frame limit in bytes (default 16777216).
    #[arg(long, value_name = "N")]
    pub(crate) max_frame_length: Option<u32>,
    /// Certificate chain for tls:// and https:// listeners.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// Its private key.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA.
    #[arg(long, value_name = "PEM")]
    pub(crate) client_ca: Option<PathBuf>,
    /// Allow plain TCP, TLS without --client-ca, or plain http:// on a non-loopback address
    /// (anyone who can connect runs commands; http sends browser cookies in the clear).
    #[arg(long)]
    pub(crate) allow_insecure_remote: bool,
    /// A name the web listener also answers to (repeatable), as browsers reach it: NAME or
    /// NAME:PORT (e.g. behind a proxy). Besides these it answers to its address (and
    /// localhost on loopback) and the certificate's DNS names. The first is the one links
    /// name.
    #[arg(long, value_name = "NAME[:PORT]")]
    pub(crate) web_host: Vec<String>,
    /// Connections at once, over every listener (default 1024); beyond it `hello_error{busy}`.
    /// Each browser tab is one.
    #[arg(long, value_name = "N", value_parser = parse_at_least_one)]
    pub(crate) max_connections: Option<usize>,
    /// Requests in flight on one connection (default 256); beyond it the request gets `busy`.
    #[arg(long, value_name = "N", value_parser = parse_at_least_one)]
    pub(crate) max_requests_per_connection: Option<usize>,
    /// Subscriptions open on one connection (default 256); beyond it `busy`.
    #[arg(long, value_name = "N", value_parser = parse_at_least_one)]
    pub(crate) max_subscriptions_per_connection: Option<usize>,
    /// Access policy (TOML): which identities may see, operate or administer which sessions;
    /// reloaded on SIGHUP (a bad file keeps the old policy; revoked identities are
    /// disconnected). Without it: the host's own Unix user is admin, other Unix users are
    /// refused, each TLS client certificate sees only its own sessions, and tcp:// peers may
    /// do everything (any local account can connect).
    #[arg(long, value_name = "FILE")]
    pub(crate) access: Option<PathBuf>,
    /// Let tools leave the session's working directory and run bash without Landlock
    /// (confinement is on by default).
    #[arg(long)]
    pub(crate) no_confine: bool,
    /// Close a session nobody is attached to after N s idle (reopened on the next attach;
    /// 0 = never; default 600).
    #[arg(long, value_name = "N")]
    pub(crate) idle_timeout_secs: Option<u64>,
    /// Sessions open at once (default 64).
    #[arg(long, value_name = "N", value_parser = parse_at_least_one)]
    pub(crate) max_open_sessions: Option<usize>,
    /// Sessions one client identity may create (default 256).
    #[arg(long, value_name = "N")]
    pub(crate) max_sessions_per_owner: Option<usize>,
    /// Join a fleet on etcd: its client URLs, comma-separated (http://127.0.0.1:2379, or
    /// https://… with --cluster-ca). The host owns its server id there under a lease, before
    /// it opens the sessions directory; a second process anywhere with the same id is
    /// refused.
    #[arg(long, value_name = "URL[,URL...]")]
    pub(crate) cluster: Option<String>,
    /// The CA (PEM) etcd's certificate must chain to (https:// endpoints).
    #[arg(long, value_name = "PEM", requires = "cluster")]
    pub(crate) cluster_ca: Option<PathBuf>,
    /// This host's client certificate (PEM) for etcd's --client-cert-auth.
    #[arg(long, value_name = "PEM", requires_all = ["cluster", "cluster_key"])]
    pub(crate) cluster_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, value_name = "PEM", requires_all = ["cluster", "cluster_cert"])]
    pub(crate) cluster_key: Option<PathBuf>,
    /// The fleet lease's TTL in seconds (default 10, at least 2): a host that dies is
    /// listed live at most this long.
    #[arg(long, value_name = "N", requires = "cluster")]
    pub(crate) cluster_lease_secs: Option<u64>,
    /// What clients dial to reach this host (repeatable): tls://NAME:PORT, tcp://HOST:PORT
    /// or unix:///DIR. Default: the addresses it listens on.
    #[arg(long, value_name = "URL", requires = "cluster")]
    pub(crate) advertise: Vec<String>,
    /// A KEY=VALUE label placement can match (repeatable; each key once).
    #[arg(long, value_name = "KEY=VALUE", requires = "cluster")]
    pub(crate) label: Vec<String>,
}

/// `certs` options as typed; [`CertsArgs`] is what they mean.
#[derive(Debug, clap::Args)]
struct CertsCli {
    /// The PKI directory (created 0700 if missing; no file in it is ever overwritten).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// A DNS name or IP address for the server certificate (repeatable).
    #[arg(long, value_name = "NAME", value_parser = San::parse, conflicts_with = "client")]
    san: Vec<San>,
    /// Sign one more client certificate, NAME.pem and NAME.key, with the CA in DIR.
    #[arg(long, value_name = "NAME", value_parser = ClientName::parse)]
    client: Option<ClientName>,
}

/// A parsed command line.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    Serve(Box<ServeArgs>),
    Certs(CertsArgs),
    Demo,
    Completions(Shell),
}

/// The clap model of the command line (for completions and tests).
pub(crate) fn command() -> clap::Command {
    Cli::command()
}

/// Parses the full argument list (program name first).
///
/// # Errors
/// A clap error: help and version requests too (`error.exit_code()` is 0 for those).
pub(crate) fn parse(
    argv: impl IntoIterator<Item = impl Into<OsString> + Clone>,
) -> Result<Command, clap::Error> {
    let mut cmd = Cli::command();
    let matches = cmd.try_get_matches_from_mut(argv)?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))?;
    Ok(match cli.command {
        CliCommand::Serve(s) => {
            if matches!(s.model, ModelChoice::OpenAi(_)) && s.base_url.is_none() {
                return Err(serve_error(
                    &mut cmd,
                    ErrorKind::MissingRequiredArgument,
                    "--model openai:MODEL needs --base-url",
                ));
            }
            if matches!(s.model, ModelChoice::Scripted | ModelChoice::Listed { .. }) {
                let unused = [
                    ("--base-url", s.base_url.is_some()),
                    ("--api-key-env", s.api_key_env.is_some()),
                    ("--ca-file", s.ca_file.is_some()),
                    ("--allow-insecure-key", s.allow_insecure_key),
                ];
                if let Some((flag, _)) = unused.iter().find(|(_, set)| *set) {
                    return Err(serve_error(
                        &mut cmd,
                        ErrorKind::ArgumentConflict,
                        &format!(
                            "{flag} has no effect with this --model (it configures openai:MODEL or anthropic:MODEL; a models-file provider is configured in the file)"
                        ),
                    ));
                }
            }
            Command::Serve(s)
        }
        CliCommand::Certs(c) => Command::Certs(match c.client {
            None => CertsArgs::Create {
                out: c.out,
                sans: c.san,
            },
            Some(client) => CertsArgs::Issue { out: c.out, client },
        }),
        CliCommand::Demo => Command::Demo,
        CliCommand::Completions { shell } => Command::Completions(shell),
    })
}

/// A usage error raised after parsing, shown with `serve`'s usage line like clap's own.
fn serve_error(cmd: &mut clap::Command, kind: ErrorKind, message: &str) -> clap::Error {
    match cmd.find_subcommand_mut("serve") {
        Some(serve) => serve.error(kind, message),
        None => cmd.error(kind, message),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn p(line: &str) -> Result<Command, clap::Error> {
        parse(std::iter::once(BIN).chain(line.split_whitespace()))
    }

    #[test]
    fn the_clap_model_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn serve_options_parse() {
        let Ok(Command::Serve(s)) = p(
            "serve --listen unix:///tmp/x --listen tcp://127.0.0.1:0 --model openai:qwen \
             --base-url http://127.0.0.1:8000/v1 --max-frame-length 1024 --allow-insecure-remote",
        ) else {
            panic!("serve did not parse");
        };
        assert_eq!(s.listen.len(), 2);
        assert_eq!(s.model, ModelChoice::OpenAi("qwen".into()));
        assert_eq!(s.max_frame_length, Some(1024));
        assert!(s.allow_insecure_remote);
        assert!(!s.no_confine, "tools are confined unless asked otherwise");
    }

    #[test]
    fn provider_models_and_their_flags_parse() {
        let Ok(Command::Serve(s)) =
            p("serve --model anthropic:claude-x --ca-file ca.pem --api-key-env K --models m.toml")
        else {
            panic!("serve did not parse");
        };
        assert_eq!(s.model, ModelChoice::Anthropic("claude-x".into()));
        assert_eq!(s.ca_file.as_deref(), Some(Path::new("ca.pem")));
        assert_eq!(s.models.as_deref(), Some(Path::new("m.toml")));
        let Ok(Command::Serve(s)) = p("serve --model local:qwen3:8b") else {
            panic!("serve did not parse");
        };
        assert_eq!(
            s.model,
            ModelChoice::Listed {
                provider: "local".into(),
                id: "qwen3:8b".into()
            }
        );
    }

    #[test]
    fn serve_defaults_to_the_scripted_model() {
        let Ok(Command::Serve(s)) = p("serve") else {
            panic!("serve did not parse");
        };
        assert_eq!(s.model, ModelChoice::Scripted);
        assert!(s.listen.is_empty());
    }

    #[test]
    fn confinement_and_host_limits_parse() {
        let Ok(Command::Serve(s)) = p(
            "serve --no-confine --idle-timeout-secs 0 --max-open-sessions 3 \
             --max-sessions-per-owner 9 --access team.toml",
        ) else {
            panic!("serve did not parse");
        };
        assert!(s.no_confine);
        assert_eq!(s.access, Some(PathBuf::from("team.toml")));
        assert_eq!(s.idle_timeout_secs, Some(0));
        assert_eq!(s.max_open_sessions, Some(3));
        assert_eq!(s.max_sessions_per_owner, Some(9));
    }

    #[test]
    fn web_listener_and_connection_limit_flags_parse() {
        let Ok(Command::Serve(s)) = p(
            "serve --listen http://127.0.0.1:7880 --web-host box.example --web-host proxy:443 \
             --max-connections 4096 --max-requests-per-connection 8 \
             --max-subscriptions-per-connection 9",
        ) else {
            panic!("serve did not parse");
        };
        assert_eq!(s.listen, ["http://127.0.0.1:7880"]);
        assert_eq!(s.web_host, ["box.example", "proxy:443"]);
        assert_eq!(s.max_connections, Some(4096));
        assert_eq!(s.max_requests_per_connection, Some(8));
        assert_eq!(s.max_subscriptions_per_connection, Some(9));
        let Ok(Command::Serve(s)) = p("serve") else {
            panic!("serve did not parse");
        };
        assert_eq!(
            (
                s.max_connections,
                s.max_requests_per_connection,
                s.max_subscriptions_per_connection
            ),
            (None, None, None),
            "the server's defaults unless given"
        );
    }

    #[test]
    fn fleet_flags_parse_and_need_cluster() {
        let Ok(Command::Serve(s)) = p(
            "serve --cluster https://10.0.0.1:2379,https://10.0.0.2:2379 --cluster-ca ca.pem \
             --cluster-cert host.pem --cluster-key host.key --cluster-lease-secs 4 \
             --advertise tls://box-2.example:7879 --advertise unix:///run/baton \
             --label gpu=a100 --label zone=eu-1",
        ) else {
            panic!("serve did not parse");
        };
        assert_eq!(
            s.cluster.as_deref(),
            Some("https://10.0.0.1:2379,https://10.0.0.2:2379")
        );
        assert_eq!(s.cluster_ca.as_deref(), Some(Path::new("ca.pem")));
        assert_eq!(s.cluster_cert.as_deref(), Some(Path::new("host.pem")));
        assert_eq!(s.cluster_key.as_deref(), Some(Path::new("host.key")));
        assert_eq!(s.cluster_lease_secs, Some(4));
        assert_eq!(
            s.advertise,
            ["tls://box-2.example:7879", "unix:///run/baton"]
        );
        assert_eq!(s.label, ["gpu=a100", "zone=eu-1"]);
        for line in [
            "serve --label gpu=a100",
            "serve --advertise tls://h:1",
            "serve --cluster-lease-secs 4",
            "serve --cluster http://127.0.0.1:2379 --cluster-cert c.pem",
        ] {
            assert_eq!(
                p(line).unwrap_err().kind(),
                ErrorKind::MissingRequiredArgument,
                "{line}"
            );
        }
    }

    #[test]
    fn certs_options_parse() {
        let Ok(Command::Certs(CertsArgs::Create { out, sans })) =
            p("certs --out pki --san build-box.example --san 10.0.0.7")
        else {
            panic!("certs did not parse");
        };
        assert_eq!(out, PathBuf::from("pki"));
        assert_eq!(
            sans,
            [
                San::Dns("build-box.example".into()),
                San::Ip("10.0.0.7".parse().unwrap())
            ]
        );
        assert!(matches!(
            p("certs --client bob --out pki"),
            Ok(Command::Certs(CertsArgs::Issue { client, .. })) if client == ClientName::parse("bob").unwrap()
        ));
    }

    #[test]
    fn bad_command_lines_are_usage_errors() {
        for line in [
            "",
            "nope",
            "serve --model gpt",
            "serve --model openai:m",
            "serve --model scripted --base-url http://127.0.0.1:1/v1",
            "serve --api-key-env KEY",
            "serve --model local:qwen --ca-file ca.pem",
            "serve --model anthropic:",
            "serve --model :m",
            "serve --tls-cert a.pem",
            "serve --server-id 123",
            "serve --max-frame-length x",
            "serve --max-open-sessions 0",
            "serve --max-connections 0",
            "serve --max-requests-per-connection 0",
            "serve --max-subscriptions-per-connection x",
            "serve --idle-timeout-secs -1",
            "certs",
            "certs --out d --san bad/name",
            "certs --out d --client ../ca",
            "certs --out d --client a --client b",
            "certs --out d --client bob --san box.example",
            "demo now",
            "completions tcsh",
        ] {
            let error = p(line).err().unwrap_or_else(|| panic!("{line:?} parsed"));
            assert_eq!(error.exit_code(), 2, "{line:?}: {error}");
        }
    }

    #[test]
    fn help_and_version_are_not_failures() {
        for line in ["--help", "serve --help", "certs -h", "--version"] {
            let error = p(line).err().unwrap_or_else(|| panic!("{line:?} parsed"));
            assert_eq!(error.exit_code(), 0, "{line:?}");
        }
    }
}
