//! `baton watch`: follow a session live, read-only, across lost connections and host
//! restarts (it reconnects, re-attaches and re-subscribes on its own).

use std::io::Write;

use baton_client::{Status, SubscriptionEvent};
use tokio::signal::unix::{SignalKind, signal};

use crate::attach::reconnecting_client;
use crate::ending;
use crate::failure::Failure;
use crate::line_view::{Printer, TranscriptProgress};
use crate::live::{Target, open_session, render};

/// Prints the session's transcript so far, then every change, until SIGINT or the session
/// is gone for good: one line ([`crate::ending`]), exit status 1 for a removed session, 3
/// for a refused reconnect (another server id, this identity refused), which the library
/// reports at once instead of retrying. Reconnect notices go to stderr, so `--json` output
/// stays one value per line.
pub(crate) async fn run(target: Target<'_>) -> Result<(), Failure> {
    let client = reconnecting_client(&target).await?;
    let result = follow(&client, &target).await;
    client.close().await;
    result
}

async fn follow(client: &baton_client::Client, target: &Target<'_>) -> Result<(), Failure> {
    let (_session, mut sub) = open_session(client, &target.session.id).await?;
    let mut progress = TranscriptProgress::default();
    let mut printer = Printer::default();
    let mut out = std::io::stdout().lock();
    render(&sub, &mut progress, &mut printer, target.json, &mut out)?;
    let mut status = client.watch_status();
    let mut interrupts = signal(SignalKind::interrupt())?;
    loop {
        tokio::select! {
            event = sub.next_event() => match event {
                Some(SubscriptionEvent::Ended { reason }) => {
                    return Err(ending::subscription_ended(sub.end_reason(), &reason));
                }
                Some(_) => { render(&sub, &mut progress, &mut printer, target.json, &mut out)?; }
                None => return Err(ending::subscription_ended(sub.end_reason(), "closed")),
            },
            changed = status.changed() => {
                if changed.is_err() {
                    return Err(Failure::op("the connection closed"));
                }
                let current = status.borrow_and_update().clone();
                match current {
                    Status::Reconnecting { attempt, reason, retry_in, .. } => {
                        if attempt == 1 {
                            out.flush()?;
                            let mut err = std::io::stderr().lock();
                            writeln!(err, "[connection lost ({reason}); reconnecting in {:.1}s]", retry_in.as_secs_f64())?;
                        }
                    }
                    Status::Connected => {
                        let mut err = std::io::stderr().lock();
                        writeln!(err, "[reconnected]")?;
                    }
                    Status::Closed { reason } => {
                        return Err(match sub.end_reason() {
                            Some(r) => ending::subscription_ended(Some(r), "closed"),
                            None => ending::closed(&reason),
                        });
                    }
                }
            }
            _ = interrupts.recv() => return Ok(()),
        }
    }
}
