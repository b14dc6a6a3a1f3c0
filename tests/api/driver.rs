//! The loop driver as a library, against the real server: a flaky tool that recovers after
//! retries and one that never does, a caller's own stop, and a context that cannot fit.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reactstep::driver::{
    Driver, LoopSettings, Quiet, RetryPolicy, StepRecord, Termination, ToolMetadata, ToolOutcome,
    ToolRegistry, Watcher,
};
use serde_json::{json, Map, Value};

use crate::support::app::spawn_app;

/// A tool failing `failures` times ("temporarily unavailable") before it answers; only a
/// read-only one is tried again.
fn flaky(registry: &mut ToolRegistry, failures: u32, read_only: bool) -> Arc<AtomicU32> {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    registry.register(
        "fetch_issue",
        move |_: &Map<String, Value>| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            if n <= failures {
                ToolOutcome::Failed("the tracker is temporarily unavailable".into())
            } else {
                ToolOutcome::Done("issue 7: login fails".into())
            }
        },
        ToolMetadata {
            description: "Fetch an issue.".into(),
            category: "tracker".into(),
            parameters: json!({"type": "object", "properties": {"id": {"type": "integer"}}}),
            examples: Vec::new(),
            read_only,
            destructive: false,
        },
    );
    calls
}

fn settings(server: &str, script: &[&str]) -> LoopSettings {
    let mut settings = LoopSettings::new(server, "gpt-4o");
    settings.token_limit = 16_000;
    settings.reserved_output_tokens = 1_000;
    settings.mock_responses = Some(script.iter().map(|s| s.to_string()).collect());
    settings.retry = RetryPolicy {
        initial_delay: Duration::from_millis(1),
        ..RetryPolicy::default()
    };
    settings
}

const SCRIPT: [&str; 2] = [
    "Thought: look it up\nAction: fetch_issue(id=7)",
    "Thought: done\nFinal Answer: the login fails",
];

#[tokio::test]
async fn a_failing_tool_recovers_after_retries_and_the_history_says_so() {
    let app = spawn_app().await;
    let mut registry = ToolRegistry::default();
    let calls = flaky(&mut registry, 2, true);
    let driver = Driver::new(settings(&app.address, &SCRIPT), registry);
    let report = driver.run("What is issue 7?", &mut Quiet).await;
    assert_eq!(report.termination_reason, Termination::Success);
    assert_eq!(report.steps[0].observation, "issue 7: login fails");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let error = &report.error_history[0];
    assert_eq!((error.retries, error.recovered), (2, true));
}

#[tokio::test]
async fn a_tool_that_never_recovers_becomes_an_observation_the_model_reads() {
    let app = spawn_app().await;
    let mut registry = ToolRegistry::default();
    flaky(&mut registry, 99, true);
    let driver = Driver::new(settings(&app.address, &SCRIPT), registry);
    let report = driver.run("What is issue 7?", &mut Quiet).await;
    assert_eq!(
        report.termination_reason,
        Termination::Success,
        "the model went on"
    );
    assert!(report.steps[0]
        .observation
        .contains("temporarily unavailable"));
    let error = &report.error_history[0];
    assert_eq!((error.retries, error.recovered), (2, false));
}

struct StopAfterFirst;

impl Watcher for StopAfterFirst {
    fn stop_after(&mut self, _step: &StepRecord) -> bool {
        true
    }
}

#[tokio::test]
async fn the_callers_own_stop_and_a_full_context_end_the_loop() {
    let app = spawn_app().await;
    let mut registry = ToolRegistry::default();
    flaky(&mut registry, 0, false);
    let driver = Driver::new(settings(&app.address, &SCRIPT), registry);
    let report = driver.run("What is issue 7?", &mut StopAfterFirst).await;
    assert_eq!(report.termination_reason, Termination::Custom);
    assert_eq!(report.steps.len(), 1);

    let mut registry = ToolRegistry::default();
    flaky(&mut registry, 0, false);
    let mut tight = settings(&app.address, &SCRIPT);
    tight.token_limit = 1_050;
    let driver = Driver::new(tight, registry);
    let report = driver
        .run(&"a very long question ".repeat(400), &mut Quiet)
        .await;
    assert_eq!(
        report.termination_reason,
        Termination::TokenBudget,
        "{report:?}"
    );
    assert!(!report.success);
}

/// The service's loop guard stops a model that makes the same call with the same result a
/// sixth time: the loop ends `stalled`, after the five calls it ran.
#[tokio::test]
async fn the_services_loop_guard_ends_the_loop_as_stalled() {
    let app = spawn_app().await;
    let mut registry = ToolRegistry::default();
    let calls = flaky(&mut registry, 0, false);
    let script = ["Thought: look it up\nAction: fetch_issue(id=7)"; 8];
    let mut repeating = settings(&app.address, &script);
    // The driver's own count of the same call is not what ends it here.
    repeating.stall_threshold = 100;
    let driver = Driver::new(repeating, registry);
    let report = driver.run("What is issue 7?", &mut Quiet).await;
    assert_eq!(
        report.termination_reason,
        Termination::Stalled,
        "{report:?}"
    );
    assert!(!report.success);
    assert!(
        report.answer.starts_with("loop_detected: "),
        "{}",
        report.answer
    );
    assert_eq!(report.iterations, 6);
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

#[derive(Default)]
struct Pieces(Vec<String>);

impl Watcher for Pieces {
    fn thought_piece(&mut self, _iteration: u32, piece: &str) {
        self.0.push(piece.to_string());
    }
}

#[tokio::test]
async fn a_streamed_loop_sees_the_thought_as_it_forms() {
    let app = spawn_app().await;
    let script = ["Thought: the login handler checks the session first\nFinal Answer: it does"];
    let mut streamed = settings(&app.address, &script);
    streamed.stream = true;
    let driver = Driver::new(streamed, ToolRegistry::default());
    let mut pieces = Pieces::default();
    let report = driver
        .run("Does login check the session?", &mut pieces)
        .await;
    assert_eq!(report.termination_reason, Termination::Success);
    assert_eq!(report.answer, "it does");
    assert!(pieces.0.len() > 1, "{:?}", pieces.0);
    assert_eq!(
        pieces.0.concat(),
        "the login handler checks the session first"
    );
}

/// Replies to the service's upstream calls in order, one per step.
struct InOrder(Vec<Value>, std::sync::atomic::AtomicUsize);

impl wiremock::Respond for InOrder {
    fn respond(&self, _: &wiremock::Request) -> wiremock::ResponseTemplate {
        let n = self.1.fetch_add(1, Ordering::SeqCst).min(self.0.len() - 1);
        wiremock::ResponseTemplate::new(200).set_body_json(&self.0[n])
    }
}

#[tokio::test]
async fn a_loop_with_a_real_model_sends_the_key_and_tells_the_model_a_tool_failed() {
    use crate::support::upstream::{openai_reply, OPENAI_PATH};
    use wiremock::matchers::{header, method, path};
    let app = spawn_app().await;
    let replies = SCRIPT.iter().map(|s| openai_reply(s)).collect();
    // Only a request carrying the key is answered: without it the step fails upstream.
    wiremock::Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .and(header("authorization", "Bearer sk-driver-key"))
        .respond_with(InOrder(replies, Default::default()))
        .mount(&app.llm)
        .await;
    let mut registry = ToolRegistry::default();
    flaky(&mut registry, 99, false);
    let mut live = settings(&app.address, &[]);
    live.mock_responses = None;
    live.key = Some("sk-driver-key".into());
    let driver = Driver::new(live, registry);
    let report = driver.run("What is issue 7?", &mut Quiet).await;
    assert_eq!(
        report.termination_reason,
        Termination::Success,
        "{report:?}"
    );
    assert_eq!(report.answer, "the login fails");
    let bodies = app.upstream_bodies().await;
    assert_eq!(bodies.len(), 2);
    let last = bodies[1]["messages"].as_array().unwrap().last().unwrap();
    let said = last["content"].as_str().unwrap();
    assert!(
        said.contains("[the tool failed] the tracker is temporarily unavailable"),
        "{said}"
    );
}

/// A gate a blocking tool waits at until the test opens it.
type Gate = Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>;

/// `block`: a plain-function tool that says it has begun, then blocks its thread (as a read of
/// a FIFO or a hung network file system would) until the gate opens.
fn blocking(registry: &mut ToolRegistry) -> (Arc<tokio::sync::Notify>, Gate) {
    let begun = Arc::new(tokio::sync::Notify::new());
    let gate: Gate = Arc::default();
    let (tell, wait) = (begun.clone(), gate.clone());
    registry.register(
        "block",
        move |_: &Map<String, Value>| {
            tell.notify_one();
            let (open, opened) = &*wait;
            let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
            while !*open {
                open = opened.wait(open).unwrap_or_else(|e| e.into_inner());
            }
            ToolOutcome::Done("let go".into())
        },
        ToolMetadata {
            description: "Blocks.".into(),
            category: "test".into(),
            parameters: json!({"type": "object", "properties": {}}),
            examples: Vec::new(),
            read_only: false,
            destructive: false,
        },
    );
    (begun, gate)
}

fn open(gate: &Gate) {
    *gate.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
    gate.1.notify_all();
}

const BLOCKING: [&str; 2] = [
    "Thought: wait\nAction: block()",
    "Thought: done\nFinal Answer: never",
];

#[tokio::test]
async fn ctrl_c_reaches_the_loop_while_a_tool_blocks_its_thread() {
    let app = spawn_app().await;
    let mut registry = ToolRegistry::default();
    let (begun, gate) = blocking(&mut registry);
    let driver = Driver::new(settings(&app.address, &BLOCKING), registry);
    // Ctrl-C comes once the tool is blocked: the loop (on this one-thread runtime) must hear it.
    let report = driver
        .run_until("q", &mut Quiet, async move { begun.notified().await })
        .await;
    open(&gate);
    assert_eq!(report.termination_reason, Termination::Cancelled);
    assert_eq!(
        report.iterations, 1,
        "the step was answered; the tool was cut"
    );
    assert!(report.steps.is_empty());
}

#[tokio::test]
async fn the_deadline_reaches_the_loop_while_a_tool_blocks_its_thread() {
    let app = spawn_app().await;
    let mut registry = ToolRegistry::default();
    let (_begun, gate) = blocking(&mut registry);
    let mut settings = settings(&app.address, &BLOCKING);
    settings.timeout = Some(Duration::from_secs(3));
    let report = Driver::new(settings, registry).run("q", &mut Quiet).await;
    open(&gate);
    assert_eq!(report.termination_reason, Termination::Timeout);
    assert_eq!(
        report.iterations, 1,
        "the step was answered; the tool was cut"
    );
}

#[tokio::test]
async fn fallbacks_reach_the_service_each_with_its_providers_own_key() {
    use crate::support::upstream::{anthropic_reply, mount, ANTHROPIC_PATH, OPENAI_PATH};
    use reactstep::driver::FallbackModel;
    const OPENAI_KEY: &str = "sk-proj-Qz7Xv3Lm9Wd2Kf8Hn4Tr6Yb1Pc5Gj0Ae3Ui7Oy";
    const ANTHROPIC_KEY: &str = "sk-ant-api03-Hq2Wk8Zp4Lm7Rt1Yv6Nb3Xc9Df5Gs0Ja";
    let app = spawn_app().await;
    let limited = json!({"error": {"message": "slow down", "code": "rate_limit_exceeded"}});
    mount(&app.llm, OPENAI_PATH, 429, limited).await;
    let answer = anthropic_reply("Thought: done\nFinal Answer: the login fails");
    mount(&app.llm, ANTHROPIC_PATH, 200, answer).await;
    let mut settings = LoopSettings::new(&app.address, "gpt-4o");
    settings.token_limit = 16_000;
    settings.reserved_output_tokens = 1_000;
    settings.key = Some(OPENAI_KEY.into());
    settings.fallbacks = vec![FallbackModel {
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        key: Some(ANTHROPIC_KEY.into()),
    }];
    let driver = Driver::new(settings, ToolRegistry::default());
    let report = driver.run("What is issue 7?", &mut Quiet).await;
    assert_eq!(report.termination_reason, Termination::Success);
    assert_eq!(report.answer, "the login fails");
    let received = app.llm.received_requests().await.unwrap();
    let claude: Vec<_> = received
        .iter()
        .filter(|r| r.url.path() == ANTHROPIC_PATH)
        .collect();
    assert_eq!(claude.len(), 1);
    assert_eq!(claude[0].headers.get("x-api-key").unwrap(), ANTHROPIC_KEY);
    assert!(received
        .iter()
        .filter(|r| r.url.path() == OPENAI_PATH)
        .all(
            |r| !String::from_utf8_lossy(&r.body).contains(ANTHROPIC_KEY)
                && r.headers.get("x-api-key").is_none()
        ));
}
