//! `reactstep run` against real MCP servers of both revisions, over streamable HTTP and stdio:
//! `tests/mcp_servers/server.py`, written with the official Python SDK (`mcp` 2.3.0, which speaks
//! 2026-07-28 and, with `--legacy`, only 2025-11-25). The SDK's own client checks that server
//! first (`check.py`), so what is tested here is reactstep's client against a server known to be
//! right: discovery or the fallback, structured output, a server asking for input (answered,
//! declined, or with no one to answer), failures mid-call, a stale tool list listed again, and
//! headers and a token that reach the server and never the report.
//!
//! The packages come from PyPI (exact pins in tests/mcp_servers/requirements.txt) into a
//! virtualenv under the target directory, installed by the first run and reused while the pins
//! are unchanged. It needs python3 with venv and pip, and fails (never skips) without them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use support::workspace::workspace;

fn servers_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_servers")
}

fn shown(output: &Output) -> String {
    format!(
        "--- stdout ---\n{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The virtualenv's python, with the pinned requirements installed and the server checked by
/// the SDK's own client; once per run (the install again only when the pins change).
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let requirements = servers_dir().join("requirements.txt");
        let wanted = std::fs::read(&requirements).unwrap();
        let requirements = requirements.to_str().expect("the repository path is UTF-8");
        let python = support::venv::ready(
            "mcp-servers-venv",
            &wanted,
            &[&["--quiet", "--requirement", requirements]],
        )
        .join("python");
        let checked = Command::new(&python)
            .arg(servers_dir().join("check.py"))
            .output()
            .unwrap();
        assert!(
            checked.status.success(),
            "the test server failed the SDK's own checks\n{}",
            shown(&checked)
        );
        python
    })
}

fn server_script() -> String {
    servers_dir().join("server.py").display().to_string()
}

/// `server.py --transport http` on a free loopback port; killed when dropped. Its input is held
/// open, since it ends when its input does.
struct HttpServer {
    child: Child,
    url: String,
    /// Its stderr, where it logs each OAuth step (never a token).
    log: tempfile::NamedTempFile,
}

impl HttpServer {
    fn start(flags: &[&str]) -> Self {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut child = Command::new(python())
            .arg(server_script())
            .args(["--transport", "http", "--port", "0"])
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .strip_prefix("LISTENING ")
            .unwrap_or_else(|| panic!("the server said {line:?}"))
            .trim()
            .to_string();
        Self { child, url, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `server.py` over stdio, as `--mcp` starts it.
fn stdio_server(flags: &str) -> String {
    format!(
        "{} {} --transport stdio {flags}",
        python().display(),
        server_script()
    )
}

/// Runs `reactstep run` on `script` with `extra` flags, `env` set and `typed` as what the person
/// at the terminal types; the exit code, the report and stderr.
fn run(script: &str, extra: &[String], env: &[(&str, &str)], typed: &str) -> (i32, Value, String) {
    let ws = workspace();
    let file = ws.path().join("script.txt");
    std::fs::write(&file, script).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .args([
            "run",
            "What is the answer?",
            "--output",
            "json",
            "--mcp-timeout",
            "60",
        ])
        .arg("--workspace")
        .arg(ws.path())
        .arg("--mock-responses")
        .arg(&file)
        .args(extra)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(typed.as_bytes()).unwrap();
    drop(input);
    let output = child.wait_with_output().unwrap();
    let (out, err) = (
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    );
    let report = serde_json::from_str(&out).unwrap_or(Value::String(out));
    (output.status.code().unwrap_or(-1), report, err)
}

fn observation(report: &Value, step: usize) -> &str {
    report["steps"][step]["observation"]
        .as_str()
        .unwrap_or_else(|| panic!("{report}"))
}

/// Calls of the server's tools, then an answer.
fn script(calls: &[&str]) -> String {
    let mut steps: Vec<String> = calls
        .iter()
        .map(|call| format!("Thought: go on\nAction: {call}"))
        .collect();
    steps.push("Thought: done\nFinal Answer: done".into());
    steps.join("\n---\n")
}

/// What every revision must give: structured output read as JSON, an error result and a tool
/// that raised as failures the model reads, and a question answered, declined and cancelled.
fn the_server_is_used_whole(mcp: &[String], revision: &str) {
    let calls = [
        "add(a=2, b=3)",
        r#"fail(kind="error")"#,
        r#"fail(kind="raise")"#,
        r#"confirm(action="deploy")"#,
        r#"confirm(action="release")"#,
        r#"confirm(action="delete")"#,
    ];
    // Answer (ok: a "maybe" asked again, then yes; the note), decline, cancel.
    let typed = "a\nmaybe\nyes\nat noon\nd\nc\n";
    let (code, report, err) = run(&script(&calls), mcp, &[], typed);
    assert_eq!(code, 0, "{report}\n{err}");
    assert!(err.contains(&format!("speaks MCP {revision}")), "{err}");
    assert_eq!(observation(&report, 0), r#"{"sum":5}"#);
    assert_eq!(observation(&report, 1), "the tool failed on purpose");
    assert!(
        observation(&report, 2).contains("Error executing tool fail"),
        "{report}"
    );
    assert_eq!(observation(&report, 3), "confirmed deploy: at noon");
    assert_eq!(observation(&report, 4), "declined release");
    assert_eq!(observation(&report, 5), "cancelled delete");
    let sources: Vec<&str> = report["error_history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["source"].as_str())
        .collect();
    assert_eq!(sources, ["fail", "fail"], "{report}");
}

#[test]
fn a_2026_server_over_http_is_discovered_and_used_whole() {
    let server = HttpServer::start(&[]);
    the_server_is_used_whole(&["--mcp-url".into(), server.url.clone()], "2026-07-28");
}

#[test]
fn an_older_server_over_http_is_spoken_to_in_2025_11_25() {
    let server = HttpServer::start(&["--legacy"]);
    the_server_is_used_whole(&["--mcp-url".into(), server.url.clone()], "2025-11-25");
}

#[test]
fn both_revisions_over_stdio() {
    the_server_is_used_whole(&["--mcp".into(), stdio_server("")], "2026-07-28");
    the_server_is_used_whole(&["--mcp".into(), stdio_server("--legacy")], "2025-11-25");
}

#[test]
fn a_question_no_one_can_answer_is_an_observation_that_says_so() {
    let server = HttpServer::start(&[]);
    let calls = [r#"confirm(action="deploy")"#, "add(a=1, b=1)"];
    let mcp = ["--mcp-url".into(), server.url.clone()];
    // The input has ended before the question: no one can answer it.
    let (code, report, err) = run(&script(&calls), &mcp, &[], "");
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(
        observation(&report, 0),
        "confirm asked for the user's input, and no one could answer the server's question: Allow deploy?"
    );
    assert_eq!(report["error_history"][0]["source"], "confirm");
    assert_eq!(observation(&report, 1), r#"{"sum":2}"#, "the loop goes on");
}

#[test]
fn a_server_that_dies_mid_call_is_an_observation_and_the_loop_goes_on() {
    for mcp in [
        vec!["--mcp".to_string(), stdio_server("")],
        vec!["--mcp".to_string(), stdio_server("--legacy")],
    ] {
        let calls = [r#"fail(kind="die")"#, "add(a=1, b=2)"];
        let (code, report, err) = run(&script(&calls), &mcp, &[], "");
        assert_eq!(code, 0, "{report}\n{err}");
        assert_eq!(report["answer"], "done");
        let died = observation(&report, 0);
        assert!(
            died.starts_with("the MCP server reactstep_test_server failed to run fail"),
            "{died}"
        );
        assert!(
            observation(&report, 1).contains("failed to run add"),
            "{report}"
        );
    }
}

/// `grow` adds a tool: a 2026 server's list says `ttlMs`, an older one sends `list_changed`;
/// either way the next step declares the new tool, and the model's call of it runs.
#[test]
fn a_stale_tool_list_is_listed_again_before_the_next_step() {
    let modern = HttpServer::start(&["--ttl-ms", "1"]);
    let legacy = HttpServer::start(&["--legacy"]);
    for url in [&modern.url, &legacy.url] {
        let calls = ["grow()", "extra_1()"];
        // grow may write: it is asked about, and approved.
        let mcp = ["--mcp-url".into(), url.clone()];
        let (code, report, err) = run(&script(&calls), &mcp, &[], "a\n");
        assert_eq!(code, 0, "{report}\n{err}");
        assert_eq!(report["steps"][0]["approval"], "approved");
        assert_eq!(observation(&report, 0), "added extra_1");
        assert_eq!(observation(&report, 1), "extra_1", "{err}");
        assert!(err.contains("tools listed again"), "{err}");
    }
}

/// Two servers that give one name (two roots of one server, say): listing one again before each
/// step (`ttlMs`) leaves the other's tools as they were (they were dropped with its own).
#[test]
fn listing_one_server_again_leaves_another_of_the_same_name_its_tools() {
    let relisted = HttpServer::start(&["--ttl-ms", "1"]);
    let other = HttpServer::start(&["--legacy"]);
    let calls = [
        "add(a=2, b=3)",
        "reactstep_test_server_add(a=4, b=5)",
        "reactstep_test_server_add(a=1, b=1)",
    ];
    let mcp = [
        "--mcp-url".into(),
        relisted.url.clone(),
        "--mcp-url".into(),
        other.url.clone(),
    ];
    let (code, report, err) = run(&script(&calls), &mcp, &[], "");
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(observation(&report, 0), r#"{"sum":5}"#);
    assert_eq!(observation(&report, 1), r#"{"sum":9}"#, "{err}");
    assert_eq!(observation(&report, 2), r#"{"sum":2}"#, "{err}");
}

#[test]
fn headers_and_a_token_reach_the_server_and_never_the_report() {
    let secret = "s3cret-bearer-value";
    let bearer = format!("Authorization=Bearer {secret}");
    let guarded = HttpServer::start(&["--require-header", &bearer]);
    let mcp = [
        "--mcp-url".to_string(),
        guarded.url.clone(),
        "--mcp-token-env".into(),
        "MCP_TOKEN".into(),
    ];
    let (code, report, err) = run(
        &script(&["add(a=1, b=1)"]),
        &mcp,
        &[("MCP_TOKEN", secret)],
        "",
    );
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(observation(&report, 0), r#"{"sum":2}"#);
    assert!(!report.to_string().contains(secret) && !err.contains(secret));

    // A wrong token is refused at start: a clear exit, the token in neither output.
    let (code, report, err) = run(
        &script(&[]),
        &mcp,
        &[("MCP_TOKEN", "wrong-token-value")],
        "",
    );
    assert_eq!(code, 2, "{report}\n{err}");
    assert!(err.contains(&guarded.url), "{err}");
    assert!(!err.contains("wrong-token-value") && !report.to_string().contains("wrong-token"));

    let teamed = HttpServer::start(&["--require-header", "X-Team=blue"]);
    let mcp = [
        "--mcp-url".to_string(),
        teamed.url.clone(),
        "--mcp-header".into(),
        "X-Team: blue".into(),
    ];
    let (code, report, err) = run(&script(&["add(a=2, b=2)"]), &mcp, &[], "");
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(observation(&report, 0), r#"{"sum":4}"#);

    // The server's 401 repeats the header's value it was sent: it is not printed back.
    let wrong = [
        "--mcp-url".to_string(),
        teamed.url.clone(),
        "--mcp-header".into(),
        "X-Team: red-team-secret".into(),
    ];
    let (code, report, err) = run(&script(&[]), &wrong, &[], "");
    assert_eq!(code, 2, "{report}\n{err}");
    assert!(!err.contains("red-team-secret"), "{err}");

    // A header's value taken from a variable, off the command line: it reaches the server, and
    // neither output holds it.
    let keyed = HttpServer::start(&["--require-header", "X-Api-Key=k3y-from-the-environment"]);
    let by_variable = |variable: &str| {
        [
            "--mcp-url".to_string(),
            keyed.url.clone(),
            "--mcp-header-env".into(),
            format!("X-Api-Key: {variable}"),
        ]
    };
    let env = [("SEARCH_API_KEY", "k3y-from-the-environment")];
    let (code, report, err) = run(
        &script(&["add(a=3, b=3)"]),
        &by_variable("SEARCH_API_KEY"),
        &env,
        "",
    );
    assert_eq!(code, 0, "{report}\n{err}");
    assert_eq!(observation(&report, 0), r#"{"sum":6}"#);
    assert!(!report.to_string().contains("k3y-from") && !err.contains("k3y-from"));
    // An unset variable stops the run before any server is asked, named; a token pasted where
    // the name goes is not echoed.
    let (code, _, err) = run(&script(&[]), &by_variable("UNSET_API_KEY"), &[], "");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--mcp-header-env names UNSET_API_KEY, which is not set"),
        "{err}"
    );
    let (code, _, err) = run(&script(&[]), &by_variable("sk-pasted-token-0123"), &[], "");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("not shown") && !err.contains("sk-pasted"),
        "{err}"
    );
    // So is a pasted token given to --mcp-token-env.
    let pasted = [
        "--mcp-url".to_string(),
        keyed.url.clone(),
        "--mcp-token-env".into(),
        "ghp_pasted0123".into(),
    ];
    let (code, _, err) = run(&script(&[]), &pasted, &[], "");
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("ghp_pasted"), "{err}");
}

/// What a browser's GET over plain HTTP on loopback was answered: the status line, the
/// `Location` (not followed) and the body.
struct Page {
    status: String,
    location: Option<String>,
    body: String,
}

fn browse(url: &str) -> Page {
    use std::io::Read;
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("{url}"));
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    let request = format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let location = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("location")
            .then(|| value.trim().to_string())
    });
    Page {
        status: head.lines().next().unwrap_or_default().to_string(),
        location,
        body: body.to_string(),
    }
}

/// `reactstep run` signing in to an OAuth server: the address it prints is opened as a browser
/// would, and the authorization server's redirect is followed to the run's loopback callback.
/// The exit code, the report, stderr, and what the callback answered the browser.
fn signed_in_run(server: &HttpServer) -> (i32, Value, String, String) {
    let ws = workspace();
    let file = ws.path().join("script.txt");
    std::fs::write(&file, script(&["add(a=20, b=22)"])).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_reactstep"))
        .args([
            "run",
            "q",
            "--output",
            "json",
            "--mcp-timeout",
            "60",
            "--mcp-url",
            &server.url,
        ])
        .arg("--workspace")
        .arg(ws.path())
        .arg("--mock-responses")
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let mut said = Vec::new();
    let address = loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("no address to open: {said:?}"))
            .unwrap();
        said.push(line.clone());
        if line.starts_with("http://") {
            break line;
        }
    };
    let authorized = browse(&address);
    assert!(authorized.status.contains("302"), "{}", authorized.status);
    let back = authorized
        .location
        .unwrap_or_else(|| panic!("no redirect from {address}"));
    assert!(
        back.starts_with("http://127.0.0.1:") && back.contains("/callback?"),
        "{back}"
    );
    let callback = browse(&back);
    said.extend(lines.map_while(Result::ok));
    let output = child.wait_with_output().unwrap();
    let out = String::from_utf8(output.stdout).unwrap();
    let report = serde_json::from_str(&out).unwrap_or(Value::String(out));
    (
        output.status.code().unwrap_or(-1),
        report,
        said.join("\n"),
        format!("{}\n{}", callback.status, callback.body),
    )
}

#[test]
fn a_server_that_requires_oauth_is_signed_in_to_and_the_token_stays_in_memory() {
    let server = HttpServer::start(&["--oauth"]);
    let (code, report, err, page) = signed_in_run(&server);
    assert_eq!(code, 0, "{report}\n{err}");
    assert!(
        page.starts_with("HTTP/1.1 200") && page.contains("has the sign-in"),
        "{page}"
    );
    assert_eq!(observation(&report, 0), r#"{"sum":42}"#);
    assert!(err.contains("Signed in to the MCP server"), "{err}");
    let log = server.log();
    // Registered dynamically, then the code exchanged with PKCE verified by the server.
    assert!(log.contains("oauth: registered client"), "{log}");
    assert!(
        log.contains("grant_type=authorization_code pkce=verified -> HTTP 200"),
        "{log}"
    );
    // No token in what the run printed: nothing that reads as one, nor the word.
    let printed = format!("{report}{err}");
    assert!(!printed.to_lowercase().contains("bearer ") && !printed.contains("access_token"));

    // A credential of the user's that the server refuses is the run's error: no sign-in.
    let mcp = [
        "--mcp-url".to_string(),
        server.url.clone(),
        "--mcp-header".into(),
        "Authorization: Bearer not-a-token-it-issued".into(),
    ];
    let (code, report, err) = run(&script(&[]), &mcp, &[], "");
    assert_eq!(code, 2, "{report}\n{err}");
    assert!(
        !err.contains("asks you to sign in") && !err.contains("not-a-token"),
        "{err}"
    );
}

#[test]
fn a_refused_sign_in_ends_the_run_with_a_clear_message() {
    let server = HttpServer::start(&["--oauth", "--oauth-reject"]);
    let (code, report, err, page) = signed_in_run(&server);
    assert_eq!(code, 2, "{report}\n{err}");
    assert!(page.contains("refused"), "{page}");
    assert!(
        err.contains("the authorization server refused the sign-in (access_denied)"),
        "{err}"
    );
}
