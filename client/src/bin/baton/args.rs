//! Command-line parsing (no parser crate: the grammar is small).

use std::path::PathBuf;

pub(crate) const USAGE: &str = "\
usage: baton [options] <command> [args]

Attach a terminal to agent sessions on a baton host.

commands:
  sessions                       list sessions
  models                         list models
  create [--name N] [--cwd D] [--model M] [--thinking L]
                                 create a session and print its id
  prompt <session> <text…>       send a prompt, stream the reply, exit when the turn settles
  watch <session>                follow a session live (read-only)
  attach <session>               interactive: type prompts; /steer T, /abort, /model P/ID,
                                 /thinking L, /detach; Ctrl-C aborts a turn, twice exits
  remove <session>               delete a session

options:
  --connect URL     unix:///path, tcp://host:port or tls://host:port
                    (default: $BATON_CONNECT, else the local host's socket)
  --ca FILE         PEM CA certificates to trust for tls:// (default: system roots)
  --cert FILE       PEM client certificate for mutual TLS (with --key)
  --key FILE        PEM private key for --cert
  --server-name N   name to verify in the server certificate instead of the --connect
                    host, for tunnels: --connect tls://127.0.0.1:17879
                    --server-name build-box.example (default: $BATON_SERVER_NAME)
  --server-id UUID  refuse any other server
  --timeout SECS    per-request timeout (default: none for prompts, 30 for other calls)
  --json            machine-readable output (one JSON value per line)
  -h, --help        this text";

/// A parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Command {
    Sessions,
    Models,
    Create {
        name: Option<String>,
        cwd: Option<String>,
        model: Option<String>,
        thinking: Option<String>,
    },
    Prompt {
        session: String,
        text: String,
    },
    Watch {
        session: String,
    },
    Attach {
        session: String,
    },
    Remove {
        session: String,
    },
}

/// Everything from the command line.
#[derive(Debug, Clone, Default)]
pub(crate) struct Args {
    pub(crate) connect: Option<String>,
    pub(crate) ca: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
    pub(crate) server_name: Option<String>,
    pub(crate) server_id: Option<String>,
    pub(crate) timeout_secs: Option<f64>,
    pub(crate) json: bool,
    pub(crate) command: Option<Command>,
}

/// A usage error (exit status 2). An empty message means "print help".
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

fn value(it: &mut impl Iterator<Item = String>, flag: &str) -> Result<String, UsageError> {
    it.next()
        .ok_or_else(|| UsageError(format!("{flag} needs a value")))
}

pub(crate) fn parse(argv: impl IntoIterator<Item = String>) -> Result<Args, UsageError> {
    let mut args = Args::default();
    let mut rest: Vec<String> = Vec::new();
    let mut it = argv.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Err(UsageError(String::new())),
            "--connect" => args.connect = Some(value(&mut it, &a)?),
            "--ca" => args.ca = Some(value(&mut it, &a)?.into()),
            "--cert" => args.cert = Some(value(&mut it, &a)?.into()),
            "--key" => args.key = Some(value(&mut it, &a)?.into()),
            "--server-name" => args.server_name = Some(value(&mut it, &a)?),
            "--server-id" => args.server_id = Some(value(&mut it, &a)?),
            "--json" => args.json = true,
            "--timeout" => {
                let v = value(&mut it, &a)?;
                let secs = v
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| {
                        UsageError(format!(
                            "--timeout must be a positive number of seconds, not {v:?}"
                        ))
                    })?;
                args.timeout_secs = Some(secs);
            }
            "--" => {
                rest.extend(it.by_ref());
            }
            _ => rest.push(a),
        }
    }
    args.command = Some(command(rest)?);
    Ok(args)
}

fn command(rest: Vec<String>) -> Result<Command, UsageError> {
    let mut it = rest.into_iter();
    let Some(name) = it.next() else {
        return Err(UsageError("a command is required".to_owned()));
    };
    let session = |it: &mut std::vec::IntoIter<String>| {
        it.next()
            .ok_or_else(|| UsageError(format!("{name} needs a session id")))
    };
    let cmd = match name.as_str() {
        "sessions" => Command::Sessions,
        "models" => Command::Models,
        "create" => {
            let (mut name, mut cwd, mut model, mut thinking) = (None, None, None, None);
            while let Some(flag) = it.next() {
                match flag.as_str() {
                    "--name" => name = Some(value(&mut it, &flag)?),
                    "--cwd" => cwd = Some(value(&mut it, &flag)?),
                    "--model" => model = Some(value(&mut it, &flag)?),
                    "--thinking" => thinking = Some(value(&mut it, &flag)?),
                    other => return Err(UsageError(format!("create: unknown option {other:?}"))),
                }
            }
            return Ok(Command::Create {
                name,
                cwd,
                model,
                thinking,
            });
        }
        "prompt" => {
            let session = session(&mut it)?;
            let text = it.collect::<Vec<_>>().join(" ");
            if text.is_empty() {
                return Err(UsageError("prompt needs text".to_owned()));
            }
            return Ok(Command::Prompt { session, text });
        }
        "watch" => Command::Watch {
            session: session(&mut it)?,
        },
        "attach" => Command::Attach {
            session: session(&mut it)?,
        },
        "remove" => Command::Remove {
            session: session(&mut it)?,
        },
        other => return Err(UsageError(format!("unknown command {other:?}"))),
    };
    if let Some(extra) = it.next() {
        return Err(UsageError(format!("unexpected argument {extra:?}")));
    }
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Args, UsageError> {
        parse(s.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn global_options_may_come_before_or_after_the_command() {
        let a = p("--json prompt abc hello there --connect tcp://127.0.0.1:1").unwrap();
        assert!(a.json);
        assert_eq!(a.connect.as_deref(), Some("tcp://127.0.0.1:1"));
        assert_eq!(
            a.command,
            Some(Command::Prompt {
                session: "abc".into(),
                text: "hello there".into()
            })
        );
    }

    #[test]
    fn server_name_is_a_global_option() {
        let a =
            p("--connect tls://127.0.0.1:17879 sessions --server-name build-box.example").unwrap();
        assert_eq!(a.server_name.as_deref(), Some("build-box.example"));
        assert!(
            p("sessions --server-name")
                .unwrap_err()
                .0
                .contains("needs a value")
        );
    }

    #[test]
    fn create_takes_its_own_options() {
        let a = p("create --name demo --cwd /tmp").unwrap();
        assert_eq!(
            a.command,
            Some(Command::Create {
                name: Some("demo".into()),
                cwd: Some("/tmp".into()),
                model: None,
                thinking: None
            })
        );
    }

    #[test]
    fn usage_errors_name_the_problem() {
        assert!(p("").unwrap_err().0.contains("command is required"));
        assert!(p("watch").unwrap_err().0.contains("needs a session"));
        assert!(p("frob").unwrap_err().0.contains("unknown command"));
        assert!(
            p("--timeout -1 sessions")
                .unwrap_err()
                .0
                .contains("--timeout")
        );
        assert!(p("sessions extra").unwrap_err().0.contains("unexpected"));
    }
}
