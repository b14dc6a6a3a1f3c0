//! Which task an endpoint asks of the step: `react_step` the ReAct step, `plan` a plan and
//! `evaluate` an evaluation, each read from the step's own fields plus a few of its own.

use serde::Deserialize;
use serde_json::Value;

use super::body;
use super::response::FieldError;
use crate::step::{EvaluateAsk, PlanAsk, Task, MAX_PLAN_CHARS, MAX_PLAN_VALUES};

/// The longest text a plan or evaluation field may hold, as for `user_query`.
const MAX_TEXT_CHARS: usize = 1_000_000;

/// The endpoint a request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Step,
    Plan,
    Evaluate,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct PlanFields {
    #[serde(default)]
    previous_plan: Option<Value>,
    #[serde(default)]
    latest_observation: Option<String>,
}

#[derive(Deserialize)]
#[serde(remote = "Self")]
struct EvaluateFields {
    candidate_answer: String,
    #[serde(default)]
    plan: Option<Value>,
}

impl Endpoint {
    /// The top-level fields this endpoint reads beyond a step's.
    pub fn own_fields(self) -> &'static [&'static str] {
        match self {
            Endpoint::Step => &[],
            Endpoint::Plan => &["previous_plan", "latest_observation"],
            Endpoint::Evaluate => &["candidate_answer", "plan"],
        }
    }

    /// The task, from the endpoint's own fields of `bytes`, or what is wrong with them.
    pub fn task(self, bytes: &[u8]) -> Result<Task, (String, Vec<FieldError>)> {
        let mut problems = Vec::new();
        let task = match self {
            Endpoint::Step => Task::React,
            Endpoint::Plan => {
                let (fields, _) = body::decode::<PlanFields>(bytes)?;
                let previous = plan_value("previous_plan", fields.previous_plan, &mut problems);
                let latest_observation = fields.latest_observation;
                text(
                    "latest_observation",
                    latest_observation.as_deref(),
                    false,
                    &mut problems,
                );
                Task::Plan(PlanAsk {
                    previous,
                    latest_observation,
                })
            }
            Endpoint::Evaluate => {
                let (fields, _) = body::decode::<EvaluateFields>(bytes)?;
                text(
                    "candidate_answer",
                    Some(&fields.candidate_answer),
                    true,
                    &mut problems,
                );
                Task::Evaluate(EvaluateAsk {
                    candidate_answer: fields.candidate_answer,
                    plan: plan_value("plan", fields.plan, &mut problems),
                })
            }
        };
        match problems.is_empty() {
            true => Ok(task),
            false => Err((super::convert::invalid_fields(&problems), problems)),
        }
    }
}

/// A text field within its bound (and not blank where `needed`).
fn text(field: &str, value: Option<&str>, needed: bool, problems: &mut Vec<FieldError>) {
    let Some(value) = value else { return };
    let message = if needed && value.trim().is_empty() {
        "must not be empty".to_string()
    } else if value.chars().count() > MAX_TEXT_CHARS {
        format!("must be at most {MAX_TEXT_CHARS} characters")
    } else {
        return;
    };
    problems.push(FieldError {
        field: field.into(),
        message,
    });
}

/// A plan sent back: an object (null counts as none), of a bounded size.
fn plan_value(field: &str, value: Option<Value>, problems: &mut Vec<FieldError>) -> Option<Value> {
    let message = match value {
        None | Some(Value::Null) => return None,
        Some(Value::Object(plan)) => {
            let mut values = 0;
            crate::step::walk_json(plan.values(), |_| {
                values += 1;
                values <= MAX_PLAN_VALUES
            });
            let plan = Value::Object(plan);
            if values > MAX_PLAN_VALUES {
                format!("holds more than {MAX_PLAN_VALUES} JSON values")
            } else if plan.to_string().chars().count() > MAX_PLAN_CHARS {
                format!("must be at most {MAX_PLAN_CHARS} characters as JSON")
            } else {
                return Some(plan);
            }
        }
        Some(_) => "must be an ExecutionPlan (a JSON object) or null".to_string(),
    };
    problems.push(FieldError {
        field: field.into(),
        message,
    });
    None
}

crate::json::objects_only!(PlanFields, EvaluateFields);
