//! The Unix-socket naming convention both ends share (pure: callers supply the environment).
//!
//! A server listens at `<dir>/<serverId>.sock`. Without an explicit address, clients look in
//! the same per-user directory and probe the sockets there in sorted order.

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
    fn socket_names_round_trip_server_ids() {
        let id = ServerId::parse("00000000-0000-4000-8000-000000000001")
            .unwrap_or_else(|_| unreachable!());
        assert_eq!(server_id_of_socket(&socket_file_name(&id)), Some(id));
        assert_eq!(server_id_of_socket("other.sock"), None);
    }
}
