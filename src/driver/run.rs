//! The loop a client runs: send the step, run the proposed calls, send their results back as
//! `tool_observation` turns answering the calls' ids, until the service answers, the loop stalls,
//! fails, runs out of steps, of budget or of time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::approval::{ApprovalPolicy, Approver};
use super::execution::{Executor, RetryPolicy};
use super::observation;
use super::prior::PriorConversation;
use super::registry::{ToolRegistry, ToolSource};
use super::report::{add_usage, record_error, record_tool_error};
use super::report::{RunReport, Termination, TokenTotals};
use super::service_reply;
use super::step_retry;
use super::watcher::Watcher;

/// The name the plan is sent under, as a file of the step's context.
const PLAN_PATH: &str = "execution-plan.json";

/// The service's default body limit.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;

/// The client the loop talks to the service with. It follows no redirect: each step's body
/// holds the model's key, which a redirect would post on to wherever it points.
fn service_client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

/// A stream's quiet spell at most, by default: four of the service's heartbeats.
pub const DEFAULT_STREAM_IDLE: Duration = Duration::from_secs(60);

/// How the loop talks to the service and when it gives up.
#[derive(Debug, Clone)]
pub struct LoopSettings {
    /// The service's base URL.
    pub server: String,
    pub model: String,
    pub provider: Option<String>,
    pub token_limit: u32,
    pub reserved_output_tokens: u32,
    /// `llm_config.temperature`; the model's default when absent.
    pub temperature: Option<f64>,
    /// `llm_config.tool_mode` (`text`, `native`, `auto`); the service's default when absent.
    pub tool_mode: Option<String>,
    pub key: Option<String>,
    /// Models the service falls back to inside a step (`llm_config.fallbacks`), in order.
    pub fallbacks: Vec<FallbackModel>,
    /// A JSON Schema the final answer must match (`react.final_answer_schema`).
    pub final_answer_schema: Option<Value>,
    pub max_iterations: u32,
    /// The same call this many times in a row is a stalled loop.
    pub stall_threshold: usize,
    /// An answer holding one of these (case aside) is a failure.
    pub failure_phrases: Vec<String>,
    pub timeout: Option<Duration>,
    /// One model output per step, sent as that step's `mock_response` (offline runs).
    pub mock_responses: Option<Vec<String>>,
    /// Steps go through the streaming endpoint, so the thought is seen as it forms.
    pub stream: bool,
    /// The longest a step's stream may go without a whole block (an event, or the heartbeat the
    /// service sends every 15 s), its head included: past it the step fails.
    pub stream_idle: Duration,
    /// The longest one answer of the service (a step, a plan, an evaluation) may take, however
    /// alive its stream is kept.
    pub step_ceiling: Duration,
    /// Calls each tool may make in the loop; a call past its limit is refused.
    pub tool_limits: BTreeMap<String, u32>,
    pub retry: RetryPolicy,
    /// The service's body limit (`REACTSTEP_MAX_BODY_BYTES`): older observations are cut to
    /// keep each request under it (see `observation.rs`).
    pub max_request_bytes: usize,
    /// Which calls wait for the approver's decision (none by default; `reactstep run` asks
    /// about writes).
    pub approval: ApprovalPolicy,
    /// Ask the service for a plan first (`--plan`): shown to the watcher, sent with each step,
    /// adjusted after a failed call.
    pub plan: bool,
    /// The approver decides whether the plan runs (`--approve-plan`).
    pub approve_plan: bool,
    /// Each final answer is evaluated before it is accepted (`--reflect`).
    pub reflect: bool,
    /// The conversation the loop continues (a session's earlier turns and summary).
    pub prior: PriorConversation,
}

impl LoopSettings {
    pub fn new(server: &str, model: &str) -> Self {
        Self {
            server: server.trim_end_matches('/').to_string(),
            model: model.to_string(),
            provider: None,
            token_limit: 128_000,
            reserved_output_tokens: 4_000,
            temperature: None,
            tool_mode: None,
            key: None,
            fallbacks: Vec::new(),
            final_answer_schema: None,
            max_iterations: 10,
            stall_threshold: 6,
            failure_phrases: vec![
                "i cannot complete".into(),
                "i can't complete".into(),
                "unable to complete the task".into(),
            ],
            timeout: None,
            mock_responses: None,
            stream: false,
            stream_idle: DEFAULT_STREAM_IDLE,
            step_ceiling: service_reply::DEFAULT_STEP_CEILING,
            tool_limits: BTreeMap::new(),
            retry: RetryPolicy::default(),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            approval: ApprovalPolicy::None,
            plan: false,
            approve_plan: false,
            reflect: false,
            prior: PriorConversation::default(),
        }
    }
}

/// A model of `llm_config.fallbacks`, with its provider's key (sent in
/// `user_api_keys.providerKeys`, never as another provider's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FallbackModel {
    pub provider: String,
    pub model: String,
    pub key: Option<String>,
}

/// `llm_config.fallbacks` and `user_api_keys` of a step: the first model's key as `llmKey`,
/// each fallback's under its provider.
pub(super) fn add_models(body: &mut Value, s: &LoopSettings) {
    let mut keys = serde_json::Map::new();
    if let Some(key) = &s.key {
        keys.insert("llmKey".into(), json!(key));
    }
    if !s.fallbacks.is_empty() {
        let models: Vec<Value> = s
            .fallbacks
            .iter()
            .map(|f| json!({"provider": f.provider, "modelName": f.model}))
            .collect();
        body["llm_config"]["fallbacks"] = Value::Array(models);
        let slots: serde_json::Map<String, Value> = s
            .fallbacks
            .iter()
            .filter_map(|f| Some((f.provider.clone(), json!(f.key.as_ref()?))))
            .collect();
        if !slots.is_empty() {
            keys.insert("providerKeys".into(), Value::Object(slots));
        }
    }
    if !keys.is_empty() {
        body["user_api_keys"] = Value::Object(keys);
    }
}

/// The `conversation_summary` a step, plan or evaluation answered: sent back with the next
/// request, and kept by a session for its next run.
pub(super) fn keep_summary(report: &mut RunReport, reply: &Value) {
    if let Some(summary) = reply.get("conversation_summary").filter(|s| s.is_object()) {
        report.conversation_summary = Some(summary.clone());
    }
}

/// A step's `llm_config`, without the fallbacks (see `add_models`).
pub(super) fn llm_config(s: &LoopSettings) -> Value {
    let mut config = json!({"modelName": s.model, "tokenLimit": s.token_limit,
                            "reservedOutputTokens": s.reserved_output_tokens});
    if let Some(provider) = &s.provider {
        config["provider"] = json!(provider);
    }
    if let Some(temperature) = s.temperature {
        config["temperature"] = json!(temperature);
    }
    if let Some(mode) = &s.tool_mode {
        config["tool_mode"] = json!(mode);
    }
    config
}

pub struct Driver {
    pub(super) http: reqwest::Client,
    pub(super) settings: LoopSettings,
    /// Behind a lock only so a source can list its tools again between steps.
    pub(super) registry: tokio::sync::RwLock<ToolRegistry>,
    sources: Vec<Box<dyn ToolSource>>,
    /// Who decides the calls `settings.approval` asks about; without one, they are denied.
    pub(super) approver: Option<Box<dyn Approver>>,
}

/// The loop's state between steps.
pub(super) struct Progress {
    pub(super) report: RunReport,
    pub(super) history: Value,
    /// The question, as asked.
    pub(super) task: String,
    /// What the next step sends as `user_query` (empty once the history holds the question).
    pub(super) query: String,
    /// The plan the steps follow (`--plan`).
    pub(super) plan: Option<Value>,
    /// Plans asked for and answers evaluated so far: each took a scripted response too.
    pub(super) task_calls: usize,
    /// Plan adjustments asked for, made or not.
    pub(super) plan_adjustment_tries: usize,
    pub(super) iterations_left: u32,
    /// The last call and how many times in a row it was made.
    pub(super) last_call: Option<(String, String, usize)>,
    pub(super) executor: Executor,
}

impl Progress {
    fn new(question: &str, settings: &LoopSettings) -> Self {
        Self {
            report: RunReport {
                answer: String::new(),
                success: false,
                termination_reason: Termination::Failure,
                iterations: 0,
                tool_usage: BTreeMap::new(),
                steps: Vec::new(),
                error_history: Vec::new(),
                token_usage: TokenTotals::default(),
                execution_time: 0.0,
                confidence: None,
                answer_json: None,
                plan: None,
                plan_adjustments: Vec::new(),
                evaluations: Vec::new(),
                conversation_summary: settings.prior.summary.clone(),
            },
            history: Value::Array(settings.prior.history.clone()),
            task: question.to_string(),
            query: question.to_string(),
            plan: None,
            task_calls: 0,
            plan_adjustment_tries: 0,
            iterations_left: settings.max_iterations.max(1),
            last_call: None,
            executor: Executor::new(settings.tool_limits.clone(), settings.retry.clone()),
        }
    }
}

pub(super) enum Next {
    Continue,
    End(Termination, String),
}

impl Driver {
    pub fn new(settings: LoopSettings, registry: ToolRegistry) -> Self {
        Self {
            http: service_client(),
            settings,
            registry: tokio::sync::RwLock::new(registry),
            sources: Vec::new(),
            approver: None,
        }
    }

    /// The conversation the next runs continue (a session's earlier turns and summary): a
    /// driver that serves one run after another (`reactstep ui`) sets each run's own.
    pub fn set_prior(&mut self, prior: PriorConversation) {
        self.settings.prior = prior;
    }

    pub fn with_approver(mut self, approver: impl Approver + 'static) -> Self {
        self.approver = Some(Box::new(approver));
        self
    }

    /// Lists `source`'s tools again before each step where they have gone stale.
    pub fn with_source(mut self, source: impl ToolSource + 'static) -> Self {
        self.sources.push(Box::new(source));
        self
    }

    /// The tools as the next step declares them.
    pub async fn declarations(&self) -> Value {
        self.registry.read().await.declarations()
    }

    async fn refresh_tools(&self, watcher: &mut dyn Watcher) {
        if self.sources.is_empty() {
            return;
        }
        let mut registry = self.registry.write().await;
        for source in &self.sources {
            if let Some(note) = source.refresh(&mut registry).await {
                watcher.tools_changed(&note);
            }
        }
    }

    /// Runs the loop on `question` to its end.
    pub async fn run(&self, question: &str, watcher: &mut dyn Watcher) -> RunReport {
        self.run_until(question, watcher, std::future::pending())
            .await
    }

    /// Runs the loop on `question` until it ends, or until `cancel` completes (Ctrl-C): then it
    /// ends with `cancelled` and what it did so far.
    pub async fn run_until(
        &self,
        question: &str,
        watcher: &mut dyn Watcher,
        cancel: impl std::future::Future<Output = ()>,
    ) -> RunReport {
        let started = Instant::now();
        let session_id = uuid::Uuid::new_v4().to_string();
        let mut progress = Progress::new(question, &self.settings);
        let mut cancel = std::pin::pin!(cancel);
        let planned = tokio::select! {
            planned = self.plan_first(&session_id, &mut progress, &mut *watcher) => planned,
            () = self.out_of_time(started) => Some((Termination::Timeout, "the loop ran out of time".into())),
            () = &mut cancel => Some((Termination::Cancelled, "the loop was cancelled".into())),
        };
        let (termination, answer) = if let Some(end) = planned {
            end
        } else {
            loop {
                let iteration = progress.report.iterations + 1;
                // The deadline and Ctrl-C reach the tools' runs too, not only the service's step.
                let whole_step = async {
                    let reply = self
                        .tried(&session_id, &mut progress, iteration, &mut *watcher)
                        .await;
                    progress.report.iterations = iteration;
                    self.take(reply, iteration, &mut progress, &mut *watcher)
                        .await
                };
                let next = tokio::select! {
                    next = whole_step => next,
                    () = self.out_of_time(started) => Next::End(Termination::Timeout, "the loop ran out of time".into()),
                    () = &mut cancel => Next::End(Termination::Cancelled, "the loop was cancelled".into()),
                };
                if let Next::End(termination, answer) = next {
                    break (termination, answer);
                }
            }
        };
        let mut report = progress.report;
        report.success = termination == Termination::Success;
        report.termination_reason = termination;
        report.answer = answer;
        report.execution_time = started.elapsed().as_secs_f64();
        report
    }

    /// Completes when the loop's `--timeout`, counted from `started`, has passed; never
    /// without one. The plan and every step are raced against it.
    async fn out_of_time(&self, started: Instant) {
        match self.settings.timeout {
            Some(t) => tokio::time::sleep(t.saturating_sub(started.elapsed())).await,
            None => std::future::pending().await,
        }
    }

    /// The step, sent again (up to `STEP_RETRIES` times) while the service answers with an
    /// error it says a retry can help; each failure in the report, marked recovered when a
    /// later try passed.
    async fn tried(
        &self,
        session_id: &str,
        progress: &mut Progress,
        iteration: u32,
        watcher: &mut dyn Watcher,
    ) -> Result<Value, String> {
        let mut failed_before = 0;
        loop {
            let reply = self.step(session_id, progress, iteration, watcher).await;
            let wait = step_retry::wait_before_retry(&reply);
            match wait.filter(|_| failed_before < step_retry::STEP_RETRIES) {
                Some(wait) => {
                    let why = step_retry::described(&reply);
                    watcher.retrying(iteration, &why, wait);
                    record_tool_error(&mut progress.report, "service", &why, failed_before, false);
                    failed_before += 1;
                    tokio::time::sleep(wait).await;
                }
                None => {
                    if failed_before > 0 && step_retry::passed(&reply) {
                        let retried = progress.report.error_history.iter_mut().rev();
                        retried
                            .take(failed_before as usize)
                            .for_each(|e| e.recovered = true);
                    }
                    return reply;
                }
            }
        }
    }

    /// Sends one step; the service's answer, or why there was none.
    async fn step(
        &self,
        session_id: &str,
        progress: &Progress,
        iteration: u32,
        watcher: &mut dyn Watcher,
    ) -> Result<Value, String> {
        self.refresh_tools(watcher).await;
        watcher.waiting(iteration);
        let s = &self.settings;
        let mut body = json!({
            "session_id": session_id,
            "user_query": progress.query,
            "conversation_history": progress.history,
            "max_iterations_left": progress.iterations_left,
            "llm_config": llm_config(s),
            "tools": self.declarations().await,
        });
        add_models(&mut body, s);
        // A `submit_answer` on the last step is proposed, not summarised: its answer is kept.
        body["react"] = json!({ "answer_tool": super::builtin::ANSWER_TOOL });
        if let Some(schema) = &s.final_answer_schema {
            body["react"]["final_answer_schema"] = schema.clone();
        }
        if let Some(plan) = &progress.plan {
            body["explicit_context"] = json!([{"path": PLAN_PATH, "content": plan.to_string()}]);
        }
        s.prior
            .add_to(&mut body, progress.report.conversation_summary.as_ref());
        if let Some(mocks) = &s.mock_responses {
            let Some(mock) = mocks.get(iteration as usize - 1 + progress.task_calls) else {
                return Err(format!(
                    "the scripted responses ran out after {} steps",
                    mocks.len()
                ));
            };
            body["mock_response"] = json!(mock);
        }
        let path = if s.stream {
            "/api/agent/react_step/stream"
        } else {
            "/api/agent/react_step"
        };
        let bytes = observation::fit(&mut body, s.max_request_bytes);
        let sent = self
            .http
            .post(format!("{}{path}", s.server))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(bytes)
            .send();
        let bounds = service_reply::Bounds {
            idle: s.stream.then_some(s.stream_idle),
            whole: s.step_ceiling,
            bytes: service_reply::most_bytes(s.max_request_bytes),
        };
        service_reply::read(sent, &bounds, iteration, watcher).await
    }

    /// Takes one answer of the service into the loop.
    async fn take(
        &self,
        reply: Result<Value, String>,
        iteration: u32,
        progress: &mut Progress,
        watcher: &mut dyn Watcher,
    ) -> Next {
        let reply = match reply {
            Ok(reply) => reply,
            Err(why) => {
                record_error(&mut progress.report, "service", &why);
                return Next::End(Termination::Failure, why);
            }
        };
        add_usage(&mut progress.report.token_usage, &reply["usage"]);
        keep_summary(&mut progress.report, &reply);
        if let Some(report) = reply.get("context_report").filter(|r| r.is_object()) {
            watcher.context(iteration, report);
        }
        let thought = reply["thought"].as_str().unwrap_or_default().to_string();
        if !thought.is_empty() {
            watcher.thought(iteration, &thought);
        }
        // After the thought, whose streamed line it ends.
        for warning in reply["warnings"].as_array().into_iter().flatten() {
            if let Some(text) = warning.as_str() {
                watcher.warning(iteration, text);
            }
        }
        match reply["status"].as_str() {
            Some("direct_response_provided") => {
                progress.report.answer_json = reply.get("direct_response_json").cloned();
                let next = self.answered(&reply);
                self.reflected(next, &reply, progress, watcher).await
            }
            Some("action_proposed") => {
                self.act(&reply, iteration, &thought, progress, watcher)
                    .await
            }
            _ => {
                let kind = reply["error"]["type"].as_str().unwrap_or("unknown");
                let why = step_retry::said(&reply);
                record_error(&mut progress.report, "service", &why);
                let termination = match kind {
                    "context_overflow" => Termination::TokenBudget,
                    // The service's loop guard refused a call that went on repeating itself.
                    "loop_detected" => Termination::Stalled,
                    _ => Termination::Failure,
                };
                Next::End(termination, why)
            }
        }
    }

    fn answered(&self, reply: &Value) -> Next {
        let answer = reply["direct_response"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let lower = answer.to_lowercase();
        if self
            .settings
            .failure_phrases
            .iter()
            .any(|p| lower.contains(&p.to_lowercase()))
        {
            return Next::End(Termination::Failure, answer);
        }
        // An answer the last step asked for may be a guess made to obey: not a success.
        let forced = reply["forced_final"] == true;
        let termination = match reply["termination_reason"].as_str() {
            Some("max_iterations") => Termination::MaxIterations,
            _ if forced => Termination::MaxIterations,
            _ => Termination::Success,
        };
        Next::End(termination, answer)
    }
}
