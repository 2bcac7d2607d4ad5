//! `baton attach`: an interactive line client on one session (prompts, slash commands,
//! Ctrl-C to abort). The terminal UI replaces this file; [`run`] is the seam.

use std::io::Write;

use baton_client::view::{Printer, Tracker, phase};
use baton_client::{Reply, RequestError, SubscriptionEvent};
use baton_protocol::{Map, Value};
use tokio::io::AsyncBufReadExt;
use tokio::signal::unix::{SignalKind, signal};

use crate::failure::Failure;
use crate::live::{Target, call, open_session, render, stop_reason_result};

/// A prompt running in the background of the interactive loop.
type PendingPrompt = std::pin::Pin<Box<dyn Future<Output = Result<Reply, RequestError>> + Send>>;

/// Attaches to `target.session` and runs the interactive loop on stdin/stdout until
/// `/detach`, end of input (after a running turn settles), a second Ctrl-C, or the end of
/// the session's subscription.
///
/// The entry point the command calls: `target` carries the connected client, the
/// configuration it was connected with (to open a reconnecting client from), the resolved
/// session (id and name) and `--json`. `Ok` exits 0; a [`Failure`] carries the exit status.
pub(crate) async fn run(target: Target<'_>) -> Result<(), Failure> {
    let client = target.client;
    let session_id = target.session.id.as_str();
    let json = target.json;
    let (session, mut sub) = open_session(client, session_id).await?;
    let mut tracker = Tracker::default();
    let mut printer = Printer::default();
    let mut out = std::io::stdout().lock();
    let state = render(&sub, &mut tracker, &mut printer, json, &mut out)?;
    if !json {
        writeln!(
            out,
            "[attached to {session_id}; phase {}; /help for commands]",
            phase(&state)
        )?;
    }
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut interrupts = signal(SignalKind::interrupt())?;
    let mut running: Option<PendingPrompt> = None;
    let mut interrupted_once = false;
    // At end of input (e.g. prompts piped in), a running turn still finishes before we exit.
    let mut input_done = false;
    loop {
        if input_done && running.is_none() {
            return Ok(());
        }
        tokio::select! {
            reply = async { running.as_mut().expect("guarded by the if").await }, if running.is_some() => {
                running = None;
                interrupted_once = false;
                render(&sub, &mut tracker, &mut printer, json, &mut out)?;
                if let Err(e) = reply.map_err(Failure::from).and_then(stop_reason_result) {
                    writeln!(out, "[{}]", e.message)?;
                }
            }
            event = sub.next_event() => match event {
                Some(SubscriptionEvent::Ended { reason }) => return Err(Failure::op(format!("session subscription ended: {reason}"))),
                Some(_) => { render(&sub, &mut tracker, &mut printer, json, &mut out)?; }
                None => return Ok(()),
            },
            _ = interrupts.recv() => {
                if running.is_some() && !interrupted_once {
                    interrupted_once = true;
                    writeln!(out, "[aborting; Ctrl-C again to exit]")?;
                    let _ = session.request(call("pi.session", "abort", vec![])).await;
                } else {
                    return Ok(());
                }
            }
            line = lines.next_line(), if !input_done => {
                let Some(line) = line? else {
                    input_done = true;
                    continue;
                };
                let line = line.trim().to_owned();
                if line.is_empty() {
                    continue;
                }
                let command = line.split_once(' ').map_or((line.as_str(), ""), |(c, r)| (c, r.trim()));
                let result = match command {
                    ("/help", _) => {
                        writeln!(out, "/steer TEXT  /abort  /model PROVIDER/ID  /thinking LEVEL  /detach  (anything else is a prompt)")?;
                        Ok(None)
                    }
                    ("/detach", _) => {
                        client.detach().await?;
                        return Ok(());
                    }
                    ("/abort", _) => session.request(call("pi.session", "abort", vec![])).await.map(Some),
                    ("/steer", text) => session.request(call("pi.session", "steer", vec![Value::from(text)])).await.map(Some),
                    ("/thinking", level) => session.request(call("pi.session", "setThinking", vec![Value::from(level)])).await.map(Some),
                    ("/model", spec) => {
                        let (provider, id) = spec.split_once('/').unwrap_or(("", spec));
                        let mut m = Map::new();
                        m.insert("provider", Value::from(provider));
                        m.insert("id", Value::from(id));
                        session.request(call("pi.session", "setModel", vec![Value::Map(m)])).await.map(Some)
                    }
                    (c, _) if c.starts_with('/') => {
                        writeln!(out, "[unknown command {c}; /help lists them]")?;
                        Ok(None)
                    }
                    _ if running.is_some() => {
                        writeln!(out, "[a turn is running: use /steer, or /abort]")?;
                        Ok(None)
                    }
                    _ => {
                        let session = session.clone();
                        let text = line.clone();
                        running = Some(Box::pin(async move {
                            session.request(call("pi.session", "prompt", vec![Value::from(text)])).await
                        }));
                        Ok(None)
                    }
                };
                if let Err(e) = result {
                    writeln!(out, "[{e}]")?;
                }
            }
        }
    }
}
