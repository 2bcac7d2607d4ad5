//! Command-line parsing (no parser crate: the grammar is small).

use std::path::PathBuf;

use baton_protocol::ServerId;

use crate::certs::{CertsArgs, ClientName, San};

pub(crate) const USAGE: &str = "\
usage: baton-host <command> [options]

Run the agent host that baton clients attach to.

commands:
  serve            serve sessions until SIGINT/SIGTERM (then drain and exit 0)
  certs --out DIR [--san NAME]…
                   write a CA for mutual TLS (ca.pem, ca.key), a server certificate
                   (server.pem, server.key) for the --san DNS names and IP addresses
                   (without --san: localhost, 127.0.0.1 and ::1), and a client
                   certificate (client.pem, client.key); keep ca.key off client machines
  certs --out DIR --client NAME
                   sign one more client certificate, NAME.pem and NAME.key (CN=NAME),
                   with the CA in DIR and print its SHA-256 fingerprint
  demo             start an embedded host on a temporary socket, create a session, and
                   stream a scripted conversation with a tool call through the protocol

serve options:
  --listen URL              where to listen (repeatable):
                              unix:///DIR   socket DIR/<server-id>.sock (mode 0600)
                              tcp://127.0.0.1:7878   plain TCP (loopback only)
                              tls://0.0.0.0:7879     TLS (needs --tls-cert/--tls-key)
                            default: a Unix socket in $XDG_RUNTIME_DIR/baton (else
                            /tmp/baton-<uid>), where `baton` looks
  --sessions-dir DIR        session transcripts (default $XDG_DATA_HOME/baton/sessions,
                            else ~/.local/share/baton/sessions)
  --server-id UUID          server identity (default: kept in <sessions-dir>/server-id)
  --model M                 default model: scripted (offline, the default) or
                            openai:MODEL (an OpenAI-compatible server, see --base-url)
  --base-url URL            OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1
  --api-key-env NAME        environment variable holding the API key (optional)
  --handshake-timeout-ms N  hello deadline (default 5000)
  --max-frame-length N      frame limit in bytes (default 16777216)
  --tls-cert PEM            certificate chain for tls:// listeners
  --tls-key PEM             its private key
  --client-ca PEM           require client certificates signed by this CA
  --allow-insecure-remote   allow plain TCP, or TLS without --client-ca, on a
                            non-loopback address (anyone who can connect runs commands)
  --access FILE             access policy (TOML): which identities may see, operate
                            or administer which sessions; reloaded on SIGHUP (a bad
                            file keeps the old policy; revoked identities are
                            disconnected). Without it: the host's own Unix user is
                            admin, other Unix users are refused, each TLS client
                            certificate sees only its own sessions, and tcp:// peers
                            may do everything (any local account can connect)
  --no-confine              let tools leave the session's working directory and run
                            bash without Landlock (confinement is on by default)
  --idle-timeout-secs N     close a session nobody is attached to after N s idle
                            (reopened on the next attach; 0 = never; default 600)
  --max-open-sessions N     sessions open at once (default 64)
  --max-sessions-per-owner N  sessions one client identity may create (default 256)
  -h, --help                this text

Logs go to stderr; set RUST_LOG (e.g. RUST_LOG=debug) to change the level.";

/// A usage error (empty message: help was asked for).
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

/// `--model`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum ModelChoice {
    /// The embedded scripted model.
    #[default]
    Scripted,
    /// An OpenAI-compatible model id.
    OpenAi(String),
}

/// `serve` options.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServeArgs {
    pub(crate) listen: Vec<String>,
    pub(crate) sessions_dir: Option<PathBuf>,
    pub(crate) server_id: Option<ServerId>,
    pub(crate) model: ModelChoice,
    pub(crate) base_url: Option<String>,
    pub(crate) api_key_env: Option<String>,
    pub(crate) handshake_timeout_ms: Option<u64>,
    pub(crate) max_frame_length: Option<u32>,
    pub(crate) tls_cert: Option<PathBuf>,
    pub(crate) tls_key: Option<PathBuf>,
    pub(crate) client_ca: Option<PathBuf>,
    pub(crate) allow_insecure_remote: bool,
    pub(crate) no_confine: bool,
    pub(crate) access: Option<PathBuf>,
    pub(crate) idle_timeout_secs: Option<u64>,
    pub(crate) max_open_sessions: Option<usize>,
    pub(crate) max_sessions_per_owner: Option<usize>,
}

/// A parsed command line.
#[derive(Debug, Clone)]
pub(crate) enum Command {
    Serve(Box<ServeArgs>),
    Certs(CertsArgs),
    Demo,
}

fn value(it: &mut impl Iterator<Item = String>, flag: &str) -> Result<String, UsageError> {
    it.next()
        .ok_or_else(|| UsageError(format!("{flag} needs a value")))
}

fn number<T: std::str::FromStr>(text: &str, flag: &str) -> Result<T, UsageError> {
    text.parse()
        .map_err(|_| UsageError(format!("{flag}: {text:?} is not a valid number")))
}

/// Parses the arguments after the program name.
pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, UsageError> {
    let mut it = args.into_iter();
    let command = it.next().unwrap_or_default();
    let help = |a: &str| a == "-h" || a == "--help";
    match command.as_str() {
        "serve" => {
            let mut s = ServeArgs::default();
            while let Some(flag) = it.next() {
                match flag.as_str() {
                    "--listen" => s.listen.push(value(&mut it, &flag)?),
                    "--sessions-dir" => s.sessions_dir = Some(value(&mut it, &flag)?.into()),
                    "--server-id" => {
                        let v = value(&mut it, &flag)?;
                        s.server_id = Some(ServerId::parse(&v).map_err(|_| {
                            UsageError(format!(
                                "--server-id {v:?} is not a canonical lowercase UUIDv4"
                            ))
                        })?);
                    }
                    "--model" => {
                        let v = value(&mut it, &flag)?;
                        s.model = match v.split_once(':') {
                            None if v == "scripted" => ModelChoice::Scripted,
                            Some(("openai", m)) if !m.is_empty() => ModelChoice::OpenAi(m.into()),
                            _ => {
                                return Err(UsageError(format!(
                                    "--model {v:?}: expected scripted or openai:MODEL"
                                )));
                            }
                        };
                    }
                    "--base-url" => s.base_url = Some(value(&mut it, &flag)?),
                    "--api-key-env" => s.api_key_env = Some(value(&mut it, &flag)?),
                    "--handshake-timeout-ms" => {
                        s.handshake_timeout_ms = Some(number(&value(&mut it, &flag)?, &flag)?);
                    }
                    "--max-frame-length" => {
                        s.max_frame_length = Some(number(&value(&mut it, &flag)?, &flag)?);
                    }
                    "--tls-cert" => s.tls_cert = Some(value(&mut it, &flag)?.into()),
                    "--tls-key" => s.tls_key = Some(value(&mut it, &flag)?.into()),
                    "--client-ca" => s.client_ca = Some(value(&mut it, &flag)?.into()),
                    "--allow-insecure-remote" => s.allow_insecure_remote = true,
                    "--no-confine" => s.no_confine = true,
                    "--access" => s.access = Some(value(&mut it, &flag)?.into()),
                    "--idle-timeout-secs" => {
                        s.idle_timeout_secs = Some(number(&value(&mut it, &flag)?, &flag)?);
                    }
                    "--max-open-sessions" => {
                        let n: usize = number(&value(&mut it, &flag)?, &flag)?;
                        if n == 0 {
                            return Err(UsageError(
                                "--max-open-sessions must be at least 1".into(),
                            ));
                        }
                        s.max_open_sessions = Some(n);
                    }
                    "--max-sessions-per-owner" => {
                        s.max_sessions_per_owner = Some(number(&value(&mut it, &flag)?, &flag)?);
                    }
                    h if help(h) => return Err(UsageError(String::new())),
                    other => return Err(UsageError(format!("unknown serve option {other}"))),
                }
            }
            if matches!(s.model, ModelChoice::OpenAi(_)) && s.base_url.is_none() {
                return Err(UsageError("--model openai:MODEL needs --base-url".into()));
            }
            if s.tls_cert.is_some() != s.tls_key.is_some() {
                return Err(UsageError("--tls-cert and --tls-key go together".into()));
            }
            Ok(Command::Serve(Box::new(s)))
        }
        "certs" => {
            let (mut out, mut sans, mut client) = (None, Vec::new(), None);
            while let Some(flag) = it.next() {
                match flag.as_str() {
                    "--out" => out = Some(PathBuf::from(value(&mut it, &flag)?)),
                    "--san" => sans.push(San::parse(&value(&mut it, &flag)?).map_err(UsageError)?),
                    "--client" if client.is_some() => {
                        return Err(UsageError("--client is given once per run".into()));
                    }
                    "--client" => {
                        client =
                            Some(ClientName::parse(&value(&mut it, &flag)?).map_err(UsageError)?);
                    }
                    h if help(h) => return Err(UsageError(String::new())),
                    other => return Err(UsageError(format!("unknown certs option {other}"))),
                }
            }
            let out = out.ok_or_else(|| UsageError("certs needs --out DIR".into()))?;
            Ok(Command::Certs(match client {
                None => CertsArgs::Create { out, sans },
                Some(_) if !sans.is_empty() => {
                    return Err(UsageError(
                        "--san names the server certificate, which --client does not write".into(),
                    ));
                }
                Some(client) => CertsArgs::Issue { out, client },
            }))
        }
        "demo" => match it.next() {
            None => Ok(Command::Demo),
            Some(h) if help(&h) => Err(UsageError(String::new())),
            Some(other) => Err(UsageError(format!("demo takes no options ({other})"))),
        },
        h if help(h) => Err(UsageError(String::new())),
        "" => Err(UsageError("a command is required".into())),
        other => Err(UsageError(format!("unknown command {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: &str) -> Result<Command, UsageError> {
        parse(line.split_whitespace().map(str::to_owned))
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
            "serve --tls-cert a.pem",
            "serve --server-id 123",
            "serve --max-frame-length x",
            "serve --max-open-sessions 0",
            "serve --idle-timeout-secs -1",
            "certs",
            "certs --out d --san bad/name",
            "certs --out d --client ../ca",
            "certs --out d --client a --client b",
            "certs --out d --client bob --san box.example",
            "demo now",
        ] {
            assert!(p(line).is_err(), "{line:?} parsed");
        }
        assert!(matches!(p("serve --help"), Err(UsageError(m)) if m.is_empty()));
    }
}
