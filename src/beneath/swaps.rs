//! What the race tests of both workspaces (the service's and the driver's) swap with: a FIFO
//! made on the spot, and an atomic exchange of a name with its `.alt`.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

pub fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is NUL-terminated and outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Swaps `path` and `path.alt` atomically: the name is never missing, only one or the other.
pub fn exchange(path: &Path) {
    let a = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let b = std::ffi::CString::new([path.as_os_str().as_bytes(), b".alt"].concat()).unwrap();
    // SAFETY: both paths are NUL-terminated and outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

/// Tells the swappers to stop even when an assertion fails, so the scope can join them.
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
