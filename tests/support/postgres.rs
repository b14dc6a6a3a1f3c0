//! A real PostgreSQL server for the tests, from the system's packages: a new cluster made with
//! `initdb` in a temporary folder, started by `pg_ctl` on a free loopback port (TCP only, trust
//! authentication), one per test binary, with a database of its own for each test.
//!
//! PostgreSQL refuses to run as root, and tests may run as root (CI does): the server is then
//! run as the `postgres` user the package makes, owning its folder. A small shell holds it: it
//! starts the server, says `ready`, and stops it when its standard input closes, which happens
//! when the test process ends, however it ends, so no server outlives the tests; its folder is
//! removed then.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

pub struct Postgres {
    pub port: u16,
    /// Held open: when it closes, the server is stopped.
    _stdin: Mutex<ChildStdin>,
    _child: Mutex<Child>,
    _folder: tempfile::TempDir,
}

/// The test binary's server, started on first use.
pub fn server() -> &'static Postgres {
    static SERVER: OnceLock<Postgres> = OnceLock::new();
    SERVER.get_or_init(Postgres::start)
}

impl Postgres {
    fn start() -> Self {
        let bin = programs();
        let folder = tempfile::tempdir().unwrap();
        let owner = owner();
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(folder.path(), Some(uid), Some(gid)).unwrap();
        }
        let port = free_port();
        let script = r#"set -e
"$BIN/initdb" -D "$DIR/data" -U reactstep --auth=trust -E UTF8 --no-sync >"$DIR/initdb.log" 2>&1
"$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k '' -c fsync=off" start >/dev/null
echo ready
read -r _ || true
"$BIN/pg_ctl" -D "$DIR/data" -m immediate stop >/dev/null 2>&1 || true
cd / && rm -rf "$DIR""#;
        let mut command = Command::new("sh");
        command
            .args(["-c", script])
            .env("BIN", &bin)
            .env("DIR", folder.path())
            .env("PORT", port.to_string())
            .current_dir(folder.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if let Some((uid, gid)) = owner {
            command.uid(uid).gid(gid);
        }
        let mut child = command.spawn().expect("the PostgreSQL holder starts");
        let mut said = String::new();
        let stdout = child.stdout.take().unwrap();
        BufReader::new(stdout).read_line(&mut said).unwrap();
        let log =
            |name: &str| std::fs::read_to_string(folder.path().join(name)).unwrap_or_default();
        assert_eq!(
            said.trim(),
            "ready",
            "PostgreSQL did not start:\n{}\n{}",
            log("initdb.log"),
            log("server.log")
        );
        Self {
            port,
            _stdin: Mutex::new(child.stdin.take().unwrap()),
            _child: Mutex::new(child),
            _folder: folder,
        }
    }

    /// A new, empty database; its URL.
    pub async fn database(&self) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("test_{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let client = self.connect("postgres").await;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        self.url(&name)
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://reactstep@127.0.0.1:{}/{database}", self.port)
    }

    pub async fn connect(&self, database: &str) -> tokio_postgres::Client {
        let (client, connection) =
            tokio_postgres::connect(&self.url(database), tokio_postgres::NoTls)
                .await
                .unwrap();
        tokio::spawn(connection);
        client
    }
}

/// The folder holding `initdb` and `pg_ctl`: on the PATH (a developer's install), else where
/// Debian's packages put them (`/usr/lib/postgresql/<version>/bin`), installed when missing.
fn programs() -> PathBuf {
    super::system_packages::install("postgresql", || found().is_some());
    found().unwrap()
}

fn found() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| dirs.flatten().map(|d| d.path().join("bin")).collect())
        .unwrap_or_default();
    // The newest version first.
    debian.sort_by_key(|p| std::cmp::Reverse(version(p)));
    on_path
        .into_iter()
        .chain(debian)
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .and_then(|dir| {
            let initdb = std::fs::canonicalize(dir.join("initdb")).ok()?;
            initdb.parent().map(Path::to_path_buf)
        })
}

fn version(bin: &Path) -> u32 {
    bin.parent()
        .and_then(|v| v.file_name())
        .and_then(|v| v.to_str())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The user and group to run the server as, when this process is root: `postgres`.
fn owner() -> Option<(u32, u32)> {
    let me = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&me.stdout).trim() != "0" {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let entry = passwd
        .lines()
        .find(|line| line.starts_with("postgres:"))
        .expect("the postgresql package makes a `postgres` user to run the server as");
    let fields: Vec<&str> = entry.split(':').collect();
    Some((fields[2].parse().unwrap(), fields[3].parse().unwrap()))
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
