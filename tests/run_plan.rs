//! `reactstep run --plan`, `--approve-plan` and `--reflect` end to end (issue 37): the real
//! binary, its in-process service and the built-in tools, offline from scripted model outputs.
//! Each plan and each evaluation takes the next scripted output, as it takes a model call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use support::workspace::workspace;

/// Runs `reactstep run --output json` on `outputs` with `extra` flags, `stdin` typed in; the
/// exit code, the report and what was said on stderr.
fn run(ws: &Path, outputs: &[String], extra: &[&str], stdin: &str) -> (i32, Value, String) {
    let scripts = tempfile::tempdir().unwrap();
    let file = scripts.path().join("script.txt");
    std::fs::write(&file, outputs.join("\n---\n")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .arg("run")
        .arg("What is the answer?")
        .arg("--workspace")
        .arg(ws)
        .arg("--mock-responses")
        .arg(&file)
        .args(["--output", "json"])
        .args(extra)
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let (out, err) = (
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    );
    let report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (output.status.code().unwrap_or(-1), report, err)
}

fn plan(estimated: u32) -> String {
    let plan = json!({"complexity": "medium", "estimated_iterations": estimated, "steps": [
        {"step_number": 1, "description": "Read the constant", "tool_name": "read_file",
         "parameters": {"path": "src/answer.rs"}},
        {"step_number": 2, "description": "Say the answer", "tool_name": null, "depends_on": [1]}
    ]});
    format!("Thought: two steps.\nFinal Answer: {plan}")
}

fn evaluation(completeness: u32, missing: &str) -> String {
    let evaluation = json!({"completeness_score": completeness, "quality_score": 7,
        "missing_info": [missing], "suggestions": [], "needs_retry": completeness < 7});
    format!("Thought: judged.\nFinal Answer: {evaluation}")
}

fn read_answer() -> String {
    "Thought: read the constant\nAction: read_file(path=\"src/answer.rs\")".into()
}

fn answer(text: &str) -> String {
    format!("Thought: I know it.\nFinal Answer: {text}")
}

#[test]
fn a_plan_is_made_first_shown_and_carried_in_the_report() {
    let ws = workspace();
    let outputs = [plan(2), read_answer(), answer("42")];
    let (code, report, err) = run(ws.path(), &outputs, &["--plan"], "");
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["answer"], "42");
    assert_eq!(report["plan"]["steps"][0]["tool_name"], "read_file");
    assert_eq!(report["plan"]["steps"][1]["depends_on"], json!([1]));
    assert!(err.contains("1. Read the constant [read_file]"), "{err}");
    assert_eq!(report["iterations"], 2);
}

#[test]
fn a_plan_that_is_not_approved_runs_nothing() {
    let ws = workspace();
    let outputs = [plan(2), read_answer(), answer("42")];
    let (code, report, err) = run(ws.path(), &outputs, &["--approve-plan"], "n\n");
    assert_eq!(code, 1, "{report}\n{err}");
    assert_eq!(report["termination_reason"], "plan_rejected");
    assert_eq!(report["iterations"], 0);
    assert!(report["steps"].as_array().unwrap().is_empty());
    assert!(err.contains("Run this plan of 2 steps"), "{err}");
    // An input that has ended approves nothing either.
    let (_, report, _) = run(ws.path(), &outputs, &["--approve-plan"], "");
    assert_eq!(report["termination_reason"], "plan_rejected");
    // Approved, it runs.
    let (code, report, err) = run(ws.path(), &outputs, &["--approve-plan"], "maybe\ny\n");
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["answer"], "42");
    assert!(err.contains("Answer y or n"), "{err}");
}

#[test]
fn a_plan_that_cannot_be_made_is_a_failure_saying_why() {
    let ws = workspace();
    let bad = "Thought: hmm.\nFinal Answer: {\"complexity\": \"medium\", \"estimated_iterations\": 1, \"steps\": [{\"step_number\": 1, \"description\": \"x\", \"tool_name\": \"format_disk\"}]}".to_string();
    let outputs = [bad.clone(), bad];
    let (code, report, _) = run(ws.path(), &outputs, &["--plan"], "");
    assert_eq!(code, 1);
    assert_eq!(report["termination_reason"], "failure");
    let why = report["answer"].as_str().unwrap();
    assert!(
        why.contains("no plan was made") && why.contains("format_disk"),
        "{why}"
    );
}

#[test]
fn an_incomplete_answer_goes_back_into_the_loop_with_what_it_misses() {
    let ws = workspace();
    let outputs = [
        answer("probably 41"),
        evaluation(4, "the constant read from src/answer.rs"),
        read_answer(),
        answer("42"),
        evaluation(9, "nothing"),
    ];
    let (code, report, err) = run(ws.path(), &outputs, &["--reflect"], "");
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["answer"], "42");
    let evaluations = report["evaluations"].as_array().unwrap();
    assert_eq!(evaluations.len(), 2);
    assert_eq!(evaluations[0]["needs_retry"], true);
    assert_eq!(evaluations[1]["needs_retry"], false);
    assert_eq!(report["steps"][0]["action"], "read_file");
    assert!(
        err.contains("completeness 4/10, quality 7/10: another try"),
        "{err}"
    );
}

#[test]
fn reflection_stops_once_the_loop_passes_its_plans_estimate_by_two() {
    let ws = workspace();
    // Estimated one step: the third answer comes at step 4, past 1 + 2, and is accepted
    // however incomplete the model finds it.
    let outputs = [
        plan(1),
        answer("maybe 40"),
        evaluation(2, "everything"),
        answer("maybe 41"),
        evaluation(2, "everything"),
        read_answer(),
        answer("maybe 43"),
        evaluation(2, "everything"),
    ];
    let (code, report, err) = run(ws.path(), &outputs, &["--plan", "--reflect"], "");
    // Not a success: the answer stands only because the plan's steps are spent.
    assert_eq!(code, 1, "{report}\n{err}");
    assert_eq!(report["termination_reason"], "max_iterations");
    assert_eq!(report["answer"], "maybe 43");
    let said = report["error_history"].to_string();
    assert!(said.contains("past its plan's estimate"), "{said}");
    assert!(err.contains("the plan's steps are spent"), "{err}");
    let evaluations = report["evaluations"].as_array().unwrap();
    assert_eq!(evaluations.len(), 3);
    assert_eq!(evaluations[1]["needs_retry"], true);
    assert_eq!(evaluations[2]["needs_retry"], false, "{report}");
}

#[test]
fn a_failed_call_adjusts_the_plan() {
    let ws = workspace();
    let missing = "Thought: read it\nAction: read_file(path=\"src/nowhere.rs\")".to_string();
    let adjusted = plan(3).replace("Read the constant", "Find the constant elsewhere");
    let outputs = [plan(2), missing, adjusted, read_answer(), answer("42")];
    let (code, report, err) = run(ws.path(), &outputs, &["--plan"], "");
    assert_eq!(code, 0, "{report}\n{err}");
    let adjustments = report["plan_adjustments"].as_array().unwrap();
    assert_eq!(adjustments.len(), 1, "{report}");
    assert_eq!(
        adjustments[0]["steps"][0]["description"],
        "Find the constant elsewhere"
    );
    assert_eq!(adjustments[0]["estimated_iterations"], 3);
    assert_eq!(report["answer"], "42");
}

#[test]
fn a_plan_the_service_cannot_adjust_is_tried_three_times_a_run_and_the_loop_goes_on() {
    let ws = workspace();
    let missing =
        |n: u32| format!("Thought: read it\nAction: read_file(path=\"src/nowhere{n}.rs\")");
    let no_plan = "Thought: no plan comes to mind.\nFinal Answer: none".to_string();
    // Four failed calls; the first three each take a try that yields no plan, the fourth none:
    // a fourth try would take the answer's output as its plan and the loop would not end on it.
    let outputs = [
        plan(2),
        missing(1),
        no_plan.clone(),
        missing(2),
        no_plan.clone(),
        missing(3),
        no_plan,
        missing(4),
        answer("42"),
    ];
    let (code, report, err) = run(ws.path(), &outputs, &["--plan"], "");
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(report["answer"], "42", "{report}");
    let adjustments = report["plan_adjustments"].as_array().map_or(0, Vec::len);
    assert_eq!(adjustments, 0, "{report}");
    let failed_tries = report["error_history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["source"] == "service")
        .count();
    assert_eq!(failed_tries, 3, "{report}");
    // The plan in force is still the first.
    assert_eq!(
        report["plan"]["steps"][0]["description"],
        "Read the constant"
    );
}
