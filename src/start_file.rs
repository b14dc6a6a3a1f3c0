//! Files the operator names for start-up (the price table, the upstream CA bundle), read without
//! ever blocking: opened non-blocking and checked to be a regular file on the open descriptor
//! (no check-then-open race), so that a FIFO, a device, a socket or a directory stops start-up
//! with a message instead of hanging it (a FIFO's open waits for a writer) or reading forever
//! (`/dev/zero`). A symbolic link is followed: the operator chose the path.

use std::fs::{File, FileType};
use std::io::Read;
use std::path::Path;

/// The file's bytes, refused when it is not a regular file or holds more than `max_bytes`.
pub fn read(path: &Path, max_bytes: u64) -> Result<Vec<u8>, String> {
    let file = open(path).map_err(|e| format!("cannot be read: {e}"))?;
    let kind = file
        .metadata()
        .map_err(|e| format!("cannot be read: {e}"))?
        .file_type();
    if !kind.is_file() {
        return Err(format!("is {}, not a regular file", what(kind)));
    }
    let mut bytes = Vec::new();
    // One byte past the cap tells a file at the cap from a larger one without reading on.
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() as u64 > max_bytes {
        return Err(format!("is larger than {max_bytes} bytes"));
    }
    Ok(bytes)
}

/// O_NONBLOCK: a FIFO opens at once instead of waiting for a writer (and a regular file's
/// reads ignore the flag); O_NOCTTY: a terminal named by mistake does not become ours.
#[cfg(target_os = "linux")]
fn open(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

/// Without the flag at hand, a look before the open: racy, but the service targets Linux.
#[cfg(not(target_os = "linux"))]
fn open(path: &Path) -> std::io::Result<File> {
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        return Err(std::io::Error::other(format!(
            "it is {}, not a regular file",
            what(kind)
        )));
    }
    File::open(path)
}

fn what(kind: FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if kind.is_char_device() {
            return "a character device";
        }
        if kind.is_block_device() {
            return "a block device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else {
        "something other than a file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_a_directory_and_an_oversized_file_are_refused() {
        let refused = |path: &str| read(Path::new(path), 16).err().unwrap_or_default();
        assert!(
            refused("/dev/zero").contains("is a character device"),
            "{}",
            refused("/dev/zero")
        );
        assert!(refused("/").contains("is a directory"));
        assert!(refused("/nonexistent/x").contains("cannot be read"));
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("f");
        assert!(std::fs::write(&file, [b'x'; 17]).is_ok());
        let err = read(&file, 16).err().unwrap_or_default();
        assert!(err.contains("larger than 16 bytes"), "{err}");
        assert_eq!(read(&file, 17).ok(), Some(vec![b'x'; 17]));
    }
}
