//! The token file, `<sessions dir>/web-tokens.json`: each browser token's id, the SHA-256
//! digest of its secret (never the secret), what it gives and who minted it, so a restart
//! keeps paired browsers. Unused links are not in it: a restart forgets them.
//!
//! Written whole and atomically: a new `.web-tokens.json.tmp`, created exclusively with
//! mode 0600 (the mode given to the creating call, no window in which it is wider), synced,
//! renamed over the file, and the directory synced. Read without following a symlink; the
//! checks (a regular file of this user's) are made on the opened descriptor, and a file
//! wider than 0600 is tightened through it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::book::{Terms, Token};
use super::error::LinkError;
use super::minter::Minter;
use super::secret::{hex, parse_digest};

/// The file's name in the sessions directory.
pub const TOKENS_FILE: &str = "web-tokens.json";
const TMP_FILE: &str = ".web-tokens.json.tmp";
/// Its mode.
const MODE: u32 = 0o600;
/// Largest file read (a token is a few hundred bytes; [`MAX_TOKENS`](super::book::MAX_TOKENS) of
/// them with certificates fit well within this).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
const VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileV1 {
    version: u32,
    tokens: Vec<Record>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Record {
    id: String,
    /// SHA-256 of the secret, hex.
    sha256: String,
    role: String,
    session: Option<String>,
    read_only: bool,
    minter: Minter,
    minter_key: String,
    created_ms: u64,
    last_seen_ms: Option<u64>,
}

/// The path of the token file in `dir`.
pub(crate) fn path_in(dir: &Path) -> PathBuf {
    dir.join(TOKENS_FILE)
}

fn io_error(path: &Path) -> impl Fn(io::Error) -> LinkError + '_ {
    move |source| LinkError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The tokens recorded at `path` (none if there is no file).
///
/// # Errors
/// The file cannot be read, is not a regular file of this user's, is too large, or is not
/// a token file.
pub(crate) fn load(path: &Path) -> Result<Vec<Token>, LinkError> {
    let io = io_error(path);
    let invalid = |message: String| LinkError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(nofollow())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    let meta = file.metadata().map_err(&io)?;
    if !meta.is_file() {
        return Err(invalid("not a regular file".to_owned()));
    }
    let uid = rustix::process::geteuid().as_raw();
    if meta.uid() != uid {
        return Err(invalid(format!(
            "owned by uid {}, not by this process's uid {uid}",
            meta.uid()
        )));
    }
    if meta.permissions().mode() & 0o7777 != MODE {
        tracing::warn!(path = %path.display(), "browser token file was readable by others; tightened to 0600");
        file.set_permissions(fs::Permissions::from_mode(MODE))
            .map_err(&io)?;
    }
    let mut text = String::new();
    (&file)
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(&io)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(invalid(format!("larger than {MAX_FILE_BYTES} bytes")));
    }
    let parsed: FileV1 = serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    if parsed.version != VERSION {
        return Err(invalid(format!("unknown version {}", parsed.version)));
    }
    parsed
        .tokens
        .into_iter()
        .map(|r| {
            let hash = parse_digest(&r.sha256)
                .ok_or_else(|| invalid(format!("token {}: sha256 is not a digest", r.id)))?;
            let terms = Terms {
                role: r.role,
                session: r.session,
                read_only: r.read_only,
                minter: r.minter,
                minter_key: r.minter_key,
            };
            Token::new(r.id.clone(), hash, terms, r.created_ms, r.last_seen_ms)
                .map_err(|e| invalid(format!("token {}: {e}", r.id)))
        })
        .collect()
}

/// Replaces the file at `path` with one recording `tokens`.
///
/// # Errors
/// Any step failed; the old file is then untouched.
pub(crate) fn save<'a>(
    path: &Path,
    tokens: impl Iterator<Item = &'a Token>,
) -> Result<(), LinkError> {
    let file = FileV1 {
        version: VERSION,
        tokens: tokens
            .map(|t| Record {
                id: t.id.clone(),
                sha256: hex(&t.hash),
                role: t.terms.role.clone(),
                session: t.terms.session.clone(),
                read_only: t.terms.read_only,
                minter: t.terms.minter.clone(),
                minter_key: t.terms.minter_key.clone(),
                created_ms: t.created_ms,
                last_seen_ms: t.last_seen_ms,
            })
            .collect(),
    };
    let mut bytes = serde_json::to_vec_pretty(&file).map_err(|e| LinkError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    bytes.push(b'\n');
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(TMP_FILE);
    let tmp_io = io_error(&tmp);
    // A leftover of a crash mid-save; the sessions directory is this host's (locked).
    match fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(tmp_io(e)),
    }
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(MODE)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(&bytes)?;
            f.sync_all()
        });
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(io_error(path)(e));
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir))
}

/// `O_NOFOLLOW`: a symlink in the file's place is refused, not followed.
fn nofollow() -> i32 {
    i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::secret::digest;

    fn token(id: &str) -> Token {
        let terms = Terms {
            role: "viewer".into(),
            session: None,
            read_only: true,
            minter: Minter::Unix {
                uid: 7,
                gid: 7,
                user_name: Some("alice".into()),
            },
            minter_key: "unix:uid=7".into(),
        };
        Token::new(id.into(), digest("the secret"), terms, 5, Some(6)).unwrap()
    }

    #[test]
    fn the_file_holds_digests_only_and_is_0600_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        assert!(load(&path).unwrap().is_empty(), "no file: no tokens");
        save(&path, [token("ab12cd34")].iter()).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        assert!(!text.contains("the secret"));
        assert!(text.contains(&hex(&digest("the secret"))));
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let back = load(&path).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].id, "ab12cd34");
        assert_eq!(back[0].hash, digest("the secret"));
        assert_eq!(back[0].terms, token("x").terms);
        assert_eq!(back[0].last_seen_ms, Some(6));
        assert!(!dir.path().join(TMP_FILE).exists());
    }

    #[test]
    fn a_wider_file_is_tightened_and_a_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        save(&path, [token("a")].iter()).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(load(&path).unwrap().len(), 1);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let other = dir.path().join("elsewhere.json");
        fs::rename(&path, &other).unwrap();
        std::os::unix::fs::symlink(&other, &path).unwrap();
        assert!(matches!(load(&path), Err(LinkError::Io { .. })));
        // Saving replaces the link itself, never writes through it.
        save(&path, std::iter::empty()).unwrap();
        assert_eq!(load(&other).unwrap().len(), 1);
        assert!(load(&path).unwrap().is_empty());
    }

    #[test]
    fn a_damaged_file_is_a_one_line_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_in(dir.path());
        fs::write(&path, "{\"version\":1,\"tokens\":[{\"id\":1}]}").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains(TOKENS_FILE) && !e.contains('\n'), "{e}");
    }
}
