//! The SQLite store's file on disk, before SQLite opens it: never through a symbolic link (a
//! link, dangling or not, could put the conversations anywhere, with any mode), never anything
//! but a regular file, and readable and writable by its owner only (0600): a new file is made so,
//! and an existing one (and its `-wal` and `-shm`) loses whatever its group and others could do.

use std::fs::{File, Metadata, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::store::Access;

/// What the mode of a store's file may allow beyond its owner: nothing.
const OTHERS: u32 = 0o077;

/// Makes the store's file ready for SQLite to open at `path`: its folder and the file made
/// (0600) when they are missing and the store is to be written; a link or anything but a file
/// refused; an existing file's mode narrowed to its owner. `Ok(false)`: there is no file, and
/// `access` is [`Access::Read`] (nothing is made to be read).
pub fn prepare(path: &Path, access: Access) -> Result<bool, String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => refuse_odd(&meta)?,
        // Not there, or a file where a folder of its path should be (said when it is made).
        Err(e) if e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => {
            if access == Access::Read {
                return Ok(false);
            }
            make(path)?;
        }
        Err(e) => return Err(format!("it cannot be looked at: {e}")),
    }
    let file = existing(path)?;
    narrow(&file, access)?;
    Ok(true)
}

/// The store's `-wal` and `-shm` (SQLite's, beside it), when they are there, given the store's
/// own mode, as SQLite gives them when it makes them: ones left by an earlier version may be
/// readable by others, and ones made while the store was read-only stay read-only after it is
/// writable again, which would keep it from being written.
pub fn match_companions(path: &Path, access: Access) -> Result<(), String> {
    let meta =
        std::fs::symlink_metadata(path).map_err(|e| format!("it cannot be looked at: {e}"))?;
    let wanted = meta.permissions().mode() & 0o700;
    for suffix in ["-wal", "-shm"] {
        let companion = companion(path, suffix);
        let Ok(meta) = std::fs::symlink_metadata(&companion) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o777;
        if !meta.is_file() || mode == wanted {
            continue;
        }
        let changed = open_no_link(&companion)
            .and_then(|file| file.set_permissions(std::fs::Permissions::from_mode(wanted)));
        match changed {
            Err(e) if access == Access::Write && mode & OTHERS != 0 => {
                return Err(format!(
                    "{} is readable by others (mode {mode:04o}) and cannot be made its owner's \
                     alone: {e}",
                    companion.display()
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether a WAL beside the store holds anything (writes not yet in the file itself).
pub fn has_wal(path: &Path) -> bool {
    std::fs::symlink_metadata(companion(path, "-wal")).is_ok_and(|meta| meta.len() > 0)
}

fn companion(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn refuse_odd(meta: &Metadata) -> Result<(), String> {
    if meta.file_type().is_symlink() {
        return Err(
            "it is a symbolic link: name the file itself (a link could put the \
             conversations anywhere, readable by anyone)"
                .into(),
        );
    }
    if meta.is_dir() {
        return Err("it is a folder, not a file".into());
    }
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    Ok(())
}

/// Makes the folder and the file, 0600. `O_EXCL`: a link put there meanwhile is not followed.
fn make(path: &Path) -> Result<(), String> {
    if let Some(folder) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(folder)
            .map_err(|e| format!("its folder {} cannot be made: {e}", folder.display()))?;
    }
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(_) => Ok(()),
        // Made by another process at once: it is looked at as an existing file.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            refuse_odd(&std::fs::symlink_metadata(path).map_err(|e| e.to_string())?)
        }
        Err(e) => Err(format!("it cannot be made: {e}")),
    }
}

/// The existing file, opened without following a link (one put there since it was looked at).
fn existing(path: &Path) -> Result<File, String> {
    let file = open_no_link(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => "it is a symbolic link: name the file itself".to_string(),
        _ => format!("it cannot be opened: {e}"),
    })?;
    let meta = file
        .metadata()
        .map_err(|e| format!("it cannot be looked at: {e}"))?;
    refuse_odd(&meta)?;
    Ok(file)
}

fn open_no_link(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// `file`'s mode without its group's and others' bits. A store to be written whose mode
/// cannot be narrowed (another user's file) is refused; one only read is read as it is.
fn narrow(file: &File, access: Access) -> Result<(), String> {
    let meta = file
        .metadata()
        .map_err(|e| format!("it cannot be looked at: {e}"))?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & OTHERS == 0 {
        return Ok(());
    }
    match file.set_permissions(std::fs::Permissions::from_mode(mode & !OTHERS)) {
        Ok(()) => Ok(()),
        Err(_) if access == Access::Read => Ok(()),
        Err(e) => Err(format!(
            "its mode is {mode:04o}, readable by others, and cannot be made its owner's alone: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_is_its_owners_alone_and_an_open_one_is_narrowed() {
        let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let new = folder.path().join("a/b/new.sqlite3");
        assert_eq!(prepare(&new, Access::Write), Ok(true));
        let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode(&new).ok(), Some(0o600));
        let open = folder.path().join("open.sqlite3");
        std::fs::write(&open, b"").unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o664))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(prepare(&open, Access::Write), Ok(true));
        assert_eq!(mode(&open).ok(), Some(0o600));
        let missing = folder.path().join("missing.sqlite3");
        assert_eq!(prepare(&missing, Access::Read), Ok(false));
        assert!(!missing.exists());
    }

    #[test]
    fn links_dangling_or_not_are_refused_and_nothing_is_made_through_them() {
        let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let target = folder.path().join("target.sqlite3");
        let link = folder.path().join("link.sqlite3");
        std::os::unix::fs::symlink(&target, &link).unwrap_or_else(|e| panic!("{e}"));
        let refused = prepare(&link, Access::Write);
        assert!(refused.is_err_and(|why| why.contains("symbolic link")));
        assert!(!target.exists(), "nothing is made through a dangling link");
    }
}
