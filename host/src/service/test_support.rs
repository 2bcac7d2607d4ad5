//! Fixtures of the service layer's unit tests (test builds only): a session manager over a
//! temporary sessions directory, the limits the tests run a host under, and reading the
//! directory's list. A host is built from them with
//! [`ServiceHost::with_limits`](super::ServiceHost::with_limits); the directory's tests and
//! its users stand in for the residency with `super::directory::OpenIds`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use baton_protocol::Value;

use super::limits::ServiceLimits;
use crate::clock::ManualClock;
use crate::journal::FsyncPolicy;
use crate::provider::ModelRegistry;
use crate::provider::scripted::ScriptedConfig;
use crate::session::{CreateOptions, HostConfig, SUMMARY_REQUEST_OPENING, SessionManager};

/// A manager of sessions in `dir/sessions` working in `dir`: the scripted model answering at
/// once, no fsync, a manual clock.
pub(crate) fn manager(dir: &Path) -> SessionManager {
    let mut config = HostConfig::new(dir.join("sessions"));
    config.default_cwd = dir.to_path_buf();
    config.fsync = FsyncPolicy::Never;
    SessionManager::new(
        config,
        ModelRegistry::scripted(ScriptedConfig::new(Duration::ZERO, SUMMARY_REQUEST_OPENING)),
        Arc::new(ManualClock::new(1_748_568_000_000, 1)),
    )
    .unwrap()
}

/// Creates `n` sessions with the default options; their ids, in creation order.
pub(crate) fn create(manager: &SessionManager, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| manager.create(CreateOptions::default()).unwrap())
        .collect()
}

/// The default limits with at most `max_open` sessions open and no idle timeout (so no idle
/// reaper: the tests close by hand).
pub(crate) fn limits(max_open: usize) -> ServiceLimits {
    ServiceLimits {
        idle_timeout: None,
        max_open_sessions: max_open,
        ..ServiceLimits::default()
    }
}

/// The phase `list` (a `pi.session-directory` list) shows for session `id`.
pub(crate) fn listed_phase(list: &Value, id: &str) -> String {
    let entry = list
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|e| e.as_map().and_then(|m| m.get("id")).and_then(Value::as_str) == Some(id))
        })
        .and_then(Value::as_map)
        .unwrap_or_else(|| panic!("{id} is not listed"));
    entry
        .get("phase")
        .and_then(Value::as_str)
        .unwrap()
        .to_owned()
}
