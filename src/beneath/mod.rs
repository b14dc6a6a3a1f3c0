//! Opening a path beneath a directory descriptor, resolved and opened in one step, so that
//! nothing the path names can be swapped between a check and the open. The service's workspace
//! (`step/context/workspace.rs`) and the driver's file tools (`driver/workspace.rs`) both open through it.
//!
//! `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` does it in
//! the kernel. Where it is missing (kernels before 5.6: `ENOSYS`) or a seccomp filter refuses it
//! (`EPERM`), [`walk_beneath`] opens one component at a time from the previous one's descriptor
//! with `O_NOFOLLOW`, which gives the same guarantee: no symbolic link is followed and no `..`
//! is taken, so every step stays beneath the starting directory.

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
pub(crate) mod swaps;

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use libc::c_int;

/// A directory held only as a place to resolve from: needs search permission, not read.
pub const DIR: c_int = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;

/// A file to read: a FIFO opens at once instead of waiting for a writer, a terminal does not
/// become ours, and the descriptor is not inherited by a child process.
pub const FILE: c_int = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;

/// `struct open_how` of `<linux/openat2.h>`. libc's is `#[non_exhaustive]`, so it cannot be
/// built without `unsafe`; this one has the same layout, checked below.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const _: () = assert!(std::mem::size_of::<OpenHow>() == std::mem::size_of::<libc::open_how>());

/// `EAGAIN` from `openat2` means a rename raced the lookup; the kernel asks for a retry.
const RETRIES_ON_RACE: usize = 8;

/// Opens `relative` beneath `dir` with `flags`, following no symbolic link. The walk is taken
/// when `openat2` is unavailable, or always with `walk_only` (so tests can hold it to account).
pub fn open_beneath(
    dir: BorrowedFd<'_>,
    relative: &Path,
    flags: c_int,
    walk_only: bool,
) -> io::Result<OwnedFd> {
    if !walk_only {
        match openat2_beneath(dir, relative, flags) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {}
            done => return done,
        }
    }
    walk_beneath(dir, relative, flags)
}

fn openat2_beneath(dir: BorrowedFd<'_>, relative: &Path, flags: c_int) -> io::Result<OwnedFd> {
    let path = c_path(relative.as_os_str())?;
    let how = OpenHow {
        flags: flags as u64,
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
    };
    let mut tries = 0;
    loop {
        // SAFETY: `path` is NUL-terminated and `how` is a valid `open_how` (same layout, size
        // passed as its own); both outlive the call, which only reads them.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        match owned(fd) {
            Err(e) if retry(&e) && tries < RETRIES_ON_RACE => tries += 1,
            done => return done,
        }
    }
}

/// The fallback: each directory opened from the previous one's descriptor with `O_NOFOLLOW`,
/// the last component with `flags | O_NOFOLLOW`. Anything but plain names is refused.
pub fn walk_beneath(dir: BorrowedFd<'_>, relative: &Path, flags: c_int) -> io::Result<OwnedFd> {
    let names = plain_names(relative)?;
    let Some((last, parents)) = names.split_last() else {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    };
    let mut held: Option<OwnedFd> = None;
    for name in parents {
        let at = held.as_ref().map_or(dir, |fd| fd.as_fd());
        held = Some(openat_nofollow(at, name, DIR)?);
    }
    openat_nofollow(held.as_ref().map_or(dir, |fd| fd.as_fd()), last, flags)
}

fn plain_names(relative: &Path) -> io::Result<Vec<&OsStr>> {
    relative
        .components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "only plain names are walked",
            )),
        })
        .collect()
}

fn openat_nofollow(dir: BorrowedFd<'_>, name: &OsStr, flags: c_int) -> io::Result<OwnedFd> {
    let c_name = c_path(name)?;
    loop {
        // SAFETY: `c_name` is NUL-terminated and outlives the call; `dir` is an open descriptor.
        let fd =
            unsafe { libc::openat(dir.as_raw_fd(), c_name.as_ptr(), flags | libc::O_NOFOLLOW) };
        match owned(fd.into()) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                return Err(why_not_dir(dir, &c_name, e))
            }
            done => return done,
        }
    }
}

/// `O_DIRECTORY | O_NOFOLLOW` on a symbolic link fails with `ENOTDIR`; say `ELOOP` instead, as
/// `openat2` does, so both resolvers give the same reason. The look only chooses the message.
fn why_not_dir(dir: BorrowedFd<'_>, name: &CString, e: io::Error) -> io::Error {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `name` is NUL-terminated, `st` is writable space for one `stat`, read only on success.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    // SAFETY: fstatat returned 0, so it filled `st`.
    if rc == 0 && unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return io::Error::from_raw_os_error(libc::ELOOP);
    }
    e
}

fn c_path(path: &OsStr) -> io::Result<CString> {
    CString::new(path.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// A descriptor returned by a syscall, owned from here on, or the error it set.
fn owned(fd: libc::c_long) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = c_int::try_from(fd).map_err(io::Error::other)?;
    // SAFETY: the kernel just returned this descriptor, and nothing else holds it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn retry(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EINTR))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails loudly")]
mod tests {
    use std::fs;
    use std::os::unix::fs::{symlink, FileTypeExt};

    use super::*;

    /// `<tmp>/outside/secret`, and `<tmp>/base` with a file, a folder, links and a FIFO.
    fn tree() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let (base, outside) = (tmp.path().join("base"), tmp.path().join("outside"));
        fs::create_dir_all(base.join("d/e")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret"), "SECRET").unwrap();
        fs::write(base.join("d/e/f"), "INSIDE").unwrap();
        symlink(outside.join("secret"), base.join("out")).unwrap();
        symlink("d/e/f", base.join("in")).unwrap();
        symlink(&outside, base.join("dout")).unwrap();
        symlink("d", base.join("din")).unwrap();
        mkfifo(&base.join("pipe"));
        tmp
    }

    fn mkfifo(path: &Path) {
        let c = c_path(path.as_os_str()).unwrap();
        // SAFETY: `c` is NUL-terminated and outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    fn base(tmp: &tempfile::TempDir) -> OwnedFd {
        fs::File::open(tmp.path().join("base")).unwrap().into()
    }

    fn errno(r: io::Result<OwnedFd>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    /// Both resolvers must agree on every case: the walk is the same guarantee, not a lesser one.
    fn each_resolver(check: impl Fn(&dyn Fn(&str, c_int) -> io::Result<OwnedFd>)) {
        let tmp = tree();
        let dir = base(&tmp);
        for walk_only in [false, true] {
            check(&|path, flags| open_beneath(dir.as_fd(), Path::new(path), flags, walk_only));
        }
    }

    #[test]
    fn openat2_is_available_here_so_the_tests_exercise_it() {
        let tmp = tree();
        let opened = openat2_beneath(base(&tmp).as_fd(), Path::new("d/e/f"), FILE);
        assert!(
            opened.is_ok(),
            "openat2 refused ({opened:?}): only the walk would be tested on this machine"
        );
    }

    #[test]
    fn plain_paths_open() {
        each_resolver(|open| {
            let file = fs::File::from(open("d/e/f", FILE).unwrap());
            assert_eq!(io::read_to_string(file).unwrap(), "INSIDE");
            assert!(open("./d/e", DIR).is_ok());
        });
    }

    #[test]
    fn no_symbolic_link_is_followed_last_or_on_the_way() {
        each_resolver(|open| {
            for path in ["out", "in", "dout/secret", "din/e/f", "d/../din/e/f"] {
                assert!(open(path, FILE).is_err(), "{path}");
            }
            for path in ["out", "in", "dout/secret", "din/e/f"] {
                assert_eq!(errno(open(path, FILE)), Some(libc::ELOOP), "{path}");
            }
            assert_eq!(errno(open("dout", DIR)), Some(libc::ELOOP));
            assert_eq!(errno(open("din", DIR)), Some(libc::ELOOP));
        });
    }

    #[test]
    fn nothing_climbs_out_or_starts_from_the_top() {
        each_resolver(|open| {
            for path in ["../outside/secret", "d/../../outside/secret", "/etc/passwd"] {
                assert!(open(path, FILE).is_err(), "{path}");
            }
        });
    }

    #[test]
    fn a_fifo_opens_at_once_without_a_writer() {
        // Finishing is the assertion: a blocking open would wait for a writer for ever.
        each_resolver(|open| {
            let file = fs::File::from(open("pipe", FILE).unwrap());
            assert!(file.metadata().unwrap().file_type().is_fifo());
        });
    }

    #[test]
    fn the_walk_refuses_what_is_not_a_plain_name_by_itself() {
        let tmp = tree();
        let dir = base(&tmp);
        for path in ["..", "d/../../outside/secret", "/etc/passwd", "", "."] {
            assert!(
                walk_beneath(dir.as_fd(), Path::new(path), FILE).is_err(),
                "{path:?}"
            );
        }
        let nul = OsStr::from_bytes(b"d/e/f\0");
        assert!(walk_beneath(dir.as_fd(), Path::new(nul), FILE).is_err());
    }
}
