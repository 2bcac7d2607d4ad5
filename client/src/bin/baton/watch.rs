//! `baton watch`: follow a session live, read-only.

use std::io::Write;

use baton_client::SubscriptionEvent;
use baton_client::view::{Printer, Tracker};
use tokio::signal::unix::{SignalKind, signal};

use crate::failure::Failure;
use crate::live::{Target, open_session, render};

/// Prints the session's transcript so far, then every change, until the session ends, the
/// subscription ends, or SIGINT.
pub(crate) async fn run(target: Target<'_>) -> Result<(), Failure> {
    let client = target.client;
    let (_session, mut sub) = open_session(client, &target.session.id).await?;
    let mut tracker = Tracker::default();
    let mut printer = Printer::default();
    let mut out = std::io::stdout().lock();
    render(&sub, &mut tracker, &mut printer, target.json, &mut out)?;
    let mut attachment = client.watch_attachment();
    let mut interrupts = signal(SignalKind::interrupt())?;
    loop {
        tokio::select! {
            event = sub.next_event() => match event {
                Some(SubscriptionEvent::Ended { reason }) => return Err(Failure::op(format!("session subscription ended: {reason}"))),
                Some(_) => { render(&sub, &mut tracker, &mut printer, target.json, &mut out)?; }
                None => return Ok(()),
            },
            changed = attachment.changed() => {
                if changed.is_err() || attachment.borrow().is_none() {
                    writeln!(out, "[detached: the session ended or was removed]")?;
                    return Ok(());
                }
            }
            _ = interrupts.recv() => return Ok(()),
        }
    }
}
