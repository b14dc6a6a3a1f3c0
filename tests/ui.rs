//! `reactstep ui` as a person meets it: the real binary serves the page, offline from scripted
//! model outputs (`--mock-responses`), with the built-in tools running for real in a temporary
//! workspace, and a real headless Chromium (the system's package, driven over WebDriver by
//! chromedriver) opens it, types a task and reads what the page shows. Each wait polls the
//! page's DOM for its condition, within a bound. A screenshot of the run is kept at
//! `target/ui-screenshot.png` for a person to look at.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use support::workspace::workspace;

/// How long the page may take to show what a step waits for.
const PATIENCE: Duration = Duration::from_secs(45);

/// The real `reactstep ui` on a free loopback port, killed when dropped.
struct Ui {
    /// The address printed, with the page's token: what a person opens.
    url: String,
    /// The same without its query: where the page's paths are.
    base: String,
    token: String,
    _child: tokio::process::Child,
    _scripts: tempfile::TempDir,
}

/// Starts `reactstep ui --port 0` on `ws`, scripted by `script` when given (else on a hosted
/// model, without its key), and reads the address it prints.
async fn start_ui(ws: &Path, script: Option<&str>, extra: &[&str]) -> Ui {
    // Beside the workspace, not in it: the tools must not find it.
    let scripts = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_reactstep"));
    command
        .args(["ui", "--port", "0", "--workspace"])
        .arg(ws)
        .args(extra)
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    // The sessions go beside the script, never into the user's own store.
    command
        .arg("--memory")
        .arg(scripts.path().join("memory.sqlite3"));
    if let Some(script) = script {
        let file = scripts.path().join("script.txt");
        std::fs::write(&file, script).unwrap();
        command.arg("--mock-responses").arg(&file);
    }
    let mut child = command.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("reactstep ui prints its address in time")
        .unwrap()
        .expect("reactstep ui prints its address");
    let url = line
        .strip_prefix("reactstep ui: ")
        .unwrap_or_else(|| panic!("the first line names the address: {line}"))
        .to_string();
    let (base, token) = url
        .split_once("?token=")
        .unwrap_or_else(|| panic!("the address carries the page's token: {url}"));
    assert!(
        base.starts_with("http://127.0.0.1:") && base.ends_with('/'),
        "{url}"
    );
    assert!(
        token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit()),
        "{url}"
    );
    Ui {
        base: base.to_string(),
        token: token.to_string(),
        url,
        _child: child,
        _scripts: scripts,
    }
}

/// A headless Chromium driven by chromedriver; both are killed when dropped, whatever the test
/// did (they run in a process group of their own).
struct Browser {
    client: Client,
    driver: tokio::process::Child,
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(group) = self.driver.id() {
            // SAFETY: a plain system call on the group this test started.
            unsafe { libc::kill(-(group as i32), libc::SIGKILL) };
        }
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

async fn browser() -> Browser {
    support::system_packages::require("chromium", "chromium");
    support::system_packages::require("chromedriver", "chromium-driver");
    let port = free_port();
    let driver = tokio::process::Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // As root Chromium needs --no-sandbox; the window is the screenshot's size.
    let capabilities = json!({
        "goog:chromeOptions": {
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,900", "--force-device-scale-factor=1"],
        },
    });
    let capabilities = capabilities.as_object().unwrap().clone();
    let webdriver = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + PATIENCE;
    let client = loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(capabilities.clone())
            .connect(&webdriver)
            .await
        {
            Ok(client) => break client,
            Err(e) if Instant::now() > deadline => {
                panic!("chromedriver did not start Chromium: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    Browser { client, driver }
}

impl Browser {
    /// Opens the page and waits until it has read what the command runs with.
    async fn open(&self, ui: &Ui) {
        self.client.goto(&ui.url).await.unwrap();
        self.until(
            "the page says what it runs",
            "return document.querySelector('#about').textContent !== 'connecting…'",
        )
        .await;
    }

    /// The value of `script` once it is truthy; polled within [`PATIENCE`].
    async fn until(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let value = self.client.execute(script, vec![]).await.unwrap();
            let truthy = match &value {
                Value::Null | Value::Bool(false) => false,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return value;
            }
            if Instant::now() > deadline {
                panic!(
                    "{what}: not seen within {PATIENCE:?}; the page shows:\n{}",
                    self.text("body").await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What `script` returns in the page, given `selector` as its one argument.
    async fn on(&self, script: &str, selector: &str) -> Value {
        self.client
            .execute(script, vec![json!(selector)])
            .await
            .unwrap()
    }

    /// The text of the first element `selector` finds ("" when none).
    async fn text(&self, selector: &str) -> String {
        let script = "const e = document.querySelector(arguments[0]); return e ? e.innerText : '';";
        let value = self.on(script, selector).await;
        value.as_str().unwrap_or_default().to_string()
    }

    /// The value of the input `selector` finds.
    async fn text_value(&self, selector: &str) -> String {
        let script = "return document.querySelector(arguments[0]).value;";
        let value = self.on(script, selector).await;
        value.as_str().unwrap_or_default().to_string()
    }

    async fn count(&self, selector: &str) -> u64 {
        let script = "return document.querySelectorAll(arguments[0]).length;";
        self.on(script, selector).await.as_u64().unwrap()
    }

    async fn click(&self, selector: &str) {
        self.client
            .find(Locator::Css(selector))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }

    async fn type_task(&self, task: &str) {
        let input = self.client.find(Locator::Css("#task")).await.unwrap();
        input.clear().await.unwrap();
        input.send_keys(task).await.unwrap();
        self.click("#run").await;
    }

    async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.unwrap();
        // CARGO_TARGET_TMPDIR is target/tmp: the picture goes beside it, in target/.
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let path = tmp.parent().unwrap_or(tmp).join(name);
        std::fs::write(&path, png).unwrap();
        path
    }
}

/// Text of `lines` lines, some 2,000 tokens: big enough that the step's budget must cut it
/// and later drop it.
fn notes(words: &str, lines: usize) -> String {
    let words: Vec<&str> = words.split(' ').collect();
    (0..lines)
        .map(|i| {
            let line: Vec<&str> = (0..12)
                .map(|j| words[(i * 7 + j * 3) % words.len()])
                .collect();
            format!("{i}: {}", line.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A loop of five calls and an answer: the notes and changes are big enough that the step's
/// budget must cut them, and later drop them.
const STEPS: &str = r#"Thought: see what is there
Action: list_directory(path=".")
---
Thought: read the notes first
Action: read_file(path="NOTES.md")
---
Thought: and the changes
Action: read_file(path="CHANGES.md")
---
Thought: now read the constant
Action: read_file(path="src/answer.rs")
---
Thought: compute it
Action: calculator(expression="6 * 7")
---
Thought: I know it
Final Answer: The answer is 42.
"#;

/// A scripted output that is a plan (`--plan` takes the first) or an evaluation (`--reflect`).
fn structured(value: Value) -> String {
    format!("Thought: judged.\nFinal Answer: {value}\n---\n")
}

fn plan_step(n: u32, description: &str, tool: Option<&str>) -> Value {
    json!({"step_number": n, "description": description, "tool_name": tool,
           "depends_on": if n > 1 { json!([n - 1]) } else { json!([]) }})
}

/// `STEPS` with a plan of them before and an evaluation of the answer after.
fn planned_steps() -> String {
    let plan = json!({"complexity": "medium", "estimated_iterations": 6, "steps": [
        plan_step(1, "See what the workspace holds", Some("list_directory")),
        plan_step(2, "Read the notes", Some("read_file")),
        plan_step(3, "Read the changes", Some("read_file")),
        plan_step(4, "Read the constant", Some("read_file")),
        plan_step(5, "Compute its value", Some("calculator")),
        plan_step(6, "Say the answer", None),
    ]});
    let evaluation = json!({"completeness_score": 9, "quality_score": 8, "missing_info": [],
        "suggestions": ["Say where the constant is defined"], "needs_retry": false});
    format!("{}{STEPS}---\n{}", structured(plan), structured(evaluation))
}

#[tokio::test]
async fn a_task_streams_its_plan_thoughts_steps_context_evaluation_and_answer_onto_the_page() {
    let ws = workspace();
    let words = "the loop reads each file and keeps what fits in the budget of the model";
    std::fs::write(ws.path().join("NOTES.md"), notes(words, 200)).unwrap();
    let words = "each change to the driver is tested in a real browser with a scripted model";
    std::fs::write(ws.path().join("CHANGES.md"), notes(words, 120)).unwrap();
    // A small window, so each step's bar shows its budget filling, cut and dropped.
    let flags = [
        "--plan",
        "--reflect",
        "--token-limit",
        "3500",
        "--reserved-output-tokens",
        "500",
    ];
    let ui = start_ui(ws.path(), Some(&planned_steps()), &flags).await;
    let browser = browser().await;
    browser.open(&ui).await;
    let about = browser.text("#about").await;
    assert!(
        about.contains("offline") && about.contains("plan") && about.contains("reflect"),
        "{about}"
    );
    browser.type_task("What is the answer?").await;

    browser
        .until("the answer", "return document.querySelector('.answer')")
        .await;
    let answer = browser.text(".answer").await;
    assert!(answer.contains("The answer is 42."), "{answer}");
    assert_eq!(browser.count(".answer.failed").await, 0);
    assert!(browser.text(".summary").await.contains("6 steps"));
    assert_eq!(browser.text(".run .task").await, "What is the answer?");

    // The thought streamed in pieces before it was whole.
    let first = ".card[data-iteration='1']";
    let pieces = browser
        .until(
            "the streamed thought",
            &format!("return Number(document.querySelector(\"{first}\").dataset.pieces)"),
        )
        .await;
    assert!(pieces.as_u64().unwrap() > 1, "{pieces}");
    assert!(browser
        .text(&format!("{first} .thought"))
        .await
        .contains("see what is there"));

    // Each step is a card: thought, action and arguments, observation, tokens and time.
    assert_eq!(browser.count(".card").await, 6);
    let reading = ".card[data-iteration='4']";
    assert_eq!(browser.text(&format!("{reading} .tool")).await, "read_file");
    assert!(browser
        .text(&format!("{reading} .args"))
        .await
        .contains("src/answer.rs"));
    let observed = browser.text(&format!("{reading} .observation")).await;
    assert!(
        observed.contains("pub const ANSWER: u32 = 6 * 7;"),
        "{observed}"
    );
    let meta = browser.text(&format!("{reading} .meta")).await;
    assert!(meta.contains("tokens") && meta.ends_with(" s"), "{meta}");
    assert!(browser
        .text(".card[data-iteration='6'] .meta")
        .await
        .contains("tokens"));

    // A long observation is shortened, with a button that opens it whole.
    let notes_card = ".card[data-iteration='2']";
    let short = browser
        .text(&format!("{notes_card} .observation pre"))
        .await;
    assert!(!short.contains("199: "), "{short}");
    browser
        .click(&format!("{notes_card} .observation button.more"))
        .await;
    let whole = browser
        .text(&format!("{notes_card} .observation pre"))
        .await;
    assert!(
        whole.contains("199: ") && whole.len() > short.len() * 10,
        "{whole}"
    );

    // Each step's context budget is a bar: included, cut (the notes, at step 3), dropped.
    assert_eq!(browser.count(".card .ctx-bar").await, 6);
    assert_eq!(browser.count(".card .ctx-bar .seg.instructions").await, 6);
    assert!(
        browser
            .count(".card[data-iteration='3'] .seg.truncated")
            .await
            == 1
    );
    let dropped = browser
        .text(".card[data-iteration='4'] .dropped-chip")
        .await;
    assert!(dropped.contains("dropped"), "{dropped}");
    let legend = browser.text(".card[data-iteration='3'] .ctx-legend").await;
    assert!(
        legend.contains("1 cut") && legend.contains("of 3,000 tokens"),
        "{legend}"
    );

    // The plan is a checklist, all ticked once the answer came; the evaluation's scores.
    assert_eq!(browser.count("#plan .checklist li").await, 6);
    assert_eq!(browser.count("#plan .checklist li.done").await, 6);
    assert!(browser.text("#plan .badge").await.contains("medium"));
    let evaluation = browser.text("#evaluation").await;
    assert!(
        evaluation.contains("Completeness\n9/10") && evaluation.contains("Quality\n8/10"),
        "{evaluation}"
    );
    assert!(evaluation.contains("accepted") && evaluation.contains("Say where the constant"));
    let judged = browser.text(".card[data-iteration='6'] .evaluated").await;
    assert!(judged.contains("completeness 9/10"), "{judged}");

    // The run is saved in the page's own new session, which the list shows with its run.
    browser
        .until(
            "the run's session",
            "return document.querySelector('ol.session-runs li')",
        )
        .await;
    assert!(browser.text("#sessions li.current").await.contains("1 run"));

    // The picture shows the run's end: the notes closed again, the log at its foot.
    browser
        .click(&format!("{notes_card} .observation button.more"))
        .await;
    let log = "const log = document.querySelector('#log'); log.scrollTop = log.scrollHeight; return true;";
    browser.client.execute(log, vec![]).await.unwrap();
    let shot = browser.screenshot("ui-screenshot.png").await;
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 10_000,
        "{}",
        shot.display()
    );
}

/// The service's warnings reach the page on their step's card: the loop guard's, when the
/// model calls the same tool with the same arguments a fourth time.
#[tokio::test]
async fn the_loop_guards_warning_is_shown_on_its_steps_card() {
    let ws = workspace();
    let call = "Thought: again\nAction: list_directory(path=\".\")";
    let script = [call, call, call, call, "Final Answer: done"].join("\n---\n");
    let ui = start_ui(ws.path(), Some(&script), &["--approve", "none"]).await;
    let browser = browser().await;
    browser.open(&ui).await;
    browser.type_task("List it.").await;
    browser
        .until("the answer", "return document.querySelector('.answer')")
        .await;
    let warning = browser
        .text(".card[data-iteration='4'] .note.warning")
        .await;
    assert!(
        warning.starts_with(
            "loop guard: the model called list_directory with the same arguments 3 times"
        ),
        "{warning}"
    );
    // Told again at the step after it (the history then holds four), and never before.
    assert_eq!(browser.count(".note.warning").await, 2);
    assert_eq!(
        browser
            .count(".card[data-iteration='5'] .note.warning")
            .await,
        1
    );
}

#[tokio::test]
async fn an_empty_task_is_said_to_be_empty_and_runs_nothing() {
    let ws = workspace();
    let ui = start_ui(ws.path(), Some(STEPS), &[]).await;
    let browser = browser().await;
    browser.open(&ui).await;
    for empty in ["", "   "] {
        browser.type_task(empty).await;
        let said = browser
            .until(
                "the message",
                "const m = document.querySelector('#message'); return !m.hidden && m.innerText",
            )
            .await;
        assert_eq!(said, "Type a task first: the task is empty.");
        assert_eq!(browser.count(".run").await, 0);
    }
}

#[tokio::test]
async fn a_hosted_model_without_its_key_says_so_on_the_page() {
    let ws = workspace();
    let ui = start_ui(ws.path(), None, &[]).await;
    let browser = browser().await;
    browser.open(&ui).await;
    let banner = browser.text("#banner").await;
    assert!(banner.contains("OPENAI_API_KEY is not set"), "{banner}");

    browser.type_task("What is the answer?").await;
    browser
        .until(
            "the failed run",
            "return document.querySelector('.answer.failed')",
        )
        .await;
    let failed = browser.text(".answer").await;
    // The service's own error, and what to do about it.
    assert!(failed.contains("user_api_keys.llmKey"), "{failed}");
    assert!(
        failed.contains("The model's key is missing: OPENAI_API_KEY"),
        "{failed}"
    );
    let message = browser.text("#message").await;
    assert!(message.contains("llmKey"), "{message}");
}

/// The page of a run of `script` in which every call waits for approval, its task typed, once
/// the first card offers `button` (`approve`, `deny`, `edit`): the opening the approval tests
/// share. The page's server lives as long as the `Ui`.
async fn at_first_approval(ws: &Path, script: &str, button: &str) -> (Ui, Browser) {
    let ui = start_ui(ws, Some(script), &["--approve", "all"]).await;
    let browser = browser().await;
    browser.open(&ui).await;
    browser.type_task("What is the answer?").await;
    browser
        .until(
            "the first approval",
            &format!(
                "return document.querySelector(\".card[data-iteration='1'] .approval-request button.{button}\")"
            ),
        )
        .await;
    (ui, browser)
}

/// Approves the call on card `iteration`, the run's last, and checks the answer it ends with.
async fn approve_last(browser: &Browser, iteration: u32, answer: &str) {
    let card = format!(".card[data-iteration='{iteration}']");
    browser
        .until(
            "the last approval",
            &format!("return document.querySelector(\"{card} button.approve\")"),
        )
        .await;
    browser.click(&format!("{card} button.approve")).await;
    browser
        .until("the answer", "return document.querySelector('.answer')")
        .await;
    let ended = browser.text(".answer").await;
    assert!(ended.contains(answer), "{ended}");
}

#[tokio::test]
async fn a_call_waiting_for_approval_is_approved_or_denied_on_the_page() {
    let ws = workspace();
    let script = r#"Thought: read the constant
Action: read_file(path="src/answer.rs")
---
Thought: and the list
Action: list_directory(path="src")
---
Thought: done
Action: submit_answer(answer="42")
"#;
    let (_ui, browser) = at_first_approval(ws.path(), script, "approve").await;
    let first = ".card[data-iteration='1']";
    assert!(browser
        .text(&format!("{first} .approval-request"))
        .await
        .contains("read_file"));
    browser.click(&format!("{first} button.approve")).await;
    browser
        .until(
            "the approved call's observation",
            &format!("return document.querySelector(\"{first} .observation\")"),
        )
        .await;
    assert!(browser
        .text(&format!("{first} .decision.approved"))
        .await
        .contains("approved"));
    assert!(browser
        .text(&format!("{first} .observation"))
        .await
        .contains("pub const ANSWER"));

    let second = ".card[data-iteration='2']";
    browser
        .until(
            "the second approval",
            &format!("return document.querySelector(\"{second} .approval-request button.deny\")"),
        )
        .await;
    let reason = browser
        .client
        .find(Locator::Css(&format!("{second} .approval-request input")))
        .await
        .unwrap();
    reason.send_keys("not that folder").await.unwrap();
    browser.click(&format!("{second} button.deny")).await;
    browser
        .until(
            "the denied call's observation",
            &format!("return document.querySelector(\"{second} .observation\")"),
        )
        .await;
    let denied = browser.text(&format!("{second} .observation")).await;
    assert!(
        denied.contains("The user denied this call: not that folder"),
        "{denied}"
    );

    approve_last(&browser, 3, "42").await;

    // Stop cancels a run, even one waiting for a decision.
    browser.type_task("What is the answer, again?").await;
    browser
        .until(
            "the next run's approval",
            "return document.querySelector('.run:last-child button.approve')",
        )
        .await;
    browser.click("#stop").await;
    browser
        .until(
            "the stopped run's end",
            "return document.querySelector('.run:last-child .answer.failed')",
        )
        .await;
    let ended = browser.text(".run:last-child .answer").await;
    assert!(ended.contains("cancelled"), "{ended}");
    let closed = browser.text(".run:last-child .approval-request").await;
    assert_eq!(closed, "not decided: the run ended");
}

#[tokio::test]
async fn a_call_is_run_with_the_arguments_edited_on_the_page_and_no_edit_that_is_not_an_object() {
    let ws = workspace();
    let script = r#"Thought: read the constant
Action: read_file(path="src/nowhere.rs")
---
Thought: done
Action: submit_answer(answer="42")
"#;
    let (_ui, browser) = at_first_approval(ws.path(), script, "edit").await;
    let first = ".card[data-iteration='1']";
    browser.click(&format!("{first} button.edit")).await;
    let proposed = browser.text_value(&format!("{first} textarea")).await;
    assert!(proposed.contains("src/nowhere.rs"), "{proposed}");

    // Text that is not a JSON object is said on the page, and nothing is decided.
    let edit = |text: &'static str| {
        let selector = format!("{first} textarea");
        let browser = &browser;
        async move {
            let area = browser.client.find(Locator::Css(&selector)).await.unwrap();
            area.clear().await.unwrap();
            area.send_keys(text).await.unwrap();
            browser.click(&format!("{first} button.run-edited")).await;
        }
    };
    edit("path: src/answer.rs").await;
    assert!(browser
        .text(&format!("{first} .edit-problem"))
        .await
        .contains("not JSON"));
    edit("[\"src/answer.rs\"]").await;
    let problem = browser.text(&format!("{first} .edit-problem")).await;
    assert!(problem.contains("must be a JSON object"), "{problem}");
    assert_eq!(browser.count(&format!("{first} .decision")).await, 0);

    // Nor does the endpoint take one posted by hand (not an object, or nested past 32 levels,
    // which the run's report could not be read back with): 400, and the call still waits.
    let post = |arguments: &str| {
        format!(
            "const id = Number(document.querySelector(\"{first} .approval-request\").dataset.id);
             const deep = [...Array(40)].reduce(inner => ({{k: inner}}), 1);
             const token = new URLSearchParams(location.search).get('token');
             return fetch('api/approval', {{method: 'POST',
               headers: {{'content-type': 'application/json', 'x-reactstep-token': token}},
               body: JSON.stringify({{id, decision: 'edit', arguments: {arguments}}})}})
               .then(async r => [r.status, await r.text()]);"
        )
    };
    for (arguments, why) in [
        ("'src/answer.rs'", "a JSON object"),
        ("deep", "deeper than 32"),
    ] {
        let refused = browser
            .client
            .execute(&post(arguments), vec![])
            .await
            .unwrap();
        assert_eq!(refused[0], 400, "{refused}");
        assert!(refused[1].as_str().unwrap().contains(why), "{refused}");
    }

    edit("{\"path\": \"src/answer.rs\"}").await;
    browser
        .until(
            "the edited call's observation",
            &format!("return document.querySelector(\"{first} .observation\")"),
        )
        .await;
    let observation = browser.text(&format!("{first} .observation")).await;
    assert!(observation.contains("pub const ANSWER"), "{observation}");
    let decided = browser.text(&format!("{first} .decision.edited")).await;
    assert!(
        decided.contains(r#"run with the arguments {"path":"src/answer.rs"}"#),
        "{decided}"
    );

    approve_last(&browser, 2, "42").await;
}

/// A call whose arguments hold characters that turn text around or hide it (a right-to-left
/// override, a zero-width space): the card, the approval and its editor show each as a JSON escape,
/// so what is approved reads as what runs (`ls -la docs \u{202e}# ~ fr- mr;` was shown as
/// `ls -la docs ;rm -rf ~ #`); the editor's JSON reads back as the same arguments.
#[tokio::test]
async fn what_an_approval_shows_reads_as_what_runs() {
    let ws = workspace();
    let script =
        "Thought: read it\nAction: read_file(path=\"docs\u{202e}# ~ fr- mr;\u{200b}.md\")\n---\n\
                  Thought: done\nAction: submit_answer(answer=\"42\u{202e}x\")\n";
    let (_ui, browser) = at_first_approval(ws.path(), script, "edit").await;
    let first = ".card[data-iteration='1']";
    let args = browser.text(&format!("{first} .args")).await;
    assert!(
        args.contains("docs\\u202e# ~ fr- mr;\\u200b.md") && !args.contains('\u{202e}'),
        "{args:?}"
    );
    browser.click(&format!("{first} button.edit")).await;
    let proposed = browser.text_value(&format!("{first} textarea")).await;
    assert!(
        proposed.contains("docs\\u202e# ~ fr- mr;\\u200b.md") && !proposed.contains('\u{200b}'),
        "{proposed:?}"
    );
    browser.click(&format!("{first} button.run-edited")).await;
    browser
        .until(
            "the edited call's observation",
            &format!("return document.querySelector(\"{first} .observation\")"),
        )
        .await;
    let decided = browser.text(&format!("{first} .decision.edited")).await;
    assert!(
        decided.contains("docs\\u202e# ~ fr- mr;\\u200b.md"),
        "{decided:?}"
    );
    let observation = browser.text(&format!("{first} .observation")).await;
    assert!(!observation.contains('\u{202e}'), "{observation:?}");
    // And the answer, where the run ends.
    approve_last(&browser, 2, "42\\u{202e}x").await;
    assert!(!browser.text(".answer").await.contains('\u{202e}'));
}

#[tokio::test]
async fn an_answer_the_evaluation_sends_back_is_shown_on_its_card_with_its_verdict() {
    let ws = workspace();
    let retry = json!({"completeness_score": 4, "quality_score": 5, "needs_retry": true,
                       "missing_info": ["where the constant is defined"], "suggestions": []});
    let accepted = json!({"completeness_score": 9, "quality_score": 8, "needs_retry": false,
                          "missing_info": [], "suggestions": []});
    let script = format!(
        "Thought: a guess\nFinal Answer: It is probably 41.\n---\n{}\
         Thought: read it\nAction: read_file(path=\"src/answer.rs\")\n---\n\
         Thought: found\nFinal Answer: The answer is 42.\n---\n{}",
        structured(retry),
        structured(accepted)
    );
    let ui = start_ui(ws.path(), Some(&script), &["--reflect"]).await;
    let browser = browser().await;
    browser.open(&ui).await;
    browser.type_task("What is the answer?").await;
    browser
        .until("the answer", "return document.querySelector('.answer')")
        .await;
    assert!(browser.text(".answer").await.contains("The answer is 42."));

    let first = ".card[data-iteration='1']";
    let judged = browser.text(&format!("{first} .evaluated")).await;
    assert!(
        judged.contains("another try") && judged.contains("where the constant is defined"),
        "{judged}"
    );
    let sent_back = browser.text(&format!("{first} .rejected")).await;
    assert!(sent_back.contains("It is probably 41."), "{sent_back}");
    // The accepted answer's card has a verdict and nothing sent back.
    let last = ".card[data-iteration='3']";
    assert!(browser
        .text(&format!("{last} .evaluated"))
        .await
        .contains("accepted"));
    assert_eq!(browser.count(&format!("{last} .rejected")).await, 0);
}

#[tokio::test]
async fn the_plan_runs_once_approved_and_ticks_as_its_steps_run() {
    let ws = workspace();
    let plan = json!({"complexity": "simple", "estimated_iterations": 3, "steps": [
        plan_step(1, "See what the workspace holds", Some("list_directory")),
        plan_step(2, "Read the constant", Some("read_file")),
        plan_step(3, "Say the answer", None),
    ]});
    let script = format!(
        "{}Thought: look\nAction: list_directory(path=\".\")\n---\n\
         Thought: read\nAction: read_file(path=\"src/answer.rs\")\n---\n\
         Thought: done\nFinal Answer: 42\n",
        structured(plan)
    );
    // Each call waits for approval: the page is seen between the plan's steps.
    let flags = ["--approve-plan", "--approve", "all"];
    let ui = start_ui(ws.path(), Some(&script), &flags).await;
    let browser = browser().await;
    browser.open(&ui).await;
    let done = "#plan .checklist li.done";

    browser.type_task("What is the answer?").await;
    browser
        .until(
            "the plan to approve",
            "return document.querySelector('.plan-approval button.approve')",
        )
        .await;
    assert_eq!(browser.count("#plan .checklist li").await, 3);
    assert_eq!(browser.count(done).await, 0);
    assert_eq!(
        browser.count(".card").await,
        0,
        "nothing runs before the plan is approved"
    );
    browser.click(".plan-approval button.approve").await;

    for (step, tool) in [(1, "list_directory"), (2, "read_file")] {
        let card = format!(".card[data-iteration='{step}']");
        browser
            .until(
                &format!("the call of {tool}"),
                &format!("return document.querySelector(\"{card} button.approve\")"),
            )
            .await;
        // The call's plan step is ticked as it runs, and no later one.
        assert_eq!(browser.count(done).await, step, "{tool}");
        browser.click(&format!("{card} button.approve")).await;
    }
    browser
        .until("the answer", "return document.querySelector('.answer')")
        .await;
    assert_eq!(browser.count(done).await, 3);
    assert!(browser.text(".answer").await.contains("42"));

    // Rejected, the plan runs nothing, and the page says so.
    browser.type_task("What is the answer, again?").await;
    browser
        .until(
            "the second plan",
            "return document.querySelector('.plan-approval button.deny')",
        )
        .await;
    browser.click(".plan-approval button.deny").await;
    browser
        .until(
            "the rejected run's end",
            "return document.querySelector('.run:last-child .answer.failed')",
        )
        .await;
    let ended = browser.text(".run:last-child .answer").await;
    assert!(
        ended.contains("plan rejected") && ended.contains("not approved"),
        "{ended}"
    );
}

#[tokio::test]
async fn a_run_is_saved_in_its_session_which_the_reloaded_page_lists_and_continues() {
    let ws = workspace();
    let script = "Thought: read the constant\nAction: read_file(path=\"src/answer.rs\")\n---\n\
                  Thought: I know it\nFinal Answer: The answer is 42.\n";
    let ui = start_ui(ws.path(), Some(script), &[]).await;
    let browser = browser().await;
    browser.open(&ui).await;
    let named = browser.text_value("#session").await;
    assert!(
        named.starts_with("ui "),
        "a new session is named for the page: {named}"
    );
    let session = browser.client.find(Locator::Css("#session")).await.unwrap();
    session.clear().await.unwrap();
    session.send_keys("the answer").await.unwrap();
    browser.type_task("What is the answer?").await;
    browser
        .until("the answer", "return document.querySelector('.answer')")
        .await;
    let summary = browser.text(".summary").await;
    assert!(
        summary.contains("saved in the session the answer"),
        "{summary}"
    );

    // Reloaded, the page lists the session; chosen, it shows its runs and is continued.
    browser.client.refresh().await.unwrap();
    let listed = "#sessions li[data-name='the answer']";
    browser
        .until(
            "the session in the list",
            &format!("return document.querySelector(\"{listed}\")"),
        )
        .await;
    assert!(browser.text(listed).await.contains("1 run"));
    assert_ne!(browser.text_value("#session").await, "the answer");
    browser.click(listed).await;
    assert_eq!(browser.text_value("#session").await, "the answer");
    browser
        .until(
            "the session's runs",
            "return document.querySelector('ol.session-runs li')",
        )
        .await;
    let runs = browser.text("ol.session-runs").await;
    assert!(
        runs.contains("What is the answer?") && runs.contains("The answer is 42."),
        "{runs}"
    );

    browser.type_task("And once more?").await;
    browser
        .until(
            "the second answer",
            "return document.querySelector('.run:last-child .answer')",
        )
        .await;
    let note = browser.text(".run:last-child .note").await;
    assert!(
        note.contains("continuing the session the answer (2 earlier turns)"),
        "{note}"
    );
    browser
        .until(
            "the second run in the list",
            &format!("return document.querySelector(\"{listed}\").innerText.includes('2 runs')"),
        )
        .await;
    browser
        .until(
            "both runs shown",
            "return document.querySelectorAll('ol.session-runs li').length === 2",
        )
        .await;
}

/// The guard, over plain HTTP: the page is served to loopback names only (DNS rebinding), and a
/// task is taken only from the page's own origin; the page names no other site.
#[tokio::test]
async fn a_foreign_host_or_origin_is_refused_and_the_page_is_self_contained() {
    let ws = workspace();
    let ui = start_ui(ws.path(), Some(STEPS), &[]).await;
    let http = reqwest::Client::new();
    let origin = ui.base.trim_end_matches('/').to_string();
    let host = origin.trim_start_matches("http://").to_string();

    let page = http.get(&ui.url).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let policy = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        policy.contains("default-src 'none'") && !policy.contains("frame-ancestors"),
        "{policy}"
    );
    let html = page.text().await.unwrap();
    assert!(html.contains("src=\"app.js\"") && html.contains("href=\"style.css\""));
    for asset in ["", "app.js", "style.css"] {
        let text = http
            .get(format!("{}{asset}", ui.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            !text.contains("http://") && !text.contains("https://"),
            "{asset} names another site"
        );
    }

    for path in ["", "api/info"] {
        let rebound = http
            .get(format!("{}{path}", ui.base))
            .header("X-Reactstep-Token", &ui.token)
            .header(
                "Host",
                format!("evil.example:{}", host.rsplit(':').next().unwrap()),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(rebound.status(), 403, "{path}");
        let why: Value = rebound.json().await.unwrap();
        assert!(why["error"].as_str().unwrap().contains("loopback"), "{why}");
    }

    // Another program on this machine reaches the port too, and sends any Origin it likes:
    // without the page's token, nothing of the API answers it.
    let other = "0".repeat(32);
    // The router decodes a path before it matches it: `%61pi/run` is `api/run`.
    for (method, path) in [
        ("GET", "api/info"),
        ("GET", "api/sessions"),
        ("GET", "api/sessions/ui"),
        ("POST", "api/run"),
        ("POST", "api/approval"),
        ("POST", "api/stop"),
        ("GET", "%61pi/info"),
        ("GET", "%61pi/sessions"),
        ("POST", "%61pi/run"),
        ("POST", "api/%72un"),
        ("GET", "./api/info"),
    ] {
        for token in [None, Some(other.as_str()), Some(&ui.token[..31])] {
            let mut request = http
                .request(method.parse().unwrap(), format!("{}{path}", ui.base))
                .header("Origin", &origin)
                .json(&json!({"task": "read my files", "id": 1, "decision": "approve"}));
            if let Some(token) = token {
                request = request.header("X-Reactstep-Token", token);
            }
            let refused = request.send().await.unwrap();
            assert_eq!(refused.status(), 403, "{method} {path} {token:?}");
            let why: Value = refused.json().await.unwrap();
            assert!(why["error"].as_str().unwrap().contains("token"), "{why}");
        }
    }

    let post = |origin: Option<&str>, task: &str| {
        let mut request = http
            .post(format!("{}api/run", ui.base))
            .header("X-Reactstep-Token", &ui.token)
            .json(&json!({ "task": task }));
        if let Some(origin) = origin {
            request = request.header("Origin", origin);
        }
        request.send()
    };
    for foreign in [Some("http://evil.example"), Some("null"), None] {
        let refused = post(foreign, "read my files").await.unwrap();
        assert_eq!(refused.status(), 403, "{foreign:?}");
        let why: Value = refused.json().await.unwrap();
        assert!(
            why["error"].as_str().unwrap().contains("only this page"),
            "{why}"
        );
    }
    let empty = post(Some(&origin), " ").await.unwrap();
    assert_eq!(empty.status(), 400);
    let why: Value = empty.json().await.unwrap();
    assert_eq!(why["error"], "Type a task first: the task is empty.");

    let stray = http
        .post(format!("{}api/approval", ui.base))
        .header("X-Reactstep-Token", &ui.token)
        .header("Origin", &origin)
        .json(&json!({"id": 7, "decision": "approve"}))
        .send()
        .await
        .unwrap();
    assert_eq!(stray.status(), 404);

    // The page's own origin runs a task, its events streamed as lines of JSON.
    let run = post(Some(&origin), "What is the answer?").await.unwrap();
    assert_eq!(run.status(), 200);
    let lines = run.text().await.unwrap();
    let last: Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "end", "{lines}");
    assert_eq!(last["answer"], "The answer is 42.");
}

#[tokio::test]
async fn a_stop_pressed_as_soon_as_the_run_is_accepted_stops_it() {
    let ws = workspace();
    // With --approve-plan the run would wait on the page: only a Stop ends it.
    let ui = start_ui(ws.path(), Some(&planned_steps()), &["--approve-plan"]).await;
    let http = reqwest::Client::new();
    let origin = ui.base.trim_end_matches('/').to_string();
    let run = http
        .post(format!("{}api/run", ui.base))
        .header("X-Reactstep-Token", &ui.token)
        .header("Origin", &origin)
        .json(&json!({"task": "What is the answer?", "session": "stopped at once"}))
        .send()
        .await
        .unwrap();
    assert_eq!(run.status(), 200);
    let stop: Value = http
        .post(format!("{}api/stop", ui.base))
        .header("X-Reactstep-Token", &ui.token)
        .header("Origin", &origin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stop["stopped"], true, "{stop}");
    let lines = tokio::time::timeout(PATIENCE, run.text())
        .await
        .expect("the stopped run ends")
        .unwrap();
    let last: Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert_eq!(last["termination"], "cancelled", "{lines}");
}
