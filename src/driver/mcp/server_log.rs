//! A stdio server's stderr, and what it may not reach of the driver. The server runs as the same
//! user: the driver is made not dumpable before it starts one, so the server cannot read the
//! driver's environment or memory through `/proc` (where the model's key is); and what the
//! server writes to stderr goes onto the driver's line by line, cut, scrubbed of the secrets
//! the driver knows and made printable, after the server's program name.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use super::endpoint::redacted;
use crate::driver::terminal::printable;

/// The longest piece of a line shown at once: a longer line is shown in pieces.
const MAX_LINE: u64 = 4096;

/// Makes the driver not dumpable: its `/proc/<pid>/environ`, `mem` and `maps` then need
/// `CAP_SYS_PTRACE`, which a server running as the same user lacks. Core dumps, which would
/// hold the keys, are off too. Where it cannot be done (not Linux), a server is as trusted as
/// any program the user runs.
pub fn keep_the_driver_from_servers() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(2) with PR_SET_DUMPABLE changes only this process's dumpable flag.
    unsafe {
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
}

/// Copies `stderr` onto the driver's until the server closes it.
pub fn forward(stderr: tokio::process::ChildStderr, label: String, secrets: Arc<[String]>) {
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            let read = (&mut reader)
                .take(MAX_LINE)
                .read_until(b'\n', &mut line)
                .await;
            if !matches!(read, Ok(1..)) {
                return;
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            eprintln!("[{label}] {}", printable(&redacted(text, &secrets)));
        }
    });
}
