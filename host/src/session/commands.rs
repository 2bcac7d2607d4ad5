//! User commands (`!command`): bounded slots, cancellation, and where their records go.

use std::sync::Arc;

use tracing::Instrument;

use super::error::SessionError;
use super::runtime::{Inner, MAX_RUNNING_COMMANDS, SessionRuntime};
use super::view::Phase;
use crate::message::{AgentMessage, BashExecutionMessage};
use crate::tool::run_bash;

/// What a user command did.
#[derive(Debug, Clone, PartialEq)]
pub struct BashOutcome {
    /// The record.
    pub message: BashExecutionMessage,
    /// True when a turn was running, so the record is inserted when it settles.
    pub deferred: bool,
}

impl SessionRuntime {
    /// Runs a user `!command` (`exclude_from_context` for `!!command`).
    ///
    /// # Errors
    /// [`SessionError::Bash`] if the shell could not start; [`SessionError::Store`] if the
    /// record could not be persisted; [`SessionError::Closed`] after shutdown.
    pub async fn bash(
        &self,
        command: &str,
        exclude_from_context: bool,
    ) -> Result<BashOutcome, SessionError> {
        self.bash_until(command, exclude_from_context, std::future::pending())
            .await
    }

    /// [`SessionRuntime::bash`], also cancelled when `stop` completes: the command's process group
    /// is killed, as [`SessionRuntime::abort`] would, and the record says `cancelled`.
    ///
    /// # Errors
    /// As [`SessionRuntime::bash`].
    pub async fn bash_until(
        &self,
        command: &str,
        exclude_from_context: bool,
        stop: impl Future<Output = ()> + Send,
    ) -> Result<BashOutcome, SessionError> {
        let inner = &self.inner;
        let started = inner.clock.now_ms();
        let (cancel, name) = {
            let mut st = inner.lock();
            if inner.shutdown.is_cancelled() {
                return Err(SessionError::Closed);
            }
            if st.running_commands >= MAX_RUNNING_COMMANDS {
                return Err(SessionError::TooManyCommands);
            }
            st.running_commands += 1;
            st.bash_counter += 1;
            (
                st.abort.child_token(),
                format!("user-bash-{started}-{}", st.bash_counter),
            )
        };
        // Releases the slot however this future ends (completion, error or drop).
        let _slot = CommandSlot {
            inner: Arc::clone(inner),
        };
        let config = &inner.config.bash;
        let run = run_bash(
            config,
            command,
            &inner.cwd,
            config.default_timeout,
            &inner.artifacts_dir,
            &name,
            &cancel,
        )
        .instrument(tracing::info_span!("bash", session_id = %inner.id));
        tokio::pin!(run, stop);
        // Once `stop` fires, the same run goes on until it has killed the command and
        // collected its output, so the record is written either way.
        let run = tokio::select! {
            biased;
            run = &mut run => run,
            () = &mut stop => {
                cancel.cancel();
                run.await
            }
        }
        .map_err(SessionError::Bash)?;
        let mut output = run.output;
        if run.timed_out {
            output.push_str("\n\n(command timed out)");
        }
        let message = BashExecutionMessage {
            command: command.to_owned(),
            output,
            exit_code: run.exit_code,
            cancelled: run.cancelled || run.timed_out,
            truncated: run.truncated,
            full_output_path: run.full_output_path.map(|p| p.display().to_string()),
            timestamp: started,
            exclude_from_context,
        };
        let mut st = inner.lock();
        let deferred = st.doc.phase != Phase::Idle;
        if deferred {
            st.pending_bash.push(message.clone());
        } else {
            inner.append_new(&mut st, AgentMessage::BashExecution(message.clone()))?;
        }
        Ok(BashOutcome { message, deferred })
    }
}

/// One running user command; dropping it frees the slot.
struct CommandSlot {
    inner: Arc<Inner>,
}

impl Drop for CommandSlot {
    fn drop(&mut self) {
        let mut st = self.inner.lock();
        st.running_commands = st.running_commands.saturating_sub(1);
    }
}
