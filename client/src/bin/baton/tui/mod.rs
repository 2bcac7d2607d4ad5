//! `baton attach` as a full-screen terminal UI.
//!
//! * [`model`]: the pure view model (replica state + this terminal's state → frame; keys →
//!   actions), with [`state`] (reading a `pi.session` state, feature-detecting what the host
//!   offers), [`editor`], [`history`], [`slash`], [`transcript`] and [`markdown`].
//! * [`terminal`]: raw mode, alternate screen, synchronized output, `$EDITOR`.
//! * This file: the event loop gluing the terminal, the replica and the connection together.
//!
//! Everything on screen is drawn from the subscription's replica: what the host holds, not
//! what this terminal sent. Requests run concurrently inside the loop (never spawned), so
//! leaving the loop cancels them.

mod editor;
mod history;
mod markdown;
mod model;
mod slash;
mod state;
mod terminal;
#[cfg(test)]
mod tests;
mod transcript;

use std::pin::Pin;
use std::time::Duration;

use baton_client::{Client, Reply, RequestError, Session, Status, Subscription, SubscriptionEvent};
use baton_protocol::Value;
use baton_protocol::chord::{ServiceCall, ServiceMode};
use crossterm::event::{Event, EventStream};
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use crate::ending;
use crate::failure::Failure;
use crate::live::session_state;
use model::{Action, Connection, Model, Outcome};
use state::SessionState;

/// How often the spinner, timers and the reconnect countdown move (only while one shows).
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// How the terminal UI ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The user detached (`/detach`, Ctrl-D): the session keeps running.
    Detached,
    /// The user left (Ctrl-C twice).
    Exited,
    /// The session or the connection is gone for good: the one line to print and the exit
    /// status ([`crate::ending`]).
    Lost(Failure),
}

/// What the attach loop needs.
#[derive(Debug)]
pub(crate) struct Attached {
    /// The connection (its status drives the status line).
    pub(crate) client: Client,
    /// The attached session.
    pub(crate) session: Session,
    /// Its `pi.session` subscription.
    pub(crate) subscription: Subscription,
    /// The session's name, if it has one.
    pub(crate) name: String,
}

fn outcome(result: Result<Reply, RequestError>) -> Outcome {
    match result {
        Ok(reply) => Outcome::Ok(reply.into_value()),
        Err(RequestError::OutcomeUnknown(_)) => Outcome::Unknown,
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

type InFlight = Pin<Box<dyn Future<Output = (u64, Outcome)> + Send>>;

fn attached_clients(dir: &Subscription, session_id: &str) -> Option<u64> {
    let replica = dir.state();
    let list = replica.value(None, "sessions")?.as_array()?;
    list.iter().filter_map(Value::as_map).find_map(|m| {
        (m.get("id").and_then(Value::as_str) == Some(session_id))
            .then(|| m.get("attachedClients").and_then(Value::as_u64))
            .flatten()
    })
}

/// Runs the terminal UI until the user leaves or the session is gone.
///
/// # Errors
/// A terminal I/O error.
pub(crate) async fn run(attached: Attached) -> std::io::Result<Ending> {
    let Attached {
        client,
        session,
        mut subscription,
        name,
    } = attached;
    let mut screen = terminal::Screen::open()?;
    let now = tokio::time::Instant::now().into_std();
    let mut model = Model::new(
        session.id(),
        &name,
        history::History::load(history::default_path()),
        now,
    );
    // Presence from the directory, for hosts whose session state does not list it.
    let mut directory = client
        .subscribe("pi.session-directory", ServiceMode::Singleton)
        .await
        .ok();
    let mut events = Some(EventStream::new());
    let mut status = client.watch_status();
    let mut in_flight: FuturesUnordered<InFlight> = FuturesUnordered::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut value = session_state(&subscription);
    if let Some(dir) = &directory {
        model.set_attached_clients(attached_clients(dir, session.id()));
    }
    model.observe(&SessionState::new(&value), now);
    let mut dirty = true;
    loop {
        let now = tokio::time::Instant::now().into_std();
        if dirty {
            let state = SessionState::new(&value);
            screen.draw(|f| model.render(f, &state, now))?;
            dirty = false;
        }
        let action = tokio::select! {
            event = async { events.as_mut().expect("present outside the editor").next().await } => {
                dirty = true;
                let state = SessionState::new(&value);
                match event {
                    Some(Ok(Event::Key(key))) => model.key(&state, key, now),
                    Some(Ok(Event::Paste(text))) => { model.paste(&text); Action::None }
                    Some(Ok(_)) => Action::None,
                    Some(Err(e)) => return Err(e),
                    None => return Ok(Ending::Exited),
                }
            }
            event = subscription.next_event() => {
                match event {
                    Some(SubscriptionEvent::Ended { reason }) => {
                        return Ok(Ending::Lost(ending::subscription_ended(subscription.end_reason(), &reason)));
                    }
                    None => return Ok(Ending::Lost(ending::subscription_ended(subscription.end_reason(), "closed"))),
                    Some(_) => {}
                }
                value = session_state(&subscription);
                model.observe(&SessionState::new(&value), now);
                dirty = true;
                Action::None
            }
            changed = status.changed() => {
                if changed.is_err() {
                    return Ok(Ending::Lost(Failure::op("the connection closed")));
                }
                let current = status.borrow_and_update().clone();
                let state = SessionState::new(&value);
                match current {
                    Status::Connected => model.set_connection(&state, Connection::Connected),
                    // The countdown is to the attempt the library scheduled, jitter included.
                    Status::Reconnecting { attempt, reason, retry_at, .. } => {
                        model.set_connection(&state, Connection::Reconnecting { attempt, reason, retry_at: Some(retry_at) });
                    }
                    // Also a refused reconnect (another server id, this identity refused):
                    // the library stopped at once, and so does the client.
                    Status::Closed { reason } => {
                        return Ok(Ending::Lost(match subscription.end_reason() {
                            Some(r) => ending::subscription_ended(Some(r), "closed"),
                            None => ending::closed(&reason),
                        }));
                    }
                }
                dirty = true;
                Action::None
            }
            Some((ticket, result)) = in_flight.next(), if !in_flight.is_empty() => {
                model.finished(&SessionState::new(&value), ticket, result);
                dirty = true;
                Action::None
            }
            event = async { directory.as_mut().expect("guarded").next_event().await }, if directory.is_some() => {
                match event {
                    Some(_) => {
                        if let Some(dir) = &directory {
                            model.set_attached_clients(attached_clients(dir, session.id()));
                        }
                    }
                    None => directory = None,
                }
                dirty = true;
                Action::None
            }
            _ = tick.tick() => {
                if model.animating(&SessionState::new(&value)) {
                    dirty = true;
                }
                Action::None
            }
        };
        match action {
            Action::None => {}
            Action::Send { ticket, request } => {
                let session = session.clone();
                let (member, args) = request.call();
                let call = ServiceCall::new("pi.session", member, args).into_value();
                in_flight.push(Box::pin(async move {
                    (ticket, outcome(session.request(call).await))
                }));
            }
            Action::OpenEditor => {
                // The event reader must not compete with the editor for the terminal's input.
                drop(events.take());
                // Dropping the stream wakes crossterm's shared reader; when no reader thread
                // is waiting, that wake stays pending, and a poll that later sees it in the
                // same batch as the first key returns "woken" and drops the key's (edge-
                // triggered) readiness, losing the first key after the editor. A poll here,
                // before any key can follow, consumes the stale wake; it reads nothing.
                let _ = crossterm::event::poll(Duration::ZERO);
                let text = model.input_expanded();
                let edited = tokio::task::block_in_place(|| screen.edit(&text));
                events = Some(EventStream::new());
                let state = SessionState::new(&value);
                match edited {
                    Ok(t) => model.edited(&t),
                    Err(e) => model.error(&state, format!("$EDITOR: {e}")),
                }
                dirty = true;
            }
            Action::Repaint => {
                screen.repaint()?;
                dirty = true;
            }
            Action::Detach => {
                drop(screen);
                // Not `detach`: the host answers it only once this connection's calls have
                // finished, and a running prompt is one, so Ctrl-D would wait for the turn.
                // Closing leaves the session and its turn running (a client that goes away
                // is no `cancel`); the requests still in flight end here without one.
                client.close().await;
                return Ok(Ending::Detached);
            }
            Action::Exit => return Ok(Ending::Exited),
        }
    }
}

/// Requests as the glue makes them (for tests of the wire shape).
#[cfg(test)]
pub(crate) fn call_of(request: &model::Request) -> Value {
    let (member, args) = request.call();
    ServiceCall::new("pi.session", member, args).into_value()
}
