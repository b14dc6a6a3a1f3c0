//! Reading context from the host's disk, when the operator sets `REACTSTEP_WORKSPACE_ROOT`:
//! `explicit_context_paths`, `last_focused_file_path` and pinned ids that arrive without content
//! are read from `<root>/<project_id>/…`, pinned ids from `<root>/<project_id>/.reactstep/pinned/<id>`.
//!
//! This is a door into the host, so every step is checked: the project id is one plain path
//! segment; paths are relative, without `..` or NUL. The root is opened once at start; the
//! project's folder is opened beneath it, and the file beneath that, each resolved and opened in
//! one step by the kernel (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, see
//! `src/beneath.rs`, shared with the driver's file tools), so a name swapped for a symbolic link
//! between a check and the open cannot lead out: no symbolic link is followed, not even one that
//! stays inside. Only a regular file is read, judged on the opened descriptor; a FIFO is opened
//! non-blocking and refused. Files over the size limit or that are not UTF-8 text are refused. A
//! refusal is a reason in the report, never an error of the step.
//!
//! Not caught: a hard link inside the project to a file elsewhere on the same filesystem is that
//! file under another name, and no resolution can tell (see `docs/reliability.md`).

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

#[cfg(all(test, target_os = "linux"))]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod attacks;
#[cfg(target_os = "linux")]
use crate::beneath;

/// Where pinned items live inside a project's folder.
pub const PINNED_DIR: &str = ".reactstep/pinned";

#[derive(Debug)]
pub struct Workspace {
    #[cfg(target_os = "linux")]
    root: std::os::fd::OwnedFd,
    /// Resolve by the component walk even where `openat2` works: set only by tests.
    #[cfg(target_os = "linux")]
    walk_only: bool,
    max_file_bytes: u64,
}

impl Workspace {
    /// The root must exist: a misconfigured root is an error at start, not on every request. It
    /// is opened here and held, so later requests resolve from this very folder.
    pub fn new(root: &Path, max_file_bytes: u64) -> std::io::Result<Self> {
        #[cfg(not(target_os = "linux"))]
        fs::read_dir(root)?;
        Ok(Self {
            #[cfg(target_os = "linux")]
            root: open_root(root)?,
            #[cfg(target_os = "linux")]
            walk_only: false,
            max_file_bytes,
        })
    }

    /// The text of `relative` inside the project's folder, or why it cannot be read.
    pub fn read(&self, project_id: Option<&str>, relative: &str) -> Result<String, String> {
        let project = plain_project(project_id)?;
        let relative = safe_relative(relative)?;
        self.read_at(project, &relative)
    }

    /// The text of a pinned item by id.
    pub fn read_pinned(&self, project_id: Option<&str>, id: &str) -> Result<String, String> {
        let project = plain_project(project_id)?;
        if !is_plain_segment(id) {
            return Err("a pinned id read from the workspace must be one plain file name".into());
        }
        self.read_at(project, &Path::new(PINNED_DIR).join(id))
    }

    fn read_at(&self, project: &str, relative: &Path) -> Result<String, String> {
        let file = self.open(project, relative)?;
        let bytes = read_capped(file, self.max_file_bytes)?;
        if bytes.contains(&0) {
            return Err("the file is binary".into());
        }
        String::from_utf8(bytes).map_err(|_| "the file is binary (not UTF-8 text)".to_string())
    }

    /// Opens the project's folder beneath the root, then the file beneath the project's folder.
    #[cfg(target_os = "linux")]
    fn open(&self, project: &str, relative: &Path) -> Result<fs::File, String> {
        use std::os::fd::AsFd;
        let dir = beneath::open_beneath(
            self.root.as_fd(),
            Path::new(project),
            beneath::DIR,
            self.walk_only,
        )
        .map_err(|e| project_refusal(&e))?;
        beneath::open_beneath(dir.as_fd(), relative, beneath::FILE, self.walk_only)
            .map(fs::File::from)
            .map_err(|e| file_refusal(&e))
    }

    /// This build has no open beneath a folder (the service targets Linux), and a check before
    /// an open by path can always be raced: nothing is read rather than something read unsafely.
    #[cfg(not(target_os = "linux"))]
    fn open(&self, _project: &str, _relative: &Path) -> Result<fs::File, String> {
        Err("reading from the workspace is only supported on Linux".into())
    }

    /// The same workspace, resolving by the component walk that stands in for `openat2`.
    #[cfg(all(test, target_os = "linux"))]
    fn walking(root: &Path, max_file_bytes: u64) -> std::io::Result<Self> {
        let mut ws = Self::new(root, max_file_bytes)?;
        ws.walk_only = true;
        Ok(ws)
    }
}

/// The root is the operator's choice, so a symbolic link to it is followed, once, here.
#[cfg(target_os = "linux")]
fn open_root(root: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(root)
        .map(Into::into)
}

fn plain_project(project_id: Option<&str>) -> Result<&str, String> {
    let id = project_id.ok_or("project_id is needed to read from the workspace")?;
    if !is_plain_segment(id) {
        return Err("project_id is not a plain folder name, so nothing is read for it".into());
    }
    Ok(id)
}

#[cfg(target_os = "linux")]
fn project_refusal(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => "the project has no folder in the workspace".into(),
        Some(libc::ELOOP) => {
            "the project's folder is a symbolic link, and symbolic links are not followed in the workspace".into()
        }
        Some(libc::EXDEV) => "the project's folder leaves the workspace".into(),
        _ => "the project's folder cannot be opened".into(),
    }
}

#[cfg(target_os = "linux")]
fn file_refusal(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENOTDIR) => "no such file in the workspace".into(),
        Some(libc::ELOOP) => {
            "the path goes through a symbolic link, and symbolic links are not followed in the workspace".into()
        }
        Some(libc::EXDEV) => "the path leads outside the project's folder".into(),
        // A socket cannot be opened at all: it is refused like the other kinds.
        Some(libc::ENXIO) => NOT_REGULAR.into(),
        _ => "the file cannot be read".into(),
    }
}

const NOT_REGULAR: &str =
    "not a regular file (a directory, FIFO, socket or device is never read from the workspace)";

/// Reads an opened file, judged on the descriptor itself: what was opened is what is checked.
/// The file may grow after `fstat`, so the read stops one byte past the limit whatever it said.
fn read_capped(file: fs::File, limit: u64) -> Result<Vec<u8>, String> {
    let meta = file
        .metadata()
        .map_err(|_| "the file cannot be read".to_string())?;
    if !meta.file_type().is_file() {
        return Err(NOT_REGULAR.into());
    }
    let over = || format!("the file is over the size limit of {limit} bytes");
    if meta.len() > limit {
        return Err(over());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|_| "the file cannot be read".to_string())?;
    if bytes.len() as u64 > limit {
        return Err(over());
    }
    Ok(bytes)
}

/// One folder or file name: no separators, no `.`/`..`, no NUL, not hidden, bounded.
fn is_plain_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && !s.starts_with('.')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A path relative to the project, refused when it is absolute, names a drive, climbs with
/// `..`, or holds a NUL. Windows separators are read as `/`.
fn safe_relative(path: &str) -> Result<PathBuf, String> {
    if path.contains('\0') {
        return Err("the path contains a NUL byte".into());
    }
    let path = path.replace('\\', "/");
    let bytes = path.as_bytes();
    if path.starts_with('/')
        || (bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic())
    {
        return Err("absolute paths are refused: paths are relative to the project".into());
    }
    let mut out = PathBuf::new();
    for component in Path::new(&path).components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err("paths with '..' are refused".into()),
            Component::RootDir | Component::Prefix(_) => {
                return Err("absolute paths are refused: paths are relative to the project".into())
            }
        }
    }
    if out.as_os_str().is_empty() {
        return Err("the path names no file".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_accepted_and_normalised() {
        assert_eq!(
            safe_relative("./src/a.rs").ok(),
            Some(PathBuf::from("src/a.rs"))
        );
        assert_eq!(
            safe_relative("src\\win\\b.rs").ok(),
            Some(PathBuf::from("src/win/b.rs"))
        );
    }

    #[test]
    fn escapes_are_refused() {
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "C:\\Windows\\win.ini",
            "a\0b",
            "",
            ".",
        ] {
            assert!(safe_relative(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn project_ids_are_single_plain_segments() {
        assert!(is_plain_segment("4b1e6f0e-0000-4000-8000-000000000001"));
        for bad in ["..", ".", "a/b", "", ".hidden", "a\0"] {
            assert!(!is_plain_segment(bad), "{bad:?}");
        }
    }
}
