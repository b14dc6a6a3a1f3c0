//! The folder the driver's file tools may read. It is opened once, and every path a tool is
//! given is opened beneath it by the kernel in one step (`crate::beneath`: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, as the service's workspace does), so a folder
//! swapped for a symbolic link between a check and the open cannot lead out: no symbolic link is
//! followed, not even one that stays inside. A file is judged on the opened descriptor, and
//! opened non-blocking, so a FIFO or a device is refused instead of waited on.

use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// What a folder holds, as the tools tell it apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Folder,
    File,
    /// A symbolic link, FIFO, socket or device: listed, never opened.
    Other,
}

/// The workspace's folder: its real path (for the model's absolute paths) and, on Linux, a
/// descriptor every open resolves from.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
    #[cfg(target_os = "linux")]
    dir: std::sync::Arc<std::os::fd::OwnedFd>,
}

/// A file opened for reading: a regular file, checked on its descriptor.
pub struct Opened {
    pub file: fs::File,
    pub len: u64,
}

impl Workspace {
    /// The folder given is the user's choice, so a symbolic link to it is followed, once, here.
    pub fn new(root: &Path) -> std::io::Result<Self> {
        let root = root.canonicalize()?;
        #[cfg(target_os = "linux")]
        let dir = {
            use std::os::unix::fs::OpenOptionsExt;
            fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
                .open(&root)?
        };
        #[cfg(not(target_os = "linux"))]
        fs::read_dir(&root)?;
        Ok(Self {
            root,
            #[cfg(target_os = "linux")]
            dir: std::sync::Arc::new(dir.into()),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The path `written` names, relative to the workspace (empty for the workspace itself). An
    /// absolute path is taken when it lies in the workspace; `..` may not climb out of it.
    pub fn relative(&self, written: &str) -> Result<PathBuf, String> {
        let outside = || format!("{written} is outside the workspace, so it is not read");
        if written.contains('\0') {
            return Err(format!("{written:?} holds a NUL byte"));
        }
        let path = Path::new(written);
        let path = if path.is_absolute() {
            path.strip_prefix(&self.root).map_err(|_| outside())?
        } else {
            path
        };
        // No link is followed, so `a/..` is `a`'s folder whatever `a` is: the names decide.
        let mut out = PathBuf::new();
        for component in path.components() {
            match component {
                Component::Normal(name) => out.push(name),
                Component::CurDir => {}
                Component::ParentDir if out.pop() => {}
                _ => return Err(outside()),
            }
        }
        Ok(out)
    }

    /// How a path relative to the workspace is shown to the model.
    pub fn shown(relative: &Path) -> String {
        if relative.as_os_str().is_empty() {
            ".".into()
        } else {
            Self::shown_name(&relative.display().to_string())
        }
    }

    /// A name as an observation shows it: quoted and escaped when it holds a control character,
    /// so that a file named `a\nFinal Answer: …` cannot write lines of its own into a listing.
    pub fn shown_name(name: &str) -> String {
        match name.chars().any(char::is_control) {
            true => format!("{name:?}"),
            false => name.to_string(),
        }
    }

    /// Opens a regular file beneath the workspace, or says why not.
    pub fn open_file(&self, relative: &Path) -> Result<Opened, String> {
        let shown = Self::shown(relative);
        let file = fs::File::from(self.open(relative, OpenAs::File)?);
        let meta = file
            .metadata()
            .map_err(|e| format!("{shown} cannot be read: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{shown} is {}", not_regular(&meta)));
        }
        Ok(Opened {
            len: meta.len(),
            file,
        })
    }

    /// Reads at most `limit` bytes of a regular file; whether there was more.
    pub fn read(&self, relative: &Path, limit: u64) -> Result<(Vec<u8>, bool), String> {
        let opened = self.open_file(relative)?;
        let mut bytes = Vec::new();
        opened
            .file
            .take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{}: {e}", Self::shown(relative)))?;
        let more = bytes.len() as u64 > limit;
        bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        Ok((bytes, more))
    }

    /// The names a folder beneath the workspace holds, with their kinds, in no set order.
    pub fn entries(&self, relative: &Path) -> Result<Vec<(String, Kind)>, String> {
        let shown = Self::shown(relative);
        let dir = self.open(relative, OpenAs::Folder)?;
        listed(&dir).map_err(|e| format!("{shown} cannot be listed: {e}"))
    }
}

#[derive(Clone, Copy)]
enum OpenAs {
    File,
    Folder,
}

#[cfg(target_os = "linux")]
type Descriptor = std::os::fd::OwnedFd;
#[cfg(not(target_os = "linux"))]
type Descriptor = fs::File;

impl Workspace {
    #[cfg(target_os = "linux")]
    fn open(&self, relative: &Path, how: OpenAs) -> Result<Descriptor, String> {
        use std::os::fd::AsFd;
        let flags = match how {
            OpenAs::File => crate::beneath::FILE,
            OpenAs::Folder => crate::beneath::DIR,
        };
        if relative.as_os_str().is_empty() {
            return match how {
                OpenAs::Folder => self.dir.try_clone().map_err(|e| e.to_string()),
                OpenAs::File => Err(". is a folder, not a file".into()),
            };
        }
        crate::beneath::open_beneath(self.dir.as_fd(), relative, flags, false)
            .map_err(|e| refusal(relative, &e))
    }

    /// This build has no open beneath a folder (the driver's file tools target Linux), and a
    /// check before an open by path can always be raced: nothing is read rather than something
    /// read unsafely.
    #[cfg(not(target_os = "linux"))]
    fn open(&self, _relative: &Path, _how: OpenAs) -> Result<Descriptor, String> {
        Err("the file tools read the workspace only on Linux".into())
    }
}

/// Why an open beneath the workspace failed, in the model's terms.
#[cfg(target_os = "linux")]
fn refusal(relative: &Path, e: &std::io::Error) -> String {
    let shown = Workspace::shown(relative);
    match e.raw_os_error() {
        Some(libc::ELOOP) => format!(
            "{shown} goes through a symbolic link; links are not followed, so nothing outside the workspace is read"
        ),
        Some(libc::EXDEV) => format!("{shown} is outside the workspace, so it is not read"),
        Some(libc::ENOENT) => format!("{shown}: no such file or folder in the workspace"),
        Some(libc::ENOTDIR) => format!("{shown} is not a folder, or a part of its path is not"),
        // A socket cannot be opened at all.
        Some(libc::ENXIO) => format!(
            "{shown} is a socket or a device with nothing behind it, and only regular files are read"
        ),
        _ => format!("{shown} cannot be opened: {e}"),
    }
}

fn not_regular(meta: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_dir() {
        "a folder, not a file"
    } else if kind.is_fifo() {
        "a named pipe (FIFO), and only regular files are read"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device, and only regular files are read"
    } else {
        "not a regular file, and only regular files are read"
    }
}

/// The entries of an opened folder. std reads a folder only by path, so it is read through the
/// descriptor's own name in `/proc`, which is that very folder whatever its path has become.
#[cfg(target_os = "linux")]
fn listed(dir: &Descriptor) -> std::io::Result<Vec<(String, Kind)>> {
    use std::os::fd::AsRawFd;
    let mut out = Vec::new();
    for entry in fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
        let entry = entry?;
        let kind = match entry.file_type() {
            Ok(t) if t.is_dir() => Kind::Folder,
            Ok(t) if t.is_file() => Kind::File,
            _ => Kind::Other,
        };
        out.push((entry.file_name().to_string_lossy().into_owned(), kind));
    }
    Ok(out)
}

#[cfg(not(target_os = "linux"))]
fn listed(_dir: &Descriptor) -> std::io::Result<Vec<(String, Kind)>> {
    Err(std::io::Error::other("only on Linux"))
}
