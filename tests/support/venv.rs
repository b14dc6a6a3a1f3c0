//! A Python virtual environment under the target directory with pinned packages from PyPI,
//! made by the first test that needs it and made again only when what it was made from
//! changes (a stamp file holds that).
//!
//! PyPI is a network away, and one dropped connection must not fail a run: pip retries its
//! connections and 5xx answers itself (`--retries`), and a download cut off mid-way, which pip
//! does not retry, is retried here by running the whole install again.
//!
//! It stands alone (no other part of the harness), so that test binaries without `mod support`
//! take it by path.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

pub const INSTALL_PYTHON: &str = "install Python 3 with its venv module and pip (Debian: `apt-get install python3 python3-venv`), then run cargo test again";

/// How many times an install runs before the test fails.
const ATTEMPTS: u32 = 3;

/// The bin folder of the virtualenv `name` under the target's tmp folder, with each of
/// `installs` (the arguments of one `pip install`) done in order. `made_from` is what the
/// installs depend on (the pins, a requirements file's bytes): a venv made from anything else
/// is made again from scratch.
pub fn ready(name: &str, made_from: &[u8], installs: &[&[&str]]) -> PathBuf {
    // Tests of one binary that share a venv wait for the one making it.
    static MAKING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let bin = venv.join("bin");
    let stamp = venv.join("made-from");
    if std::fs::read(&stamp).ok().as_deref() == Some(made_from) {
        return bin;
    }
    let made = run(Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv));
    assert!(made.status.success(), "{INSTALL_PYTHON}\n{}", shown(&made));
    for args in installs {
        pip_install(&bin.join("python"), args);
    }
    std::fs::write(&stamp, made_from).expect("the venv's stamp is written");
    bin
}

/// `python -m pip install ARGS`, retried as a whole when it fails.
pub fn pip_install(python: &Path, args: &[&str]) {
    for attempt in 1..=ATTEMPTS {
        let output = run(Command::new(python)
            .args(["-m", "pip", "install", "--disable-pip-version-check"])
            .args(["--retries", "10", "--timeout", "60"])
            .args(args));
        if output.status.success() {
            return;
        }
        assert!(
            attempt < ATTEMPTS,
            "pip install {args:?} failed {ATTEMPTS} times; the last:\n{}",
            shown(&output)
        );
        eprintln!(
            "pip install {args:?} failed (attempt {attempt} of {ATTEMPTS}); trying again:\n{}",
            shown(&output)
        );
        // A registry that just dropped a connection is given a moment before the next try.
        std::thread::sleep(Duration::from_secs(u64::from(attempt) * 5));
    }
}

fn run(command: &mut Command) -> Output {
    command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{command:?} could not run ({e}): {INSTALL_PYTHON}"))
}

fn shown(output: &Output) -> String {
    format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
