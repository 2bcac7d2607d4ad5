//! The per-user directory conventions both ends share (pure: callers supply the environment).
//!
//! A server listens at `<dir>/<serverId>.sock`. Without an explicit address, clients look in
//! the same per-user directory and probe the sockets there in sorted order.
//!
//! Every other per-user path (the sessions directory, profiles, the models file, prompt
//! history) sits under an XDG base directory, found by the one rule in [`BaseDir::resolve`].

use std::ffi::OsStr;
use std::path::PathBuf;

use crate::ids::ServerId;

/// At most this many sockets are probed when discovering a server.
pub const MAX_DISCOVERY_PROBES: usize = 16;

/// The socket file name for a server.
pub fn socket_file_name(server_id: &ServerId) -> String {
    format!("{server_id}.sock")
}

/// The per-user socket directory: `$XDG_RUNTIME_DIR/baton` when that is set and absolute,
/// else `/tmp/baton-<uid>`.
pub fn default_socket_dir(xdg_runtime_dir: Option<&OsStr>, uid: u32) -> PathBuf {
    match xdg_runtime_dir.map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("baton"),
        _ => PathBuf::from(format!("/tmp/baton-{uid}")),
    }
}

/// An XDG base directory (the XDG Base Directory Specification, version 0.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaseDir {
    /// `$XDG_CONFIG_HOME`, else `~/.config`: profiles and the models file.
    Config,
    /// `$XDG_DATA_HOME`, else `~/.local/share`: the host's sessions.
    Data,
    /// `$XDG_STATE_HOME`, else `~/.local/state`: prompt history.
    State,
}

impl BaseDir {
    /// The environment variable that names this directory.
    pub const fn variable(self) -> &'static str {
        match self {
            Self::Config => "XDG_CONFIG_HOME",
            Self::Data => "XDG_DATA_HOME",
            Self::State => "XDG_STATE_HOME",
        }
    }

    /// The default below `$HOME` when the variable is unset or unusable.
    pub const fn under_home(self) -> &'static str {
        match self {
            Self::Config => ".config",
            Self::Data => ".local/share",
            Self::State => ".local/state",
        }
    }

    /// The directory, from the values of [`variable`](Self::variable) and `HOME`.
    ///
    /// The specification's rule: a value that is unset, empty or relative is ignored (a
    /// relative path would resolve against whatever directory the process happens to start
    /// in). `HOME` is held to the same rule; `None` when neither is usable.
    pub fn resolve(self, value: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
        let absolute = |v: &OsStr| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
        value
            .and_then(absolute)
            .or_else(|| home.and_then(absolute).map(|h| h.join(self.under_home())))
    }

    /// [`resolve`](Self::resolve) from this process's environment.
    pub fn from_env(self) -> Option<PathBuf> {
        self.resolve(
            std::env::var_os(self.variable()).as_deref(),
            std::env::var_os("HOME").as_deref(),
        )
    }
}

/// The server id named by a socket file name, if it follows the convention.
pub fn server_id_of_socket(file_name: &str) -> Option<ServerId> {
    file_name
        .strip_suffix(".sock")
        .and_then(|stem| ServerId::parse(stem).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_directory_prefers_an_absolute_runtime_dir() {
        assert_eq!(
            default_socket_dir(Some(OsStr::new("/run/user/1000")), 1000),
            PathBuf::from("/run/user/1000/baton")
        );
        assert_eq!(
            default_socket_dir(Some(OsStr::new("relative")), 7),
            PathBuf::from("/tmp/baton-7")
        );
        assert_eq!(default_socket_dir(None, 7), PathBuf::from("/tmp/baton-7"));
    }

    #[test]
    fn a_base_directory_ignores_unset_empty_and_relative_values() {
        let home = Some(OsStr::new("/home/u"));
        for dir in [BaseDir::Config, BaseDir::Data, BaseDir::State] {
            let fallback = PathBuf::from("/home/u").join(dir.under_home());
            assert_eq!(dir.resolve(Some(OsStr::new("/x")), home), Some("/x".into()));
            assert_eq!(dir.resolve(None, home), Some(fallback.clone()));
            assert_eq!(
                dir.resolve(Some(OsStr::new("")), home),
                Some(fallback.clone())
            );
            assert_eq!(
                dir.resolve(Some(OsStr::new("rel/dir")), home),
                Some(fallback)
            );
            assert_eq!(dir.resolve(None, Some(OsStr::new("relative-home"))), None);
            assert_eq!(dir.resolve(None, None), None);
        }
        assert_eq!(
            BaseDir::State.resolve(None, home),
            Some(PathBuf::from("/home/u/.local/state"))
        );
    }

    #[test]
    fn socket_names_round_trip_server_ids() {
        let id = ServerId::parse("00000000-0000-4000-8000-000000000001")
            .unwrap_or_else(|_| unreachable!());
        assert_eq!(server_id_of_socket(&socket_file_name(&id)), Some(id));
        assert_eq!(server_id_of_socket("other.sock"), None);
    }
}
