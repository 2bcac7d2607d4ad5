//! The terminal itself: raw mode, the alternate screen, bracketed paste, synchronized output
//! (DEC mode 2026) around each frame, and handing the terminal to `$EDITOR` and back.

use std::io::{Stdout, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use crossterm::event::{DisableBracketedPaste, EnableBracketedPaste};
use crossterm::terminal::{
    BeginSynchronizedUpdate, Clear, ClearType, EndSynchronizedUpdate, EnterAlternateScreen,
    LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use crossterm::{cursor, execute, queue};
use ratatui::backend::CrosstermBackend;
use ratatui::{Frame, Terminal};

/// The full-screen terminal; restored to normal when dropped (and on a panic).
pub(crate) struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screen").finish_non_exhaustive()
    }
}

fn enter() -> std::io::Result<()> {
    enable_raw_mode()?;
    execute!(
        std::io::stdout(),
        EnterAlternateScreen,
        EnableBracketedPaste
    )
}

fn leave() {
    let _ = execute!(
        std::io::stdout(),
        DisableBracketedPaste,
        LeaveAlternateScreen,
        cursor::Show
    );
    let _ = disable_raw_mode();
}

impl Screen {
    /// Takes over the terminal.
    pub(crate) fn open() -> std::io::Result<Self> {
        // A panic must not leave the terminal raw and on the alternate screen.
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            leave();
            previous(info);
        }));
        enter()?;
        let terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
        Ok(Self { terminal })
    }

    /// Draws a frame; only changed cells are written, inside synchronized-output brackets so
    /// the terminal shows the frame whole (terminals without DEC 2026 ignore them).
    pub(crate) fn draw(&mut self, render: impl FnOnce(&mut Frame<'_>)) -> std::io::Result<()> {
        queue!(self.terminal.backend_mut(), BeginSynchronizedUpdate)?;
        self.terminal.draw(render)?;
        execute!(self.terminal.backend_mut(), EndSynchronizedUpdate)
    }

    /// Forgets what is on screen, so the next frame is drawn whole (Ctrl-L, after `$EDITOR`).
    pub(crate) fn repaint(&mut self) -> std::io::Result<()> {
        // Not `Terminal::clear`: it asks the terminal for the cursor position and waits for
        // the reply on stdin, which after `$EDITOR` (the event reader just replaced) never
        // arrived in time, so every Ctrl-G failed. A fresh `Terminal` starts from blank
        // buffers, matching the screen cleared here, and asks the terminal nothing.
        execute!(std::io::stdout(), Clear(ClearType::All))?;
        self.terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
        Ok(())
    }

    /// Hands the terminal to `$VISUAL`/`$EDITOR` (default `vi`) on `text`; returns the edited
    /// text. The file is private (0600) and removed afterwards.
    pub(crate) fn edit(&mut self, text: &str) -> std::io::Result<String> {
        let path = temp_path();
        {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            f.write_all(text.as_bytes())?;
        }
        leave();
        let editor = std::env::var("VISUAL")
            .ok()
            .or_else(|| std::env::var("EDITOR").ok())
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| "vi".to_owned());
        // Through the shell, so `EDITOR="code --wait"` works as it does for git.
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{editor} \"$1\""))
            .arg("sh")
            .arg(&path)
            .status();
        let restored = enter().and_then(|()| self.repaint());
        let result = match status {
            Ok(s) if s.success() => std::fs::read_to_string(&path),
            Ok(s) => Err(std::io::Error::other(format!("{editor} exited with {s}"))),
            Err(e) => Err(std::io::Error::other(format!("cannot run {editor}: {e}"))),
        };
        let _ = std::fs::remove_file(&path);
        restored?;
        result
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        leave();
    }
}

fn temp_path() -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("baton-prompt-{}-{n}.md", std::process::id()))
}
