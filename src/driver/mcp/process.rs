//! A stdio server's process, and what it may not reach of the driver. The server runs as the
//! same user: the driver is made not dumpable before it starts one, so the server cannot read
//! the driver's environment or memory through `/proc` (where the model's key is); it starts in a
//! session of its own, with no controlling terminal, so it cannot write to the user's terminal
//! or type into it; every process of that session, and every process descended from it though
//! it made a group or a session of its own, is ended with it, and what it leaves behind (a
//! process whose parent ended, which the driver adopts) with the last server, so nothing it
//! started outlives the driver; and what it writes to stderr goes onto the driver's line by line,
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

/// Makes the driver the reaper of what its servers leave: a process whose parent ends (a helper
/// of a server that crashed, the middle of a daemon's double fork) becomes the driver's child,
/// not init's, so it is still found, and ended, when the last server ends.
pub fn adopt_what_servers_leave() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(2) with PR_SET_CHILD_SUBREAPER changes only this process's flag.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
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

/// How the server ended (`exit status: 1`, `signal: 9 (SIGKILL)`), once it has: a call in
/// flight fails at once though a helper still holds the server's output open.
pub type Ended = tokio::sync::watch::Receiver<Option<String>>;

/// A started server: killed when dropped, with every process it started (which would otherwise
/// outlive the driver).
pub struct ServerProcess {
    group: Option<u32>,
    /// What it had started when it was asked to end: a helper in a session of its own is found
    /// only while the server is its parent, and the server may end by itself first.
    started: Vec<Started>,
    pub ended: Ended,
    /// Kills it when sent or dropped.
    kill: Option<tokio::sync::oneshot::Sender<()>>,
}

/// A started server's output, input and error pipes.
pub type Pipes = (
    Option<tokio::process::ChildStdout>,
    Option<tokio::process::ChildStdin>,
    Option<tokio::process::ChildStderr>,
);

impl ServerProcess {
    /// Starts `command` and watches it until it ends or is killed. On Linux it starts under the
    /// lock the reaper of adopted processes takes: a server that ends at once is its watcher's
    /// to reap, never taken for a process the driver adopted.
    pub fn spawn(command: &mut tokio::process::Command) -> std::io::Result<(Self, Pipes)> {
        #[cfg(target_os = "linux")]
        let mut child = adopted::start_server(command)?;
        #[cfg(not(target_os = "linux"))]
        let mut child = command.spawn()?;
        let pipes = (child.stdout.take(), child.stdin.take(), child.stderr.take());
        Ok((Self::watch(child), pipes))
    }

    fn watch(mut child: tokio::process::Child) -> Self {
        let group = child.id();
        let (ended_tx, ended) = tokio::sync::watch::channel(None);
        let (kill, killed) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                _ = killed => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            let how = status.map_or_else(|e| e.to_string(), |s| s.to_string());
            let _ = ended_tx.send(Some(how));
        });
        Self {
            group,
            started: Vec::new(),
            ended,
            kill: Some(kill),
        }
    }

    /// Whether it ended within `patience`.
    pub async fn ends_within(&mut self, patience: std::time::Duration) -> bool {
        let ended = self.ended.wait_for(Option::is_some);
        matches!(tokio::time::timeout(patience, ended).await, Ok(Ok(_)))
    }

    pub fn kill(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
    }

    /// Notes what the server has started, before it is asked to end.
    pub fn note_what_it_started(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(leader) = self.leader() {
            self.started = started_by(leader);
        }
    }

    fn leader(&self) -> Option<libc::pid_t> {
        self.group.and_then(|g| libc::pid_t::try_from(g).ok())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(leader) = self.leader() {
            // Found while the server lives, and again for what was forked meanwhile.
            let noted = std::mem::take(&mut self.started);
            for process in noted
                .into_iter()
                .chain(started_by(leader))
                .chain(started_by(leader))
            {
                process.end();
            }
            // SAFETY: killpg(2) on the group the server leads (its own pid, from setsid).
            unsafe {
                libc::killpg(leader, libc::SIGKILL);
            }
        }
        self.kill();
        #[cfg(target_os = "linux")]
        adopted::server_ended();
    }
}

/// A process, told apart from a later one given the same pid by when it started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Started {
    pid: libc::pid_t,
    at: u64,
}

impl Started {
    /// Killed, if it is still the process it was.
    #[cfg(target_os = "linux")]
    fn end(self) {
        if read_process(self.pid).is_some_and(|p| p.started == self) {
            // SAFETY: kill(2) of a process the server started, still that process.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
            }
        }
    }
}

/// A line of the process table.
#[cfg(target_os = "linux")]
struct Process {
    started: Started,
    parent: libc::pid_t,
    group: libc::pid_t,
    session: libc::pid_t,
    /// Ended, and not yet reaped by its parent.
    zombie: bool,
}

/// Every process, read from `/proc`.
#[cfg(target_os = "linux")]
fn process_table() -> Vec<Process> {
    let pids = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    pids.filter_map(|entry| entry.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter_map(read_process)
        .collect()
}

#[cfg(target_os = "linux")]
fn read_process(pid: libc::pid_t) -> Option<Process> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the name, which may hold anything: state, parent, group, session, and the start
    // time 20th from the state.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(Process {
        started: Started {
            pid,
            at: fields.get(19)?.parse().ok()?,
        },
        parent: fields.get(1)?.parse().ok()?,
        group: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        zombie: fields.first() == Some(&"Z"),
    })
}

/// The processes of the session `leader` leads (the server's: its pid, from setsid) and every
/// process descended from one of them: a helper in a group or a session of its own
/// (`process_group=0`, `start_new_session`, Node's `detached`) is still one of them. One whose
/// parent ended first (a daemon that forked twice) is the driver's now: see [`adopted`].
#[cfg(target_os = "linux")]
fn started_by(leader: libc::pid_t) -> Vec<Started> {
    let table = process_table();
    let of_session = table
        .iter()
        .filter(|p| p.session == leader || p.started.pid == leader)
        .map(|p| p.started.pid);
    descended(&table, of_session.collect())
}

/// The processes of `found` in `table`, and every process descended from one of them.
#[cfg(target_os = "linux")]
fn descended(table: &[Process], mut found: std::collections::HashSet<libc::pid_t>) -> Vec<Started> {
    loop {
        let before = found.len();
        for p in table {
            if found.contains(&p.parent) {
                found.insert(p.started.pid);
            }
        }
        if found.len() == before {
            break;
        }
    }
    let found = table.iter().filter(|p| found.contains(&p.started.pid));
    found.map(|p| p.started).collect()
}

/// What servers left behind and the driver adopted (it is their subreaper): every child of the
/// driver that is not a server it started. Which server left one cannot be told (a helper in a
/// session of its own carries no mark of its server), so they are ended, with what descends
/// from them, when the last server ends; until then a server's daemon keeps running for it.
#[cfg(target_os = "linux")]
mod adopted {
    use std::collections::HashSet;
    use std::sync::Mutex;

    use crate::driver::mcp::process::{descended, process_table, Process};

    /// Held while a server starts, while the reaper tells ended processes apart, and while the
    /// last server's leftovers are ended: neither may take a server just started for a process
    /// the driver adopted.
    struct Servers {
        live: usize,
        /// Every pid a server was started as: tokio reaps those, never this module.
        started: Vec<libc::pid_t>,
        reaping: bool,
    }

    static SERVERS: Mutex<Servers> = Mutex::new(Servers {
        live: 0,
        started: Vec::new(),
        reaping: false,
    });

    fn servers() -> std::sync::MutexGuard<'static, Servers> {
        SERVERS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a server's process and notes it as one, both under the lock.
    pub fn start_server(
        command: &mut tokio::process::Command,
    ) -> std::io::Result<tokio::process::Child> {
        let mut servers = servers();
        if !servers.reaping {
            servers.reaping = reap_as_they_end();
        }
        let child = command.spawn()?;
        servers.live += 1;
        let pid = child.id().and_then(|p| libc::pid_t::try_from(p).ok());
        servers.started.extend(pid);
        Ok(child)
    }

    impl Servers {
        fn started(&self) -> HashSet<libc::pid_t> {
            self.started.iter().copied().collect()
        }
    }

    /// The processes of `table` the driver adopted: its children that are no server it started.
    fn adopted<'t>(
        table: &'t [Process],
        servers: &'t HashSet<libc::pid_t>,
    ) -> impl Iterator<Item = &'t Process> {
        let driver = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
        let of_driver = table.iter().filter(move |p| p.parent == driver);
        of_driver.filter(|p| !servers.contains(&p.started.pid))
    }

    /// An adopted process that ends is reaped when its SIGCHLD comes, not when the last server
    /// ends (`reactstep ui` keeps its servers for its whole life). False when it cannot be.
    fn reap_as_they_end() -> bool {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut ended) = signal(SignalKind::child()) else {
            return false;
        };
        tokio::spawn(async move {
            while ended.recv().await.is_some() {
                let servers = servers();
                let started = servers.started();
                let table = process_table();
                for zombie in adopted(&table, &started).filter(|p| p.zombie) {
                    // SAFETY: waitpid(2), not waiting, of an ended child of the driver that is
                    // no server's handle.
                    unsafe {
                        libc::waitpid(zombie.started.pid, std::ptr::null_mut(), libc::WNOHANG);
                    }
                }
            }
        });
        true
    }

    pub fn server_ended() {
        let mut servers = servers();
        servers.live = servers.live.saturating_sub(1);
        if servers.live > 0 {
            return;
        }
        let started = servers.started();
        // Until a pass finds none alive: one that forks and ends again and again is adopted
        // anew after each pass (bounded, so a fork bomb cannot hold the driver).
        let mut ours = HashSet::new();
        for _ in 0..64 {
            let (adopted, alive) = end_adopted(&started);
            ours.extend(adopted);
            if !alive {
                break;
            }
        }
        drop(servers);
        // Reaped apart, so a process slow to die holds up nothing.
        std::thread::spawn(move || {
            for pid in ours {
                // SAFETY: waitpid(2) of a child of the driver that is no server's handle.
                unsafe {
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
            }
        });
    }

    /// Kills every adopted process and what descends from it; returns the adopted ones, and
    /// whether one of them was still alive.
    fn end_adopted(servers: &HashSet<libc::pid_t>) -> (Vec<libc::pid_t>, bool) {
        let table = process_table();
        let adopted: Vec<&Process> = adopted(&table, servers).collect();
        let alive = adopted.iter().any(|p| !p.zombie);
        // Their groups first, whole: one that forks and ends again and again keeps its group,
        // and a group's signal reaches a child forked meanwhile. Never the driver's own group
        // (a server's processes are in sessions of their own; it cannot be theirs).
        // SAFETY: getpgrp(2) reads this process's group.
        let own_group = unsafe { libc::getpgrp() };
        let groups: HashSet<libc::pid_t> = adopted.iter().map(|p| p.group).collect();
        for group in groups.into_iter().filter(|&g| g > 1 && g != own_group) {
            // SAFETY: killpg(2) of a group a process the driver adopted is in.
            unsafe {
                libc::killpg(group, libc::SIGKILL);
            }
        }
        let adopted: HashSet<libc::pid_t> = adopted.iter().map(|p| p.started.pid).collect();
        for process in descended(&table, adopted.clone()) {
            process.end();
        }
        (adopted.into_iter().collect(), alive)
    }
}
