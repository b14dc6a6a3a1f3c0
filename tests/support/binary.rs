//! The real `reactstep` binary as a child process, shared by the test binaries that need one.

use serde_json::Value;

/// The real binary, configured only through `REACTSTEP_*` variables, with its JSON log drained
/// as it is written (a full pipe would block the server).
pub struct RunningBinary {
    pub port: u16,
    pub child: tokio::process::Child,
    log: tokio::task::JoinHandle<String>,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
}

impl RunningBinary {
    pub async fn start(llm_uri: &str, rust_log: &str) -> Self {
        Self::start_with(llm_uri, rust_log, &[]).await
    }

    /// The same, with more `REACTSTEP_*` variables.
    pub async fn start_with(llm_uri: &str, rust_log: &str, env: &[(&str, &str)]) -> Self {
        Self::start_command(Self::command(llm_uri, rust_log, env)).await
    }

    /// The same, allowed at most `descriptors` open files (soft and hard limit, so that the
    /// service cannot raise it).
    #[cfg(target_os = "linux")]
    pub async fn start_with_fd_limit(
        llm_uri: &str,
        rust_log: &str,
        env: &[(&str, &str)],
        descriptors: u64,
    ) -> Self {
        let mut command = Self::command(llm_uri, rust_log, env);
        let limit = libc::rlimit {
            rlim_cur: descriptors,
            rlim_max: descriptors,
        };
        // SAFETY: between fork and exec, only setrlimit (async-signal-safe) is called.
        unsafe {
            command.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        Self::start_command(command).await
    }

    fn command(llm_uri: &str, rust_log: &str, env: &[(&str, &str)]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_reactstep"));
        command
            .env("REACTSTEP_BIND", "127.0.0.1:0")
            .env("REACTSTEP_OPENAI_BASE_URL", format!("{llm_uri}/v1"))
            .env("REACTSTEP_LOG_FORMAT", "json")
            .env("REACTSTEP_WORKERS", "1")
            .env("REACTSTEP_RETRY_BASE_MS", "1")
            .env("REACTSTEP_RETRY_CAP_MS", "5")
            .env("RUST_LOG", rust_log)
            // The test's own settings win over the defaults above.
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true);
        command
    }

    async fn start_command(mut command: tokio::process::Command) -> Self {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let mut child = command.spawn().expect("the binary starts");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let (port_tx, port_rx) = tokio::sync::oneshot::channel();
        let (line_tx, line_rx) = tokio::sync::mpsc::unbounded_channel();
        let log = tokio::spawn(async move {
            let mut log = String::new();
            let mut port_tx = Some(port_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                // The startup line carries the port.
                let port = serde_json::from_str::<Value>(&line)
                    .ok()
                    .and_then(|entry| entry["port"].as_u64());
                if let Some(port) = port {
                    if let Some(tx) = port_tx.take() {
                        tx.send(port as u16).unwrap();
                    }
                }
                log.push_str(&line);
                log.push('\n');
                let _ = line_tx.send(line);
            }
            log
        });
        // A server that never logs its port (a RUST_LOG above info hides the line) is a failure,
        // not a test that waits for ever.
        let port = tokio::time::timeout(std::time::Duration::from_secs(60), port_rx)
            .await
            .expect("the server logs its port (at info) within a minute")
            .expect("the server logs its port at startup");
        Self {
            port,
            child,
            log,
            lines: line_rx,
        }
    }

    /// Stops the server and returns everything it logged.
    pub async fn stop(mut self) -> String {
        self.child.kill().await.unwrap();
        self.log.await.unwrap()
    }

    /// Waits until the server logs a line containing `text`.
    pub async fn logged(&mut self, text: &str) {
        self.logged_line(text).await;
    }

    /// Waits until the server logs a line containing `text`, and returns it.
    pub async fn logged_line(&mut self, text: &str) -> String {
        while let Some(line) = self.lines.recv().await {
            if line.contains(text) {
                return line;
            }
        }
        panic!("the server ended without logging {text:?}");
    }

    /// Sends SIGTERM, as an orchestrator does to stop a service.
    pub async fn terminate(&self) {
        self.signal("TERM").await;
    }

    /// Sends the signal `name` (`TERM`, `INT`).
    pub async fn signal(&self, name: &str) {
        let pid = self.child.id().expect("the server is running").to_string();
        let status = tokio::process::Command::new("kill")
            .args([&format!("-{name}"), &pid])
            .status()
            .await
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit by itself; its exit status and log.
    pub async fn exited(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().await.unwrap();
        (status, self.log.await.unwrap())
    }
}

/// A figure of a process's `/proc/<pid>/status`, in KiB: `VmRSS` (resident now) or `VmHWM`
/// (its peak so far).
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// A process's peak resident memory so far, in MiB.
pub fn peak_rss_mib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM") / 1024
}

/// Runs the binary with `env` on a setting that must stop start-up: it has to exit by itself,
/// so a server that started anyway fails the test at the guard. Its exit status and stderr.
pub async fn start_up_with(env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .envs(env.iter().copied())
        .env("REACTSTEP_BIND", "127.0.0.1:0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(std::time::Duration::from_secs(30), run)
        .await
        .unwrap_or_else(|_| panic!("{env:?}: the server started"))
        .unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
