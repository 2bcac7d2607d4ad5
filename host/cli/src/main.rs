//! `baton-host`: serve agent sessions to baton clients, write development certificates, or
//! run the one-command demo.
//!
//! Exit status: 0 success (including a drained shutdown on SIGINT/SIGTERM), 1 failure,
//! 2 usage error.

mod args;
mod certs;
mod demo;
mod fleet;
mod serve;

use std::io::Write;
use std::process::ExitCode;

use args::Command;
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
    let command = match args::parse(std::env::args_os()) {
        Ok(c) => c,
        // Help and --version go to stdout with status 0; a usage error is clap's short
        // message, the usage line and a hint, on stderr with status 2.
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    if let Command::Completions(shell) = command {
        // Written whole, so a closed pipe is a quiet exit, not a panic in the generator.
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut args::command(), args::BIN, &mut script);
        let _ = std::io::stdout().write_all(&script);
        return ExitCode::SUCCESS;
    }
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
            Command::Completions(_) => Ok(()),
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
