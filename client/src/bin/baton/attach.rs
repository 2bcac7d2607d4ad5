//! `baton attach`: the terminal UI on one session ([`crate::tui`]) when stdin and stdout are
//! terminals, else (pipes, scripts, `--json`) an interactive line client: prompts and slash
//! commands from stdin, the transcript printed as it streams. Both reconnect on their own.

use std::io::{IsTerminal, Write};

use baton_client::{Client, ReconnectPolicy, Reply, RequestError, Status, SubscriptionEvent};
use baton_protocol::{Map, Value};
use tokio::io::AsyncBufReadExt;
use tokio::signal::unix::{SignalKind, signal};

use crate::ending;
use crate::failure::Failure;
use crate::line_view::{Printer, TranscriptProgress, phase};
use crate::live::{Target, call, open_session, render, stop_reason_result};
use crate::tui;

/// A prompt running in the background of the interactive loop.
type PendingPrompt = std::pin::Pin<Box<dyn Future<Output = Result<Reply, RequestError>> + Send>>;

/// The reconnect policy of `attach` and `watch`: the library's default (100 ms doubling to
/// 10 s, ±25 % jitter, no limit on attempts).
pub(crate) fn reconnect_policy() -> ReconnectPolicy {
    ReconnectPolicy::default()
}

/// A client of its own for a long-lived view: the target's configuration plus reconnecting,
/// pinned to the server id the target's client reached (a different host at the address is
/// never silently adopted).
pub(crate) async fn reconnecting_client(target: &Target<'_>) -> Result<Client, Failure> {
    let mut config = target.config.clone();
    config.reconnect = Some(reconnect_policy());
    config.expected_server_id = Some(target.client.server_id().clone());
    config.relocate.clone_from(&target.relocate);
    Ok(Client::connect(config).await?)
}

/// Attaches to `target.session` until `/detach` (or Ctrl-D), a double Ctrl-C, end of input
/// in line mode (after a running turn settles), or the end of the session. A lost connection
/// is reconnected; a removed session (exit status 1), a changed server id or a refused
/// identity (the library stops reconnecting at once; exit status 3) end it with one line
/// ([`crate::ending`]).
pub(crate) async fn run(target: Target<'_>) -> Result<(), Failure> {
    let client = reconnecting_client(&target).await?;
    let interactive =
        !target.json && std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let result = if interactive {
        terminal(&client, &target).await
    } else {
        lines(&client, &target).await
    };
    client.close().await;
    result
}

async fn terminal(client: &Client, target: &Target<'_>) -> Result<(), Failure> {
    let (session, subscription) = open_session(client, &target.session.id).await?;
    let ending = tui::run(tui::Attached {
        client: client.clone(),
        session,
        subscription,
        name: target.session.name.clone().unwrap_or_default(),
    })
    .await?;
    match ending {
        tui::Ending::Detached | tui::Ending::Exited => Ok(()),
        tui::Ending::Lost(failure) => Err(failure),
    }
}

async fn lines(client: &Client, target: &Target<'_>) -> Result<(), Failure> {
    let session_id = target.session.id.as_str();
    let json = target.json;
    let (session, mut sub) = open_session(client, session_id).await?;
    let mut progress = TranscriptProgress::default();
    let mut printer = Printer::default();
    let mut out = std::io::stdout().lock();
    let state = render(&sub, &mut progress, &mut printer, json, &mut out)?;
    if !json {
        writeln!(
            out,
            "[attached to {session_id}; phase {}; /help for commands]",
            phase(&state)
        )?;
    }
    let mut input = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut interrupts = signal(SignalKind::interrupt())?;
    let mut status = client.watch_status();
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
                render(&sub, &mut progress, &mut printer, json, &mut out)?;
                if let Err(e) = reply.map_err(Failure::from).and_then(stop_reason_result) {
                    writeln!(out, "[{}]", e.message)?;
                }
            }
            event = sub.next_event() => match event {
                Some(SubscriptionEvent::Ended { reason }) => {
                    return Err(ending::subscription_ended(sub.end_reason(), &reason));
                }
                Some(SubscriptionEvent::Snapshot { resynced: true }) if !json => {
                    render(&sub, &mut progress, &mut printer, json, &mut out)?;
                    writeln!(out, "[reconnected; phase {}]", phase(&crate::live::session_state(&sub)))?;
                }
                Some(_) => { render(&sub, &mut progress, &mut printer, json, &mut out)?; }
                None => return Err(ending::subscription_ended(sub.end_reason(), "closed")),
            },
            changed = status.changed() => {
                if changed.is_err() {
                    return Err(Failure::op("the connection closed"));
                }
                let current = status.borrow_and_update().clone();
                match current {
                    Status::Reconnecting { attempt, reason, retry_in, .. } => {
                        if attempt == 1 && !json {
                            writeln!(out, "[connection lost ({reason}); reconnecting in {:.1}s]", retry_in.as_secs_f64())?;
                        }
                    }
                    // Also a refused reconnect: the library stopped at once.
                    Status::Closed { reason } => {
                        return Err(match sub.end_reason() {
                            Some(r) => ending::subscription_ended(Some(r), "closed"),
                            None => ending::closed(&reason),
                        });
                    }
                    Status::Connected => {}
                }
            }
            _ = interrupts.recv() => {
                if running.is_some() && !interrupted_once {
                    interrupted_once = true;
                    writeln!(out, "[aborting; Ctrl-C again to exit]")?;
                    let _ = session.request(call("pi.session", "abort", vec![])).await;
                } else {
                    return Ok(());
                }
            }
            line = input.next_line(), if !input_done => {
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
