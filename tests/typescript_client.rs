//! The TypeScript client (`clients/typescript`) against this very server: `npm test` there
//! builds the client, type-checks the VS Code example, and runs node's test runner, whose tests
//! start the binary cargo built (`REACTSTEP_BIN`) on a loopback port. Redocly's lint of
//! openapi.yaml runs here too, on its own, so that its findings read plainly.
//!
//! It needs Node.js 18.17 or later with npm, and fails (never skips) without them. The packages
//! come from the npm registry by `npm ci` (exactly package-lock.json) into
//! clients/typescript/node_modules, installed by the first run and reused while the lock file
//! is unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;

const NODE_AT_LEAST: (u32, u32) = (18, 17);
const INSTALL_NODE: &str = "install Node.js 18.17 or later with npm (Debian: `apt-get install nodejs npm`; or from nodejs.org), then run cargo test again";

fn package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/typescript")
}

/// The version `node --version` prints, as (major, minor).
fn node_version() -> Result<(u32, u32), String> {
    let output = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|e| format!("node could not run ({e}): {INSTALL_NODE}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut parts = text.trim().trim_start_matches('v').split('.');
    let mut number = || parts.next().and_then(|p| p.parse::<u32>().ok());
    match (number(), number()) {
        (Some(major), Some(minor)) => Ok((major, minor)),
        _ => Err(format!("`node --version` printed {text:?}: {INSTALL_NODE}")),
    }
}

fn shown(output: &Output) -> String {
    format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn npm(args: &[&str]) -> Output {
    Command::new("npm")
        .args(args)
        .current_dir(package())
        .env("REACTSTEP_BIN", env!("CARGO_BIN_EXE_reactstep"))
        .env("REDOCLY_TELEMETRY", "off")
        .env("REDOCLY_SUPPRESS_UPDATE_NOTICE", "true")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("npm could not run ({e}): {INSTALL_NODE}"))
}

/// Node is new enough and the packages of package-lock.json are installed; once per run.
fn installed() {
    static DONE: Mutex<bool> = Mutex::new(false);
    let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
    if *done {
        return;
    }
    let version = node_version().unwrap_or_else(|why| panic!("{why}"));
    assert!(
        version >= NODE_AT_LEAST,
        "node is {}.{}: {INSTALL_NODE}",
        version.0,
        version.1
    );
    let lock = std::fs::read(package().join("package-lock.json")).expect("the lock file reads");
    // npm ci empties node_modules first, so the copy of the lock it was installed from goes too.
    let stamp = package().join("node_modules/.installed-from-package-lock.json");
    if std::fs::read(&stamp).ok().as_deref() != Some(lock.as_slice()) {
        // The registry is a network away: npm retries each fetch, and a run cut off anyway
        // (npm ci starts from an empty node_modules each time) is run again, twice at most.
        let ci = || npm(&["ci", "--no-audit", "--no-fund", "--fetch-retries=5"]);
        let mut output = ci();
        for _ in 1..3 {
            if output.status.success() {
                break;
            }
            eprintln!("npm ci failed; trying again:\n{}", shown(&output));
            output = ci();
        }
        assert!(
            output.status.success(),
            "npm ci failed three times; the last:\n{}",
            shown(&output)
        );
        std::fs::write(&stamp, &lock).expect("the stamp is written");
    }
    *done = true;
}

#[test]
fn npm_test_passes_against_the_server_cargo_built() {
    installed();
    let output = npm(&["test"]);
    assert!(
        output.status.success(),
        "npm test failed in clients/typescript:\n{}",
        shown(&output)
    );
    // Node's runner printed its summary (`# pass 28` in TAP, `ℹ pass 28` from the spec
    // reporter): some tests ran and none failed.
    let report = String::from_utf8_lossy(&output.stdout);
    let count = |name: &str| {
        report
            .lines()
            .filter_map(|l| l.strip_prefix("# ").or_else(|| l.strip_prefix("ℹ ")))
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|n| n.trim().parse::<u32>().ok())
    };
    assert!(count("pass").is_some_and(|n| n > 0), "{}", shown(&output));
    assert_eq!(count("fail"), Some(0), "{}", shown(&output));
}

#[test]
fn redocly_finds_no_error_in_openapi_yaml() {
    installed();
    let output = npm(&["run", "lint:openapi"]);
    assert!(
        output.status.success(),
        "Redocly's lint of openapi.yaml failed:\n{}",
        shown(&output)
    );
}
