//! The Python client (`clients/python`) against this very server: mypy --strict over the
//! package, its tests and its example; the check that the committed models are what
//! datamodel-code-generator makes of openapi.yaml now; and pytest, whose tests start the binary
//! cargo built (`REACTSTEP_BIN`) on a loopback port, with a mock upstream that speaks OpenAI's
//! Chat Completions.
//!
//! It needs `python3` (3.11 or later) with its `venv` module, and fails (never skips) without
//! them. The packages come from PyPI (clients/python/requirements-dev.txt, every version pinned)
//! into a virtualenv under the target directory, installed by the first run and reinstalled
//! only when the requirements or pyproject.toml change; the package itself is installed
//! editable, so a change to its code needs no reinstall. Caches (mypy's, the bytecode) go under
//! the target directory too, not into the source tree.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

#[path = "support/venv.rs"]
mod venv;

const PYTHON_AT_LEAST: (u32, u32) = (3, 11);
const INSTALL_PYTHON: &str = "install Python 3.11 or later with its venv module (Debian: `apt-get install python3 python3-venv`), then run cargo test again";

fn package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/python")
}

fn target_tmp() -> &'static Path {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
}

fn shown(output: &Output) -> String {
    format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The version of `python3`, as (major, minor).
fn python_version() -> Result<(u32, u32), String> {
    let output = Command::new("python3")
        .args(["-c", "import sys; print(*sys.version_info[:2])"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("python3 could not run ({e}): {INSTALL_PYTHON}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let mut parts = text.split_whitespace();
    let mut number = || parts.next().and_then(|p| p.parse::<u32>().ok());
    match (number(), number()) {
        (Some(major), Some(minor)) => Ok((major, minor)),
        _ => Err(format!(
            "python3 printed {text:?} for its version: {INSTALL_PYTHON}"
        )),
    }
}

/// What the virtualenv was installed from: the pinned requirements and the package's
/// pyproject.toml (its build backend and metadata).
fn wanted() -> Vec<u8> {
    let mut wanted = std::fs::read(package().join("requirements-dev.txt"))
        .expect("clients/python/requirements-dev.txt reads");
    wanted.extend(
        std::fs::read(package().join("pyproject.toml"))
            .expect("clients/python/pyproject.toml reads"),
    );
    wanted
}

/// The virtualenv's bin folder, with requirements-dev.txt and the package (editable)
/// installed; once per run, and again only when what it was installed from changes.
fn tools() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let version = python_version().unwrap_or_else(|why| panic!("{why}"));
        assert!(
            version >= PYTHON_AT_LEAST,
            "python3 is {}.{}: {INSTALL_PYTHON}",
            version.0,
            version.1
        );
        let requirements = package().join("requirements-dev.txt");
        let requirements = requirements.to_str().expect("the repository path is UTF-8");
        let package = package();
        let package = package.to_str().expect("the repository path is UTF-8");
        venv::ready(
            "python-client-venv",
            &wanted(),
            &[
                &["--quiet", "--requirement", requirements],
                &[
                    "--quiet",
                    "--no-deps",
                    "--no-build-isolation",
                    "--editable",
                    package,
                ],
            ],
        )
    })
}

/// Runs one of the virtualenv's tools in clients/python, against the server cargo built.
fn in_package(tool: &str, args: &[&str]) -> Output {
    let program = tools().join(tool);
    Command::new(&program)
        .args(args)
        .current_dir(package())
        .env("REACTSTEP_BIN", env!("CARGO_BIN_EXE_reactstep"))
        .env("MYPY_CACHE_DIR", target_tmp().join("python-client-mypy-cache"))
        .env("PYTHONPYCACHEPREFIX", target_tmp().join("python-client-pycache"))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{} could not run ({e}): remove target/tmp/python-client-venv and run cargo test again",
                program.display()
            )
        })
}

/// The counts of pytest's summary line (`139 passed in 22.38s`, `1 failed, 2 passed …`).
fn summary(output: &Output) -> Vec<(u32, String)> {
    let report = String::from_utf8_lossy(&output.stdout);
    let last = report
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let counts = last.trim().trim_matches('=').trim();
    let counts = counts.split(" in ").next().unwrap_or("");
    counts
        .split(", ")
        .filter_map(|part| {
            let (number, word) = part.split_once(' ')?;
            Some((number.parse().ok()?, word.to_string()))
        })
        .collect()
}

#[test]
fn mypy_strict_finds_nothing_in_the_package_its_tests_and_its_example() {
    // pyproject.toml's [tool.mypy]: strict, over src, tests and examples.
    let output = in_package("mypy", &[]);
    assert!(
        output.status.success(),
        "mypy --strict failed in clients/python:\n{}",
        shown(&output)
    );
}

#[test]
fn the_committed_models_are_what_datamodel_codegen_makes_of_openapi_yaml() {
    let output = in_package("pytest", &["-q", "tests/test_generated.py"]);
    assert!(
        output.status.success(),
        "clients/python/src/reactstep/_generated.py or its names differ from openapi.yaml \
         (regenerate it as clients/python/README.md says, outside the package, and commit the result):\n{}",
        shown(&output)
    );
}

#[test]
fn pytest_passes_against_the_server_cargo_built() {
    // test_generated.py has a test of its own above, so that its failure reads plainly.
    let output = in_package("pytest", &["-q", "--ignore", "tests/test_generated.py"]);
    assert!(
        output.status.success(),
        "pytest failed in clients/python:\n{}",
        shown(&output)
    );
    // Some tests ran, all passed, and none was skipped or expected to fail.
    let counts = summary(&output);
    assert!(
        counts.iter().any(|(n, word)| word == "passed" && *n > 0),
        "{}",
        shown(&output)
    );
    assert!(
        counts.iter().all(|(_, word)| word == "passed"),
        "pytest reported {counts:?}:\n{}",
        shown(&output)
    );
}
