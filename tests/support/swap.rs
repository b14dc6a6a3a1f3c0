//! Swapping a name with its `.alt` atomically, for the tests that race a reader against it (the
//! crate's own race tests use `beneath::swaps`, which integration tests cannot reach).

/// `renameat2(RENAME_EXCHANGE)`: the name always exists, as one thing or the other.
pub fn exchange(path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
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
