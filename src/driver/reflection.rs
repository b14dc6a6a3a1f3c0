//! Planning before the loop and reflection before an answer is accepted (`--plan`,
//! `--approve-plan`, `--reflect`): each a call of the service's plan or evaluate step with the
//! loop's own model and key. The plan is shown, sent with every step as a file of the context,
//! and adjusted after a call fails; an answer the evaluation says needs another try goes back
//! into the loop with what it is missing.

use serde_json::{json, Value};

use super::observation;
use super::report::{add_usage, record_error, Termination};
use super::run::{add_models, keep_summary, llm_config, Driver, Next, Progress};
use super::service_reply;
use super::watcher::{Quiet, Watcher};

/// Under this completeness an answer is incomplete (the service's rule).
const RETRY_BELOW: u64 = 7;

/// Tries at adjusting the plan in one run. Each is a plan request (a model call, and the
/// service's retries of it), so one that failed counts too: a service that cannot plan (its
/// provider down) costs a run three requests, not one per failed call.
const MAX_ADJUSTMENTS: usize = 3;

impl Driver {
    /// With `--plan`: the plan, shown and (with `--approve-plan`) approved. The loop's end when
    /// there is no plan to run.
    pub(super) async fn plan_first(
        &self,
        session_id: &str,
        progress: &mut Progress,
        watcher: &mut dyn Watcher,
    ) -> Option<(Termination, String)> {
        if !self.settings.plan && !self.settings.approve_plan {
            return None;
        }
        // A session's earlier turns, if any: the plan is made knowing the conversation.
        let body = self
            .task_body(session_id, progress, progress.history.clone())
            .await;
        let plan = match self.ask_for("plan", body, progress).await {
            Ok(plan) => plan,
            Err(why) => {
                record_error(&mut progress.report, "service", &why);
                return Some((Termination::Failure, format!("no plan was made: {why}")));
            }
        };
        watcher.plan(&plan);
        progress.report.plan = Some(plan.clone());
        progress.plan = Some(plan);
        if !self.settings.approve_plan {
            return None;
        }
        let plan = progress.plan.as_ref()?;
        let approved = match &self.approver {
            Some(approver) => approver.approve_plan(plan).await,
            None => false,
        };
        (!approved).then(|| {
            (
                Termination::PlanRejected,
                "the plan was not approved, so nothing ran".into(),
            )
        })
    }

    /// After a failed call: the plan adjusted to what it showed (three tries a run at most);
    /// when the service cannot make one, the plan stays as it was.
    pub(super) async fn adjust_plan(
        &self,
        observation: &str,
        progress: &mut Progress,
        watcher: &mut dyn Watcher,
    ) {
        let Some(previous) = progress.plan.clone() else {
            return;
        };
        if progress.plan_adjustment_tries >= MAX_ADJUSTMENTS {
            return;
        }
        progress.plan_adjustment_tries += 1;
        let session_id = uuid::Uuid::new_v4().to_string();
        let mut body = self
            .task_body(&session_id, progress, progress.history.clone())
            .await;
        body["previous_plan"] = previous;
        body["latest_observation"] =
            json!(observation::cut(observation, observation::MAX_SENT_BYTES));
        match self.ask_for("plan", body, progress).await {
            Ok(plan) => {
                watcher.plan(&plan);
                progress.report.plan_adjustments.push(plan.clone());
                progress.plan = Some(plan);
            }
            Err(why) => record_error(&mut progress.report, "service", &why),
        }
    }

    /// With `--reflect`, a successful answer is evaluated first: one that needs another try
    /// goes back into the loop with what it is missing; the rest end the loop as they would.
    pub(super) async fn reflected(
        &self,
        next: Next,
        reply: &Value,
        progress: &mut Progress,
        watcher: &mut dyn Watcher,
    ) -> Next {
        let Next::End(Termination::Success, answer) = &next else {
            return next;
        };
        if !self.settings.reflect {
            return next;
        }
        let history = reply["updated_conversation_history"].clone();
        let session_id = uuid::Uuid::new_v4().to_string();
        let mut body = self.task_body(&session_id, progress, history.clone()).await;
        body["candidate_answer"] = json!(answer);
        if let Some(plan) = &progress.plan {
            body["plan"] = plan.clone();
        }
        let evaluation = match self.ask_for("evaluation", body, progress).await {
            Ok(evaluation) => evaluation,
            Err(why) => {
                // The answer stands: an evaluation that failed is no reason to lose it.
                record_error(&mut progress.report, "service", &why);
                return next;
            }
        };
        watcher.evaluation(&evaluation, answer);
        progress.report.evaluations.push(evaluation.clone());
        let left = reply["iterations_remaining"].as_u64().unwrap_or(0) as u32;
        if evaluation["needs_retry"] != true {
            return match evaluation["completeness_score"].as_u64() {
                // Incomplete, and not sent round only because the plan's steps are spent.
                Some(score) if score < RETRY_BELOW => {
                    let why = format!("the answer was evaluated as incomplete ({score}/10), and the loop is past its plan's estimate: it ends here");
                    record_error(&mut progress.report, "evaluation", &why);
                    Next::End(Termination::MaxIterations, answer.clone())
                }
                _ => next,
            };
        }
        if left == 0 {
            return Next::End(Termination::MaxIterations, answer.clone());
        }
        progress.history = history;
        progress.query = feedback(&evaluation);
        progress.iterations_left = left;
        Next::Continue
    }

    /// A plan or evaluate request: the question, the tools and the loop's model, on one step.
    async fn task_body(&self, session_id: &str, progress: &Progress, history: Value) -> Value {
        let s = &self.settings;
        let mut body = json!({
            "session_id": session_id,
            "user_query": progress.task,
            "conversation_history": history,
            "max_iterations_left": 1,
            "llm_config": llm_config(s),
            "tools": self.declarations().await,
        });
        add_models(&mut body, s);
        // A session's summary and strategy go with a plan or evaluation as with a step: its
        // history is the same, and so are the turns that do not fit.
        s.prior
            .add_to(&mut body, progress.report.conversation_summary.as_ref());
        body
    }

    /// The `plan` or `evaluation` the service answered `body` with, or why there is none.
    async fn ask_for(
        &self,
        field: &str,
        mut body: Value,
        progress: &mut Progress,
    ) -> Result<Value, String> {
        let path = match field {
            "plan" => "/api/agent/plan",
            _ => "/api/agent/evaluate",
        };
        if let Some(mocks) = &self.settings.mock_responses {
            let at = progress.report.iterations as usize + progress.task_calls;
            let mock = mocks.get(at).ok_or_else(|| {
                format!(
                    "the scripted responses ran out before the {field} ({} given)",
                    mocks.len()
                )
            })?;
            body["mock_response"] = json!(mock);
        }
        progress.task_calls += 1;
        let bytes = observation::fit(&mut body, self.settings.max_request_bytes);
        let sent = self
            .http
            .post(format!("{}{path}", self.settings.server))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(bytes)
            .send();
        // Bounded as a step's answer is: a plan the size of memory is no plan.
        let bounds = service_reply::Bounds {
            idle: None,
            whole: self.settings.step_ceiling,
            bytes: service_reply::most_bytes(self.settings.max_request_bytes),
        };
        let reply = service_reply::read(sent, &bounds, 0, &mut Quiet).await?;
        add_usage(&mut progress.report.token_usage, &reply["usage"]);
        keep_summary(&mut progress.report, &reply);
        match reply.get(field) {
            Some(value) if value.is_object() => Ok(value.clone()),
            _ => Err(super::step_retry::said(&reply)),
        }
    }
}

/// What the model is told when its answer needs another try.
fn feedback(evaluation: &Value) -> String {
    let list = |key: &str| {
        let items: Vec<&str> = evaluation[key]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        match items.is_empty() {
            true => "nothing named".to_string(),
            false => items.join("; "),
        }
    };
    format!(
        "Your answer was evaluated as incomplete (completeness {}/10, quality {}/10). Missing: {}. Suggestions: {}. Keep working on the task, then give a better final answer.",
        evaluation["completeness_score"],
        evaluation["quality_score"],
        list("missing_info"),
        list("suggestions"),
    )
}

/// The plan as a checklist for a person: one line per step, with its tool.
pub fn checklist(plan: &Value) -> String {
    let steps = plan["steps"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let lines: Vec<String> = steps
        .iter()
        .map(|step| {
            let tool = match step["tool_name"].as_str() {
                Some(tool) => format!(" [{tool}]"),
                None => String::new(),
            };
            // One line a step: a description cannot draw steps of its own.
            let description = step["description"].as_str().unwrap_or_default();
            let description = description.replace(['\n', '\r'], " ");
            format!("  {}. {description}{tool}", step["step_number"])
        })
        .collect();
    format!(
        "Plan ({}, about {} steps):\n{}",
        plan["complexity"].as_str().unwrap_or("?"),
        plan["estimated_iterations"],
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feedback_names_what_is_missing() {
        let evaluation = json!({"completeness_score": 4, "quality_score": 6,
            "missing_info": ["the line number"], "suggestions": [], "needs_retry": true});
        let text = feedback(&evaluation);
        assert!(text.contains("completeness 4/10") && text.contains("the line number"));
        assert!(text.contains("Suggestions: nothing named"));
    }

    #[test]
    fn a_plan_reads_as_a_checklist() {
        let plan = json!({"complexity": "medium", "estimated_iterations": 2, "steps": [
            {"step_number": 1, "description": "Read it", "tool_name": "read_file"},
            {"step_number": 2, "description": "Explain", "tool_name": null}]});
        let text = checklist(&plan);
        assert!(text.contains("1. Read it [read_file]"));
        assert!(text.ends_with("2. Explain"));
        let forged = json!({"steps": [{"step_number": 1, "description": "Read\n  2. rm -rf /"}]});
        assert_eq!(checklist(&forged).lines().count(), 2);
    }
}
