//! Opening a path beneath a directory descriptor, so that no component of it can lead out.
//!
//! [`Root::open_at`] resolves a relative path starting at the root's descriptor. With
//! [`Scope::Beneath`] (a confined workspace) every step of the resolution must stay beneath
//! the root: `..` above it, an absolute path and an absolute symlink fail with `EXDEV`, and a
//! relative symlink is followed only while it stays beneath. With [`Scope::InRoot`] (the
//! unconfined tools, rooted at `/`) resolution is the ordinary one. Magic links
//! (`/proc/self/fd/*`) are never followed as such.
//!
//! The kernel does the resolution where it can: `openat2` with `RESOLVE_BENEATH` (or
//! `RESOLVE_IN_ROOT`) and `RESOLVE_NO_MAGICLINKS`. Where it cannot (a kernel before 5.6, or a
//! seccomp filter that refuses `openat2`), [`Resolver::Walk`] does the same resolution one
//! component at a time: each directory is opened with `O_NOFOLLOW | O_DIRECTORY` relative to
//! the descriptor of the one before it, a symlink is read with `readlinkat` and its target
//! resolved by the same walk, and `..` returns to the descriptor the walk came from, so it
//! never asks the kernel to resolve a name that could lead out. `openat2` answers `EAGAIN`
//! when a rename anywhere raced a `..` of its resolution; after a few tries the walk takes
//! over for that call.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::OnceLock;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Symlinks one resolution follows before it fails with `ELOOP` (the kernel's limit).
pub(super) const MAX_SYMLINKS: usize = 40;

/// Tries of `openat2` that a concurrent rename made fail with `EAGAIN` before the walk takes
/// over.
const EAGAIN_TRIES: usize = 4;

/// How far a resolution may go from the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// Never above the root: `..` there, absolute paths and absolute symlinks fail (`EXDEV`).
    Beneath,
    /// The root is `/`: `..` there stays there, absolute symlinks start again at the root.
    InRoot,
}

/// Who resolves paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resolver {
    /// The kernel, with `openat2`.
    Openat2,
    /// A walk one component at a time with `openat` and `readlinkat`.
    Walk,
}

impl Resolver {
    /// `openat2` where this kernel (and any seccomp filter) lets it run, the walk otherwise.
    pub(super) fn best() -> Self {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        let available = *AVAILABLE.get_or_init(|| {
            let probe = rustix::fs::openat2(
                rustix::fs::CWD,
                "/",
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
                ResolveFlags::NO_MAGICLINKS,
            );
            !matches!(probe, Err(Errno::NOSYS | Errno::PERM))
        });
        if available { Self::Openat2 } else { Self::Walk }
    }
}

/// A directory descriptor that resolutions start from and may not leave.
#[derive(Debug)]
pub(super) struct Root {
    fd: OwnedFd,
    scope: Scope,
    resolver: Resolver,
}

impl Root {
    /// Opens the directory `path` (symlinks in it are followed: the workspace itself is given
    /// by the host, not by the model) as a root.
    pub(super) fn open(path: &Path, scope: Scope, resolver: Resolver) -> io::Result<Self> {
        let fd = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self {
            fd,
            scope,
            resolver,
        })
    }

    /// Opens `rel` (relative to the root; empty means the root) with `flags` (`O_CLOEXEC` is
    /// added) and `mode` for a file it creates. A final symlink is followed unless `flags`
    /// has `O_NOFOLLOW`; `O_CREAT | O_EXCL` never follows one.
    pub(super) fn open_at(&self, rel: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let flags = flags | OFlags::CLOEXEC;
        if self.resolver == Resolver::Openat2 {
            let how = ResolveFlags::NO_MAGICLINKS
                | match self.scope {
                    Scope::Beneath => ResolveFlags::BENEATH,
                    Scope::InRoot => ResolveFlags::IN_ROOT,
                };
            let path = if rel.as_os_str().is_empty() {
                Path::new(".")
            } else {
                rel
            };
            for _ in 0..EAGAIN_TRIES {
                match rustix::fs::openat2(&self.fd, path, flags, mode, how) {
                    Err(Errno::AGAIN) => {}
                    done => return done.map_err(io::Error::from),
                }
            }
        }
        walk(self.fd.as_fd(), self.scope, rel, flags, mode).map_err(io::Error::from)
    }

    /// Opens the directory `rel` for use as a base of `*at` calls (`O_PATH`).
    pub(super) fn open_dir(&self, rel: &Path) -> io::Result<OwnedFd> {
        self.open_at(rel, OFlags::PATH | OFlags::DIRECTORY, Mode::empty())
    }
}

/// The resolution of [`Root::open_at`] one component at a time.
fn walk(
    root: BorrowedFd<'_>,
    scope: Scope,
    rel: &Path,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, Errno> {
    // The directories entered below the root, innermost last; `..` pops one.
    let mut dirs: Vec<OwnedFd> = Vec::new();
    // The components still to resolve, next last.
    let mut todo: Vec<Vec<u8>> = Vec::new();
    push_components(&mut todo, rel, scope, &mut dirs)?;
    let (mut links, mut raced) = (0, 0);
    loop {
        let here = dirs.last().map_or(root, AsFd::as_fd);
        let Some(name) = todo.pop() else {
            // The path ends at a directory: the root, or one `..` or a symlink led to.
            return rustix::fs::openat(here, ".", flags & !OFlags::CREATE, mode);
        };
        let name = OsStr::from_bytes(&name);
        if name == ".." {
            if dirs.pop().is_none() && scope == Scope::Beneath {
                return Err(Errno::XDEV);
            }
            continue;
        }
        let last = todo.is_empty();
        let opened = if last {
            rustix::fs::openat(here, name, flags | OFlags::NOFOLLOW, mode)
        } else {
            rustix::fs::openat(
                here,
                name,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
        };
        let error = match opened {
            Ok(fd) if last => return Ok(fd),
            Ok(fd) => {
                dirs.push(fd);
                continue;
            }
            Err(e @ (Errno::LOOP | Errno::NOTDIR)) => e,
            Err(e) => return Err(e),
        };
        // A symlink (or not a directory at all): follow it unless the caller said not to.
        let exclusive = flags.contains(OFlags::CREATE | OFlags::EXCL);
        if last && (flags.contains(OFlags::NOFOLLOW) || exclusive) {
            return Err(error);
        }
        let target = match rustix::fs::readlinkat(here, name, Vec::new()) {
            Ok(target) => target,
            Err(Errno::INVAL) => {
                // Not a symlink when read: what was swapped since the open (it is a directory
                // or a symlink now) is tried again; a file where a directory is needed is the
                // error.
                raced += 1;
                let now = rustix::fs::statat(here, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode));
                let retry = error == Errno::LOOP
                    || matches!(now, Ok(FileType::Directory | FileType::Symlink));
                if retry && raced <= MAX_SYMLINKS {
                    todo.push(name.as_bytes().to_vec());
                    continue;
                }
                return Err(error);
            }
            Err(e) => return Err(e),
        };
        links += 1;
        if links > MAX_SYMLINKS {
            return Err(Errno::LOOP);
        }
        push_components(
            &mut todo,
            Path::new(OsStr::from_bytes(target.as_bytes())),
            scope,
            &mut dirs,
        )?;
    }
}

/// Puts the components of `path` on `todo` so that its first is popped next. An absolute
/// `path` fails beneath the root and starts again at the root otherwise.
fn push_components(
    todo: &mut Vec<Vec<u8>>,
    path: &Path,
    scope: Scope,
    dirs: &mut Vec<OwnedFd>,
) -> Result<(), Errno> {
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => {
                if scope == Scope::Beneath {
                    return Err(Errno::XDEV);
                }
                dirs.clear();
            }
            Component::CurDir => {}
            Component::ParentDir => parts.push(b"..".to_vec()),
            Component::Normal(name) => parts.push(name.as_bytes().to_vec()),
        }
    }
    todo.extend(parts.into_iter().rev());
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// A workspace `ws` and a directory `out` beside it, under one temporary directory.
    fn tree() -> (tempfile::TempDir, std::path::PathBuf) {
        let top = tempfile::tempdir().unwrap();
        let ws = top.path().join("ws");
        std::fs::create_dir_all(ws.join("sub/deeper")).unwrap();
        std::fs::create_dir(top.path().join("out")).unwrap();
        std::fs::write(top.path().join("out/secret"), "secret").unwrap();
        std::fs::write(ws.join("a.txt"), "a").unwrap();
        std::fs::write(ws.join("sub/b.txt"), "b").unwrap();
        let link = |target: &str, name: &str| {
            std::os::unix::fs::symlink(target, ws.join(name)).unwrap();
        };
        link("../a.txt", "sub/up");
        link("deeper/..", "sub/here");
        link("../out/secret", "rel-out");
        link("../out", "rel-out-dir");
        link(
            &top.path().join("out/secret").display().to_string(),
            "abs-out",
        );
        link("loop-b", "loop-a");
        link("loop-a", "loop-b");
        (top, ws)
    }

    fn read(root: &Root, rel: &str) -> Result<String, Errno> {
        let fd = root
            .open_at(Path::new(rel), OFlags::RDONLY, Mode::empty())
            .map_err(|e| Errno::from_io_error(&e).unwrap())?;
        let mut text = String::new();
        std::fs::File::from(fd).read_to_string(&mut text).unwrap();
        Ok(text)
    }

    #[test]
    fn both_resolvers_follow_symlinks_beneath_the_root_and_refuse_the_way_out() {
        let (_top, ws) = tree();
        for resolver in [Resolver::best(), Resolver::Walk] {
            let root = Root::open(&ws, Scope::Beneath, resolver).unwrap();
            let ok = |rel: &str, text: &str| {
                assert_eq!(read(&root, rel), Ok(text.to_owned()), "{resolver:?} {rel}")
            };
            let err = |rel: &str, errno: Errno| {
                assert_eq!(read(&root, rel), Err(errno), "{resolver:?} {rel}")
            };
            ok("a.txt", "a");
            ok("sub/up", "a");
            ok("sub/../a.txt", "a");
            ok("sub/here/b.txt", "b");
            ok("./sub/deeper/../b.txt", "b");
            err("../ws/a.txt", Errno::XDEV);
            err("sub/../../ws/a.txt", Errno::XDEV);
            err("rel-out", Errno::XDEV);
            err("rel-out-dir/secret", Errno::XDEV);
            err("abs-out", Errno::XDEV);
            err("missing", Errno::NOENT);
            err("a.txt/x", Errno::NOTDIR);
            err("loop-a", Errno::LOOP);
            // O_NOFOLLOW refuses a final symlink, even one that stays inside.
            let nofollow = root.open_at(
                Path::new("sub/up"),
                OFlags::RDONLY | OFlags::NOFOLLOW,
                Mode::empty(),
            );
            assert_eq!(
                nofollow.map_err(|e| e.raw_os_error()).err(),
                Some(Some(Errno::LOOP.raw_os_error())),
                "{resolver:?}"
            );
            // The empty path, and a path ending in `..`, open the directory they name.
            assert!(root.open_dir(Path::new("")).is_ok(), "{resolver:?}");
            assert!(root.open_dir(Path::new("sub/..")).is_ok(), "{resolver:?}");
        }
    }

    #[test]
    fn in_root_scope_resolves_like_the_system() {
        let (top, ws) = tree();
        for resolver in [Resolver::best(), Resolver::Walk] {
            let root = Root::open(Path::new("/"), Scope::InRoot, resolver).unwrap();
            let rel = |p: &Path| p.strip_prefix("/").unwrap().to_path_buf();
            assert_eq!(
                read(&root, rel(&ws.join("abs-out")).to_str().unwrap()),
                Ok("secret".into())
            );
            assert_eq!(
                read(&root, rel(&ws.join("rel-out")).to_str().unwrap()),
                Ok("secret".into())
            );
            let up = format!("../../{}", rel(&top.path().join("out/secret")).display());
            assert_eq!(read(&root, &up), Ok("secret".into()), "{resolver:?}");
        }
    }
}
