//! Unix user names from `/etc/passwd`.
//!
//! Only the local file is read (NSS sources such as LDAP or systemd-homed are not consulted:
//! that would need libc). A uid the file does not list has no name; the uid is the identity,
//! the name is for display and for hosts that grant by name on machines where names are local.
//! The file is re-read at most every [`PASSWD_TTL`] and at most [`MAX_PASSWD_BYTES`] of it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

/// How long a read of the user database is reused: 10 s.
pub(crate) const PASSWD_TTL: Duration = Duration::from_secs(10);
/// The most of the user database read: 4 MiB (a larger file is read up to there).
pub(crate) const MAX_PASSWD_BYTES: u64 = 4 * 1024 * 1024;

/// uid → user name, as the file lists them (the first entry for a uid wins).
type Table = HashMap<u32, Arc<str>>;

/// Parses `passwd(5)` lines (`name:password:uid:gid:gecos:home:shell`). Lines that do not
/// parse are skipped; so are NIS `+`/`-` entries.
pub(crate) fn parse(passwd: &str) -> HashMap<u32, Arc<str>> {
    let mut table = Table::new();
    for line in passwd.lines() {
        let mut fields = line.split(':');
        let (Some(name), Some(_password), Some(uid)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if name.is_empty() || name.starts_with(['#', '+', '-']) {
            continue;
        }
        let Ok(uid) = uid.trim().parse::<u32>() else {
            continue;
        };
        table.entry(uid).or_insert_with(|| Arc::from(name));
    }
    table
}

/// A cached view of the user database.
#[derive(Debug)]
pub(crate) struct UserNames {
    path: PathBuf,
    cache: Mutex<Option<(Instant, Arc<Table>)>>,
}

impl UserNames {
    /// Names from `/etc/passwd`.
    pub(crate) fn system() -> Self {
        Self::from_file("/etc/passwd")
    }

    /// Names from another file in `passwd(5)` format.
    pub(crate) fn from_file(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            cache: Mutex::new(None),
        }
    }

    /// The name of `uid`, if the file lists it. A file that cannot be read names nobody.
    pub(crate) async fn name(&self, uid: u32) -> Option<String> {
        let now = Instant::now();
        let cached = self
            .cache
            .lock()
            .as_ref()
            .filter(|(at, _)| now.saturating_duration_since(*at) < PASSWD_TTL)
            .map(|(_, table)| Arc::clone(table));
        let table = match cached {
            Some(table) => table,
            None => {
                let table = Arc::new(self.load().await);
                *self.cache.lock() = Some((now, Arc::clone(&table)));
                table
            }
        };
        table.get(&uid).map(|name| name.to_string())
    }

    async fn load(&self) -> Table {
        let read = async {
            let file = tokio::fs::File::open(&self.path).await?;
            let mut bytes = Vec::new();
            file.take(MAX_PASSWD_BYTES).read_to_end(&mut bytes).await?;
            Ok::<_, std::io::Error>(bytes)
        };
        match read.await {
            Ok(bytes) => parse(&String::from_utf8_lossy(&bytes)),
            Err(error) => {
                tracing::debug!(path = %self.path.display(), %error, "cannot read the user database");
                Table::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test code: a failed unwrap is a failed test"
    )]

    use super::{UserNames, parse};

    const PASSWD: &str = "\
# a comment
root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
alice:x:1000:1000:Alice,,,:/home/alice:/bin/bash
alias:x:1000:1000::/home/alias:/bin/sh
+nisuser::::::
broken line
bad:x:not-a-number:0::/:/bin/sh
:x:42:42::/:/bin/sh
";

    #[test]
    fn names_come_from_the_first_entry_for_a_uid_and_garbage_is_skipped() {
        let table = parse(PASSWD);
        assert_eq!(table.get(&0).map(|n| &**n), Some("root"));
        assert_eq!(table.get(&1000).map(|n| &**n), Some("alice"));
        assert_eq!(table.get(&1).map(|n| &**n), Some("daemon"));
        assert_eq!(table.get(&42), None);
        assert_eq!(table.len(), 3);
    }

    #[tokio::test]
    async fn a_missing_file_names_nobody() {
        let names = UserNames::from_file("/nonexistent/baton/passwd");
        assert_eq!(names.name(0).await, None);
    }

    #[tokio::test]
    async fn the_running_user_is_named_as_the_system_file_says() {
        let uid = std::fs::metadata("/proc/self").map(|m| {
            use std::os::unix::fs::MetadataExt as _;
            m.uid()
        });
        let Ok(uid) = uid else { return };
        let expected = std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|p| parse(&p).get(&uid).map(|n| n.to_string()));
        assert_eq!(UserNames::system().name(uid).await, expected);
    }
}
