//! The view model: the replica's `pi.session` state plus this terminal's own state (the
//! input, history, acknowledgements, scroll, connection) → what to draw; key presses →
//! [`Action`]s for the glue to carry out. No I/O and no clock: time is passed in.

use std::time::{Duration, Instant};

use baton_protocol::{Map, Value};
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use unicode_width::UnicodeWidthStr;

use super::editor::Editor;
use super::history::History;
use super::slash::{self, SlashCommand};
use super::state::SessionState;
use super::transcript::{self, DIM, ERROR, TOOL_OK, WARN};

/// A second Ctrl-C while idle within this window exits.
pub(crate) const DOUBLE_CTRL_C_WINDOW: Duration = Duration::from_secs(3);
/// Acknowledgements and local messages kept (the oldest are dropped).
pub(crate) const MAX_NOTICES: usize = 256;
/// Most input lines shown at once (the input scrolls beyond).
pub(crate) const MAX_INPUT_ROWS: usize = 8;
/// Most completion candidates listed.
pub(crate) const MAX_COMPLETIONS_SHOWN: usize = 6;
/// Rows one PageUp/PageDown scrolls.
pub(crate) const SCROLL_STEP: usize = 10;
/// Requests of this terminal in flight at once; more are refused locally.
pub(crate) const MAX_IN_FLIGHT: usize = 16;

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// A call to make on the session's `pi.session` service.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    Prompt(String),
    Steer { text: String, turn: Option<Value> },
    FollowUp(String),
    EditFollowUp { id: String, text: String },
    RemoveFollowUp(String),
    ClearFollowUps,
    Abort,
    SetModel { provider: String, id: String },
    SetThinking(String),
    Compact(Option<String>),
    Bash { command: String, exclude: bool },
    CompletePath(String),
}

impl Request {
    /// The `pi.session` member and its arguments.
    pub(crate) fn call(&self) -> (&'static str, Vec<Value>) {
        match self {
            Self::Prompt(t) => ("prompt", vec![Value::from(t.as_str())]),
            Self::Steer { text, turn } => {
                let mut args = vec![Value::from(text.as_str())];
                if let Some(turn) = turn {
                    let mut m = Map::new();
                    m.insert("turnId", turn.clone());
                    args.push(Value::Map(m));
                }
                ("steer", args)
            }
            Self::FollowUp(t) => ("followUp", vec![Value::from(t.as_str())]),
            Self::EditFollowUp { id, text } => (
                "editFollowUp",
                vec![Value::from(id.as_str()), Value::from(text.as_str())],
            ),
            Self::RemoveFollowUp(id) => ("removeFollowUp", vec![Value::from(id.as_str())]),
            Self::ClearFollowUps => ("clearFollowUps", vec![]),
            Self::Abort => ("abort", vec![]),
            Self::SetModel { provider, id } => {
                let mut m = Map::new();
                m.insert("provider", Value::from(provider.as_str()));
                m.insert("id", Value::from(id.as_str()));
                ("setModel", vec![Value::Map(m)])
            }
            Self::SetThinking(l) => ("setThinking", vec![Value::from(l.as_str())]),
            Self::Compact(i) => (
                "compact",
                i.iter().map(|s| Value::from(s.as_str())).collect(),
            ),
            Self::Bash { command, exclude } => {
                let mut m = Map::new();
                if *exclude {
                    m.insert("excludeFromContext", Value::Bool(true));
                }
                ("bash", vec![Value::from(command.as_str()), Value::Map(m)])
            }
            Self::CompletePath(p) => ("completePath", vec![Value::from(p.as_str())]),
        }
    }

    /// How a person would name it in an acknowledgement.
    fn label(&self) -> String {
        match self {
            Self::Prompt(_) => "prompt".into(),
            Self::Steer { .. } => "/steer".into(),
            Self::FollowUp(_) => "/queue".into(),
            Self::EditFollowUp { .. } => "/queue edit".into(),
            Self::RemoveFollowUp(_) => "/queue rm".into(),
            Self::ClearFollowUps => "/queue clear".into(),
            Self::Abort => "abort".into(),
            Self::SetModel { .. } => "/model".into(),
            Self::SetThinking(_) => "/thinking".into(),
            Self::Compact(_) => "/compact".into(),
            Self::Bash { exclude, .. } => if *exclude { "!!" } else { "!" }.into(),
            Self::CompletePath(_) => "@ completion".into(),
        }
    }
}

/// What the glue should do after an input.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Nothing beyond a redraw.
    None,
    /// Send `request`; report its answer with [`Model::finished`] under `ticket`.
    Send { ticket: u64, request: Request },
    /// Open `$EDITOR` on the input and put the result back with [`Model::edited`].
    OpenEditor,
    /// Redraw everything (Ctrl-L).
    Repaint,
    /// Detach from the session and exit.
    Detach,
    /// Exit at once (the session stays attached until the connection closes).
    Exit,
}

/// How a request ended, as the glue saw it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The server answered with a result.
    Ok(Value),
    /// The server refused, or it never left this client: the message.
    Failed(String),
    /// The connection dropped after it was sent: it may or may not have run.
    Unknown,
}

/// The connection as the status line shows it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Connection {
    Connected,
    Reconnecting {
        attempt: u32,
        reason: String,
        /// When the next attempt is due (a countdown), if known.
        retry_at: Option<Instant>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tone {
    Info,
    Ok,
    Error,
    Unknown,
}

#[derive(Debug, Clone)]
struct Notice {
    /// The transcript item it follows (the last one when it was made).
    after: Option<String>,
    text: String,
    tone: Tone,
}

#[derive(Debug, Clone)]
struct Pending {
    ticket: u64,
    request: Request,
}

/// The Tab completion being cycled through (none when `options` is empty).
#[derive(Debug, Default)]
struct TabCompletion {
    options: Vec<String>,
    selected: Option<usize>,
    /// Byte offset the options replace from (to the cursor).
    start: usize,
}

/// The terminal's state.
#[derive(Debug)]
pub(crate) struct Model {
    session_id: String,
    session_name: String,
    editor: Editor,
    history: History,
    notices: Vec<Notice>,
    expanded: bool,
    /// Rows scrolled up from the bottom of the transcript.
    scroll: usize,
    connection: Connection,
    turn_started: Option<Instant>,
    /// When the last Ctrl-C while idle was pressed (a second one exits).
    interrupt_at: Option<Instant>,
    /// An abort was asked for the running turn (a second Ctrl-C then exits).
    abort_sent: bool,
    completion: TabCompletion,
    pending: Vec<Pending>,
    next_ticket: u64,
    /// Presence from the session directory when the session state has none.
    attached_clients: Option<u64>,
    epoch: Instant,
    history_warned: bool,
}

fn key_is(key: &KeyEvent, code: KeyCode, mods: KeyModifiers) -> bool {
    key.code == code && key.modifiers == mods
}

fn ctrl(key: &KeyEvent, c: char) -> bool {
    key_is(key, KeyCode::Char(c), KeyModifiers::CONTROL)
}

fn turn_label(turn: Option<&Value>) -> Option<String> {
    turn.map(|t| t.as_str().map_or_else(|| t.to_json(), str::to_owned))
}

fn last_item_id(state: &SessionState<'_>) -> Option<String> {
    state
        .transcript()
        .last()
        .and_then(Value::as_map)
        .and_then(|m| m.get("id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn tokens(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1_000.0),
        _ => format!("{:.1}M", n as f64 / 1_000_000.0),
    }
}

fn seconds(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

impl Model {
    /// A model for `session_id` (shown as `session_name` when it has one).
    pub(crate) fn new(
        session_id: &str,
        session_name: &str,
        history: History,
        now: Instant,
    ) -> Self {
        Self {
            session_id: session_id.to_owned(),
            session_name: session_name.to_owned(),
            editor: Editor::default(),
            history,
            notices: Vec::new(),
            expanded: false,
            scroll: 0,
            connection: Connection::Connected,
            turn_started: None,
            interrupt_at: None,
            abort_sent: false,
            completion: TabCompletion::default(),
            pending: Vec::new(),
            next_ticket: 1,
            attached_clients: None,
            epoch: now,
            history_warned: false,
        }
    }

    /// The input's text (markers, not paste contents).
    #[cfg(test)]
    pub(crate) fn input(&self) -> &str {
        self.editor.text()
    }

    /// The input with pastes expanded (for `$EDITOR`).
    pub(crate) fn input_expanded(&self) -> String {
        self.editor.expanded()
    }

    /// `$EDITOR` returned `text`.
    pub(crate) fn edited(&mut self, text: &str) {
        self.editor.set(text.trim_end_matches('\n'));
    }

    /// Whether something on screen moves with time (spinner, timers, countdown).
    pub(crate) fn animating(&self, state: &SessionState<'_>) -> bool {
        state.is_running()
            || !self.pending.is_empty()
            || matches!(self.connection, Connection::Reconnecting { .. })
    }

    fn notice(&mut self, state: &SessionState<'_>, tone: Tone, text: impl Into<String>) {
        self.notices.push(Notice {
            after: last_item_id(state),
            text: text.into(),
            tone,
        });
        if self.notices.len() > MAX_NOTICES {
            let excess = self.notices.len() - MAX_NOTICES;
            self.notices.drain(..excess);
        }
        // A new message brings the view back to the bottom.
        self.scroll = 0;
    }

    /// Adds a local line (e.g. the glue's "could not open $EDITOR").
    pub(crate) fn info(&mut self, state: &SessionState<'_>, text: impl Into<String>) {
        self.notice(state, Tone::Info, text);
    }

    /// Adds a local error line.
    pub(crate) fn error(&mut self, state: &SessionState<'_>, text: impl Into<String>) {
        self.notice(state, Tone::Error, text);
    }

    /// The replica changed: tracks the turn's start for the timer.
    pub(crate) fn observe(&mut self, state: &SessionState<'_>, now: Instant) {
        match (state.is_running(), self.turn_started) {
            (true, None) => {
                self.turn_started = Some(now);
                self.abort_sent = false;
            }
            (false, Some(_)) => {
                self.turn_started = None;
                self.abort_sent = false;
            }
            _ => {}
        }
    }

    /// The session directory's count of attached clients (presence when the session state
    /// does not list them).
    pub(crate) fn set_attached_clients(&mut self, n: Option<u64>) {
        self.attached_clients = n;
    }

    /// The connection changed.
    pub(crate) fn set_connection(&mut self, state: &SessionState<'_>, connection: Connection) {
        let was = std::mem::replace(&mut self.connection, connection);
        match (&was, &self.connection) {
            (Connection::Connected, Connection::Reconnecting { reason, .. }) => {
                let text = format!("connection lost ({reason}); reconnecting");
                self.notice(state, Tone::Unknown, text);
            }
            (Connection::Reconnecting { .. }, Connection::Connected) => {
                self.notice(state, Tone::Ok, "reconnected; the session is live again");
            }
            _ => {}
        }
    }

    fn send(&mut self, state: &SessionState<'_>, request: Request) -> Action {
        if self.pending.len() >= MAX_IN_FLIGHT {
            self.error(
                state,
                format!("{MAX_IN_FLIGHT} requests are already waiting for the host; try again"),
            );
            return Action::None;
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.pending.push(Pending {
            ticket,
            request: request.clone(),
        });
        Action::Send { ticket, request }
    }

    /// The answer to the request sent under `ticket`.
    pub(crate) fn finished(&mut self, state: &SessionState<'_>, ticket: u64, outcome: Outcome) {
        let Some(i) = self.pending.iter().position(|p| p.ticket == ticket) else {
            return;
        };
        let request = self.pending.remove(i).request;
        let label = request.label();
        let value = match outcome {
            Outcome::Failed(message) => {
                // A steer the host refused (its turn ended while the text was on its way) is
                // not lost: like one the client itself refuses while idle, it goes back into
                // an empty input, ready to send as a prompt.
                if let Request::Steer { text, .. } = &request
                    && self.editor.is_empty()
                {
                    self.editor.set(text);
                    self.error(
                        state,
                        format!("✗ {label}: {message}; press Enter to send it as a prompt"),
                    );
                    return;
                }
                self.error(state, format!("✗ {label}: {message}"));
                return;
            }
            Outcome::Unknown => {
                self.notice(
                    state,
                    Tone::Unknown,
                    format!(
                        "? {label}: outcome unknown (the connection dropped after it was sent); \
                         the transcript shows what the host did"
                    ),
                );
                return;
            }
            Outcome::Ok(v) => v,
        };
        let field = |k: &str| {
            value
                .as_map()
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        let ack = match &request {
            Request::Prompt(_) => match field("stopReason").as_deref() {
                Some("aborted") => Some((Tone::Unknown, "■ turn aborted".to_owned())),
                Some("error") => Some((
                    Tone::Error,
                    format!(
                        "the turn ended with an error: {}",
                        field("errorMessage").unwrap_or_default()
                    ),
                )),
                _ => None,
            },
            Request::Steer { text, turn } => Some((
                Tone::Ok,
                match turn_label(turn.as_ref()) {
                    Some(t) => format!(
                        "✓ steer for turn {t} queued (delivered at its next tool boundary): {text}"
                    ),
                    None => format!(
                        "✓ steer queued (delivered at the turn's next tool boundary): {text}"
                    ),
                },
            )),
            Request::FollowUp(text) => Some((
                Tone::Ok,
                if value
                    .as_map()
                    .and_then(|m| m.get("started"))
                    .and_then(Value::as_bool)
                    == Some(true)
                {
                    format!("✓ no turn was running: follow-up sent as a prompt: {text}")
                } else {
                    format!("✓ follow-up queued (sent when the turn settles): {text}")
                },
            )),
            Request::EditFollowUp { .. } => Some((Tone::Ok, "✓ follow-up edited".to_owned())),
            Request::RemoveFollowUp(_) => Some((Tone::Ok, "✓ follow-up removed".to_owned())),
            Request::ClearFollowUps => Some((Tone::Ok, "✓ follow-up queue cleared".to_owned())),
            Request::Abort => Some((Tone::Ok, "✓ abort requested".to_owned())),
            Request::SetModel { provider, id } => {
                Some((Tone::Ok, format!("✓ model is now {provider}/{id}")))
            }
            Request::SetThinking(l) => Some((Tone::Ok, format!("✓ thinking level is now {l}"))),
            Request::Compact(_) => Some((Tone::Ok, "✓ context compacted".to_owned())),
            Request::Bash { .. } => None,
            Request::CompletePath(_) => {
                self.path_completions(&value);
                None
            }
        };
        if let Some((tone, text)) = ack {
            self.notice(state, tone, text);
        }
    }

    fn path_completions(&mut self, value: &Value) {
        let list = value
            .as_map()
            .and_then(|m| m.get("entries"))
            .or(Some(value))
            .and_then(Value::as_array);
        let options: Vec<String> = list
            .into_iter()
            .flatten()
            .filter_map(|e| match e {
                Value::String(s) => Some(s.clone()),
                Value::Map(m) => {
                    let path = m.get("path").and_then(Value::as_str)?;
                    let dir = m.get("dir").and_then(Value::as_bool) == Some(true);
                    Some(if dir && !path.ends_with('/') {
                        format!("{path}/")
                    } else {
                        path.to_owned()
                    })
                }
                _ => None,
            })
            .map(|p| format!("@{p}"))
            .collect();
        let Some((start, _)) = self.editor.token_at_cursor('@') else {
            return;
        };
        self.offer(start, options, true);
    }

    /// Applies completion `options` replacing from `start` to the cursor.
    fn offer(&mut self, start: usize, options: Vec<String>, paths: bool) {
        match options.len() {
            0 => self.completion = TabCompletion::default(),
            1 => {
                let mut only = options[0].clone();
                if paths && !only.ends_with('/') {
                    only.push(' ');
                }
                self.editor.replace_before_cursor(start, &only);
                self.completion = TabCompletion::default();
            }
            _ => {
                let prefix = slash::common_prefix(&options);
                let typed = &self.editor.text()[start..self.editor.cursor()];
                if prefix.len() > typed.len() {
                    self.editor.replace_before_cursor(start, &prefix);
                }
                self.completion = TabCompletion {
                    options,
                    selected: None,
                    start,
                };
            }
        }
    }

    fn tab(&mut self, state: &SessionState<'_>) -> Action {
        if !self.completion.options.is_empty() {
            let n = self.completion.options.len();
            let next = self.completion.selected.map_or(0, |i| (i + 1) % n);
            self.completion.selected = Some(next);
            let choice = self.completion.options[next].clone();
            let start = self.completion.start;
            self.editor.replace_before_cursor(start, &choice);
            return Action::None;
        }
        let line = self.editor.text();
        if line.starts_with('/') && self.editor.cursor() == line.len() {
            let options = slash::complete(line, state.offers_compaction());
            self.offer(0, options, false);
            return Action::None;
        }
        if let Some((_, prefix)) = self.editor.token_at_cursor('@') {
            let prefix = prefix.to_owned();
            return self.send(state, Request::CompletePath(prefix));
        }
        Action::None
    }

    /// A bracketed paste.
    pub(crate) fn paste(&mut self, text: &str) {
        self.completion = TabCompletion::default();
        self.editor.paste(text);
    }

    /// A key press.
    pub(crate) fn key(&mut self, state: &SessionState<'_>, key: KeyEvent, now: Instant) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        if ctrl(&key, 'c') {
            return self.interrupt(state, now);
        }
        self.interrupt_at = None;
        if key.code != KeyCode::Tab {
            self.completion = TabCompletion::default();
        }
        let alt = KeyModifiers::ALT;
        let none = KeyModifiers::NONE;
        match key.code {
            KeyCode::Enter if key.modifiers == none => return self.submit(state),
            KeyCode::Enter if key.modifiers.contains(alt) => {
                if state.is_running() && state.follow_ups().is_some() && !self.editor.is_empty() {
                    let text = self.editor.take();
                    self.remember(state, &text);
                    return self.send(state, Request::FollowUp(text));
                }
                self.editor.insert('\n');
            }
            KeyCode::Enter => self.editor.insert('\n'),
            KeyCode::Char('j') if key.modifiers == KeyModifiers::CONTROL => {
                self.editor.insert('\n')
            }
            KeyCode::Char('d') if key.modifiers == KeyModifiers::CONTROL => {
                if self.editor.is_empty() {
                    return Action::Detach;
                }
                self.editor.delete();
            }
            KeyCode::Char('g') if key.modifiers == KeyModifiers::CONTROL => {
                return Action::OpenEditor;
            }
            KeyCode::Char('l') if key.modifiers == KeyModifiers::CONTROL => return Action::Repaint,
            KeyCode::Char('o') if key.modifiers == KeyModifiers::CONTROL => {
                self.expanded = !self.expanded;
            }
            KeyCode::Char('a') if key.modifiers == KeyModifiers::CONTROL => self.editor.home(),
            KeyCode::Char('e') if key.modifiers == KeyModifiers::CONTROL => self.editor.end(),
            KeyCode::Char('b') if key.modifiers == KeyModifiers::CONTROL => self.editor.left(),
            KeyCode::Char('f') if key.modifiers == KeyModifiers::CONTROL => self.editor.right(),
            KeyCode::Char('w') if key.modifiers == KeyModifiers::CONTROL => {
                self.editor.delete_word_left();
            }
            KeyCode::Char('u') if key.modifiers == KeyModifiers::CONTROL => {
                self.editor.kill_to_start();
            }
            KeyCode::Char('k') if key.modifiers == KeyModifiers::CONTROL => {
                self.editor.kill_to_end();
            }
            KeyCode::Char('b') if key.modifiers == alt => self.editor.word_left(),
            KeyCode::Char('f') if key.modifiers == alt => self.editor.word_right(),
            KeyCode::Backspace if key.modifiers.intersects(alt | KeyModifiers::CONTROL) => {
                self.editor.delete_word_left();
            }
            KeyCode::Char(c)
                if !key
                    .modifiers
                    .intersects(KeyModifiers::CONTROL | KeyModifiers::ALT) =>
            {
                self.editor.insert(c);
            }
            KeyCode::Backspace => self.editor.backspace(),
            KeyCode::Delete => self.editor.delete(),
            KeyCode::Left if key.modifiers.intersects(alt | KeyModifiers::CONTROL) => {
                self.editor.word_left();
            }
            KeyCode::Right if key.modifiers.intersects(alt | KeyModifiers::CONTROL) => {
                self.editor.word_right();
            }
            KeyCode::Left => self.editor.left(),
            KeyCode::Right => self.editor.right(),
            KeyCode::Home => self.editor.home(),
            KeyCode::End => self.editor.end(),
            KeyCode::Up if !self.editor.up() => {
                let current = self.editor.text().to_owned();
                if let Some(line) = self.history.older(&current).map(str::to_owned) {
                    self.editor.set(&line);
                }
            }
            KeyCode::Down => {
                if !self.editor.down()
                    && let Some(line) = self.history.newer()
                {
                    self.editor.set(&line);
                }
            }
            KeyCode::Tab => return self.tab(state),
            KeyCode::PageUp => self.scroll = self.scroll.saturating_add(SCROLL_STEP),
            KeyCode::PageDown => self.scroll = self.scroll.saturating_sub(SCROLL_STEP),
            KeyCode::Esc => {}
            _ => {}
        }
        Action::None
    }

    fn interrupt(&mut self, state: &SessionState<'_>, now: Instant) -> Action {
        self.completion = TabCompletion::default();
        if state.is_running() {
            if self.abort_sent {
                return Action::Exit;
            }
            self.abort_sent = true;
            self.info(state, "aborting the turn; Ctrl-C again to exit");
            return self.send(state, Request::Abort);
        }
        if self
            .interrupt_at
            .is_some_and(|at| now.saturating_duration_since(at) <= DOUBLE_CTRL_C_WINDOW)
        {
            return Action::Exit;
        }
        self.interrupt_at = Some(now);
        self.editor.clear();
        self.info(state, "Ctrl-C again to exit (Ctrl-D detaches)");
        Action::None
    }

    fn remember(&mut self, state: &SessionState<'_>, text: &str) {
        if let Err(e) = self.history.push(text)
            && !self.history_warned
        {
            self.history_warned = true;
            self.error(state, e);
        }
    }

    fn submit(&mut self, state: &SessionState<'_>) -> Action {
        if self.editor.text().trim().is_empty() {
            self.editor.clear();
            return Action::None;
        }
        let text = self.editor.take();
        self.remember(state, &text);
        match slash::parse(&text) {
            SlashCommand::Text(t) if state.is_running() => self.steer(state, t),
            SlashCommand::Text(t) => self.send(state, Request::Prompt(t)),
            SlashCommand::Steer(t) => self.steer(state, t),
            SlashCommand::Bash { command, exclude } => {
                self.send(state, Request::Bash { command, exclude })
            }
            SlashCommand::Queue(t) => {
                if state.follow_ups().is_none() {
                    self.error(
                        state,
                        "this host has no follow-up queue (use /steer while a turn runs)",
                    );
                    return Action::None;
                }
                self.send(state, Request::FollowUp(t))
            }
            SlashCommand::QueueList => {
                match state.follow_ups() {
                    None => self.error(state, "this host has no follow-up queue"),
                    Some(q) if q.is_empty() => self.info(state, "the follow-up queue is empty"),
                    Some(q) => {
                        let list: Vec<String> = q
                            .iter()
                            .enumerate()
                            .map(|(i, f)| format!("  {}. {}", i + 1, f.text))
                            .collect();
                        self.info(state, format!("queued follow-ups:\n{}", list.join("\n")));
                    }
                }
                Action::None
            }
            SlashCommand::QueueEdit { index, text } => match self.follow_up_id(state, index) {
                Some(id) => self.send(state, Request::EditFollowUp { id, text }),
                None => Action::None,
            },
            SlashCommand::QueueRemove(index) => match self.follow_up_id(state, index) {
                Some(id) => self.send(state, Request::RemoveFollowUp(id)),
                None => Action::None,
            },
            SlashCommand::QueueClear => {
                if state.follow_ups().is_none() {
                    self.error(state, "this host has no follow-up queue");
                    return Action::None;
                }
                self.send(state, Request::ClearFollowUps)
            }
            SlashCommand::Abort => {
                if !state.is_running() {
                    self.info(state, "no turn is running");
                    return Action::None;
                }
                self.abort_sent = true;
                self.send(state, Request::Abort)
            }
            SlashCommand::Model { provider, id } => {
                self.send(state, Request::SetModel { provider, id })
            }
            SlashCommand::Thinking(l) => self.send(state, Request::SetThinking(l)),
            SlashCommand::Compact(i) => {
                if !state.offers_compaction() {
                    self.error(state, "this session does not offer /compact");
                    return Action::None;
                }
                self.send(state, Request::Compact(i))
            }
            SlashCommand::Expand => {
                self.expanded = !self.expanded;
                let now = if self.expanded {
                    "shown whole"
                } else {
                    "cut to a preview"
                };
                self.info(state, format!("long output is now {now} (Ctrl-O toggles)"));
                Action::None
            }
            SlashCommand::Detach => Action::Detach,
            SlashCommand::Help => {
                let mut lines: Vec<String> = slash::COMMANDS
                    .iter()
                    .filter(|c| c.name != "/compact" || state.offers_compaction())
                    .map(|c| {
                        let head = format!("{} {}", c.name, c.args);
                        format!("  {head:<40} {}", c.help)
                    })
                    .collect();
                lines.insert(0, "commands:".to_owned());
                lines.push(format!("keys: {}", slash::KEYS));
                self.info(state, lines.join("\n"));
                Action::None
            }
            SlashCommand::Invalid(message) => {
                self.error(state, message);
                Action::None
            }
        }
    }

    fn steer(&mut self, state: &SessionState<'_>, text: String) -> Action {
        if !state.is_running() {
            self.error(
                state,
                "no turn is running to steer; press Enter to send it as a prompt",
            );
            self.editor.set(&text);
            return Action::None;
        }
        let turn = state.turn_id().cloned();
        self.send(state, Request::Steer { text, turn })
    }

    fn follow_up_id(&mut self, state: &SessionState<'_>, index: usize) -> Option<String> {
        let Some(queue) = state.follow_ups() else {
            self.error(state, "this host has no follow-up queue");
            return None;
        };
        match queue.get(index) {
            Some(f) => Some(f.id.clone()),
            None => {
                self.error(
                    state,
                    format!(
                        "there is no follow-up {} (the queue holds {})",
                        index + 1,
                        queue.len()
                    ),
                );
                None
            }
        }
    }

    fn spinner(&self, now: Instant) -> &'static str {
        let tick = now.saturating_duration_since(self.epoch).as_millis() / 100;
        SPINNER[usize::try_from(tick % SPINNER.len() as u128).unwrap_or(0)]
    }

    /// Draws everything.
    pub(crate) fn render(&self, frame: &mut Frame<'_>, state: &SessionState<'_>, now: Instant) {
        let area = frame.area();
        let width = area.width.max(1);
        let (cursor_row, cursor_col) = self.cursor_position(width);
        let mut input_rows = self.input_lines(width);
        while input_rows.len() <= cursor_row {
            input_rows.push(Line::default());
        }
        let queue = self.queue_lines(state);
        let completions = self.completion_lines();
        let shown_input = input_rows.len().min(MAX_INPUT_ROWS);
        let [
            body,
            queue_area,
            completion_area,
            rule,
            input_area,
            status_area,
        ] = Layout::vertical([
            Constraint::Min(1),
            Constraint::Length(u16::try_from(queue.len()).unwrap_or(0)),
            Constraint::Length(u16::try_from(completions.len()).unwrap_or(0)),
            Constraint::Length(1),
            Constraint::Length(u16::try_from(shown_input).unwrap_or(1)),
            Constraint::Length(1),
        ])
        .areas(area);
        self.render_transcript(frame, body, state);
        frame.render_widget(Paragraph::new(queue), queue_area);
        frame.render_widget(Paragraph::new(completions), completion_area);
        frame.render_widget(
            Paragraph::new(Line::from(Span::styled(
                "─".repeat(usize::from(width)),
                DIM,
            ))),
            rule,
        );
        // The input scrolls to keep the cursor's row visible.
        let first = (cursor_row + 1).saturating_sub(shown_input);
        let visible: Vec<Line<'static>> = input_rows
            .into_iter()
            .skip(first)
            .take(shown_input)
            .collect();
        frame.render_widget(Paragraph::new(visible), input_area);
        let row = u16::try_from(cursor_row - first).unwrap_or(0);
        frame.set_cursor_position((
            input_area.x + u16::try_from(cursor_col).unwrap_or(0).min(width - 1),
            input_area.y + row,
        ));
        frame.render_widget(
            Paragraph::new(self.status_line(state, now, width)),
            status_area,
        );
    }

    const PROMPT: &'static str = "› ";

    /// The input wrapped to `width`, with the prompt mark.
    fn input_lines(&self, width: u16) -> Vec<Line<'static>> {
        let mut out = Vec::new();
        let text = self.editor.text();
        for (i, l) in text.split('\n').enumerate() {
            let mark = if i == 0 { Self::PROMPT } else { "  " };
            let line = Line::from(vec![
                Span::styled(
                    mark,
                    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
                ),
                Span::raw(l.to_owned()),
            ]);
            out.extend(char_wrap(&line, width));
        }
        if text.is_empty() {
            out = vec![Line::from(vec![
                Span::styled(
                    Self::PROMPT,
                    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
                ),
                Span::styled("type a prompt, /help for commands", DIM),
            ])];
        }
        out
    }

    /// The cursor's (row, column) within the wrapped input.
    fn cursor_position(&self, width: u16) -> (usize, usize) {
        let width = usize::from(width.max(1));
        let text = self.editor.text();
        let before = &text[..self.editor.cursor()];
        let line_index = before.matches('\n').count();
        let mut row = 0;
        for l in text.split('\n').take(line_index) {
            row += (Self::PROMPT.width() + l.width()).div_ceil(width).max(1);
        }
        let current = before.rsplit('\n').next().unwrap_or("");
        let cols = Self::PROMPT.width() + current.width();
        (row + cols / width, cols % width)
    }

    fn queue_lines(&self, state: &SessionState<'_>) -> Vec<Line<'static>> {
        let mut out = Vec::new();
        for s in state.queued_steer() {
            out.push(Line::from(vec![
                Span::styled("  steer ▸ ", WARN),
                Span::raw(s.to_owned()),
            ]));
        }
        if let Some(q) = state.follow_ups() {
            for (i, f) in q.iter().enumerate() {
                out.push(Line::from(vec![
                    Span::styled(
                        format!("  queued {}. ", i + 1),
                        Style::new().fg(Color::Cyan),
                    ),
                    Span::raw(f.text.lines().next().unwrap_or("").to_owned()),
                ]));
            }
        }
        const MAX_SHOWN: usize = 5;
        if out.len() > MAX_SHOWN {
            let more = out.len() - (MAX_SHOWN - 1);
            out.truncate(MAX_SHOWN - 1);
            out.push(Line::from(Span::styled(
                format!("  … {more} more (/queue lists them)"),
                DIM,
            )));
        }
        out
    }

    fn completion_lines(&self) -> Vec<Line<'static>> {
        let c = &self.completion;
        let mut out: Vec<Line<'static>> = c
            .options
            .iter()
            .enumerate()
            .take(MAX_COMPLETIONS_SHOWN)
            .map(|(i, o)| {
                let style = if c.selected == Some(i) {
                    Style::new().fg(Color::Black).bg(Color::Cyan)
                } else {
                    Style::new().fg(Color::Cyan)
                };
                Line::from(Span::styled(format!("  {o}"), style))
            })
            .collect();
        if c.options.len() > MAX_COMPLETIONS_SHOWN {
            out.push(Line::from(Span::styled(
                format!("  … {} more", c.options.len() - MAX_COMPLETIONS_SHOWN),
                DIM,
            )));
        }
        out
    }

    fn status_line(&self, state: &SessionState<'_>, now: Instant, width: u16) -> Line<'static> {
        let sep = Span::styled(" · ", DIM);
        let name = if self.session_name.is_empty() {
            self.session_id.chars().take(8).collect()
        } else {
            self.session_name.clone()
        };
        let mut left = vec![Span::styled(
            name,
            Style::new().add_modifier(Modifier::BOLD),
        )];
        let phase = if !state.is_loaded() {
            Span::styled("loading", DIM)
        } else if state.compacting() {
            Span::styled(format!("{} compacting", self.spinner(now)), WARN)
        } else if state.is_running() {
            let elapsed = self
                .turn_started
                .map(|t| format!(" {}", seconds(now.saturating_duration_since(t))))
                .unwrap_or_default();
            let running_tool = state.transcript().iter().rev().find_map(|i| {
                let m = i.as_map()?;
                (m.get("role").and_then(Value::as_str) == Some("tool")
                    && m.get("status").and_then(Value::as_str) == Some("running"))
                .then(|| {
                    m.get("toolName")
                        .and_then(Value::as_str)
                        .unwrap_or("tool")
                        .to_owned()
                })
            });
            let doing = running_tool.map_or_else(|| "turn".to_owned(), |t| format!("running {t}"));
            Span::styled(
                format!("{} {doing}{elapsed}", self.spinner(now)),
                Style::new().fg(Color::Yellow),
            )
        } else {
            Span::styled("idle", TOOL_OK)
        };
        left.extend([sep.clone(), phase]);
        if !state.model().is_empty() {
            left.extend([sep.clone(), Span::raw(state.model().to_owned())]);
        }
        if !state.thinking().is_empty() {
            left.extend([
                sep.clone(),
                Span::raw(format!("thinking {}", state.thinking())),
            ]);
        }
        if let Some(u) = state.usage() {
            let mut s = format!("{} tok", tokens(u.context_tokens));
            if u.cost > 0.0 {
                s.push_str(&format!(" ${:.3}", u.cost));
            }
            left.extend([sep.clone(), Span::raw(s)]);
        }
        let mut right: Vec<Span<'static>> = Vec::new();
        match &self.connection {
            Connection::Connected => right.push(Span::styled("● connected", TOOL_OK)),
            Connection::Reconnecting {
                attempt, retry_at, ..
            } => {
                let when = retry_at
                    .map(|t| t.saturating_duration_since(now))
                    .filter(|d| !d.is_zero())
                    .map_or_else(
                        || "now".to_owned(),
                        |d| format!("in {:.1}s", d.as_secs_f64()),
                    );
                right.push(Span::styled(
                    format!(
                        "{} reconnecting {when} (attempt {attempt})",
                        self.spinner(now)
                    ),
                    ERROR.add_modifier(Modifier::BOLD),
                ));
            }
        }
        let others = state
            .presence()
            .map(|p| p.len().saturating_sub(1) as u64)
            .or(self.attached_clients.map(|n| n.saturating_sub(1)));
        let width = usize::from(width);
        let spans_width =
            |spans: &[Span<'_>]| -> usize { spans.iter().map(|s| s.content.width()).sum() };
        if let Some(n) = others.filter(|n| *n > 0) {
            let people = if n == 1 { "other" } else { "others" };
            let short = format!("+{n} {people} here");
            let names = state.presence().map(|p| p.join(", ")).unwrap_or_default();
            let long = format!("{short} ({names})");
            // The names only when everything fits with them.
            let text = if !names.is_empty()
                && spans_width(&left) + long.width() + 3 + spans_width(&right) < width
            {
                long
            } else {
                short
            };
            right.insert(0, sep.clone());
            right.insert(0, Span::styled(text, Style::new().fg(Color::Cyan)));
        }
        // The connection state is never cut: the left part loses its last segments first.
        while spans_width(&left) + 1 + spans_width(&right) > width && left.len() > 3 {
            left.pop();
            left.pop();
        }
        while spans_width(&left) + 1 + spans_width(&right) > width && right.len() > 1 {
            right.drain(..2.min(right.len() - 1));
        }
        let gap = width
            .saturating_sub(spans_width(&left) + spans_width(&right))
            .max(1);
        left.push(Span::raw(" ".repeat(gap)));
        left.extend(right);
        Line::from(left)
    }

    fn render_transcript(&self, frame: &mut Frame<'_>, area: Rect, state: &SessionState<'_>) {
        let height = usize::from(area.height);
        let want = height + self.scroll;
        let items = state.transcript();
        let ids: Vec<Option<&str>> = items
            .iter()
            .map(|i| i.as_map().and_then(|m| m.get("id")).and_then(Value::as_str))
            .collect();
        // Notices whose item left the window (or that came before any item) go first.
        let orphan = |n: &&Notice| match &n.after {
            None => true,
            Some(a) => !ids.contains(&Some(a.as_str())),
        };
        let mut rows: Vec<Line<'static>> = Vec::new();
        let push_block = |block: Vec<Line<'static>>, rows: &mut Vec<Line<'static>>| {
            for l in block.iter().rev() {
                for w in transcript::wrap(l, area.width).into_iter().rev() {
                    rows.push(w);
                }
            }
        };
        // Built bottom-up, and only as far as the view reaches.
        for (i, item) in items.iter().enumerate().rev() {
            if rows.len() >= want {
                break;
            }
            let id = ids[i];
            let notes: Vec<&Notice> = self
                .notices
                .iter()
                .filter(|n| id.is_some() && n.after.as_deref() == id)
                .collect();
            for n in notes.iter().rev() {
                push_block(self.notice_lines(n), &mut rows);
            }
            let mut block = transcript::item_lines(item, self.expanded);
            let role = item
                .as_map()
                .and_then(|m| m.get("role"))
                .and_then(Value::as_str);
            if matches!(role, Some("user" | "bashExecution")) && i > 0 {
                block.insert(0, Line::default());
            }
            push_block(block, &mut rows);
        }
        if rows.len() < want {
            for n in self
                .notices
                .iter()
                .filter(orphan)
                .collect::<Vec<_>>()
                .iter()
                .rev()
            {
                push_block(self.notice_lines(n), &mut rows);
            }
        }
        if rows.is_empty() && state.is_loaded() {
            rows.push(Line::from(Span::styled(
                format!(
                    "attached to {}; nothing here yet — type a prompt",
                    self.session_id
                ),
                DIM,
            )));
        }
        rows.reverse();
        let end = rows
            .len()
            .saturating_sub(self.scroll.min(rows.len().saturating_sub(height)));
        let start = end.saturating_sub(height);
        let mut visible: Vec<Line<'static>> = rows[start..end].to_vec();
        if self.scroll > 0
            && let Some(last) = visible.last_mut()
        {
            *last = Line::from(Span::styled(
                "  ↓ more below (PgDn)",
                Style::new().fg(Color::Black).bg(Color::Yellow),
            ));
        }
        frame.render_widget(Paragraph::new(visible), area);
    }

    fn notice_lines(&self, n: &Notice) -> Vec<Line<'static>> {
        let style = match n.tone {
            Tone::Info => Style::new().fg(Color::Cyan),
            Tone::Ok => TOOL_OK,
            Tone::Error => ERROR,
            Tone::Unknown => WARN,
        };
        n.text
            .lines()
            .map(|l| Line::from(Span::styled(l.to_owned(), style)))
            .collect()
    }
}

/// Wraps at exactly `width` columns (the input: the cursor math must match).
fn char_wrap(line: &Line<'static>, width: u16) -> Vec<Line<'static>> {
    let width = usize::from(width.max(1));
    let mut rows = vec![Vec::<Span<'static>>::new()];
    let mut col = 0;
    for span in &line.spans {
        let mut chunk = String::new();
        for c in span.content.chars() {
            let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
            if col + w > width {
                if !chunk.is_empty()
                    && let Some(r) = rows.last_mut()
                {
                    r.push(Span::styled(std::mem::take(&mut chunk), span.style));
                }
                rows.push(Vec::new());
                col = 0;
            }
            chunk.push(c);
            col += w;
        }
        if !chunk.is_empty()
            && let Some(r) = rows.last_mut()
        {
            r.push(Span::styled(chunk, span.style));
        }
    }
    rows.into_iter().map(Line::from).collect()
}
