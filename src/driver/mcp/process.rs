//! A stdio server's process, and what it may not reach of the driver. The server runs as the
//! same user: the driver is made not dumpable before it starts one, so the server cannot read
//! the driver's environment or memory through `/proc` (where the model's key is); it starts in a
//! session of its own, with no controlling terminal, so it cannot write to the user's terminal
//! or type into it; every process of that session is ended with it, so nothing it started
//! outlives the driver; and what it writes to stderr goes onto the driver's line by line,
//! scrubbed of the secrets the driver knows, cut and made printable, after the program's name.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use super::endpoint::redacted;
use crate::driver::terminal::printable;

/// The longest piece of a line read at once (a longer line is read in pieces), and the most of
/// it shown. It is scrubbed whole before it is cut, so the cut never splits a secret in two.
const MAX_LINE: u64 = 64 * 1024;
const SHOWN: usize = 4096;

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
            let text = redacted(text.trim_end_matches(['\n', '\r']), &secrets);
            let shown: String = text.chars().take(SHOWN).collect();
            let more = match shown.len() < text.len() {
                true => format!(" … ({} bytes)", text.len()),
                false => String::new(),
            };
            eprintln!("[{}] {}{more}", printable(&label), printable(&shown));
        }
    });
}

/// Starts the server in a session of its own (`setsid`): no controlling terminal, and a
/// process group that [`ServerProcess`] ends whole.
pub fn in_a_session_of_its_own(command: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    // SAFETY: setsid(2) is async-signal-safe, the one call made between fork and exec.
    unsafe {
        command.pre_exec(|| match libc::setsid() {
            -1 => Err(std::io::Error::last_os_error()),
            _ => Ok(()),
        });
    }
}

/// A started server: killed when dropped, with every process of its group (what it started
/// too, which would otherwise outlive the driver).
pub struct ServerProcess {
    pub child: tokio::process::Child,
    group: Option<u32>,
}

impl ServerProcess {
    pub fn new(child: tokio::process::Child) -> Self {
        let group = child.id();
        Self { child, group }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        #[cfg(target_os = "linux")]
        if let Some(group) = self.group.and_then(|g| libc::pid_t::try_from(g).ok()) {
            // SAFETY: killpg(2) on the group the server leads (its own pid, from setsid).
            unsafe {
                libc::killpg(group, libc::SIGKILL);
            }
        }
    }
}
