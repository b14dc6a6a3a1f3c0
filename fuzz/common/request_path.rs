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
    check_at(reactstep::api::Endpoint::Step, data)
}

/// A plan or an evaluation request: the first byte picks the endpoint (even: plan, odd:
/// evaluate), the rest is the body. A plan answered holds only the request's tools, numbered
/// densely, each dependency backwards; an evaluation's scores are 0 to 10 and its
/// `needs_retry` follows the rules.
pub fn check_task(data: &[u8]) -> Reached {
    use reactstep::api::Endpoint;
    let Some((&pick, body)) = data.split_first() else {
        return Reached::Refused;
    };
    let endpoint = if pick % 2 == 0 {
        Endpoint::Plan
    } else {
        Endpoint::Evaluate
    };
    check_at(endpoint, body)
}

fn check_at(endpoint: reactstep::api::Endpoint, data: &[u8]) -> Reached {
    let Ok(input) = reactstep::api::offline::input_for(endpoint, data) else {
        return Reached::Refused;
    };
    let tools = input.tools.clone();
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
            if let Some(structured) = &output.structured {
                holds(structured, &tools);
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

/// What every plan and evaluation answered must be.
fn holds(structured: &reactstep::step::Structured, tools: &reactstep::step::Catalog) {
    use reactstep::step::Structured;
    match structured {
        Structured::Plan(plan) => {
            let steps = plan["steps"].as_array().expect("a plan has steps");
            for (i, step) in steps.iter().enumerate() {
                assert_eq!(step["step_number"], i + 1, "steps are numbered densely");
                if let Some(tool) = step["tool_name"].as_str() {
                    assert!(tools.has(tool), "a plan names only the request's tools");
                }
                for earlier in step["depends_on"].as_array().expect("depends_on is a list") {
                    let n = earlier.as_u64().expect("a step number");
                    assert!(n >= 1 && (n as usize) <= i, "a dependency points backwards");
                }
            }
        }
        Structured::Evaluation(evaluation) => {
            let score = |k: &str| evaluation[k].as_u64().expect("an integer score");
            assert!(score("completeness_score") <= 10 && score("quality_score") <= 10);
            let retry = evaluation["needs_retry"].as_bool().expect("needs_retry");
            if score("completeness_score") >= 8 {
                assert!(!retry, "8 or more is done");
            }
        }
    }
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
