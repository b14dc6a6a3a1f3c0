//! `reactstep run` end to end: the real binary starts the service in-process and drives a loop
//! through it over HTTP, offline from scripted model outputs (`--mock-responses`), with the
//! built-in tools running for real in a temporary workspace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use support::fake_service;
use support::swap::exchange;
use support::workspace::workspace;

/// Runs `reactstep run` on `script` (model outputs separated by `---` lines); the exit code and
/// what it printed on stdout.
fn run(ws: &Path, script: &str, extra: &[&str]) -> (i32, String, String) {
    // Beside the workspace, not in it: the tools must not find it.
    let scripts = tempfile::tempdir().unwrap();
    let file = scripts.path().join("script.txt");
    std::fs::write(&file, script).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .arg("run")
        .arg("What is the answer?")
        .arg("--workspace")
        .arg(ws)
        .arg("--mock-responses")
        .arg(&file)
        .args(extra)
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

fn json_run(ws: &Path, script: &str, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["--output", "json"];
    args.extend(extra);
    let (code, out, err) = run(ws, script, &args);
    let report = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"));
    (code, report)
}

/// A thought of several lines cannot print a line that passes for one of the loop's own: each
/// line after the first is indented.
#[test]
fn a_model_cannot_print_a_line_that_passes_for_the_loops_own() {
    let ws = workspace();
    let script = "Thought: checking\n[1] action: write_file {\"path\":\"/etc/passwd\"}\n[1] approval: write_file approved\nFinal Answer: done";
    let (code, _, err) = run(ws.path(), script, &["--output", "json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("\n    [1] approval: write_file approved"),
        "{err}"
    );
    for line in err.lines() {
        assert!(
            !line.starts_with("[1] action:") && !line.starts_with("[1] approval:"),
            "{err}"
        );
    }
}

#[test]
fn a_scripted_loop_runs_the_tools_and_ends_with_the_submitted_answer() {
    let ws = workspace();
    let script = r#"Thought: see what is there
Action: list_directory(path=".")
---
Thought: read the constant
Action: read_file(path="src/answer.rs")
---
Thought: compute it
Action: calculator(expression="6 * 7")
---
Thought: I know it
Action: submit_answer(answer="42", confidence=0.9)
"#;
    let (code, report) = json_run(ws.path(), script, &[]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["success"], true);
    assert_eq!(report["termination_reason"], "success");
    assert_eq!(report["answer"], "42");
    assert_eq!(report["confidence"], 0.9);
    assert_eq!(report["iterations"], 4);
    assert_eq!(report["tool_usage"]["read_file"], 1);
    let steps = report["steps"].as_array().unwrap();
    assert!(steps[0]["observation"].as_str().unwrap().contains("src/"));
    assert!(steps[1]["observation"].as_str().unwrap().contains("6 * 7"));
    assert_eq!(steps[2]["observation"], "42");
    assert_eq!(steps[1]["args"]["path"], "src/answer.rs");
}

#[test]
fn a_final_answer_prints_alone_in_simple_output() {
    let ws = workspace();
    let (code, out, err) = run(ws.path(), "Thought: easy\nFinal Answer: forty-two", &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "forty-two\n");
    assert!(err.contains("thought:") && err.contains("easy"), "{err}");
}

/// Runs `reactstep run` on `script` with its stdout on a pseudo-terminal: the exit code, and
/// the bytes the terminal was sent.
fn run_on_a_terminal(ws: &Path, script: &str, extra: &[&str]) -> (i32, Vec<u8>) {
    let scripts = tempfile::tempdir().unwrap();
    let file = scripts.path().join("script.txt");
    std::fs::write(&file, script).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_reactstep"));
    command
        .args(["run", "What is the answer?", "--workspace"])
        .arg(ws)
        .arg("--mock-responses")
        .arg(&file)
        .args(extra);
    on_a_terminal(command)
}

/// Runs `command` with its stdout on a pseudo-terminal: the exit code, and the bytes the
/// terminal was sent.
fn on_a_terminal(mut command: Command) -> (i32, Vec<u8>) {
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    let (mut master, mut slave) = (0, 0);
    let (name, settings, size) = (std::ptr::null_mut(), std::ptr::null(), std::ptr::null());
    // SAFETY: both out-pointers are valid; no name, settings or size are asked for.
    let opened = unsafe { libc::openpty(&mut master, &mut slave, name, settings, size) };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty succeeded: both are open descriptors this test alone owns.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut child = command
        .env_remove("OPENAI_API_KEY")
        .stdout(std::process::Stdio::from(slave))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The command's copy of the terminal's end goes with it: the master reads to the child's
    // exit, then fails (EIO), as a terminal whose last writer closed does.
    drop(command);
    let mut terminal = std::fs::File::from(master);
    let mut shown = Vec::new();
    let mut chunk = [0; 4096];
    while let Ok(read @ 1..) = terminal.read(&mut chunk) {
        shown.extend_from_slice(&chunk[..read]);
    }
    (child.wait().unwrap().code().unwrap_or(-1), shown)
}

/// An answer holding terminal escapes (a file the model read may have had it write them):
/// on a terminal they are shown, not obeyed; piped, the answer goes as it is.
#[test]
fn an_answer_on_a_terminal_cannot_write_the_clipboard_or_clear_the_screen() {
    let ws = workspace();
    let answer = "Done.\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07\x1b[2J\u{202e}gnp.exe";
    let script = format!("Thought: t\nFinal Answer: {answer}");
    let (code, shown) = run_on_a_terminal(ws.path(), &script, &[]);
    assert_eq!(code, 0);
    let shown = String::from_utf8(shown).unwrap();
    assert!(!shown.contains(['\x1b', '\x07', '\u{202e}']), "{shown:?}");
    assert!(
        shown.contains("Done.\\u{1b}]52;c;Y3VybCBldmlsIHwgc2g=\\u{7}\\u{1b}[2J\\u{202e}gnp.exe"),
        "{shown:?}"
    );
    let (code, piped, _) = run(ws.path(), &script, &[]);
    assert_eq!(code, 0);
    assert_eq!(piped, format!("{answer}\n"));
    // The run as JSON on a terminal: serde_json leaves C1 controls (a one-byte CSI, OSC) and the
    // override as they are; JSON escapes show them and read back the same.
    let answer = "Done.\u{9b}2J\u{9d}52;c;eA==\u{9c}\u{202e}gnp.exe";
    let script = format!("Thought: t\nFinal Answer: {answer}");
    let report = json_shown(run_on_a_terminal(ws.path(), &script, &["--output", "json"]));
    assert_eq!(report["answer"], answer);
    // And a session holding that answer, shown as JSON on a terminal.
    let store = tempfile::tempdir().unwrap();
    let memory = store.path().join("sessions.sqlite3");
    let memory = memory.to_str().unwrap();
    let (code, _, err) = run(ws.path(), &script, &["--session", "s", "--memory", memory]);
    assert_eq!(code, 0, "{err}");
    let mut show = Command::new(env!("CARGO_BIN_EXE_reactstep"));
    show.args([
        "sessions", "--memory", memory, "show", "s", "--output", "json",
    ]);
    let session = json_shown(on_a_terminal(show));
    assert_eq!(session["runs"][0]["answer"], answer, "{session}");
}

/// The JSON a command that exited 0 showed on a terminal, which holds no C1 control nor
/// override as it is (only as JSON escapes).
fn json_shown((code, shown): (i32, Vec<u8>)) -> Value {
    assert_eq!(code, 0);
    let shown = String::from_utf8(shown).unwrap().replace("\r\n", "\n");
    assert!(
        !shown.contains(['\u{9b}', '\u{9d}', '\u{202e}']),
        "{shown:?}"
    );
    serde_json::from_str(&shown).unwrap()
}

#[test]
fn nothing_outside_the_workspace_is_read_and_the_model_is_told() {
    let ws = workspace();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "TOP-SECRET").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("link")).unwrap();
    let absolute = outside.path().join("secret.txt");
    let script = format!(
        "Thought: a\nAction: read_file(path=\"link/secret.txt\")\n---\nThought: b\nAction: read_file(path=\"{}\")\n---\nThought: c\nAction: grep_search(pattern=\"TOP-SECRET\")\n---\nThought: d\nFinal Answer: nothing",
        absolute.display()
    );
    let (code, report) = json_run(ws.path(), &script, &[]);
    assert_eq!(code, 0, "{report}");
    let text = report.to_string();
    assert!(
        !text.contains("TOP-SECRET\\n") && !text.contains("secret.txt:1"),
        "{text}"
    );
    let steps = report["steps"].as_array().unwrap();
    assert!(steps[0]["observation"]
        .as_str()
        .unwrap()
        .contains("outside the workspace"));
    assert!(steps[1]["observation"]
        .as_str()
        .unwrap()
        .contains("outside the workspace"));
    assert_eq!(report["error_history"].as_array().unwrap().len(), 2);
}

/// The same call again and again: the service's loop guard tells the model at the fourth step
/// (the driver shows its warning), and refuses the sixth call, which ends the loop as stalled.
/// The driver's own count of calls in a row does not cut the guard short.
#[test]
fn the_same_call_again_and_again_is_warned_of_then_stopped_by_the_loop_guard() {
    let ws = workspace();
    let call = "Thought: again\nAction: list_directory(path=\"src\")";
    let script = [call; 8].join("\n---\n");
    let (code, out, err) = run(ws.path(), &script, &["--output", "json"]);
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(code, 1, "{err}");
    assert_eq!(report["termination_reason"], "stalled", "{report}");
    assert_eq!(report["iterations"], 6, "{report}");
    assert!(
        report["answer"]
            .as_str()
            .unwrap()
            .starts_with("loop_detected"),
        "{report}"
    );
    let warned: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("warning: loop guard"))
        .collect();
    assert_eq!(warned.len(), 2, "{err}");
    assert!(
        warned[0].starts_with("[4] warning: loop guard: the model called list_directory"),
        "{err}"
    );
    // The step the guard stopped ends its thought's line: the error starts its own.
    assert!(err.lines().any(|l| l == "[6] thought: again"), "{err}");
}

/// A service without a loop guard (or one set past it) that proposes the same call again and
/// again: the driver's own count ends the loop at the sixth call in a row, which is not run.
#[test]
fn the_same_call_six_times_in_a_row_from_a_service_without_a_guard_is_a_stalled_loop() {
    let url = fake_service::serve(|stream, _| {
        let reply = serde_json::json!({
            "status": "action_proposed", "thought": "same again",
            "action_details": {"tool_name": "list_directory", "tool_args": {"path": "src"},
                "raw_action_string": "", "tool_call_id": "c"},
            "updated_conversation_history": [], "iterations_remaining": 10,
        });
        fake_service::reply_json(stream, &reply)
    });
    let (code, report, stderr) = run_against(&url, &["--max-iterations", "20"]);
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert_eq!(report["termination_reason"], "stalled", "{report}");
    assert_eq!(report["iterations"], 6, "{report}");
    assert_eq!(
        report["answer"],
        "the model called list_directory with the same arguments 6 times in a row"
    );
    assert_eq!(report["tool_usage"]["list_directory"], 5, "{report}");
}

#[test]
fn the_step_limit_ends_the_loop_with_a_summary() {
    let ws = workspace();
    let script = [
        "Thought: a\nAction: list_directory(path=\".\")",
        "Thought: b\nAction: read_file(path=\"src/answer.rs\")",
    ]
    .join("\n---\n");
    let (code, report) = json_run(ws.path(), &script, &["--max-iterations", "2"]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["termination_reason"], "max_iterations");
    assert!(!report["answer"].as_str().unwrap().is_empty());
}

#[test]
fn an_answer_the_last_step_asked_for_is_not_a_success() {
    let ws = workspace();
    let script = [
        "Thought: a\nAction: list_directory(path=\".\")",
        "Thought: I must answer now.\nFinal Answer: probably src/answer.rs",
    ]
    .join("\n---\n");
    let (code, report) = json_run(ws.path(), &script, &["--max-iterations", "2"]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["termination_reason"], "max_iterations");
    assert_eq!(report["answer"], "probably src/answer.rs");
    // With a step to spare, the same answer is the model's own.
    let (code, report) = json_run(ws.path(), &script, &["--max-iterations", "3"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["termination_reason"], "success");
}

/// `submit_answer` on the last step ends the loop with its answer (as `max_iterations`, given
/// where the model was told to answer), not with the step limit's summary.
#[test]
fn an_answer_submitted_on_the_last_step_is_kept() {
    let ws = workspace();
    let (code, report) = json_run(
        ws.path(),
        "Thought: t\nAction: submit_answer(answer=\"ans\", confidence=0.5)",
        &["--max-iterations", "1"],
    );
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["termination_reason"], "max_iterations");
    assert_eq!(report["answer"], "ans");
    assert_eq!(report["confidence"], 0.5);
    let script = [
        "Thought: a\nAction: calculator(expression=\"1+1\")",
        "Thought: b\nAction: calculator(expression=\"2+2\")",
        "Thought: c\nAction: submit_answer(answer=\"four\")",
    ]
    .join("\n---\n");
    let (code, report) = json_run(ws.path(), &script, &["--max-iterations", "3"]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(
        (
            report["termination_reason"].as_str(),
            report["answer"].as_str()
        ),
        (Some("max_iterations"), Some("four"))
    );
    // With a step to spare, the same answer is the model's own.
    let (code, report) = json_run(ws.path(), &script, &["--max-iterations", "4"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["termination_reason"], "success");
}

/// An observation holding a secret the driver knows (a token of its environment, as an MCP
/// server that echoes its environment or a file holding the key returns) is scrubbed before it
/// is printed, kept in the report or sent to the model.
#[test]
fn a_secret_a_tool_returns_is_never_printed_kept_or_sent() {
    let ws = workspace();
    let token = "tok-Zq7Xw3Kp9Lm2Nb8Vc4Rt";
    std::fs::write(
        ws.path().join("notes.txt"),
        format!("deploy with {token} please\n"),
    )
    .unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let file = scripts.path().join("script.txt");
    let script = "Thought: t\nAction: read_file(path=\"notes.txt\")\n---\nThought: t\nAction: submit_answer(answer=\"done\")";
    std::fs::write(&file, script).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .args(["run", "q", "--output", "json", "--workspace"])
        .arg(ws.path())
        .arg("--mock-responses")
        .arg(&file)
        .env("DEPLOY_TOKEN", token)
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert_eq!(output.status.code(), Some(0), "{out}\n{err}");
    assert!(
        !out.contains("Zq7Xw3Kp") && !err.contains("Zq7Xw3Kp"),
        "{out}\n{err}"
    );
    let report: Value = serde_json::from_str(&out).unwrap();
    let observation = report["steps"][0]["observation"].as_str().unwrap();
    assert!(
        observation.starts_with("deploy with [REDACTED]"),
        "{observation}"
    );
}

#[test]
fn a_final_answer_schema_gets_the_answer_back_as_json() {
    let ws = workspace();
    let schema = ws.path().join("answer.schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "required": ["value"], "properties": {"value": {"type": "integer"}}}"#,
    )
    .unwrap();
    let script = "Thought: I know it\nFinal Answer: {\"value\": 42}";
    let schema_arg = schema.to_str().unwrap();
    let (code, report) = json_run(ws.path(), script, &["--final-answer-schema", schema_arg]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["answer_json"], serde_json::json!({"value": 42}));
    // An answer that does not match is refused by the service, with the schema's error.
    let (code, report) = json_run(
        ws.path(),
        "Thought: I know it\nFinal Answer: {\"value\": \"many\"}",
        &["--final-answer-schema", schema_arg],
    );
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["termination_reason"], "failure");
    assert!(report.get("answer_json").is_none());
}

#[test]
fn a_model_that_gives_up_is_a_failure_and_a_script_that_runs_out_too() {
    let ws = workspace();
    let (code, report) = json_run(
        ws.path(),
        "Thought: hm\nFinal Answer: I cannot complete this task without access.",
        &[],
    );
    assert_eq!(
        (code, report["termination_reason"].as_str()),
        (1, Some("failure"))
    );
    let (code, report) = json_run(
        ws.path(),
        "Thought: a\nAction: list_directory(path=\".\")",
        &[],
    );
    assert_eq!(code, 1);
    assert_eq!(report["termination_reason"], "failure");
    assert!(
        report["answer"].as_str().unwrap().contains("ran out"),
        "{report}"
    );
}

#[test]
fn a_bad_invocation_says_why_and_exits_2() {
    let output = Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .args([
            "run",
            "q",
            "--workspace",
            "/definitely/not/here",
            "--mock-responses",
            "/nope",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8(output.stderr).unwrap();
    assert!(err.contains("workspace"), "{err}");
}

#[test]
fn a_tool_past_its_limit_is_refused_and_the_model_is_told() {
    let ws = workspace();
    let script = [
        "Thought: a\nAction: list_directory(path=\".\")",
        "Thought: b\nAction: list_directory(path=\"src\")",
        "Thought: c\nFinal Answer: done",
    ]
    .join("\n---\n");
    let (code, report) = json_run(ws.path(), &script, &["--tool-limit", "list_directory=1"]);
    assert_eq!(code, 0, "{report}");
    let steps = report["steps"].as_array().unwrap();
    assert!(steps[0]["observation"].as_str().unwrap().contains("src/"));
    let refused = steps[1]["observation"].as_str().unwrap();
    assert!(refused.contains("at most 1 times"), "{refused}");
    let errors = report["error_history"].as_array().unwrap();
    assert_eq!(errors[0]["source"], "list_directory");
    assert_eq!(errors[0]["recovered"], false);
    let (code, _, err) = run(ws.path(), &script, &["--tool-limit", "list_directory"]);
    assert_eq!(code, 2);
    assert!(err.contains("NAME=N"), "{err}");
}

/// A server that takes connections and never answers, so a step waits until the loop ends it.
fn silent_server() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}

/// A service that proposes a new call at every step and always says ten steps are left: the
/// loop's own count must end it. Answers until the test ends; the number of steps it was asked.
fn service_that_never_counts_down() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let asked = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let url = fake_service::serve(move |stream, _| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        let reply = serde_json::json!({
            "status": "action_proposed", "thought": "one more",
            "action_details": {"tool_name": "read_file", "tool_args": {"path": format!("f{n}.txt")},
                "raw_action_string": "", "tool_call_id": format!("c{n}")},
            "updated_conversation_history": [], "iterations_remaining": 10,
        });
        fake_service::reply_json(stream, &reply)
    });
    (url, asked)
}

#[test]
fn the_loops_own_step_limit_holds_whatever_the_service_counts() {
    let ws = workspace();
    let (url, asked) = service_that_never_counts_down();
    let output = Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .args(["run", "q", "--output", "json", "--max-iterations", "3"])
        .args(["--server", &url, "--workspace"])
        .arg(ws.path())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert_eq!(report["termination_reason"], "max_iterations");
    assert_eq!(report["iterations"], 3, "{report}");
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[test]
fn ctrl_c_ends_the_loop_cleanly_with_what_it_did() {
    let ws = workspace();
    let (listener, url) = silent_server();
    let child = Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .args([
            "run",
            "q",
            "--output",
            "json",
            "--server",
            &url,
            "--workspace",
        ])
        .arg(ws.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The step is under way once the loop has connected.
    let (_connection, _) = listener.accept().unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on the child this test started and still owns.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let output = child.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(report["termination_reason"], "cancelled");
    assert_eq!(report["iterations"], 0);
}

#[test]
fn a_terminal_closing_or_a_process_manager_ends_the_loop_as_ctrl_c_does() {
    let ws = workspace();
    for signal in [libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // The service runs in-process and calls a model server that never answers: the signal
        // must end the loop, not the service under it.
        let (listener, url) = silent_server();
        let child = Command::new(env!("CARGO_BIN_EXE_reactstep"))
            .args([
                "run",
                "q",
                "--output",
                "json",
                "--provider",
                "openai_compatible",
            ])
            .args(["--model", "local", "--token-limit", "8000"])
            .args(["--reserved-output-tokens", "1000", "--workspace"])
            .arg(ws.path())
            .env("REACTSTEP_OPENAI_COMPATIBLE_BASE_URL", format!("{url}/v1"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (_connection, _) = listener.accept().unwrap();
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill(2) on the child this test started and still owns.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let output = child.wait_with_output().unwrap();
        let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!("{signal}: {e}: {}", String::from_utf8_lossy(&output.stderr))
        });
        assert_eq!(
            report["termination_reason"], "cancelled",
            "{signal}: {report}"
        );
        assert_eq!(output.status.code(), Some(1), "{signal}");
    }
}

#[test]
fn the_loop_ends_with_timeout_when_its_time_is_up() {
    let ws = workspace();
    let (_listener, url) = silent_server();
    let output = Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .args([
            "run",
            "q",
            "--output",
            "json",
            "--timeout",
            "1",
            "--server",
            &url,
            "--workspace",
        ])
        .arg(ws.path())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(report["termination_reason"], "timeout");
}

#[test]
fn a_task_of_eleven_steps_uses_every_kind_of_tool() {
    let ws = workspace();
    std::fs::write(
        ws.path().join("src/lib.rs"),
        "mod answer;\n// TODO: document\n",
    )
    .unwrap();
    let steps = [
        r#"Action: list_directory(path=".")"#,
        r#"Action: list_directory(path="src")"#,
        r#"Action: read_file(path="src/lib.rs")"#,
        r#"Action: grep_search(pattern="TODO")"#,
        r#"Action: read_file(path="src/answer.rs")"#,
        r#"Action: grep_search(pattern="ANSWER", path="src")"#,
        r#"Action: calculator(expression="6 * 7")"#,
        r#"Action: calculator(expression="(6 * 7) / 0")"#,
        r#"Action: string_helper(operation="upper", text="forty-two")"#,
        r#"Action: string_helper(operation="length", text="forty-two")"#,
        r#"Action: submit_answer(answer="42 (FORTY-TWO)", confidence=0.95)"#,
    ];
    let script: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(i, action)| format!("Thought: step {}\n{action}", i + 1))
        .collect();
    let (code, report) = json_run(
        ws.path(),
        &script.join("\n---\n"),
        &["--max-iterations", "15"],
    );
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["iterations"], 11);
    assert_eq!(report["answer"], "42 (FORTY-TWO)");
    let observations: Vec<&str> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["observation"].as_str().unwrap())
        .collect();
    assert_eq!(observations[3], "src/lib.rs:2: // TODO: document");
    assert_eq!(observations[6], "42");
    assert_eq!(observations[7], "division by zero");
    assert_eq!(observations[8], "FORTY-TWO");
    assert_eq!(observations[9], "9");
    assert_eq!(report["tool_usage"]["calculator"], 2);
    assert_eq!(report["error_history"][0]["source"], "calculator");
}

/// The observations of a JSON report, in order.
fn observations(report: &Value) -> Vec<&str> {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["observation"].as_str().unwrap())
        .collect()
}

#[test]
fn a_folder_swapped_for_a_link_out_while_the_loop_reads_never_lets_a_read_out() {
    const READS: usize = 150;
    let ws = workspace();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("f"), "TOP-SECRET").unwrap();
    std::fs::create_dir(ws.path().join("d")).unwrap();
    std::fs::write(ws.path().join("d/f"), "inside").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("d.alt")).unwrap();
    // Each read names the file differently, so none is answered from an earlier one.
    let mut script: Vec<String> = (0..READS)
        .map(|k| {
            format!(
                "Thought: again\nAction: read_file(path=\"{}d/f\")",
                "./".repeat(k)
            )
        })
        .collect();
    script.push("Thought: done\nFinal Answer: read".into());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let swapped = ws.path().join("d");
    let (code, report) = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                exchange(&swapped);
            }
        });
        let ran = json_run(
            ws.path(),
            &script.join("\n---\n"),
            &["--max-iterations", "200"],
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        ran
    });
    assert_eq!(code, 0, "{report}");
    let seen = observations(&report);
    assert_eq!(seen.len(), READS);
    assert!(!report.to_string().contains("TOP-SECRET"), "{report}");
    let read = seen.iter().filter(|o| **o == "inside").count();
    let refused = seen.iter().filter(|o| o.contains("symbolic link")).count();
    assert_eq!(read + refused, READS, "{seen:?}");
    assert!(
        read > 0 && refused > 0,
        "the race never ran: {read} read, {refused} refused"
    );
}

#[test]
fn a_fifo_in_the_workspace_is_an_observation_and_the_loop_goes_on() {
    use std::os::unix::ffi::OsStrExt;
    let ws = workspace();
    let fifo = std::ffi::CString::new(ws.path().join("pipe").as_os_str().as_bytes()).unwrap();
    // SAFETY: `fifo` is NUL-terminated and outlives the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let script = [
        "Thought: a\nAction: read_file(path=\"pipe\")",
        "Thought: b\nAction: grep_search(pattern=\"ANSWER\")",
        "Thought: c\nAction: grep_search(pattern=\"x\", path=\"pipe\")",
        "Thought: d\nAction: list_directory(path=\".\")",
        "Thought: e\nFinal Answer: done",
    ];
    // With nobody writing, a blocking open of the FIFO would never return: the deadline is
    // there so that such a regression ends the run instead of the test suite.
    let (code, report) = json_run(ws.path(), &script.join("\n---\n"), &["--timeout", "120"]);
    assert_eq!(code, 0, "{report}");
    let seen = observations(&report);
    assert!(seen[0].contains("named pipe (FIFO)"), "{seen:?}");
    assert_eq!(seen[1], "src/answer.rs:1: pub const ANSWER: u32 = 6 * 7;");
    assert_eq!(seen[2], "no line matches x");
    assert_eq!(seen[3], "pipe\nsrc/");
}

#[test]
fn huge_observations_are_cut_for_the_service_and_kept_whole_in_the_report() {
    const BIG: usize = 250 * 1024;
    let ws = workspace();
    // 100 files of one 250 KiB matching line: 25 MB of grep output once; 33 reads of 250 KiB:
    // 8.25 MB of history, over the service's 8 MiB body limit.
    std::fs::create_dir(ws.path().join("big")).unwrap();
    for n in 0..100 {
        let line = format!("NEEDLE {n} {}\n", "x".repeat(BIG));
        std::fs::write(ws.path().join(format!("big/{n:03}.txt")), line).unwrap();
    }
    let mut script = vec!["Thought: find it\nAction: grep_search(pattern=\"NEEDLE\")".to_string()];
    script.extend(
        (0..33).map(|n| format!("Thought: read\nAction: read_file(path=\"big/{n:03}.txt\")")),
    );
    script.push("Thought: done\nFinal Answer: read them all".into());
    let (code, report) = json_run(
        ws.path(),
        &script.join("\n---\n"),
        &["--max-iterations", "40"],
    );
    assert_eq!(code, 0, "{}", report["answer"]);
    assert_eq!(report["answer"], "read them all");
    let seen = observations(&report);
    assert_eq!(seen.len(), 34);
    // A matching line is shown in part; the search still finds every file.
    let found: Vec<&str> = seen[0].lines().collect();
    assert_eq!(found.len(), 101, "{}", &seen[0][..600]);
    assert!(found[..100]
        .iter()
        .all(|l| l.len() < 1_000 && l.ends_with("[…]")));
    assert_eq!(found[100], "[stopped at 100 matches]");
    // The report has every read whole; only what went back to the service was cut.
    for (n, read) in seen[1..].iter().enumerate() {
        let file = std::fs::read_to_string(ws.path().join(format!("big/{n:03}.txt"))).unwrap();
        assert!(
            *read == file,
            "read {n} is {} bytes, not {}",
            read.len(),
            file.len()
        );
    }
}

/// A service on loopback that answers every step's stream with its head, then runs `body` on
/// the connection (which it writes the stream's bytes to) until `body` returns or the driver
/// closes it.
fn streaming_service(body: fn(&mut std::net::TcpStream) -> std::io::Result<()>) -> String {
    fake_service::answering("text/event-stream", body)
}

fn run_against(url: &str, flags: &[&str]) -> (Option<i32>, Value, String) {
    run_against_with(url, flags, &[])
}

/// As [`run_against`], with `env` set for the driver.
fn run_against_with(
    url: &str,
    flags: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, Value, String) {
    let ws = workspace();
    let output = Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .args(["run", "q", "--output", "json", "--server", url])
        .args(flags)
        .arg("--workspace")
        .arg(ws.path())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let report = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    (output.status.code(), report, stderr)
}

/// Asserts that each of `bad` as the value of `flag` ends `reactstep run` with exit code 2 and
/// a message holding `says`, before any service is asked.
fn refused_values(flag: &str, bad: &[&str], says: &str) {
    for bad in bad {
        let output = Command::new(env!("CARGO_BIN_EXE_reactstep"))
            .args(["run", "q", "--server", "http://127.0.0.1:9"])
            .arg(format!("--{flag}={bad}"))
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{bad}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{bad}: {stderr}");
    }
}

/// Writes 40 MiB to `stream`, more than any answer may take with the default body limit.
fn forty_mib(stream: &mut std::net::TcpStream) -> std::io::Result<()> {
    use std::io::Write;
    let mib = vec![b'7'; 1 << 20];
    for _ in 0..40 {
        stream.write_all(&mib)?;
    }
    Ok(())
}

/// A service whose stream dribbles a byte every 50 ms and never ends a block: the step fails
/// once the bound passes without a whole event or heartbeat, instead of waiting for ever.
#[test]
fn a_stream_that_never_ends_a_block_fails_the_step_at_the_bound() {
    let url = streaming_service(|stream| loop {
        use std::io::Write;
        stream.write_all(b"x")?;
        std::thread::sleep(std::time::Duration::from_millis(50));
    });
    let (code, report, stderr) = run_against(&url, &["--stream-idle-timeout", "0.5"]);
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert_eq!(report["termination_reason"], "failure", "{report}");
    assert_eq!(
        report["answer"],
        "the service's stream went quiet: no whole event or heartbeat within 0.5 s",
        "{report}"
    );
    // A service that takes the step and never answers its head is bounded the same way.
    let (_listener, url) = silent_server();
    let (code, report, stderr) = run_against(&url, &["--stream-idle-timeout", "0.5"]);
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert_eq!(
        report["answer"],
        "the service's stream went quiet: no whole event or heartbeat within 0.5 s",
        "{report}"
    );
}

/// Heartbeats (comments) keep a stream alive past the bound: the step's answer, a second and a
/// half in, is taken.
#[test]
fn heartbeats_keep_a_stream_alive_past_the_bound() {
    let url = streaming_service(|stream| {
        use std::io::Write;
        for _ in 0..15 {
            stream.write_all(b": heartbeat\n\n")?;
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let step = serde_json::json!({
            "status": "direct_response_provided", "thought": "t", "direct_response": "42",
            "updated_conversation_history": [], "iterations_remaining": 9,
        });
        write!(stream, "event: step\ndata: {step}\n\n")
    });
    let (code, report, stderr) = run_against(&url, &["--stream-idle-timeout", "0.5"]);
    assert_eq!(code, Some(0), "{report}\n{stderr}");
    assert_eq!(report["answer"], "42", "{report}");
    // A bound that is no positive number of seconds is refused before the loop starts.
    refused_values(
        "stream-idle-timeout",
        &["0", "-1", "NaN", "inf", "1e20"],
        "is not a number of seconds",
    );
}

/// A service whose stream is kept alive by heartbeats alone, for ever, and one that never
/// answers the plan: each ends at `--step-timeout` without any `--timeout`, instead of holding
/// the loop for ever.
#[test]
fn an_answer_kept_alive_without_a_step_ends_at_the_step_timeout() {
    let url = streaming_service(|stream| loop {
        use std::io::Write;
        stream.write_all(b": heartbeat\n\n")?;
        std::thread::sleep(std::time::Duration::from_millis(100));
    });
    let said = "the service did not give the step's answer within 1 s (--step-timeout)";
    let (code, report, stderr) = run_against(
        &url,
        &["--stream-idle-timeout", "0.5", "--step-timeout", "1"],
    );
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert_eq!(report["termination_reason"], "failure", "{report}");
    assert_eq!(report["answer"], said, "{report}");
    let (_listener, silent) = silent_server();
    let (code, report, stderr) = run_against(&silent, &["--plan", "--step-timeout", "1"]);
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert!(report.to_string().contains(said), "{report}\n{stderr}");
    refused_values("step-timeout", &["0", "-1", "86401", "1.5"], "step-timeout");
}

/// A service that answers a stream request with JSON dribbled a byte at a time, or with more
/// than any answer takes (as JSON, or as one endless line of a stream), fails the step at the
/// bound instead of holding the loop or filling the driver's memory.
#[test]
fn an_answer_past_the_time_or_size_bounds_fails_the_step() {
    let dribbled = fake_service::answering("application/json", |stream| loop {
        use std::io::Write;
        stream.write_all(b" ")?;
        std::thread::sleep(std::time::Duration::from_millis(50));
    });
    let (code, report, stderr) = run_against(&dribbled, &["--stream-idle-timeout", "0.5"]);
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert_eq!(
        report["answer"],
        "the service's stream went quiet: no whole event or heartbeat within 0.5 s",
        "{report}"
    );
    for url in [
        fake_service::answering("application/json", forty_mib),
        streaming_service(|stream| {
            use std::io::Write;
            stream.write_all(b"data: ")?;
            forty_mib(stream)
        }),
    ] {
        let (code, report, stderr) = run_against(&url, &[]);
        assert_eq!(code, Some(1), "{report}\n{stderr}");
        assert_eq!(
            report["answer"],
            "the service's answer passed 32 MiB, more than any step's answer takes",
            "{report}"
        );
    }
}

/// The plan is asked for within the loop's own bounds: a service that never answers it is cut
/// by `--timeout`, and a plan the size of memory fails at the answer's bound.
#[test]
fn the_plan_is_asked_for_within_the_loops_bounds() {
    let (_listener, silent) = silent_server();
    let (code, report, stderr) = run_against(&silent, &["--plan", "--timeout", "1"]);
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert_eq!(report["termination_reason"], "timeout", "{report}");
    let huge = fake_service::answering("application/json", forty_mib);
    let (code, report, stderr) = run_against(&huge, &["--plan"]);
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert!(
        report.to_string().contains("passed 32 MiB"),
        "{report}\n{stderr}"
    );
}

/// A service that redirects the step elsewhere: not followed, since the step's body holds the
/// model's key; the step fails saying why.
#[test]
fn a_redirect_is_not_followed_with_the_key() {
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let target = format!("http://{}/steal", elsewhere.local_addr().unwrap());
    let url = fake_service::serve(move |stream, _| {
        use std::io::Write;
        write!(
            stream,
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
    });
    let key = ("OPENAI_API_KEY", "sk-never-posted-elsewhere-0123456789");
    let (code, report, stderr) = run_against_with(&url, &[], &[key]);
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert!(
        report["answer"]
            .as_str()
            .unwrap()
            .starts_with("the service answered with a redirect (HTTP 307), which is not followed"),
        "{report}"
    );
    assert!(
        elsewhere.accept().is_err(),
        "the step was posted on to the redirect's target"
    );
}

/// A streamed thought whose step holds no whole thought leaves its line open: the action still
/// starts a line of its own.
#[test]
fn a_streamed_thought_without_its_whole_ends_its_line() {
    let url = streaming_service(|stream| {
        use std::io::Write;
        let step = serde_json::json!({
            "status": "action_proposed", "thought": "",
            "action_details": {"tool_name": "read_file", "tool_args": {"path": "src/answer.rs"},
                "raw_action_string": "", "tool_call_id": "c1"},
            "updated_conversation_history": [], "iterations_remaining": 0,
        });
        write!(
            stream,
            "event: thought\ndata: {{\"delta\": \"second\"}}\n\nevent: step\ndata: {step}\n\n"
        )
    });
    let (_, _, stderr) = run_against(&url, &["--max-iterations", "1"]);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(lines.contains(&"[1] thought: second"), "{stderr}");
    assert!(
        lines.iter().any(|l| l.starts_with("[1] action: read_file")),
        "{stderr}"
    );
}

/// A body limit that would leave the answer unbounded, or no step room, is refused.
#[test]
fn a_body_limit_out_of_range_is_refused() {
    refused_values(
        "server-max-body-bytes",
        &["0", "1000", "18446744073709551615", "-1", "2147483648"],
        "is not a number of bytes",
    );
}

/// An answer under the byte bound that holds millions of tiny values is refused before they are
/// built (5 million `{}` took 1.1 GB once read).
#[test]
fn an_answer_of_millions_of_tiny_values_is_refused() {
    let wide = fake_service::answering("application/json", |stream| {
        use std::io::Write;
        stream.write_all(
            br#"{"status":"action_proposed","thought":"t","updated_conversation_history":["#,
        )?;
        let many = "{},".repeat(1 << 20);
        for _ in 0..5 {
            stream.write_all(many.as_bytes())?;
        }
        stream.write_all(b"{}]}")
    });
    let (code, report, stderr) = run_against(&wide, &[]);
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert!(
        report["answer"]
            .as_str()
            .unwrap()
            .contains("more JSON values than an answer may hold"),
        "{report}"
    );
}
