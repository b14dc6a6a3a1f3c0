//! The model-output corpus (`tests/corpus/model_outputs.yaml`): its cases, how one runs through
//! the real server (its output once, a sentinel answer to a repair round) and how the reading is
//! judged. `corpus` scores the whole-output reading, `corpus_stream` checks the stream agrees.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use super::app::{spawn_app, TestApp};
use super::requests::request;
use super::upstream::{openai_reply, OPENAI_PATH};

/// The reply to a repair round: an answer no case expects, so a repair is told apart.
pub const REPAIR_REPLY: &str = "Thought: repaired\nFinal Answer: REPAIR-SENTINEL";
/// Cases run at once.
pub const PARALLEL: usize = 8;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Corpus {
    pub toolsets: BTreeMap<String, Vec<Value>>,
    pub cases: Vec<Case>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub id: String,
    pub family: String,
    pub source: String,
    #[serde(default)]
    pub toolset: Option<String>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// The expected thought, exactly (trimmed), when the case is about the thought.
    #[serde(default)]
    pub thought: Option<String>,
    pub output: String,
    pub expect: ExpectSpec,
}

/// `expect:` with exactly one of its keys.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectSpec {
    #[serde(default)]
    action: Option<ActionSpec>,
    #[serde(default)]
    answer: Option<String>,
    #[serde(default)]
    repair: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionSpec {
    tool: String,
    args: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expected {
    Action { tool: String, args: Value },
    Answer(String),
    Repair(String),
}

impl Expected {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Action { .. } => "action",
            Self::Answer(_) => "answer",
            Self::Repair(_) => "repair",
        }
    }
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Action { tool, args } => write!(f, "action {tool}({args})"),
            Self::Answer(text) => write!(f, "answer {text:?}"),
            Self::Repair(why) => write!(f, "repair ({why})"),
        }
    }
}

/// What the service did with a case.
#[derive(Debug, Clone, PartialEq)]
pub enum Got {
    Action {
        tool: String,
        args: Value,
        thought: String,
    },
    Answer {
        text: String,
        thought: String,
    },
    /// It asked the model again, with the problem as the observation.
    Repair,
    Error {
        status: u16,
        kind: String,
    },
}

impl Got {
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Action { .. } => "action",
            Self::Answer { .. } => "answer",
            Self::Repair => "repair",
            Self::Error { .. } => "error",
        }
    }
}

impl std::fmt::Display for Got {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Action {
                tool,
                args,
                thought,
            } => write!(f, "action {tool}({args}) thought {thought:?}"),
            Self::Answer { text, thought } => write!(f, "answer {text:?} thought {thought:?}"),
            Self::Repair => write!(f, "repair"),
            Self::Error { status, kind } => write!(f, "error {status} {kind}"),
        }
    }
}

impl Case {
    pub fn expected(&self) -> Expected {
        let e = &self.expect;
        match (&e.action, &e.answer, &e.repair) {
            (Some(a), None, None) => Expected::Action {
                tool: a.tool.clone(),
                args: Value::Object(a.args.clone()),
            },
            (None, Some(text), None) => Expected::Answer(text.clone()),
            (None, None, Some(why)) => Expected::Repair(why.clone()),
            _ => panic!(
                "case {}: expect needs exactly one of action, answer, repair",
                self.id
            ),
        }
    }

    pub fn finish(&self) -> &str {
        self.finish_reason.as_deref().unwrap_or("stop")
    }

    /// The request: the case's tools declared, no free-text segment, no mock.
    pub fn body(&self, corpus: &Corpus) -> Value {
        let name = self.toolset.as_deref().unwrap_or("ide");
        let tools = corpus
            .toolsets
            .get(name)
            .unwrap_or_else(|| panic!("case {}: no toolset {name}", self.id));
        let mut body = request("gpt-4o", "Help me with my project.");
        body["tools"] = if tools.is_empty() {
            Value::Null
        } else {
            Value::Array(tools.clone())
        };
        body["available_tools_prompt_segment"] = Value::Null;
        body["llm_config"]["provider"] = json!("openai");
        body
    }

    /// Whether `got` is the expected reading.
    pub fn judge(&self, got: &Got) -> bool {
        let thought_ok = |t: &str| self.thought.as_deref().is_none_or(|e| e.trim() == t.trim());
        match (self.expected(), got) {
            (
                Expected::Action { tool, args },
                Got::Action {
                    tool: t,
                    args: a,
                    thought,
                },
            ) => tool == *t && args == *a && thought_ok(thought),
            (Expected::Answer(text), Got::Answer { text: t, thought }) => {
                text.trim() == t.trim() && thought_ok(thought)
            }
            (Expected::Repair(_), Got::Repair) => true,
            _ => false,
        }
    }

    /// An action the model did not mean: any action but exactly the expected one.
    pub fn wrong_action(&self, got: &Got) -> bool {
        let Got::Action {
            tool: t, args: a, ..
        } = got
        else {
            return false;
        };
        !matches!(self.expected(), Expected::Action { tool, args } if tool == *t && args == *a)
    }
}

pub fn load() -> Corpus {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/corpus/model_outputs.yaml"
    );
    let text = std::fs::read_to_string(file).expect("the corpus file is there");
    let corpus: Corpus = serde_yaml::from_str(&text).expect("the corpus is valid YAML");
    let mut ids = std::collections::HashSet::new();
    for case in &corpus.cases {
        assert!(ids.insert(case.id.clone()), "duplicate case id {}", case.id);
        assert!(
            FAMILIES.contains(&case.family.as_str()),
            "case {}: unknown family {}",
            case.id,
            case.family
        );
        assert!(
            !case.source.trim().is_empty(),
            "case {}: no source",
            case.id
        );
        assert!(
            matches!(case.finish(), "stop" | "length"),
            "case {}: finish_reason is stop or length",
            case.id
        );
        let _ = case.expected();
        let _ = case.body(&corpus);
    }
    corpus
}

pub const FAMILIES: [&str; 21] = [
    "1-stop-remnant",
    "2-pythonic",
    "3-markup",
    "4-action-input",
    "5-tool-name",
    "6-labels-in-content",
    "7-exact-strings",
    "8-copied-example",
    "9-copied-signature",
    "10-undeclared-arg",
    "11-markup-thought",
    "12-tags-in-answer",
    "13-answer-then-action",
    "14-code-input",
    "15-input-repeats-call",
    "16-marked-labels",
    "17-stray-characters",
    "18-named-input",
    "19-worked-answer",
    "20-bare-text-values",
    "dialect",
];

/// A chat.completion holding `content`, ended for `finish`.
fn completion(content: &str, finish: &str) -> Value {
    let mut reply = openai_reply(content);
    reply["choices"][0]["finish_reason"] = json!(finish);
    reply
}

/// Mounts the two replies of a case: the case's output once, then the repair round's.
pub async fn mount_pair(app: &TestApp, first: ResponseTemplate, second: ResponseTemplate) {
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(first)
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&app.llm)
        .await;
    Mock::given(method("POST"))
        .and(path(OPENAI_PATH))
        .respond_with(second)
        .with_priority(2)
        .mount(&app.llm)
        .await;
}

/// Whether the service made a repair round: a second upstream call whose last user message is
/// the observation of the problem. `Err` when a second call was made some other way.
pub async fn repair_round(app: &TestApp) -> Result<bool, String> {
    let bodies = app.upstream_bodies().await;
    match bodies.len() {
        0 | 1 => Ok(false),
        2 => {
            let last_user = bodies[1]["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .rev()
                .find(|m| m["role"] == "user")
                .and_then(|m| m["content"].as_str())
                .unwrap_or_default()
                .to_string();
            if last_user.starts_with("Observation:") {
                Ok(true)
            } else {
                Err(format!(
                    "second upstream call without an observation: {last_user:?}"
                ))
            }
        }
        n => Err(format!("{n} upstream calls")),
    }
}

/// The decision of a step response, for comparing two runs.
pub fn decision(body: &Value) -> Value {
    let mut action = body["action_details"].clone();
    if let Some(details) = action.as_object_mut() {
        // Each step's call gets an id of its own.
        details.remove("tool_call_id");
    }
    json!({
        "status": body["status"],
        "thought": body["thought"],
        "action_details": action,
        "direct_response": body["direct_response"],
    })
}

/// What the non-streaming endpoint did with a case, and the decision it answered with
/// (`Null` for an error).
pub async fn run_plain(case: &Case, body: &Value) -> (Got, Value) {
    let app = spawn_app().await;
    mount_pair(
        &app,
        ResponseTemplate::new(200).set_body_json(completion(&case.output, case.finish())),
        ResponseTemplate::new(200).set_body_json(completion(REPAIR_REPLY, "stop")),
    )
    .await;
    let reply = app.post_react_step(body).await;
    let repaired = repair_round(&app).await;
    let got = match (reply.status, repaired) {
        (_, Err(why)) => Got::Error {
            status: reply.status,
            kind: why,
        },
        (_, Ok(true)) => Got::Repair,
        (200, Ok(false)) => match reply.body["status"].as_str() {
            Some("action_proposed") => Got::Action {
                tool: reply.body["action_details"]["tool_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                args: reply.body["action_details"]["tool_args"].clone(),
                thought: text_of(&reply.body["thought"]),
            },
            Some("direct_response_provided") => Got::Answer {
                text: text_of(&reply.body["direct_response"]),
                thought: text_of(&reply.body["thought"]),
            },
            other => Got::Error {
                status: 200,
                kind: format!("status {other:?}"),
            },
        },
        (status, Ok(false)) => Got::Error {
            status,
            kind: text_of(&reply.body["error"]["type"]),
        },
    };
    let decision = if reply.status == 200 {
        decision(&reply.body)
    } else {
        json!({"error": reply.body["error"]["type"]})
    };
    (got, decision)
}

fn text_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// Runs `work` on every case, `PARALLEL` at a time; a case whose work panicked gets the
/// panic's message.
pub async fn for_each_case<T, F, Fut>(corpus: &Arc<Corpus>, work: F) -> Vec<Result<T, String>>
where
    T: Send + 'static,
    F: Fn(Arc<Corpus>, usize) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(PARALLEL));
    let mut set = JoinSet::new();
    for i in 0..corpus.cases.len() {
        let permits = permits.clone();
        let fut = work(corpus.clone(), i);
        set.spawn(async move {
            let _permit = permits.acquire_owned().await;
            (i, tokio::spawn(fut).await)
        });
    }
    let mut out: Vec<Option<Result<T, String>>> = (0..corpus.cases.len()).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        let (i, result) = joined.expect("the runner task ends");
        out[i] = Some(result.map_err(|e| {
            if e.is_panic() {
                let panic = e.into_panic();
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panicked".into())
            } else {
                "cancelled".into()
            }
        }));
    }
    out.into_iter()
        .map(|r| r.expect("every case ran"))
        .collect()
}
