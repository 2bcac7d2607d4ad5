//! `baton-host`: serve agent sessions to baton clients, write development certificates, or
//! run the one-command demo.
//!
//! Exit status: 0 success (including a drained shutdown on SIGINT/SIGTERM), 1 failure,
//! 2 usage error.

mod args;
mod certs;
mod demo;
mod serve;

use std::io::Write;
use std::process::ExitCode;

use args::{Command, USAGE, UsageError};
use tracing_subscriber::EnvFilter;

/// A failure: exit status and one-line message.
#[derive(Debug)]
pub(crate) struct Failure {
    status: u8,
    message: String,
}

impl Failure {
    /// Exit status 1 with `message`.
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            status: 1,
            message: message.into(),
        }
    }

    /// Exit status 1: `context: error` with the error's sources.
    pub(crate) fn from_error(context: &str, error: &(dyn std::error::Error + 'static)) -> Self {
        let mut message = format!("{context}: {error}");
        let mut source = error.source();
        while let Some(s) = source {
            message.push_str(&format!(": {s}"));
            source = s.source();
        }
        Self::new(message)
    }
}

/// Writes one line to stderr (the logger may not be up yet).
fn complain(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

fn main() -> ExitCode {
    let command = match args::parse(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(UsageError(message)) if message.is_empty() => {
            let _ = writeln!(std::io::stdout(), "{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(UsageError(message)) => {
            complain(&format!("baton-host: {message}\n\n{USAGE}"));
            return ExitCode::from(2);
        }
    };
    // The demo's terminal output is the point: keep routine logs out of it.
    let default_level = if matches!(command, Command::Demo) {
        "warn"
    } else {
        "info"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            complain(&format!("baton-host: cannot start the runtime: {e}"));
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match command {
            Command::Serve(s) => serve::run(*s).await,
            Command::Certs(c) => certs::run(&c),
            Command::Demo => demo::run().await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            complain(&format!("baton-host: {}", f.message));
            ExitCode::from(f.status)
        }
    }
}
