//! Reading context from the host's disk, when the operator sets `REACTSTEP_WORKSPACE_ROOT`:
//! `explicit_context_paths`, `last_focused_file_path` and pinned ids that arrive without content
//! are read from `<root>/<project_id>/…`, pinned ids from `<root>/<project_id>/.reactstep/pinned/<id>`.
//!
//! This is a door into the host, so every step is checked: the project id is one plain path
//! segment; paths are relative, without `..` or NUL; the canonical path (symlinks followed) must
//! stay inside the project's folder; only regular files are opened (a FIFO would block); files
//! over the size limit or that are not UTF-8 text are refused. A refusal is a reason in the
//! report, never an error of the step.

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Where pinned items live inside a project's folder.
pub const PINNED_DIR: &str = ".reactstep/pinned";

#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    max_file_bytes: u64,
}

impl Workspace {
    /// The root must exist: a misconfigured root is an error at start, not on every request.
    pub fn new(root: &Path, max_file_bytes: u64) -> std::io::Result<Self> {
        Ok(Self {
            root: fs::canonicalize(root)?,
            max_file_bytes,
        })
    }

    /// The text of `relative` inside the project's folder, or why it cannot be read.
    pub fn read(&self, project_id: Option<&str>, relative: &str) -> Result<String, String> {
        let project = self.project_dir(project_id)?;
        self.read_inside(&project, &project, relative)
    }

    /// The text of a pinned item by id.
    pub fn read_pinned(&self, project_id: Option<&str>, id: &str) -> Result<String, String> {
        let project = self.project_dir(project_id)?;
        if !is_plain_segment(id) {
            return Err("a pinned id read from the workspace must be one plain file name".into());
        }
        self.read_inside(&project, &project.join(PINNED_DIR), id)
    }

    fn project_dir(&self, project_id: Option<&str>) -> Result<PathBuf, String> {
        let id = project_id.ok_or("project_id is needed to read from the workspace")?;
        if !is_plain_segment(id) {
            return Err("project_id is not a plain folder name, so nothing is read for it".into());
        }
        let dir = self.root.join(id);
        let canonical = fs::canonicalize(&dir)
            .map_err(|_| "the project has no folder in the workspace".to_string())?;
        if !canonical.starts_with(&self.root) {
            return Err("the project's folder leaves the workspace".into());
        }
        Ok(canonical)
    }

    fn read_inside(&self, fence: &Path, base: &Path, relative: &str) -> Result<String, String> {
        let relative = safe_relative(relative)?;
        let canonical = fs::canonicalize(base.join(&relative)).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "no such file in the workspace".to_string(),
            _ => "the file cannot be read".to_string(),
        })?;
        if !canonical.starts_with(fence) {
            return Err(
                "the path leads outside the project's folder (through a symbolic link)".into(),
            );
        }
        let meta = fs::metadata(&canonical).map_err(|_| "the file cannot be read".to_string())?;
        if !meta.is_file() {
            return Err("not a regular file".into());
        }
        if meta.len() > self.max_file_bytes {
            return Err(format!(
                "the file is over the size limit of {} bytes",
                self.max_file_bytes
            ));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        fs::File::open(&canonical)
            .and_then(|f| f.take(self.max_file_bytes + 1).read_to_end(&mut bytes))
            .map_err(|_| "the file cannot be read".to_string())?;
        if bytes.len() as u64 > self.max_file_bytes {
            return Err(format!(
                "the file is over the size limit of {} bytes",
                self.max_file_bytes
            ));
        }
        if bytes.contains(&0) {
            return Err("the file is binary".into());
        }
        String::from_utf8(bytes).map_err(|_| "the file is binary (not UTF-8 text)".to_string())
    }
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
