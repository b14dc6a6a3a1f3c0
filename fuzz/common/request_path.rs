//! One input through the whole request path — decode, validate, compile the tool schemas, fit
//! and build the prompt, parse the `mock_response`, judge the action, render the response —
//! with the invariants every input must keep. Shared by the fuzz target and by the test that
//! replays its corpus on every `cargo test`.

use std::sync::OnceLock;

use reactstep::llm::{LlmClients, LlmSettings, RetryPolicy};
use reactstep::step::{Outcome, StepError, StepErrorKind};

/// How far an input went.
#[derive(Debug, PartialEq)]
pub enum Reached {
    /// Refused as a bad request (400).
    Refused,
    /// Valid, but it would call a model: not run offline.
    NeedsModel,
    /// Through the step, to a response or a step error.
    Step,
}

pub fn check(data: &[u8]) -> Reached {
    let Ok(input) = reactstep::api::offline::step_input(data) else {
        return Reached::Refused;
    };
    // Without a mock the step would call the model; the fuzz target stays offline.
    if input.mock_response.is_none() && !input.dry_run {
        return Reached::NeedsModel;
    }
    let raw = input.mock_response.clone().unwrap_or_default();
    // A `/tool …` query is proposed as written, without reading the output.
    let command = input.user_query.trim_start().starts_with('/');
    match runtime().block_on(reactstep::step::run(input, llm(), None)) {
        Ok(output) => {
            if let Outcome::Action { tool_name, .. } = &output.outcome {
                assert!(!tool_name.is_empty(), "an action names a tool");
                assert!(
                    command || raw.contains(tool_name.as_str()),
                    "the tool name comes from the output"
                );
            }
            let body = reactstep::api::offline::response_body(output).expect("a response renders");
            let _: serde_json::Value = serde_json::from_str(&body).expect("the response is JSON");
        }
        Err(StepError {
            kind: StepErrorKind::Internal(why),
            ..
        }) => panic!("an internal error: {why}"),
        Err(_) => {}
    }
    Reached::Step
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// Clients pointed at a port where nothing listens: nothing here may reach a network.
fn llm() -> &'static LlmClients {
    static LLM: OnceLock<LlmClients> = OnceLock::new();
    LLM.get_or_init(|| {
        let nowhere = "http://127.0.0.1:9".to_string();
        LlmClients::new(LlmSettings {
            base_urls: reactstep::llm::Provider::all()
                .map(|p| (p.name(), nowhere.clone()))
                .collect(),
            headers: Default::default(),
            timeout: std::time::Duration::from_secs(1),
            retry: RetryPolicy::default(),
            extra_roots: Vec::new(),
            pools: 1,
            memory: reactstep::runtime::memory_budget::MemoryBudget::unlimited(),
        })
        .expect("clients build")
    })
}
