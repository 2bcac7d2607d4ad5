//! The config file: named connection profiles, so `--ca/--cert/--key` need not be repeated.
//!
//! ```toml
//! default_profile = "build-box"          # optional
//!
//! [profiles.build-box]
//! connect = "tls://build-box.example:7879"
//! ca = "pki/ca.pem"                      # relative paths: against this file's directory
//! cert = "pki/alice.pem"
//! key = "pki/alice.key"
//! server_name = "build-box.example"      # optional, as --server-name
//! server_id = "…"                        # optional, as --server-id
//! ```
//!
//! Where: `--config FILE` (or `BATON_CONFIG`), else `$XDG_CONFIG_HOME/baton/config.toml`,
//! else `~/.config/baton/config.toml`. Which profile: `--profile NAME` (or `BATON_PROFILE`),
//! else `default_profile`, else none. Flags and environment variables override its values.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use baton_protocol::unix::BaseDir;

use serde::Deserialize;

/// Largest config file read (it holds a few profiles; anything bigger is a mistake).
pub(crate) const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// A profile's settings, paths already resolved against the file's directory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Profile {
    /// As `--connect`.
    pub(crate) connect: Option<String>,
    /// As `--ca`.
    pub(crate) ca: Option<PathBuf>,
    /// As `--cert`.
    pub(crate) cert: Option<PathBuf>,
    /// As `--key`.
    pub(crate) key: Option<PathBuf>,
    /// As `--server-name`.
    pub(crate) server_name: Option<String>,
    /// As `--server-id`.
    pub(crate) server_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    default_profile: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, Profile>,
}

/// Why the config could not be used (a usage/configuration error, exit status 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {reason}")]
    Read { path: String, reason: String },
    /// The file is larger than [`MAX_CONFIG_BYTES`].
    #[error("{path}: larger than {MAX_CONFIG_BYTES} bytes")]
    TooLarge { path: String },
    /// Not TOML of the expected shape (an unknown key is named).
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
    /// A profile was asked for, but there is no config file.
    #[error("profile {name:?} asked for, but there is no config file {path}")]
    NoFile { name: String, path: String },
    /// The selected profile is not in the file.
    #[error("unknown profile {name:?} in {path} (known: {known})")]
    UnknownProfile {
        name: String,
        path: String,
        known: String,
    },
}

/// Where the config file is when `--config` is not given: `baton/config.toml` under the XDG
/// config directory (`$XDG_CONFIG_HOME` when absolute, else `$HOME/.config`); `None` without
/// either.
pub(crate) fn default_path(
    xdg_config_home: Option<&OsStr>,
    home: Option<&OsStr>,
) -> Option<PathBuf> {
    Some(
        BaseDir::Config
            .resolve(xdg_config_home, home)?
            .join("baton")
            .join("config.toml"),
    )
}

/// Loads the profile to use.
///
/// `explicit` is a `--config` file (which must exist); otherwise `fallback` is read if it
/// exists. `wanted` is `--profile`; without it the file's `default_profile` is used, and
/// without that no profile (an empty one).
///
/// # Errors
/// [`ConfigError`]: an unreadable or invalid file, or an unknown profile.
pub(crate) fn load(
    explicit: Option<&Path>,
    fallback: Option<&Path>,
    wanted: Option<&str>,
) -> Result<Profile, ConfigError> {
    let (path, required) = match (explicit, fallback) {
        (Some(p), _) => (Some(p), true),
        (None, p) => (p, false),
    };
    let text = match path {
        Some(p) => read(p, required)?,
        None => None,
    };
    let Some(text) = text else {
        // No file: only asking for a profile by name is an error.
        return match wanted {
            None => Ok(Profile::default()),
            Some(name) => Err(ConfigError::NoFile {
                name: name.to_owned(),
                path: path.map_or_else(
                    || "(neither XDG_CONFIG_HOME nor HOME is set)".to_owned(),
                    |p| p.display().to_string(),
                ),
            }),
        };
    };
    let path = path.unwrap_or(Path::new("config.toml"));
    parse(&text, path, wanted)
}

fn read(path: &Path, required: bool) -> Result<Option<String>, ConfigError> {
    let shown = path.display().to_string();
    let err = |e: std::io::Error| ConfigError::Read {
        path: shown.clone(),
        reason: e.to_string(),
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    let mut text = String::new();
    use std::io::Read as _;
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(err)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge { path: shown });
    }
    Ok(Some(text))
}

/// Parses the file's `text` (read from `path`) and picks the profile.
///
/// # Errors
/// As [`load`].
pub(crate) fn parse(text: &str, path: &Path, wanted: Option<&str>) -> Result<Profile, ConfigError> {
    let shown = path.display().to_string();
    let file: File = toml::from_str(text).map_err(|e| ConfigError::Invalid {
        path: shown.clone(),
        reason: one_line(&e, text),
    })?;
    let Some(name) = wanted.or(file.default_profile.as_deref()) else {
        return Ok(Profile::default());
    };
    let Some(profile) = file.profiles.get(name) else {
        let known: Vec<&str> = file.profiles.keys().map(String::as_str).collect();
        return Err(ConfigError::UnknownProfile {
            name: name.to_owned(),
            path: shown,
            known: if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            },
        });
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let resolve = |p: &Option<PathBuf>| p.as_ref().map(|p| base.join(p));
    Ok(Profile {
        ca: resolve(&profile.ca),
        cert: resolve(&profile.cert),
        key: resolve(&profile.key),
        ..profile.clone()
    })
}

/// toml's message with the line it is on, on one line.
fn one_line(e: &toml::de::Error, text: &str) -> String {
    let message = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {message}")
        }
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
default_profile = "home"

[profiles.home]
connect = "unix:///run/baton/x.sock"

[profiles.box]
connect = "tls://build-box.example:7879"
ca = "pki/ca.pem"
cert = "/abs/alice.pem"
key = "pki/alice.key"
server_name = "build-box.example"
server_id = "00000000-0000-4000-8000-000000000001"
"#;

    fn at(dir: &str) -> PathBuf {
        Path::new(dir).join("config.toml")
    }

    #[test]
    fn the_named_profile_is_selected_and_its_relative_paths_resolve_against_the_file() {
        let p = parse(FILE, &at("/home/a/.config/baton"), Some("box")).unwrap();
        assert_eq!(p.connect.as_deref(), Some("tls://build-box.example:7879"));
        assert_eq!(
            p.ca,
            Some(PathBuf::from("/home/a/.config/baton/pki/ca.pem"))
        );
        assert_eq!(p.cert, Some(PathBuf::from("/abs/alice.pem")));
        assert_eq!(
            p.key,
            Some(PathBuf::from("/home/a/.config/baton/pki/alice.key"))
        );
        assert_eq!(p.server_name.as_deref(), Some("build-box.example"));
        assert_eq!(
            p.server_id.as_deref(),
            Some("00000000-0000-4000-8000-000000000001")
        );
    }

    #[test]
    fn without_a_name_the_default_profile_is_used() {
        let p = parse(FILE, &at("/c"), None).unwrap();
        assert_eq!(p.connect.as_deref(), Some("unix:///run/baton/x.sock"));
        let p = parse(
            "[profiles.a]\nconnect = \"tcp://127.0.0.1:1\"\n",
            &at("/c"),
            None,
        )
        .unwrap();
        assert_eq!(p, Profile::default(), "no default_profile: no profile");
    }

    #[test]
    fn an_unknown_profile_lists_the_known_ones() {
        let e = parse(FILE, &at("/c"), Some("nope")).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("\"nope\"") && text.contains("box, home"),
            "{text}"
        );
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_it() {
        let e = parse("[profiles.a]\nconect = \"x\"\n", &at("/c"), Some("a")).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("conect") && text.contains("line 2"), "{text}");
        assert!(!text.contains('\n'), "one line: {text}");
        let e = parse("defaults = 1\n", &at("/c"), None).unwrap_err();
        assert!(e.to_string().contains("defaults"), "{e}");
    }

    #[test]
    fn invalid_toml_is_an_error() {
        assert!(matches!(
            parse("[profiles.a\n", &at("/c"), None),
            Err(ConfigError::Invalid { .. })
        ));
    }

    #[test]
    fn a_missing_default_file_is_no_profile_but_a_missing_explicit_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.toml");
        assert_eq!(
            load(None, Some(&missing), None).unwrap(),
            Profile::default()
        );
        assert!(matches!(
            load(None, Some(&missing), Some("box")),
            Err(ConfigError::NoFile { .. })
        ));
        assert!(matches!(
            load(Some(&missing), None, None),
            Err(ConfigError::Read { .. })
        ));
    }

    #[test]
    fn a_file_is_read_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, FILE).unwrap();
        let p = load(Some(&path), None, Some("box")).unwrap();
        assert_eq!(p.ca, Some(dir.path().join("pki/ca.pem")));
    }

    #[test]
    fn the_default_path_prefers_xdg_config_home() {
        assert_eq!(
            default_path(Some(OsStr::new("/x")), Some(OsStr::new("/h"))),
            Some(PathBuf::from("/x/baton/config.toml"))
        );
        assert_eq!(
            default_path(Some(OsStr::new("rel")), Some(OsStr::new("/h"))),
            Some(PathBuf::from("/h/.config/baton/config.toml"))
        );
        assert_eq!(default_path(None, None), None);
    }
}
