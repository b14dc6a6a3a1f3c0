//! Session memory in the loop driver, end to end: the real binary's `reactstep run --session`
//! and `reactstep sessions`, over an embedded SQLite file and over a real PostgreSQL server
//! (installed from the system's packages and started here): the same tests over both stores.
//! The loops run offline from scripted model outputs (`--mock-responses`), or against a mock
//! model server (`--provider openai_compatible`) where what reaches the model is the proof.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use reactstep::driver::memory::{self, Conversation, NewRun, SessionStore, Summary};
use support::postgres;
use support::stream_upstream::openai_stream;
use support::upstream::openai_reply;
use support::workspace::workspace;

/// Where a test keeps its sessions.
enum Store {
    Sqlite {
        _folder: tempfile::TempDir,
        file: PathBuf,
    },
    Postgres {
        url: String,
    },
}

impl Store {
    async fn sqlite() -> Self {
        let folder = tempfile::tempdir().unwrap();
        let file = folder.path().join("memory.sqlite3");
        Self::Sqlite {
            _folder: folder,
            file,
        }
    }

    async fn postgres() -> Self {
        Self::Postgres {
            url: postgres::server().database().await,
        }
    }

    /// What `--memory` is given.
    fn memory(&self) -> String {
        match self {
            Self::Sqlite { file, .. } => file.display().to_string(),
            Self::Postgres { url } => url.clone(),
        }
    }

    /// Runs `statement` on the store itself, as another program could.
    async fn execute(&self, statement: &str) {
        match self {
            Self::Sqlite { file, .. } => {
                let connection = rusqlite::Connection::open(file).unwrap();
                connection.execute_batch(statement).unwrap();
            }
            Self::Postgres { url } => {
                let client = connect(url).await;
                client.batch_execute(statement).await.unwrap();
            }
        }
    }

    /// What `--memory` is given to name the store with `password` in its URL (PostgreSQL's
    /// test server trusts every connection, so any password does); a file has none.
    fn memory_with_password(&self, password: &str) -> String {
        match self {
            Self::Sqlite { .. } => self.memory(),
            Self::Postgres { url } => url.replacen(
                "postgres://reactstep@",
                &format!("postgres://reactstep:{password}@"),
                1,
            ),
        }
    }

    /// Marks `session` last active `hours` ago.
    async fn age(&self, session: &str, hours: i64) {
        let then = chrono::Utc::now().timestamp_millis() - hours * 3_600_000;
        self.execute(&format!(
            "UPDATE sessions SET last_active_ms = {then} WHERE name = '{session}'"
        ))
        .await;
    }

    /// Everything the store holds, as bytes: the SQLite file and its WAL, or every row of
    /// PostgreSQL's tables as text.
    async fn bytes(&self) -> Vec<u8> {
        match self {
            Self::Sqlite { file, .. } => {
                let mut bytes = std::fs::read(file).unwrap();
                let wal = PathBuf::from(format!("{}-wal", file.display()));
                bytes.extend(std::fs::read(wal).unwrap_or_default());
                bytes
            }
            Self::Postgres { url } => {
                let client = connect(url).await;
                let mut bytes = Vec::new();
                for table in ["sessions", "runs", "schema_version"] {
                    let query = format!("SELECT t::text FROM {table} t");
                    for row in client.query(&query, &[]).await.unwrap() {
                        bytes.extend(row.get::<_, String>(0).into_bytes());
                    }
                }
                bytes
            }
        }
    }
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// Each scenario, as a test over SQLite and as a test over PostgreSQL.
macro_rules! on_both_stores {
    ($($scenario:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test]
            async fn $scenario() {
                super::$scenario(super::Store::sqlite().await).await;
            })*
        }
        mod postgresql {
            $(#[tokio::test]
            async fn $scenario() {
                super::$scenario(super::Store::postgres().await).await;
            })*
        }
    };
}

on_both_stores!(
    a_session_continues_with_its_earlier_questions_and_answers,
    the_summary_the_service_returns_is_kept_and_sent_again,
    a_long_session_sends_its_newest_runs_with_the_summary_counted_from_them,
    a_planned_run_sends_the_sessions_summary_with_its_plan_as_with_its_steps,
    what_a_session_sends_stays_within_what_the_service_takes,
    sessions_are_listed_shown_deleted_and_expired,
    the_key_is_never_saved,
    runs_at_once_into_one_session_are_all_saved,
    a_summary_covering_fewer_turns_never_replaces_one_covering_more,
    a_run_cut_short_by_its_timeout_or_ctrl_c_is_saved,
    a_store_of_a_later_schema_is_refused_before_any_model_call,
    the_plan_and_the_evaluations_are_saved_with_the_run,
    hidden_characters_are_refused_in_names_and_padded_names_are_found,
    nul_is_saved_as_a_replacement_character_and_never_found_in_a_name,
    a_session_name_holding_a_secret_is_refused_before_any_model_call,
    aws_and_database_secrets_and_the_stores_own_password_are_never_saved,
    a_run_whose_json_is_damaged_is_shown_and_continued_without_it,
    a_store_that_cannot_be_written_is_refused_at_start_and_still_shown,
);

/// What a command did.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", self.stdout, self.stderr))
    }
}

/// The `reactstep` command with `args`, with no model key and no data directory of the user's.
fn reactstep(args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_reactstep"));
    command
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("REACTSTEP_OPENAI_COMPATIBLE_BASE_URL")
        .env("XDG_DATA_HOME", "/nonexistent/reactstep-tests")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

async fn finished(command: &mut tokio::process::Command) -> Ran {
    let output = command.output().await.unwrap();
    Ran {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// `reactstep run QUESTION --session SESSION --memory STORE --output json` with `extra`, run
/// offline from `script` (model outputs separated by `---` lines) unless `extra` names a model
/// server.
fn run_command(
    store: &Store,
    session: &str,
    question: &str,
    extra: &[&str],
) -> tokio::process::Command {
    run_command_in(&store.memory(), session, question, extra)
}

/// [`run_command`] with `--memory` given as `memory`.
fn run_command_in(
    memory: &str,
    session: &str,
    question: &str,
    extra: &[&str],
) -> tokio::process::Command {
    let mut args = vec!["run", question, "--session", session, "--memory", memory];
    args.extend(["--output", "json"]);
    args.extend(extra);
    reactstep(&args)
}

/// A run offline, from `script`.
async fn offline(store: &Store, session: &str, question: &str, script: &str) -> Ran {
    offline_with(store, session, question, script, &[]).await
}

/// A run offline, from `script`, with `flags`.
async fn offline_with(
    store: &Store,
    session: &str,
    question: &str,
    script: &str,
    flags: &[&str],
) -> Ran {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("script.txt");
    std::fs::write(&file, script).unwrap();
    let ws = workspace();
    let extra = [
        "--mock-responses",
        file.to_str().unwrap(),
        "--workspace",
        ws.path().to_str().unwrap(),
    ];
    finished(run_command(store, session, question, &extra).args(flags)).await
}

/// A model server speaking OpenAI's chat API that always answers `answer`.
async fn model_server(answer: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(streamed(answer))
        .mount(&server)
        .await;
    server
}

fn streamed(text: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(openai_stream(&[text], "stop"), "text/event-stream")
}

/// A run against `server`, with a window of `window` tokens.
fn online(
    store: &Store,
    session: &str,
    question: &str,
    server: &MockServer,
    window: u32,
) -> tokio::process::Command {
    online_in(&store.memory(), session, question, server, window)
}

/// [`online`] with `--memory` given as `memory`.
fn online_in(
    memory: &str,
    session: &str,
    question: &str,
    server: &MockServer,
    window: u32,
) -> tokio::process::Command {
    let window = window.to_string();
    let extra = [
        "--provider",
        "openai_compatible",
        "--model",
        "local",
        "--token-limit",
        &window,
    ];
    let mut command = run_command_in(memory, session, question, &extra);
    command.env(
        "REACTSTEP_OPENAI_COMPATIBLE_BASE_URL",
        format!("{}/v1", server.uri()),
    );
    command
}

/// The chat requests `server` received, as JSON.
async fn chats(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.url.path() == "/v1/chat/completions")
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

async fn sessions(store: &Store, args: &[&str]) -> Ran {
    sessions_in(&store.memory(), args).await
}

async fn sessions_in(memory: &str, args: &[&str]) -> Ran {
    let mut all = vec!["sessions", "--memory", memory];
    all.extend(args);
    finished(&mut reactstep(&all)).await
}

async fn show(store: &Store, session: &str) -> Value {
    let shown = sessions(store, &["show", session, "--output", "json"]).await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    shown.json()
}

const Q1: &str = "Which port does the staging proxy listen on?";
const A1: &str = "The staging proxy listens on port 8443.";

async fn a_session_continues_with_its_earlier_questions_and_answers(store: Store) {
    let first = offline(
        &store,
        "ops",
        Q1,
        &format!("Thought: it is in the notes\nFinal Answer: {A1}"),
    )
    .await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(first.stderr.contains("saved as run"), "{}", first.stderr);

    let model = model_server("Thought: I said it before\nFinal Answer: 8443, as I said.").await;
    let q2 = "Which port did you say?";
    let second = finished(&mut online(&store, "ops", q2, &model, 16_000)).await;
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert_eq!(second.json()["answer"], "8443, as I said.");

    // The model read the first run's question and answer as turns, before the new question.
    let sent = chats(&model).await;
    assert_eq!(sent.len(), 1);
    let messages = sent[0]["messages"].as_array().unwrap();
    let at = |role: &str, text: &str| {
        messages
            .iter()
            .position(|m| {
                m["role"] == role && m["content"].as_str().is_some_and(|c| c.contains(text))
            })
            .unwrap_or_else(|| panic!("no {role} message holding {text:?}: {messages:#?}"))
    };
    assert!(at("user", Q1) < at("assistant", A1), "{messages:#?}");
    assert!(at("assistant", A1) < at("user", q2), "{messages:#?}");

    let session = show(&store, "ops").await;
    assert_eq!(session["name"], "ops");
    assert_eq!(session["runs"].as_array().unwrap().len(), 2);
    let runs = &session["runs"];
    assert_eq!(
        (runs[0]["question"].as_str(), runs[0]["answer"].as_str()),
        (Some(Q1), Some(A1))
    );
    assert_eq!(runs[1]["question"], q2);
    assert_eq!(runs[1]["termination"], "success");
    assert_eq!(runs[1]["report"]["answer"], "8443, as I said.");
    assert!(runs[1]["plan"].is_null());
    assert_eq!(runs[1]["evaluations"], serde_json::json!([]));

    // A session that was never used starts empty: the model reads no earlier turn.
    let fresh = model_server("Thought: new\nFinal Answer: hello").await;
    let other = finished(&mut online(&store, "other", "Hello?", &fresh, 16_000)).await;
    assert_eq!(other.code, 0, "{}", other.stderr);
    let sent = chats(&fresh).await.remove(0).to_string();
    assert!(!sent.contains(Q1) && !sent.contains(A1), "{sent}");
}

/// The words the mock model gives as a summary.
const SUMMARY: &str =
    "The user shared long deployment notes; the staging proxy listens on port 8443.";

async fn the_summary_the_service_returns_is_kept_and_sent_again(store: Store) {
    // Two runs whose questions are too long to fit a small window again.
    let notes = "The deployment notes say the staging proxy listens on port 8443. ".repeat(250);
    for n in 1..=2 {
        let question = format!("Part {n} of my notes: {notes}");
        let ran = offline(
            &store,
            "long",
            &question,
            &format!("Thought: noted\nFinal Answer: Noted part {n}."),
        )
        .await;
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    }
    let model = summarising_model().await;
    let third = finished(&mut online(&store, "long", "What port?", &model, 6_000)).await;
    assert_eq!(third.code, 0, "{}", third.stderr);
    let made = summary_calls(&model).await;
    assert_eq!(made, 1, "the earlier turns do not fit: one summary is made");
    assert_eq!(
        third.json()["conversation_summary"]["text"],
        SUMMARY,
        "{}\n{}",
        third.stdout,
        third.stderr
    );
    let session = show(&store, "long").await;
    assert_eq!(session["summary"]["text"], SUMMARY, "{session:#}");
    let turns = session["summary"]["turns"].as_u64().unwrap();
    assert!((1..=5).contains(&turns), "{session:#}");

    // The next run sends it back: the model reads it, and no new one is made.
    let model = summarising_model().await;
    let fourth = finished(&mut online(&store, "long", "And again?", &model, 6_000)).await;
    assert_eq!(fourth.code, 0, "{}", fourth.stderr);
    assert_eq!(
        summary_calls(&model).await,
        0,
        "the kept summary covers the omitted turns"
    );
    let step = chats(&model).await.remove(0).to_string();
    assert!(step.contains(SUMMARY), "{step}");
}

/// A model server that summarises when asked to (the service's summary instructions), and
/// answers otherwise.
async fn summarising_model() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_string_contains("You keep the memory"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_reply(SUMMARY)))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(streamed(
            "Thought: it is in the summary\nFinal Answer: 8443",
        ))
        .with_priority(2)
        .mount(&server)
        .await;
    server
}

async fn summary_calls(server: &MockServer) -> usize {
    chats(server)
        .await
        .iter()
        .filter(|c| c.to_string().contains("You keep the memory"))
        .count()
}

/// Successful runs of `(question, answer)` saved in `session` through the store's own calls, as
/// a session would have left them, the last with `summary`.
async fn save_runs(
    store: &Store,
    session: &str,
    runs: Vec<(String, String)>,
    summary: Option<Summary>,
) {
    let opened = memory::open(Some(&store.memory())).await.unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let last = runs.len();
    for (n, (question, answer)) in runs.into_iter().enumerate() {
        let run = NewRun {
            question,
            started_ms: now,
            ended_ms: now,
            answer,
            termination: "success".into(),
            report: serde_json::json!({}),
            plan: None,
            evaluations: serde_json::json!([]),
            summary: summary.clone().filter(|_| n + 1 == last),
        };
        opened.save_run(session, run).await.unwrap();
    }
}

/// What the summary of [`a_long_session_sends_its_newest_runs_with_the_summary_counted_from_them`]
/// says; the turns it covers are the session's first eight.
const OLD_SUMMARY: &str = "The user asked 101 numbered questions; the first four were about ports.";

async fn a_long_session_sends_its_newest_runs_with_the_summary_counted_from_them(store: Store) {
    // 101 runs (202 turns), saved through the store as a long session would have left them.
    let runs = (1..=101)
        .map(|n| (format!("question {n:03}?"), format!("answer {n:03}.")))
        .collect();
    let summary = Summary {
        text: OLD_SUMMARY.into(),
        turns: 8,
    };
    save_runs(&store, "long", runs, Some(summary)).await;

    // A window they all fit in: the newest 100 runs are sent, the first is not.
    let model = model_server("Thought: counted\nFinal Answer: 101 questions.").await;
    let ran = finished(&mut online(&store, "long", "How many?", &model, 32_000)).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let sent = chats(&model).await.remove(0).to_string();
    assert!(
        !sent.contains("question 001?") && !sent.contains("answer 001."),
        "{sent}"
    );
    for n in [2, 3, 50, 101] {
        assert!(
            sent.contains(&format!("question {n:03}?")),
            "question {n}: {sent}"
        );
        assert!(
            sent.contains(&format!("answer {n:03}.")),
            "answer {n}: {sent}"
        );
    }
    assert!(
        !ran.stderr.contains("no summary covers them"),
        "the summary covers the two turns left out: {}",
        ran.stderr
    );

    // A window they do not fit in: the service is sent the summary counted from the first turn
    // sent (8 - 4 left out = 4: runs 3 and 4), so the new summary it makes begins after them.
    let model = summarising_model().await;
    let ran = finished(&mut online(&store, "long", "And now?", &model, 3_000)).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let asked = chats(&model).await;
    let summary_request = asked
        .iter()
        .map(Value::to_string)
        .find(|c| c.contains("You keep the memory"))
        .unwrap_or_else(|| panic!("no summary was made: {asked:#?}"));
    assert!(summary_request.contains(OLD_SUMMARY), "{summary_request}");
    assert!(
        summary_request.contains("question 005?"),
        "{summary_request}"
    );
    assert!(
        !summary_request.contains("question 004?"),
        "{summary_request}"
    );
    // Kept counted from the session's first turn: what the service covered, plus the 4 left out.
    let returned = ran.json()["conversation_summary"]["turns"]
        .as_u64()
        .unwrap();
    let session = show(&store, "long").await;
    assert_eq!(session["summary"]["text"], SUMMARY);
    assert_eq!(
        session["summary"]["turns"].as_u64(),
        Some(returned + 4),
        "{}",
        session["summary"]
    );
}

async fn a_planned_run_sends_the_sessions_summary_with_its_plan_as_with_its_steps(store: Store) {
    // Two long runs, and a summary that covers all four of their turns.
    let notes = "The deployment notes say the staging proxy listens on port 8443. ".repeat(250);
    let runs = (1..=2).map(|n| {
        (
            format!("Part {n} of my notes: {notes}"),
            format!("Noted part {n}."),
        )
    });
    let runs = runs.collect();
    let summary = Summary {
        text: SUMMARY.into(),
        turns: 4,
    };
    save_runs(&store, "planned", runs, Some(summary)).await;
    // The summarising model, that answers a plan request with a plan too.
    let model = summarising_model().await;
    let plan = serde_json::json!({"complexity": "simple", "estimated_iterations": 1, "steps": [
        {"step_number": 1, "description": "Answer from the notes", "tool_name": null}]});
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_string_contains("Make a plan for the task below"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(openai_reply(&format!(
                "Thought: one step\nFinal Answer: {plan}"
            ))),
        )
        .with_priority(1)
        .mount(&model)
        .await;
    let ran = finished(online(&store, "planned", "What port?", &model, 6_000).arg("--plan")).await;
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert_eq!(ran.json()["answer"], "8443");
    let asked: Vec<String> = chats(&model).await.iter().map(Value::to_string).collect();
    assert!(
        !asked.iter().any(|c| c.contains("You keep the memory")),
        "the summary covers what does not fit: no new one is made"
    );
    let planned = asked
        .iter()
        .find(|c| c.contains("Make a plan for the task below"))
        .unwrap_or_else(|| panic!("no plan was asked for: {asked:#?}"));
    assert!(planned.contains(SUMMARY), "the plan's prompt: {planned}");
    let step = asked.last().unwrap();
    assert!(step.contains(SUMMARY), "the step's prompt: {step}");
}

async fn what_a_session_sends_stays_within_what_the_service_takes(store: Store) {
    let model = model_server("Thought: fine\nFinal Answer: done").await;
    let ask = |session: &'static str, question: &'static str| {
        let store = &store;
        let model = &model;
        async move { finished(&mut online(store, session, question, model, 100_000)).await }
    };

    // Two million control characters are 12 MB as JSON: the run is left out, not sent whole
    // into the service's 8 MiB body limit.
    let question = format!("q{}", "\u{1}".repeat(2_000_000));
    save_runs(&store, "ctrl", vec![(question, "a".to_string())], None).await;
    let ran = ask("ctrl", "Next?").await;
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr.contains("its 2 oldest turns are past"),
        "{}",
        ran.stderr
    );

    // A summary longer than the service takes back (one a model that ignored its limit wrote)
    // is sent cut to it, so the session's runs are not all refused.
    let text = "word ".repeat(25_000);
    let runs = (1..=2)
        .map(|n| (format!("q{n}"), format!("a{n}")))
        .collect();
    save_runs(&store, "wordy", runs, Some(Summary { text, turns: 4 })).await;
    let ran = ask("wordy", "Next?").await;
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);

    // A summary of fewer turns than are left out is not stretched to cover them: the turns no
    // summary covers are counted right, run after run.
    let runs = (1..=101)
        .map(|n| (format!("q{n}"), format!("a{n}")))
        .collect();
    let summary = Summary {
        text: "Of the first question only.".into(),
        turns: 1,
    };
    save_runs(&store, "thin", runs, Some(summary)).await;
    for uncovered in [1, 3] {
        let ran = ask("thin", "Next?").await;
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        let said = format!("its {uncovered} oldest turns are past");
        assert!(ran.stderr.contains(&said), "{said}: {}", ran.stderr);
        assert_eq!(show(&store, "thin").await["summary"]["turns"], 1);
    }
}

async fn sessions_are_listed_shown_deleted_and_expired(store: Store) {
    for name in ["old", "recent", "now"] {
        let ran = offline(
            &store,
            name,
            &format!("Question for {name}"),
            "Thought: t\nFinal Answer: done",
        )
        .await;
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    }
    store.age("old", 48).await;
    store.age("recent", 2).await;

    let listed = sessions(&store, &["list", "--output", "json"]).await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let names: Vec<Value> = listed
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(
        names,
        ["now", "recent", "old"],
        "the most recently active first"
    );
    assert_eq!(listed.json()[0]["run_count"], 1);
    let text = sessions(&store, &["list"]).await;
    assert!(
        text.stdout.contains("NAME") && text.stdout.contains("recent"),
        "{}",
        text.stdout
    );

    let shown = sessions(&store, &["show", "recent"]).await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(
        shown.stdout.contains("question: Question for recent"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains("answer: done"), "{}", shown.stdout);

    let expired = sessions(
        &store,
        &["expire", "--older-than", "24h", "--output", "json"],
    )
    .await;
    assert_eq!(expired.code, 0, "{}", expired.stderr);
    assert_eq!(expired.json(), serde_json::json!({"expired": ["old"]}));
    let expired = sessions(&store, &["expire", "--older-than", "90m"]).await;
    assert_eq!(expired.stdout, "expired 1 sessions: recent\n");
    let nothing = sessions(&store, &["expire", "--older-than", "7d"]).await;
    assert_eq!(nothing.stdout, "expired 0 sessions: \n");

    let deleted = sessions(&store, &["delete", "now"]).await;
    assert_eq!(
        (deleted.code, deleted.stdout.as_str()),
        (0, "deleted the session now\n")
    );
    let again = sessions(&store, &["delete", "now"]).await;
    assert_eq!(again.code, 1);
    assert!(
        again.stderr.contains("no session named now"),
        "{}",
        again.stderr
    );
    let gone = sessions(&store, &["show", "old", "--output", "json"]).await;
    assert_eq!((gone.code, gone.stdout.as_str()), (1, "null\n"));
    let empty = sessions(&store, &["list"]).await;
    assert_eq!(empty.stdout, "no sessions\n");
    // The runs went with their sessions.
    let bytes = String::from_utf8_lossy(&store.bytes().await).to_string();
    assert!(
        !bytes.contains("Question for old"),
        "expired runs are deleted"
    );

    let bad = sessions(&store, &["expire", "--older-than", "soon"]).await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
}

async fn the_key_is_never_saved(store: Store) {
    let key = "sk-proj-T3stKeyQ9vLm2Xr8Wz4Yb7Nc";
    let ws = workspace();
    std::fs::write(ws.path().join(".env"), format!("OPENAI_API_KEY={key}\n")).unwrap();
    let folder = tempfile::tempdir().unwrap();
    let script = folder.path().join("script.txt");
    std::fs::write(
        &script,
        format!("Thought: read the settings\nAction: read_file(path=\".env\")\n---\nThought: found it\nFinal Answer: the key is {key}"),
    )
    .unwrap();
    let question = format!("Is {} my key?", key.to_uppercase());
    let extra = [
        "--mock-responses",
        script.to_str().unwrap(),
        "--workspace",
        ws.path().to_str().unwrap(),
    ];
    let mut command = run_command(&store, "secret", &question, &extra);
    let ran = finished(command.env("OPENAI_API_KEY", key)).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    // Not even the report printed holds a key a tool returned: it never reaches the model.
    let observation = ran.json()["steps"][0]["observation"].clone();
    let observation = observation.as_str().unwrap();
    assert!(
        !observation.contains(key) && observation.contains("[REDACTED]"),
        "{observation}"
    );

    let saved = String::from_utf8_lossy(&store.bytes().await).to_lowercase();
    assert!(saved.contains("[redacted]"), "the key's places are marked");
    let lower = key.to_lowercase();
    for piece in lower.as_bytes().windows(12) {
        let piece = std::str::from_utf8(piece).unwrap();
        assert!(!saved.contains(piece), "{piece:?} of the key was saved");
    }
    let session = show(&store, "secret").await;
    assert!(session["runs"][0]["report"]["steps"][0]["observation"]
        .as_str()
        .unwrap()
        .contains("[REDACTED]"));

    // A key under a variable named with --key-env is known too.
    let other = "Zk8-Another-Secret-Value-51x";
    let mut command = run_command(&store, "secret", &format!("Is {other} it?"), &extra);
    command
        .args(["--key-env", "MY_MODEL_KEY"])
        .env("MY_MODEL_KEY", other);
    let ran = finished(&mut command).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let saved = String::from_utf8_lossy(&store.bytes().await).to_lowercase();
    assert!(
        !saved.contains(&other.to_lowercase()[4..16]),
        "the named key was saved"
    );
}

async fn runs_at_once_into_one_session_are_all_saved(store: Store) {
    // The first run makes the store and its schema; then four at once.
    let first = offline(
        &store,
        "busy",
        "Question 0",
        "Thought: t\nFinal Answer: answer 0",
    )
    .await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    let runs = (1..=4).map(|n| {
        let store = &store;
        async move {
            offline(
                store,
                "busy",
                &format!("Question {n}"),
                &format!("Thought: t\nFinal Answer: answer {n}"),
            )
            .await
        }
    });
    for ran in futures_util::future::join_all(runs).await {
        assert_eq!(ran.code, 0, "{}", ran.stderr);
    }
    let session = show(&store, "busy").await;
    assert_eq!(session["runs"].as_array().unwrap().len(), 5, "{session:#}");
    let mut questions: Vec<String> = session["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["question"].as_str().unwrap().to_string())
        .collect();
    questions.sort();
    assert_eq!(
        questions,
        (0..=4).map(|n| format!("Question {n}")).collect::<Vec<_>>()
    );
    let ids: Vec<i64> = session["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "oldest first: {ids:?}");
}

/// Two runs of a session at once each end with a summary of what they were sent. The one saved
/// last may be the one that started first and covers fewer turns: it must not replace the
/// summary that covers more (the session would send again, raw, turns it had folded away), nor
/// may a summary of the same coverage or more be refused.
async fn a_summary_covering_fewer_turns_never_replaces_one_covering_more(store: Store) {
    let run = |n: usize| (format!("Question {n}"), format!("Answer {n}"));
    let summary = |text: &str, turns: u64| Summary {
        text: text.into(),
        turns,
    };
    save_runs(
        &store,
        "raced",
        vec![run(1), run(2)],
        Some(summary("covers eight", 8)),
    )
    .await;
    let kept = |session: &Value| {
        let kept = &session["summary"];
        (
            kept["text"].as_str().unwrap().to_string(),
            kept["turns"].as_u64().unwrap(),
        )
    };

    // The slower run, saved last with the older, smaller summary: the run is kept, the summary
    // is not.
    save_runs(
        &store,
        "raced",
        vec![run(3)],
        Some(summary("covers four", 4)),
    )
    .await;
    let session = show(&store, "raced").await;
    assert_eq!(kept(&session), ("covers eight".into(), 8), "{session:#}");
    assert_eq!(session["runs"].as_array().unwrap().len(), 3, "{session:#}");

    // One of the same coverage is a newer wording of it; one covering more replaces it too.
    save_runs(
        &store,
        "raced",
        vec![run(4)],
        Some(summary("also eight", 8)),
    )
    .await;
    assert_eq!(kept(&show(&store, "raced").await), ("also eight".into(), 8));
    save_runs(
        &store,
        "raced",
        vec![run(5)],
        Some(summary("covers ten", 10)),
    )
    .await;
    assert_eq!(
        kept(&show(&store, "raced").await),
        ("covers ten".into(), 10)
    );

    // A run without a new summary leaves it as it is.
    save_runs(&store, "raced", vec![run(6)], None).await;
    let session = show(&store, "raced").await;
    assert_eq!(kept(&session), ("covers ten".into(), 10), "{session:#}");
    assert_eq!(session["runs"].as_array().unwrap().len(), 6, "{session:#}");
}

/// Answers after a minute, and says when it was asked.
struct Slow(tokio::sync::mpsc::UnboundedSender<()>);

impl Respond for Slow {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let _ = self.0.send(());
        streamed("Thought: late\nFinal Answer: too late").set_delay(Duration::from_secs(60))
    }
}

async fn slow_model() -> (MockServer, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let (asked, heard) = tokio::sync::mpsc::unbounded_channel();
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Slow(asked))
        .mount(&server)
        .await;
    (server, heard)
}

async fn a_run_cut_short_by_its_timeout_or_ctrl_c_is_saved(store: Store) {
    let (model, _heard) = slow_model().await;
    let mut command = online(&store, "short", "Out of time?", &model, 16_000);
    let ran = finished(command.args(["--timeout", "2"])).await;
    assert_eq!(ran.code, 1, "{}", ran.stderr);
    assert_eq!(ran.json()["termination_reason"], "timeout");

    let (model, mut heard) = slow_model().await;
    let child = online(&store, "short", "Interrupted?", &model, 16_000)
        .spawn()
        .unwrap();
    // Ctrl-C once the model is at work.
    heard.recv().await.unwrap();
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");

    let session = show(&store, "short").await;
    let ended: Vec<(&str, &str)> = session["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["question"].as_str().unwrap(),
                r["termination"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ended,
        [("Out of time?", "timeout"), ("Interrupted?", "cancelled")]
    );
}

async fn a_store_of_a_later_schema_is_refused_before_any_model_call(store: Store) {
    let first = offline(&store, "s", "Question", "Thought: t\nFinal Answer: a").await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    store
        .execute("UPDATE schema_version SET version = 99")
        .await;
    let model = model_server("Thought: t\nFinal Answer: a").await;
    let ran = finished(&mut online(&store, "s", "Again?", &model, 16_000)).await;
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("cannot be opened"), "{}", ran.stderr);
    assert!(ran.stderr.contains("schema version 99"), "{}", ran.stderr);
    assert!(ran.stdout.is_empty(), "{}", ran.stdout);
    assert!(chats(&model).await.is_empty(), "no model call");
    let listed = sessions(&store, &["list"]).await;
    assert_eq!(listed.code, 2, "{}", listed.stderr);
}

/// Stores that cannot be opened, each said at start with exit code 2, before any model call,
/// and a file that is not SQLite left as it was.
#[tokio::test]
async fn sqlite_stores_that_cannot_be_opened_are_said_at_start() {
    let folder = tempfile::tempdir().unwrap();
    let file = folder.path().join("plain-file");
    std::fs::write(&file, "not a folder").unwrap();
    let not_sqlite = folder.path().join("notes.sqlite3");
    let garbage = "this is a text file, not a database; ".repeat(200);
    std::fs::write(&not_sqlite, &garbage).unwrap();
    let cases = [
        (file.join("memory.sqlite3"), "cannot be made"),
        (folder.path().to_path_buf(), "it is a folder"),
        (not_sqlite.clone(), "not a SQLite database"),
        (
            PathBuf::from("/proc/reactstep/memory.sqlite3"),
            "cannot be made",
        ),
    ];
    for (path, why) in cases {
        let model = model_server("Thought: t\nFinal Answer: a").await;
        let memory = path.display().to_string();
        let ran = finished(&mut online_in(&memory, "s", "Q?", &model, 16_000)).await;
        assert_eq!(ran.code, 2, "{memory}: {}", ran.stderr);
        let said = format!("reactstep run: the session store {memory} cannot be opened: ");
        assert!(ran.stderr.starts_with(&said), "{memory}: {}", ran.stderr);
        assert!(ran.stderr.contains(why), "{memory}: {}", ran.stderr);
        assert!(chats(&model).await.is_empty(), "{memory}: no model call");
        let listed = sessions_in(&memory, &["list"]).await;
        assert_eq!(listed.code, 2, "{memory}: {}", listed.stderr);
    }
    assert_eq!(std::fs::read_to_string(&not_sqlite).unwrap(), garbage);
}

/// Without --memory, sessions are kept in reactstep/memory.sqlite3 under the user's data
/// directory, readable by the user alone.
#[tokio::test]
async fn the_default_store_is_a_file_under_the_data_directory() {
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().unwrap();
    let script = data.path().join("script.txt");
    std::fs::write(&script, "Thought: t\nFinal Answer: kept").unwrap();
    let ws = workspace();
    let mut command = reactstep(&["run", "Where is it kept?", "--session", "default"]);
    command
        .args([
            "--mock-responses",
            script.to_str().unwrap(),
            "--workspace",
            ws.path().to_str().unwrap(),
        ])
        .env("XDG_DATA_HOME", data.path());
    let ran = finished(&mut command).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let file = data.path().join("reactstep/memory.sqlite3");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    let listed = finished(
        reactstep(&["sessions", "list", "--output", "json"]).env("XDG_DATA_HOME", data.path()),
    )
    .await;
    assert_eq!(listed.json()[0]["name"], "default", "{}", listed.stderr);
}

#[tokio::test]
async fn memory_without_a_session_is_refused() {
    let ran = finished(&mut reactstep(&["run", "Q?", "--memory", "/tmp/x.sqlite3"])).await;
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("--session"), "{}", ran.stderr);
}

/// A PostgreSQL server nobody answers, or a database it does not have: said at start with the
/// URL's password taken out, before any model call.
#[tokio::test]
async fn postgresql_stores_that_cannot_be_opened_are_said_without_the_password() {
    let password = "Sup3r-Secret-Pw";
    let port = postgres::free_port();
    let nobody = format!("postgres://me:{password}@127.0.0.1:{port}/memory?sslmode=disable");
    let missing = postgres::server().url("no_such_database");
    let cases = [
        (
            nobody,
            format!("postgres://me:***@127.0.0.1:{port}/memory"),
            "connect",
        ),
        (missing.clone(), missing, "does not exist"),
    ];
    for (url, shown, why) in cases {
        let model = model_server("Thought: t\nFinal Answer: a").await;
        let ran = finished(&mut online_in(&url, "s", "Q?", &model, 16_000)).await;
        assert_eq!(ran.code, 2, "{}", ran.stderr);
        let said = format!("reactstep run: the session store {shown} cannot be opened: ");
        assert!(ran.stderr.starts_with(&said), "{}", ran.stderr);
        assert!(ran.stderr.contains(why), "{}", ran.stderr);
        assert!(!ran.stderr.contains(password), "{}", ran.stderr);
        assert!(chats(&model).await.is_empty(), "no model call");
        let listed = sessions_in(&url, &["list"]).await;
        assert_eq!(listed.code, 2, "{}", listed.stderr);
        assert!(!listed.stderr.contains(password), "{}", listed.stderr);
    }
}

async fn the_plan_and_the_evaluations_are_saved_with_the_run(store: Store) {
    let plan = serde_json::json!({"complexity": "simple", "estimated_iterations": 2, "steps": [
        {"step_number": 1, "description": "Read the constant", "tool_name": "read_file",
         "parameters": {"path": "src/answer.rs"}},
        {"step_number": 2, "description": "Say the answer", "tool_name": null, "depends_on": [1]}
    ]});
    let evaluation = serde_json::json!({"completeness_score": 9, "quality_score": 8,
        "missing_info": [], "suggestions": [], "needs_retry": false});
    let script = [
        format!("Thought: two steps.\nFinal Answer: {plan}"),
        "Thought: read it\nAction: read_file(path=\"src/answer.rs\")".to_string(),
        "Thought: I know it.\nFinal Answer: 42".to_string(),
        format!("Thought: judged.\nFinal Answer: {evaluation}"),
    ]
    .join("\n---\n");
    let flags = ["--plan", "--reflect"];
    let ran = offline_with(&store, "planned", "What is the answer?", &script, &flags).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let session = show(&store, "planned").await;
    let run = &session["runs"][0];
    assert_eq!(run["plan"]["steps"][0]["tool_name"], "read_file", "{run:#}");
    assert_eq!(run["evaluations"].as_array().unwrap().len(), 1, "{run:#}");
    assert_eq!(run["evaluations"][0]["completeness_score"], 9);
    assert_eq!(run["report"]["steps"][0]["action"], "read_file");
    assert_eq!(run["answer"], "42");
}

async fn hidden_characters_are_refused_in_names_and_padded_names_are_found(store: Store) {
    let hidden = [
        "rtl\u{202E}gnp.exe",
        "zw\u{200B}sp",
        "ls\u{2028}sep",
        "ps\u{2029}sep",
        "bom\u{FEFF}x",
        "tag\u{E0041}x",
        "shy\u{AD}x",
        "iso\u{2066}x",
    ];
    for name in hidden {
        let model = model_server("Thought: t\nFinal Answer: a").await;
        let ran = finished(&mut online(&store, name, "Hello?", &model, 16_000)).await;
        assert_eq!(ran.code, 2, "{name:?}: {}", ran.stderr);
        assert!(ran.stderr.contains("format characters"), "{}", ran.stderr);
        // Refused without being printed as typed: the character would act on the terminal.
        assert!(!ran.stderr.contains(name), "{:?}", ran.stderr);
        assert!(chats(&model).await.is_empty(), "{name:?}: no model call");
        assert!(
            memory::session_name(name).is_err(),
            "the page refuses {name:?} too"
        );
    }
    let listed = sessions(&store, &["list", "--output", "json"]).await;
    assert_eq!(listed.json(), serde_json::json!([]), "{}", listed.stderr);

    let ran = offline(&store, "  padded  ", "Q?", "Thought: t\nFinal Answer: a").await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    for typed in ["  padded  ", "padded", "\tpadded\n"] {
        let shown = sessions(&store, &["show", typed, "--output", "json"]).await;
        assert_eq!(shown.code, 0, "{typed:?}: {}", shown.stderr);
        assert_eq!(shown.json()["name"], "padded");
    }
    let opened = memory::open(Some(&store.memory())).await.unwrap();
    assert!(
        opened.show(" padded ").await.unwrap().is_some(),
        "the page's lookup"
    );
    let deleted = sessions(&store, &["delete", "  padded  "]).await;
    assert_eq!(
        (deleted.code, deleted.stdout.as_str()),
        (0, "deleted the session padded\n"),
        "{}",
        deleted.stderr
    );
    let gone = sessions(&store, &["show", "  padded  "]).await;
    assert_eq!(gone.code, 1, "{}", gone.stderr);
    assert!(
        gone.stderr.contains("no session named padded"),
        "{}",
        gone.stderr
    );
}

async fn nul_is_saved_as_a_replacement_character_and_never_found_in_a_name(store: Store) {
    let ran = offline(&store, "nul", "Say it", "Thought: t\nFinal Answer: a\u{0}b").await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    assert!(ran.stderr.contains("saved as run"), "{}", ran.stderr);
    let printed = ran.json()["answer"].as_str().unwrap().to_string();
    let session = show(&store, "nul").await;
    assert_eq!(
        session["runs"][0]["answer"],
        printed.replace('\0', "\u{FFFD}")
    );
    assert!(!session.to_string().contains("\\u0000"), "{session}");

    // Every string of a run saved through the store's own calls (as the page saves).
    let opened = memory::open(Some(&store.memory())).await.unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let run = |question: &str| NewRun {
        question: question.into(),
        started_ms: now,
        ended_ms: now,
        answer: "an\0swer".into(),
        termination: "success".into(),
        report: serde_json::json!({"k\0": ["v\0", {"deep": "x\0y"}], "answer": "an\0swer"}),
        plan: Some(serde_json::json!({"steps": ["p\0"]})),
        evaluations: serde_json::json!([{"note": "e\0"}]),
        summary: Some(Summary {
            text: "s\0".into(),
            turns: 2,
        }),
    };
    let saved = opened.save_run("lib", run("q\0")).await.unwrap();
    assert_eq!(saved.question, "q\u{FFFD}");
    let session = opened.show("lib").await.unwrap().unwrap();
    let shown = serde_json::to_string(&session).unwrap();
    assert!(
        !shown.contains("\\u0000") && !shown.contains('\0'),
        "{shown}"
    );
    let run0 = &session.runs[0];
    assert_eq!(run0.question, "q\u{FFFD}");
    assert_eq!(run0.answer, "an\u{FFFD}swer");
    assert_eq!(run0.report["k\u{FFFD}"][1]["deep"], "x\u{FFFD}y");
    assert_eq!(run0.plan.as_ref().unwrap()["steps"][0], "p\u{FFFD}");
    assert_eq!(run0.evaluations[0]["note"], "e\u{FFFD}");
    assert_eq!(session.info.summary.unwrap().text, "s\u{FFFD}");

    // A name holding NUL is no session: not a database error.
    for name in ["lib\0", "\0", "l\0ib"] {
        assert_eq!(opened.show(name).await, Ok(None), "{name:?}");
        assert_eq!(opened.delete(name).await, Ok(false), "{name:?}");
        assert!(opened.save_run(name, run("q")).await.is_err(), "{name:?}");
    }
    let listed = opened.list().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// A key as the attacks used it.
const KEY: &str = "sk-proj-Zq8vT3xWm9Lk2Rb7Yp4NaB5cD6eF";
const AWS_SECRET: &str = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY";
/// The password of the PostgreSQL store's URL, where the store is one.
const STORE_PASSWORD: &str = "pgPassW0rd-Secret9";

/// Asserts that `text` holds no piece of 10 characters of `secret`, in any case.
fn holds_none_of(text: &str, secret: &str, what: &str) {
    let text = text.to_lowercase();
    let secret = secret.to_lowercase();
    for piece in secret.as_bytes().windows(10) {
        let piece = std::str::from_utf8(piece).unwrap();
        assert!(
            !text.contains(piece),
            "{what}: {piece:?} of a secret in {text}"
        );
    }
}

async fn a_session_name_holding_a_secret_is_refused_before_any_model_call(store: Store) {
    let memory = store.memory_with_password(STORE_PASSWORD);
    let postgres = matches!(store, Store::Postgres { .. });
    let mut names = vec![
        format!("proj {KEY}"),
        format!("proj {}", KEY.to_uppercase()),
        format!("a piece {}", &KEY[9..21]),
        format!("split {}", KEY.replace('-', " ")),
        format!("aws {AWS_SECRET}"),
    ];
    if postgres {
        names.push(format!("db {STORE_PASSWORD}"));
    }
    for name in &names {
        let model = model_server("Thought: t\nFinal Answer: a").await;
        let mut command = online_in(&memory, name, "Hello?", &model, 16_000);
        command
            .env("OPENAI_API_KEY", KEY)
            .env("AWS_SECRET_ACCESS_KEY", AWS_SECRET);
        let ran = finished(&mut command).await;
        assert_eq!(ran.code, 2, "{name}: {}", ran.stderr);
        assert!(ran.stderr.contains("holds a secret"), "{}", ran.stderr);
        let said = format!("{}{}", ran.stdout, ran.stderr);
        for secret in [KEY, AWS_SECRET, STORE_PASSWORD] {
            holds_none_of(&said, secret, "what the refusal said");
        }
        assert!(chats(&model).await.is_empty(), "{name}: no model call");
    }
    let listed = sessions_in(&memory, &["list", "--output", "json"]).await;
    assert_eq!(listed.json(), serde_json::json!([]), "nothing was saved");

    // The page's path: the same call refuses it, the store's own password known without the
    // caller naming it.
    let opened = memory::open(Some(&memory)).await.unwrap();
    let store_arc: std::sync::Arc<dyn SessionStore> = opened.into();
    let secrets = memory::redact::secrets([KEY.to_string()]);
    let mut refused = vec![format!("ui {KEY}")];
    if postgres {
        refused.push(format!("ui {STORE_PASSWORD}"));
    }
    for name in refused {
        let resumed = Conversation::resume(store_arc.clone(), &name, secrets.clone()).await;
        let Err(why) = resumed else {
            panic!("{name:?} was taken")
        };
        assert!(why.contains("holds a secret"), "{why}");
        holds_none_of(&why, KEY, "the page's refusal");
        holds_none_of(&why, STORE_PASSWORD, "the page's refusal");
    }
    let fine = Conversation::resume(store_arc, "  work  ", secrets).await;
    assert_eq!(fine.map(|c| c.name().to_string()), Ok("work".to_string()));
}

async fn aws_and_database_secrets_and_the_stores_own_password_are_never_saved(store: Store) {
    let pg_password = "Pg-Env-Passw0rd-77";
    let url_password = "Db-Url-S3cret-Word-42";
    let memory = store.memory_with_password(STORE_PASSWORD);
    let question =
        format!("aws {AWS_SECRET} pg {pg_password} db {url_password} store {STORE_PASSWORD}?");
    let folder = tempfile::tempdir().unwrap();
    let script = folder.path().join("script.txt");
    std::fs::write(
        &script,
        format!("Thought: t\nFinal Answer: they are {AWS_SECRET} and {STORE_PASSWORD}"),
    )
    .unwrap();
    let ws = workspace();
    let extra = [
        "--mock-responses",
        script.to_str().unwrap(),
        "--workspace",
        ws.path().to_str().unwrap(),
    ];
    let mut command = run_command_in(&memory, "env", &question, &extra);
    command
        .env("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
        .env("PGPASSWORD", pg_password)
        .env(
            "DATABASE_URL",
            format!("postgres://app:{url_password}@db.internal:5432/app"),
        );
    let ran = finished(&mut command).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let saved = String::from_utf8_lossy(&store.bytes().await).to_string();
    assert!(
        saved.contains("[REDACTED]"),
        "the secrets' places are marked"
    );
    let mut secrets = vec![AWS_SECRET, pg_password, url_password];
    if matches!(store, Store::Postgres { .. }) {
        secrets.push(STORE_PASSWORD);
    }
    for secret in secrets {
        holds_none_of(&saved, secret, "the store");
    }
}

async fn a_run_whose_json_is_damaged_is_shown_and_continued_without_it(store: Store) {
    let first = offline(
        &store,
        "dmg",
        Q1,
        &format!("Thought: t\nFinal Answer: {A1}"),
    )
    .await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    let second = offline(&store, "dmg", "Second?", "Thought: t\nFinal Answer: two").await;
    assert_eq!(second.code, 0, "{}", second.stderr);
    store
        .execute(&format!(
            "UPDATE runs SET report = 'not json {{', plan = '[', evaluations = 'nope' \
             WHERE question = '{Q1}'"
        ))
        .await;
    let sqlite = matches!(store, Store::Sqlite { .. });
    if sqlite {
        // What another program could write in SQLite's loose columns: bytes that are not
        // UTF-8, and times that are not numbers (the run and the session are still read).
        store
            .execute("UPDATE runs SET answer = X'74776FFF' WHERE question = 'Second?'")
            .await;
        let third = offline(&store, "dmg", "Third?", "Thought: t\nFinal Answer: 3").await;
        assert_eq!(third.code, 0, "{}", third.stderr);
        store
            .execute("UPDATE runs SET started_ms = 'soon' WHERE question = 'Third?'")
            .await;
        store
            .execute("UPDATE sessions SET last_active_ms = 'x' WHERE name = 'dmg'")
            .await;
        let listed = sessions(&store, &["list", "--output", "json"]).await;
        assert_eq!(listed.code, 0, "{}", listed.stderr);
        assert!(listed.stdout.contains("\"dmg\""), "{}", listed.stdout);
    }

    let shown = sessions(&store, &["show", "dmg", "--output", "json"]).await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert!(
        shown.stderr.contains("warning: the report of run") && shown.stderr.contains("not JSON"),
        "{}",
        shown.stderr
    );
    let session = shown.json();
    let runs = session["runs"].as_array().unwrap();
    assert_eq!(runs.len(), if sqlite { 3 } else { 2 }, "{session:#}");
    assert_eq!(
        (runs[0]["question"].as_str(), runs[0]["answer"].as_str()),
        (Some(Q1), Some(A1))
    );
    assert!(
        runs[0]["report"].is_null() && runs[0]["plan"].is_null(),
        "{session:#}"
    );
    assert_eq!(runs[0]["evaluations"], serde_json::json!([]));
    assert_eq!(runs[1]["report"]["answer"], "two");
    let warnings = session["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), if sqlite { 4 } else { 3 }, "{session:#}");
    if sqlite {
        assert_eq!(runs[1]["answer"], "two\u{FFFD}");
        assert_eq!(
            (runs[2]["question"].as_str(), runs[2]["answer"].as_str()),
            (Some("Third?"), Some("3"))
        );
        assert_eq!(runs[2]["started"], "");
        assert!(
            shown.stderr.contains("the start time of run") && shown.stderr.contains("not a number"),
            "{}",
            shown.stderr
        );
    }
    let text = sessions(&store, &["show", "dmg"]).await;
    assert_eq!(text.code, 0, "{}", text.stderr);
    assert!(text.stdout.contains(A1), "{}", text.stdout);

    // The session goes on: the damaged run's question and answer are still sent.
    let model = model_server("Thought: t\nFinal Answer: 8443 still").await;
    let next = finished(&mut online(&store, "dmg", "Which port?", &model, 16_000)).await;
    assert_eq!(next.code, 0, "{}\n{}", next.stderr, next.stdout);
    assert!(next.stderr.contains("not JSON"), "{}", next.stderr);
    let sent = chats(&model).await.remove(0).to_string();
    assert!(sent.contains(Q1) && sent.contains(A1), "{sent}");
}

/// Whether this process runs as root, whom a file's mode does not stop.
fn is_root() -> bool {
    let me = std::process::Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&me.stdout).trim() == "0"
}

/// A file or folder made read-only for a while: `chattr +i` as root, its mode otherwise;
/// writable again when dropped.
struct ReadOnly {
    path: PathBuf,
    mode: Option<u32>,
}

impl ReadOnly {
    /// `None` where it cannot be done (root without the right to make a file immutable).
    fn make(path: &std::path::Path) -> Option<Self> {
        use std::os::unix::fs::PermissionsExt;
        if is_root() {
            let made = std::process::Command::new("chattr")
                .arg("+i")
                .arg(path)
                .stderr(Stdio::null())
                .status();
            return made.is_ok_and(|s| s.success()).then(|| Self {
                path: path.to_path_buf(),
                mode: None,
            });
        }
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o555)).unwrap();
        Some(Self {
            path: path.to_path_buf(),
            mode: Some(mode),
        })
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        match self.mode {
            None => {
                let _ = std::process::Command::new("chattr")
                    .arg("-i")
                    .arg(&self.path)
                    .status();
            }
            Some(mode) => {
                let _ = std::fs::set_permissions(&self.path, std::fs::Permissions::from_mode(mode));
            }
        }
    }
}

/// The store `memory` names cannot be written: a run is refused at start, before any model
/// call, saying so; its sessions are still listed and shown; delete is refused.
async fn refused_but_shown(memory: &str, why: &str) {
    let model = model_server("Thought: t\nFinal Answer: a").await;
    let ran = finished(&mut online_in(memory, "kept", "Again?", &model, 16_000)).await;
    assert_eq!(ran.code, 2, "{memory}: {}", ran.stderr);
    assert!(ran.stderr.contains("cannot be opened"), "{}", ran.stderr);
    assert!(ran.stderr.contains(why), "{}", ran.stderr);
    assert!(ran.stdout.is_empty(), "{}", ran.stdout);
    assert!(chats(&model).await.is_empty(), "{memory}: no model call");
    let listed = sessions_in(memory, &["list", "--output", "json"]).await;
    assert_eq!(listed.code, 0, "{memory}: {}", listed.stderr);
    assert_eq!(listed.json()[0]["name"], "kept");
    let shown = sessions_in(memory, &["show", "kept", "--output", "json"]).await;
    assert_eq!(shown.code, 0, "{memory}: {}", shown.stderr);
    assert_eq!(shown.json()["runs"][0]["answer"], A1);
    let deleted = sessions_in(memory, &["delete", "kept"]).await;
    assert_eq!(deleted.code, 2, "{memory}: {}", deleted.stderr);
}

async fn a_store_that_cannot_be_written_is_refused_at_start_and_still_shown(store: Store) {
    let first = offline(
        &store,
        "kept",
        Q1,
        &format!("Thought: t\nFinal Answer: {A1}"),
    )
    .await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    match &store {
        Store::Sqlite { file, .. } => {
            let Some(locked) = ReadOnly::make(file) else {
                eprintln!("skipped: this root cannot make a file immutable");
                return;
            };
            refused_but_shown(&store.memory(), "cannot be written").await;
            drop(locked);
            // Writable again, it is written, though SQLite left its WAL and index beside it,
            // read-only as the file was; the last connection to close takes them away.
            let written = sessions(&store, &["delete", "nothing"]).await;
            assert_eq!(written.code, 1, "{}", written.stderr);
            // Its folder read-only, with no WAL beside it: SQLite cannot make one, nor read the
            // file the usual way.
            let wal = PathBuf::from(format!("{}-wal", file.display()));
            assert!(!wal.exists(), "{}", wal.display());
            let folder = file.parent().unwrap();
            let locked = ReadOnly::make(folder).unwrap();
            refused_but_shown(&store.memory(), "cannot be written").await;
            drop(locked);
        }
        Store::Postgres { url } => {
            // A role that may read the tables, and make tables, but not write these.
            let database = url.rsplit('/').next().unwrap();
            let reader = format!("reader_{database}");
            store
                .execute(&format!(
                    "CREATE ROLE {reader} LOGIN; \
                     GRANT USAGE, CREATE ON SCHEMA public TO {reader}; \
                     GRANT SELECT ON ALL TABLES IN SCHEMA public TO {reader};"
                ))
                .await;
            let as_reader = url.replacen("reactstep@", &format!("{reader}@"), 1);
            refused_but_shown(&as_reader, "cannot be written").await;
            // A server whose transactions are read-only.
            let read_only = format!("{url}?options=-c%20default_transaction_read_only%3Don");
            refused_but_shown(&read_only, "cannot be written").await;
        }
    }
    // Writable again, the session is whole and goes on.
    let again = offline(&store, "kept", "Again?", "Thought: t\nFinal Answer: yes").await;
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(
        show(&store, "kept").await["runs"].as_array().unwrap().len(),
        2
    );
}

/// A SQLite store is never reached through a symbolic link (dangling or not, nothing is made
/// where it points), and its file is its owner's alone, whoever made it.
#[tokio::test]
async fn a_store_through_a_link_is_refused_and_its_file_is_its_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    let folder = tempfile::tempdir().unwrap();
    let at = |name: &str| folder.path().join(name);
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let script = "Thought: t\nFinal Answer: kept";
    let target = at("target.sqlite3");
    let link = at("link.sqlite3");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let link_store = Store::Sqlite {
        _folder: tempfile::tempdir().unwrap(),
        file: link.clone(),
    };
    let refused = || async {
        let ran = offline(&link_store, "s", "Q?", script).await;
        assert_eq!(ran.code, 2, "{}", ran.stderr);
        assert!(ran.stderr.contains("symbolic link"), "{}", ran.stderr);
        for command in [&["list"][..], &["show", "s"][..], &["delete", "s"][..]] {
            let looked = sessions(&link_store, command).await;
            assert_eq!(looked.code, 2, "{command:?}: {}", looked.stderr);
            assert!(looked.stderr.contains("symbolic link"), "{}", looked.stderr);
        }
    };
    refused().await;
    assert!(!target.exists(), "the dangling link made its target");
    // A link to a real store is refused too.
    let real = Store::Sqlite {
        _folder: tempfile::tempdir().unwrap(),
        file: target.clone(),
    };
    assert_eq!(offline(&real, "s", "Q?", script).await.code, 0);
    refused().await;
    assert_eq!(mode(&target), 0o600);

    // A file another program made readable by all, with its WAL open beside it.
    let shared = at("shared.sqlite3");
    std::fs::write(&shared, b"").unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o666)).unwrap();
    let other = rusqlite::Connection::open(&shared).unwrap();
    other
        .execute_batch(
            "PRAGMA journal_mode=WAL; CREATE TABLE notes (n TEXT); INSERT INTO notes VALUES ('x');",
        )
        .unwrap();
    let wal = at("shared.sqlite3-wal");
    let shm = at("shared.sqlite3-shm");
    std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&shm, std::fs::Permissions::from_mode(0o644)).unwrap();
    let shared_store = Store::Sqlite {
        _folder: tempfile::tempdir().unwrap(),
        file: shared.clone(),
    };
    let ran = offline(&shared_store, "s", "Q?", script).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    for path in [&shared, &wal, &shm] {
        assert_eq!(mode(path), 0o600, "{}", path.display());
    }
    drop(other);
}

/// A run into `memory`, from `folder`, and the session shown back from it: the run's answer.
async fn run_and_show(folder: &std::path::Path, memory: &str, session: &str) -> String {
    let ws = workspace();
    let script = folder.join("script.txt");
    std::fs::write(&script, "Thought: t\nFinal Answer: kept").unwrap();
    let mut command = reactstep(&["run", "Q?", "--session", session, "--memory", memory]);
    command
        .args(["--mock-responses", script.to_str().unwrap()])
        .args(["--workspace", ws.path().to_str().unwrap()])
        .current_dir(folder);
    let ran = finished(&mut command).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let mut shown = reactstep(&[
        "sessions", "--memory", memory, "show", session, "--output", "json",
    ]);
    let shown = finished(shown.current_dir(folder)).await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    shown.stdout
}

/// A `--memory` name is a file's name, as SQLite reads it too: not a URI that could open
/// something else, nor `:memory:`, SQLite's name for no file at all (each run was said saved).
#[tokio::test]
async fn a_memory_name_is_a_files_name_never_a_uri_nor_no_file() {
    use std::os::unix::fs::PermissionsExt;
    let folder = tempfile::tempdir().unwrap();
    let at = |name: &str| folder.path().join(name);
    let uri = "file:uri.sqlite3?mode=memory";
    assert!(run_and_show(folder.path(), uri, "s").await.contains("kept"));
    let mode = std::fs::metadata(at(uri)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the file is named as given");
    // A URI naming another file by its full path: SQLite wrote the run there, readable by all,
    // while the checks ran on the empty file of the name given.
    let elsewhere = at("elsewhere.sqlite3");
    let uri = format!("file:{}", elsewhere.display());
    assert!(run_and_show(folder.path(), &uri, "s")
        .await
        .contains("kept"));
    assert!(
        !elsewhere.exists(),
        "the run went to the file the URI names"
    );
    assert!(run_and_show(folder.path(), ":memory:", "m")
        .await
        .contains("kept"));
    assert!(at(":memory:").metadata().unwrap().len() > 0);
}
